"""The AMDGPU plugin's own logic, through the public ``ol*`` API, on stand-in AMD GPUs (no GPU needed).

``tests/hip_standin`` replaces hip-python's ``hip.hip`` and follows the HIP runtime's documented
behaviour (a current device per thread, stream order, hipErrorNotReady while work is pending,
host functions on a stream thread, sticky faults); these tests check what the plugin, and the
GPU logic it shares with the CUDA plugin (``plugins/common/gpu/``), do with it: discovery, device
info, device selection on any thread, memory, copies and fills, code objects and offload
bundles, launches, stream and event pools, queue recycling, events, host functions,
asynchronous errors and error mapping. The last tests check that a representative workload
exercises every HIP function the plugin calls, and replay those calls against the installed
hip-python to prove every argument converts.
"""

from __future__ import annotations

import ctypes
import gc
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

import hip_standin as standin
import pytest
from amdgpu_fixtures import (
    COUNTER,
    GLOBAL,
    KERNEL,
    TABLE_SIZE,
    Runtime,
    amd_device,
    bundle,
    call_key,
    call_names,
    calls_of,
    code_object,
    count,
    error_details,
    faulting_kernel,
    generic_code_object,
    hipError_t,
    newer_code_object,
    plugin_hip_calls,
    program,
    representative_workload,
    stand_in_runtime,
    wait_until_drained,
    wait_until_faulted,
)
from conftest import run_threads
from cuda_fixtures import WAIT, host_buffer, in_new_thread, launch_size, recorder, shut_down_fully, spin
from hip_standin import DeviceSpec, images
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from offloadrt.api import _state
from offloadrt.errors import OffloadWarning

REINIT = "sticky"  # what every error of a poisoned device says
E = hipError_t


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """A runtime on two default stand-in GPUs (AMD Instinct MI210, gfx90a:sramecc+:xnack-)."""
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


def unavailable() -> dict[str, str]:
    """Why each platform of the running runtime has no devices (what ``info`` lists)."""
    context = _state.STATE.context
    assert context is not None
    return dict(context.unavailable)


# ---- discovery -------------------------------------------------------------------------------------

def test_without_hip_python_the_platform_has_no_devices_and_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("hip", "hip.hip"):
        monkeypatch.setitem(sys.modules, name, None)  # `import hip` raises ImportError
    with pytest.raises(ImportError):
        __import__("hip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # never an exception, not even a warning
        api.olInit()
        try:
            assert Runtime().gpus == []
            reason = unavailable()["amdgpu"]
        finally:
            api.olShutDown()
        text = info_output()
    assert re.fullmatch(r"hip-python is not installed \(.*\); install offloadrt\[amd\] to use AMD GPUs", reason), reason
    assert f"amdgpu: {reason}" in text, text


@pytest.mark.parametrize(("reset_args", "inject", "reason"), [
    ({"library_missing": True}, None,
     "ROCm's HIP runtime (libamdhip64) was not found or could not be loaded (failed to dlopen libamdhip64.so"),
    ({"init_error": E.hipErrorNoDevice}, None, "hipInit: no AMD GPU is present"),
    ({"devices": 0}, None, "hipInit: no AMD GPU is present"),
    ({"init_error": E.hipErrorUnknown}, None, "hipInit failed: hipErrorUnknown (unknown error)"),
    ({"init_error": E.hipErrorInsufficientDriver}, None, "hipInit failed: hipErrorInsufficientDriver"),
    ({}, "hipGetDeviceCount", "hipGetDeviceCount: no AMD GPU is present"),
], ids=["library-missing", "no-device-error", "zero-devices", "hipinit-fails", "insufficient-driver",
        "device-count-no-device"])
def test_a_runtime_that_cannot_start_gives_zero_devices_and_a_reason(
        monkeypatch: pytest.MonkeyPatch, reset_args: dict[str, Any], inject: str | None, reason: str) -> None:
    standin.install(monkeypatch, **reset_args)
    if inject is not None:
        standin.inject(inject, E.hipErrorNoDevice, times=None)  # info_output starts the runtime again
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            api.olInit()
            try:
                assert Runtime().gpus == []
                assert reason in unavailable()["amdgpu"]
            finally:
                api.olShutDown()
            text = info_output()
            report = json.loads(info_output("--json"))
    finally:
        standin.shutdown()
    assert f"amdgpu: {reason}" in text, text
    assert reason in report["Unavailable Platforms"]["amdgpu"]
    assert not any(device["Platform Backend"] == "AMDGPU" for device in report["Devices"])
    if reset_args.get("library_missing"):  # plain words and advice, no Python bytes reprs
        assert "b'" not in text and "install ROCm 6.0 or newer" in text


@pytest.mark.parametrize(("call", "skip"), [("hipDriverGetVersion", 0), ("hipGetDeviceCount", 0),
                                            ("hipGetDeviceProperties", 1), ("hipDeviceTotalMem", 0),
                                            ("hipSetDevice", 0)],
                         ids=["driver-version", "device-count", "second-device-properties", "total-memory",
                              "set-device"])
def test_a_failure_while_starting_leaves_the_platform_out_with_a_warning(
        monkeypatch: pytest.MonkeyPatch, call: str, skip: int) -> None:
    with stand_in_runtime(monkeypatch, devices=2) as runtime:
        shut_down_fully()
        standin.inject(call, E.hipErrorInvalidValue, skip=skip)
        with pytest.warns(OffloadWarning, match="amdgpu plugin failed to start"):
            api.olInit(platforms=[PlatformBackend.AMDGPU])
        runtime.refresh()
        assert runtime.gpus == []
        reason = unavailable()["amdgpu"]
        assert reason.startswith("initialisation failed") and f"{call}: hipErrorInvalidValue" in reason, reason
        shut_down_fully()
        api.olInit(platforms=[PlatformBackend.AMDGPU])  # nothing was left behind: the next init works
        runtime.refresh()
        assert len(runtime.gpus) == 2


@pytest.mark.parametrize("platforms", [[PlatformBackend.HOST], [PlatformBackend.CUDA]], ids=["host", "cuda"])
def test_an_init_without_the_amdgpu_platform_never_calls_hip(
        monkeypatch: pytest.MonkeyPatch, platforms: list[PlatformBackend]) -> None:
    standin.install(monkeypatch)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OffloadWarning)  # CUDA, asked for, is missing here: not the point
            api.olInit(platforms=platforms)
        try:
            assert Runtime().gpus == []
            assert "amdgpu" not in unavailable()
        finally:
            api.olShutDown()
        assert standin.calls == []
    finally:
        standin.shutdown()


def test_after_a_full_shutdown_a_new_init_finds_the_devices_again(rt: Runtime) -> None:
    first = rt.gpus
    seen, body = recorder()
    standin.register_kernel("record", body)
    for cycle in range(3):
        api.olInit(platforms=[PlatformBackend.AMDGPU])  # nested: a reference, not a restart
        api.olShutDown()
        prog = program(rt.gpus[1])
        queue = api.olCreateQueue(rt.gpus[1])
        pointer = api.olMemAlloc(rt.gpus[1], AllocType.DEVICE, 16)
        api.olMemFill(queue, pointer, bytes([cycle]), 16)
        api.olLaunchKernel(queue, rt.gpus[1], api.olGetSymbol(prog, "record", KERNEL), bytes([cycle]), launch_size())
        in_new_thread(api.olSyncQueue, queue)
        assert standin.read(pointer, 16) == bytes([cycle]) * 16
        set_devices = count("hipSetDevice")
        inits = count("hipInit")
        shut_down_fully()  # leaves the queue, the program and the memory to olShutDown
        state = standin.state()
        assert state.streams == {} and state.events == {} and state.modules == {} and state.allocations == {}
        api.olInit(platforms=[PlatformBackend.AMDGPU])
        rt.refresh()
        assert len(rt.gpus) == 2 and not set(rt.gpus) & set(first)
        assert count("hipInit") == inits + 1
        api.olMemFree(api.olMemAlloc(rt.gpus[1], AllocType.DEVICE, 8))
        assert count("hipSetDevice") > set_devices  # a restarted device is selected again, not trusted
    assert [launch[0] for launch in seen] == [b"\x00", b"\x01", b"\x02"]
    with pytest.raises(OffloadError) as info:
        api.olCreateQueue(first[0])
    assert info.value.code in (ErrorCode.INVALID_DEVICE, ErrorCode.INVALID_ARGUMENT)


# ---- device info ----------------------------------------------------------------------------------

ALPHA = DeviceSpec(name="AMD Instinct MI300X", arch="gfx942:sramecc+:xnack-", total_memory=192 << 30,
                   compute_units=304, clock_rate=2_100_000, memory_clock_rate=1_300_000, shared_memory=64 << 10,
                   uuid=b"3b1f5c2e8a9d4f60")
BETA = DeviceSpec(name="", arch="gfx1100", total_memory=48 << 30, compute_units=96, clock_rate=2_495_500,
                  memory_clock_rate=1_249_999, shared_memory=32 << 10, max_threads_per_block=256, warp_size=32,
                  attributes={"MaxGridDimX": 65535})
U32 = 0xFFFFFFFF


