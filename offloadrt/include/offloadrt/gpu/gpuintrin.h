/* offloadrt's implementation of clang's <gpuintrin.h> for the host device (a CPU).
 *
 * offloadrt puts this folder first on the include path when it compiles a portable kernel for
 * the host (Device.compile on the host device), so `#include <gpuintrin.h>` finds this file; for
 * NVPTX and AMDGPU it hands over to clang's own header. Each kernel (`__gpu_kernel`) then gets a
 * generated wrapper in offloadrt's host kernel ABI (offloadrt/host_kernel.h) that runs the
 * work-group's items:
 *
 * - a kernel that never reaches a barrier or a lane operation runs its items as a plain loop;
 * - a kernel that does (__gpu_sync_threads, __gpu_sync_lane, __gpu_ballot, shuffles, matches,
 *   lane sums and scans, __gpu_lane_mask, __gpu_read_first_lane_*, __gpu_exit,
 *   __gpu_thread_suspend) runs its items as fibers on one thread, which switch at
 *   those calls (offloadrt/gpu/host_runtime.h).
 *
 * A wavefront is __OFFLOADRT_HOST_LANES consecutive items (in x, then y, then z order): 32
 * unless the build defines it (a power of two, 1 to 64). `__gpu_local` variables are
 * thread-local, so each work-group (which runs on one thread) has its own; they are not
 * zeroed between groups, as on a GPU. docs/portable-kernels.md says what the host does not support.
 */
#ifndef OFFLOADRT_GPU_GPUINTRIN_H
#define OFFLOADRT_GPU_GPUINTRIN_H

#if defined(__NVPTX__) || defined(__AMDGPU__) || defined(__SPIRV__)
#include_next <gpuintrin.h>
#else

#define __GPUINTRIN_H 1 /* clang's own header, if something includes it, adds nothing */
#define __OFFLOADRT_HOST__ 1

#include <stdint.h>

#ifndef __OFFLOADRT_HOST_LANES
#define __OFFLOADRT_HOST_LANES 32
#endif
#if __OFFLOADRT_HOST_LANES < 1 || __OFFLOADRT_HOST_LANES > 64 || \
    (__OFFLOADRT_HOST_LANES & (__OFFLOADRT_HOST_LANES - 1)) != 0
#error "__OFFLOADRT_HOST_LANES (the host wavefront width) must be a power of two from 1 to 64"
#endif

#ifdef __cplusplus
#define __OL_BOOL bool
#else
#define __OL_BOOL _Bool
#endif

#define __GPU_X_DIM 0
#define __GPU_Y_DIM 1
#define __GPU_Z_DIM 2

/* Address spaces mean nothing on a CPU, except work-group memory: one copy per work-group. */
#define __gpu_private
#define __gpu_constant
#define __gpu_global
#define __gpu_generic

#ifdef __OFFLOADRT_ANALYSIS__
/* offloadrt preprocesses the source once with these to find kernels and work-group memory. */
#define __gpu_local __ol_gpu_local__
#define __gpu_kernel __ol_gpu_kernel__
#else
#define __gpu_local __thread
#define __gpu_kernel __attribute__((visibility("hidden")))
#endif

#define __OL_UNAVAILABLE(what)                                                                  \
  __attribute__((unavailable(what " is not supported on offloadrt's host device (see "         \
                                  "docs/portable-kernels.md)")))

struct __ol_gpu_fiber;

/* The work-item that runs now on this thread, and its work-group. */
struct __ol_gpu_state {
  uint32_t tid[3];  /* the item's id in its group */
  uint32_t ntid[3]; /* the group's size */
  uint32_t bid[3];  /* the group's id */
  uint32_t nblk[3]; /* the number of groups */
  struct __ol_gpu_fiber *fiber; /* the running fiber, or 0 when the group runs as a loop */
  void *dyn;        /* the group's dynamic work-group memory (extern __gpu_local arrays) */
  void *escape[5];  /* __builtin_setjmp buffer of a loop-mode group (see host_runtime.h) */
  int fault;        /* what the kernel returns when it escapes */
};
static __thread struct __ol_gpu_state __ol_gpu __attribute__((unused));

