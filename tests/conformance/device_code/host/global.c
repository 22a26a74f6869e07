#include "common.h"
/* A 64-entry global variable with a writer and a reader kernel. */
uint32_t global[64];
OL_HOST_KERNEL write(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  FOR_EACH_TID if (tid < 64) global[tid] = tid * 2;
  return 0;
}
OL_HOST_KERNEL read(const void *args, const ol_host_launch_t *launch) {
  ARG(uint32_t *, out, 0);
  FOR_EACH_TID if (tid < 64) out[tid + NTID * BID] = global[tid];
  return 0;
}
