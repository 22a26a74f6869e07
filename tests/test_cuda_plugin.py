"""The CUDA plugin's own logic, through the public ``ol*`` API, on stand-in GPUs (no GPU needed).

``tests/cuda_standin`` replaces ``cuda.bindings.driver`` and follows the driver's documented
behaviour (per-thread current contexts, stream order, NOT_READY while work is pending, sticky
faults); these tests check what the plugin does with it: discovery, device info, contexts on any
thread, stream and event pools, queue recycling, memory, programs, launches, events, host
functions, asynchronous errors and error mapping. The last test replays every driver call the
plugin made against the real ``cuda.bindings.driver`` to prove the arguments convert.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import io
import json
import re
import struct
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from typing import Any

import cuda_standin as standin
import pytest
from cuda_fixtures import (
    GLOBAL,
    KERNEL,
    PTX,
    WAIT,
    CUresult,
    Runtime,
    call_key,
    call_names,
    calls_of,
    count,
    cubin,
    cuda_device,
    fatbin,
    faulting_kernel,
    host_buffer,
    in_new_thread,
    launch_size,
    plugin_driver_calls,
    program,
    ptx,
    recorder,
    representative_workload,
    shut_down_fully,
    spin,
    stand_in_runtime,
    to_real,
)
from cuda_standin import DeviceSpec

from offloadrt import (
    AllocType,
    DeviceInfo,
    DeviceType,
    Dimensions,
    ErrorCode,
    EventInfo,
    FpCapabilityFlag,
    MemInfo,
    OffloadError,
    PlatformBackend,
    PlatformInfo,
    QueueInfo,
    SymbolInfo,
    api,
)
from offloadrt.__main__ import main as offloadrt_main
from offloadrt.plugins.cuda import driver as cuda_driver

REINIT = "re-initialised"  # what every error of a poisoned device says


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """A runtime on two default stand-in GPUs (compute capability 9.0)."""
    with stand_in_runtime(monkeypatch, devices=2) as runtime:
        yield runtime


def expect(code: ErrorCode, fn: Callable[..., Any], *args: Any) -> OffloadError:
    """``fn(*args)`` (on a helper thread, bounded by a timeout) must raise ``code``."""
    with pytest.raises(OffloadError) as info:
        in_new_thread(fn, *args)
    assert info.value.code == code, f"expected {code.name}, got {info.value!r}"
    return info.value


def info_output(*argv: str) -> str:
    """What ``python -m offloadrt info`` prints, run in-process."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert offloadrt_main(["info", *argv]) == 0
    return out.getvalue()


# ---- discovery -------------------------------------------------------------------------------------

def test_without_cuda_bindings_the_platform_has_no_devices_and_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("cuda", "cuda.bindings", "cuda.bindings.driver"):
        monkeypatch.setitem(sys.modules, name, None)  # `import cuda.bindings.driver` raises ImportError
    with pytest.raises(ImportError):
        importlib.import_module("cuda.bindings.driver")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # never an exception, not even a warning
        api.olInit()
        try:
            assert Runtime().gpus == []
        finally:
            api.olShutDown()
        text = info_output()
    assert re.search(r"cuda: cuda-bindings is not installed .*offloadrt\[cuda\]", text), text
    assert "Num Devices: 1" in text


@pytest.mark.parametrize(("reset_args", "reason"), [
    ({"library_missing": True}, "the NVIDIA driver library (libcuda) was not found or could not be loaded"),
    ({"init_error": CUresult.CUDA_ERROR_NO_DEVICE}, "cuInit: no CUDA-capable device is present"),
    ({"devices": 0}, "cuInit: no CUDA-capable device is present"),
    ({"init_error": CUresult.CUDA_ERROR_UNKNOWN}, "cuInit failed: CUDA_ERROR_UNKNOWN"),
], ids=["library-missing", "no-device-error", "zero-devices", "cuinit-fails"])
def test_a_driver_that_cannot_start_gives_zero_devices_and_a_reason(
        monkeypatch: pytest.MonkeyPatch, reset_args: dict[str, Any], reason: str) -> None:
    standin.install(monkeypatch, **reset_args)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            api.olInit()
            try:
                assert Runtime().gpus == []
            finally:
                api.olShutDown()
            text = info_output()
            report = json.loads(info_output("--json"))
    finally:
        standin.shutdown()
    assert f"cuda: {reason}" in text, text
    assert reason in report["Unavailable Platforms"]["cuda"]
    assert report["Num Devices"] == 1


def test_a_host_only_init_never_calls_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    standin.install(monkeypatch)
    try:
        api.olInit(platforms=[PlatformBackend.HOST])
        try:
            assert Runtime().gpus == []
        finally:
            api.olShutDown()
        assert standin.calls == []
    finally:
        standin.shutdown()


