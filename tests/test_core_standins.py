"""offloadrt's Python API on the GPU plugins, over the CUDA and HIP driver stand-ins (no GPU needed):
device specs, DLPack device types per backend and kind, host reachability, the CUDA Array
Interface (v3) and the CUDA stream protocol checked against their specifications, copies between
GPUs, launches (the packed blob the driver receives), the pool and out-of-memory retries."""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Iterator
from typing import Any

import amdgpu_fixtures
import cuda_fixtures
import cuda_standin
import hip_standin
import numpy as np
import pytest
from gpu_fixtures import KERNELS

import offloadrt
from offloadrt import AllocType, DeviceType, ErrorCode, OffloadError, PlatformBackend
from offloadrt.core import _runtime

BACKENDS = {"cuda": (cuda_standin, PlatformBackend.CUDA), "amdgpu": (hip_standin, PlatformBackend.AMDGPU)}


@pytest.fixture(params=["cuda", "amdgpu"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The layer's runtime over two stand-in GPUs of one backend (and the host)."""
    standin = BACKENDS[request.param][0]
    _runtime.shutdown()
    standin.install(monkeypatch, devices=2)
    try:
        yield request.param
    finally:
        try:
            _runtime.shutdown()
        finally:
            standin.shutdown()


def image(backend: str, kernels: tuple[str, ...] | list[str] = KERNELS) -> bytes:
    return cuda_fixtures.ptx(kernels=kernels) if backend == "cuda" else amdgpu_fixtures.code_object(kernels=kernels)


def test_devices_of_a_gpu_backend(backend: str) -> None:
    gpus = offloadrt.devices(backend)
    assert len(gpus) == 2 and all(g.type == DeviceType.GPU and g.backend == BACKENDS[backend][1] for g in gpus)
    assert offloadrt.devices()[:2] == gpus and offloadrt.devices()[-1].type == DeviceType.HOST
    assert offloadrt.device() is gpus[0] and offloadrt.device(backend) is gpus[0]
    assert offloadrt.device(f"{backend}:1") is gpus[1] and str(gpus[1]) == f"{backend}:1"


EXPECTED_DLPACK = {
    "cuda": {AllocType.DEVICE: (2, 1), AllocType.HOST: (3, 0), AllocType.MANAGED: (13, 0)},
    "amdgpu": {AllocType.DEVICE: (10, 1), AllocType.HOST: (11, 0), AllocType.MANAGED: (10, 1)},
}


@pytest.mark.parametrize("kind", list(AllocType))
def test_dlpack_device_and_host_reachability(backend: str, kind: AllocType) -> None:
    gpu = offloadrt.device(f"{backend}:1")
    with gpu.allocate(64, kind) as buffer:
        assert buffer.__dlpack_device__() == EXPECTED_DLPACK[backend][kind]
        buffer.fill(5)
        if kind == AllocType.DEVICE:
            assert not hasattr(buffer, "__array_interface__")
            with pytest.raises(OffloadError) as info:
                np.asarray(buffer)
            assert info.value.code == ErrorCode.INVALID_ARGUMENT and "cannot reach" in info.value.details
        else:  # pinned or managed: the host reaches it, so NumPy views it in place
            view = np.asarray(buffer)
            assert view.ctypes.data == buffer.ptr and (view == 5).all()
        capsule = buffer.__dlpack__(max_version=(1, 0))
        assert type(capsule).__name__ == "PyCapsule"
        if backend == "cuda" and kind != AllocType.DEVICE:
            assert (np.from_dlpack(buffer) == 5).all()  # NumPy takes CUDA pinned and managed memory
        out = np.zeros(64, np.uint8)
        buffer.copy_to(out)
        assert (out == 5).all()
        copied = np.from_dlpack(buffer, device="cpu", copy=True) if kind == AllocType.DEVICE else None
        assert copied is None or (copied == 5).all()


def test_copies_between_host_and_gpus(backend: str) -> None:
    gpu0, gpu1 = offloadrt.devices(backend)
    data = np.arange(100, dtype=np.float64)
    a = offloadrt.asarray(data, gpu0)
    b = offloadrt.asarray(a, gpu1)  # GPU to GPU
    on_host = offloadrt.asarray(b, "host")
    assert (on_host.numpy() == data).all() and (b.numpy() == data).all() and b.device is gpu1
    with gpu1.queue() as queue:
        b.buffer.copy_from(np.zeros(100), queue)
        queue.sync()
        source_queue = gpu0.queue()
        a.buffer.copy_to(b.buffer, source_queue)  # a copy between GPUs runs on the source GPU's queue
        queue.wait(source_queue.record())
        assert (b.numpy(queue) == data).all()
        source_queue.close()
        with pytest.raises(OffloadError) as info:
            a.buffer.fill(0, queue)
        assert info.value.code == ErrorCode.INVALID_DEVICE


def test_cuda_array_interface_and_stream_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    _runtime.shutdown()
    cuda_standin.install(monkeypatch, devices=2)
    try:
        gpu = offloadrt.device("cuda:1")
        queue = gpu.queue()
        version, stream = queue.__cuda_stream__()
        assert version == 0 and isinstance(stream, int) and stream not in (0, 1, 2)
        driver = cuda_standin.driver
        assert driver.cuStreamQuery(driver.CUstream(stream))[0] == driver.CUresult.CUDA_SUCCESS  # a real stream
        a = offloadrt.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), queue=queue)
        cai = a.__cuda_array_interface__
        assert set(cai) == {"shape", "typestr", "data", "version", "strides", "stream"}
        assert cai["version"] == 3 and cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["strides"] is None
        assert cai["data"] == (a.ptr, False) and isinstance(cai["data"][0], int)
        assert cai["stream"] == stream  # the array's queue: consumers order their work after it
        queue.sync()
        assert np.frombuffer(cuda_standin.read(cai["data"][0], 48), np.float32).tolist() == list(range(12))
        plain = offloadrt.empty(4, np.int16, gpu)
        assert plain.__cuda_array_interface__["stream"] is None and plain.__cuda_array_interface__["typestr"] == "<i2"
        assert offloadrt.empty(0, np.float32, gpu).__cuda_array_interface__["data"] == (0, False)
        pinned = offloadrt.core.Array(gpu.allocate(16, AllocType.HOST), 4, np.float32)
        assert pinned.__cuda_array_interface__["data"][0] == pinned.ptr  # pinned memory is device-accessible too
        busy = gpu.queue()
        gate = threading.Event()
        busy.host_function(gate.wait, 10)
        late = offloadrt.empty(4, np.float32, queue=busy)
        busy.close()  # closed with work pending: the interface names no stream, so it waits first
        threading.Timer(0.05, gate.set).start()
        assert late.__cuda_array_interface__["stream"] is None and gate.is_set()
        assert a.__dlpack_device__() == (2, 1)
        capsule = a.__dlpack__(stream=stream, max_version=(1, 0))  # the consumer uses our stream: no wait
        assert type(capsule).__name__ == "PyCapsule"
        del capsule  # unconsumed: the export ends with it (one still alive at shutdown would be warned about)
        with pytest.raises(BufferError):
            a.__dlpack__(dl_device=(10, 0))
        queue.close()
    finally:
        _runtime.shutdown()
        cuda_standin.shutdown()


