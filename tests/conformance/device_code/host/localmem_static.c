#include "common.h"
/* As localmem_reduction, with static work-group memory (thread-local: one group per thread). */
static _Thread_local uint32_t shared_mem[64];
OL_HOST_KERNEL localmem_static(const void *args, const ol_host_launch_t *launch) {
  ARG(uint32_t *, out, 0);
  if (NTID > 64)
    return 1;
  FOR_EACH_TID shared_mem[tid] = 2;
  uint32_t sum = 0;
  FOR_EACH_TID sum += shared_mem[tid];
  out[BID] = sum;
  return 0;
}