def test_a_device_that_fails_to_start_leaves_no_context_retained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device whose setup fails after its primary context was retained must release it: a
    retained primary context holds device memory until the process exits."""
    standin.install(monkeypatch, devices=2)
    standin.inject("cuDeviceGetName", CUresult.CUDA_ERROR_UNKNOWN, skip=1)  # the second device's setup fails
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a plugin that fails to start may warn, never raise
            api.olInit()
        try:
            if not Runtime().gpus:
                assert "cuDeviceGetName: CUDA_ERROR_UNKNOWN" in info_output()
        finally:
            api.olShutDown()
        retained = {device.ordinal: device.context.refcount for device in standin.state().devices}
        assert retained == {0: 0, 1: 0}, f"primary contexts still retained after olShutDown: {retained}"
    finally:
        standin.shutdown()


# ---- device info ----------------------------------------------------------------------------------

ALPHA = DeviceSpec(name="Alpha X100", uuid=bytes(range(16)), compute_capability=(8, 6), total_memory=24 << 30,
                   attributes={"MULTIPROCESSOR_COUNT": 84, "CLOCK_RATE": 1695000, "MEMORY_CLOCK_RATE": 9751000,
                               "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 99 * 1024})
BETA = DeviceSpec(name="Beta Y2", uuid=bytes(range(0xF0, 0x100)), compute_capability=(5, 0), total_memory=4 << 30,
                  attributes={"MULTIPROCESSOR_COUNT": 16, "CLOCK_RATE": 1000500, "MEMORY_CLOCK_RATE": 3505000,
                              "MAX_THREADS_PER_BLOCK": 512, "MAX_BLOCK_DIM_X": 512, "MAX_BLOCK_DIM_Y": 256,
                              "MAX_BLOCK_DIM_Z": 32, "MAX_GRID_DIM_X": 65535,
                              "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 0})


def test_device_info_comes_from_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=[ALPHA, BETA], driver_version=12080) as runtime:
        alpha, beta = runtime.gpus
        expected = {
            alpha: {DeviceInfo.NAME: "Alpha X100", DeviceInfo.PRODUCT_NAME: "Alpha X100",
                    DeviceInfo.UID: "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f",
                    DeviceInfo.NUM_COMPUTE_UNITS: 84, DeviceInfo.MAX_CLOCK_FREQUENCY: 1695,
                    DeviceInfo.MEMORY_CLOCK_RATE: 9751, DeviceInfo.GLOBAL_MEM_SIZE: 24 << 30,
                    DeviceInfo.MAX_MEM_ALLOC_SIZE: 24 << 30, DeviceInfo.MAX_WORK_GROUP_SIZE: 1024,
                    DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(1024, 1024, 64),
                    DeviceInfo.MAX_WORK_SIZE: 0xFFFFFFFF, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: 99 * 1024,
                    DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(0xFFFFFFFF, 65535 * 1024, 65535 * 64)},
            beta: {DeviceInfo.NAME: "Beta Y2", DeviceInfo.PRODUCT_NAME: "Beta Y2",
                   DeviceInfo.UID: "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff",
                   DeviceInfo.NUM_COMPUTE_UNITS: 16, DeviceInfo.MAX_CLOCK_FREQUENCY: 1000,
                   DeviceInfo.MEMORY_CLOCK_RATE: 3505, DeviceInfo.GLOBAL_MEM_SIZE: 4 << 30,
                   DeviceInfo.MAX_MEM_ALLOC_SIZE: 4 << 30, DeviceInfo.MAX_WORK_GROUP_SIZE: 512,
                   DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(512, 256, 32),
                   DeviceInfo.MAX_WORK_SIZE: 65535 * 512,
                   DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(65535 * 512, 65535 * 256, 65535 * 32),
                   DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: 48 * 1024},  # no opt-in: the per-block limit
        }
        for device, values in expected.items():
            for prop, value in values.items():
                assert api.olGetDeviceInfo(device, prop) == value, prop.name
            assert api.olGetDeviceInfo(device, DeviceInfo.TYPE) == DeviceType.GPU
            assert api.olGetDeviceInfo(device, DeviceInfo.VENDOR) == "NVIDIA Corporation"
            assert api.olGetDeviceInfo(device, DeviceInfo.VENDOR_ID) == 0x10DE
            version = api.olGetDeviceInfo(device, DeviceInfo.DRIVER_VERSION)
            assert "12.8" in version and "12080" in version
            uid = api.olGetDeviceInfo(device, DeviceInfo.UID)
            assert api.olGetDeviceInfoSize(device, DeviceInfo.UID) == len(uid) + 1
            platform = api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)
            assert api.olGetPlatformInfo(platform, PlatformInfo.VERSION) == version
            assert api.olGetPlatformInfo(platform, PlatformInfo.VENDOR_NAME) == "NVIDIA Corporation"
        assert api.olGetDeviceInfo(alpha, DeviceInfo.HALF_FP_CONFIG) != FpCapabilityFlag(0)  # sm_86 has fp16
        assert api.olGetDeviceInfo(beta, DeviceInfo.HALF_FP_CONFIG) == FpCapabilityFlag(0)  # sm_50 has not
        assert api.olGetDeviceInfo(beta, DeviceInfo.NATIVE_VECTOR_WIDTH_HALF) == 0
        text = info_output()
        devices = json.loads(info_output("--json"))["Devices"]
    for shown in ("[Alpha X100]", "[Beta Y2]", "UID: GPU-00010203-0405-0607-0809-0a0b0c0d0e0f",
                  "Max Clock Frequency: 1695 MHz", "Memory Clock Rate: 3505 MHz", "Num Compute Units: 84",
                  "Compute Capability: 8.6 (sm_86)", "Compute Capability: 5.0 (sm_50)", "Driver Version: CUDA 12.8"):
        assert shown in text, (shown, text)
    gpus = {d["Name"]: d for d in devices if d["Type"] == "GPU"}
    assert gpus["Beta Y2"]["Global Mem Size"] == 4 << 30
    assert gpus["Alpha X100"]["Details"]["Compute Capability"] == "8.6 (sm_86)"


# ---- contexts -------------------------------------------------------------------------------------

def test_each_device_retains_its_primary_context_and_releases_it_at_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = standin.install(monkeypatch, devices=2)
    try:
        assert int(driver.cuInit(0)[0]) == 0
        assert int(driver.cuDevicePrimaryCtxRetain(1)[0]) == 0  # another library already uses device 1
        api.olInit()
        try:
            contexts = standin.state().devices
            assert [device.context.refcount for device in contexts] == [1, 2]
            # Blocking sync is set only on a context that was not active yet.
            assert [int(args[0]) for args in calls_of("cuDevicePrimaryCtxSetFlags")] == [0]
            assert contexts[0].context.flags == int(driver.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC)
        finally:
            in_new_thread(shut_down_fully)
        assert [device.context.refcount for device in standin.state().devices] == [0, 1]  # only its own
    finally:
        standin.shutdown()


def exercise(rt: Runtime, device: api.Device, tag: int) -> None:
    """Every kind of operation on ``device``, checked (the stand-in refuses calls made without the
    device's context current on the calling thread)."""
    seen, body = recorder()
    standin.register_kernel("record", body)
    data = bytes((tag + i) % 256 for i in range(64))
    source, source_address = host_buffer(data)
    target, target_address = host_buffer(64)
    pointer = api.olMemAlloc(device, AllocType.DEVICE, 64)
    ordinal = standin.state().allocations[pointer].device.ordinal
    assert ordinal == cuda_device(device).device_id  # allocated in this device's context
    queue = api.olCreateQueue(device)
    api.olMemcpy(queue, pointer, device, source_address, rt.host, 64)
    api.olMemFill(queue, pointer + 32, bytes([tag]), 16)
    api.olMemcpy(queue, target_address, rt.host, pointer, device, 64)
    prog = program(device)
    api.olLaunchKernel(queue, device, api.olGetSymbol(prog, "record", KERNEL), struct.pack("<I", tag), launch_size())
    ran = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    event = api.olCreateEvent(queue)
    api.olSyncEvent(event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    api.olSyncQueue(queue)
    assert api.olQueryQueue(queue) is True and ran.is_set()
    assert target.raw == data[:32] + bytes([tag]) * 16 + data[48:]
    assert seen[-1][0] == struct.pack("<I", tag) and seen[-1][4] == ordinal
    api.olDestroyEvent(event)
    api.olDestroyProgram(prog)
    api.olDestroyQueue(queue)
    api.olMemFree(pointer)


def test_every_operation_works_from_a_brand_new_thread(rt: Runtime) -> None:
    for tag, device in enumerate(rt.gpus + rt.gpus):
        in_new_thread(exercise, rt, device, tag)


def test_two_devices_used_alternately_from_one_new_thread(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    queue = api.olCreateQueue(gpu0)  # made on the main thread, used from another

    def alternate() -> None:
        for round_ in range(3):
            for tag, device in enumerate((gpu0, gpu1, gpu1, gpu0)):
                exercise(rt, device, 10 * round_ + tag)
        pointers = [api.olMemAlloc(device, AllocType.DEVICE, 16) for device in (gpu0, gpu1, gpu0, gpu1)]
        owners = [standin.state().allocations[p].device.ordinal for p in pointers]
        assert owners == [0, 1, 0, 1]
        api.olMemFill(queue, pointers[0], b"\x5a", 16)
        api.olSyncQueue(queue)
        for pointer in pointers:
            api.olMemFree(pointer)

    in_new_thread(alternate)
    assert api.olQueryQueue(queue) is True
    api.olDestroyQueue(queue)


# ---- pools and queue recycling -------------------------------------------------------------------

def test_streams_and_events_come_from_per_device_pools(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    streams, events = count("cuStreamCreate"), count("cuEventCreate")
    for _ in range(25):
        api.olDestroyQueue(api.olCreateQueue(gpu0))
    assert count("cuStreamCreate") == streams + 1  # one stream, reused
    live = [api.olCreateQueue(gpu0) for _ in range(3)]  # the pool grows on demand
    assert count("cuStreamCreate") == streams + 3
    for queue in live:
        api.olDestroyQueue(queue)
    live = [api.olCreateQueue(gpu0) for _ in range(3)]
    assert count("cuStreamCreate") == streams + 3
    for _ in range(25):
        api.olDestroyEvent(api.olCreateEvent(live[0]))
    assert count("cuEventCreate") == events + 1
    held = [api.olCreateEvent(queue) for queue in live]
    assert count("cuEventCreate") == events + 3
    api.olDestroyQueue(api.olCreateQueue(gpu1))  # gpu1 has its own pool
    assert count("cuStreamCreate") == streams + 4
    for event in held:
        api.olDestroyEvent(event)
    shut_down_fully()
    # De-init destroys every pooled stream and event, in its own context.
    assert count("cuStreamDestroy") == count("cuStreamCreate") == streams + 4
    assert count("cuEventDestroy") == count("cuEventCreate") == events + 3
    assert sorted(int(args[0]) for args in calls_of("cuDevicePrimaryCtxRelease")) == [0, 1]
    assert standin.state().streams == {} and standin.state().events == {}


def test_a_destroyed_busy_queue_is_parked_its_work_completes_and_its_stream_is_reused(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    source, source_address = host_buffer(b"parked queue data")
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 32)
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    api.olMemcpy(queue, pointer, gpu, source_address, rt.host, len(source.raw))
    done = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: done.set())
    last = api.olCreateEvent(queue)  # events outlive their queue
    gate.wait_entered()
    busy_stream = calls_of("cuLaunchHostFunc")[-1][0]
    streams = count("cuStreamCreate")
    api.olDestroyQueue(queue)  # returns at once: the stream is parked
    assert not done.is_set()
    other = api.olCreateQueue(gpu)  # the parked stream is busy: a new one
    assert count("cuStreamCreate") == streams + 1
    gate.open()
    in_new_thread(api.olSyncEvent, last)  # the parked stream has drained
    assert done.is_set(), "the parked queue's work never completed"
    assert standin.read(pointer, len(source.raw)) == source.raw
    reused = api.olCreateQueue(gpu)  # the parked stream has finished: it is taken again
    assert count("cuStreamCreate") == streams + 1
    api.olLaunchHostFunction(reused, lambda _: None)
    assert calls_of("cuLaunchHostFunc")[-1][0] == busy_stream
    in_new_thread(api.olSyncQueue, reused)
    api.olDestroyQueue(reused)
    api.olDestroyQueue(other)


def test_queue_emptiness_follows_cuStreamQuery(rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    gate = rt.gate(queue)
    gate.wait_entered()
    queries = count("cuStreamQuery")
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is False
    assert api.olQueryQueue(queue) is False
    assert count("cuStreamQuery") == queries + 2
    gate.open()
    in_new_thread(api.olSyncQueue, queue)
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    standin.inject("cuStreamQuery", CUresult.CUDA_ERROR_NOT_READY, times=2)  # the driver says: still busy
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is False
    assert api.olQueryQueue(queue) is False
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    assert api.olQueryQueue(queue) is True
    api.olDestroyQueue(queue)


# ---- memory ---------------------------------------------------------------------------------------

ALLOC_CALLS = [(AllocType.DEVICE, "cuMemAlloc", "cuMemFree", "device"),
               (AllocType.HOST, "cuMemAllocHost", "cuMemFreeHost", "host"),
               (AllocType.MANAGED, "cuMemAllocManaged", "cuMemFree", "managed")]


@pytest.mark.parametrize(("kind", "alloc_call", "free_call", "standin_kind"), ALLOC_CALLS,
                         ids=[k.name for k, *_ in ALLOC_CALLS])
def test_each_allocation_kind_uses_its_driver_calls(rt: Runtime, kind: AllocType, alloc_call: str, free_call: str,
                                                    standin_kind: str) -> None:
    for ordinal, device in enumerate(rt.gpus):
        pointer = api.olMemAlloc(device, kind, 4096)
        assert calls_of(alloc_call)[-1][0] == 4096
        alloc = standin.state().allocations[pointer]
        assert (alloc.kind, alloc.size, alloc.device.ordinal) == (standin_kind, 4096, ordinal)
        assert api.olGetMemInfo(pointer + 100, MemInfo.BASE) == pointer
        assert api.olGetMemInfo(pointer, MemInfo.TYPE) == kind
        assert api.olGetMemInfo(pointer, MemInfo.DEVICE) is device
        frees = count(free_call)
        api.olMemFree(pointer)
        assert count(free_call) == frees + 1 and int(calls_of(free_call)[-1][0]) == pointer
        assert pointer not in standin.state().allocations


@pytest.mark.parametrize(("kind", "alloc_call"), [(k, c) for k, c, *_ in ALLOC_CALLS],
                         ids=[k.name for k, *_ in ALLOC_CALLS])
def test_out_of_memory_is_out_of_resources(rt: Runtime, kind: AllocType, alloc_call: str) -> None:
    standin.inject(alloc_call, CUresult.CUDA_ERROR_OUT_OF_MEMORY)
    err = expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, rt.gpus[0], kind, 1024)
    assert "CUDA_ERROR_OUT_OF_MEMORY" in err.details and alloc_call in err.details, err
    api.olMemFree(api.olMemAlloc(rt.gpus[0], kind, 1024))  # the device still works


def test_an_exhausted_device_budget_is_out_of_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=[DeviceSpec(memory_budget=1 << 20)]) as runtime:
        err = expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, runtime.gpus[0], AllocType.DEVICE, 2 << 20)
        assert "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY" in err.details
        api.olMemFree(api.olMemAlloc(runtime.gpus[0], AllocType.DEVICE, 1 << 19))


@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_memcpy_in_every_direction(rt: Runtime, with_queue: bool) -> None:
    gpu0, gpu1 = rt.gpus
    host = rt.host
    queues = {gpu: api.olCreateQueue(gpu) for gpu in rt.gpus} if with_queue else {}
    size = 4096 + 3
    data = bytes((i * 7 + 1) % 256 for i in range(size))
    source, source_address = host_buffer(data)
    back, back_address = host_buffer(size)
    a0, b0 = (api.olMemAlloc(gpu0, AllocType.DEVICE, size) for _ in range(2))
    a1 = api.olMemAlloc(gpu1, AllocType.DEVICE, size)
    pinned = api.olMemAlloc(gpu1, AllocType.HOST, size)
    managed = api.olMemAlloc(gpu0, AllocType.MANAGED, size)

    def copy(dst: int, dst_device: api.Device, src: int, src_device: api.Device, driver_call: str) -> None:
        performer = dst_device if src_device is host else src_device
        before = count(driver_call)
        api.olMemcpy(queues.get(performer), dst, dst_device, src, src_device, size)
        if with_queue:
            in_new_thread(api.olSyncQueue, queues[performer])
        assert count(driver_call) == before + 1, driver_call
        if with_queue:
            assert calls_of(driver_call)[-1][-1] in [q._ai.stream for q in queues.values()]

    copy(a0, gpu0, source_address, host, "cuMemcpyHtoDAsync")  # host -> device
    assert standin.read(a0, size) == data
    copy(b0, gpu0, a0, gpu0, "cuMemcpyDtoDAsync")  # device -> same device
    assert standin.read(b0, size) == data
    copy(a1, gpu1, b0, gpu0, "cuMemcpyPeerAsync")  # device -> other device
    assert standin.read(a1, size) == data
    dst, dst_ctx, src, src_ctx, nbytes, _stream = calls_of("cuMemcpyPeerAsync")[-1]
    assert (dst, src, nbytes) == (a1, b0, size)
    assert (int(dst_ctx), int(src_ctx)) == (cuda_device(gpu1).context_value, cuda_device(gpu0).context_value)
    standin.write(b0, bytes(size))
    copy(managed, gpu0, a1, gpu1, "cuMemcpyPeerAsync")  # and back the other way
    assert standin.read(managed, size) == data
    copy(back_address, host, managed, gpu0, "cuMemcpyDtoHAsync")  # device -> host
    assert back.raw == data
    copy(pinned, host, a1, gpu1, "cuMemcpyDtoHAsync")  # into pinned host memory
    assert standin.read(pinned, size) == data
    assert count("cuCtxEnablePeerAccess") == 2  # once per direction, then remembered
    copy(a1, gpu1, a0, gpu0, "cuMemcpyPeerAsync")
    assert count("cuCtxEnablePeerAccess") == 2
    for queue in queues.values():
        api.olDestroyQueue(queue)
    for pointer in (a0, b0, a1, pinned, managed):
        api.olMemFree(pointer)


def test_peer_copies_work_without_direct_peer_access(monkeypatch: pytest.MonkeyPatch) -> None:
    no_peers = [DeviceSpec(peers=set()), DeviceSpec(peers=set())]
    with stand_in_runtime(monkeypatch, devices=no_peers) as runtime:
        gpu0, gpu1 = runtime.gpus
        a0, a1 = api.olMemAlloc(gpu0, AllocType.DEVICE, 64), api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
        standin.write(a0, bytes(range(64)))
        api.olMemcpy(None, a1, gpu1, a0, gpu0, 64)
        assert standin.read(a1, 64) == bytes(range(64))
        assert count("cuMemcpyPeerAsync") == 1 and count("cuCtxEnablePeerAccess") == 0


FILL_WIDTHS = [1, 2, 4, 3, 6, 8, 12, 16, 17]


@pytest.mark.parametrize("width", FILL_WIDTHS, ids=[f"pattern{w}" for w in FILL_WIDTHS])
def test_fill_writes_the_pattern_exactly(rt: Runtime, width: int) -> None:
    """Every pattern size at aligned and odd addresses, with and without a queue: the filled bytes
    are the pattern repeated, the bytes around them untouched; 1/2/4-byte patterns at aligned
    addresses use the driver's memsets, others strided 2-D lanes."""
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    pattern = bytes((0x81 + 37 * i) % 256 for i in range(width))
    copies = 7
    size = 512
    problems: list[str] = []
    for offset in (0, 1, 2, 3, 4):
        for use_queue in (False, True):
            pointer = api.olMemAlloc(gpu, AllocType.DEVICE, size)
            standin.write(pointer, b"\xee" * size)
            names = len(standin.calls)
            where = f"offset {offset}, {'queue' if use_queue else 'no queue'}"
            try:
                api.olMemFill(queue if use_queue else None, pointer + 16 + offset, pattern, width * copies)
                if use_queue:
                    in_new_thread(api.olSyncQueue, queue)
            except OffloadError as exc:
                problems.append(f"{where}: {exc}")
                api.olMemFree(pointer)
                continue
            expected = b"\xee" * (16 + offset) + pattern * copies
            expected += b"\xee" * (size - len(expected))
            got = standin.read(pointer, size)
            if got != expected:
                problems.append(f"{where}: wrote {got[:16 + offset + width * copies + 4].hex()}")
            used = {name for name in call_names()[names:] if name.startswith("cuMemset")}
            if width in (1, 2, 4) and (16 + offset) % width == 0:
                if used != {f"cuMemsetD{8 * width}Async"}:
                    problems.append(f"{where}: driver calls {sorted(used)}, not one memset of the pattern")
            elif width not in (1, 2, 4) and not (used and all(name.startswith("cuMemsetD2D") for name in used)):
                problems.append(f"{where}: driver calls {sorted(used)}, not strided 2-D lanes")
            api.olMemFree(pointer)
    api.olDestroyQueue(queue)
    assert not problems, "\n".join(problems)


# ---- registered host memory ---------------------------------------------------------------------
# olMemRegister pins with cuMemHostRegister(PORTABLE | DEVICEMAP) and answers the device address
# from cuMemHostGetDevicePointer; the generic layer counts users of a range per device, the GPU
# layer counts the devices of the plugin that use one driver registration.

PORTABLE_MAPPED = 0x1 | 0x2  # CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP
NO_HOST_POINTERS = DeviceSpec(attributes={"CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 0})


def registered() -> dict[int, tuple[int, int]]:
    """The stand-in's registered host memory: {host address: (size, device address)}."""
    state = standin.state()
    with state.lock:
        return {host: (r.size, r.device_ptr) for host, r in state.registered.items()}


@pytest.mark.parametrize("own_addresses", [False, True], ids=["host-addresses", "device-addresses"])
def test_register_pins_the_range_and_answers_the_drivers_device_address(
        monkeypatch: pytest.MonkeyPatch, own_addresses: bool) -> None:
    """The address olMemRegister returns is the driver's (a window of its own where a device cannot
    use host pointers); a range inside it is one more user, at the same offset, with no driver call;
    the driver unpins the range only at the last olMemUnregister."""
    devices = [DeviceSpec(), NO_HOST_POINTERS if own_addresses else DeviceSpec()]
    with stand_in_runtime(monkeypatch, devices=devices) as runtime:
        gpu = runtime.gpus[0]
        buffer, host = host_buffer(8192)
        pinned = api.olMemRegister(gpu, host, 8192)
        assert registered() == {host: (8192, pinned)}
        assert (pinned != host) == own_addresses
        assert calls_of("cuMemHostRegister") == [(host, 8192, PORTABLE_MAPPED)]
        assert [int(args[0]) for args in calls_of("cuMemHostGetDevicePointer")] == [host]
        inner = api.olMemRegister(gpu, host + 4096, 64)
        again = api.olMemRegister(gpu, host, 8192)
        assert (inner, again) == (pinned + 4096, pinned)
        assert count("cuMemHostRegister") == 1 and count("cuMemHostGetDevicePointer") == 1
        for ptr in (host + 4096, host):
            api.olMemUnregister(gpu, ptr)
            assert registered() == {host: (8192, pinned)}, "unpinned while it had users"
        api.olMemUnregister(gpu, host + 100)  # any address inside names the range
        assert registered() == {} and [int(args[0]) for args in calls_of("cuMemHostUnregister")] == [host]
        expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu, host)


def test_a_partial_overlap_is_invalid_argument_and_registers_nothing(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    buffer, host = host_buffer(1024)
    api.olMemRegister(gpu0, host + 256, 256)
    for device, start, size in ((gpu0, host + 384, 256), (gpu0, host, 512), (gpu1, host + 384, 256),
                                (gpu1, host, 1024)):
        err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, device, start, size)
        assert "only in part" in err.details, err
        if device is gpu1:  # registered with the other GPU: the driver pins a range once for both
            assert "another CUDA device" in err.details, err
    assert registered() == {host + 256: (256, host + 256)} and count("cuMemHostRegister") == 1
    api.olMemUnregister(gpu0, host + 256)
    assert api.olMemRegister(gpu1, host, 1024) == host  # apart from every registration: fine


def test_unregistering_memory_that_is_not_registered_is_invalid_argument(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    buffer, host = host_buffer(256)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu0, host)
    api.olMemRegister(gpu0, host, 256)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu1, host)  # registered with the other GPU only
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu0, host + 256)
    api.olMemUnregister(gpu0, host)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu0, host)
    assert count("cuMemHostUnregister") == 1 and registered() == {}