def test_device_info_comes_from_hip(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=[ALPHA, BETA], driver_version=60443483) as runtime:
        alpha, beta = runtime.gpus
        beta_uid = "GPU-" + standin.state().devices[1].uuid.hex()  # random bytes: shown as hex
        expected = {
            alpha: {DeviceInfo.NAME: "gfx942", DeviceInfo.PRODUCT_NAME: "AMD Instinct MI300X",
                    DeviceInfo.UID: "GPU-3b1f5c2e8a9d4f60",  # AMD's UUIDs are ASCII already
                    DeviceInfo.NUM_COMPUTE_UNITS: 304, DeviceInfo.MAX_CLOCK_FREQUENCY: 2100,
                    DeviceInfo.MEMORY_CLOCK_RATE: 1300, DeviceInfo.GLOBAL_MEM_SIZE: 192 << 30,
                    DeviceInfo.MAX_MEM_ALLOC_SIZE: 192 << 30, DeviceInfo.MAX_WORK_GROUP_SIZE: 1024,
                    DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(1024, 1024, 1024),
                    DeviceInfo.MAX_WORK_SIZE: U32, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: 64 << 10,
                    DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(U32, 65536 * 1024, 65536 * 1024)},
            beta: {DeviceInfo.NAME: "gfx1100", DeviceInfo.PRODUCT_NAME: "gfx1100",  # no marketing name
                   DeviceInfo.UID: beta_uid, DeviceInfo.NUM_COMPUTE_UNITS: 96, DeviceInfo.MAX_CLOCK_FREQUENCY: 2495,
                   DeviceInfo.MEMORY_CLOCK_RATE: 1249, DeviceInfo.GLOBAL_MEM_SIZE: 48 << 30,
                   DeviceInfo.MAX_MEM_ALLOC_SIZE: 48 << 30, DeviceInfo.MAX_WORK_GROUP_SIZE: 256,
                   DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(256, 256, 256),
                   DeviceInfo.MAX_WORK_SIZE: 65535 * 256, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: 32 << 10,
                   DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(65535 * 256, 65536 * 256, 65536 * 256)},
        }
        for device, values in expected.items():
            for prop, value in values.items():
                assert api.olGetDeviceInfo(device, prop) == value, prop.name
            assert api.olGetDeviceInfo(device, DeviceInfo.TYPE) == DeviceType.GPU
            assert api.olGetDeviceInfo(device, DeviceInfo.VENDOR) == "AMD"
            assert api.olGetDeviceInfo(device, DeviceInfo.VENDOR_ID) == 0x1002
            assert api.olGetDeviceInfo(device, DeviceInfo.ADDRESS_BITS) == 64
            assert api.olGetDeviceInfo(device, DeviceInfo.HALF_FP_CONFIG) != FpCapabilityFlag(0)
            assert api.olGetDeviceInfo(device, DeviceInfo.DRIVER_VERSION) == "HIP 6.4.43483"
            uid = api.olGetDeviceInfo(device, DeviceInfo.UID)
            assert api.olGetDeviceInfoSize(device, DeviceInfo.UID) == len(uid) + 1
            platform = api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)
            assert api.olGetPlatformInfo(platform, PlatformInfo.VERSION) == "HIP 6.4.43483"
            assert api.olGetPlatformInfo(platform, PlatformInfo.VENDOR_NAME) == "Advanced Micro Devices, Inc."
            assert api.olGetPlatformInfo(platform, PlatformInfo.BACKEND) == PlatformBackend.AMDGPU
        # The device info is read once, when the device starts.
        assert [int(args[0]) for args in calls_of("hipGetDeviceProperties")] == [0, 1]
        text = info_output()
        devices = json.loads(info_output("--json"))["Devices"]
    for shown in ("[AMD Instinct MI300X]", "[gfx1100]", "Name: gfx942", "UID: GPU-3b1f5c2e8a9d4f60",
                  "Vendor ID: 4098", "Max Clock Frequency: 2100 MHz", "Memory Clock Rate: 1249 MHz",
                  "Num Compute Units: 304", "Work Group Shared Mem Size: 32768 B", "Driver Version: HIP 6.4.43483",
                  "GCN Architecture: gfx942:sramecc+:xnack-", "GCN Architecture: gfx1100", "Wavefront Size: 32",
                  "Wavefront Size: 64", "LDS Per Work Group: 65536 B", "Max Grid Dimensions: {x: 65535, y: 65536",
                  "Global Mem Size: 206158430208 B", "Managed Memory: yes"):
        assert shown in text, (shown, text)
    gpus = {d["Name"]: d for d in devices if d["Type"] == "GPU"}
    assert gpus["gfx1100"]["Global Mem Size"] == 48 << 30
    assert gpus["gfx942"]["Details"]["GCN Architecture"] == "gfx942:sramecc+:xnack-"
    assert gpus["gfx942"]["Product Name"] == "AMD Instinct MI300X"


# ---- the current device of each thread ------------------------------------------------------------

