/* Test kernels for the host device (built at test time with the system cc). */
#include <offloadrt/host_kernel.h>
#include <string.h>

/* out[i] = i over the whole launch, one work-item per element. */
OL_HOST_KERNEL foo(const void *args, const ol_host_launch_t *launch) {
  uint32_t *out;
  memcpy(&out, args, sizeof out);
  uint32_t size = launch->group_size.x;
  uint32_t base = (launch->group_id.x + launch->num_groups.x *
                   (launch->group_id.y + launch->num_groups.y * launch->group_id.z)) * size;
  for (uint32_t i = 0; i < size; ++i)
    out[base + i] = base + i;
  return 0;
}

/* Does nothing: the launch-cost benchmark's kernel. */
OL_HOST_KERNEL noargs(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  (void)launch;
  return 0;
}

/* struct { char a; int *b; short c; }: b[i] = a + c + i. */
struct multiargs_args { char a; int *b; short c; };
OL_HOST_KERNEL multiargs(const void *args, const ol_host_launch_t *launch) {
  const struct multiargs_args *p = args;
  uint32_t size = launch->group_size.x, base = launch->group_id.x * size;
  for (uint32_t i = 0; i < size; ++i)
    p->b[base + i] = p->a + p->c + (int)(base + i);
  return 0;
}

/* Dynamic shared memory: each group writes 2*i into its local buffer, then copies it out. */
OL_HOST_KERNEL localmem(const void *args, const ol_host_launch_t *launch) {
  uint32_t *out;
  memcpy(&out, args, sizeof out);
  uint32_t *shared = launch->dyn_shared_memory;
  uint32_t size = launch->group_size.x;
  for (uint32_t i = 0; i < size; ++i)
    shared[i] = i * 2;
  for (uint32_t i = 0; i < size; ++i)
    out[launch->group_id.x * size + i] = shared[i];
  return 0;
}

/* Per-group reduction in a static thread-local buffer: out[group] = 2 * group size. */
static _Thread_local uint32_t reduction_buffer[1024];
OL_HOST_KERNEL localmem_static(const void *args, const ol_host_launch_t *launch) {
  uint32_t *out;
  memcpy(&out, args, sizeof out);
  uint32_t size = launch->group_size.x;
  for (uint32_t i = 0; i < size; ++i)
    reduction_buffer[i] = 2;
  uint32_t sum = 0;
  for (uint32_t i = 0; i < size; ++i)
    sum += reduction_buffer[i];
  out[launch->group_id.x] = sum;
  return 0;
}

/* Returns its argument: a non-zero value is a kernel fault. */
OL_HOST_KERNEL fail_with(const void *args, const ol_host_launch_t *launch) {
  int code;
  memcpy(&code, args, sizeof code);
  return launch->group_id.x == launch->num_groups.x - 1 ? code : 0;
}

/* *counter += 1 (one group only): shows whether later work ran. */
OL_HOST_KERNEL increment(const void *args, const ol_host_launch_t *launch) {
  (void)launch;
  uint32_t *counter;
  memcpy(&counter, args, sizeof counter);
  *counter += 1;
  return 0;
}

/* Fibonacci step used for cross-queue ordering: data[idx] = data[idx-1] + data[idx-2]. */
OL_HOST_KERNEL sequence(const void *args, const ol_host_launch_t *launch) {
  (void)launch;
  struct { uint32_t idx; uint32_t *data; } p;
  memcpy(&p, args, sizeof p);
  p.data[p.idx] = p.idx < 2 ? p.idx : p.data[p.idx - 1] + p.data[p.idx - 2];
  return 0;
}

/* Spins for `iterations` and then writes 1 to *flag: long enough to be caught in flight. */
OL_HOST_KERNEL spin(const void *args, const ol_host_launch_t *launch) {
  (void)launch;
  struct { uint64_t iterations; volatile uint32_t *flag; } p;
  memcpy(&p, args, sizeof p);
  volatile uint64_t sink = 0;
  for (uint64_t i = 0; i < p.iterations; ++i)
    sink += i;
  *p.flag = 1;
  return 0;
}

/* Global variables: write() fills `global`, read() copies it out. */
uint32_t global[64];
int32_t scalar_global = 7;
OL_HOST_KERNEL write(const void *args, const ol_host_launch_t *launch) {
  (void)args;
  for (uint32_t i = 0; i < launch->group_size.x && i < 64; ++i)
    global[i] = i * 2;
  return 0;
}
OL_HOST_KERNEL read(const void *args, const ol_host_launch_t *launch) {
  uint32_t *out;
  memcpy(&out, args, sizeof out);
  for (uint32_t i = 0; i < launch->group_size.x && i < 64; ++i)
    out[i] = global[i];
  return 0;
}