#define __OL_FN static __inline__ __attribute__((unused, always_inline))

__OL_FN uint32_t __gpu_num_blocks_x(void) { return __ol_gpu.nblk[0]; }
__OL_FN uint32_t __gpu_num_blocks_y(void) { return __ol_gpu.nblk[1]; }
__OL_FN uint32_t __gpu_num_blocks_z(void) { return __ol_gpu.nblk[2]; }
__OL_FN uint32_t __gpu_block_id_x(void) { return __ol_gpu.bid[0]; }
__OL_FN uint32_t __gpu_block_id_y(void) { return __ol_gpu.bid[1]; }
__OL_FN uint32_t __gpu_block_id_z(void) { return __ol_gpu.bid[2]; }
__OL_FN uint32_t __gpu_num_threads_x(void) { return __ol_gpu.ntid[0]; }
__OL_FN uint32_t __gpu_num_threads_y(void) { return __ol_gpu.ntid[1]; }
__OL_FN uint32_t __gpu_num_threads_z(void) { return __ol_gpu.ntid[2]; }
__OL_FN uint32_t __gpu_thread_id_x(void) { return __ol_gpu.tid[0]; }
__OL_FN uint32_t __gpu_thread_id_y(void) { return __ol_gpu.tid[1]; }
__OL_FN uint32_t __gpu_thread_id_z(void) { return __ol_gpu.tid[2]; }

__OL_FN uint32_t __gpu_num_blocks(int __dim) {
  return __dim >= 0 && __dim < 3 ? __ol_gpu.nblk[__dim] : 1;
}
__OL_FN uint32_t __gpu_block_id(int __dim) { return __dim >= 0 && __dim < 3 ? __ol_gpu.bid[__dim] : 0; }
__OL_FN uint32_t __gpu_num_threads(int __dim) {
  return __dim >= 0 && __dim < 3 ? __ol_gpu.ntid[__dim] : 1;
}
__OL_FN uint32_t __gpu_thread_id(int __dim) { return __dim >= 0 && __dim < 3 ? __ol_gpu.tid[__dim] : 0; }

__OL_FN uint32_t __gpu_num_lanes(void) { return __OFFLOADRT_HOST_LANES; }
__OL_FN uint32_t __gpu_lane_id(void) {
  return (__ol_gpu.tid[0] + __ol_gpu.ntid[0] * (__ol_gpu.tid[1] + __ol_gpu.ntid[1] * __ol_gpu.tid[2])) &
         (__OFFLOADRT_HOST_LANES - 1);
}
__OL_FN uint64_t __gpu_first_lane_id(uint64_t __lane_mask) { return __builtin_ffsll((long long)__lane_mask) - 1; }
__OL_FN __OL_BOOL __gpu_is_first_in_lane(uint64_t __lane_mask) {
  return __gpu_lane_id() == __gpu_first_lane_id(__lane_mask);
}

/* Lane operations: each one gathers the lanes of the wavefront that wait at the same call site
 * (host_runtime.h). They are real calls, so that the call site is their return address. */
enum {
  __OL_LANE_MASK, __OL_LANE_SYNC, __OL_LANE_BALLOT, __OL_LANE_FIRST, __OL_LANE_SHUFFLE,
  __OL_LANE_MATCH_ANY, __OL_LANE_MATCH_ALL,
  __OL_LANE_SUM_U32, __OL_LANE_SUM_U64, __OL_LANE_SUM_F32, __OL_LANE_SUM_F64,
  __OL_LANE_SCAN_U32, __OL_LANE_SCAN_U64, __OL_LANE_SCAN_F32, __OL_LANE_SCAN_F64
};
static uint64_t __ol_gpu_lane_op(int __op, uint64_t __mask, uint64_t __x, uint32_t __idx, uint32_t __width,
                                 const void *__site);
