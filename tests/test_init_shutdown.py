"""olInit/olShutDown: reference counting, a fresh start after the last shutdown, what the last
shutdown releases, the plugin registry, and a clean interpreter exit without olShutDown."""

from __future__ import annotations

import ctypes
import inspect
import os
import struct
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import call_with_timeout, expect_error, launch_args
from fake_plugins import (
    BrokenDriverPlugin,
    Factory,
    FailingDeinitPlugin,
    FakeGpuPlugin,
    MissingDriverFailingDeinitPlugin,
    MissingDriverPlugin,
    registered,
)

import offloadrt
from offloadrt import (
    AllocType,
    DeviceInfo,
    DeviceType,
    ErrorCode,
    MemInfo,
    OffloadError,
    PlatformBackend,
    PlatformInfo,
    QueueInfo,
    SymbolKind,
    api,
)
from offloadrt.api import _state

HOST = PlatformBackend.HOST
SPIN_ITERATIONS = 30_000_000  # tens of milliseconds: still running when olShutDown is called
GATE_TIMEOUT = 20.0  # a safety net only: callbacks never wait longer than this for a gate


@pytest.fixture(autouse=True)
def uninitialized_runtime() -> Iterator[None]:
    """Each test starts and ends with the runtime shut down; a test that fails midway is cleaned up."""
    assert _state.STATE.refcount == 0, "an earlier test left the runtime initialised"
    yield
    while _state.STATE.refcount:
        try:
            api.olShutDown()
        except OffloadError:
            pass


def devices() -> list[api.Device]:
    found: list[api.Device] = []
    api.olIterateDevices(lambda device, _: found.append(device))
    return found


def backend_of(device: api.Device) -> PlatformBackend:
    return api.olGetPlatformInfo(api.olGetDeviceInfo(device, DeviceInfo.PLATFORM), PlatformInfo.BACKEND)


def host_device() -> api.Device:
    hosts = [d for d in devices() if backend_of(d) == HOST]
    assert len(hosts) == 1, f"expected one host device, got {hosts}"
    return hosts[0]


def pointer_arg(address: int) -> bytes:
    return struct.pack("P", address)


def offloadrt_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("offloadrt") and t.is_alive())


def running_context() -> _state.Context:
    """The context of the running runtime (the test fails if there is none)."""
    context = _state.STATE.context
    assert context is not None, "the runtime is not running"
    return context


def assert_uninitialized() -> None:
    expect_error(ErrorCode.UNINITIALIZED, api.olIterateDevices, lambda d, _: None)
    expect_error(ErrorCode.UNINITIALIZED, api.olShutDown)


# ---- reference counting ----------------------------------------------------------------------

def test_shutdown_without_init_is_uninitialized() -> None:
    err = expect_error(ErrorCode.UNINITIALIZED, api.olShutDown)
    assert "olInit" in err.details
    # and it did not count: one init needs exactly one shutdown
    api.olInit()
    api.olShutDown()
    assert_uninitialized()


ENTRY_POINTS = sorted(name for name in api.__all__ if name.startswith("ol") and not name.startswith("olInit"))


@pytest.mark.parametrize("after_shutdown", [False, True], ids=["before-init", "after-shutdown"])
@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_entry_point_is_uninitialized_outside_init(name: str, after_shutdown: bool) -> None:
    if after_shutdown:
        api.olInit()
        api.olInit()
        api.olShutDown()
        api.olShutDown()
    fn = getattr(api, name)
    parameters = inspect.signature(fn, follow_wrapped=False).parameters.values()
    required = [p for p in parameters if p.default is inspect.Parameter.empty]
    expect_error(ErrorCode.UNINITIALIZED, fn, *([None] * len(required)))


