"""Portable kernels that reach barriers on the host (fibers, offloadrt/include/offloadrt/gpu/host_runtime.h):
the results of tiled transposes, tree sums, kernels with several barriers, items that exit early and
items that yield (``__gpu_thread_suspend``), with the x86-64 switch and with ucontext's
(``-D__OFFLOADRT_HOST_UCONTEXT``), over group shapes that exercise the scheduler (partial wavefronts,
3-D groups, groups bigger than the cache colouring's period, several sizes in turn on one thread).

Every figure is checked against NumPy. Needs clang 20 or later; skips with the reason without it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolchains import needs_clang

import offloadrt
from offloadrt.core import _runtime

pytestmark = needs_clang

SOURCE = r"""#include <gpuintrin.h>
#include <stdint.h>
#include <stddef.h>

/* 16x16 tiles through work-group memory, one barrier (rows x cols in, cols x rows out) */
__gpu_kernel void transpose_tiled(const float *in, float *out, uint32_t rows, uint32_t cols) {
  static __gpu_local float tile[16][17];
  uint32_t tx = __gpu_thread_id_x(), ty = __gpu_thread_id_y();
  uint32_t c = __gpu_block_id_x() * 16 + tx, r = __gpu_block_id_y() * 16 + ty;
  if (r < rows && c < cols)
    tile[ty][tx] = in[(size_t)r * cols + c];
  __gpu_sync_threads();
  uint32_t oc = __gpu_block_id_y() * 16 + tx, orow = __gpu_block_id_x() * 16 + ty;
  if (orow < cols && oc < rows)
    out[(size_t)orow * rows + oc] = tile[tx][ty];
}

/* each group adds a strided part of x, then a tree in work-group memory (any group size up to 1024) */
__gpu_kernel void tree_sum(const uint32_t *x, uint32_t n, uint32_t *sums) {
  static __gpu_local uint32_t part[1024];
  uint32_t t = __gpu_thread_id_x(), size = __gpu_num_threads_x();
  uint32_t acc = 0;
  for (uint32_t i = __gpu_block_id_x() * size + t; i < n; i += __gpu_num_blocks_x() * size)
    acc += x[i];
  part[t] = acc;
  uint32_t half = 1;
  while (half < size)
    half <<= 1;
  for (half >>= 1; half > 0; half >>= 1) {
    __gpu_sync_threads();
    if (t < half && t + half < size)
      part[t] += part[t + half];
  }
  if (t == 0)
    sums[__gpu_block_id_x()] = part[0];
}

/* `rounds` times: every item's value moves to the item `shift` places before it (2 barriers a round) */
__gpu_kernel void rotate(const int32_t *in, int32_t *out, uint32_t rounds, uint32_t shift) {
  static __gpu_local int32_t ring[1024];
  uint32_t size = __gpu_num_threads_x() * __gpu_num_threads_y() * __gpu_num_threads_z();
  uint32_t t = __gpu_thread_id_x() + __gpu_num_threads_x() * (__gpu_thread_id_y() +
               __gpu_num_threads_y() * __gpu_thread_id_z());
  size_t base = (size_t)__gpu_block_id_x() * size;
  int32_t v = in[base + t];
  for (uint32_t r = 0; r < rounds; ++r) {
    ring[t] = v;
    __gpu_sync_threads();
    v = ring[(t + shift) % size] + 1;
    __gpu_sync_threads();
  }
  out[base + t] = v;
}

/* items with t % 3 == 0 leave before the barrier (by return or __gpu_exit); the others read a
   neighbour written before it */
__gpu_kernel void early_exit(int32_t *out) {
  static __gpu_local int32_t seen[1024];
  uint32_t t = __gpu_thread_id_x(), size = __gpu_num_threads_x();
  size_t base = (size_t)__gpu_block_id_x() * size;
  out[base + t] = -1;
  if (t % 3 == 0) {
    if (t % 2)
      __gpu_exit();
    return;
  }
  seen[t] = (int32_t)(t * 10);
  __gpu_sync_threads();
  uint32_t other = t + 1 < size && (t + 1) % 3 ? t + 1 : t;
  out[base + t] = seen[other];
  __gpu_sync_threads();
  out[base + t] += 1;
}

/* the middle item yields until the group's last item has set a flag, then writes `after`; the barrier
   after that waits for it (the items before it in the round must not pass it early) */
__gpu_kernel void suspend_wait(int32_t *out) {
  static __gpu_local int32_t flag;
  static __gpu_local int32_t spins;
  static __gpu_local int32_t after;
  uint32_t t = __gpu_thread_id_x(), size = __gpu_num_threads_x();
  size_t base = (size_t)__gpu_block_id_x() * size;
  if (t == 0) {
    flag = 0;
    spins = 0;
    after = 0;
  }
  __gpu_sync_threads();
  uint32_t waiter = size / 2;
  if (t == waiter) {
    while (!__atomic_load_n(&flag, __ATOMIC_ACQUIRE)) {
      ++spins;
      __gpu_thread_suspend();
    }
    after = 20; /* the barrier below waits for this */
  } else if (t == size - 1) {
    __atomic_store_n(&flag, 7, __ATOMIC_RELEASE);
  }
  __gpu_sync_threads();
  out[base + t] = flag + after + (t == waiter ? 100 * (spins > 0) : 0);
}
"""

SWITCHES = {"asm": [], "ucontext": ["-D__OFFLOADRT_HOST_UCONTEXT"]}


@pytest.fixture(autouse=True, scope="module")
def layer() -> Iterator[None]:
    """The Python layer's runtime for this module only."""
    _runtime.shutdown()
    yield
    _runtime.shutdown()