def test_no_cuda_interfaces_elsewhere(backend: str) -> None:
    gpu = offloadrt.device(backend)
    queue = gpu.queue()
    array = offloadrt.empty(4, np.float32, gpu)
    host_array = offloadrt.empty(4, np.float32, "host")
    assert not hasattr(host_array, "__cuda_array_interface__")
    assert hasattr(queue, "__cuda_stream__") == (backend == "cuda")
    assert hasattr(array, "__cuda_array_interface__") == (backend == "cuda")
    queue.close()


def test_dlpack_export_waits_for_the_arrays_queue_unless_told_not_to(backend: str) -> None:
    gpu = offloadrt.device(backend)
    queue = gpu.queue()
    gate = threading.Event()
    array = offloadrt.empty(4, np.float32, queue=queue)
    queue.host_function(gate.wait, 10)
    array.__dlpack__(stream=-1, max_version=(1, 0))  # the consumer synchronises itself
    assert not queue.done
    threading.Timer(0.05, gate.set).start()
    array.__dlpack__(stream=None, max_version=(1, 0))  # the legacy default stream: we wait for our queue
    assert queue.done
    queue.close()


def test_launch_on_a_gpu_passes_the_packed_blob(backend: str) -> None:
    standin = BACKENDS[backend][0]
    seen: list[tuple[Any, ...]] = []

    def saxpy(params: bytes, grid: Any, block: Any, shared: int, device: int) -> None:
        a, x, y, n = struct.unpack("<f4xQQI", params)  # the parameters, without the struct's tail padding
        xs = (ctypes.c_float * n).from_address(x)
        ys = (ctypes.c_float * n).from_address(y)
        for i in range(n):
            ys[i] = a * xs[i] + ys[i]
        seen.append((grid, block, shared, device))

    standin.register_kernel("saxpy", saxpy)
    gpu = offloadrt.device(f"{backend}:1")
    kernel = gpu.load(image(backend, kernels=["saxpy"])).kernel("saxpy")
    kernel.signature = ("float32", "ptr", "ptr", "uint32")
    x = offloadrt.asarray(np.arange(8, dtype=np.float32), gpu)
    y = offloadrt.asarray(np.ones(8, dtype=np.float32), gpu)
    with gpu.queue() as queue:
        queue.launch(kernel, (2, 1), 4, 2.0, x, y, 8, shared_mem=128)
        queue.launch(kernel, (2, 1), 4, 2.0, x, y, 8, shared_mem=128)  # the compiled launcher
    assert (y.numpy() == 4 * np.arange(8) + 1).all()
    assert seen == [((2, 1, 1), (4, 1, 1), 128, 1)] * 2


