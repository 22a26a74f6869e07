#include "common.h"
/* A second program whose kernel is also named foo: out[tid] = tid + 1 */
OL_HOST_KERNEL foo(const void *args, const ol_host_launch_t *launch) {
  ARG(uint32_t *, out, 0);
  FOR_EACH_TID out[tid] = tid + 1;
  return 0;
}