@pytest.fixture(scope="module", params=list(SWITCHES))
def program(request: pytest.FixtureRequest, layer: None) -> offloadrt.Program:
    return offloadrt.device("host").compile(SOURCE, SWITCHES[request.param], lang="gpu-c")


def run(program: offloadrt.Program, name: str, grid: int | tuple[int, ...], block: int | tuple[int, ...],
        *args: object) -> None:
    with offloadrt.device("host").queue() as queue:
        queue.launch(program.kernel(name), grid, block, *args)


@pytest.mark.parametrize("shape", [(16, 16), (37, 53), (100, 3)])
def test_tiled_transpose_matches_numpy(program: offloadrt.Program, shape: tuple[int, int]) -> None:
    host = offloadrt.device("host")
    rows, cols = shape
    matrix = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    out = offloadrt.asarray(np.full((cols, rows), -1, np.float32), host)
    run(program, "transpose_tiled", (-(-cols // 16), -(-rows // 16)), (16, 16), offloadrt.asarray(matrix, host), out,
        np.uint32(rows), np.uint32(cols))
    assert np.array_equal(out.numpy(), matrix.T)


@pytest.mark.parametrize("group", [1, 7, 32, 33, 256, 1024])
def test_tree_sum_matches_numpy(program: offloadrt.Program, group: int) -> None:
    host = offloadrt.device("host")
    x = np.random.default_rng(group).integers(0, 1000, 50_000, dtype=np.uint32)
    groups = 9
    sums = offloadrt.asarray(np.zeros(groups, np.uint32), host)
    run(program, "tree_sum", groups, group, offloadrt.asarray(x, host), np.uint32(x.size), sums)
    expected = [x[np.arange(x.size) // group % groups == g].sum(dtype=np.uint32) for g in range(groups)]
    assert sums.numpy().tolist() == [int(value) for value in expected]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(block=st.tuples(st.integers(1, 12), st.integers(1, 6), st.integers(1, 4)), rounds=st.integers(0, 5),
       shift=st.integers(0, 40))
def test_several_barriers_in_a_loop_match_numpy(program: offloadrt.Program, block: tuple[int, int, int],
                                                rounds: int, shift: int) -> None:
    host = offloadrt.device("host")
    size, groups = block[0] * block[1] * block[2], 3
    values = np.arange(groups * size, dtype=np.int32) * 5
    out = offloadrt.asarray(np.zeros(groups * size, np.int32), host)
    run(program, "rotate", groups, block, offloadrt.asarray(values, host), out, np.uint32(rounds), np.uint32(shift))
    expected = values.reshape(groups, size)
    for _ in range(rounds):
        expected = np.roll(expected, -shift, axis=1) + 1
    assert np.array_equal(out.numpy(), expected.reshape(-1))


@pytest.mark.parametrize("group", [2, 31, 64, 300])
def test_items_that_exit_early_count_as_arrived(program: offloadrt.Program, group: int) -> None:
    host = offloadrt.device("host")
    groups = 4
    out = offloadrt.asarray(np.zeros(groups * group, np.int32), host)
    run(program, "early_exit", groups, group, out)
    t = np.arange(group)
    following = np.where((t + 1 < group) & ((t + 1) % 3 != 0), t + 1, t)
    expected = np.where(t % 3 == 0, -1, following * 10 + 1)
    assert np.array_equal(out.numpy().reshape(groups, group), np.tile(expected, (groups, 1)))


@pytest.mark.parametrize("group", [3, 40, 257])
def test_an_item_that_suspends_sees_what_later_items_write(program: offloadrt.Program, group: int) -> None:
    host = offloadrt.device("host")
    groups = 3
    out = offloadrt.asarray(np.zeros(groups * group, np.int32), host)
    run(program, "suspend_wait", groups, group, out)
    expected = np.full(group, 27)  # every item saw the flag and what item 0 wrote after its wait
    expected[group // 2] = 127  # the waiter yielded at least once before the flag was set
    assert np.array_equal(out.numpy().reshape(groups, group), np.tile(expected, (groups, 1)))


def test_groups_of_changing_sizes_on_one_thread_reuse_the_stacks_correctly(program: offloadrt.Program) -> None:
    host = offloadrt.device("host")
    for group in (1024, 3, 512, 1, 700):
        values = np.arange(2 * group, dtype=np.int32)
        out = offloadrt.asarray(np.zeros(2 * group, np.int32), host)
        run(program, "rotate", 2, group, offloadrt.asarray(values, host), out, np.uint32(2), np.uint32(1))
        expected = np.roll(values.reshape(2, group), -2, axis=1) + 2
        assert np.array_equal(out.numpy(), expected.reshape(-1)), group
