// Dynamic work-group memory (the launch's shared memory size) through an extern __gpu_local
// array, without and with a barrier (mirrors upstream localmem.cpp and localmem_reduction.cpp).
#include <gpuintrin.h>
#include <stdint.h>

extern __gpu_local uint32_t scratch[];

extern "C" __gpu_kernel void doubled_through_local(uint32_t *out) {
  scratch[__gpu_thread_id(0)] = __gpu_thread_id(0);
  scratch[__gpu_thread_id(0)] *= 2;
  out[__gpu_thread_id(0) + __gpu_num_threads(0) * __gpu_block_id(0)] = scratch[__gpu_thread_id(0)];
}

extern "C" __gpu_kernel void group_total(uint32_t *out) {
  scratch[__gpu_thread_id(0)] = 2;
  __gpu_sync_threads();
  if (__gpu_thread_id(0) == 0) {
    out[__gpu_block_id(0)] = 0;
    for (uint32_t i = 0; i < __gpu_num_threads(0); i++)
      out[__gpu_block_id(0)] += scratch[i];
  }
}