def test_the_pool_on_a_gpu_retries_after_out_of_memory(backend: str) -> None:
    standin = BACKENDS[backend][0]
    gpu = offloadrt.device(backend)
    pool = gpu.memory_pool
    first = gpu.allocate(1000)
    address = first.ptr
    first.close()
    again = gpu.allocate(900)
    assert again.ptr == address
    again.close()
    assert pool.cached_bytes == 1024
    failure = (cuda_standin.driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY if backend == "cuda"
               else hip_standin.hip.hipError_t.hipErrorOutOfMemory)
    standin.inject("cuMemAlloc" if backend == "cuda" else "hipMalloc", failure)
    with gpu.allocate(5000) as buffer:  # fails once, the pool gives its cache back, the retry works
        assert buffer.nbytes == 5000 and pool.cached_bytes == 0
    standin.inject("cuMemAlloc" if backend == "cuda" else "hipMalloc", failure, times=2)
    with pytest.raises(OffloadError) as info:
        gpu.allocate(70_000)
    assert info.value.code == ErrorCode.OUT_OF_RESOURCES and "gave back its cache" in info.value.details


HOST_FUNCTION = {"cuda": "cuLaunchHostFunc", "amdgpu": "hipLaunchHostFunc"}
EVENT_CREATE = {"cuda": "cuEventCreate", "amdgpu": "hipEventCreateWithFlags"}
UNTIMED = {"cuda": int(cuda_standin.driver.CUevent_flags.CU_EVENT_DISABLE_TIMING),
           "amdgpu": int(hip_standin.hip.hipEventDisableTiming)}


def test_queued_copies_and_plain_events_make_no_host_function_and_no_timed_event(backend: str) -> None:
    """On an H100 a driver callback cost some 50 us per copy and a timed event four times an untimed
    one: queued copies hold their host objects without a host function, and plain events are untimed."""
    standin = BACKENDS[backend][0]
    gpu = offloadrt.device(backend)
    buffer = gpu.allocate(8)
    out = np.zeros(2, np.int32)
    standin.calls.clear()
    with gpu.queue() as queue:
        for index in range(300):
            buffer.copy_from(np.array([index, -index], np.int32), queue)
            buffer.copy_to(out, queue)
        queue.record().sync()
    names = [name for name, _ in standin.calls]
    assert names.count(HOST_FUNCTION[backend]) == 0
    assert {int(args[0]) for name, args in standin.calls if name == EVENT_CREATE[backend]} <= {UNTIMED[backend]}
    assert list(out) == [299, -299]
    timed = gpu.queue()
    standin.calls.clear()
    start, end = timed.record(timing=True), timed.record(timing=True)
    assert end - start >= 0.0
    assert [int(args[0]) for name, args in standin.calls if name == EVENT_CREATE[backend]] == [0, 0]  # timed
    timed.close()
    buffer.close()
