/* Host kernels for the tests of offloadrt's Python API (tests/test_core_*.py). */
#include <offloadrt/host_kernel.h>
#include <string.h>

/* y[i] = a * x[i] + y[i] for i < n, one work-item per element. */
struct saxpy_args { float a; const float *x; float *y; uint32_t n; };
OL_HOST_KERNEL saxpy(const void *args, const ol_host_launch_t *launch) {
  struct saxpy_args p;
  memcpy(&p, args, sizeof p);
  uint32_t size = launch->group_size.x, base = launch->group_id.x * size;
  for (uint32_t item = 0; item < size; ++item) {
    uint32_t i = base + item;
    if (i < p.n) p.y[i] = p.a * p.x[i] + p.y[i];
  }
  return 0;
}
OL_HOST_KERNEL_ARGS(saxpy, struct saxpy_args);

/* The benchmark's 4 arguments (2 buffers, a float, an int): y[i] = x[i] * a + n for the launch's items. */
struct affine_args { const float *x; float *y; float a; int32_t n; };
OL_HOST_KERNEL affine(const void *args, const ol_host_launch_t *launch) {
  struct affine_args p;
  memcpy(&p, args, sizeof p);
  uint32_t size = launch->group_size.x, base = launch->group_id.x * size;
  for (uint32_t i = base; i < base + size; ++i)
    p.y[i] = p.x[i] * p.a + (float)p.n;
  return 0;
}
OL_HOST_KERNEL_ARGS(affine, struct affine_args);

/* Every C alignment case: each field is written back, in order, to out (as doubles). */
struct mixed_args { int8_t c; double d; int16_t s; double *out; float f; uint64_t u; uint8_t b; };
OL_HOST_KERNEL mixed(const void *args, const ol_host_launch_t *launch) {
  struct mixed_args p;
  (void)launch;
  memcpy(&p, args, sizeof p);
  p.out[0] = p.c;
  p.out[1] = p.d;
  p.out[2] = p.s;
  p.out[3] = p.f;
  p.out[4] = (double)p.u;
  p.out[5] = p.b;
  return 0;
}
OL_HOST_KERNEL_ARGS(mixed, struct mixed_args);

/* out[group] = group id (x + y * nx + z * nx * ny) + dyn_shared_memory size marker; records the launch shape. */
struct shape_args { uint32_t *out; };
OL_HOST_KERNEL shape(const void *args, const ol_host_launch_t *launch) {
  struct shape_args p;
  memcpy(&p, args, sizeof p);
  const ol_host_dim3_t *g = &launch->group_id, *n = &launch->num_groups;
  uint32_t linear = g->x + n->x * (g->y + n->y * g->z);
  if (linear == 0) {
    p.out[0] = n->x; p.out[1] = n->y; p.out[2] = n->z;
    p.out[3] = launch->group_size.x; p.out[4] = launch->group_size.y; p.out[5] = launch->group_size.z;
    if (launch->dyn_shared_memory) memset(launch->dyn_shared_memory, 0, 16);
  }
  __atomic_fetch_add(&p.out[6], 1, __ATOMIC_RELAXED);
  return 0;
}
OL_HOST_KERNEL_ARGS(shape, struct shape_args);

/* Faults: returns 7 in every work-group. */
OL_HOST_KERNEL fault(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 7;
}
OL_HOST_KERNEL_NO_ARGS(fault);

/* A global variable, and a kernel that adds its argument to it. */
OL_HOST_EXPORT int32_t counter = 5;
struct bump_args { int32_t by; };
OL_HOST_KERNEL bump(const void *args, const ol_host_launch_t *launch) {
  struct bump_args p;
  (void)launch;
  memcpy(&p, args, sizeof p);
  __atomic_fetch_add(&counter, p.by, __ATOMIC_RELAXED);
  return 0;
}
OL_HOST_KERNEL_ARGS(bump, struct bump_args);