def exercise(rt: Runtime, device: api.Device, tag: int) -> None:
    """Every kind of operation on ``device``, checked: the stand-in makes memory, streams, events
    and modules on the calling thread's current device and refuses a launch on another's stream."""
    ordinal = amd_device(device).device_id
    seen, body = recorder()
    standin.register_kernel(f"record{tag}", body)
    data = bytes((tag + i) % 256 for i in range(64))
    source, source_address = host_buffer(data)
    target, target_address = host_buffer(64)
    pointer = api.olMemAlloc(device, AllocType.DEVICE, 64)
    state = standin.state()
    assert state.allocations[pointer].device.ordinal == ordinal  # allocated on this thread's current device
    queue = api.olCreateQueue(device)
    assert state.streams[int(queue._ai.stream)].ctx.device.ordinal == ordinal  # type: ignore[union-attr]
    api.olMemcpy(queue, pointer, device, source_address, rt.host, 64)
    api.olMemFill(queue, pointer + 32, bytes([tag]), 16)
    api.olMemcpy(queue, target_address, rt.host, pointer, device, 64)
    prog = api.olCreateProgram(device, standin.images.code_object("gfx90a", kernels=[f"record{tag}"]))
    assert {module.ctx.device.ordinal for module in state.modules.values() if f"record{tag}" in module.functions} \
        == {ordinal}
    api.olLaunchKernel(queue, device, api.olGetSymbol(prog, f"record{tag}", KERNEL), struct.pack("<I", tag),
                       launch_size())
    ran = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    event = api.olCreateEvent(queue)
    api.olSyncEvent(event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    api.olSyncQueue(queue)
    assert api.olQueryQueue(queue) is True and ran.is_set()
    assert target.raw == data[:32] + bytes([tag]) * 16 + data[48:]
    assert seen == [(struct.pack("<I", tag), (1, 1, 1), (1, 1, 1), 0, ordinal)]
    api.olDestroyEvent(event)
    api.olDestroyProgram(prog)
    api.olDestroyQueue(queue)
    api.olMemFree(pointer)


def test_every_operation_works_from_a_brand_new_thread(rt: Runtime) -> None:
    for tag, device in enumerate(rt.gpus + rt.gpus):
        in_new_thread(exercise, rt, device, tag)


def test_threads_using_both_devices_at_once_each_select_their_device(rt: Runtime) -> None:
    rounds = 3

    def body(index: int) -> None:
        for round_ in range(rounds):
            device = rt.gpus[(index + round_) % 2]  # every thread alternates, half start on each device
            exercise(rt, device, 10 * index + round_)

    run_threads(6, body, timeout=3 * WAIT)
    assert standin.diagnostics == [], standin.diagnostics


def test_a_thread_selects_a_device_once_until_it_switches(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    buffers = {gpu: api.olMemAlloc(gpu, AllocType.DEVICE, 8) for gpu in (gpu0, gpu1)}
    _keep, source = host_buffer(8)
    for gpu, buffer in buffers.items():  # the copies' temporary streams now exist in each pool
        api.olMemcpy(None, buffer, gpu, source, rt.host, 8)
    order = (gpu0, gpu0, gpu1, gpu1, gpu1, gpu0)

    def alternate(place: bool) -> list[int]:
        before = len(calls_of("hipSetDevice"))
        for device in order:
            if place:
                api.olMemFree(api.olMemAlloc(device, AllocType.DEVICE, 8))
            else:
                api.olMemcpy(None, buffers[device], device, source, rt.host, 8)
        return [int(args[0]) for args in calls_of("hipSetDevice")[before:]]

    # Stream work selects a device only when the thread switches to it...
    assert in_new_thread(alternate, False) == [0, 1, 0]
    # ...but whatever HIP places on the current device selects it every time, so that other code
    # calling hipSetDevice on the same thread cannot misplace an allocation.
    assert in_new_thread(alternate, True) == [0, 0, 1, 1, 1, 0]
    for buffer in buffers.values():
        api.olMemFree(buffer)


def test_an_allocation_lands_on_its_device_after_foreign_code_switched_devices(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    api.olMemFree(api.olMemAlloc(gpu0, AllocType.DEVICE, 8))  # this thread has gpu0 cached
    standin.hip.hipSetDevice(1)  # another library switches this thread's device behind offloadrt's back
    ptr = api.olMemAlloc(gpu0, AllocType.DEVICE, 64)
    assert [int(a) for a in calls_of("hipSetDevice")[-1]] == [0]
    owner = standin.state().find_locked(ptr, 1)
    assert owner is not None and owner.device.ordinal == 0
    api.olMemFree(ptr)


def test_queues_and_programs_made_on_one_thread_work_from_another(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    seen, body = recorder()
    standin.register_kernel("record", body)
    queues = [api.olCreateQueue(gpu) for gpu in (gpu1, gpu0)]  # the main thread ends with gpu0 selected
    kernels = [api.olGetSymbol(program(gpu), "record", KERNEL) for gpu in (gpu1, gpu0)]

    def use() -> None:
        for queue, gpu, kernel in zip(queues, (gpu1, gpu0), kernels):
            api.olLaunchKernel(queue, gpu, kernel, b"x", launch_size())
            api.olSyncQueue(queue)

    in_new_thread(use)
    use()
    assert [launch[4] for launch in seen] == [1, 0, 1, 0]
    for queue in queues:
        api.olDestroyQueue(queue)


# ---- pools and queue recycling -------------------------------------------------------------------

def test_streams_and_events_come_from_per_device_pools(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    streams, events = count("hipStreamCreateWithFlags"), count("hipEventCreateWithFlags")
    for _ in range(25):
        api.olDestroyQueue(api.olCreateQueue(gpu0))
    assert count("hipStreamCreateWithFlags") == streams + 1  # one stream, reused
    live = [api.olCreateQueue(gpu0) for _ in range(3)]  # the pool grows on demand
    assert count("hipStreamCreateWithFlags") == streams + 3
    for queue in live:
        api.olDestroyQueue(queue)
    live = [api.olCreateQueue(gpu0) for _ in range(3)]
    assert count("hipStreamCreateWithFlags") == streams + 3
    for _ in range(25):
        api.olDestroyEvent(api.olCreateEvent(live[0]))
    assert count("hipEventCreateWithFlags") == events + 1
    held = [api.olCreateEvent(queue) for queue in live]
    assert count("hipEventCreateWithFlags") == events + 3
    api.olDestroyQueue(api.olCreateQueue(gpu1))  # gpu1 has its own pool
    assert count("hipStreamCreateWithFlags") == streams + 4
    assert {int(args[0]) for args in calls_of("hipStreamCreateWithFlags")} == {standin.hip.hipStreamNonBlocking}
    assert {int(args[0]) for args in calls_of("hipEventCreateWithFlags")} == {standin.hip.hipEventDefault}
    state = standin.state()
    assert sorted(s.ctx.device.ordinal for s in state.streams.values()) == [0, 0, 0, 1]
    for event in held:
        api.olDestroyEvent(event)
    shut_down_fully()
    # De-init destroys every pooled stream and event.
    assert count("hipStreamDestroy") == count("hipStreamCreateWithFlags") == streams + 4
    assert count("hipEventDestroy") == count("hipEventCreateWithFlags") == events + 3
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
    busy_stream = calls_of("hipLaunchHostFunc")[-1][0]
    streams = count("hipStreamCreateWithFlags")
    api.olDestroyQueue(queue)  # returns at once: the stream is parked
    assert not done.is_set()
    other = api.olCreateQueue(gpu)  # the parked stream is busy: a new one
    assert count("hipStreamCreateWithFlags") == streams + 1
    gate.open()
    in_new_thread(api.olSyncEvent, last)  # the parked stream has drained
    assert done.is_set(), "the parked queue's work never completed"
    assert standin.read(pointer, len(source.raw)) == source.raw
    reused = api.olCreateQueue(gpu)  # the parked stream has finished: it is taken again
    assert count("hipStreamCreateWithFlags") == streams + 1
    api.olLaunchHostFunction(reused, lambda _: None)
    assert calls_of("hipLaunchHostFunc")[-1][0] == busy_stream
    in_new_thread(api.olSyncQueue, reused)
    api.olDestroyQueue(reused)
    api.olDestroyQueue(other)


def test_queue_emptiness_follows_hipStreamQuery(rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    gate = rt.gate(queue)
    gate.wait_entered()
    queries = count("hipStreamQuery")
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is False
    assert api.olQueryQueue(queue) is False
    assert count("hipStreamQuery") == queries + 2
    gate.open()
    in_new_thread(api.olSyncQueue, queue)
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    standin.inject("hipStreamQuery", E.hipErrorNotReady, times=2)  # HIP says: still busy
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is False
    assert api.olQueryQueue(queue) is False
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    assert api.olQueryQueue(queue) is True
    api.olDestroyQueue(queue)


# ---- memory ---------------------------------------------------------------------------------------

ALLOC_CALLS = [(AllocType.DEVICE, "hipMalloc", "hipFree", "device", None),
               (AllocType.HOST, "hipHostMalloc", "hipHostFree", "host", standin.hip.hipHostMallocDefault),
               (AllocType.MANAGED, "hipMallocManaged", "hipFree", "managed", standin.hip.hipMemAttachGlobal)]


@pytest.mark.parametrize(("kind", "alloc_call", "free_call", "standin_kind", "flags"), ALLOC_CALLS,
                         ids=[k.name for k, *_ in ALLOC_CALLS])
def test_each_allocation_kind_uses_its_hip_calls(rt: Runtime, kind: AllocType, alloc_call: str, free_call: str,
                                                 standin_kind: str, flags: int | None) -> None:
    for ordinal, device in enumerate(rt.gpus):
        pointer = api.olMemAlloc(device, kind, 4096)
        args = calls_of(alloc_call)[-1]
        assert args[0] == 4096 and (flags is None or args[1:] == (flags,)), args
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
    standin.inject(alloc_call, E.hipErrorOutOfMemory)
    err = expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, rt.gpus[0], kind, 1024)
    assert f"{alloc_call}: hipErrorOutOfMemory (out of memory)" in err.details, err
    api.olMemFree(api.olMemAlloc(rt.gpus[0], kind, 1024))  # the device still works


def test_an_exhausted_device_budget_is_out_of_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=[DeviceSpec(memory_budget=1 << 20), DeviceSpec()]) as runtime:
        err = expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, runtime.gpus[0], AllocType.DEVICE, 2 << 20)
        assert "hipMalloc: hipErrorOutOfMemory" in err.details
        api.olMemFree(api.olMemAlloc(runtime.gpus[0], AllocType.DEVICE, 1 << 19))
        api.olMemFree(api.olMemAlloc(runtime.gpus[1], AllocType.DEVICE, 2 << 20))  # another device's budget


def test_a_failed_free_keeps_the_allocation(rt: Runtime) -> None:
    pointer = api.olMemAlloc(rt.gpus[0], AllocType.DEVICE, 64)
    standin.inject("hipFree", E.hipErrorInvalidValue)
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, pointer)
    assert "hipFree: hipErrorInvalidValue" in err.details
    assert api.olGetMemInfo(pointer, MemInfo.SIZE) == 64  # still known: it can be freed again
    api.olMemFree(pointer)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, pointer)


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

    def copy(dst: int, dst_device: api.Device, src: int, src_device: api.Device, hip_call: str) -> None:
        performer = dst_device if src_device is host else src_device
        before = count(hip_call)
        api.olMemcpy(queues.get(performer), dst, dst_device, src, src_device, size)
        if with_queue:
            in_new_thread(api.olSyncQueue, queues[performer])
        assert count(hip_call) == before + 1, hip_call
        stream = calls_of(hip_call)[-1][-1]
        if with_queue:
            assert stream == queues[performer]._ai.stream  # type: ignore[union-attr]
        else:  # a temporary stream of the device, synchronised before olMemcpy returned
            assert standin.state().streams[int(stream)].ctx.device.ordinal == amd_device(performer).device_id

    copy(a0, gpu0, source_address, host, "hipMemcpyHtoDAsync")  # host -> device
    assert standin.read(a0, size) == data
    copy(b0, gpu0, a0, gpu0, "hipMemcpyDtoDAsync")  # device -> same device
    assert standin.read(b0, size) == data
    copy(a1, gpu1, b0, gpu0, "hipMemcpyPeerAsync")  # device -> other device
    assert standin.read(a1, size) == data
    dst, dst_device, src, src_device, nbytes, _stream = calls_of("hipMemcpyPeerAsync")[-1]
    assert (dst, int(dst_device), src, int(src_device), nbytes) == (a1, 1, b0, 0, size)
    standin.write(b0, bytes(size))
    copy(managed, gpu0, a1, gpu1, "hipMemcpyPeerAsync")  # and back the other way
    assert standin.read(managed, size) == data
    copy(back_address, host, managed, gpu0, "hipMemcpyDtoHAsync")  # device -> host
    assert back.raw == data
    copy(pinned, host, a1, gpu1, "hipMemcpyDtoHAsync")  # into pinned host memory
    assert standin.read(pinned, size) == data
    copy(b0, gpu0, pinned, host, "hipMemcpyHtoDAsync")  # from pinned host memory
    assert standin.read(b0, size) == data
    # Direct access enabled once per direction, by the source device, then remembered.
    assert [int(args[0]) for args in calls_of("hipDeviceEnablePeerAccess")] == [1, 0]
    assert [tuple(map(int, args)) for args in calls_of("hipDeviceCanAccessPeer")] == [(0, 1), (1, 0)]
    assert standin.state().devices[0].context.peers == {1} and standin.state().devices[1].context.peers == {0}
    copy(a1, gpu1, a0, gpu0, "hipMemcpyPeerAsync")
    assert count("hipDeviceEnablePeerAccess") == 2 and count("hipDeviceCanAccessPeer") == 2
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
        for _ in range(2):
            api.olMemcpy(None, a1, gpu1, a0, gpu0, 64)
        assert standin.read(a1, 64) == bytes(range(64))
        assert count("hipMemcpyPeerAsync") == 2 and count("hipDeviceEnablePeerAccess") == 0
        assert count("hipDeviceCanAccessPeer") == 1  # asked once, remembered


def test_peer_access_enabled_by_someone_else_is_fine(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus

    def enable_elsewhere() -> None:  # another library, on its own thread, enabled device 0 -> 1
        assert int(standin.hip.hipSetDevice(0)[0]) == 0
        assert int(standin.hip.hipDeviceEnablePeerAccess(1, 0)[0]) == 0

    in_new_thread(enable_elsewhere)
    a0, a1 = api.olMemAlloc(gpu0, AllocType.DEVICE, 64), api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    standin.write(a0, b"\x5a" * 64)
    api.olMemcpy(None, a1, gpu1, a0, gpu0, 64)  # hipErrorPeerAccessAlreadyEnabled: nothing wrong
    assert standin.read(a1, 64) == b"\x5a" * 64
    assert count("hipDeviceEnablePeerAccess") == 2
    assert amd_device(gpu0).peers == {1: True}


FILL_WIDTHS = [1, 2, 3, 4, 5, 8, 16]


@pytest.mark.parametrize("width", FILL_WIDTHS, ids=[f"pattern{w}" for w in FILL_WIDTHS])
def test_fill_writes_the_pattern_exactly(rt: Runtime, width: int) -> None:
    """Every pattern size at aligned and odd addresses, with and without a queue: the filled bytes
    are the pattern repeated, the bytes around them untouched; 1/2/4-byte patterns at aligned
    addresses use HIP's memsets, others strided 2-D lanes."""
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
            except OffloadError as exc:
                problems.append(f"{where}: {exc}")
                api.olMemFree(pointer)
                continue
            expected = b"\xee" * (16 + offset) + pattern * copies
            expected += b"\xee" * (size - len(expected))
            got = standin.read(pointer, size)  # done on return: the queue was idle
            if got != expected:
                problems.append(f"{where}: wrote {got[:16 + offset + width * copies + 4].hex()}")
            used = {name for name in call_names()[names:] if name.startswith("hipMemset")}
            if width in (1, 2, 4) and (16 + offset) % width == 0:
                if used != {f"hipMemsetD{8 * width}Async"}:
                    problems.append(f"{where}: HIP calls {sorted(used)}, not one memset of the pattern")
            elif not (used and all(name.startswith("hipMemsetD2D") for name in used)):
                problems.append(f"{where}: HIP calls {sorted(used)}, not strided 2-D lanes")
            api.olMemFree(pointer)
    api.olDestroyQueue(queue)
    assert not problems, "\n".join(problems)


def test_fills_work_on_a_runtime_without_the_2d_memsets(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """hipMemsetD2D*Async exist from ROCm 7.1 on; before that hip-python fails to find them with a
    RuntimeError. Odd-width fills then write the pattern once with 1-byte memsets and double it with
    device-to-device copies, and stop trying the 2-D memsets."""
    gpu = rt.gpus[0]
    device = amd_device(gpu)
    tried: list[str] = []

    def missing(name: str) -> Callable[..., Any]:
        def call(*_: Any) -> Any:
            tried.append(name)
            raise RuntimeError(f"failed to dlsym '{name}': undefined symbol")  # as hip-python words it
        return call

    for lane in (8, 16, 32):
        monkeypatch.setattr(device, f"drv_memset2d{lane}", missing(f"hipMemsetD2D{lane}Async"))
    queue = api.olCreateQueue(gpu)
    size = 700
    for width, offset, use_queue in ((3, 0, False), (8, 1, True), (16, 4, False), (5, 3, True), (2, 1, False)):
        pattern = bytes((0x11 * (i + 1) + width) % 256 for i in range(width))
        copies = (size - 32) // width
        pointer = api.olMemAlloc(gpu, AllocType.DEVICE, size)
        standin.write(pointer, b"\xee" * size)
        api.olMemFill(queue if use_queue else None, pointer + 16 + offset, pattern, width * copies)
        if use_queue:
            api.olSyncQueue(queue)
        expected = b"\xee" * (16 + offset) + pattern * copies
        assert standin.read(pointer, size) == expected + b"\xee" * (size - len(expected)), (width, offset)
        api.olMemFree(pointer)
    assert len(tried) == 1 and device.strided_memset is False  # found missing once, never tried again
    assert count("hipMemcpyDtoDAsync") > 0
    api.olDestroyQueue(queue)


def test_devices_block_rather_than_spin_while_synchronising(rt: Runtime) -> None:
    assert {device.schedule_flags for device in standin.state().devices} == {
        standin.hip.hipDeviceScheduleBlockingSync}


def test_a_device_already_in_use_keeps_its_flags_and_still_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    standin.install(monkeypatch, devices=1)
    standin.inject("hipSetDeviceFlags", E.hipErrorSetOnActiveProcess)
    try:
        api.olInit(platforms=[PlatformBackend.AMDGPU])
        try:
            assert len(Runtime().gpus) == 1
        finally:
            api.olShutDown()
    finally:
        standin.shutdown()


def test_a_hip_runtime_too_old_for_the_bindings_leaves_the_platform_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """hip-python 10 binds hipGetDeviceProperties to its ROCm 6.0 variant; an older libamdhip64
    lacks it, and the bindings raise RuntimeError: no exception may escape olInit."""
    module = standin.install(monkeypatch, devices=1)

    def old_runtime(_device: Any) -> Any:
        raise RuntimeError("failed to dlsym 'hipGetDevicePropertiesR0600': undefined symbol")

    monkeypatch.setattr(module, "hipGetDeviceProperties", old_runtime)
    try:
        with pytest.warns(Warning, match="ROCm 6.0"):
            api.olInit(platforms=[PlatformBackend.AMDGPU])
        try:
            assert Runtime().gpus == []
        finally:
            api.olShutDown()
    finally:
        standin.shutdown()


@pytest.mark.parametrize("value", [0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0xDEADBEEF, 0x00000001])
def test_four_byte_fills_pass_the_bits_as_hips_signed_int(rt: Runtime, value: int) -> None:
    """hipMemsetD32Async takes a C int: values of 2**31 and more go in as the same 32 bits, negative."""
    gpu = rt.gpus[0]
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    pattern = struct.pack("<I", value)
    api.olMemFill(None, pointer, pattern, 64)
    assert standin.read(pointer, 64) == pattern * 16
    assert calls_of("hipMemsetD32Async")[-1][1] == struct.unpack("<i", pattern)[0]
    api.olMemFill(None, pointer, pattern * 2, 64)  # an 8-byte pattern: two 32-bit lanes
    assert standin.read(pointer, 64) == pattern * 16
    assert [args[2] for args in calls_of("hipMemsetD2D32Async")[-2:]] == [value, value]
    api.olMemFree(pointer)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=st.binary(min_size=1, max_size=17), count_=st.integers(1, 40), offset=st.integers(0, 7),
       queued=st.booleans())
def test_fills_match_a_host_model(rt: Runtime, pattern: bytes, count_: int, offset: int, queued: bool) -> None:
    gpu = rt.gpus[0]
    size = len(pattern) * count_
    total = offset + size + 16
    pointer = api.olMemAlloc(gpu, AllocType.MANAGED, total)
    try:
        standin.write(pointer, b"\xa5" * total)
        queue = api.olCreateQueue(gpu) if queued else None
        api.olMemFill(queue, pointer + offset, pattern, size)
        if queue is not None:
            api.olSyncQueue(queue)
            api.olDestroyQueue(queue)
        assert standin.read(pointer, total) == b"\xa5" * offset + pattern * count_ + b"\xa5" * 16
    finally:
        api.olMemFree(pointer)


def test_a_fill_on_an_idle_queue_is_done_when_olMemFill_returns(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 4096)
    syncs = count("hipStreamSynchronize")
    api.olMemFill(queue, pointer, b"\x11\x22\x33\x44", 4096)
    assert standin.read(pointer, 4096) == b"\x11\x22\x33\x44" * 1024
    assert api.olQueryQueue(queue) is True and api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    assert count("hipStreamSynchronize") == syncs + 1
    # Behind pending work the fill stays queued: olMemFill does not wait for the gate.
    gate = rt.gate(queue)
    gate.wait_entered()
    api.olMemFill(queue, pointer, b"\x99", 4096)
    assert count("hipStreamSynchronize") == syncs + 1
    assert api.olQueryQueue(queue) is False
    assert standin.read(pointer, 4096) == b"\x11\x22\x33\x44" * 1024
    gate.open()
    in_new_thread(api.olSyncQueue, queue)
    assert standin.read(pointer, 4096) == b"\x99" * 4096
    api.olDestroyQueue(queue)
    api.olMemFree(pointer)


def test_a_fill_on_a_queue_whose_kernel_faulted_reports_the_fault(rt: Runtime) -> None:
    """The idle check of a fill asks HIP about the stream, which reports an earlier kernel's fault
    once: the queue must fail with it, not lose it."""
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(E.hipErrorLaunchOutOfResources))
    queue = api.olCreateQueue(gpu)
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(program(gpu), "boom", KERNEL), None, launch_size())
    wait_until_drained(queue)  # the fault has happened; the plugin has not asked yet
    err = expect(ErrorCode.QUEUE_ERROR, api.olMemFill, queue, pointer, b"\x01", 64)
    assert "hipErrorLaunchOutOfResources" in error_details(err), err
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and error is not None and "hipErrorLaunchOutOfResources" in error.details, error
    api.olMemFill(None, pointer, b"\x02", 64)  # not sticky: the device still works
    assert standin.read(pointer, 64) == b"\x02" * 64
    api.olDestroyQueue(queue)


