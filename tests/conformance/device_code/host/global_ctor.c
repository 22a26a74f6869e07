#include "common.h"
/* Constructors in priority order make global 100 ((40 * 2) + 20); the kernel adds tid. */
static uint32_t global;
__attribute__((constructor(200))) static void ctor_first(void) { global = 40; }
__attribute__((constructor(201))) static void ctor_second(void) { global *= 2; }
__attribute__((constructor(202))) static void ctor_third(void) { global += 20; }
OL_HOST_KERNEL global_ctor(const void *args, const ol_host_launch_t *launch) {
  ARG(uint32_t *, out, 0);
  FOR_EACH_TID out[tid] = global + tid;
  return 0;
}
