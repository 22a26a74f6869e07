/* The ABI of offloadrt host kernels.
 *
 * A host program is an ELF shared object (cc -shared -fPIC). Each kernel is an exported
 * function with the signature below; the runtime calls it once per work-group, spreading
 * work-groups over the CPU cores. One call runs one whole work-group on one thread, so the
 * kernel loops over the group's work-items itself; dyn_shared_memory and _Thread_local
 * statics serve as the group's local memory, and a barrier is the end of a loop over the
 * group's items. Returning non-zero is a kernel fault: the queue enters the error state.
 * Exported data objects are the program's global variables.
 */
#ifndef OFFLOADRT_HOST_KERNEL_H
#define OFFLOADRT_HOST_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint32_t x, y, z;
} ol_host_dim3_t;

typedef struct {
  ol_host_dim3_t group_id;   /* which work-group this call runs */
  ol_host_dim3_t num_groups; /* the launch's NumGroups */
  ol_host_dim3_t group_size; /* the launch's GroupSize: the kernel loops over these work-items */
  void *dyn_shared_memory;   /* DynSharedMemory bytes, private to this work-group for this call */
} ol_host_launch_t;

/* int my_kernel(const void *args, const ol_host_launch_t *launch);
 * args: the olLaunchKernel argument blob (NULL when there is none). */
typedef int (*ol_host_kernel_t)(const void *args, const ol_host_launch_t *launch);

#if defined(__GNUC__) || defined(__clang__)
#define OL_HOST_KERNEL __attribute__((visibility("default"))) int
#define OL_HOST_EXPORT __attribute__((visibility("default")))
#else
#define OL_HOST_KERNEL int
#define OL_HOST_EXPORT
#endif

/* Optional, and recommended: tell offloadrt the size of a kernel's argument blob, so that an
 * olLaunchKernel whose blob has another size (or none) is refused with INVALID_ARGUMENT instead of
 * letting the kernel read past it. Write it after the kernel, with the struct the kernel copies:
 *   OL_HOST_KERNEL_ARGS(scale, struct scale_args);
 * and OL_HOST_KERNEL_NO_ARGS(name) for a kernel that takes no arguments. The struct's alignment is
 * exported too: a blob without the struct's tail padding (the kernel's parameters packed exactly,
 * as a GPU takes them) is accepted and zero-extended to sizeof(type). */
#if defined(__GNUC__) || defined(__clang__)
#define OL_HOST_ALIGNOF_(type) __alignof__(type) /* any C or C++ standard, -Wpedantic too */
#elif defined(__cplusplus)
#define OL_HOST_ALIGNOF_(type) alignof(type)
#else
#define OL_HOST_ALIGNOF_(type) _Alignof(type)
#endif
#define OL_HOST_KERNEL_ARGS(kernel, type) \
  OL_HOST_EXPORT extern const uint64_t __ol_args_align_##kernel; \
  const uint64_t __ol_args_align_##kernel = OL_HOST_ALIGNOF_(type); \
  OL_HOST_EXPORT extern const uint64_t __ol_args_size_##kernel; \
  const uint64_t __ol_args_size_##kernel = sizeof(type)
#define OL_HOST_KERNEL_NO_ARGS(kernel) \
  OL_HOST_EXPORT extern const uint64_t __ol_args_size_##kernel; \
  const uint64_t __ol_args_size_##kernel = 0

/* ---- Native work-group dispatch (offloadrt's own; kernels never call these) ------------------
 * Every image that includes this header carries two small exported runners. offloadrt finds them
 * in the loaded image and calls them once per worker thread and launch (or once per run of queued
 * one-group launches) instead of calling the kernel from Python once per work-group. An image
 * without them works the same, only slower. They are weak, so any number of translation units
 * of one image may include this header; the _v1 suffix changes if their layout ever does. */

typedef struct {
  ol_host_kernel_t kernel;   /* the kernel */
  const void *args;          /* its argument blob, or NULL */
  ol_host_dim3_t num_groups; /* the launch's NumGroups */
  ol_host_dim3_t group_size; /* the launch's GroupSize */
  uint64_t total;            /* num_groups.x * .y * .z */
  uint64_t chunk;            /* work-groups a thread takes at a time */
  uint64_t next;             /* the first work-group not handed out yet (atomic) */
  int32_t status;            /* the first fault's return value; 0 while none (atomic) */
  uint32_t reserved;
  uint64_t fault_group;      /* the linear index (x fastest) of the work-group that returned it */
} ol_host_dispatch_t;

typedef struct {
  ol_host_kernel_t kernel;
  const void *args;
  const ol_host_launch_t *launch;
} ol_host_call_t;

#if defined(__GNUC__) || defined(__clang__)
#define OL_HOST_RUNNER __attribute__((weak, visibility("default")))

/* Takes chunks of job's work-groups until none is left or a group faulted; several threads may
 * run it on one job at once. dyn_shared_memory: this thread's buffer for the groups it runs. */
OL_HOST_RUNNER int32_t __ol_host_dispatch_v1(ol_host_dispatch_t *job, void *dyn_shared_memory);
OL_HOST_RUNNER int32_t __ol_host_dispatch_v1(ol_host_dispatch_t *job, void *dyn_shared_memory) {
  ol_host_launch_t launch;
  uint64_t begin, end, group, plane, rest;
  int32_t status, none;
  launch.num_groups = job->num_groups;
  launch.group_size = job->group_size;
  launch.dyn_shared_memory = dyn_shared_memory;
  plane = (uint64_t)job->num_groups.x * job->num_groups.y;
  for (;;) {
    if (__atomic_load_n(&job->status, __ATOMIC_RELAXED))
      return 0;
    begin = __atomic_fetch_add(&job->next, job->chunk, __ATOMIC_RELAXED);
    if (begin >= job->total)
      return 0;
    end = job->total - begin < job->chunk ? job->total : begin + job->chunk;
    launch.group_id.z = (uint32_t)(begin / plane);
    rest = begin % plane;
    launch.group_id.y = (uint32_t)(rest / job->num_groups.x);
    launch.group_id.x = (uint32_t)(rest % job->num_groups.x);
    for (group = begin; group < end; ++group) {
      status = job->kernel(job->args, &launch);
      if (status) {
        none = 0;
        if (__atomic_compare_exchange_n(&job->status, &none, status, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
          job->fault_group = group;
        return status;
      }
      if (++launch.group_id.x == job->num_groups.x) {
        launch.group_id.x = 0;
        if (++launch.group_id.y == job->num_groups.y) {
          launch.group_id.y = 0;
          ++launch.group_id.z;
        }
      }
    }
  }
}

/* Calls calls[0], calls[1], ... in order until one returns non-zero: returns how many returned 0
 * and stores the non-zero value in *status (left alone when all returned 0). */
OL_HOST_RUNNER uint64_t __ol_host_call_v1(const ol_host_call_t *calls, uint64_t count, int32_t *status);
OL_HOST_RUNNER uint64_t __ol_host_call_v1(const ol_host_call_t *calls, uint64_t count, int32_t *status) {
  uint64_t index;
  int32_t result;
  for (index = 0; index < count; ++index) {
    result = calls[index].kernel(calls[index].args, calls[index].launch);
    if (result) {
      *status = result;
      return index;
    }
  }
  return count;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* OFFLOADRT_HOST_KERNEL_H */