def test_registering_inside_a_host_allocation_of_the_device_makes_no_driver_call(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    pinned = api.olMemAlloc(gpu, AllocType.HOST, 4096)
    assert api.olMemRegister(gpu, pinned + 128, 256) == pinned + 128
    assert api.olMemRegister(gpu, pinned, 4096) == pinned
    assert count("cuMemHostRegister") == count("cuMemHostGetDevicePointer") == 0
    api.olMemUnregister(gpu, pinned + 128)
    api.olMemUnregister(gpu, pinned)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu, pinned)  # the allocation's own pin stays
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, gpu, pinned + 4000, 200)  # runs past it
    assert count("cuMemHostUnregister") == 0 and registered() == {}
    api.olMemFree(pinned)


@pytest.mark.parametrize("first_out", [0, 1], ids=["gpu0-first-out", "gpu1-first-out"])
def test_the_gpus_of_the_plugin_share_one_driver_registration(
        monkeypatch: pytest.MonkeyPatch, first_out: int) -> None:
    """The driver pins a host range once for all its devices (a second cuMemHostRegister is
    ALREADY_REGISTERED): the second GPU uses gpu0's registration, and it stays pinned until no
    GPU uses it, whichever lets go first."""
    with stand_in_runtime(monkeypatch, devices=[DeviceSpec(), NO_HOST_POINTERS]) as runtime:
        buffer, host = host_buffer(4096)
        pinned = api.olMemRegister(runtime.gpus[0], host, 4096)
        assert api.olMemRegister(runtime.gpus[1], host, 4096) == pinned
        assert api.olMemRegister(runtime.gpus[1], host + 512, 512) == pinned + 512
        assert count("cuMemHostRegister") == 1
        last_out = 1 - first_out
        for _ in range(2 if first_out else 1):
            api.olMemUnregister(runtime.gpus[first_out], host)
        assert registered() == {host: (4096, pinned)}, "unpinned while the other GPU used it"
        for _ in range(1 if first_out else 2):
            api.olMemUnregister(runtime.gpus[last_out], host)
        assert registered() == {} and count("cuMemHostUnregister") == 1


