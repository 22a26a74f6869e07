// The launch's shape seen from inside in all three dimensions (mirrors upstream gridsize.cpp), and
// a counter loop run by the first item only (mirrors upstream single_counter.cpp).
#include <gpuintrin.h>
#include <stdint.h>

extern "C" __gpu_kernel void shape(uint32_t *groups, uint32_t *items) {
  if (__gpu_block_id(0) == 0 && __gpu_block_id(1) == 0 && __gpu_block_id(2) == 0 &&
      __gpu_thread_id(0) == 0 && __gpu_thread_id(1) == 0 && __gpu_thread_id(2) == 0) {
    for (int d = 0; d < 3; ++d) {
      groups[d] = __gpu_num_blocks(d);
      items[d] = __gpu_num_threads(d);
    }
  }
}

extern "C" __gpu_kernel void counted(int32_t loops, int32_t addend, uint32_t *start, uint32_t *out) {
  if (__gpu_thread_id(0) != 0)
    return;
  volatile int32_t counter = loops;
  uint32_t sum = *start;
  while (counter--)
    sum += addend;
  *out = sum;
}