def test_init_nests_and_every_call_works_until_the_last_shutdown(build) -> None:
    for _ in range(3):
        api.olInit()
    host = host_device()
    program = api.olCreateProgram(host, build("basic"))
    foo = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    for remaining in (2, 1):
        api.olShutDown()
        assert _state.STATE.refcount == remaining
        # the same handles still work: nothing was released
        assert host_device() is host
        queue = api.olCreateQueue(host)
        out = api.olMemAlloc(host, AllocType.HOST, 8 * 4)
        api.olLaunchKernel(queue, host, foo, pointer_arg(out), launch_args(2, 4))
        api.olSyncQueue(queue)
        assert list((ctypes.c_uint32 * 8).from_address(out)) == list(range(8))
        assert api.olGetMemInfo(out + 5, MemInfo.BASE) == out
        api.olMemFree(out)
        api.olDestroyQueue(queue)
    api.olShutDown()
    assert _state.STATE.refcount == 0
    assert_uninitialized()
    expect_error(ErrorCode.UNINITIALIZED, api.olCreateQueue, host)
    expect_error(ErrorCode.UNINITIALIZED, api.olGetDeviceInfo, host, DeviceInfo.NAME)


def test_nested_init_keeps_the_platforms_of_the_first(build) -> None:
    with registered(Factory(FakeGpuPlugin, PlatformBackend.CUDA)) as (fake,):
        api.olInit(platforms=[HOST])
        api.olInit()  # only counts: the running runtime is not restarted with more platforms
        assert [backend_of(d) for d in devices()] == [HOST]
        assert fake.instances == []
        api.olShutDown()
        api.olShutDown()
    assert_uninitialized()


def test_ten_init_shutdown_cycles(build) -> None:
    image = build("basic")
    names = set()
    for cycle in range(10):
        api.olInit()
        host = host_device()
        names.add(api.olGetDeviceInfo(host, DeviceInfo.NAME))
        queue = api.olCreateQueue(host)
        out = api.olMemAlloc(host, AllocType.DEVICE, 16 * 4)
        foo = api.olGetSymbol(api.olCreateProgram(host, image), "foo", SymbolKind.KERNEL)
        api.olLaunchKernel(queue, host, foo, pointer_arg(out), launch_args(4, 4))
        api.olSyncQueue(queue)
        assert list((ctypes.c_uint32 * 16).from_address(out)) == list(range(16)), f"cycle {cycle}"
        api.olShutDown()
        assert_uninitialized()
    assert len(names) == 1
    assert offloadrt_threads() == []


def test_init_after_the_last_shutdown_starts_afresh(build) -> None:
    image = build("basic")
    api.olInit()
    old_host = host_device()
    old_platform = api.olGetDeviceInfo(old_host, DeviceInfo.PLATFORM)
    old_queue = api.olCreateQueue(old_host)
    old_program = api.olCreateProgram(old_host, image)
    old_foo = api.olGetSymbol(old_program, "foo", SymbolKind.KERNEL)
    old_ptr = api.olMemAlloc(old_host, AllocType.HOST, 64)
    api.olShutDown()

    api.olInit()
    host = host_device()
    assert host is not old_host
    assert api.olGetDeviceInfo(host, DeviceInfo.PLATFORM) is not old_platform
    # every handle of the old runtime is rejected, none crashes
    expect_error(ErrorCode.INVALID_DEVICE, api.olGetDeviceInfo, old_host, DeviceInfo.NAME)
    expect_error(ErrorCode.INVALID_DEVICE, api.olGetDeviceInfoSize, old_host, DeviceInfo.NAME)
    expect_error(ErrorCode.INVALID_DEVICE, api.olCreateQueue, old_host)
    expect_error(ErrorCode.INVALID_DEVICE, api.olMemAlloc, old_host, AllocType.HOST, 64)
    expect_error(ErrorCode.INVALID_DEVICE, api.olCreateProgram, old_host, image)
    expect_error(ErrorCode.INVALID_DEVICE, api.olIsValidBinary, old_host, image)
    expect_error(ErrorCode.INVALID_DEVICE, api.olLaunchKernel, None, old_host, old_foo, pointer_arg(old_ptr),
                 launch_args())
    expect_error(ErrorCode.INVALID_PLATFORM, api.olGetPlatformInfo, old_platform, PlatformInfo.NAME)
    expect_error(ErrorCode.INVALID_QUEUE, api.olSyncQueue, old_queue)
    expect_error(ErrorCode.INVALID_QUEUE, api.olDestroyQueue, old_queue)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetSymbol, old_program, "foo", SymbolKind.KERNEL)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olDestroyProgram, old_program)
    expect_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, old_ptr, MemInfo.SIZE)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olMemFree, old_ptr)
    # an old kernel on a new queue of the new device is a kernel of another device
    queue = api.olCreateQueue(host)
    out = api.olMemAlloc(host, AllocType.HOST, 4 * 4)
    expect_error(ErrorCode.INVALID_DEVICE, api.olLaunchKernel, queue, host, old_foo, pointer_arg(out), launch_args())
    # the new runtime works
    foo = api.olGetSymbol(api.olCreateProgram(host, image), "foo", SymbolKind.KERNEL)
    api.olLaunchKernel(queue, host, foo, pointer_arg(out), launch_args(1, 4))
    api.olSyncQueue(queue)
    assert list((ctypes.c_uint32 * 4).from_address(out)) == [0, 1, 2, 3]
    api.olShutDown()


