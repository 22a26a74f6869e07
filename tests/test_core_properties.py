"""Round trips of offloadrt's Python API over dtypes, shapes and offsets (hypothesis): NumPy to an
Array and back, zero-copy host views, ``numpy.from_dlpack``, copies at offsets, argument packing
against NumPy's C-aligned struct layout; concurrency (8 threads) and no leak over 100,000
allocate/close cycles."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import run_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import offloadrt
from offloadrt.core import _args, _runtime

DTYPES = st.sampled_from(["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                          "float16", "float32", "float64", "complex64", "complex128"])
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True, scope="module")
def layer() -> Iterator[None]:
    _runtime.shutdown()
    yield
    _runtime.shutdown()


@FAST
@given(data=st.data(), dtype=DTYPES, offset_items=st.integers(0, 5))
def test_numpy_round_trips(data: st.DataObject, dtype: str, offset_items: int) -> None:
    host = offloadrt.device("host")
    array = data.draw(hnp.arrays(np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)))
    on_device = offloadrt.asarray(array)
    assert on_device.shape == array.shape and on_device.dtype == array.dtype
    np.testing.assert_array_equal(on_device.numpy(), array)
    np.testing.assert_array_equal(np.asarray(on_device), array)
    np.testing.assert_array_equal(np.from_dlpack(on_device), array)
    # the same data at an offset into a larger buffer
    offset = offset_items * array.dtype.itemsize
    buffer = host.allocate(offset + array.nbytes + 8)
    view = offloadrt.Array(buffer, array.shape, array.dtype, offset=offset)
    view.buffer.fill(0)
    np.asarray(view)[...] = array
    np.testing.assert_array_equal(view.numpy(), array)
    np.testing.assert_array_equal(np.from_dlpack(view), array)
    assert bytes(np.asarray(buffer)[:offset]) == bytes(offset)  # nothing written before the offset
    if array.nbytes:
        assert np.from_dlpack(view).ctypes.data == buffer.ptr + offset  # zero-copy
    back = np.empty_like(array)
    offloadrt.core._copy.transfer(back, view, None)
    np.testing.assert_array_equal(back, array)
    buffer.close()


@FAST
@given(kinds=st.lists(st.sampled_from(["int8", "uint8", "int16", "int32", "uint32", "int64", "float16", "float32",
                                       "float64", "ptr"]), min_size=1, max_size=8), seed=st.integers(0, 2**32 - 1))
def test_packing_matches_the_c_struct_layout(kinds: list[str], seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = []
    for kind in kinds:
        if kind == "ptr":
            values.append(int(rng.integers(1, 2**62)))
        elif kind.startswith("float"):
            values.append(float(np.dtype(kind).type(rng.random())))
        else:
            info = np.iinfo(kind)
            values.append(int(rng.integers(info.min, info.max, endpoint=True)))
    params = _args.parse_signature(kinds)
    blob = _args.build_plan(params, tuple(values), "k")(None, *values)
    layout = np.dtype([(f"f{i}", "u8" if k == "ptr" else k) for i, k in enumerate(kinds)], align=True)
    expected = np.zeros(1, layout)
    for i, value in enumerate(values):
        expected[f"f{i}"] = value
    # NumPy's aligned struct is C's layout; the blob ends where its last field does (no tail padding)
    end = layout.fields[f"f{len(kinds) - 1}"][1] + layout[len(kinds) - 1].itemsize
    assert blob == expected.tobytes()[:end]


def test_eight_threads_allocate_launch_and_free(build) -> None:
    host = offloadrt.device("host")
    program = host.load(build("core_kernels"))
    saxpy = program.kernel("saxpy")
    saxpy.signature = ("float32", "ptr", "ptr", "uint32")
    pool = host.memory_pool
    errors: list[str] = []

    def body(index: int) -> None:
        with host.queue() as queue:
            for round_ in range(25):
                n = 64 + 32 * ((index + round_) % 5)
                x = offloadrt.asarray(np.full(n, index, np.float32), queue=queue)
                y = offloadrt.empty(n, np.float32, queue=queue)
                y.buffer.fill(np.float32(1), queue)
                queue.launch(saxpy, (n + 63) // 64, 64, 2.0, x, y, n)
                result = y.numpy()
                if not (result == 2 * index + 1).all():
                    errors.append(f"thread {index} round {round_}: {result[:4]}")
                x.buffer.close()
                y.buffer.close()

    run_threads(8, body)
    assert errors == []
    gc.collect()
    assert pool.used_bytes == 0  # everything went back


def test_no_leak_over_100000_allocate_close_cycles() -> None:
    host = offloadrt.device("host")
    pool = host.memory_pool
    for size in (1024, 4096):
        host.allocate(size).close()
    cached = pool.cached_bytes
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(50_000):
            host.allocate(1024).close()
            with host.allocate(4096):
                pass
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, f"{grown} bytes more after 100,000 cycles"
    assert pool.used_bytes == 0 and pool.cached_bytes == cached  # every block came back, none was added