# ---- registered host memory ---------------------------------------------------------------------
# olMemRegister pins with hipHostRegister(Portable | Mapped) and answers hipHostGetDevicePointer;
# the logic is the GPU layer's, shared with the CUDA plugin (tests/test_cuda_plugin.py covers it
# in full): these tests check HIP's calls, flags and statuses.

NO_HOST_POINTERS = DeviceSpec(attributes={"CanUseHostPointerForRegisteredMem": 0})


def registered() -> dict[int, tuple[int, int]]:
    """The stand-in's registered host memory: {host address: (size, device address)}."""
    state = standin.state()
    with state.lock:
        return {host: (r.size, r.device_ptr) for host, r in state.registered.items()}


@pytest.mark.parametrize("own_addresses", [False, True], ids=["host-addresses", "device-addresses"])
def test_register_pins_with_hip_and_answers_hips_device_address(monkeypatch: pytest.MonkeyPatch,
                                                               own_addresses: bool) -> None:
    devices = [DeviceSpec(), NO_HOST_POINTERS if own_addresses else DeviceSpec()]
    with stand_in_runtime(monkeypatch, devices=devices) as runtime:
        gpu0, gpu1 = runtime.gpus
        buffer, host = host_buffer(8192)
        pinned = api.olMemRegister(gpu1, host, 8192)
        assert registered() == {host: (8192, pinned)} and (pinned != host) == own_addresses
        flags = standin.hip.hipHostRegisterPortable | standin.hip.hipHostRegisterMapped
        assert calls_of("hipHostRegister") == [(host, 8192, flags)]
        assert calls_of("hipHostGetDevicePointer") == [(host, 0)]
        assert api.olMemRegister(gpu1, host + 4096, 64) == pinned + 4096  # one more user
        assert api.olMemRegister(gpu0, host + 64, 64) == pinned + 64  # the other GPU shares the pin
        assert count("hipHostRegister") == count("hipHostGetDevicePointer") == 1
        for device, ptr in ((gpu1, host + 4096), (gpu1, host)):
            api.olMemUnregister(device, ptr)
            assert registered() == {host: (8192, pinned)}, "unpinned while it had users"
        api.olMemUnregister(gpu0, host + 64)
        assert registered() == {} and calls_of("hipHostUnregister") == [(host,)]


def test_overlaps_unknown_memory_and_host_allocations(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    buffer, host = host_buffer(1024)
    api.olMemRegister(gpu0, host + 256, 256)
    for device in (gpu0, gpu1):
        err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, device, host + 384, 256)
        assert "only in part" in err.details, err
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu1, host + 256)  # registered with gpu0 only
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu0, host)
    assert count("hipHostRegister") == 1 and list(registered()) == [host + 256]
    pinned = api.olMemAlloc(gpu0, AllocType.HOST, 256)
    assert api.olMemRegister(gpu0, pinned + 8, 8) == pinned + 8  # its own HOST allocation: no HIP call
    assert count("hipHostRegister") == 1
    assert api.olMemRegister(gpu1, pinned + 8, 8) == pinned + 8  # another GPU's: page-locked already
    assert count("hipHostRegister") == 2 and list(registered()) == [host + 256]
    for device in (gpu0, gpu1):
        api.olMemUnregister(device, pinned + 8)
    api.olMemUnregister(gpu0, host + 256)
    assert count("hipHostUnregister") == 1 and registered() == {}


def test_memory_hip_registered_for_someone_else_is_used_and_left_registered(rt: Runtime) -> None:
    buffer, host = host_buffer(512)
    assert int(standin.hip.hipHostRegister(host, 512, 0)[0]) == 0  # another library's pin
    assert api.olMemRegister(rt.gpus[0], host + 128, 128) == host + 128
    api.olMemUnregister(rt.gpus[0], host + 128)
    assert count("hipHostUnregister") == 0 and list(registered()) == [host]
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, rt.gpus[0], host + 256, 512)
    assert "hipErrorHostMemoryAlreadyRegistered" in err.details, err


def test_a_failed_device_address_undoes_the_registration(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    buffer, host = host_buffer(512)
    standin.inject("hipHostGetDevicePointer", E.hipErrorInvalidValue)
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, gpu, host, 512)
    assert "hipHostGetDevicePointer: hipErrorInvalidValue" in err.details, err
    assert registered() == {} and calls_of("hipHostUnregister") == [(host,)]
    assert api.olMemRegister(gpu, host, 512) == host


