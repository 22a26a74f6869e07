#include "common.h"
/* Dynamic shared memory: shared[tid] = tid * 2; out[tid + ntid * bid] = shared[tid] */
OL_HOST_KERNEL localmem(const void *args, const ol_host_launch_t *launch) {
  ARG(uint32_t *, out, 0);
  uint32_t *shared = launch->dyn_shared_memory;
  FOR_EACH_TID shared[tid] = tid * 2;
  FOR_EACH_TID out[tid + NTID * BID] = shared[tid];
  return 0;
}