def test_events_of_a_previous_runtime_are_rejected() -> None:
    api.olInit()
    queue = api.olCreateQueue(host_device())
    old_event = api.olCreateEvent(queue)
    api.olShutDown()
    api.olInit()
    new_queue = api.olCreateQueue(host_device())
    expect_error(ErrorCode.INVALID_EVENT, api.olSyncEvent, old_event)
    expect_error(ErrorCode.INVALID_EVENT, api.olGetEventInfo, old_event, offloadrt.EventInfo.IS_COMPLETE)
    expect_error(ErrorCode.INVALID_EVENT, api.olWaitEvents, new_queue, [old_event])
    expect_error(ErrorCode.INVALID_EVENT, api.olDestroyEvent, old_event)
    api.olShutDown()


@pytest.mark.parametrize("platforms", [[HOST], (HOST,), [], [PlatformBackend.AMDGPU], iter([int(HOST)])],
                         ids=["list", "tuple", "empty", "unregistered-backend", "iterator-of-int"])
def test_init_with_only_the_host_platform(platforms) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        api.olInit(platforms=platforms)
    # AMDGPU was asked for and did not start (no ROCm here): a warning says so; nothing else warns
    assert [str(w.message).split(",")[0] for w in caught] == (
        ["offloadrt: olInit was asked for AMDGPU"] if platforms == [PlatformBackend.AMDGPU] else [])
    found = devices()
    assert len(found) == 1
    assert api.olGetDeviceInfo(found[0], DeviceInfo.TYPE) == DeviceType.HOST
    assert backend_of(found[0]) == HOST
    api.olShutDown()
    assert_uninitialized()


@pytest.mark.parametrize("platforms", [[0x7FFFFFFF], [PlatformBackend.HOST, 0x7FFFFFFF], [-1]])
def test_init_with_an_unknown_platform_is_invalid_enumeration(platforms: list[int]) -> None:
    with registered(Factory(FakeGpuPlugin, PlatformBackend.CUDA)) as (fake,):
        err = expect_error(ErrorCode.INVALID_ENUMERATION, api.olInit, platforms=platforms)
        assert str(platforms[-1]) in err.details or hex(platforms[-1]) in err.details
        assert fake.instances == [], "no plugin may start when olInit fails"
    assert _state.STATE.refcount == 0
    assert_uninitialized()


@pytest.mark.parametrize("platforms", ["HOST", 3, [None]])
def test_init_with_malformed_platforms_fails_and_leaves_runtime_uninitialized(platforms: object) -> None:
    with pytest.raises(OffloadError) as info:
        api.olInit(platforms=platforms)  # type: ignore[arg-type]
    assert info.value.code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.INVALID_ENUMERATION)
    assert_uninitialized()


