/* Lane semantics of <gpuintrin.h> on offloadrt's host, the way upstream's tests exercise them:
 * convergence at __gpu_sync_lane after divergence, lane masks of divergent and partial wavefronts,
 * sums and scans, ballots, matches, shuffles and first-lane reads inside branches. Every kernel
 * writes, per item, what a GPU target (NVPTX with independent thread scheduling, AMDGPU) defines;
 * tests/test_portable_lanes.py holds the model. */
#include <gpuintrin.h>
#include <stdint.h>

static uint32_t item(void) { return __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x(); }

/* Odd lanes run a lane operation inside a branch; after __gpu_sync_lane(all) every lane is
 * converged again: lane masks afterwards name the whole wavefront. */
__gpu_kernel void reconverge(uint64_t *out) {
  uint32_t lane = __gpu_lane_id();
  uint64_t all = __gpu_lane_mask();
  uint64_t inside = 0;
  if (lane & 1)
    inside = __gpu_lane_mask();
  __gpu_sync_lane(all);
  uint64_t after = __gpu_lane_mask();
  out[3 * item()] = all;
  out[3 * item() + 1] = inside;
  out[3 * item() + 2] = after;
}

/* LLVM libc's scan_reduce test, reduce and scan parts (gpu::reduce and gpu::scan are the lane sum
 * and the inclusive lane scan): values per item, checked by the test. */
__gpu_kernel void libc_scan_reduce(uint32_t *out) {
  uint32_t *o = out + 6 * item();
  uint64_t mask = __gpu_lane_mask();
  o[0] = __gpu_lane_sum_u32(mask, 1);
  o[1] = __gpu_lane_sum_u32(mask, __gpu_lane_id());
  uint32_t z = 0;
  if (__gpu_lane_id() % 2)
    z = __gpu_lane_sum_u32(__gpu_lane_mask(), 1);
  __gpu_sync_lane(mask);
  o[2] = z;
  mask = __gpu_lane_mask();
  o[3] = __gpu_lane_scan_u32(mask, 1);
  o[4] = __gpu_lane_scan_u32(mask, __gpu_lane_id());
  z = 0;
  if (__gpu_lane_id() % 2)
    z = __gpu_lane_scan_u32(__gpu_lane_mask(), 1);
  __gpu_sync_lane(mask);
  o[5] = z;
}

/* Lanes split three ways by lane % 3; in each branch: the branch's mask, a sum, a scan, a ballot
 * of lane & 1, the first lane's value, a shuffle from lane + 3, match_any of lane / 8 and
 * match_all of 7. The branches differ (values and order), so that no compiler can merge them and
 * make their lanes converged. All lanes meet again at __gpu_sync_lane. */
__gpu_kernel void branches(uint64_t *out) {
  uint32_t lane = __gpu_lane_id();
  uint64_t all = __gpu_lane_mask();
  uint64_t *o = out + 9 * item();
  uint32_t way = lane % 3;
  if (way == 0) {
    uint64_t m = __gpu_lane_mask();
    o[0] = m;
    o[1] = __gpu_lane_sum_u32(m, lane);
    o[2] = __gpu_lane_scan_u32(m, lane);
    o[3] = __gpu_ballot(m, lane & 1);
    o[4] = __gpu_read_first_lane_u32(m, lane);
    o[5] = __gpu_shuffle_idx_u32(m, (lane + 3) % __gpu_num_lanes(), lane + 100, __gpu_num_lanes());
    o[6] = __gpu_match_any_u32(m, lane / 8);
    o[7] = __gpu_match_all_u32(m, 7);
  } else if (way == 1) {
    o[3] = __gpu_ballot(~0ull, lane & 1);
    uint64_t m = __gpu_lane_mask();
    o[0] = m;
    o[7] = __gpu_match_all_u32(m, 7);
    o[1] = __gpu_lane_sum_u32(m, lane + 1000);
    o[2] = __gpu_lane_scan_u32(m, lane + 1000);
    o[4] = __gpu_read_first_lane_u32(m, lane + 1000);
    o[5] = __gpu_shuffle_idx_u32(m, (lane + 3) % __gpu_num_lanes(), lane + 2000, __gpu_num_lanes());
    o[6] = __gpu_match_any_u32(m, lane / 8);
  } else {
    o[1] = o[2] = o[3] = o[4] = o[5] = o[6] = o[7] = 0;
    o[0] = __gpu_lane_mask();
  }
  __gpu_sync_lane(all);
  o[8] = __gpu_lane_mask();
}

/* A sync over a subset: lanes 0-7 sync among themselves after diverging within that subset; the
 * other lanes go their own way (and finish). */
__gpu_kernel void subset_sync(uint64_t *out) {
  uint32_t lane = __gpu_lane_id();
  uint64_t low = 0xffull & __gpu_lane_mask();
  uint64_t seen = 0;
  if (lane < 8) {
    if (lane < 3)
      seen = __gpu_lane_mask();
    __gpu_sync_lane(low);
    seen |= __gpu_lane_mask() << 32;
  }
  out[item()] = seen;
}

/* Items that exit before a sync do not hold it up (a mask naming them waits only for the rest). */
__gpu_kernel void sync_after_exit(uint64_t *out) {
  uint32_t lane = __gpu_lane_id();
  uint64_t all = __gpu_lane_mask();
  if (lane >= 20)
    __gpu_exit();
  if (lane & 1)
    (void)__gpu_ballot(__gpu_lane_mask(), 1);
  __gpu_sync_lane(all);
  out[item()] = __gpu_lane_mask();
}
