/* Kernels that declare their argument blob's size (OL_HOST_KERNEL_ARGS). */
#include <offloadrt/host_kernel.h>
#include <string.h>

struct scale_args { float *data; float factor; };

OL_HOST_KERNEL scale(const void *args, const ol_host_launch_t *launch) {
  struct scale_args a;
  memcpy(&a, args, sizeof a);
  uint32_t size = launch->group_size.x, base = launch->group_id.x * size;
  for (uint32_t i = 0; i < size; ++i)
    a.data[base + i] *= a.factor;
  return 0;
}
OL_HOST_KERNEL_ARGS(scale, struct scale_args);

OL_HOST_KERNEL nothing(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 0;
}
OL_HOST_KERNEL_NO_ARGS(nothing);

/* No declaration: any blob is taken as it is. */
OL_HOST_KERNEL undeclared(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 0;
}