def test_memory_registered_outside_offloadrt_is_used_as_it_is_and_never_unregistered(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    driver = standin.driver
    buffer, host = host_buffer(1024)
    device = standin.state().devices[0]
    driver.cuCtxSetCurrent(driver.CUcontext(device.context.handle))
    assert int(driver.cuMemHostRegister(host, 512, PORTABLE_MAPPED)[0]) == 0  # another library's pin
    assert api.olMemRegister(gpu1, host + 64, 64) == host + 64
    assert api.olMemRegister(gpu0, host, 512) == host
    api.olMemUnregister(gpu1, host + 64)
    api.olMemUnregister(gpu0, host)
    assert count("cuMemHostUnregister") == 0 and registered() == {host: (512, host)}
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, gpu0, host + 256, 512)  # runs past it
    assert "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED" in err.details and "outside offloadrt" in err.details, err
    assert "another CUDA device" not in err.details, err
    # A HOST allocation of one GPU is pinned memory the other GPU can register as it is.
    other = api.olMemAlloc(gpu1, AllocType.HOST, 256)
    assert api.olMemRegister(gpu0, other + 16, 32) == other + 16
    api.olMemUnregister(gpu0, other + 16)
    api.olMemFree(other)
    assert count("cuMemHostUnregister") == 0


REGISTER_FAILURES = [
    ("cuMemHostRegister", CUresult.CUDA_ERROR_OUT_OF_MEMORY, ErrorCode.OUT_OF_RESOURCES),
    ("cuMemHostRegister", CUresult.CUDA_ERROR_NOT_PERMITTED, ErrorCode.BACKEND_FAILURE),
    ("cuMemHostGetDevicePointer", CUresult.CUDA_ERROR_INVALID_VALUE, ErrorCode.INVALID_ARGUMENT),
]


@pytest.mark.parametrize(("call", "status", "code"), REGISTER_FAILURES,
                         ids=[f"{c}-{s.name}" for c, s, _ in REGISTER_FAILURES])
def test_a_failed_registration_leaves_nothing_registered(rt: Runtime, call: str, status: Any,
                                                         code: ErrorCode) -> None:
    gpu = rt.gpus[0]
    buffer, host = host_buffer(512)
    standin.inject(call, status)
    err = expect(code, api.olMemRegister, gpu, host, 512)
    assert f"{call}: {status.name}" in err.details, err
    assert registered() == {}  # a failed device-address query unregistered what it had pinned
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu, host)
    assert api.olMemRegister(gpu, host, 512) == host  # nothing half-registered is in the way
    api.olMemUnregister(gpu, host)
    assert registered() == {}


def test_a_failed_undo_says_so_and_a_failed_unregister_keeps_the_registration(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    buffer, host = host_buffer(512)
    standin.inject("cuMemHostGetDevicePointer", CUresult.CUDA_ERROR_INVALID_VALUE)
    standin.inject("cuMemHostUnregister", CUresult.CUDA_ERROR_UNKNOWN)
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, gpu, host, 512)
    assert "undoing the registration failed too" in err.details and "CUDA_ERROR_UNKNOWN" in err.details, err
    assert int(standin.driver.cuMemHostUnregister(host)[0]) == 0  # what offloadrt could not undo
    pinned = api.olMemRegister(gpu, host, 512)
    standin.inject("cuMemHostUnregister", CUresult.CUDA_ERROR_UNKNOWN)
    err = expect(ErrorCode.UNKNOWN, api.olMemUnregister, gpu, host)
    assert "cuMemHostUnregister: CUDA_ERROR_UNKNOWN" in err.details
    assert registered() == {host: (512, pinned)}
    api.olMemUnregister(gpu, host)  # still registered: it can be unregistered again
    assert registered() == {}


def test_the_last_shutdown_unregisters_what_is_left(rt: Runtime) -> None:
    """Leftovers are unpinned by olShutDown, a range two GPUs share included (the GPU that pinned
    it is released first, and its context may take the registration along)."""
    gpu0, gpu1 = rt.gpus
    buffers = [host_buffer(256) for _ in range(3)]
    (_, a), (_, b), (_, c) = buffers
    api.olMemRegister(gpu0, a, 256)
    api.olMemRegister(gpu0, a + 16, 16)
    api.olMemRegister(gpu1, b, 256)
    api.olMemRegister(gpu0, c, 256)
    api.olMemRegister(gpu1, c, 256)
    assert len(registered()) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)
    assert registered() == {}
    assert {int(args[0]) for args in calls_of("cuMemHostUnregister")} >= {a, b}


@pytest.mark.parametrize("own_addresses", [False, True], ids=["host-addresses", "device-addresses"])
def test_copies_to_and_from_registered_memory(monkeypatch: pytest.MonkeyPatch, own_addresses: bool) -> None:
    """Registered memory is host memory to olMemcpy (named with the host device) and device memory
    at its registered address (named with the GPU), with and without a queue."""
    devices = [NO_HOST_POINTERS if own_addresses else DeviceSpec(), DeviceSpec()]
    with stand_in_runtime(monkeypatch, devices=devices) as runtime:
        gpu, host_device = runtime.gpus[0], runtime.host
        data = bytes((7 * i + 3) % 256 for i in range(1024))
        buffer, host = host_buffer(data)
        back, back_address = host_buffer(1024)
        pinned = api.olMemRegister(gpu, host, 1024)
        api.olMemRegister(gpu, back_address, 1024)
        device = api.olMemAlloc(gpu, AllocType.DEVICE, 1024)
        queue = api.olCreateQueue(gpu)
        for q in (None, queue):
            standin.write(device, bytes(1024))
            api.olMemcpy(q, device, gpu, host, host_device, 1024)  # host -> device
            api.olMemcpy(q, back_address, host_device, device, gpu, 1024)  # device -> host
            if q is not None:
                in_new_thread(api.olSyncQueue, q)
            assert standin.read(device, 1024) == data and back.raw == data
            standin.write(device, bytes(1024))
            api.olMemcpy(q, device, gpu, pinned + 256, gpu, 512)  # the GPU reads it at its address
            api.olMemcpy(q, pinned, gpu, device, gpu, 256)  # and writes it
            if q is not None:
                in_new_thread(api.olSyncQueue, q)
            assert standin.read(device, 512) == data[256:768]
            assert buffer.raw[:256] == data[256:512]
            buffer.raw = data
        api.olMemFill(queue, pinned + 1000, b"\x5a", 24)
        in_new_thread(api.olSyncQueue, queue)
        assert buffer.raw[1000:] == b"\x5a" * 24
        api.olDestroyQueue(queue)


