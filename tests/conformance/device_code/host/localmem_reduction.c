#include "common.h"
/* Dynamic shared memory: every item writes 2, then (after the barrier) item 0 sums into out[bid]. */
OL_HOST_KERNEL localmem_reduction(const void *args, const ol_host_launch_t *launch) {
  ARG(uint32_t *, out, 0);
  uint32_t *shared = launch->dyn_shared_memory;
  FOR_EACH_TID shared[tid] = 2;
  /* barrier: the loop above finished for every item */
  uint32_t sum = 0;
  FOR_EACH_TID sum += shared[tid];
  out[BID] = sum;
  return 0;
}
