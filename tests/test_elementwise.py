"""One-line kernels (offloadrt.core._elementwise): elementwise and reduction kernels on the host device
against NumPy, the checks of their arguments, the generated source built for NVIDIA (PTX) and AMD
GPUs, and the GPU launches on the CUDA and HIP driver stand-ins.

Everything here needs clang 20 or later (and ld.lld for AMDGPU code objects) and skips with the
reason where they are missing. The stand-ins do not run GPU code: there each generated kernel is
given a TEST DOUBLE body in NumPy that does what the C kernel does for the launch it gets, so the
tests check the launches (shapes, arguments, the second pass), not the GPU's arithmetic.
"""

from __future__ import annotations

import ctypes
import struct
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from toolchains import lld_missing, needs_clang, needs_lld

import offloadrt
from offloadrt import ErrorCode, OffloadError
from offloadrt.compile import _portable
from offloadrt.compile._types import Target
from offloadrt.core import _elementwise, _runtime
from offloadrt.core._elementwise import elementwise, reduction

pytestmark = needs_clang

SAXPY = elementwise("float a, const float *x, float *y", "y[i] = a * x[i] + y[i]", "saxpy")
SUM = reduction("const float *x", "x[i]", "a + b", "0", np.float32, "sum")
MAX = reduction("const float *x", "x[i]", "a > b ? a : b", "-INFINITY", np.float32, "max_of")
MIN = reduction("const double *x", "x[i]", "a < b ? a : b", "INFINITY", np.float64, "min_of")
DOT = reduction("const float *x, const float *y", "x[i] * y[i]", "a + b", "0", np.float64, "dot")
ISUM = reduction("const int32_t *x", "x[i]", "a + b", "0", np.int64, "isum")
IMAX = reduction("const uint8_t *x", "x[i]", "a > b ? a : b", "0", np.uint8, "imax")


@pytest.fixture(autouse=True, scope="module")
def layer() -> Iterator[None]:
    """The Python layer's runtime for this module only."""
    _runtime.shutdown()
    yield
    _runtime.shutdown()


@pytest.fixture
def host() -> offloadrt.Device:
    return offloadrt.device("host")


def on(device: offloadrt.Device, values: Any) -> offloadrt.Array:
    return offloadrt.asarray(np.asarray(values), device)