def test_the_last_shutdown_unregisters_what_is_left(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    (_, a), (_, b) = host_buffer(256), host_buffer(256)
    api.olMemRegister(gpu0, a, 256)
    api.olMemRegister(gpu1, a, 256)
    api.olMemRegister(gpu1, b, 256)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)
    assert registered() == {} and sorted(args[0] for args in calls_of("hipHostUnregister")) == sorted([a, b])


def test_copies_to_and_from_registered_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """At its host address with the host device, at its device address with the GPU."""
    with stand_in_runtime(monkeypatch, devices=[NO_HOST_POINTERS]) as runtime:
        gpu = runtime.gpus[0]
        data = bytes((5 * i + 1) % 256 for i in range(512))
        buffer, host = host_buffer(data)
        pinned = api.olMemRegister(gpu, host, 512)
        assert pinned != host
        device = api.olMemAlloc(gpu, AllocType.DEVICE, 512)
        queue = api.olCreateQueue(gpu)
        api.olMemcpy(queue, device, gpu, host, runtime.host, 512)
        in_new_thread(api.olSyncQueue, queue)
        assert standin.read(device, 512) == data
        standin.write(device, bytes(512))
        api.olMemcpy(None, device, gpu, pinned + 128, gpu, 256)
        assert standin.read(device, 256) == data[128:384]
        api.olMemFill(queue, pinned, b"\x01\x02\x03", 6)
        in_new_thread(api.olSyncQueue, queue)
        assert buffer.raw[:6] == b"\x01\x02\x03" * 2
        api.olMemcpy(None, host + 8, runtime.host, device, gpu, 8)
        assert buffer.raw[8:16] == data[128:136]
        api.olDestroyQueue(queue)


# ---- programs -------------------------------------------------------------------------------------

def test_code_objects_and_offload_bundles_load(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    images_: list[bytes | bytearray] = [bytearray(code_object()),  # not bytes: the plugin copes
               code_object(xnack=False, sramecc=True),  # the device's own features
               code_object(xnack="any", sramecc="any"), code_object(abi_version=5), code_object(abi_version=6),
               bundle("gfx908", "gfx90a:xnack-"),  # HIP picks the entry for the device
               bundle("gfx90a:sramecc+:xnack-"), bundle("gfx90a")]
    for image in images_:
        loads = count("hipModuleLoadData")
        loaded = program(gpu, image)
        assert count("hipModuleLoadData") == loads + 1
        record = api.olGetSymbol(loaded, "record", KERNEL)
        assert api.olGetSymbol(loaded, "record", KERNEL) is record
        assert calls_of("hipModuleGetFunction")[-1][1] == b"record"
        counter = api.olGetSymbol(loaded, "counter", GLOBAL)
        module, name = calls_of("hipModuleGetGlobal")[-1]
        assert name == b"counter" and int(module) in standin.state().modules
        address = api.olGetSymbolInfo(counter, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
        assert api.olGetSymbolInfo(counter, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 4
        value, value_address = host_buffer(4)
        api.olMemcpy(None, value_address, rt.host, address, gpu, 4)
        assert struct.unpack("<I", value.raw)[0] == COUNTER
        table = api.olGetSymbol(loaded, "table", GLOBAL)
        assert api.olGetSymbolInfo(table, SymbolInfo.GLOBAL_VARIABLE_SIZE) == TABLE_SIZE
        api.olDestroyProgram(loaded)
    assert standin.state().modules == {}


def test_globals_are_written_and_read_through_olMemcpy(rt: Runtime) -> None:
    gpu = rt.gpus[1]
    prog = program(gpu)
    table = api.olGetSymbol(prog, "table", GLOBAL)
    address = api.olGetSymbolInfo(table, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert standin.state().allocations[address].device.ordinal == 1  # loaded on device 1
    source, source_address = host_buffer(bytes(range(TABLE_SIZE)))
    queue = api.olCreateQueue(gpu)
    api.olMemcpy(queue, address, gpu, source_address, rt.host, TABLE_SIZE)
    back, back_address = host_buffer(TABLE_SIZE)
    api.olMemcpy(queue, back_address, rt.host, address, gpu, TABLE_SIZE)
    in_new_thread(api.olSyncQueue, queue)
    assert back.raw == bytes(range(TABLE_SIZE))
    other = program(gpu)  # another load of the image has its own globals
    counter = api.olGetSymbol(other, "table", GLOBAL)
    assert api.olGetSymbolInfo(counter, SymbolInfo.GLOBAL_VARIABLE_ADDRESS) != address
    api.olDestroyQueue(queue)


MISMATCHES = [
    (code_object("gfx908"), "code object built for gfx908 cannot run on a gfx90a:sramecc+:xnack- device"),
    (code_object("gfx1100"), "code object built for gfx1100 cannot run"),
    (code_object(xnack=True), "code object built for gfx90a with xnack+ but the device runs with xnack-"),
    (code_object(sramecc=False), "code object built for gfx90a with sramecc- but the device runs with sramecc+"),
    (code_object("gfx90a:xnack+", sramecc=True), "with xnack+ but the device runs with xnack-"),
    (bundle("gfx908", "gfx90a:xnack+"),
     "offload bundle has no code object for gfx90a:sramecc+:xnack- (targets: gfx908, gfx90a:xnack+)"),
    (images.offload_bundle({images.HOST_TRIPLE: b""}), "offload bundle has no code object for gfx90a"),
    (b"not a program image", "not an AMDGPU image"),
    (b".version 8.0\n.target sm_90\n.address_size 64\n", "not an AMDGPU image"),  # PTX
    (b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack("<HH", 2, 190) + bytes(44), "not an AMDGPU image"),
    (code_object()[:40], "truncated ELF header"),
    (b"__CLANG_OFFLOAD_BUNDLE__", "malformed offload bundle"),  # no entry count
]


@pytest.mark.parametrize(("image", "why"), MISMATCHES,
                         ids=["gfx908", "gfx1100", "xnack+", "sramecc-", "target-id-xnack+", "bundle-without-entry",
                              "host-only-bundle", "garbage", "ptx", "cuda-elf", "truncated", "malformed-bundle"])
def test_images_the_device_cannot_run_are_refused_before_hip_sees_them(rt: Runtime, image: bytes, why: str) -> None:
    gpu = rt.gpus[0]
    err = expect(ErrorCode.INVALID_BINARY, program, gpu, image)
    assert why in err.details, err
    assert api.olIsValidBinary(gpu, image) is False
    assert count("hipModuleLoadData") == 0 and standin.state().modules == {}


def test_an_empty_image_is_an_invalid_binary(rt: Runtime) -> None:
    expect(ErrorCode.INVALID_BINARY, program, rt.gpus[0], b"")
    assert api.olIsValidBinary(rt.gpus[0], b"") is False
    assert count("hipModuleLoadData") == 0


def test_is_valid_binary_answers_without_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [DeviceSpec(), DeviceSpec(arch="gfx90a:sramecc-:xnack+"), DeviceSpec(arch="gfx1100")]
    with stand_in_runtime(monkeypatch, devices=specs) as runtime:
        mi210, xnack_on, navi = runtime.gpus
        standin.calls.clear()
        cases = [
            (mi210, code_object(), True), (xnack_on, code_object(), True), (navi, code_object(), False),
            (mi210, code_object(xnack=False), True), (xnack_on, code_object(xnack=False), False),
            (xnack_on, code_object(xnack=True, sramecc=False), True), (mi210, code_object(sramecc=False), False),
            (mi210, code_object(xnack="any", sramecc="any"), True), (navi, code_object("gfx1100"), True),
            (mi210, bundle("gfx90a:xnack-", "gfx90a:xnack+"), True),
            (xnack_on, bundle("gfx90a:xnack-", "gfx90a:xnack+"), True),
            (navi, bundle("gfx90a:xnack-", "gfx90a:xnack+"), False), (navi, bundle("gfx90a", "gfx1100"), True),
            (mi210, generic_code_object(), False),  # gfx9-generic does not cover gfx90a
            (mi210, newer_code_object(), True),  # a processor newer than offloadrt's table: the driver decides
            (mi210, b"CCOB" + bytes(60), True),  # a compressed bundle: the driver decides
            (mi210, b"garbage", False), (mi210, b"\x7fELF", False), (mi210, code_object("gfx908"), False),
        ]
        answers = [(case, api.olIsValidBinary(device, image)) for case, (device, image, _) in enumerate(cases)]
        assert [answer for _, answer in answers] == [valid for *_, valid in cases], answers
        assert "hipModuleLoadData" not in call_names() and standin.state().modules == {}


@pytest.mark.parametrize(("status", "image"), [
    (E.hipErrorInvalidKernelFile, None), (E.hipErrorNoBinaryForGpu, None), (E.hipErrorInvalidImage, None),
    (E.hipErrorSharedObjectInitFailed, None), (E.hipErrorInvalidKernelFile, "newer"),
    (E.hipErrorInvalidImage, "compressed")],
    ids=["inject-invalid-kernel-file", "inject-no-binary-for-gpu", "inject-invalid-image",
         "inject-shared-object-init-failed", "newer-processor", "compressed-bundle"])
def test_images_hip_refuses_are_invalid_binaries_with_the_hip_error(rt: Runtime, status: Any,
                                                                      image: str | None) -> None:
    gpu = rt.gpus[0]
    if image is None:
        standin.inject("hipModuleLoadData", status)
        data = code_object()
    else:  # images the plugin cannot judge itself, which the stand-in's HIP refuses
        data = newer_code_object() if image == "newer" else b"CCOB" + bytes(60)
    err = expect(ErrorCode.INVALID_BINARY, program, gpu, data)
    assert f"hipModuleLoadData: {status.name} (" in err.details, err
    assert count("hipModuleLoadData") == 1 and standin.state().modules == {}
    api.olDestroyProgram(program(gpu))  # a good image still loads


def test_destroy_program_unloads_the_module_at_once(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    first, second = program(gpu), program(gpu)
    handles = list(standin.state().modules)
    assert len(handles) == 2
    api.olDestroyProgram(first)
    assert [int(args[0]) for args in calls_of("hipModuleUnload")] == [handles[0]]
    assert list(standin.state().modules) == handles[1:]
    api.olGetSymbol(second, "record", KERNEL)  # the other program is untouched
    expect(ErrorCode.INVALID_ARGUMENT, api.olGetSymbol, first, "record", KERNEL)
    api.olDestroyProgram(second)
    assert count("hipModuleUnload") == 2 and standin.state().modules == {}


@pytest.mark.parametrize(("kind", "call"), [(KERNEL, "hipModuleGetFunction"), (GLOBAL, "hipModuleGetGlobal")],
                         ids=["kernel", "global"])
def test_a_missing_symbol_is_not_found_with_the_hip_error(rt: Runtime, kind: Any, call: str) -> None:
    prog = program(rt.gpus[0])
    err = expect(ErrorCode.NOT_FOUND, api.olGetSymbol, prog, "missing", kind)
    assert f"{call}('missing'): hipErrorNotFound" in err.details, err
    api.olGetSymbol(prog, "record" if kind == KERNEL else "counter", kind)


# ---- launches -------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_launch_passes_the_argument_blob_and_sizes_unchanged(rt: Runtime, with_queue: bool) -> None:
    seen, body = recorder()
    standin.register_kernel("record", body)
    blobs: list[Any] = [struct.pack("<QIB3xd", 0x1122334455667788, 0xDEADBEEF, 0x7F, -2.5),
             bytes(range(256)) * 4 + b"tail",  # larger than the plugin's first argument buffer
             bytearray(b"\x00\x01\x00\xff"), ctypes.c_uint64(0xFEEDFACECAFEBEEF)]
    shapes = [((2, 3, 4), (32, 2, 1), 1024), ((1, 1, 1), (1024, 1, 1), 0), ((7, 1, 1), (8, 8, 8), 64 * 1024),
              ((65536, 1, 1), (64, 1, 1), 1)]
    for ordinal, gpu in enumerate(rt.gpus):
        queue = api.olCreateQueue(gpu) if with_queue else None
        kernel = api.olGetSymbol(program(gpu), "record", KERNEL)
        start = len(seen)
        for blob, (groups, items, dyn) in zip(blobs, shapes):
            api.olLaunchKernel(queue, gpu, kernel, blob, launch_size(groups, items, dyn))
            launch = calls_of("hipModuleLaunchKernel")[-1]
            assert launch[1:8] == (*groups, *items, dyn)
            assert launch[9] is None and launch[10]  # the blob goes through `extra`, not kernelParams
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
        assert calls_of("hipModuleLaunchKernel")[-1][9:] == (None, 0)
    assert [launch[0] for launch in seen] == [b"", b""]


def test_launches_beyond_the_devices_limits_never_reach_hip(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    kernel = api.olGetSymbol(program(gpu), "record", KERNEL)
    grid = standin.state().devices[0].attributes  # maxGridSize as hipGetDeviceProperties reports it
    limit_y = grid[int(standin.hip.hipDeviceAttribute_t.hipDeviceAttributeMaxGridDimY)]
    for shape in [launch_size(dyn=64 * 1024 + 1), launch_size(items=(1025, 1, 1)), launch_size(items=(32, 32, 2)),
                  launch_size(groups=(1, limit_y + 1, 1)),  # more groups than the grid allows
                  launch_size(groups=(1 << 23, 1, 1), items=(1024, 1, 1))]:  # 2**33 work items on one axis
        err = expect(ErrorCode.INVALID_SIZE, api.olLaunchKernel, None, gpu, kernel, None, shape)
        assert "hipModuleLaunchKernel" not in err.details
    assert count("hipModuleLaunchKernel") == 0


@pytest.mark.parametrize(("status", "code"), [
    (E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT), (E.hipErrorOutOfMemory, ErrorCode.OUT_OF_RESOURCES),
    (E.hipErrorInvalidConfiguration, ErrorCode.INVALID_SIZE), (E.hipErrorNotSupported, ErrorCode.UNSUPPORTED),
    (E.hipErrorUnknown, ErrorCode.UNKNOWN)], ids=lambda v: getattr(v, "name", str(v)))
@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_a_refused_launch_raises_the_mapped_error(rt: Runtime, status: Any, code: ErrorCode, with_queue: bool) -> None:
    seen, body = recorder()
    standin.register_kernel("record", body)
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu) if with_queue else None
    kernel = api.olGetSymbol(program(gpu), "record", KERNEL)
    standin.inject("hipModuleLaunchKernel", status)
    err = expect(code, api.olLaunchKernel, queue, gpu, kernel, b"no", launch_size())
    assert f"hipModuleLaunchKernel('record'): {status.name}" in err.details, err
    api.olLaunchKernel(queue, gpu, kernel, b"yes", launch_size())
    if queue is not None:
        in_new_thread(api.olSyncQueue, queue)  # the queue did not fail
        api.olDestroyQueue(queue)
    assert [launch[0] for launch in seen] == [b"yes"]


@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_a_block_beyond_the_kernels_launch_bounds_is_refused_and_poisons_nothing(rt: Runtime,
                                                                                  with_queue: bool) -> None:
    """HIP refuses a block larger than the kernel's launch bounds with hipErrorLaunchFailure from
    hipModuleLaunchKernel itself: nothing ran, the device is fine."""
    seen, body = recorder()
    standin.register_kernel("small", body, max_threads=128)
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu) if with_queue else None
    small = api.olGetSymbol(program(gpu), "small", KERNEL)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olLaunchKernel, queue, gpu, small, None, launch_size(items=(256, 1, 1)))
    assert "hipModuleLaunchKernel('small'): hipErrorLaunchFailure" in err.details, err
    assert REINIT not in err.details
    api.olLaunchKernel(queue, gpu, small, b"fits", launch_size(items=(128, 1, 1)))
    if queue is not None:
        in_new_thread(api.olSyncQueue, queue)
        api.olDestroyQueue(queue)
    assert [launch[0] for launch in seen] == [b"fits"]
    api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 8))


def test_optimal_occupancy_is_hips_block_size(rt: Runtime) -> None:
    standin.register_kernel("small", lambda *_: None, max_threads=128)
    gpu = rt.gpus[0]
    prog = program(gpu)
    assert api.olCalculateOptimalOccupancy(gpu, api.olGetSymbol(prog, "small", KERNEL), 0) == 128
    record = api.olGetSymbol(prog, "record", KERNEL)
    assert api.olCalculateOptimalOccupancy(gpu, record, 2048) == 1024
    func, shared, limit = calls_of("hipModuleOccupancyMaxPotentialBlockSize")[-1]
    assert (shared, limit) == (2048, 0) and int(func) in standin.state().functions
    standin.inject("hipModuleOccupancyMaxPotentialBlockSize", E.hipErrorInvalidValue)
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olCalculateOptimalOccupancy, gpu, record, 0)
    assert "hipModuleOccupancyMaxPotentialBlockSize: hipErrorInvalidValue" in err.details


