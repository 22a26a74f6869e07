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
 * and OL_HOST_KERNEL_NO_ARGS(name) for a kernel that takes no arguments. */
#define OL_HOST_KERNEL_ARGS(kernel, type) \
  OL_HOST_EXPORT extern const uint64_t __ol_args_size_##kernel; \
  const uint64_t __ol_args_size_##kernel = sizeof(type)
#define OL_HOST_KERNEL_NO_ARGS(kernel) \
  OL_HOST_EXPORT extern const uint64_t __ol_args_size_##kernel; \
  const uint64_t __ol_args_size_##kernel = 0

#ifdef __cplusplus
}
#endif

#endif /* OFFLOADRT_HOST_KERNEL_H */