def expect(code: ErrorCode, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> OffloadError:
    with pytest.raises(OffloadError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


def random(n: int, dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


# ---- elementwise on the host ----------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 31, 1000, 1_000_003])
def test_saxpy_matches_numpy(host: offloadrt.Device, n: int) -> None:
    x, y = random(n), random(n, seed=1)
    dx, dy = on(host, x), on(host, y)
    assert SAXPY(2.5, dx, dy) is None
    np.testing.assert_allclose(dy.numpy(), np.float32(2.5) * x + y, rtol=1e-5, atol=1e-6)  # FMA may fuse


def test_a_multi_output_body_with_a_queue(host: offloadrt.Device) -> None:
    kernel = elementwise("const double *x, double *twice, int64_t *index, double bias",
                         "twice[i] = 2 * x[i] + bias; index[i] = i", "two_outputs")
    n = 5000
    x = random(n, np.float64)
    twice, index = offloadrt.empty(n, np.float64, host), offloadrt.empty(n, np.int64, host)
    with host.queue() as queue:
        kernel(on(host, x), twice, index, 0.25, queue=queue)
        queue.sync()
        np.testing.assert_array_equal(twice.numpy(), 2 * x + 0.25)
        np.testing.assert_array_equal(index.numpy(), np.arange(n))


def test_scalars_are_converted_to_their_parameters_c_type(host: offloadrt.Device) -> None:
    kernel = elementwise("int8_t k, float f, uint32_t u, int32_t *out", "out[i] = k + (int32_t)f + (int32_t)u")
    out = offloadrt.empty(4, np.int32, host)
    kernel(-3, 2.75, np.uint16(40), out)  # 2.75 -> 2.75f, truncated by the body; a NumPy scalar as its value
    assert (out.numpy() == 39).all()
    kernel(np.int64(5), np.float64(1.5), True, out)
    assert (out.numpy() == 7).all()
    expect(ErrorCode.INVALID_ARGUMENT, kernel, 300, 1.0, 1, out)  # does not fit int8_t
    expect(ErrorCode.INVALID_ARGUMENT, kernel, 1, 1.0, -1, out)  # nor uint32_t


def test_an_empty_input_runs_nothing(host: offloadrt.Device) -> None:
    SAXPY(2.0, offloadrt.empty(0, np.float32, host), offloadrt.empty(0, np.float32, host))


def test_without_a_queue_it_runs_after_the_arrays_queue(host: offloadrt.Device) -> None:
    import threading

    go = threading.Event()
    queue = host.queue()
    x = offloadrt.asarray(np.ones(100, np.float32), host, queue)
    y = offloadrt.empty(100, np.float32, host, queue)
    queue.host_function(go.wait)  # holds the queue: the fill below has not run yet
    y.buffer.fill(np.float32(1), queue)
    done = threading.Event()

    def call() -> None:
        SAXPY(3.0, x, y)
        done.set()

    caller = threading.Thread(target=call)
    caller.start()
    assert not done.wait(0.2)  # still waiting for the array's queue
    go.set()
    caller.join(10)
    assert done.is_set()
    assert (y.numpy() == 4).all()  # 3 * 1 + 1: the fill ran first
    queue.close()


def test_size_mismatch_names_the_sizes(host: offloadrt.Device) -> None:
    error = expect(ErrorCode.INVALID_ARGUMENT, SAXPY, 1.0, offloadrt.empty(10, np.float32, host),
                   offloadrt.empty(12, np.float32, host))
    assert "x has 10" in error.details and "y has 12" in error.details


def test_arguments_that_do_not_fit_their_parameters(host: offloadrt.Device) -> None:
    x = offloadrt.empty(4, np.float32, host)
    error = expect(ErrorCode.INVALID_ARGUMENT, SAXPY, 1.0, np.zeros(4, np.float32), x)
    assert "offloadrt.asarray" in error.details and "const float *x" in error.details
    expect(ErrorCode.INVALID_ARGUMENT, SAXPY, 1.0, x.buffer, x)  # a Buffer has no element count
    expect(ErrorCode.INVALID_ARGUMENT, SAXPY, 1.0, [1.0, 2.0], x)
    error = expect(ErrorCode.INVALID_ARGUMENT, SAXPY, x, x, x)
    assert "takes a number" in error.details
    expect(ErrorCode.INVALID_ARGUMENT, SAXPY, "2", x, x)
    error = expect(ErrorCode.INVALID_ARGUMENT, SAXPY, 1.0, offloadrt.empty(4, np.float64, host), x)
    assert "float32" in error.details and "float64" in error.details
    error = expect(ErrorCode.INVALID_ARGUMENT, SAXPY, 1.0, x)
    assert "takes 3 arguments" in error.details
    expect(ErrorCode.INVALID_ARGUMENT, SAXPY, 1.0, x, x, queue="not a queue")


def test_void_pointers_take_arrays_of_any_type(host: offloadrt.Device) -> None:
    copy = elementwise("const void *src, float *dst", "dst[i] = ((const float *)src)[i]")
    src = on(host, np.arange(6, dtype=np.float32))
    dst = offloadrt.empty(6, np.float32, host)
    copy(src, dst)
    assert (dst.numpy() == np.arange(6)).all()


def test_non_contiguous_arrays_are_refused(host: offloadrt.Device) -> None:
    class Strided(offloadrt.Array):  # TEST DOUBLE: an Array that says it is a strided view
        __slots__ = ()

        @property
        def strides(self) -> tuple[int, ...]:
            return (8,)

        @property
        def flags(self) -> Any:
            return types.SimpleNamespace(c_contiguous=False, f_contiguous=False)

    x = offloadrt.empty(4, np.float32, host)
    buffer = offloadrt.empty(8, np.float32, host).buffer
    try:
        strided = offloadrt.Array(buffer, 4, np.float32, strides=(8,))  # type: ignore[call-arg]
    except TypeError:  # Arrays without strided views
        strided = Strided(buffer, 4, np.float32)
    error = expect(ErrorCode.INVALID_ARGUMENT, SAXPY, 1.0, strided, x)
    assert "non-contiguous" in error.details
    expect(ErrorCode.INVALID_ARGUMENT, SUM, strided)


def test_arrays_on_two_devices_are_refused(host: offloadrt.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    import cuda_standin

    _runtime.shutdown()
    cuda_standin.install(monkeypatch, devices=1)
    try:
        gpu, cpu = offloadrt.device("cuda"), offloadrt.device("host")
        x, y = offloadrt.empty(4, np.float32, gpu), offloadrt.empty(4, np.float32, cpu)
        error = expect(ErrorCode.INVALID_DEVICE, SAXPY, 1.0, x, y)
        assert "cuda:0" in error.details and "host:0" in error.details
        with cpu.queue() as queue:
            expect(ErrorCode.INVALID_DEVICE, SAXPY, 1.0, x, offloadrt.empty(4, np.float32, gpu), queue=queue)
    finally:
        try:
            _runtime.shutdown()
        finally:
            cuda_standin.shutdown()


@pytest.mark.parametrize(("params", "problem"), [
    ("float a", "array parameter"),  # nothing to size the launch
    ("float a, float a, float *y", "twice"),
    ("float i, float *y", "reserved"),
    ("float __x, float *y", "reserved"),
    ("struct point p, float *y", "a number"),
    ("float **y", "a number"),
    ("float", "type name"),
    ("", "type name"),
])
def test_parameter_lists_that_cannot_be_kernels(params: str, problem: str) -> None:
    error = expect(ErrorCode.INVALID_ARGUMENT, elementwise, params, "y[i] = 0")
    assert problem in error.details


def test_bad_names_bodies_and_dtypes() -> None:
    expect(ErrorCode.INVALID_ARGUMENT, elementwise, "float *y", "y[i] = 0", "not a name")
    expect(ErrorCode.INVALID_ARGUMENT, elementwise, "float *y", "  ")
    expect(ErrorCode.INVALID_ARGUMENT, reduction, "const float *x", "x[i]", "a + b", "0", np.complex64)
    expect(ErrorCode.INVALID_ARGUMENT, reduction, "const float *x", "x[i]", "a + b", "0", "not a dtype")


def test_a_compile_error_holds_the_compilers_log(host: offloadrt.Device) -> None:
    broken = elementwise("float *y", "y[i] = undefined_name")
    error = expect(ErrorCode.COMPILE_FAILURE, broken, offloadrt.empty(3, np.float32, host))
    assert "undefined_name" in error.details


def test_the_program_is_compiled_once_per_device(host: offloadrt.Device) -> None:
    x = on(host, np.ones(3, np.float32))
    SAXPY(1.0, x, x)
    program = SAXPY.program(host)
    SAXPY(1.0, x, x)
    assert SAXPY.program(host) is program
    assert (x.numpy() == 4).all()  # x = 1 * x + x, twice, in place


def test_a_preamble_is_there_for_the_body(host: offloadrt.Device) -> None:
    kernel = elementwise("const float *x, float *y", "y[i] = square(x[i])",
                         preamble="static inline float square(float v) { return v * v; }")
    y = offloadrt.empty(5, np.float32, host)
    kernel(on(host, np.arange(5, dtype=np.float32)), y)
    assert (y.numpy() == np.arange(5) ** 2).all()


# ---- reductions on the host -----------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 31, 1000, 1_000_003])
def test_sum_max_min_and_dot_match_numpy(host: offloadrt.Device, n: int) -> None:
    x, y = random(n), random(n, seed=1)
    dx, dy = on(host, x), on(host, y)
    total = SUM(dx)
    assert total.shape == () and total.dtype == np.float32
    assert float(total.numpy()) == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-4, abs=1e-3)
    assert float(MAX(dx).numpy()) == x.max()
    assert float(MIN(on(host, x.astype(np.float64))).numpy()) == x.min()
    dot = DOT(dx, dy)
    assert dot.dtype == np.float64
    exact = float((x.astype(np.float64) * y.astype(np.float64)).sum())
    assert float(dot.numpy()) == pytest.approx(exact, rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("n", [1, 31, 1000, 1_000_003])
def test_integer_reductions_are_exact(host: offloadrt.Device, n: int) -> None:
    rng = np.random.default_rng(n)
    values = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    assert int(ISUM(on(host, values)).numpy()) == int(values.astype(np.int64).sum())
    small = rng.integers(0, 255, n, dtype=np.uint8)
    result = IMAX(on(host, small))
    assert result.dtype == np.uint8 and int(result.numpy()) == int(small.max())


def test_an_empty_input_gives_the_identity(host: offloadrt.Device) -> None:
    empty = offloadrt.empty(0, np.float32, host)
    assert float(SUM(empty).numpy()) == 0.0
    assert float(MAX(empty).numpy()) == -np.inf
    assert float(MIN(offloadrt.empty(0, np.float64, host)).numpy()) == np.inf
    assert int(ISUM(offloadrt.empty(0, np.int32, host)).numpy()) == 0


def test_a_reduction_on_a_queue_gives_an_array_ordered_after_it(host: offloadrt.Device) -> None:
    x = random(100_000)
    with host.queue() as queue:
        dx = offloadrt.asarray(x, host, queue)
        result = SUM(dx, queue=queue)
        assert result.queue is queue
        assert float(result.numpy()) == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-4, abs=1e-3)


def test_reduction_arguments_are_checked(host: offloadrt.Device) -> None:
    error = expect(ErrorCode.INVALID_ARGUMENT, DOT, offloadrt.empty(3, np.float32, host),
                   offloadrt.empty(4, np.float32, host))
    assert "x has 3" in error.details and "y has 4" in error.details
    expect(ErrorCode.INVALID_ARGUMENT, SUM, np.zeros(3, np.float32))
    expect(ErrorCode.INVALID_ARGUMENT, SUM, offloadrt.empty(3, np.float64, host))


def test_a_reduction_with_scalars(host: offloadrt.Device) -> None:
    count_above = reduction("const float *x, float limit", "x[i] > limit ? 1 : 0", "a + b", "0", np.int64,
                            "count_above")
    x = random(10_001)
    assert int(count_above(on(host, x), 0.5).numpy()) == int((x > np.float32(0.5)).sum())


def test_host_chunks_cover_the_input() -> None:
    class Cores:  # TEST DOUBLE: a device with some compute units
        def __init__(self, cores: int) -> None:
            self.info = {offloadrt.DeviceInfo.NUM_COMPUTE_UNITS: cores}

    for cores in (1, 2, 64):
        for n in (1, 31, 16384, 16385, 10_000_000, 2**31 + 7):
            groups, chunk = _elementwise._host_chunks(Cores(cores), n)  # type: ignore[arg-type]
            assert groups * chunk >= n > (groups - 1) * chunk
            assert chunk % 64 == 0 and chunk >= _elementwise.HOST_CHUNK_MIN


# ---- GPU builds -------------------------------------------------------------------------------------

SOURCES = {"elementwise": SAXPY.source, "reduction": DOT.source, "int reduction": IMAX.source}


@pytest.mark.parametrize("name", SOURCES)
def test_the_sources_compile_to_ptx(name: str) -> None:
    compiled = _portable.compile_portable(SOURCES[name], [], "gpu-c", Target("cuda", "sm_90"))
    ptx = compiled.image.decode()
    assert ".target sm_90" in ptx
    for kernel in compiled.kernels:
        assert f".visible .entry {kernel}(" in ptx
    expected = {"saxpy"} if name == "elementwise" else {
        f"{base}{suffix}" for base in ("dot" if name == "reduction" else "imax",)
        for suffix in ("_chunks", "_combine", "_groups", "_combine_groups")}
    assert set(compiled.kernels) == expected
    assert all(signature is not None for signature in compiled.kernels.values())


@needs_lld
@pytest.mark.parametrize("name", SOURCES)
def test_the_sources_compile_for_amdgpu(name: str) -> None:
    compiled = _portable.compile_portable(SOURCES[name], [], "gpu-c", Target("amdgpu", "gfx90a"))
    assert compiled.image[:4] == b"\x7fELF"
    symbols = _portable.elf_symbols(compiled.image)
    assert all(f"{kernel}.kd" in symbols for kernel in compiled.kernels)


def test_the_host_runs_only_the_tree_kernels_as_fibers() -> None:
    fibers = _portable.kernels_needing_fibers(DOT.source)
    assert fibers == {"dot_chunks": False, "dot_combine": False, "dot_groups": True, "dot_combine_groups": True}
    assert _portable.kernels_needing_fibers(SAXPY.source) == {"saxpy": False}


# ---- GPU launches on the driver stand-ins -----------------------------------------------------------

def _floats(address: int, count: int, dtype: Any) -> np.ndarray:
    if count == 0:
        return np.zeros(0, dtype)
    size = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * size).from_address(address), dtype)


def _saxpy_double(params: bytes, grid: Any, block: Any, shared: int, device: int) -> None:
    """TEST DOUBLE of the generated saxpy: what each work-item does, for the whole launch."""
    a, x, y, n, chunk = struct.unpack("<f4xQQqq", params)
    covered = min(n, grid[0] * block[0] * chunk)
    xs, ys = _floats(x, n, np.float32), _floats(y, n, np.float32)
    ys[:covered] = np.float32(a) * xs[:covered] + ys[:covered]


def _tree_double(params: bytes, grid: Any, block: Any, items_first: bool, dtype: Any) -> None:
    """TEST DOUBLE of the generated tree kernels (a dot of two arrays, or a sum of partials): one
    result per group, from the elements its items reach with the launch's stride."""
    if items_first:
        x, y, n, out = struct.unpack("<QQqQ", params)
        values = _floats(x, n, np.float32).astype(np.float64) * _floats(y, n, np.float32)
    else:
        partials, n, out = struct.unpack("<QqQ", params)
        values = _floats(partials, n, dtype)
    assert block[0] == _elementwise.GPU_GROUP
    owner = (np.arange(n) // block[0]) % grid[0]
    results = _floats(out, grid[0], dtype)
    for group in range(grid[0]):
        results[group] = values[owner == group].sum()


@pytest.fixture(params=["cuda", "amdgpu"])
def gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[offloadrt.Device, Any]]:
    """A stand-in GPU of one backend, and its stand-in module."""
    import cuda_standin
    import hip_standin

    if request.param == "amdgpu" and lld_missing():
        pytest.skip(lld_missing())
    standin = cuda_standin if request.param == "cuda" else hip_standin
    _runtime.shutdown()
    standin.install(monkeypatch, devices=1)
    try:
        yield offloadrt.device(request.param), standin
    finally:
        try:
            _runtime.shutdown()
        finally:
            standin.shutdown()


def test_elementwise_launches_on_the_stand_ins(gpu: tuple[offloadrt.Device, Any]) -> None:
    device, standin = gpu
    shapes: list[tuple[Any, Any]] = []

    def body(params: bytes, grid: Any, block: Any, shared: int, ordinal: int) -> None:
        shapes.append((tuple(grid), tuple(block)))
        _saxpy_double(params, grid, block, shared, ordinal)

    standin.register_kernel("saxpy", body)
    n = 1000
    x, y = random(n), random(n, seed=1)
    dx, dy = on(device, x), on(device, y)
    SAXPY(2.0, dx, dy)
    np.testing.assert_allclose(dy.numpy(), np.float32(2) * x + y, rtol=1e-5, atol=1e-6)
    assert shapes == [((4, 1, 1), (256, 1, 1))]  # one element per item, 256-item groups
    with device.queue() as queue:
        SAXPY(1.0, dx, dy, queue=queue)
    np.testing.assert_allclose(dy.numpy(), x + (np.float32(2) * x + y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [0, 31, 1000, 300_001])
def test_reductions_launch_two_passes_on_the_stand_ins(gpu: tuple[offloadrt.Device, Any], n: int) -> None:
    device, standin = gpu
    launches: list[tuple[str, tuple[Any, ...], tuple[Any, ...]]] = []

    def register(name: str, items_first: bool) -> None:
        def body(params: bytes, grid: Any, block: Any, shared: int, ordinal: int) -> None:
            launches.append((name, tuple(grid), tuple(block)))
            _tree_double(params, grid, block, items_first, np.float64)
        standin.register_kernel(name, body)

    register("dot_groups", True)
    register("dot_combine_groups", False)
    x, y = random(n), random(n, seed=1)
    result = DOT(on(device, x), on(device, y))
    assert result.shape == () and result.device is device
    exact = float((x.astype(np.float64) * y.astype(np.float64)).sum())
    assert float(result.numpy()) == pytest.approx(exact, rel=1e-9, abs=1e-9)
    groups = min(_elementwise.GPU_REDUCTION_GROUPS, -(-n // 256))
    expected = [("dot_groups", (groups, 1, 1), (256, 1, 1))] if n else []
    if groups != 1:
        expected.append(("dot_combine_groups", (1, 1, 1), (256, 1, 1)))
    assert launches == expected


# ---- the hardware check's step ------------------------------------------------------------------------

def test_the_gpu_checks_elementwise_step_passes_on_the_host_and_maps_prebuilt_images(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from gpucheck import elementwise as step
    from gpucheck.results import Recorder

    recorder = Recorder(None, out=None)
    step.run(recorder, "host", tmp_path)  # the same kernels and checks as on a GPU
    assert [result.status for result in recorder.results] == ["PASS"] * len(step.kernels())
    entry = {"kind": "cuda", "arch": "sm_80", "file": "x.ptx", "kernels": {}}
    manifest = {"elementwise": {name: [{**entry, "source_sha256": _digest(kernel.source)}]
                                for name, kernel in step.kernels().items()}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    from offloadrt.core import Device

    monkeypatch.setattr(Device, "compile", Device.compile)  # undone after the test
    assert step._use_prebuilt(recorder, tmp_path, "cuda", "sm_90") == "prebuilt images (6 of 6)"


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