# ---- events ---------------------------------------------------------------------------------------

def test_elapsed_time_between_two_events(rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    start = api.olCreateEvent(queue)
    api.olLaunchHostFunction(queue, lambda _: spin(0.03))
    end = api.olCreateEvent(queue)
    elapsed = in_new_thread(api.olGetEventElapsedTime, start, end)
    assert isinstance(elapsed, float) and 25.0 <= elapsed < 10_000.0, elapsed
    assert count("hipEventElapsedTime") == 1
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
    assert calls_of("hipStreamWaitEvent")[-1] == (consumer._ai.stream, event._ev.event, 0)  # type: ignore[union-attr]
    api.olLaunchHostFunction(consumer, lambda _: order.append("consumer"))
    gate.wait_entered()
    assert api.olQueryQueue(consumer) is False and order == []  # the consumer waits for the producer
    gate.open()
    in_new_thread(api.olSyncQueue, consumer)
    assert order == ["producer", "consumer"]
    api.olDestroyQueue(consumer)
    api.olDestroyQueue(producer)


def test_wait_events_on_events_of_both_devices(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    producers = [api.olCreateQueue(gpu) for gpu in (gpu0, gpu1)]
    consumer = api.olCreateQueue(gpu0)
    order: list[str] = []
    gates = [rt.gate(queue) for queue in producers]
    for name, queue in zip(("p0", "p1"), producers):
        api.olLaunchHostFunction(queue, lambda _, name=name: order.append(name))  # type: ignore[misc]
    api.olWaitEvents(consumer, [api.olCreateEvent(queue) for queue in producers])
    api.olLaunchHostFunction(consumer, lambda _: order.append("consumer"))
    gates[1].open()
    in_new_thread(api.olSyncQueue, producers[1])
    assert api.olQueryQueue(consumer) is False and order == ["p1"]
    gates[0].open()
    in_new_thread(api.olSyncQueue, consumer)
    assert order == ["p1", "p0", "consumer"]
    for queue in (*producers, consumer):
        api.olDestroyQueue(queue)


def test_event_completion_follows_hipEventQuery(rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    gate = rt.gate(queue)
    event = api.olCreateEvent(queue)
    queries = count("hipEventQuery")
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is False
    assert count("hipEventQuery") == queries + 1
    gate.open()
    in_new_thread(api.olSyncEvent, event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    standin.inject("hipEventQuery", E.hipErrorNotReady)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is False
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    api.olDestroyQueue(queue)


# ---- host functions -------------------------------------------------------------------------------

def test_host_functions_run_in_stream_order_on_the_stream_thread(rt: Runtime) -> None:
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
    assert len(set(threads)) == 1 and threads[0].startswith("hip-standin-stream")  # HIP's thread
    assert {args[1] for args in calls_of("hipLaunchHostFunc")} == {amd_device(gpu)._host_function_argument()}
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
    device = amd_device(rt.gpus[0])
    real_sync = device.drv_stream_sync

    def watched_sync(stream: Any) -> Any:
        in_sync.set()
        return real_sync(stream)

    # The plugin binds its HIP functions when the device starts: watch the device's binding.
    monkeypatch.setattr(device, "drv_stream_sync", watched_sync)
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
    assert in_sync.wait(WAIT), "the other thread never reached hipStreamSynchronize"
    assert syncer.is_alive() and not finished.is_set()  # both wait: the sync for the host function
    released.set()  # from the main thread, while the other one is inside olSyncQueue
    syncer.join(WAIT)
    assert not syncer.is_alive(), "olSyncQueue never returned: deadlock"
    assert finished.wait(WAIT) and outcome == {"sync": None}
    api.olDestroyQueue(queue)


# ---- asynchronous errors --------------------------------------------------------------------------

def test_a_non_sticky_fault_fails_only_its_queue(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(E.hipErrorLaunchOutOfResources))
    seen, body = recorder()
    standin.register_kernel("record", body)
    prog = program(gpu)
    queue, healthy = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(prog, "boom", KERNEL), None, launch_size())
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert "hipStreamSynchronize: hipErrorLaunchOutOfResources" in err.details
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and error is not None and "hipErrorLaunchOutOfResources" in error.details
    assert REINIT not in error.details
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)  # the error state is never cleared
    expect(ErrorCode.QUEUE_ERROR, api.olMemFill, queue, api.olMemAlloc(gpu, AllocType.DEVICE, 8), b"\x00", 8)
    api.olLaunchKernel(healthy, gpu, api.olGetSymbol(prog, "record", KERNEL), b"fine", launch_size())
    in_new_thread(api.olSyncQueue, healthy)
    assert seen == [(b"fine", (1, 1, 1), (1, 1, 1), 0, 0)]
    api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 64))
    streams = count("hipStreamCreateWithFlags")
    destroyed = count("hipStreamDestroy")
    api.olDestroyQueue(queue)  # a failed stream is destroyed, never pooled again
    assert count("hipStreamDestroy") == destroyed + 1
    api.olDestroyQueue(api.olCreateQueue(gpu))
    assert count("hipStreamCreateWithFlags") == streams + 1
    api.olDestroyQueue(healthy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)


