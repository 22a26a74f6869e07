"""offloadrt.Array as CuPy and PyOpenCL users reach for it: basic indexing and slicing, reshape, .T and
ravel as views with strides; get/set, copy_from/copy_to, fill, copy, astype, close and ``with``; the
zeros/full/*_like/ascontiguousarray factories; operators that say how to get there; and reads from
the host that wait for the queues that used the memory (no stale reads). On the host device, and on
the CUDA and HIP driver stand-ins (device memory the host cannot reach: strided copies take the
staged and run-by-run paths)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import cuda_standin
import hip_standin
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import offloadrt
from offloadrt import ErrorCode, OffloadError
from offloadrt.core import _runtime


@pytest.fixture(params=["host", "cuda", "amdgpu"])
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[offloadrt.Device]:
    _runtime.shutdown()
    standin = {"cuda": cuda_standin, "amdgpu": hip_standin}.get(request.param)
    if standin is not None:
        standin.install(monkeypatch, devices=1)
    try:
        yield offloadrt.device(request.param)
    finally:
        try:
            _runtime.shutdown()
        finally:
            if standin is not None:
                standin.shutdown()


@pytest.fixture
def host() -> Iterator[offloadrt.Device]:
    _runtime.shutdown()
    yield offloadrt.device("host")
    _runtime.shutdown()


def expect(code: ErrorCode, fn, *args, **kwargs) -> OffloadError:  # noqa: ANN001
    with pytest.raises(OffloadError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


X = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
INDICES = [(1,), (slice(1, 3),), (slice(None, None, -1),), (Ellipsis, 2), (1, slice(None, None, 2), 3),
           (None, 0), (slice(None), None, slice(1, 4)), (-1, -2, -3), (slice(3, 0, -2), Ellipsis, slice(None, 1))]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_basic_indexing_gives_views_with_numpys_answer(device: offloadrt.Device, index: tuple[object, ...]) -> None:
    array = offloadrt.asarray(X, device)
    view = array[index]
    assert view.shape == X[index].shape and view.buffer is array.buffer
    assert np.array_equal(view.get(), X[index])


def test_views_transpose_reshape_ravel(device: offloadrt.Device) -> None:
    array = offloadrt.asarray(X, device)
    assert np.array_equal(array.T.get(), X.T) and array.T.strides == X.T.strides
    assert np.array_equal(array.transpose(1, 0, 2).get(), X.transpose(1, 0, 2))
    assert np.array_equal(array.reshape(6, -1).get(), X.reshape(6, -1))
    assert array.reshape(6, -1).buffer is array.buffer  # a view
    assert np.array_equal(array.T.reshape(-1).get(), X.T.reshape(-1))  # a copy: not C-ordered
    assert np.array_equal(array[:, ::2].ravel().get(), X[:, ::2].ravel())
    assert array.flags.c_contiguous and not array.T.flags.c_contiguous and array.T.flags.f_contiguous
    expect(ErrorCode.INVALID_SIZE, array.reshape, 7, -1)
    expect(ErrorCode.INVALID_ARGUMENT, array.transpose, 0, 0, 1)


def test_copies_into_and_out_of_strided_views(device: offloadrt.Device) -> None:
    array = offloadrt.asarray(X, device)
    expected = X.copy()
    patch = -np.arange(4 * 3, dtype=np.float32).reshape(4, 3)
    array[:, ::2, 1] = patch
    expected[:, ::2, 1] = patch
    assert np.array_equal(array.get(), expected)
    array.T[2].fill(0.5)
    expected.T[2] = 0.5
    assert np.array_equal(array.get(), expected)
    other = offloadrt.zeros((6, 4), np.float32, device)
    other.copy_from(array[:, :, 0].T)  # strided source into a C-ordered array
    assert np.array_equal(other.get(), expected[:, :, 0].T)
    out = np.zeros((4, 6), np.float32)
    array[..., 3].copy_to(out)
    assert np.array_equal(out, expected[..., 3])


def test_fill_get_set_copy_astype_and_with(device: offloadrt.Device) -> None:
    with offloadrt.full((3, 4), 7, np.int32, device) as array:
        assert array.get().tolist() == [[7] * 4] * 3
        array.set(np.arange(12, dtype=np.int32).reshape(3, 4))
        copied = array.copy()
        array.fill(-1)
        assert copied.get().tolist() == np.arange(12).reshape(3, 4).tolist()
        as_float = copied.astype(np.float64)
        assert as_float.dtype == np.float64 and as_float.get()[2, 3] == 11.0
        out = np.empty((3, 4), np.int32)
        assert array.get(out=out) is out and (out == -1).all()
        assert array[1, 2].get() == -1 and array[1, 2].shape == ()
    assert array.buffer.closed
    expect(ErrorCode.INVALID_ARGUMENT, array.copy_from, np.zeros((3, 4), np.float32))  # dtype differs
    zero = offloadrt.zeros(5, np.uint8, device)
    assert zero.get().tolist() == [0] * 5
    like = offloadrt.zeros_like(X, device=device)
    assert like.shape == X.shape and like.dtype == X.dtype and not like.get().any()
    assert offloadrt.empty_like(like).device is device


def test_set_and_copy_check_shapes_and_dtypes(host: offloadrt.Device) -> None:
    array = offloadrt.zeros((2, 3), np.float32, host)
    error = expect(ErrorCode.INVALID_ARGUMENT, array.set, np.zeros((3, 2), np.float32))
    assert "(3, 2)" in error.details and "shapes must be the same" in error.details
    error = expect(ErrorCode.INVALID_ARGUMENT, array.copy_from, np.zeros((2, 3), np.float64))
    assert "astype" in error.details
    array.set([[1, 2, 3], [4, 5, 6]])  # a list takes the array's dtype
    assert array.get().sum() == 21
    expect(ErrorCode.INVALID_ARGUMENT, array.__getitem__, [0, 1])  # fancy indexing reads data: refused
    expect(ErrorCode.INVALID_ARGUMENT, array.__getitem__, np.array([True, False]))
    with pytest.raises(IndexError):
        array[5]


def test_ascontiguousarray_and_launches_of_strided_arrays(host: offloadrt.Device) -> None:
    array = offloadrt.asarray(X, host)
    assert offloadrt.ascontiguousarray(array) is array
    column = offloadrt.ascontiguousarray(array[:, 1])
    assert column.flags.c_contiguous and np.array_equal(column.get(), X[:, 1])
    program = host.compile("#include <offloadrt/host_kernel.h>\nstruct args { float *x; unsigned n; };\n"
                           "OL_HOST_KERNEL twice(const void *a, const ol_host_launch_t *launch) {\n"
                           "  const struct args *p = a; (void)launch;\n"
                           "  for (unsigned i = 0; i < p->n; i++) p->x[i] *= 2;\n  return 0;\n}\n"
                           "OL_HOST_KERNEL_ARGS(twice, struct args);\n")
    kernel = program.kernel("twice")
    with host.queue() as queue:
        queue.launch(kernel, 1, 1, column, np.uint32(column.size))
        error = expect(ErrorCode.INVALID_ARGUMENT, queue.launch, kernel, 1, 1, array[:, 1], np.uint32(4))
        assert "non-contiguous" in error.details and "ascontiguousarray" in error.details
        queue.launch(kernel, 1, 1, column, np.uint32(column.size))  # the fast path still takes the good one
    assert np.array_equal(column.get(), 4 * X[:, 1])


def test_operators_say_how_to_get_there(host: offloadrt.Device) -> None:
    array = offloadrt.asarray(np.ones(3, np.float32), host)
    for operation in (lambda: array + 1, lambda: 2 * array, lambda: np.ones(3) - array, lambda: -array,
                      lambda: array < 1):
        with pytest.raises(TypeError, match="elementwise"):
            operation()
    assert array == array and {array: 1}[array] == 1  # identity comparison: arrays stay hashable


def test_exports_of_strided_views(host: offloadrt.Device) -> None:
    array = offloadrt.asarray(X, host)
    view = array[::2, 1:, ::-1]
    assert np.array_equal(np.asarray(view), X[::2, 1:, ::-1])
    assert np.array_equal(np.from_dlpack(view), X[::2, 1:, ::-1])
    np.asarray(array.T)[0, 0, 0] = 99.0  # a writable view of the same memory
    assert array.get()[0, 0, 0] == 99.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-6, 6), st.integers(-6, 6), st.integers(-3, 3).filter(bool)),
                min_size=3, max_size=3))
def test_any_slicing_matches_numpy(slices: list[tuple[int, int, int]]) -> None:
    _runtime.shutdown()
    try:
        array = offloadrt.asarray(X, "host")
        index = tuple(slice(a, b, c) for a, b, c in slices)
        assert np.array_equal(array[index].get(), X[index])
        assert np.array_equal(array[index].T.copy().get(), X[index].T)
    finally:
        _runtime.shutdown()


# ---- no stale reads ----------------------------------------------------------------------------------

def _blocked_copy(device: offloadrt.Device, array: offloadrt.Array, values: np.ndarray) -> threading.Timer:
    """Queue a copy of ``values`` into ``array`` on a new queue, behind a host function that waits
    for a gate; the gate opens a little later on a timer thread. Returns the timer."""
    gate = threading.Event()
    queue = device.queue()
    queue.host_function(gate.wait)
    array.copy_from(values, queue)
    opener = threading.Timer(0.05, gate.set)
    opener.start()
    return opener


def test_reads_wait_for_the_queue_that_wrote(host: offloadrt.Device) -> None:
    """Before: numpy() of an array made without a queue copied at once, while the copy queued on another
    queue had not run (a user read 0.0 where the result was 200)."""
    values = np.full(1000, 200.0)
    for read in (lambda a: a.numpy(), lambda a: a.get(), lambda a: np.asarray(a).copy(),
                 lambda a: np.from_dlpack(a).copy(), lambda a: bytes(memoryview(np.asarray(a.buffer)))):
        array = offloadrt.zeros(1000, np.float64, host)
        opener = _blocked_copy(host, array, values)
        got = read(array)
        opener.join()
        got = np.frombuffer(got, np.float64) if isinstance(got, bytes) else got
        assert got.mean() == 200.0


def test_a_queued_read_waits_for_the_other_queue(host: offloadrt.Device) -> None:
    array = offloadrt.zeros(1000, np.float64, host)
    opener = _blocked_copy(host, array, np.full(1000, 3.0))
    out = np.zeros(1000)
    with host.queue() as reader:
        array.copy_to(out, reader)
    opener.join()
    assert out.mean() == 3.0


# ---- launch arguments and sizes ---------------------------------------------------------------------

def test_launch_messages_say_what_to_do(host: offloadrt.Device) -> None:
    program = host.compile("#include <offloadrt/host_kernel.h>\nstruct args { float *x; unsigned n; };\n"
                           "OL_HOST_KERNEL k(const void *a, const ol_host_launch_t *l) { (void)a; (void)l; "
                           "return 0; }\nOL_HOST_KERNEL_ARGS(k, struct args);\n")
    kernel = program.kernel("k")
    x = offloadrt.zeros(4, np.float32, host)
    with host.queue() as queue:
        for signature in (None, ("ptr", "uint32")):
            kernel.signature = signature
            error = expect(ErrorCode.INVALID_ARGUMENT, queue.launch, kernel, 1, 1, np.zeros(4, np.float32),
                           np.uint32(4))
            assert "NumPy array" in error.details and "offloadrt.asarray" in error.details
        error = expect(ErrorCode.INVALID_ARGUMENT, queue.launch, kernel, 1, 1, x, x)
        assert "is an offloadrt Array" in error.details


@pytest.mark.parametrize("sizes", [(4.0, 1, 0), (4, 1.0, 0), (4, 1, 0.0), ((2.0, 1), 1, 0), (True, 1, 0),
                                   (4, 1, False)], ids=repr)
def test_float_and_bool_launch_sizes_are_refused_after_int_ones(host: offloadrt.Device,
                                                                sizes: tuple[object, object, object]) -> None:
    """Before: once a launch with 4 had run, 4.0 (equal to it) took the fast path and was accepted."""
    program = host.compile("#include <offloadrt/host_kernel.h>\n"
                           "OL_HOST_KERNEL k(const void *a, const ol_host_launch_t *l) { (void)a; (void)l; "
                           "return 0; }\nOL_HOST_KERNEL_NO_ARGS(k);\n")
    kernel = program.kernel("k")
    grid, block, shared = sizes
    with host.queue() as queue:
        queue.launch(kernel, 4, 1)
        queue.launch(kernel, (2, 1), 1)
        queue.launch(kernel, 4, 1, shared_mem=0)
        expect(ErrorCode.INVALID_ARGUMENT, queue.launch, kernel, grid, block, shared_mem=shared)
