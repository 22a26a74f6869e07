/* A work-group reduction: each group sums its block of x in work-group memory, halving the active
 * items after each barrier, and writes one partial sum. On the host, offloadrt runs the items of a
 * group as fibers that meet at __gpu_sync_threads(). */
#include <gpuintrin.h>
#include <stdint.h>

#define GROUP 256 /* work-items per group: the launch's block size */

__gpu_kernel void block_sums(const float *x, float *partial, uint32_t n) {
  /* loader_uninitialized: GPU work-group memory has no initial value (AMDGPU insists on it) */
  static __gpu_local float tile[GROUP] __attribute__((loader_uninitialized));
  uint32_t t = __gpu_thread_id_x();
  uint32_t i = __gpu_block_id_x() * GROUP + t;
  tile[t] = i < n ? x[i] : 0.0f;
  __gpu_sync_threads();
  for (uint32_t half = GROUP / 2; half > 0; half /= 2) {
    if (t < half)
      tile[t] += tile[t + half];
    __gpu_sync_threads();
  }
  if (t == 0)
    partial[__gpu_block_id_x()] = tile[0];
}