def test_a_failed_nested_init_does_not_count() -> None:
    api.olInit()
    expect_error(ErrorCode.INVALID_ENUMERATION, api.olInit, platforms=[0x7FFFFFFF])
    api.olShutDown()
    assert_uninitialized()


# ---- what the last olShutDown releases ------------------------------------------------------

def _gated_work(host: api.Device, queue: api.Queue, spin: api.Symbol, gate: threading.Event,
                log: list[object]) -> ctypes.c_uint32:
    """Enqueue: wait for ``gate``; spin for a while and set a flag; log the flag. Returns the flag."""
    flag = ctypes.c_uint32(0)

    def wait_gate(_: object) -> None:
        log.append("gate" if gate.wait(GATE_TIMEOUT) else "gate timed out")

    api.olLaunchHostFunction(queue, wait_gate)
    api.olLaunchKernel(queue, host, spin, struct.pack("QP", SPIN_ITERATIONS, ctypes.addressof(flag)),
                       launch_args())
    api.olLaunchHostFunction(queue, lambda _: log.append(("after spin", flag.value)))
    return flag


def test_last_shutdown_drains_parked_queues_and_syncs_live_ones(build) -> None:
    api.olInit()
    host = host_device()
    spin = api.olGetSymbol(api.olCreateProgram(host, build("basic")), "spin", SymbolKind.KERNEL)
    gate = threading.Event()
    parked_log: list[object] = []
    live_log: list[object] = []
    parked = api.olCreateQueue(host)
    live = api.olCreateQueue(host)
    parked_flag = _gated_work(host, parked, spin, gate, parked_log)
    live_flag = _gated_work(host, live, spin, gate, live_log)
    assert api.olGetQueueInfo(parked, QueueInfo.EMPTY) is False
    api.olDestroyQueue(parked)  # busy: parked, its work must still run
    api.olInit()
    api.olShutDown()  # not the last one: nothing is drained
    assert parked_log == [] and live_log == []
    gate.set()
    call_with_timeout(api.olShutDown, timeout=60.0)
    assert parked_log == ["gate", ("after spin", 1)]
    assert live_log == ["gate", ("after spin", 1)]
    assert parked_flag.value == 1 and live_flag.value == 1
    assert offloadrt_threads() == [], "the last olShutDown must stop every queue thread"
    assert_uninitialized()


def test_last_shutdown_drains_failed_queues_without_raising(build) -> None:
    api.olInit()
    host = host_device()
    program = api.olCreateProgram(host, build("basic"))
    fail_with = api.olGetSymbol(program, "fail_with", SymbolKind.KERNEL)
    increment = api.olGetSymbol(program, "increment", SymbolKind.KERNEL)
    counter = ctypes.c_uint32(0)
    gate = threading.Event()
    queues = [api.olCreateQueue(host) for _ in range(2)]
    for queue in queues:
        api.olLaunchHostFunction(queue, lambda _: gate.wait(GATE_TIMEOUT))
        api.olLaunchKernel(queue, host, fail_with, struct.pack("i", 77), launch_args())
        api.olLaunchKernel(queue, host, increment, pointer_arg(ctypes.addressof(counter)), launch_args())
    api.olDestroyQueue(queues[1])  # busy: parked, and it will fail nobody watching
    gate.set()
    with pytest.warns(offloadrt.OffloadWarning, match="77"):
        api.olShutDown()  # a queue's error is not a failure of olShutDown
    assert counter.value == 0, "work behind a kernel fault must not run"
    assert offloadrt_threads() == []
    assert_uninitialized()


def _arm_destructor(host: api.Device, program: api.Program, target: ctypes.c_uint32) -> None:
    arm = api.olGetSymbol(program, "arm_destructor", SymbolKind.KERNEL)
    api.olLaunchKernel(None, host, arm, pointer_arg(ctypes.addressof(target)), launch_args())


