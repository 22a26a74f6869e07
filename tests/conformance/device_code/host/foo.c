#include "common.h"
/* foo(uint32_t *out): out[tid] = tid */
OL_HOST_KERNEL foo(const void *args, const ol_host_launch_t *launch) {
  ARG(uint32_t *, out, 0);
  FOR_EACH_TID out[tid] = tid;
  return 0;
}