def test_a_poisoned_device_registers_nothing_and_leaves_its_registrations(rt: Runtime) -> None:
    """As its frees do: a poisoned device makes no driver call to unregister; its context takes the
    registrations along when it is re-initialised."""
    gpu0, gpu1 = rt.gpus
    buffer, host = host_buffer(1024)
    api.olMemRegister(gpu0, host, 512)
    api.olMemRegister(gpu1, host + 512, 512)
    standin.poison(0)
    other, other_address = host_buffer(64)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olMemRegister, gpu0, other_address, 64)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in err.details and REINIT in err.details, err
    api.olMemUnregister(gpu0, host)
    assert count("cuMemHostUnregister") == 0 and host in registered()
    api.olMemUnregister(gpu1, host + 512)  # the other GPU is unaffected
    assert host + 512 not in registered()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)
    assert registered() == {}


# ---- programs -------------------------------------------------------------------------------------

def test_ptx_cubin_and_fatbin_images_load(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    standin.set_binary_symbols(kernels=["vector_add"], globals={"state": 8})
    text = program(gpu, bytearray(PTX))  # not NUL-terminated, not bytes: the plugin copes
    assert count("cuModuleLoadDataEx") == 1
    record = api.olGetSymbol(text, "record", KERNEL)
    assert api.olGetSymbol(text, "record", KERNEL) is record
    assert calls_of("cuModuleGetFunction")[-1][1] == b"record"
    counter = api.olGetSymbol(text, "counter", GLOBAL)
    assert calls_of("cuModuleGetGlobal")[-1][1] == b"counter"
    address = api.olGetSymbolInfo(counter, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert api.olGetSymbolInfo(counter, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 4
    value, value_address = host_buffer(4)
    api.olMemcpy(None, value_address, rt.host, address, gpu, 4)
    assert struct.unpack("<I", value.raw)[0] == 7
    assert api.olGetSymbolInfo(api.olGetSymbol(text, "table", GLOBAL), SymbolInfo.GLOBAL_VARIABLE_SIZE) == 24
    for image in (cubin(90), fatbin()):
        loaded = program(gpu, image)
        api.olGetSymbol(loaded, "vector_add", KERNEL)
        state = api.olGetSymbol(loaded, "state", GLOBAL)
        assert api.olGetSymbolInfo(state, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 8
        api.olDestroyProgram(loaded)
    assert count("cuModuleLoadDataEx") == 3
    for name, kind, call in (("missing", KERNEL, "cuModuleGetFunction"), ("missing", GLOBAL, "cuModuleGetGlobal")):
        err = expect(ErrorCode.NOT_FOUND, api.olGetSymbol, text, name, kind)
        assert "CUDA_ERROR_NOT_FOUND" in err.details and call in err.details and "missing" in err.details


def test_images_the_driver_cannot_load_are_invalid_binaries(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    standin.calls.clear()
    for garbage in (b"not a program image", cubin(machine=62), b"\x7fELF", b".version 8.0\n"):
        err = expect(ErrorCode.INVALID_BINARY, program, gpu, garbage)
        assert "not a CUDA image" in err.details
    assert set(call_names()) <= {"cuCtxSetCurrent"}  # refused without asking the driver to load it
    err = expect(ErrorCode.INVALID_BINARY, program, gpu, PTX + b"// standin-invalid\n")
    assert "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX" in err.details
    assert "JIT log: ptxas fatal : standin: invalid PTX" in err.details, err
    err = expect(ErrorCode.INVALID_BINARY, program, gpu, ptx("sm_100"))
    assert "sm_100" in err.details, err  # the JIT log says why
    assert standin.state().modules == {}


def test_is_valid_binary_answers_without_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=[DeviceSpec(), DeviceSpec(compute_capability=(8, 6))]) as runtime:
        sm90, sm86 = runtime.gpus
        standin.calls.clear()
        cases = [
            (sm90, ptx("sm_90"), True), (sm90, ptx("sm_75"), True), (sm90, ptx("sm_100"), False),
            (sm86, ptx("sm_86"), True), (sm86, ptx("sm_89"), False), (sm86, ptx("sm_90"), False),
            (sm90, cubin(90), True), (sm90, cubin(86), False), (sm90, cubin(100), False),
            (sm86, cubin(80), True), (sm86, cubin(86), True), (sm86, cubin(89), False), (sm86, cubin(90), False),
            (sm90, fatbin(), True), (sm86, fatbin(), True),
            (sm90, b"garbage", False), (sm90, cubin(90, machine=62), False), (sm90, b"\x7fELF", False),
        ]
        answers = [(case, api.olIsValidBinary(device, image)) for case, (device, image, _) in enumerate(cases)]
        assert [answer for _, answer in answers] == [valid for *_, valid in cases], answers
        assert "cuModuleLoadDataEx" not in call_names() and standin.state().modules == {}


def test_destroy_program_unloads_the_module_at_once(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    first, second = program(gpu), program(gpu)
    assert len(standin.state().modules) == 2
    api.olDestroyProgram(first)
    assert count("cuModuleUnload") == 1 and len(standin.state().modules) == 1
    api.olGetSymbol(second, "record", KERNEL)  # the other program is untouched
    api.olDestroyProgram(second)
    assert count("cuModuleUnload") == 2 and standin.state().modules == {}


# ---- launches -------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_launch_passes_the_argument_blob_and_sizes_unchanged(rt: Runtime, with_queue: bool) -> None:
    seen, body = recorder()
    standin.register_kernel("record", body)
    blobs = [struct.pack("<QIB3xd", 0x1122334455667788, 0xDEADBEEF, 0x7F, -2.5),
             bytes(range(256)) * 4 + b"tail",  # larger than the plugin's first argument buffer
             bytearray(b"\x00\x01\x00\xff")]
    shapes = [((2, 3, 4), (32, 2, 1), 1024), ((1, 1, 1), (1024, 1, 1), 0), ((7, 1, 1), (8, 8, 8), 48 * 1024)]
    for ordinal, gpu in enumerate(rt.gpus):
        queue = api.olCreateQueue(gpu) if with_queue else None
        kernel = api.olGetSymbol(program(gpu), "record", KERNEL)
        start = len(seen)
        for blob, (groups, items, dyn) in zip(blobs, shapes):
            api.olLaunchKernel(queue, gpu, kernel, blob, launch_size(groups, items, dyn))
            launch = calls_of("cuLaunchKernel")[-1]
            assert launch[1:8] == (*groups, *items, dyn)
            assert launch[9] is None and launch[10] != 0  # the blob goes through `extra`
        if queue is not None:
            in_new_thread(api.olSyncQueue, queue)
            api.olDestroyQueue(queue)
        assert seen[start:] == [(bytes(blob), groups, items, dyn, ordinal)
                                for blob, (groups, items, dyn) in zip(blobs, shapes)]


def test_a_launch_without_arguments_passes_no_extra(rt: Runtime) -> None:
    seen, body = recorder()
    standin.register_kernel("record", body)
    gpu = rt.gpus[0]
    kernel = api.olGetSymbol(program(gpu), "record", KERNEL)
    for args in (None, b""):
        api.olLaunchKernel(None, gpu, kernel, args, launch_size())
        assert calls_of("cuLaunchKernel")[-1][9:] == (None, 0)
    assert [launch[0] for launch in seen] == [b"", b""]


def test_dynamic_shared_memory_above_48k_opts_in_once_per_kernel_and_size(rt: Runtime) -> None:
    seen, body = recorder()
    standin.register_kernel("record", body)
    standin.register_kernel("other", body)
    gpu = rt.gpus[0]
    prog = program(gpu)
    record, other = api.olGetSymbol(prog, "record", KERNEL), api.olGetSymbol(prog, "other", KERNEL)
    queue = api.olCreateQueue(gpu)
    kib = 1024
    sizes = [(record, 1 * kib), (record, 48 * kib), (record, 64 * kib), (record, 64 * kib), (record, 100 * kib),
             (record, 100 * kib), (record, 64 * kib), (other, 64 * kib), (other, 64 * kib), (other, 227 * kib)]
    functions = {}
    for kernel, dyn in sizes:
        api.olLaunchKernel(queue, gpu, kernel, None, launch_size(dyn=dyn))
        functions[kernel.name] = calls_of("cuLaunchKernel")[-1][0]
    in_new_thread(api.olSyncQueue, queue)
    assert [launch[3] for launch in seen] == [dyn for _, dyn in sizes]
    attribute = standin.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert calls_of("cuFuncSetAttribute") == [(functions["record"], attribute, 64 * kib),
                                              (functions["record"], attribute, 100 * kib),
                                              (functions["other"], attribute, 64 * kib),
                                              (functions["other"], attribute, 227 * kib)]
    api.olDestroyQueue(queue)


def test_concurrent_launches_never_lower_the_dynamic_shared_memory_opt_in(
        rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread A opts a kernel in to 64 KiB while thread B opts it in to 100 KiB and launches; if A's
    smaller opt-in reaches the driver last, B's next 100 KiB launch must still work."""
    seen, body = recorder()
    standin.register_kernel("record", body)
    gpu = rt.gpus[0]
    kernel = api.olGetSymbol(program(gpu), "record", KERNEL)
    queue_a, queue_b = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    small, big = 64 * 1024, 100 * 1024
    real_set = standin.driver.cuFuncSetAttribute
    a_inside, b_launched, a_applied, b_again = (threading.Event() for _ in range(4))

    def interleaving_set(hfunc: Any, attrib: Any, value: int) -> Any:
        if int(value) != small:
            return real_set(hfunc, attrib, value)
        a_inside.set()
        # A plugin that serialises opt-ins keeps B out until A is done: then there is nothing to
        # interleave, and this probe just times out.
        interleaved = b_launched.wait(0.5)
        result = real_set(hfunc, attrib, value)
        a_applied.set()
        if interleaved:
            b_again.wait(WAIT)
        return result

    monkeypatch.setattr(standin.driver, "cuFuncSetAttribute", interleaving_set)
    outcome: dict[str, BaseException | None] = {}

    def launch_a() -> None:
        try:
            api.olLaunchKernel(queue_a, gpu, kernel, b"a", launch_size(dyn=small))
            outcome["a"] = None
        except BaseException as exc:  # noqa: BLE001  # checked in the test's thread
            outcome["a"] = exc

    def launch_b() -> None:
        api.olLaunchKernel(queue_b, gpu, kernel, b"b1", launch_size(dyn=big))
        b_launched.set()

    thread_a = threading.Thread(target=launch_a, daemon=True)
    thread_a.start()
    try:
        assert a_inside.wait(WAIT)
        in_new_thread(launch_b)
        assert a_applied.wait(WAIT)
        second: BaseException | None = None
        try:
            in_new_thread(api.olLaunchKernel, queue_b, gpu, kernel, b"b2", launch_size(dyn=big))
        except OffloadError as exc:
            second = exc
    finally:
        b_again.set()
        thread_a.join(WAIT)
    assert not thread_a.is_alive() and outcome == {"a": None}
    assert second is None, f"a 100 KiB launch after a racing 64 KiB opt-in failed: {second!r}"
    for queue in (queue_a, queue_b):
        in_new_thread(api.olSyncQueue, queue)
    assert sorted((launch[0], launch[3]) for launch in seen) == [(b"a", small), (b"b1", big), (b"b2", big)]


def test_optimal_occupancy_is_the_drivers_block_size(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    prog = program(gpu)
    assert api.olCalculateOptimalOccupancy(gpu, api.olGetSymbol(prog, "small", KERNEL), 0) == 128  # .maxntid 128
    assert api.olCalculateOptimalOccupancy(gpu, api.olGetSymbol(prog, "record", KERNEL), 2048) == 1024
    func, b2d, shared, limit = calls_of("cuOccupancyMaxPotentialBlockSize")[-1]
    assert (b2d, shared, limit) == (None, 2048, 0)


# ---- events ---------------------------------------------------------------------------------------

def test_elapsed_time_between_two_events(rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    start = api.olCreateEvent(queue)
    api.olLaunchHostFunction(queue, lambda _: spin(0.03))
    end = api.olCreateEvent(queue)
    elapsed = in_new_thread(api.olGetEventElapsedTime, start, end)
    assert isinstance(elapsed, float) and 25.0 <= elapsed < 10_000.0, elapsed
    assert count("cuEventElapsedTime") == 1
    api.olDestroyQueue(queue)


@pytest.mark.parametrize("cross_device", [False, True], ids=["same-device", "cross-device"])
def test_wait_events_orders_work_across_streams(rt: Runtime, cross_device: bool) -> None:
    gpu0, gpu1 = rt.gpus
    producer = api.olCreateQueue(gpu0)
    consumer = api.olCreateQueue(gpu1 if cross_device else gpu0)
    order: list[str] = []
    gate = rt.gate(producer)
    api.olLaunchHostFunction(producer, lambda _: order.append("producer"))
    event = api.olCreateEvent(producer)
    api.olWaitEvents(consumer, [event])
    assert count("cuStreamWaitEvent") == 1
    api.olLaunchHostFunction(consumer, lambda _: order.append("consumer"))
    gate.wait_entered()
    assert api.olQueryQueue(consumer) is False and order == []  # the consumer waits for the producer
    gate.open()
    in_new_thread(api.olSyncQueue, consumer)
    assert order == ["producer", "consumer"]
    api.olDestroyQueue(consumer)
    api.olDestroyQueue(producer)


def test_event_completion_follows_cuEventQuery(rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    gate = rt.gate(queue)
    event = api.olCreateEvent(queue)
    queries = count("cuEventQuery")
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is False
    assert count("cuEventQuery") == queries + 1
    gate.open()
    in_new_thread(api.olSyncEvent, event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    standin.inject("cuEventQuery", CUresult.CUDA_ERROR_NOT_READY)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is False
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    api.olDestroyQueue(queue)


# ---- host functions -------------------------------------------------------------------------------

def test_host_functions_run_in_stream_order_on_the_driver_thread(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    order: list[Any] = []
    threads: list[str] = []
    standin.register_kernel("record", lambda params, *_: order.append(("kernel", params)))
    kernel = api.olGetSymbol(program(gpu), "record", KERNEL)
    source, source_address = host_buffer(b"copied first")
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 16)
    queue = api.olCreateQueue(gpu)

    def host(tag: Any) -> None:
        threads.append(threading.current_thread().name)
        order.append(("host", tag))

    gate = rt.gate(queue)
    api.olLaunchHostFunction(queue, host, "a")
    api.olMemcpy(queue, pointer, gpu, source_address, rt.host, 12)
    api.olLaunchHostFunction(queue, lambda _: order.append(("copy done", standin.read(pointer, 12))))
    api.olLaunchKernel(queue, gpu, kernel, b"k1", launch_size())
    api.olLaunchHostFunction(queue, host, {"b": 2})
    api.olLaunchKernel(queue, gpu, kernel, b"k2", launch_size())
    api.olLaunchHostFunction(queue, host, None)
    gate.wait_entered()
    assert order == []
    gate.open()
    in_new_thread(api.olSyncQueue, queue)
    assert order == [("host", "a"), ("copy done", b"copied first"), ("kernel", b"k1"), ("host", {"b": 2}),
                     ("kernel", b"k2"), ("host", None)]
    assert len(set(threads)) == 1 and threads[0].startswith("cuda-standin-stream")  # the driver's thread
    api.olDestroyQueue(queue)


def test_a_raising_host_function_fails_its_queue(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    queue, healthy = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    later = threading.Event()

    def boom(_: object) -> None:
        raise ValueError("boom-4711")

    api.olLaunchHostFunction(queue, boom)
    api.olLaunchHostFunction(queue, lambda _: later.set())
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert "boom-4711" in err.details
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and isinstance(error, OffloadError)
    assert "host function raised ValueError: boom-4711" in error.details, error
    assert isinstance(error.__cause__, ValueError)
    assert not later.is_set(), "a host function after the failure ran"
    expect(ErrorCode.QUEUE_ERROR, api.olLaunchHostFunction, queue, lambda _: None)
    api.olLaunchHostFunction(healthy, lambda _: later.set())
    in_new_thread(api.olSyncQueue, healthy)
    assert later.is_set() and api.olGetQueueError(healthy) == (None, None)
    api.olDestroyQueue(queue)
    api.olDestroyQueue(healthy)


def test_sync_from_another_thread_while_a_host_function_blocks_cannot_deadlock(
        rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    in_sync = threading.Event()
    real_sync = standin.driver.cuStreamSynchronize

    def watched_sync(stream: Any) -> Any:
        in_sync.set()
        return real_sync(stream)

    # The plugin binds its driver functions when the device starts: watch the device's binding.
    monkeypatch.setattr(cuda_device(rt.gpus[0]), "drv_stream_sync", watched_sync)
    running, released, finished = threading.Event(), threading.Event(), threading.Event()

    def blocking(_: object) -> None:
        running.set()
        assert released.wait(3 * WAIT)
        finished.set()

    api.olLaunchHostFunction(queue, blocking)
    outcome: dict[str, BaseException | None] = {}

    def sync() -> None:
        try:
            api.olSyncQueue(queue)
            outcome["sync"] = None
        except BaseException as exc:  # noqa: BLE001  # checked in the test's thread
            outcome["sync"] = exc

    syncer = threading.Thread(target=sync, daemon=True)
    syncer.start()
    assert running.wait(WAIT), "the host function never started"
    assert in_sync.wait(WAIT), "the other thread never reached cuStreamSynchronize"
    assert syncer.is_alive() and not finished.is_set()  # both wait: the sync for the host function
    released.set()  # from the main thread, while the other one is inside olSyncQueue
    syncer.join(WAIT)
    assert not syncer.is_alive(), "olSyncQueue never returned: deadlock"
    assert finished.wait(WAIT) and outcome == {"sync": None}
    api.olDestroyQueue(queue)


# ---- asynchronous errors --------------------------------------------------------------------------

def wait_until_faulted(ordinal: int) -> None:
    """Until the stand-in's device ``ordinal`` has hit its sticky fault (a condition wait)."""
    state = standin.state()
    with state.cv:
        assert state.cv.wait_for(lambda: state.devices[ordinal].context.sticky is not None, WAIT)


def test_a_sticky_fault_poisons_only_its_device_until_reinit(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    standin.register_kernel("boom", faulting_kernel(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS))
    prog = program(gpu0)
    boom = api.olGetSymbol(prog, "boom", KERNEL)
    record = api.olGetSymbol(prog, "record", KERNEL)
    pointer = api.olMemAlloc(gpu0, AllocType.DEVICE, 64)
    queue, bystander, elsewhere = api.olCreateQueue(gpu0), api.olCreateQueue(gpu0), api.olCreateQueue(gpu1)
    api.olDestroyQueue(api.olCreateQueue(gpu0))  # a pooled stream that a new queue would take
    gate = rt.gate(queue)
    api.olLaunchKernel(queue, gpu0, boom, None, launch_size())
    after = api.olCreateEvent(queue)
    ran = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    gate.open()
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in err.details
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and isinstance(error, OffloadError)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in error.details and REINIT in error.details, error
    assert not ran.is_set()
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, after)  # its queue failed before reaching it
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in err.details
    source, source_address = host_buffer(64)
    later_calls: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
        ("olMemAlloc", api.olMemAlloc, (gpu0, AllocType.DEVICE, 64)),
        ("olCreateQueue", api.olCreateQueue, (gpu0,)),
        ("olCreateProgram", api.olCreateProgram, (gpu0, PTX)),
        ("olLaunchKernel", api.olLaunchKernel, (None, gpu0, record, None, launch_size())),
        ("olLaunchKernel(queue)", api.olLaunchKernel, (bystander, gpu0, record, None, launch_size())),
        ("olMemcpy", api.olMemcpy, (None, pointer, gpu0, source_address, rt.host, 64)),
        ("olMemcpy(queue)", api.olMemcpy, (bystander, pointer, gpu0, source_address, rt.host, 64)),
        ("olMemFill", api.olMemFill, (None, pointer, b"\x01", 64)),
        ("olCreateEvent", api.olCreateEvent, (bystander,)),
        ("olCalculateOptimalOccupancy", api.olCalculateOptimalOccupancy, (gpu0, record, 0)),
    ]
    wrong: list[str] = []
    for name, fn, args in later_calls:
        try:
            in_new_thread(fn, *args)
            wrong.append(f"{name} succeeded")
        except OffloadError as exc:
            if exc.code != ErrorCode.BACKEND_FAILURE or REINIT not in exc.details:
                wrong.append(f"{name}: {exc!r}")
    assert not wrong, "\n".join(wrong)
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, bystander)  # its work is lost with the context
    assert REINIT in err.details
    # The other device keeps working.
    other = api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    api.olMemFill(elsewhere, other, b"\x42", 64)
    in_new_thread(api.olSyncQueue, elsewhere)
    assert standin.read(other, 64) == b"\x42" * 64
    # Shutting down a poisoned device is quiet; a new init gives a working device.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)
    api.olInit()
    rt.refresh()
    fresh = rt.gpus[0]
    seen, body = recorder()
    standin.register_kernel("record", body)
    queue = api.olCreateQueue(fresh)
    api.olLaunchKernel(queue, fresh, api.olGetSymbol(program(fresh), "record", KERNEL), b"ok", launch_size())
    in_new_thread(api.olSyncQueue, queue)
    assert seen == [(b"ok", (1, 1, 1), (1, 1, 1), 0, 0)]
    api.olMemFree(api.olMemAlloc(fresh, AllocType.DEVICE, 64))


@pytest.mark.parametrize("first", ["olSyncEvent", "olQueryQueue", "olGetQueueError", "olGetEventInfo"])
def test_a_sticky_fault_is_reported_by_whatever_call_sees_it_first(rt: Runtime, first: str) -> None:
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS))
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(program(gpu), "boom", KERNEL), None, launch_size())
    event = api.olCreateEvent(queue)
    gate.open()
    if first == "olSyncEvent":
        expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    else:
        wait_until_faulted(0)  # a query reports the fault once it has happened on the driver's thread
        if first == "olQueryQueue":
            expect(ErrorCode.QUEUE_ERROR, api.olQueryQueue, queue)
        elif first == "olGetQueueError":
            error, origin = api.olGetQueueError(queue)
            assert origin is queue and error is not None and "CUDA_ERROR_ILLEGAL_ADDRESS" in error.details
        else:
            assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True  # never reached: nothing pending
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in err.details
    expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    assert REINIT in expect(ErrorCode.BACKEND_FAILURE, api.olMemAlloc, gpu, AllocType.DEVICE, 8).details


def test_a_sync_waiting_when_the_fault_happens_returns_promptly(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS))
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(program(gpu), "boom", KERNEL), None, launch_size())
    blocked = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: blocked.wait(3 * WAIT))  # never runs: the context is dead
    outcome: dict[str, BaseException | None] = {}

    def sync() -> None:
        try:
            api.olSyncQueue(queue)
            outcome["sync"] = None
        except BaseException as exc:  # noqa: BLE001  # checked in the test's thread
            outcome["sync"] = exc

    syncer = threading.Thread(target=sync, daemon=True)
    syncer.start()
    gate.wait_entered()
    gate.open()
    syncer.join(WAIT)
    blocked.set()
    assert not syncer.is_alive(), "olSyncQueue hung after a sticky fault"
    assert isinstance(outcome["sync"], OffloadError) and outcome["sync"].code == ErrorCode.QUEUE_ERROR


def test_a_host_function_skipped_by_a_sticky_fault_is_released_at_shutdown(rt: Runtime) -> None:
    """The driver never calls a host function queued behind a sticky fault; olShutDown must still
    let go of its callback and user data instead of keeping them for the life of the process."""
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS))
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(program(gpu), "boom", KERNEL), None, launch_size())

    class Payload:
        pass

    payload = Payload()
    alive = weakref.ref(payload)
    api.olLaunchHostFunction(queue, lambda _: None, payload)
    del payload
    gate.open()
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    in_new_thread(shut_down_fully)
    gc.collect()
    assert alive() is None, "the skipped host function's user data outlived olShutDown"


def test_a_queue_waiting_on_a_faulting_queue_of_another_device_fails_too(rt: Runtime) -> None:
    """olWaitEvents spreads a failure that happens after the wait was enqueued ("now or later", as
    the plugin interface requires of _wait_event_impl), naming the queue that failed first; the
    waiting queue's own device is healthy, so nothing else would ever report it."""
    gpu0, gpu1 = rt.gpus
    standin.register_kernel("boom", faulting_kernel(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS))
    producer, consumer = api.olCreateQueue(gpu0), api.olCreateQueue(gpu1)
    gate = rt.gate(producer)
    api.olLaunchKernel(producer, gpu0, api.olGetSymbol(program(gpu0), "boom", KERNEL), None, launch_size())
    event = api.olCreateEvent(producer)
    api.olWaitEvents(consumer, [event])  # the producer has not failed yet
    gate.open()
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, consumer)
    error, origin = api.olGetQueueError(consumer)
    assert origin is producer and error is not None and "CUDA_ERROR_ILLEGAL_ADDRESS" in error.details, \
        (error, origin)
    api.olMemFree(api.olMemAlloc(gpu1, AllocType.DEVICE, 64))  # gpu1 itself still works


