#include "common.h"
/* A destructor that runs when the program is unloaded; the kernel does nothing. */
static volatile uint32_t global;
__attribute__((destructor)) static void dtor(void) { global = 0; }
OL_HOST_KERNEL global_dtor(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  global = 1;
  return 0;
}
