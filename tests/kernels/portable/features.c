/* offloadrt's own portable-kernel tests in C: lanes, atomics, work-group memory, grids, faults. */
#include <gpuintrin.h>
#include <stdint.h>

static uint32_t linear_item(void) {
  return __gpu_thread_id_x() + __gpu_num_threads_x() *
         (__gpu_thread_id_y() + __gpu_num_threads_y() * __gpu_thread_id_z());
}

static uint32_t global_item(void) {
  uint32_t group = __gpu_block_id_x() + __gpu_num_blocks_x() *
                   (__gpu_block_id_y() + __gpu_num_blocks_y() * __gpu_block_id_z());
  return group * __gpu_num_threads_x() * __gpu_num_threads_y() * __gpu_num_threads_z() + linear_item();
}

/* Without a barrier: a plain loop on the host. */
__gpu_kernel void scale(float a, const float *x, float *y, uint32_t n) {
  uint32_t i = __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  if (i < n)
    y[i] = a * x[i];
}

/* Every id of a 3-D launch: out[global item] = (group x, y, z, item x, y, z) packed. */
__gpu_kernel void where(uint32_t *out) {
  uint32_t *o = out + 6 * global_item();
  o[0] = __gpu_block_id_x(); o[1] = __gpu_block_id_y(); o[2] = __gpu_block_id_z();
  o[3] = __gpu_thread_id_x(); o[4] = __gpu_thread_id_y(); o[5] = __gpu_thread_id_z();
}

/* Lane operations; per item: lane id, lanes, ballot of odd lanes, shuffle from lane+1 (wrapping),
 * first lane's value, sum, inclusive scan, match_any of value/4, float sum. */
__gpu_kernel void lanes(uint32_t *out, float *fsum) {
  uint32_t i = global_item();
  uint32_t lane = __gpu_lane_id();
  uint64_t mask = __gpu_lane_mask();
  uint32_t *o = out + 8 * i;
  o[0] = lane;
  o[1] = __gpu_num_lanes();
  o[2] = (uint32_t)__gpu_ballot(mask, lane & 1);
  o[3] = __gpu_shuffle_idx_u32(mask, (lane + 1) % __gpu_num_lanes(), i * 10, __gpu_num_lanes());
  o[4] = __gpu_read_first_lane_u32(mask, i + 1000);
  o[5] = __gpu_lane_sum_u32(mask, i);
  o[6] = __gpu_lane_scan_u32(mask, i);
  o[7] = (uint32_t)__gpu_match_any_u32(mask, lane / 4);
  fsum[i] = __gpu_lane_sum_f32(mask, 0.5f * (float)lane);
}

/* Lanes that diverge: only even lanes take part in the ballot. */
__gpu_kernel void divergent(uint64_t *out) {
  uint32_t lane = __gpu_lane_id();
  uint64_t result = 0;
  if ((lane & 1) == 0)
    result = __gpu_ballot(__gpu_lane_mask(), 1);
  out[global_item()] = result;
}

/* Atomics: every item adds to one counter and keeps the maximum of its ids. */
__gpu_kernel void count(uint32_t *counter, uint32_t *largest) {
  uint32_t i = global_item();
  __scoped_atomic_fetch_add(counter, 1u, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
  __atomic_fetch_max(largest, i, __ATOMIC_RELAXED);
}

/* A work-group reduction in static work-group memory with barriers (a tree). */
__gpu_kernel void group_sum(const float *x, float *sums) {
  static __gpu_local float partial[256] __attribute__((loader_uninitialized));
  uint32_t t = __gpu_thread_id_x();
  partial[t] = x[__gpu_block_id_x() * __gpu_num_threads_x() + t];
  __gpu_sync_threads();
  for (uint32_t half = __gpu_num_threads_x() / 2; half > 0; half /= 2) {
    if (t < half)
      partial[t] += partial[t + half];
    __gpu_sync_threads();
  }
  if (t == 0)
    sums[__gpu_block_id_x()] = partial[0];
}

/* A pointer into work-group memory passed to a helper: the qualifier means nothing on the host. */
static void put(__gpu_local uint32_t *slot, uint32_t value) { *slot = value; }

__gpu_kernel void reverse(uint32_t *data) {
  static __gpu_local uint32_t tile[64] __attribute__((loader_uninitialized));
  uint32_t t = __gpu_thread_id_x(), n = __gpu_num_threads_x();
  put(&tile[t], data[__gpu_block_id_x() * n + t]);
  __gpu_sync_threads();
  data[__gpu_block_id_x() * n + t] = tile[n - 1 - t];
}

/* Items that leave early with __gpu_exit do not hold up the barrier. */
__gpu_kernel void leave_early(uint32_t *out) {
  uint32_t t = __gpu_thread_id_x();
  if (t % 2)
    __gpu_exit();
  __gpu_sync_threads();
  out[t] = 1;
}

/* A barrier the analysis cannot see (reached through a function pointer): a fault on the host
 * for groups of more than one item, never a wrong result. */
typedef void (*step_fn)(void);
static void wait_all(void) { __gpu_sync_threads(); }
static step_fn volatile steps[1] = {wait_all};
__gpu_kernel void hidden_barrier(uint32_t *out) {
  steps[0]();
  out[__gpu_thread_id_x()] = 1;
}
