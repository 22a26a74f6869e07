/* saxpy (y = a * x + y) once, for every device: offloadrt compiles this file for the host (a CPU)
 * and with clang for NVIDIA (PTX) and AMD (a code object) GPUs. See docs/portable-kernels.md. */
#include <gpuintrin.h>
#include <stdint.h>

__gpu_kernel void saxpy(float a, const float *x, float *y, uint32_t n) {
  uint32_t i = __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  if (i < n)
    y[i] = a * x[i] + y[i];
}