def test_last_shutdown_unloads_a_program(build) -> None:
    api.olInit()
    host = host_device()
    target = ctypes.c_uint32(0)
    _arm_destructor(host, api.olCreateProgram(host, build("lifetime")), target)
    assert target.value == 0
    api.olShutDown()
    assert target.value == 0xD7, "lifetime.c's destructor must run at the last olShutDown"


def test_last_shutdown_unloads_every_program(build) -> None:
    api.olInit()
    host = host_device()
    lifetime = api.olCreateProgram(host, build("lifetime"))
    second = api.olCreateProgram(host, build("lifetime"))  # a second, independent copy
    counters = [api.olGetSymbolInfo(api.olGetSymbol(p, "load_count", SymbolKind.GLOBAL_VARIABLE),
                                    offloadrt.SymbolInfo.GLOBAL_VARIABLE_ADDRESS) for p in (lifetime, second)]
    assert counters[0] != counters[1], "two loads of one image must be two independent libraries"
    targets = [ctypes.c_uint32(0), ctypes.c_uint32(0)]
    queue = api.olCreateQueue(host)
    for program, target in zip((lifetime, second), targets, strict=True):
        arm = api.olGetSymbol(program, "arm_destructor", SymbolKind.KERNEL)
        api.olLaunchKernel(queue, host, arm, pointer_arg(ctypes.addressof(target)), launch_args())
    api.olSyncQueue(queue)
    assert [t.value for t in targets] == [0, 0]
    api.olShutDown()
    assert [t.value for t in targets] == [0xD7, 0xD7], "lifetime.c's destructor must run at the last olShutDown"


def test_last_shutdown_frees_every_allocation() -> None:
    with registered(Factory(FakeGpuPlugin, PlatformBackend.CUDA)) as (fake,):
        api.olInit()
        host = host_device()
        gpu = next(d for d in devices() if backend_of(d) == PlatformBackend.CUDA)
        gpu_ptrs = [api.olMemAlloc(gpu, kind, 4096 + 100 * i) for i, kind in enumerate(AllocType)]
        host_ptrs = [api.olMemAlloc(host, kind, 128) for kind in AllocType]
        api.olMemFree(gpu_ptrs[0])
        context = running_context()
        assert len(context.allocations) == 5
        api.olShutDown()
        assert len(context.allocations) == 0
        assert sorted(fake.last.freed) == sorted(gpu_ptrs), "every allocation of the device is freed exactly once"

        api.olInit()
        for ptr in gpu_ptrs + host_ptrs:
            expect_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, ptr, MemInfo.BASE)
            expect_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, ptr + 1, MemInfo.SIZE)
            expect_error(ErrorCode.INVALID_ARGUMENT, api.olMemFree, ptr)
        api.olShutDown()


def test_last_shutdown_deinitialises_every_plugin() -> None:
    with registered(Factory(FakeGpuPlugin, PlatformBackend.CUDA),
                    Factory(MissingDriverPlugin, PlatformBackend.AMDGPU)) as (fake, missing):
        api.olInit()
        context = running_context()
        plugins = [platform._plugin for platform in context.platforms]
        assert {p.backend for p in plugins} == {PlatformBackend.CUDA, HOST}
        for device in devices():
            queue = api.olCreateQueue(device)
            api.olLaunchHostFunction(queue, lambda _: None)
            api.olDestroyQueue(api.olCreateQueue(device))
        api.olShutDown()
        for plugin in plugins:
            assert not plugin.initialized, plugin.name
            assert plugin.devices == [], plugin.name
        assert fake.last.deinit_calls == 1
        assert missing.last.deinit_calls <= 1, "a plugin is de-initialised at most once"
        assert not missing.last.initialized
        assert offloadrt_threads() == []
        assert_uninitialized()


# ---- the plugin registry --------------------------------------------------------------------