@pytest.mark.parametrize("status", [CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES],
                         ids=["sticky", "non-sticky"])
def test_a_faulting_launch_without_a_queue_raises_the_drivers_error(rt: Runtime, status: Any) -> None:
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(status))
    boom = api.olGetSymbol(program(gpu), "boom", KERNEL)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olLaunchKernel, None, gpu, boom, None, launch_size())
    assert status.name in err.details
    sticky = int(status) in standin.STICKY
    if sticky:
        assert REINIT in expect(ErrorCode.BACKEND_FAILURE, api.olMemAlloc, gpu, AllocType.DEVICE, 8).details
    else:
        api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 8))


def test_a_non_sticky_fault_fails_only_its_queue(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES))
    seen, body = recorder()
    standin.register_kernel("record", body)
    prog = program(gpu)
    queue, healthy = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(prog, "boom", KERNEL), None, launch_size())
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" in err.details
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" in error.details
    assert REINIT not in error.details
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)  # the error state is never cleared
    api.olLaunchKernel(healthy, gpu, api.olGetSymbol(prog, "record", KERNEL), b"fine", launch_size())
    in_new_thread(api.olSyncQueue, healthy)
    assert seen == [(b"fine", (1, 1, 1), (1, 1, 1), 0, 0)]
    api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 64))
    streams = count("cuStreamCreate")
    api.olDestroyQueue(queue)  # a failed stream is destroyed, never pooled again
    assert count("cuStreamDestroy") == 1
    api.olDestroyQueue(api.olCreateQueue(gpu))
    assert count("cuStreamCreate") == streams + 1
    api.olDestroyQueue(healthy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)