static void __ol_gpu_barrier(void);
static void __ol_gpu_yield(void);
__attribute__((noreturn)) static void __ol_gpu_exit_item(void);

#define __OL_LANE static __attribute__((noinline, unused, convergent))
#define __OL_SITE __builtin_return_address(0)

__OL_FN uint32_t __ol_f32_bits(float __x) {
  uint32_t __b;
  __builtin_memcpy(&__b, &__x, sizeof __b);
  return __b;
}
__OL_FN float __ol_bits_f32(uint64_t __b) {
  uint32_t __w = (uint32_t)__b;
  float __x;
  __builtin_memcpy(&__x, &__w, sizeof __x);
  return __x;
}
__OL_FN uint64_t __ol_f64_bits(double __x) {
  uint64_t __b;
  __builtin_memcpy(&__b, &__x, sizeof __b);
  return __b;
}
__OL_FN double __ol_bits_f64(uint64_t __b) {
  double __x;
  __builtin_memcpy(&__x, &__b, sizeof __x);
  return __x;
}

__OL_LANE uint64_t __gpu_lane_mask(void) { return __ol_gpu_lane_op(__OL_LANE_MASK, ~0ull, 0, 0, 0, __OL_SITE); }
__OL_LANE void __gpu_sync_lane(uint64_t __lane_mask) {
  (void)__ol_gpu_lane_op(__OL_LANE_SYNC, __lane_mask, 0, 0, 0, __OL_SITE);
}
__OL_LANE uint64_t __gpu_ballot(uint64_t __lane_mask, __OL_BOOL __x) {
  return __ol_gpu_lane_op(__OL_LANE_BALLOT, __lane_mask, __x ? 1 : 0, 0, 0, __OL_SITE);
}
__OL_LANE uint32_t __gpu_read_first_lane_u32(uint64_t __lane_mask, uint32_t __x) {
  return (uint32_t)__ol_gpu_lane_op(__OL_LANE_FIRST, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE uint64_t __gpu_read_first_lane_u64(uint64_t __lane_mask, uint64_t __x) {
  return __ol_gpu_lane_op(__OL_LANE_FIRST, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE float __gpu_read_first_lane_f32(uint64_t __lane_mask, float __x) {
  return __ol_bits_f32(__ol_gpu_lane_op(__OL_LANE_FIRST, __lane_mask, __ol_f32_bits(__x), 0, 0, __OL_SITE));
}
__OL_LANE double __gpu_read_first_lane_f64(uint64_t __lane_mask, double __x) {
  return __ol_bits_f64(__ol_gpu_lane_op(__OL_LANE_FIRST, __lane_mask, __ol_f64_bits(__x), 0, 0, __OL_SITE));
}
__OL_LANE uint32_t __gpu_shuffle_idx_u32(uint64_t __lane_mask, uint32_t __idx, uint32_t __x, uint32_t __width) {
  return (uint32_t)__ol_gpu_lane_op(__OL_LANE_SHUFFLE, __lane_mask, __x, __idx, __width, __OL_SITE);
}
__OL_LANE uint64_t __gpu_shuffle_idx_u64(uint64_t __lane_mask, uint32_t __idx, uint64_t __x, uint32_t __width) {
  return __ol_gpu_lane_op(__OL_LANE_SHUFFLE, __lane_mask, __x, __idx, __width, __OL_SITE);
}
__OL_LANE float __gpu_shuffle_idx_f32(uint64_t __lane_mask, uint32_t __idx, float __x, uint32_t __width) {
  return __ol_bits_f32(__ol_gpu_lane_op(__OL_LANE_SHUFFLE, __lane_mask, __ol_f32_bits(__x), __idx, __width,
                                        __OL_SITE));
}
__OL_LANE double __gpu_shuffle_idx_f64(uint64_t __lane_mask, uint32_t __idx, double __x, uint32_t __width) {
  return __ol_bits_f64(__ol_gpu_lane_op(__OL_LANE_SHUFFLE, __lane_mask, __ol_f64_bits(__x), __idx, __width,
                                        __OL_SITE));
}
__OL_LANE uint64_t __gpu_match_any_u32(uint64_t __lane_mask, uint32_t __x) {
  return __ol_gpu_lane_op(__OL_LANE_MATCH_ANY, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE uint64_t __gpu_match_any_u64(uint64_t __lane_mask, uint64_t __x) {
  return __ol_gpu_lane_op(__OL_LANE_MATCH_ANY, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE uint64_t __gpu_match_all_u32(uint64_t __lane_mask, uint32_t __x) {
  return __ol_gpu_lane_op(__OL_LANE_MATCH_ALL, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE uint64_t __gpu_match_all_u64(uint64_t __lane_mask, uint64_t __x) {
  return __ol_gpu_lane_op(__OL_LANE_MATCH_ALL, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE uint32_t __gpu_lane_sum_u32(uint64_t __lane_mask, uint32_t __x) {
  return (uint32_t)__ol_gpu_lane_op(__OL_LANE_SUM_U32, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE uint64_t __gpu_lane_sum_u64(uint64_t __lane_mask, uint64_t __x) {
  return __ol_gpu_lane_op(__OL_LANE_SUM_U64, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE float __gpu_lane_sum_f32(uint64_t __lane_mask, float __x) {
  return __ol_bits_f32(__ol_gpu_lane_op(__OL_LANE_SUM_F32, __lane_mask, __ol_f32_bits(__x), 0, 0, __OL_SITE));
}
__OL_LANE double __gpu_lane_sum_f64(uint64_t __lane_mask, double __x) {
  return __ol_bits_f64(__ol_gpu_lane_op(__OL_LANE_SUM_F64, __lane_mask, __ol_f64_bits(__x), 0, 0, __OL_SITE));
}
__OL_LANE uint32_t __gpu_lane_scan_u32(uint64_t __lane_mask, uint32_t __x) {
  return (uint32_t)__ol_gpu_lane_op(__OL_LANE_SCAN_U32, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE uint64_t __gpu_lane_scan_u64(uint64_t __lane_mask, uint64_t __x) {
  return __ol_gpu_lane_op(__OL_LANE_SCAN_U64, __lane_mask, __x, 0, 0, __OL_SITE);
}
__OL_LANE float __gpu_lane_scan_f32(uint64_t __lane_mask, float __x) {
  return __ol_bits_f32(__ol_gpu_lane_op(__OL_LANE_SCAN_F32, __lane_mask, __ol_f32_bits(__x), 0, 0, __OL_SITE));
}
__OL_LANE double __gpu_lane_scan_f64(uint64_t __lane_mask, double __x) {
  return __ol_bits_f64(__ol_gpu_lane_op(__OL_LANE_SCAN_F64, __lane_mask, __ol_f64_bits(__x), 0, 0, __OL_SITE));
}

__OL_FN void __gpu_sync_threads(void) { __ol_gpu_barrier(); }
__OL_FN void __gpu_thread_suspend(void) { __ol_gpu_yield(); }
__attribute__((noreturn)) __OL_FN void __gpu_exit(void) { __ol_gpu_exit_item(); }

/* A host pointer does not say which memory it points into. */
__OL_UNAVAILABLE("__gpu_is_ptr_local") __OL_FN __OL_BOOL __gpu_is_ptr_local(void *__ptr) {
  (void)__ptr;
  return 0;
}
__OL_UNAVAILABLE("__gpu_is_ptr_private") __OL_FN __OL_BOOL __gpu_is_ptr_private(void *__ptr) {
  (void)__ptr;
  return 0;
}

#ifndef __OFFLOADRT_ANALYSIS__
#include <offloadrt/gpu/host_runtime.h>
#endif

#endif /* GPU targets */
#endif /* OFFLOADRT_GPU_GPUINTRIN_H */