def test_plugin_with_missing_driver_reports_zero_devices_and_why() -> None:
    with registered(Factory(MissingDriverPlugin, PlatformBackend.CUDA)) as (missing,):
        api.olInit()  # must not raise
        assert len(missing.instances) == 1
        assert [backend_of(d) for d in devices()] == [HOST]
        context = running_context()
        reasons = dict(context.unavailable)
        assert MissingDriverPlugin.name in reasons
        assert "vendor package is not installed" in reasons[MissingDriverPlugin.name]
        assert api.olGetDeviceInfo(host_device(), DeviceInfo.TYPE) == DeviceType.HOST
        api.olShutDown()


def test_plugin_whose_driver_fails_to_start_is_reported_not_raised() -> None:
    with registered(Factory(BrokenDriverPlugin, PlatformBackend.CUDA)) as (broken,):
        with pytest.warns(offloadrt.OffloadWarning, match="cuInit"):
            api.olInit()
        assert [backend_of(d) for d in devices()] == [HOST]
        context = running_context()
        assert "cuInit" in dict(context.unavailable)[BrokenDriverPlugin.name]
        api.olShutDown()
        assert len(broken.instances) == 1
    assert_uninitialized()


def test_deinit_failure_of_a_plugin_without_devices_is_not_dropped() -> None:
    """Plugins without devices are stopped too; their failure must reach the user (as a
    warning or in olShutDown's error), never vanish."""
    with registered(Factory(MissingDriverFailingDeinitPlugin, PlatformBackend.CUDA)) as (missing,):
        reported: list[str] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            api.olInit()
            try:
                api.olShutDown()
            except OffloadError as exc:
                reported.append(str(exc))
        reported.extend(str(w.message) for w in caught)
        assert missing.last.deinit_calls == 1
        assert any("refused to shut down" in text for text in reported), reported


def test_available_plugin_is_an_extra_platform(build) -> None:
    with registered(Factory(FakeGpuPlugin, PlatformBackend.AMDGPU)) as (fake,):
        api.olInit()
        found = devices()
        assert sorted(backend_of(d) for d in found) == [PlatformBackend.AMDGPU, HOST]
        gpu = next(d for d in found if backend_of(d) == PlatformBackend.AMDGPU)
        platform = api.olGetDeviceInfo(gpu, DeviceInfo.PLATFORM)
        assert api.olGetPlatformInfo(platform, PlatformInfo.NAME) == "fake-amdgpu"
        assert api.olGetDeviceInfo(gpu, DeviceInfo.TYPE) == DeviceType.GPU
        # a real device: load, launch, copy back to the host
        host = host_device()
        foo = api.olGetSymbol(api.olCreateProgram(gpu, build("basic")), "foo", SymbolKind.KERNEL)
        queue = api.olCreateQueue(gpu)
        out = api.olMemAlloc(gpu, AllocType.DEVICE, 32 * 4)
        result = (ctypes.c_uint32 * 32)()
        api.olLaunchKernel(queue, gpu, foo, pointer_arg(out), launch_args(4, 8))
        api.olMemcpy(queue, ctypes.addressof(result), host, out, gpu, 32 * 4)
        api.olSyncQueue(queue)
        assert list(result) == list(range(32))
        assert api.olGetMemInfo(out + 4, MemInfo.DEVICE) is gpu
        api.olShutDown()
        assert fake.last.deinit_calls == 1


def test_init_with_only_host_skips_other_registered_plugins() -> None:
    with registered(Factory(FakeGpuPlugin, PlatformBackend.CUDA),
                    Factory(MissingDriverPlugin, PlatformBackend.AMDGPU)) as (fake, missing):
        api.olInit(platforms=[HOST])
        assert [backend_of(d) for d in devices()] == [HOST]
        assert fake.instances == [] and missing.instances == [], "plugins not asked for must not even be created"
        api.olShutDown()
        # naming one backend starts it and the host, nothing else
        api.olInit(platforms=[PlatformBackend.CUDA])
        assert sorted(backend_of(d) for d in devices()) == [PlatformBackend.CUDA, HOST]
        assert missing.instances == []
        api.olShutDown()