@pytest.mark.parametrize("status", [E.hipErrorIllegalAddress, E.hipErrorLaunchTimeOut, E.hipErrorAssert,
                                    E.hipErrorLaunchFailure, E.hipErrorECCNotCorrectable],
                         ids=lambda s: s.name)
def test_a_sticky_fault_poisons_only_its_device_until_reinit(rt: Runtime, status: Any) -> None:
    gpu0, gpu1 = rt.gpus
    standin.register_kernel("boom", faulting_kernel(status))
    prog = program(gpu0)
    boom = api.olGetSymbol(prog, "boom", KERNEL)
    record = api.olGetSymbol(prog, "record", KERNEL)
    pointer = api.olMemAlloc(gpu0, AllocType.DEVICE, 64)
    remote = api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    queue, bystander, elsewhere = api.olCreateQueue(gpu0), api.olCreateQueue(gpu0), api.olCreateQueue(gpu1)
    api.olDestroyQueue(api.olCreateQueue(gpu0))  # a pooled stream that a new queue would take
    gate = rt.gate(queue)
    api.olLaunchKernel(queue, gpu0, boom, None, launch_size())
    after = api.olCreateEvent(queue)
    ran = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    gate.open()
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert status.name in err.details
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and isinstance(error, OffloadError)
    assert status.name in error.details and REINIT in error.details, error
    assert not ran.is_set()
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, after)  # its queue failed before reaching it
    assert status.name in err.details
    source, source_address = host_buffer(64)
    later_calls: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
        ("olMemAlloc", api.olMemAlloc, (gpu0, AllocType.DEVICE, 64)),
        ("olMemAlloc(HOST)", api.olMemAlloc, (gpu0, AllocType.HOST, 64)),
        ("olCreateQueue", api.olCreateQueue, (gpu0,)),
        ("olCreateProgram", api.olCreateProgram, (gpu0, code_object())),
        ("olGetSymbol", api.olGetSymbol, (prog, "other", KERNEL)),
        ("olLaunchKernel", api.olLaunchKernel, (None, gpu0, record, None, launch_size())),
        ("olLaunchKernel(queue)", api.olLaunchKernel, (bystander, gpu0, record, None, launch_size())),
        ("olMemcpy", api.olMemcpy, (None, pointer, gpu0, source_address, rt.host, 64)),
        ("olMemcpy(queue)", api.olMemcpy, (bystander, pointer, gpu0, source_address, rt.host, 64)),
        ("olMemcpy(peer)", api.olMemcpy, (None, remote, gpu1, pointer, gpu0, 64)),
        ("olMemFill", api.olMemFill, (None, pointer, b"\x01", 64)),
        ("olMemFill(queue)", api.olMemFill, (bystander, pointer, b"\x01", 64)),
        ("olCreateEvent", api.olCreateEvent, (bystander,)),
        ("olLaunchHostFunction", api.olLaunchHostFunction, (bystander, lambda _: None)),
        ("olCalculateOptimalOccupancy", api.olCalculateOptimalOccupancy, (gpu0, record, 0)),
    ]
    wrong: list[str] = []
    for name, fn, args in later_calls:
        try:
            in_new_thread(fn, *args)
            wrong.append(f"{name} succeeded")
        except OffloadError as exc:
            if exc.code not in (ErrorCode.BACKEND_FAILURE, ErrorCode.INVALID_DEVICE) or REINIT not in exc.details:
                wrong.append(f"{name}: {exc!r}")
    assert not wrong, "\n".join(wrong)
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, bystander)  # its work is lost with the device
    assert REINIT in err.details
    assert api.olIsValidBinary(gpu0, code_object()) is True  # answered without HIP
    frees = count("hipFree")
    api.olMemFree(pointer)  # quietly leaked: HIP reclaims a poisoned device's memory
    assert count("hipFree") == frees
    # The other device keeps working.
    other = api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    api.olMemFill(elsewhere, other, b"\x42", 64)
    in_new_thread(api.olSyncQueue, elsewhere)
    assert standin.read(other, 64) == b"\x42" * 64
    # Shutting down a poisoned device is quiet; a new init gives a working device.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)
    # The stand-in keeps a sticky fault for the life of its runtime (HIP has no context to reset; on
    # ROCm such a fault usually ends the process): clear it, as a GPU reset would.
    standin.state().devices[0].context.sticky = None
    api.olInit(platforms=[PlatformBackend.AMDGPU])
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
    standin.register_kernel("boom", faulting_kernel(E.hipErrorIllegalAddress))
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(program(gpu), "boom", KERNEL), None, launch_size())
    event = api.olCreateEvent(queue)
    gate.open()
    if first == "olSyncEvent":
        expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    else:
        wait_until_faulted(0)  # a query reports the fault once it has happened on HIP's thread
        if first == "olQueryQueue":
            expect(ErrorCode.QUEUE_ERROR, api.olQueryQueue, queue)
        elif first == "olGetQueueError":
            error, origin = api.olGetQueueError(queue)
            assert origin is queue and error is not None and "hipErrorIllegalAddress" in error.details
        else:
            assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True  # never reached: nothing pending
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert "hipErrorIllegalAddress" in err.details
    expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    assert REINIT in expect(ErrorCode.BACKEND_FAILURE, api.olMemAlloc, gpu, AllocType.DEVICE, 8).details


def test_a_device_poisoned_outside_a_queue_fails_the_next_call_and_stays_poisoned(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    standin.poison(0, E.hipErrorIllegalAddress)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olMemAlloc, gpu0, AllocType.DEVICE, 8)
    assert "hipMalloc: hipErrorIllegalAddress" in err.details and REINIT in err.details, err
    calls = len(standin.calls)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olCreateQueue, gpu0)
    assert "AMDGPU device 0 hit a sticky error (hipErrorIllegalAddress" in err.details, err
    assert len(standin.calls) == calls  # refused without asking HIP
    api.olMemFree(api.olMemAlloc(gpu1, AllocType.DEVICE, 8))


def test_a_sync_waiting_when_the_fault_happens_returns_promptly(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(E.hipErrorIllegalAddress))
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(program(gpu), "boom", KERNEL), None, launch_size())
    blocked = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: blocked.wait(3 * WAIT))  # never runs: the device is dead
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
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(E.hipErrorIllegalAddress))
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
    """olWaitEvents spreads a failure that happens after the wait was enqueued, naming the queue
    that failed first; the waiting queue's own device is healthy, so nothing else would report it."""
    gpu0, gpu1 = rt.gpus
    standin.register_kernel("boom", faulting_kernel(E.hipErrorIllegalAddress))
    producer, consumer = api.olCreateQueue(gpu0), api.olCreateQueue(gpu1)
    gate = rt.gate(producer)
    api.olLaunchKernel(producer, gpu0, api.olGetSymbol(program(gpu0), "boom", KERNEL), None, launch_size())
    event = api.olCreateEvent(producer)
    api.olWaitEvents(consumer, [event])  # the producer has not failed yet
    gate.open()
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, consumer)
    error, origin = api.olGetQueueError(consumer)
    assert origin is producer and error is not None and "hipErrorIllegalAddress" in error.details, (error, origin)
    api.olMemFree(api.olMemAlloc(gpu1, AllocType.DEVICE, 64))  # gpu1 itself still works
    late = api.olCreateQueue(gpu1)  # a queue that waits on the failed queue's event now fails at once
    api.olWaitEvents(late, [event])
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, late)
    assert api.olGetQueueError(late)[1] is producer


@pytest.mark.parametrize("status", [E.hipErrorIllegalAddress, E.hipErrorLaunchOutOfResources],
                         ids=["sticky", "non-sticky"])
def test_a_faulting_launch_without_a_queue_raises_hips_error(rt: Runtime, status: Any) -> None:
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(status))
    boom = api.olGetSymbol(program(gpu), "boom", KERNEL)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olLaunchKernel, None, gpu, boom, None, launch_size())
    assert status.name in err.details and "(running kernel 'boom')" in err.details, err
    if int(status) in standin.STICKY:
        assert REINIT in expect(ErrorCode.BACKEND_FAILURE, api.olMemAlloc, gpu, AllocType.DEVICE, 8).details
    else:
        api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 8))


# ---- error mapping: a failure of each HIP call the plugin makes ------------------------------------