# ---- error mapping --------------------------------------------------------------------------------

ERROR_CODES = [
    (CUresult.CUDA_ERROR_OUT_OF_MEMORY, ErrorCode.OUT_OF_RESOURCES),
    (CUresult.CUDA_ERROR_INVALID_IMAGE, ErrorCode.INVALID_BINARY),
    (CUresult.CUDA_ERROR_INVALID_PTX, ErrorCode.INVALID_BINARY),
    (CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, ErrorCode.INVALID_BINARY),
    (CUresult.CUDA_ERROR_NOT_SUPPORTED, ErrorCode.UNSUPPORTED),
    (CUresult.CUDA_ERROR_NOT_FOUND, ErrorCode.NOT_FOUND),
    (CUresult.CUDA_ERROR_INVALID_VALUE, ErrorCode.INVALID_ARGUMENT),
    (CUresult.CUDA_ERROR_UNKNOWN, ErrorCode.UNKNOWN),
    (CUresult.CUDA_ERROR_INVALID_CONTEXT, ErrorCode.BACKEND_FAILURE),
    (CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, ErrorCode.BACKEND_FAILURE),
]


@pytest.mark.parametrize(("status", "code"), ERROR_CODES, ids=[s.name for s, _ in ERROR_CODES])
def test_driver_statuses_map_to_error_codes_with_the_drivers_name(
        monkeypatch: pytest.MonkeyPatch, status: Any, code: ErrorCode) -> None:
    module = standin.install(monkeypatch)
    assert cuda_driver.error_code(int(status)) == code
    driver = cuda_driver.Driver(module)
    err = driver.error(int(status), "cuSomething", "while testing")
    assert err.code == code
    assert err.details.startswith(f"cuSomething: {status.name} (")  # the name, then the driver's explanation
    assert err.details.endswith(": while testing")
    assert err.driver_status == int(status)  # type: ignore[attr-defined]
    with pytest.raises(OffloadError) as info:
        driver.check((status, None), "cuOther")
    assert info.value.code == code and info.value.details.startswith(f"cuOther: {status.name}")


