// Work-item ids, written to the output by the first dimension's id (mirrors upstream foo.cpp and bar.cpp).
#include <gpuintrin.h>
#include <stdint.h>

extern "C" __gpu_kernel void ids(uint32_t *out) {
  out[__gpu_thread_id(0)] = __gpu_thread_id(0);
}

extern "C" __gpu_kernel void ids_plus_one(int *out) {
  out[__gpu_thread_id(0)] = (int)__gpu_thread_id(0) + 1;
}
