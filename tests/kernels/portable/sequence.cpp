// One item per launch, each reading what the launches before it wrote: the launches of a queue
// run in order (mirrors upstream sequence.cpp).
#include <gpuintrin.h>
#include <stdint.h>

extern "C" __gpu_kernel void fibonacci_step(uint32_t index, uint32_t *values) {
  if (index == 0)
    values[index] = 0;
  else if (index == 1)
    values[index] = 1;
  else
    values[index] = values[index - 1] + values[index - 2];
}