def test_an_unknown_status_is_a_backend_failure_and_check_unpacks_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = cuda_driver.Driver(standin.install(monkeypatch))
    err = driver.error(12345, "cuFuture")
    assert err.code == ErrorCode.BACKEND_FAILURE and err.details == "cuFuture: CUresult 12345"
    assert driver.check((CUresult.CUDA_SUCCESS, 7), "x") == 7
    assert driver.check((CUresult.CUDA_SUCCESS, 7, 8), "x") == (7, 8)


@pytest.mark.parametrize(("call", "status", "fn", "code"), [
    ("cuStreamCreate", CUresult.CUDA_ERROR_NOT_SUPPORTED, "queue", ErrorCode.UNSUPPORTED),
    ("cuModuleLoadDataEx", CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, "program", ErrorCode.INVALID_BINARY),
    ("cuMemAlloc", CUresult.CUDA_ERROR_INVALID_VALUE, "alloc", ErrorCode.INVALID_ARGUMENT),
    ("cuMemAllocHost", CUresult.CUDA_ERROR_UNKNOWN, "pinned", ErrorCode.UNKNOWN),
    ("cuEventCreate", CUresult.CUDA_ERROR_INVALID_CONTEXT, "event", ErrorCode.BACKEND_FAILURE),
], ids=["unsupported", "invalid-binary", "invalid-argument", "unknown", "backend-failure"])
def test_injected_driver_failures_reach_the_api_with_their_names(
        rt: Runtime, call: str, status: Any, fn: str, code: ErrorCode) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    actions: dict[str, Callable[[], Any]] = {
        "queue": lambda: api.olCreateQueue(gpu), "program": lambda: program(gpu),
        "alloc": lambda: api.olMemAlloc(gpu, AllocType.DEVICE, 8),
        "pinned": lambda: api.olMemAlloc(gpu, AllocType.HOST, 8), "event": lambda: api.olCreateEvent(queue)}
    standin.inject(call, status)
    err = expect(code, actions[fn])
    assert call in err.details and status.name in err.details, err
    actions[fn]()  # the next call works: the failure was not sticky
    api.olDestroyQueue(queue)


# ---- the calls against the real bindings ----------------------------------------------------------

def _real_bindings() -> tuple[Any, type[Exception]]:
    """The real ``cuda.bindings.driver`` and its missing-libcuda error (skips where there is none).

    Where libcuda loads (a GPU machine) the replay would hand stand-in pointers and handles to a
    real driver, so it is skipped there; tests/test_cuda_gpu.py makes the real calls instead.
    """
    real = standin._types.real
    if real is None:
        pytest.skip("the real cuda-bindings (cuda.bindings.driver) is not importable: nothing to check against")
    from cuda.pathfinder import DynamicLibNotFoundError  # type: ignore[import-untyped]

    try:
        real.cuDriverGetVersion()
    except DynamicLibNotFoundError:
        return real, DynamicLibNotFoundError
    pytest.skip("libcuda is present: replaying stand-in pointers against a real driver is unsafe "
                "(tests/test_cuda_gpu.py covers the real calls)")


def test_the_plugins_status_numbers_and_launch_constants_match_the_real_bindings() -> None:
    """cuda_driver hard-codes CUresult numbers and CU_LAUNCH_PARAM_* values: they must name what
    its comments say in the real bindings."""
    real = standin._types.real
    if real is None:
        pytest.skip("the real cuda-bindings (cuda.bindings.driver) is not importable: nothing to check against")
    expected = {
        "OUT_OF_MEMORY": {"CUDA_ERROR_OUT_OF_MEMORY"}, "NOT_FOUND": {"CUDA_ERROR_NOT_FOUND"},
        "INVALID_VALUE": {"CUDA_ERROR_INVALID_VALUE"},
        "NOT_SUPPORTED": {"CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
        "BAD_IMAGE": {"CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_PTX",
                      "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
                      "CUDA_ERROR_INVALID_SOURCE", "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
                      "CUDA_ERROR_JIT_COMPILATION_DISABLED"},
        "STICKY": {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ASSERT",
                   "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
                   "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED",
                   "CUDA_ERROR_TENSOR_MEMORY_LEAK", "CUDA_ERROR_CONTAINED", "CUDA_ERROR_EXTERNAL_DEVICE"},
    }
    for group, names in expected.items():
        assert {real.CUresult(code).name for code in getattr(cuda_driver, group)} == names, group
    for constant, name in ((cuda_driver.SUCCESS, "CUDA_SUCCESS"), (cuda_driver.NOT_READY, "CUDA_ERROR_NOT_READY"),
                           (cuda_driver.NO_DEVICE, "CUDA_ERROR_NO_DEVICE")):
        assert real.CUresult(constant).name == name
    for param in ("CU_LAUNCH_PARAM_END", "CU_LAUNCH_PARAM_BUFFER_POINTER", "CU_LAUNCH_PARAM_BUFFER_SIZE"):
        assert int(getattr(real, param)) == getattr(cuda_driver, param), param


def test_every_driver_call_converts_its_arguments_in_the_real_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    real, lib_not_found = _real_bindings()
    # The assumption behind the replay: the bindings convert every argument before loading libcuda.
    with pytest.raises(TypeError):
        real.cuMemAlloc("sixty-four bytes")
    with pytest.raises(TypeError):
        real.cuStreamSynchronize(object())
    with pytest.raises(lib_not_found):
        real.cuMemAlloc(64)
    with stand_in_runtime(monkeypatch, devices=2) as runtime:
        in_new_thread(representative_workload, runtime, timeout=3 * WAIT)
        recorded = list(standin.calls)
    missing = plugin_driver_calls() - {name for name, _ in recorded}
    assert not missing, f"the workload does not exercise {sorted(missing)}"
    replayed: dict[tuple[Any, ...], tuple[str, tuple[Any, ...]]] = {}
    for name, args in recorded:
        replayed.setdefault(call_key(name, args), (name, args))
    problems: list[str] = []
    for name, args in replayed.values():
        converted = to_real(args, real)
        try:
            getattr(real, name)(*converted)
        except lib_not_found:
            continue  # argument conversion passed; only the missing libcuda failed
        except Exception as exc:  # noqa: BLE001  # TypeError, ValueError, OverflowError: a wrong argument
            problems.append(f"{name}{tuple(type(a).__name__ for a in converted)}: {type(exc).__name__}: {exc}")
            continue
        problems.append(f"{name} returned without loading libcuda")
    assert len(replayed) > 40
    assert not problems, "\n".join(problems)


def test_a_host_function_cannot_call_into_the_driver_but_may_use_the_host_device(rt: Runtime) -> None:
    """CUDA forbids driver calls from its callback thread: offloadrt refuses them there (the queue
    fails with a message that says why) instead of letting the driver deadlock or fail obscurely."""
    gpu = rt.gpus[0]
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 16)
    source, source_address = host_buffer(b"0123456789abcdef")
    seen: list[BaseException] = []
    host_copies: list[bytes] = []

    def body(_: object) -> None:
        target = ctypes.create_string_buffer(16)
        api.olMemcpy(None, ctypes.addressof(target), rt.host, source_address, rt.host, 16)  # the host device: fine
        host_copies.append(target.raw)
        try:
            api.olMemcpy(None, pointer, gpu, source_address, rt.host, 16)  # a CUDA copy: refused
        except BaseException as exc:  # noqa: BLE001  # inspected below
            seen.append(exc)
            raise

    queue = api.olCreateQueue(gpu)
    api.olLaunchHostFunction(queue, body)
    err = expect(ErrorCode.QUEUE_ERROR, in_new_thread, api.olSyncQueue, queue)
    assert host_copies == [b"0123456789abcdef"]
    assert len(seen) == 1 and isinstance(seen[0], OffloadError) and seen[0].code == ErrorCode.INVALID_ARGUMENT
    assert "cannot be called from a host function" in seen[0].details and str(queue) in seen[0].details
    assert "cannot be called from a host function" in err.details
    api.olMemcpy(None, pointer, gpu, source_address, rt.host, 16)  # outside a host function it works
    assert standin.read(pointer, 16) == b"0123456789abcdef"
    api.olDestroyQueue(queue)
    api.olMemFree(pointer)


def test_a_queue_native_handle_is_its_stream(rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    stream = queue.native_handle
    assert stream and int(standin.driver.cuStreamQuery(standin.driver.CUstream(stream))[0]) == 0
    api.olDestroyQueue(queue)
