// Static work-group memory with a barrier, and a barrier followed by a long private computation
// (mirrors upstream localmem_static.cpp and localmem_static_wait.cpp; the wait is shorter here).
#include <gpuintrin.h>
#include <stdint.h>

[[clang::loader_uninitialized]] __gpu_local uint32_t slots[64];

static int product(unsigned long acc, int step, int last) {
  return step < last ? product(acc * step, step + 1, last) : (int)acc;
}

extern "C" __gpu_kernel void static_total(uint32_t *out) {
  slots[__gpu_thread_id(0)] = 2;
  __gpu_sync_threads();
  if (__gpu_thread_id(0) == 0) {
    out[__gpu_block_id(0)] = 0;
    for (uint32_t i = 0; i < __gpu_num_threads(0); i++)
      out[__gpu_block_id(0)] += slots[i];
  }
}

extern "C" __gpu_kernel void static_total_after_work(uint32_t *out, uint32_t rounds) {
  slots[__gpu_thread_id(0)] = 2;
  __gpu_sync_threads();
  unsigned long spent = 0;
  for (uint32_t i = 0; i < rounds; i++) {
    spent += product(1, 1, 30);
    if (spent == 0)
      spent = 1;
  }
  if (__gpu_thread_id(0) == 0) {
    out[__gpu_block_id(0)] = (uint32_t)spent;
    for (uint32_t i = 0; i < __gpu_num_threads(0); i++)
      out[__gpu_block_id(0)] += slots[i];
  }
}