def test_shutdown_reports_every_plugin_failure_and_still_shuts_down() -> None:
    with registered(Factory(FailingDeinitPlugin, PlatformBackend.CUDA),
                    Factory(FailingDeinitPlugin, PlatformBackend.AMDGPU)) as (cuda, amd):
        api.olInit()
        context = running_context()
        host_plugin = next(p._plugin for p in context.platforms if p.backend == HOST)
        gpu_ptrs = [api.olMemAlloc(d, AllocType.DEVICE, 256) for d in devices() if backend_of(d) != HOST]
        ptrs = gpu_ptrs + [api.olMemAlloc(host_device(), AllocType.DEVICE, 256)]
        for device in devices():
            api.olLaunchHostFunction(api.olCreateQueue(device), lambda _: None)
        with pytest.raises(OffloadError) as info:
            call_with_timeout(api.olShutDown, timeout=60.0)
        err = info.value
        assert len(err.errors) == 2, f"both plugin failures must be carried: {err!r}"
        assert all(isinstance(e, OffloadError) and e.code == ErrorCode.BACKEND_FAILURE for e in err.errors)
        details = sorted(e.details for e in err.errors)
        assert "fake-amdgpu" in details[0] and "fake-cuda" in details[1]
        assert "fake-amdgpu" in str(err) and "fake-cuda" in str(err)
        # fully shut down all the same
        assert _state.STATE.refcount == 0
        assert_uninitialized()
        assert len(context.allocations) == 0
        assert cuda.last.deinit_calls == 1 and amd.last.deinit_calls == 1
        assert sorted(cuda.last.freed + amd.last.freed) == sorted(gpu_ptrs)
        assert not host_plugin.initialized and cuda.last.devices == [] and amd.last.devices == []
        assert offloadrt_threads() == []
        # and it can start again
        api.olInit(platforms=[HOST])
        assert [backend_of(d) for d in devices()] == [HOST]
        for ptr in ptrs:
            expect_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, ptr, MemInfo.BASE)
        api.olShutDown()


# ---- interpreter exit without olShutDown ----------------------------------------------------

EXIT_SCRIPT = textwrap.dedent("""
    import struct, sys, threading
    from offloadrt import AllocType, DeviceInfo, DeviceType, Dimensions, KernelLaunchSizeArgs, SymbolKind, api

    image = open(sys.argv[1], "rb").read()
    nested = int(sys.argv[2])
    for _ in range(nested):
        api.olInit()
    found = []
    api.olIterateDevices(lambda d, _: found.append(d))
    host = next(d for d in found if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
    program = api.olCreateProgram(host, image)
    spin = api.olGetSymbol(program, "spin", SymbolKind.KERNEL)
    foo = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    flag = api.olMemAlloc(host, AllocType.HOST, 4)
    out = api.olMemAlloc(host, AllocType.DEVICE, 1024)
    one = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(1, 1, 1))
    forever = struct.pack("QP", 1 << 63, flag)
    never = threading.Event()
    spinning = threading.Event()

    blocked = api.olCreateQueue(host)  # a host function that never returns, work behind it
    api.olLaunchHostFunction(blocked, lambda _: never.wait())
    api.olLaunchKernel(blocked, host, foo, struct.pack("P", out), one)
    event = api.olCreateEvent(blocked)

    busy = api.olCreateQueue(host)  # a kernel that spins forever
    api.olLaunchHostFunction(busy, lambda _: spinning.set())
    api.olLaunchKernel(busy, host, spin, forever, one)

    waiting = api.olCreateQueue(host)  # waits for the blocked queue
    api.olWaitEvents(waiting, [event])
    api.olMemFill(waiting, out, b"\\x01\\x02\\x03\\x04", 1024)

    groups = api.olCreateQueue(host)  # a multi-group spin on the group pool
    api.olLaunchKernel(groups, host, spin, forever,
                       KernelLaunchSizeArgs(1, Dimensions(8, 1, 1), Dimensions(1, 1, 1)))

    parked = api.olCreateQueue(host)  # destroyed while busy: parked
    api.olLaunchHostFunction(parked, lambda _: never.wait())
    api.olDestroyQueue(parked)

    assert spinning.wait(20), "the spin kernel never started"
    print("exiting with pending work", flush=True)
""")


