"""Lane semantics of portable kernels on the host (tests/kernels/portable/lanes.c), against a model of
what the GPU targets define (NVPTX with independent thread scheduling; AMDGPU): ``__gpu_sync_lane`` is
a convergence point of the lanes in its mask, ``__gpu_lane_mask()`` the lanes that are converged, and
every lane operation inside a branch acts on the lanes of that branch; with partial wavefronts and
items that exit early. LLVM libc's scan/reduce test (the part clang 22's header supports) is one of
the kernels. Needs clang 20 or later (skips without it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from toolchains import needs_clang

import offloadrt
from offloadrt.compile import _clang, _portable
from offloadrt.compile._types import Compiled, Target
from offloadrt.core import _runtime
from offloadrt.errors import OffloadError

SOURCE = (Path(__file__).parent / "kernels" / "portable" / "lanes.c").read_text()
WIDTH = 32


pytestmark = needs_clang


@pytest.fixture(scope="module")
def compiled() -> Compiled:
    return _portable.compile_portable(SOURCE, [], "gpu-c", Target("host"))


@pytest.fixture(scope="module")
def program(compiled: Compiled) -> Iterator[offloadrt.Program]:
    _runtime.shutdown()
    yield offloadrt.Program._from_compiled(offloadrt.device("host"), compiled)
    _runtime.shutdown()


def run(program: offloadrt.Program, name: str, items: int, per_item: int, dtype: type) -> np.ndarray:
    host = offloadrt.device("host")
    out = offloadrt.zeros(items * per_item, dtype, host)
    with host.queue() as queue:
        queue.launch(program.kernel(name), 1, items, out)
    return out.get().reshape(items, per_item)


def wavefronts(items: int) -> Iterator[tuple[int, int, int]]:
    """(item, lane, lanes in its wavefront) of every item of a group."""
    for i in range(items):
        start = i - i % WIDTH
        yield i, i % WIDTH, min(WIDTH, items - start)


def mask(lanes: object) -> int:
    return sum(1 << lane for lane in lanes)  # type: ignore[attr-defined]


GROUPS = [1, 17, 32, 40, 64, 100]


@pytest.mark.parametrize("items", GROUPS)
def test_sync_lane_reconverges_divergent_lanes(program: offloadrt.Program, items: int) -> None:
    """Before: after odd lanes ran a lane operation in a branch, __gpu_sync_lane(all) let the even lanes
    go on alone, and __gpu_lane_mask() afterwards said 0x55555555 where NVPTX says 0xffffffff."""
    got = run(program, "reconverge", items, 3, np.uint64)
    for i, lane, n in wavefronts(items):
        full = (1 << n) - 1
        odd = mask(range(1, n, 2))
        assert got[i].tolist() == [full, odd if lane & 1 else 0, full], (i, [hex(v) for v in got[i]])


@pytest.mark.parametrize("items", GROUPS)
def test_llvm_libc_scan_reduce(program: offloadrt.Program, items: int) -> None:
    got = run(program, "libc_scan_reduce", items, 6, np.uint32)
    for i, lane, n in wavefronts(items):
        odd = lane % 2 == 1
        expected = [n, sum(range(n)), len(range(1, n, 2)) if odd else 0, lane + 1, lane * (lane + 1) // 2,
                    lane // 2 + 1 if odd else 0]
        assert got[i].tolist() == expected, (i, got[i].tolist(), expected)


@pytest.mark.parametrize("items", GROUPS)
def test_lane_operations_in_branches_act_on_the_branchs_lanes(program: offloadrt.Program, items: int) -> None:
    got = run(program, "branches", items, 9, np.uint64)
    for i, lane, n in wavefronts(items):
        way = lane % 3
        members = [m for m in range(n) if m % 3 == way]
        m = mask(members)
        full = (1 << n) - 1
        if way == 2:
            expected = [m, 0, 0, 0, 0, 0, 0, 0, full]
        else:
            source = (lane + 3) % WIDTH
            add, shift = (0, 100) if way == 0 else (1000, 2000)
            expected = [m, sum(x + add for x in members), sum(x + add for x in members if x <= lane),
                        mask(x for x in members if x & 1), members[0] + add,
                        source + shift if (m >> source) & 1 else 0,
                        mask(x for x in members if x // 8 == lane // 8), m, full]
        assert got[i].tolist() == expected, (i, [hex(v) for v in got[i]], [hex(v) for v in expected])


@pytest.mark.parametrize("items", GROUPS)
def test_a_sync_over_a_subset_waits_for_that_subset_only(program: offloadrt.Program, items: int) -> None:
    got = run(program, "subset_sync", items, 1, np.uint64)
    for i, lane, n in wavefronts(items):
        low = mask(range(min(8, n)))
        if lane >= 8:
            expected = 0
        else:
            expected = (mask(range(min(3, n))) if lane < 3 else 0) | low << 32
        assert got[i, 0] == expected, (i, hex(int(got[i, 0])), hex(expected))


@pytest.mark.parametrize("items", GROUPS)
def test_items_that_exit_do_not_hold_up_a_sync(program: offloadrt.Program, items: int) -> None:
    got = run(program, "sync_after_exit", items, 1, np.uint64)
    for i, lane, n in wavefronts(items):
        expected = 0 if lane >= 20 else mask(range(min(20, n)))
        assert got[i, 0] == expected, (i, hex(int(got[i, 0])), hex(expected))


@pytest.mark.parametrize("target", [Target("cuda", "sm_90"), Target("amdgpu", "gfx90a")], ids=str)
def test_the_lane_kernels_build_for_the_gpu_targets(target: Target) -> None:
    """The same source is GPU code: it compiles for NVPTX and AMDGPU (clang's own <gpuintrin.h>)."""
    if target.kind == "amdgpu":
        try:
            _clang.lld(_clang.clang())
        except OffloadError as exc:
            pytest.skip(f"AMDGPU code objects need ld.lld: {exc.details}")
    compiled = _portable.compile_portable(SOURCE, [], "gpu-c", target)
    assert set(compiled.kernels) >= {"reconverge", "libc_scan_reduce", "branches", "subset_sync",
                                        "sync_after_exit"}
