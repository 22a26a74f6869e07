/* Kernels that show work-groups really run at the same time (built at test time with cc). */
#include <offloadrt/host_kernel.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t linear_group(const ol_host_launch_t *launch) {
  return launch->group_id.x + launch->num_groups.x *
         (launch->group_id.y + launch->num_groups.y * launch->group_id.z);
}

static uint32_t total_groups(const ol_host_launch_t *launch) {
  return launch->num_groups.x * launch->num_groups.y * launch->num_groups.z;
}

/* A barrier across every work-group of the launch: returns 0 once all arrived, 1 on timeout.
 * It can only be passed when all groups run at the same time, on different threads. */
static int wait_for_all(uint32_t *arrived, uint32_t total, uint64_t timeout_ns) {
  __atomic_add_fetch(arrived, 1, __ATOMIC_SEQ_CST);
  uint64_t deadline = now_ns() + timeout_ns;
  while (__atomic_load_n(arrived, __ATOMIC_SEQ_CST) < total) {
    if (now_ns() > deadline)
      return 1;
    sched_yield();
  }
  return 0;
}

/* threads[group] = pthread_self(); then every group waits for all the others (fault 99 on timeout). */
struct rendezvous_args { uint32_t *arrived; uint64_t *threads; uint64_t timeout_ns; };
OL_HOST_KERNEL rendezvous(const void *args, const ol_host_launch_t *launch) {
  struct rendezvous_args p;
  memcpy(&p, args, sizeof p);
  p.threads[linear_group(launch)] = (uint64_t)pthread_self();
  return wait_for_all(p.arrived, total_groups(launch), p.timeout_ns) ? 99 : 0;
}

/* Each group fills its dynamic shared memory with group+1, meets every other group, then checks
 * its buffer is intact: ok[group] = 1 when no other group wrote into it. */
struct shared_args { uint32_t *arrived; uint32_t *ok; uint64_t timeout_ns; uint32_t words; };
OL_HOST_KERNEL shared_private(const void *args, const ol_host_launch_t *launch) {
  struct shared_args p;
  memcpy(&p, args, sizeof p);
  uint32_t group = linear_group(launch);
  volatile uint32_t *shared = launch->dyn_shared_memory;
  for (uint32_t i = 0; i < p.words; ++i)
    shared[i] = group + 1;
  if (wait_for_all(p.arrived, total_groups(launch), p.timeout_ns))
    return 99;
  uint32_t ok = 1;
  for (uint32_t i = 0; i < p.words; ++i)
    ok &= shared[i] == group + 1;
  p.ok[group] = ok;
  return 0;
}