@pytest.mark.parametrize("nested", [1, 3])
def test_exit_without_shutdown_is_clean(build, tmp_path: Path, nested: int) -> None:
    image_path = tmp_path / "basic.so"
    image_path.write_bytes(build("basic"))
    script = tmp_path / "exit_without_shutdown.py"
    script.write_text(EXIT_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    try:
        proc = subprocess.run([sys.executable, str(script), str(image_path), str(nested)], check=False,
                              capture_output=True, text=True, timeout=30, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the interpreter hung at exit (30 s); stderr: {exc.stderr!r}")
    assert "exiting with pending work" in proc.stdout, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert "Fatal Python error" not in proc.stderr, proc.stderr


# ---- exiting without olShutDown --------------------------------------------------------------------

DROPPED_WORK_SCRIPT = """
    import sys, threading
    from offloadrt import api
    api.olInit()
    devices = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    host = devices[-1]
    if sys.argv[1] == "busy":
        queue = api.olCreateQueue(host)
        never = threading.Event()
        api.olLaunchHostFunction(queue, lambda _: never.wait())
        api.olLaunchHostFunction(queue, lambda _: print("ran after all"))
        parked = api.olCreateQueue(host)
        api.olLaunchHostFunction(parked, lambda _: never.wait())
        api.olDestroyQueue(parked)
    elif sys.argv[1] == "idle":
        queue = api.olCreateQueue(host)
    else:
        api.olShutDown()
"""


@pytest.mark.parametrize("state", ["busy", "idle", "shut-down"])
def test_exit_with_queued_work_warns_once_saying_what_is_dropped(state: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_TRACE", "PYTHONWARNINGS")}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(DROPPED_WORK_SCRIPT), state], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "OffloadWarning" in line]
    if state != "busy":
        assert warned == [], result.stderr
        return
    assert len(warned) == 1, result.stderr
    assert "exiting without olShutDown; 3 queued operations will not finish" in warned[0]
    assert "Queue#1 on host:0 (2 operations)" in warned[0] and "a destroyed queue on host:0 (1 operation)" in warned[0]
    assert "ran after all" not in result.stdout


# ---- platforms that did not start ------------------------------------------------------------------

def test_unavailable_platforms_lists_what_did_not_start_and_why() -> None:
    with registered(Factory(MissingDriverPlugin, PlatformBackend.CUDA)):
        expect_error(ErrorCode.UNINITIALIZED, offloadrt.unavailable_platforms)
        api.olInit()
        try:
            missing = {p.backend: p for p in offloadrt.unavailable_platforms()}
            assert missing[PlatformBackend.CUDA].name == MissingDriverPlugin.name
            assert missing[PlatformBackend.CUDA].reason.startswith("the vendor package is not installed")
            assert PlatformBackend.HOST not in missing
            assert {p.name for p in missing.values()} == set(dict(_state.STATE.context.unavailable))
        finally:
            api.olShutDown()


def test_a_platform_asked_for_that_did_not_start_is_a_warning() -> None:
    with registered(Factory(MissingDriverPlugin, PlatformBackend.CUDA)):
        with pytest.warns(offloadrt.OffloadWarning) as caught:
            api.olInit(platforms=[PlatformBackend.CUDA, PlatformBackend.LEVEL_ZERO, PlatformBackend.HOST])
        try:
            texts = [str(w.message) for w in caught]
            assert len(texts) == 2, texts
            assert "asked for CUDA" in texts[0] and "the vendor package is not installed" in texts[0]
            assert "asked for LEVEL_ZERO, but offloadrt has no plugin for it" in texts[1]
            assert all(w.filename == __file__ for w in caught), "the warning points at the olInit call"
        finally:
            api.olShutDown()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        api.olInit(platforms=[PlatformBackend.HOST])  # what started is no news
        api.olShutDown()
