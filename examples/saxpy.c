/* saxpy.c: y[i] = a * x[i] + y[i], the kernel of examples/saxpy.py and examples/mpi_saxpy.py.
 *
 * One source for every device (examples/kernels.py builds it): a host kernel (offloadrt's host
 * ABI: one call per work-group, looping over its work-items) when built with the system C
 * compiler, a GPU kernel (clang's <gpuintrin.h>: one call per work-item) when built for NVPTX
 * or AMDGPU. Both take (float a, const float *x, float *y, uint32_t n). */
#if defined(__NVPTX__) || defined(__AMDGPU__)
#include <gpuintrin.h>

__gpu_kernel void saxpy(float a, const float *x, float *y, unsigned n) {
  unsigned i = __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  if (i < n) y[i] = a * x[i] + y[i];
}
#else
#include <offloadrt/host_kernel.h>
#include <string.h>

struct saxpy_args { float a; const float *x; float *y; uint32_t n; };

OL_HOST_KERNEL saxpy(const void *args, const ol_host_launch_t *launch) {
  struct saxpy_args p;
  memcpy(&p, args, sizeof p);
  uint32_t base = launch->group_id.x * launch->group_size.x;
  for (uint32_t item = 0; item < launch->group_size.x; ++item) {
    uint32_t i = base + item;
    if (i < p.n) p.y[i] = p.a * p.x[i] + p.y[i];
  }
  return 0;
}
OL_HOST_KERNEL_ARGS(saxpy, struct saxpy_args);
#endif