def _failures(rt: Runtime) -> dict[str, Callable[[], Any]]:
    """For each HIP call: an ``ol*`` action that makes it (on gpu0, with a fresh queue)."""
    gpu0, gpu1 = rt.gpus
    standin.register_kernel("record", lambda *_: None)
    prog = program(gpu0)
    record = api.olGetSymbol(prog, "record", KERNEL)
    pointer = api.olMemAlloc(gpu0, AllocType.DEVICE, 64)
    peer = api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    buffer = ctypes.create_string_buffer(64)  # kept alive by the actions that use it
    registrable = ctypes.addressof(buffer) + 32  # 32 bytes no copy of these actions touches

    def queue() -> api.Queue:
        return api.olCreateQueue(gpu0)

    def event_pair() -> tuple[api.Event, api.Event]:
        q = queue()
        return api.olCreateEvent(q), api.olCreateEvent(q)

    def register_and_unregister() -> None:
        api.olMemRegister(gpu0, registrable, 32)
        api.olMemUnregister(gpu0, registrable)

    return {
        "hipMalloc": lambda: api.olMemAlloc(gpu0, AllocType.DEVICE, 8),
        "hipHostMalloc": lambda: api.olMemAlloc(gpu0, AllocType.HOST, 8),
        "hipMallocManaged": lambda: api.olMemAlloc(gpu0, AllocType.MANAGED, 8),
        "hipFree": lambda: api.olMemFree(api.olMemAlloc(gpu0, AllocType.DEVICE, 8)),
        "hipHostFree": lambda: api.olMemFree(api.olMemAlloc(gpu0, AllocType.HOST, 8)),
        "hipMemcpyHtoDAsync": lambda: api.olMemcpy(queue(), pointer, gpu0, ctypes.addressof(buffer), rt.host, 64),
        "hipMemcpyDtoHAsync": lambda: api.olMemcpy(None, ctypes.addressof(buffer), rt.host, pointer, gpu0, 64),
        "hipMemcpyDtoDAsync": lambda: api.olMemcpy(queue(), pointer, gpu0, pointer + 32, gpu0, 32),
        "hipMemcpyPeerAsync": lambda: api.olMemcpy(None, peer, gpu1, pointer, gpu0, 64),
        "hipDeviceCanAccessPeer": lambda: api.olMemcpy(None, pointer, gpu0, peer, gpu1, 64),
        "hipDeviceEnablePeerAccess": lambda: api.olMemcpy(queue(), peer, gpu1, pointer, gpu0, 64),
        "hipMemsetD8Async": lambda: api.olMemFill(None, pointer, b"\x01", 64),
        "hipMemsetD16Async": lambda: api.olMemFill(queue(), pointer, b"\x01\x02", 64),
        "hipMemsetD32Async": lambda: api.olMemFill(None, pointer, b"\x01\x02\x03\x04", 64),
        "hipMemsetD2D8Async": lambda: api.olMemFill(queue(), pointer, b"\x01\x02\x03", 63),
        "hipMemsetD2D16Async": lambda: api.olMemFill(None, pointer, b"\x01\x02" * 3, 60),
        "hipMemsetD2D32Async": lambda: api.olMemFill(queue(), pointer, b"\x01\x02" * 4, 64),
        "hipModuleLoadData": lambda: program(gpu0),
        "hipModuleGetFunction": lambda: api.olGetSymbol(program(gpu0), "other", KERNEL),
        "hipModuleGetGlobal": lambda: api.olGetSymbol(program(gpu0), "counter", GLOBAL),
        "hipModuleLaunchKernel": lambda: api.olLaunchKernel(queue(), gpu0, record, b"x", launch_size()),
        "hipModuleOccupancyMaxPotentialBlockSize": lambda: api.olCalculateOptimalOccupancy(gpu0, record, 0),
        "hipStreamCreateWithFlags": lambda: [queue() for _ in range(4)],
        "hipStreamWaitEvent": lambda: api.olWaitEvents(queue(), [api.olCreateEvent(queue())]),
        "hipLaunchHostFunc": lambda: api.olLaunchHostFunction(queue(), lambda _: None),
        "hipEventCreateWithFlags": lambda: [api.olCreateEvent(queue()) for _ in range(4)],
        "hipEventRecord": lambda: api.olCreateEvent(queue()),
        "hipEventElapsedTime": lambda: api.olGetEventElapsedTime(*event_pair()),
        "hipSetDevice": lambda: in_new_thread(api.olMemAlloc, gpu0, AllocType.DEVICE, 8),
        "hipHostRegister": lambda: api.olMemRegister(gpu0, registrable, 32),
        "hipHostGetDevicePointer": lambda: api.olMemRegister(gpu0, registrable, 32),
        "hipHostUnregister": register_and_unregister,
    }


FAILURES = [  # (HIP call, the status injected, the error the ol* call raises)
    ("hipMalloc", E.hipErrorOutOfMemory, ErrorCode.OUT_OF_RESOURCES),
    ("hipHostMalloc", E.hipErrorOutOfMemory, ErrorCode.OUT_OF_RESOURCES),
    ("hipMallocManaged", E.hipErrorNotSupported, ErrorCode.UNSUPPORTED),
    ("hipFree", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipHostFree", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipMemcpyHtoDAsync", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipMemcpyDtoHAsync", E.hipErrorUnknown, ErrorCode.UNKNOWN),
    ("hipMemcpyDtoDAsync", E.hipErrorInvalidHandle, ErrorCode.BACKEND_FAILURE),
    ("hipMemcpyPeerAsync", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipDeviceCanAccessPeer", E.hipErrorInvalidDevice, ErrorCode.BACKEND_FAILURE),
    ("hipDeviceEnablePeerAccess", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipMemsetD8Async", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipMemsetD16Async", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipMemsetD32Async", E.hipErrorNotSupported, ErrorCode.UNSUPPORTED),
    ("hipMemsetD2D8Async", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipMemsetD2D16Async", E.hipErrorUnknown, ErrorCode.UNKNOWN),
    ("hipMemsetD2D32Async", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipModuleLoadData", E.hipErrorOutOfMemory, ErrorCode.OUT_OF_RESOURCES),
    ("hipModuleGetFunction", E.hipErrorInvalidHandle, ErrorCode.BACKEND_FAILURE),
    ("hipModuleGetGlobal", E.hipErrorNotFound, ErrorCode.NOT_FOUND),
    ("hipModuleLaunchKernel", E.hipErrorInvalidConfiguration, ErrorCode.INVALID_SIZE),
    ("hipModuleOccupancyMaxPotentialBlockSize", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipStreamCreateWithFlags", E.hipErrorOutOfMemory, ErrorCode.OUT_OF_RESOURCES),
    ("hipStreamWaitEvent", E.hipErrorInvalidHandle, ErrorCode.BACKEND_FAILURE),
    ("hipLaunchHostFunc", E.hipErrorNotSupported, ErrorCode.UNSUPPORTED),
    ("hipEventCreateWithFlags", E.hipErrorOutOfMemory, ErrorCode.OUT_OF_RESOURCES),
    ("hipEventRecord", E.hipErrorInvalidHandle, ErrorCode.BACKEND_FAILURE),
    ("hipEventElapsedTime", E.hipErrorInvalidHandle, ErrorCode.BACKEND_FAILURE),
    ("hipSetDevice", E.hipErrorInvalidDevice, ErrorCode.BACKEND_FAILURE),
    ("hipHostRegister", E.hipErrorOutOfMemory, ErrorCode.OUT_OF_RESOURCES),
    ("hipHostGetDevicePointer", E.hipErrorInvalidValue, ErrorCode.INVALID_ARGUMENT),
    ("hipHostUnregister", E.hipErrorUnknown, ErrorCode.UNKNOWN),
]


@pytest.mark.parametrize(("call", "status", "code"), FAILURES, ids=[call for call, *_ in FAILURES])
def test_a_failing_hip_call_raises_its_mapped_error_and_leaves_the_runtime_usable(
        rt: Runtime, call: str, status: Any, code: ErrorCode) -> None:
    action = _failures(rt)[call]
    standin.inject(call, status)
    err = expect(code, action)
    assert call in err.details and f"{status.name} (" in err.details, err
    assert REINIT not in err.details
    action()  # the next call works: the failure was not sticky
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)


@pytest.mark.parametrize(("call", "action"), [("hipStreamSynchronize", "sync"), ("hipStreamQuery", "query"),
                                              ("hipEventSynchronize", "sync-event"), ("hipEventQuery", "event-info")])
def test_a_failing_wait_or_query_fails_the_queue_with_hips_error(rt: Runtime, call: str, action: str) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    event = api.olCreateEvent(queue)
    standin.inject(call, E.hipErrorInvalidHandle)
    if action == "sync":
        err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    elif action == "query":
        err = expect(ErrorCode.QUEUE_ERROR, api.olQueryQueue, queue)
    elif action == "sync-event":
        err = expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    else:
        assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True  # complete: it will never be reached
        err = expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    assert f"{call}: hipErrorInvalidHandle" in error_details(err), err
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and error is not None and f"{call}: hipErrorInvalidHandle" in error.details
    api.olDestroyQueue(queue)  # destroyed, not pooled
    healthy = api.olCreateQueue(gpu)
    api.olSyncEvent(api.olCreateEvent(healthy))
    api.olSyncQueue(healthy)
    assert api.olQueryQueue(healthy) is True


@pytest.mark.parametrize("call", ["hipStreamDestroy", "hipEventDestroy", "hipModuleUnload", "hipHostUnregister"])
def test_a_failure_while_shutting_down_is_reported_and_the_next_init_works(rt: Runtime, call: str) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    api.olDestroyEvent(api.olCreateEvent(queue))
    api.olDestroyQueue(queue)
    program(gpu)
    buffer, host = host_buffer(64)
    api.olMemRegister(gpu, host, 64)
    standin.inject(call, E.hipErrorInvalidHandle)
    with pytest.raises(OffloadError) as info:
        in_new_thread(api.olShutDown)
    assert f"{call}: hipErrorInvalidHandle" in str(info.value) + "".join(
        str(e) for e in getattr(info.value, "errors", [])), info.value
    expect(ErrorCode.UNINITIALIZED, api.olCreateQueue, gpu)  # the runtime did stop
    api.olInit(platforms=[PlatformBackend.AMDGPU])
    rt.refresh()
    api.olSyncQueue(api.olCreateQueue(rt.gpus[0]))


def test_an_error_is_named_even_when_hip_cannot_name_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch) as runtime:
        for name in ("hipGetErrorName", "hipGetErrorString"):
            standin.inject(name, E.hipErrorInvalidValue)
        standin.inject("hipMalloc", E.hipErrorOutOfMemory)
        err = expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, runtime.gpus[0], AllocType.DEVICE, 8)
        assert err.details == "hipMalloc: hipErrorOutOfMemory"  # the enum's name, no explanation
        assert [int(args[0]) for args in calls_of("hipGetErrorName")] == [int(E.hipErrorOutOfMemory)]


# ---- the calls against the real hip-python ---------------------------------------------------------

def test_the_workload_makes_every_hip_call_of_the_plugin_and_real_hip_python_accepts_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=2) as runtime:
        in_new_thread(representative_workload, runtime, timeout=3 * WAIT)
        recorded = list(standin.calls)
    wanted = plugin_hip_calls()
    assert len(wanted) >= 40 and {"hipInit", "hipGetErrorName", "hipSetDevice", "hipModuleLaunchKernel"} <= wanted
    assert all(getattr(getattr(standin.hip, name), "__hip_standin__", False) for name in wanted), wanted
    missing = wanted - {name for name, _ in recorded}
    assert not missing, f"the workload does not exercise {sorted(missing)}"
    distinct: dict[tuple[Any, ...], tuple[str, tuple[Any, ...]]] = {}
    for name, args in recorded:
        distinct.setdefault(call_key(name, args), (name, args))
    assert len(distinct) > 60
    refused = standin.replay_against_real(distinct.values())
    assert not refused, "\n".join(f"{name}{args!r}: {type(exc).__name__}: {exc}" for name, args, exc in refused)
