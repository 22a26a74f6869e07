/* One Jacobi step of the 2-D Laplace equation on an ny x nx grid: every interior point becomes the
 * mean of its four neighbours; the border keeps its values. A 2-D launch: x and y ids. */
#include <gpuintrin.h>
#include <stdint.h>

__gpu_kernel void jacobi(const float *in, float *out, uint32_t nx, uint32_t ny) {
  uint32_t x = __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  uint32_t y = __gpu_block_id_y() * __gpu_num_threads_y() + __gpu_thread_id_y();
  if (x >= nx || y >= ny)
    return;
  uint64_t i = (uint64_t)y * nx + x;
  if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1)
    out[i] = in[i];
  else
    out[i] = 0.25f * (in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx]);
}
