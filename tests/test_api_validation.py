"""Argument validation of every ``ol*`` entry point, and the success path next to each error.

The rules come from docs/api.md and liboffload: UNINITIALIZED outside olInit/olShutDown,
None handle → INVALID_NULL_HANDLE, wrong handle type → INVALID_ARGUMENT, None/0 pointer →
INVALID_NULL_POINTER, no enum member → INVALID_ENUMERATION, bad sizes → INVALID_SIZE, symbol
kinds, handles used after destroy, typed info values with their C sizes, OFFLOAD_TRACE and
OFFLOAD_DISABLE_VALIDATION. Every error must leave the runtime (and the queue involved) usable.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import re
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import pytest
from conftest import Gate, all_devices, expect_error, launch_args, u32_view

import offloadrt
from offloadrt import (
    AllocType,
    CodeLocation,
    DeviceInfo,
    DeviceType,
    Dimensions,
    ErrorCode,
    EventFlags,
    EventInfo,
    FpCapabilityFlag,
    KernelLaunchSizeArgs,
    MemInfo,
    OffloadError,
    PlatformBackend,
    PlatformInfo,
    QueueInfo,
    SymbolInfo,
    SymbolKind,
    api,
)

# The entry points of docs/api.md, every one of them: (required, optional) parameters.
CONTRACT_ENTRY_POINTS: dict[str, tuple[int, int]] = {
    "olInit": (0, 1), "olShutDown": (0, 0),
    "olGetPlatformInfo": (2, 0), "olGetPlatformInfoSize": (2, 0),
    "olIterateDevices": (1, 1), "olGetDeviceInfo": (2, 0), "olGetDeviceInfoSize": (2, 0),
    "olMemAlloc": (3, 0), "olMemFree": (1, 0), "olGetMemInfo": (2, 0), "olGetMemInfoSize": (2, 0),
    "olMemcpy": (6, 0), "olMemFill": (4, 0), "olMemRegister": (3, 1), "olMemUnregister": (2, 0),
    "olCreateQueue": (1, 0), "olDestroyQueue": (1, 0), "olSyncQueue": (1, 0), "olQueryQueue": (1, 0),
    "olWaitEvents": (2, 0), "olGetQueueInfo": (2, 0), "olGetQueueInfoSize": (2, 0),
    "olLaunchHostFunction": (2, 1), "olGetQueueError": (1, 0),
    "olCreateEvent": (1, 1), "olDestroyEvent": (1, 0), "olSyncEvent": (1, 0), "olGetEventInfo": (2, 0),
    "olGetEventInfoSize": (2, 0), "olGetEventElapsedTime": (2, 0),
    "olCreateProgram": (2, 0), "olDestroyProgram": (1, 0), "olIsValidBinary": (2, 0),
    "olGetSymbol": (3, 0), "olGetSymbolInfo": (2, 0), "olGetSymbolInfoSize": (2, 0),
    "olLaunchKernel": (5, 0), "olCalculateOptimalOccupancy": (3, 0),
}
# Entry points without a handle parameter (the handle tables below must cover all the others).
NO_HANDLE_ENTRY_POINTS = {"olInit", "olShutDown", "olIterateDevices", "olMemFree", "olGetMemInfo", "olGetMemInfoSize"}
# FORCE_UINT32, the value liboffload's tests use, one past the last member, and a negative number.
BAD_ENUM_VALUES = (0x7FFFFFFF, -1)
CANARY = 0xAA


def expect(code: ErrorCode, fn: Callable[..., Any], *args: Any) -> OffloadError:
    """expect_error, plus: the details are a real, non-blank string."""
    error = expect_error(code, fn, *args)
    assert isinstance(error.details, str) and error.details.strip(), f"{fn.__name__}: blank details {error!r}"
    return error


def pointer_bytes(address: int) -> bytes:
    """A kernel argument blob holding one pointer (``foo``, ``read``, ``increment``...)."""
    return struct.pack("P", address)


def device_type(device: api.Device) -> DeviceType:
    return api.olGetDeviceInfo(device, DeviceInfo.TYPE)


def assert_runtime_works(device: api.Device, program: api.Program) -> None:
    """A whole round: allocate, fill, launch foo on a new queue, record an event, check, release."""
    kernel = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    out = api.olMemAlloc(device, AllocType.MANAGED, 64 * 4)
    queue = api.olCreateQueue(device)
    api.olMemFill(queue, out, b"\xff\xff\xff\xff", 64 * 4)
    api.olLaunchKernel(queue, device, kernel, pointer_bytes(out), launch_args(4, 16))
    event = api.olCreateEvent(queue)
    api.olSyncEvent(event)
    assert list(u32_view(out, 64)) == list(range(64))
    assert api.olGetQueueError(queue) == (None, None)
    api.olDestroyEvent(event)
    api.olDestroyQueue(queue)
    api.olMemFree(out)


# ---- a set of live handles -----------------------------------------------------------------------

@dataclass
class World:
    host: api.Device
    platform: api.Platform
    queue: api.Queue
    event: api.Event
    event2: api.Event
    program: api.Program
    kernel: api.Symbol
    global_var: api.Symbol
    ptr: int  # 4096 bytes of HOST memory
    ptr2: int  # 4096 bytes of DEVICE memory
    image: bytes

    def handles(self) -> list[object]:
        return [self.platform, self.host, self.queue, self.event, self.program, self.kernel]


@pytest.fixture
def world(host: api.Device, queue: api.Queue, basic: api.Program, build) -> World:
    ptr = api.olMemAlloc(host, AllocType.HOST, 4096)
    ptr2 = api.olMemAlloc(host, AllocType.DEVICE, 4096)
    ctypes.memset(ptr, CANARY, 4096)
    ctypes.memset(ptr2, CANARY, 4096)
    event = api.olCreateEvent(queue, EventFlags.ENABLE_PROFILING)  # timed: olGetEventElapsedTime takes them
    event2 = api.olCreateEvent(queue, EventFlags.ENABLE_PROFILING)
    return World(host=host, platform=api.olGetDeviceInfo(host, DeviceInfo.PLATFORM), queue=queue, event=event,
                 event2=event2, program=basic, kernel=api.olGetSymbol(basic, "foo", SymbolKind.KERNEL),
                 global_var=api.olGetSymbol(basic, "global", SymbolKind.GLOBAL_VARIABLE), ptr=ptr, ptr2=ptr2,
                 image=build("basic"))


def assert_world_untouched(w: World) -> None:
    """The failed calls left ``w`` as the fixture made it: its queue drains without an error, both
    buffers still hold only the canary, and a whole round of work still succeeds."""
    api.olSyncQueue(w.queue)
    assert api.olGetQueueError(w.queue) == (None, None)
    assert ctypes.string_at(w.ptr, 4096) == bytes([CANARY]) * 4096
    assert ctypes.string_at(w.ptr2, 4096) == bytes([CANARY]) * 4096
    assert_runtime_works(w.host, w.program)


def noop(_user_data: object) -> None:
    pass


def handle_calls(w: World) -> list[tuple[str, tuple[Any, ...], tuple[int, ...], tuple[int, ...]]]:
    """``(name, valid args, positions of required handles, positions of optional queues)``.

    Ordered so that running them all with the valid args succeeds: the destroy calls come last.
    """
    lsa = launch_args(1, 4)
    return [
        ("olGetPlatformInfo", (w.platform, PlatformInfo.NAME), (0,), ()),
        ("olGetPlatformInfoSize", (w.platform, PlatformInfo.NAME), (0,), ()),
        ("olGetDeviceInfo", (w.host, DeviceInfo.NAME), (0,), ()),
        ("olGetDeviceInfoSize", (w.host, DeviceInfo.NAME), (0,), ()),
        ("olMemAlloc", (w.host, AllocType.HOST, 64), (0,), ()),
        ("olMemRegister", (w.host, w.ptr2, 64), (0,), ()),
        ("olMemUnregister", (w.host, w.ptr2), (0,), ()),
        ("olMemcpy", (w.queue, w.ptr, w.host, w.ptr2, w.host, 16), (2, 4), (0,)),
        ("olMemFill", (w.queue, w.ptr, b"\x01\x02\x03\x04", 16), (), (0,)),
        ("olCreateQueue", (w.host,), (0,), ()),
        ("olSyncQueue", (w.queue,), (0,), ()),
        ("olQueryQueue", (w.queue,), (0,), ()),
        ("olWaitEvents", (w.queue, [w.event]), (0,), ()),
        ("olGetQueueInfo", (w.queue, QueueInfo.EMPTY), (0,), ()),
        ("olGetQueueInfoSize", (w.queue, QueueInfo.EMPTY), (0,), ()),
        ("olLaunchHostFunction", (w.queue, noop), (0,), ()),
        ("olGetQueueError", (w.queue,), (0,), ()),
        ("olCreateEvent", (w.queue,), (0,), ()),
        ("olSyncEvent", (w.event,), (0,), ()),
        ("olGetEventInfo", (w.event, EventInfo.IS_COMPLETE), (0,), ()),
        ("olGetEventInfoSize", (w.event, EventInfo.IS_COMPLETE), (0,), ()),
        ("olGetEventElapsedTime", (w.event, w.event2), (0, 1), ()),
        ("olCreateProgram", (w.host, w.image), (0,), ()),
        ("olIsValidBinary", (w.host, w.image), (0,), ()),
        ("olGetSymbol", (w.program, "foo", SymbolKind.KERNEL), (0,), ()),
        ("olGetSymbolInfo", (w.kernel, SymbolInfo.KIND), (0,), ()),
        ("olGetSymbolInfoSize", (w.kernel, SymbolInfo.KIND), (0,), ()),
        ("olLaunchKernel", (w.queue, w.host, w.kernel, pointer_bytes(w.ptr), lsa), (1, 2), (0,)),
        ("olCalculateOptimalOccupancy", (w.host, w.kernel, 0), (0, 1), ()),
        ("olDestroyEvent", (w.event2,), (0,), ()),
        ("olDestroyQueue", (w.queue,), (0,), ()),
        ("olDestroyProgram", (w.program,), (0,), ()),
    ]


def replaced(args: tuple[Any, ...], position: int, value: object) -> tuple[Any, ...]:
    return args[:position] + (value,) + args[position + 1:]


# ---- the API surface and UNINITIALIZED --------------------------------------------------------------

def test_api_exports_exactly_the_contract_entry_points() -> None:
    exported = {name for name in api.__all__ if name.startswith("ol") and not name.endswith("WithCodeLoc")}
    assert exported == set(CONTRACT_ENTRY_POINTS)
    for name in exported:
        assert callable(getattr(api, name)), name
        assert getattr(api, name).__name__ == name


def test_every_entry_point_has_its_with_code_loc_variant() -> None:
    """LLVM 22 pairs each ``olX`` with ``olXWithCodeLoc(..., CodeLocation)``; so does offloadrt."""
    variants = {name for name in api.__all__ if name.endswith("WithCodeLoc")}
    assert variants == {f"{name}WithCodeLoc" for name in CONTRACT_ENTRY_POINTS}
    for name in CONTRACT_ENTRY_POINTS:
        if name == "olInit":
            continue
        plain = list(inspect.signature(getattr(api, name)).parameters)
        variant = list(inspect.signature(getattr(api, f"{name}WithCodeLoc")).parameters)
        assert variant == [*plain, "code_location"], name


def test_with_code_loc_variants_behave_as_the_plain_calls_and_trace_the_location() -> None:
    location = CodeLocation("main", "app.c", 12, 3)
    with pytest.raises(OffloadError) as info:
        api.olMemFreeWithCodeLoc(0x1234, location)
    assert info.value.code == ErrorCode.UNINITIALIZED
    api.olInitWithCodeLoc(location)
    try:
        expect(ErrorCode.INVALID_ARGUMENT, api.olMemFreeWithCodeLoc, 0x1234, location)
        expect(ErrorCode.INVALID_ARGUMENT, api.olMemFreeWithCodeLoc, 0x1234, None)
        expect(ErrorCode.INVALID_ARGUMENT, api.olMemFreeWithCodeLoc, 0x1234, "app.c:12")
        devices: list[api.Device] = []
        api.olIterateDevicesWithCodeLoc(lambda device, _: devices.append(device), None, location)
        assert devices
    finally:
        api.olShutDownWithCodeLoc(location)
    traced = run_script("""
        import offloadrt
        from offloadrt import api
        api.olInit()
        try:
            api.olMemFreeWithCodeLoc(0x1234, offloadrt.CodeLocation("main", "app.c", 12, 3))
        except offloadrt.OffloadError:
            pass
        api.olShutDown()
    """, OFFLOAD_TRACE="1")
    assert traced.returncode == 0, traced.stderr
    assert "-> olMemFree(address=0x1234) at app.c:12:3 (main)" in traced.stderr


def test_entry_point_signatures_are_the_contracts(runtime: None) -> None:
    """What help() and IDEs show: the C parameters in C order, optional ones defaulting to None
    (flags to 0, as docs/api.md writes them)."""
    for name, (required, optional) in CONTRACT_ENTRY_POINTS.items():
        params = list(inspect.signature(getattr(api, name)).parameters.values())
        assert len(params) == required + optional, f"{name}{inspect.signature(getattr(api, name))}"
        assert all(p.default is inspect.Parameter.empty for p in params[:required]), name
        assert all(p.default is None or (p.name == "flags" and p.default == 0) for p in params[required:]), name
        with pytest.raises(TypeError):
            getattr(api, name)(*[None] * (required + optional + 1))


def call_with_dummies(name: str) -> Any:
    """Call ``api.<name>`` with None for every required parameter."""
    return getattr(api, name)(*[None] * CONTRACT_ENTRY_POINTS[name][0])


def assert_everything_uninitialized() -> None:
    names = sorted(name for name in api.__all__
                   if name.startswith("ol") and not name.startswith("olInit") and not name.endswith("WithCodeLoc"))
    assert len(names) == len(CONTRACT_ENTRY_POINTS) - 1
    for name in names:
        with pytest.raises(OffloadError) as info:
            call_with_dummies(name)
        assert info.value.code == ErrorCode.UNINITIALIZED, f"{name}: expected UNINITIALIZED, got {info.value!r}"
        assert info.value.details.strip(), f"{name}: blank details"


def test_every_entry_point_but_olinit_is_uninitialized_before_init_and_after_the_last_shutdown(build) -> None:
    assert_everything_uninitialized()
    api.olInit()
    try:
        devices = all_devices()
        host = next(d for d in devices if device_type(d) == DeviceType.HOST)
        queue = api.olCreateQueue(host)
        ptr = api.olMemAlloc(host, AllocType.HOST, 64)
        program = api.olCreateProgram(host, build("basic"))
        kernel = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
        event = api.olCreateEvent(queue)
        api.olInit()  # nested: counts one more user
        api.olShutDown()
        assert all_devices() == devices, "a nested olShutDown must not stop the runtime"
        assert api.olGetMemInfo(ptr, MemInfo.SIZE) == 64
    finally:
        api.olShutDown()
    assert_everything_uninitialized()
    # Real handles of the stopped runtime are refused the same way, before any other check.
    expect(ErrorCode.UNINITIALIZED, api.olGetDeviceInfo, host, DeviceInfo.NAME)
    expect(ErrorCode.UNINITIALIZED, api.olSyncQueue, queue)
    expect(ErrorCode.UNINITIALIZED, api.olSyncEvent, event)
    expect(ErrorCode.UNINITIALIZED, api.olMemFree, ptr)
    expect(ErrorCode.UNINITIALIZED, api.olLaunchKernel, None, host, kernel, pointer_bytes(ptr), launch_args())
    expect(ErrorCode.UNINITIALIZED, api.olShutDown)  # one olShutDown too many
    # and a fresh olInit works again
    api.olInit()
    try:
        assert len(all_devices()) >= 1
    finally:
        api.olShutDown()
    assert_everything_uninitialized()


def test_olinit_with_a_bad_platform_is_invalid_enumeration_and_starts_nothing() -> None:
    for bad in BAD_ENUM_VALUES:
        expect(ErrorCode.INVALID_ENUMERATION, api.olInit, [PlatformBackend.HOST, bad])
    expect(ErrorCode.INVALID_ARGUMENT, api.olInit, 5)
    expect(ErrorCode.UNINITIALIZED, api.olIterateDevices, noop)
    api.olInit([PlatformBackend.HOST])
    try:
        assert any(device_type(d) == DeviceType.HOST for d in all_devices())
    finally:
        api.olShutDown()
    expect(ErrorCode.UNINITIALIZED, api.olIterateDevices, noop)


# ---- success paths ---------------------------------------------------------------------------------

def test_every_entry_point_succeeds_with_valid_arguments(world: World) -> None:
    w = world
    results = {}
    for name, args, _, _ in handle_calls(w):
        if name == "olCalculateOptimalOccupancy":
            try:
                results[name] = api.olCalculateOptimalOccupancy(*args)
            except OffloadError as exc:  # liboffload: AMDGPU and the host answer UNSUPPORTED
                assert exc.code == ErrorCode.UNSUPPORTED and exc.details, exc
                results[name] = None
            continue
        results[name] = getattr(api, name)(*args)
    assert isinstance(results["olGetPlatformInfo"], str)
    assert results["olGetPlatformInfoSize"] == len(results["olGetPlatformInfo"].encode()) + 1
    assert isinstance(results["olMemAlloc"], int) and results["olMemAlloc"] > 0
    assert type(results["olCreateQueue"]) is api.Queue
    assert results["olQueryQueue"] is True  # synced just before
    assert results["olGetQueueError"] == (None, None)
    assert type(results["olCreateEvent"]) is api.Event
    elapsed = results["olGetEventElapsedTime"]
    assert type(elapsed) is float and elapsed >= 0.0
    assert type(results["olCreateProgram"]) is api.Program
    assert results["olIsValidBinary"] is True
    assert results["olGetSymbol"] is w.kernel, "olGetSymbol must give the same handle every time"
    assert results["olGetSymbolInfo"] is SymbolKind.KERNEL
    occupancy = results["olCalculateOptimalOccupancy"]
    assert occupancy is None or (type(occupancy) is int and occupancy > 0)
    for name in ("olSyncQueue", "olWaitEvents", "olLaunchHostFunction", "olSyncEvent", "olMemcpy", "olMemFill",
                 "olLaunchKernel", "olDestroyEvent", "olDestroyQueue", "olDestroyProgram"):
        assert results[name] is None, f"{name} has no output and must return None"
    # olIterateDevices passes user_data, stops on False and goes on for None.
    seen: list[tuple[api.Device, object]] = []
    api.olIterateDevices(lambda d, data: seen.append((d, data)), "token")
    assert seen and all(data == "token" for _, data in seen)
    stopped: list[api.Device] = []
    assert api.olIterateDevices(lambda d, _: stopped.append(d) or False) is None
    assert len(stopped) == 1
    assert api.olIsValidBinary(w.host, b"not an ELF image") is False
    assert api.olIsValidBinary(w.host, b"") is False
    assert_runtime_works(w.host, api.olCreateProgram(w.host, w.image))


def test_the_handle_tables_cover_every_entry_point_with_a_handle(world: World) -> None:
    covered = {name for name, *_ in handle_calls(world)}
    assert covered == set(CONTRACT_ENTRY_POINTS) - NO_HANDLE_ENTRY_POINTS


# ---- handles: None and wrong types ---------------------------------------------------------------

def test_none_handle_is_invalid_null_handle(world: World) -> None:
    for name, args, handles, _ in handle_calls(world):
        for position in handles:
            error = expect(ErrorCode.INVALID_NULL_HANDLE, getattr(api, name), *replaced(args, position, None))
            assert error.details, name
    expect(ErrorCode.INVALID_NULL_HANDLE, api.olWaitEvents, world.queue, [None])
    expect(ErrorCode.INVALID_NULL_HANDLE, api.olWaitEvents, world.queue, [world.event, None])
    assert_runtime_works(world.host, world.program)


def test_handle_of_the_wrong_type_is_invalid_argument(world: World) -> None:
    w = world
    checked = 0
    for name, args, handles, optional_queues in handle_calls(w):
        for position in handles + optional_queues:
            valid = args[position]
            wrong = [h for h in w.handles() if type(h) is not type(valid)] + [object(), 0x1234, "handle"]
            for value in wrong:
                with pytest.raises(OffloadError) as info:
                    getattr(api, name)(*replaced(args, position, value))
                assert info.value.code == ErrorCode.INVALID_ARGUMENT, \
                    f"{name} with {value!r} at argument {position}: expected INVALID_ARGUMENT, got {info.value!r}"
                assert info.value.details.strip()
                checked += 1
    assert checked > 150
    expect(ErrorCode.INVALID_ARGUMENT, api.olWaitEvents, w.queue, [w.queue])
    expect(ErrorCode.INVALID_ARGUMENT, api.olWaitEvents, w.queue, [w.event, object()])
    expect(ErrorCode.INVALID_ARGUMENT, api.olWaitEvents, w.queue, 5)
    # Nothing was enqueued by the failed calls: the queue is healthy and its memory untouched.
    assert_world_untouched(w)


def test_optional_queue_may_be_none(world: World) -> None:
    w = world
    api.olMemFill(None, w.ptr, b"\x01\x02\x03\x04", 16)
    assert ctypes.string_at(w.ptr, 20) == b"\x01\x02\x03\x04" * 4 + bytes([CANARY]) * 4
    api.olMemcpy(None, w.ptr2, w.host, w.ptr, w.host, 16)
    assert ctypes.string_at(w.ptr2, 20) == b"\x01\x02\x03\x04" * 4 + bytes([CANARY]) * 4
    api.olLaunchKernel(None, w.host, w.kernel, pointer_bytes(w.ptr), launch_args(2, 8))
    assert list(u32_view(w.ptr, 16)) == list(range(16))  # done when the call returns
    api.olLaunchKernel(None, w.host, api.olGetSymbol(w.program, "noargs", SymbolKind.KERNEL), None, launch_args())


# ---- pointers -------------------------------------------------------------------------------------

def test_none_or_zero_pointer_is_invalid_null_pointer(world: World) -> None:
    w = world
    address_calls = [
        ("olMemFree", (w.ptr,), 0),
        ("olGetMemInfo", (w.ptr, MemInfo.BASE), 0),
        ("olGetMemInfoSize", (w.ptr, MemInfo.BASE), 0),
        ("olMemcpy", (None, w.ptr, w.host, w.ptr2, w.host, 16), 1),
        ("olMemcpy", (None, w.ptr, w.host, w.ptr2, w.host, 16), 3),
        ("olMemcpy", (w.queue, w.ptr, w.host, w.ptr2, w.host, 16), 1),
        ("olMemcpy", (w.queue, w.ptr, w.host, w.ptr2, w.host, 16), 3),
        ("olMemFill", (None, w.ptr, b"\x07" * 4, 16), 1),
        ("olMemFill", (w.queue, w.ptr, b"\x07" * 4, 16), 1),
    ]
    for name, args, position in address_calls:
        for null in (None, 0):
            expect(ErrorCode.INVALID_NULL_POINTER, getattr(api, name), *replaced(args, position, null))
    # Pointers that are not addresses at all are wrong arguments, not null pointers.
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, "0x1000")
    # Callbacks, byte payloads, names and structs that C passes by pointer.
    expect(ErrorCode.INVALID_NULL_POINTER, api.olIterateDevices, None)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olLaunchHostFunction, w.queue, None)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olWaitEvents, w.queue, None)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olCreateProgram, w.host, None)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olIsValidBinary, w.host, None)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olGetSymbol, w.program, None, SymbolKind.KERNEL)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olMemFill, None, w.ptr, None, 16)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olMemFill, w.queue, w.ptr, None, 16)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olLaunchKernel, w.queue, w.host, w.kernel, pointer_bytes(w.ptr), None)
    expect(ErrorCode.INVALID_NULL_POINTER, api.olLaunchKernel, None, w.host, w.kernel, pointer_bytes(w.ptr), None)
    # Callables that are not callable are wrong arguments.
    expect(ErrorCode.INVALID_ARGUMENT, api.olIterateDevices, 42)
    expect(ErrorCode.INVALID_ARGUMENT, api.olLaunchHostFunction, w.queue, 42)
    # Nothing was freed, written or enqueued.
    assert api.olGetMemInfo(w.ptr, MemInfo.SIZE) == 4096
    assert_world_untouched(w)


# ---- enumerations ---------------------------------------------------------------------------------

def test_int_that_is_no_enum_member_is_invalid_enumeration(world: World) -> None:
    w = world
    enum_calls: list[tuple[str, tuple[Any, ...], int, type[IntEnum]]] = [
        ("olGetPlatformInfo", (w.platform, PlatformInfo.NAME), 1, PlatformInfo),
        ("olGetPlatformInfoSize", (w.platform, PlatformInfo.NAME), 1, PlatformInfo),
        ("olGetDeviceInfo", (w.host, DeviceInfo.NAME), 1, DeviceInfo),
        ("olGetDeviceInfoSize", (w.host, DeviceInfo.NAME), 1, DeviceInfo),
        ("olMemAlloc", (w.host, AllocType.HOST, 64), 1, AllocType),
        ("olGetMemInfo", (w.ptr, MemInfo.BASE), 1, MemInfo),
        ("olGetMemInfoSize", (w.ptr, MemInfo.BASE), 1, MemInfo),
        ("olGetQueueInfo", (w.queue, QueueInfo.EMPTY), 1, QueueInfo),
        ("olGetQueueInfoSize", (w.queue, QueueInfo.EMPTY), 1, QueueInfo),
        ("olGetEventInfo", (w.event, EventInfo.QUEUE), 1, EventInfo),
        ("olGetEventInfoSize", (w.event, EventInfo.QUEUE), 1, EventInfo),
        ("olGetSymbol", (w.program, "foo", SymbolKind.KERNEL), 2, SymbolKind),
        ("olGetSymbolInfo", (w.kernel, SymbolInfo.KIND), 1, SymbolInfo),
        ("olGetSymbolInfoSize", (w.kernel, SymbolInfo.KIND), 1, SymbolInfo),
    ]
    for name, args, position, enum in enum_calls:
        for bad in (*BAD_ENUM_VALUES, len(enum)):  # len(enum): one past the last member (C's _LAST)
            expect(ErrorCode.INVALID_ENUMERATION, getattr(api, name), *replaced(args, position, bad))
        # the plain int of a member is accepted, as C passes it
        getattr(api, name)(*replaced(args, position, int(args[position])))
    assert_runtime_works(w.host, w.program)


# ---- sizes ----------------------------------------------------------------------------------------

def test_olmemalloc_size_zero_or_negative_is_invalid_size(host: api.Device, basic: api.Program) -> None:
    for kind in AllocType:
        expect(ErrorCode.INVALID_SIZE, api.olMemAlloc, host, kind, 0)
        expect(ErrorCode.INVALID_SIZE, api.olMemAlloc, host, kind, -1)
        ptr = api.olMemAlloc(host, kind, 1)
        assert api.olGetMemInfo(ptr, MemInfo.SIZE) == 1
        assert api.olGetMemInfo(ptr, MemInfo.TYPE) is kind
        api.olMemFree(ptr)
    assert_runtime_works(host, basic)


def test_olmemfill_size_not_a_multiple_of_the_pattern_is_invalid_size(world: World) -> None:
    w = world
    cases = [(b"\x01\x02\x03\x04", 10), (b"\x01\x02", 1025), (b"\x01\x02\x03", 4), (b"\x01" * 8, 4),
             (b"\x01" * 16, 24), (b"", 16)]
    for queue in (None, w.queue):
        for pattern, size in cases:
            expect(ErrorCode.INVALID_SIZE, api.olMemFill, queue, w.ptr, pattern, size)
            expect(ErrorCode.INVALID_SIZE, api.olMemFill, queue, w.ptr, bytearray(pattern), size)
        expect(ErrorCode.INVALID_SIZE, api.olMemFill, queue, w.ptr, b"\x01", -1)
    api.olSyncQueue(w.queue)
    assert ctypes.string_at(w.ptr, 4096) == bytes([CANARY]) * 4096, "a rejected fill must write nothing"
    assert api.olGetQueueError(w.queue) == (None, None)
    # the same fills with a fitting size work, on and off the queue, and stop at fill_size
    api.olMemFill(None, w.ptr, b"\x01\x02\x03\x04", 12)
    api.olMemFill(w.queue, w.ptr + 100, memoryview(b"\x05\x06\x07"), 6)
    api.olMemFill(w.queue, w.ptr + 200, bytearray(b"\x08" * 16), 32)
    api.olMemFill(w.queue, w.ptr + 300, b"\x09", 0)
    api.olSyncQueue(w.queue)
    data = ctypes.string_at(w.ptr, 400)
    assert data[:16] == b"\x01\x02\x03\x04" * 3 + bytes([CANARY]) * 4
    assert data[100:110] == b"\x05\x06\x07" * 2 + bytes([CANARY]) * 4
    assert data[200:236] == b"\x08" * 32 + bytes([CANARY]) * 4
    assert data[300:304] == bytes([CANARY]) * 4


def test_sizes_that_do_not_fit_size_t_are_invalid_size(world: World) -> None:
    """C's size_t cannot hold 2**64: such a size must be refused, not wrapped around."""
    w = world
    wrapping = (1 << 64) + 8  # would be 8 bytes if cut to 64 bits
    for kind in AllocType:
        expect(ErrorCode.INVALID_SIZE, api.olMemAlloc, w.host, kind, 1 << 64)
        expect(ErrorCode.INVALID_SIZE, api.olMemAlloc, w.host, kind, wrapping)
    expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, w.host, AllocType.HOST, 1 << 63)
    ctypes.memset(w.ptr2, 0x55, 64)
    for queue in (None, w.queue):
        expect(ErrorCode.INVALID_SIZE, api.olMemcpy, queue, w.ptr, w.host, w.ptr2, w.host, wrapping)
        expect(ErrorCode.INVALID_SIZE, api.olMemFill, queue, w.ptr, b"\x07", wrapping)
    api.olSyncQueue(w.queue)
    assert ctypes.string_at(w.ptr, 4096) == bytes([CANARY]) * 4096, "a refused copy or fill wrote data"
    # no allocation may claim memory it does not own
    plain = ctypes.create_string_buffer(64)
    expect(ErrorCode.NOT_FOUND, api.olGetMemInfo, ctypes.addressof(plain), MemInfo.BASE)
    expect(ErrorCode.NOT_FOUND, api.olGetMemInfo, w.ptr2 + (1 << 30), MemInfo.BASE)


def test_negative_copy_size_is_invalid_size_and_zero_is_a_no_op(world: World) -> None:
    w = world
    for queue in (None, w.queue):
        expect(ErrorCode.INVALID_SIZE, api.olMemcpy, queue, w.ptr, w.host, w.ptr2, w.host, -1)
        api.olMemcpy(queue, w.ptr, w.host, w.ptr2, w.host, 0)
    api.olSyncQueue(w.queue)
    assert ctypes.string_at(w.ptr, 4096) == bytes([CANARY]) * 4096


def test_launch_with_a_zero_dimension_is_invalid_size(world: World) -> None:
    w = world
    zero_shapes = [
        KernelLaunchSizeArgs(1, Dimensions(0, 1, 1), Dimensions(4, 1, 1)),
        KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(0, 1, 1)),
        KernelLaunchSizeArgs(3, Dimensions(1, 1, 0), Dimensions(4, 1, 1)),
        KernelLaunchSizeArgs(3, Dimensions(1, 1, 1), Dimensions(4, 0, 1)),
    ]
    for queue in (None, w.queue):
        for shape in zero_shapes:
            expect(ErrorCode.INVALID_SIZE, api.olLaunchKernel, queue, w.host, w.kernel, pointer_bytes(w.ptr), shape)
        expect(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, queue, w.host, w.kernel, pointer_bytes(w.ptr),
               (1, (1, 1, 1), (4, 1, 1)))
    api.olSyncQueue(w.queue)
    assert api.olGetQueueError(w.queue) == (None, None)
    assert ctypes.string_at(w.ptr, 4096) == bytes([CANARY]) * 4096, "a rejected launch must not run"


# ---- symbols --------------------------------------------------------------------------------------

def test_symbol_kind_and_not_found_rules(world: World) -> None:
    w = world
    out = api.olMemAlloc(w.host, AllocType.HOST, 64 * 4)
    ctypes.memset(out, 0, 64 * 4)
    # launching a global variable
    for queue in (None, w.queue):
        expect(ErrorCode.SYMBOL_KIND, api.olLaunchKernel, queue, w.host, w.global_var, pointer_bytes(out),
               launch_args(1, 4))
    expect(ErrorCode.SYMBOL_KIND, api.olCalculateOptimalOccupancy, w.host, w.global_var, 0)
    # unknown names, of either kind
    for kind in SymbolKind:
        expect(ErrorCode.NOT_FOUND, api.olGetSymbol, w.program, "no_such_symbol", kind)
    # a kernel has no global-variable address or size, in value or size queries
    for prop in (SymbolInfo.GLOBAL_VARIABLE_ADDRESS, SymbolInfo.GLOBAL_VARIABLE_SIZE):
        expect(ErrorCode.SYMBOL_KIND, api.olGetSymbolInfo, w.kernel, prop)
        expect(ErrorCode.SYMBOL_KIND, api.olGetSymbolInfoSize, w.kernel, prop)
    # same handle every time, for both kinds
    assert api.olGetSymbol(w.program, "foo", SymbolKind.KERNEL) is w.kernel
    assert api.olGetSymbol(w.program, "global", SymbolKind.GLOBAL_VARIABLE) is w.global_var
    # the global is real: write() fills it, its address shows the values
    write = api.olGetSymbol(w.program, "write", SymbolKind.KERNEL)
    read = api.olGetSymbol(w.program, "read", SymbolKind.KERNEL)
    api.olLaunchKernel(w.queue, w.host, write, None, launch_args(1, 64))
    api.olLaunchKernel(w.queue, w.host, read, pointer_bytes(out), launch_args(1, 64))
    api.olSyncQueue(w.queue)
    address = api.olGetSymbolInfo(w.global_var, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert list(u32_view(address, 64)) == [2 * i for i in range(64)]
    assert list(u32_view(out, 64)) == [2 * i for i in range(64)]
    assert api.olGetQueueError(w.queue) == (None, None)


# ---- kernel on another device (needs two devices) ----------------------------------------------------

def test_work_on_a_queue_or_kernel_of_another_device_is_invalid_device(two_devices, build) -> None:
    host, twin = two_devices
    image = build("basic")
    program_host = api.olCreateProgram(host, image)
    program_twin = api.olCreateProgram(twin, image)
    foo_host = api.olGetSymbol(program_host, "foo", SymbolKind.KERNEL)
    foo_twin = api.olGetSymbol(program_twin, "foo", SymbolKind.KERNEL)
    queue_host = api.olCreateQueue(host)
    queue_twin = api.olCreateQueue(twin)
    out_host = api.olMemAlloc(host, AllocType.HOST, 64 * 4)
    out_twin = api.olMemAlloc(twin, AllocType.DEVICE, 64 * 4)
    ctypes.memset(out_host, 0, 64 * 4)
    ctypes.memset(out_twin, 0, 64 * 4)
    size = launch_args(4, 16)

    expect(ErrorCode.INVALID_DEVICE, api.olLaunchKernel, queue_twin, host, foo_host, pointer_bytes(out_host), size)
    expect(ErrorCode.INVALID_DEVICE, api.olLaunchKernel, queue_host, twin, foo_twin, pointer_bytes(out_twin), size)
    expect(ErrorCode.INVALID_DEVICE, api.olLaunchKernel, queue_host, host, foo_twin, pointer_bytes(out_host), size)
    expect(ErrorCode.INVALID_DEVICE, api.olLaunchKernel, None, host, foo_twin, pointer_bytes(out_host), size)
    expect(ErrorCode.INVALID_DEVICE, api.olCalculateOptimalOccupancy, host, foo_twin, 0)
    expect(ErrorCode.INVALID_DEVICE, api.olMemFill, queue_host, out_twin, b"\x01\x02\x03\x04", 16)
    expect(ErrorCode.INVALID_DEVICE, api.olMemcpy, queue_host, out_twin, twin, out_host, host, 16)
    expect(ErrorCode.INVALID_DEVICE, api.olMemcpy, queue_host, out_host, host, out_twin, twin, 16)
    event_host = api.olCreateEvent(queue_host)
    event_twin = api.olCreateEvent(queue_twin)
    expect(ErrorCode.INVALID_DEVICE, api.olGetEventElapsedTime, event_host, event_twin)
    api.olSyncQueue(queue_host)
    api.olSyncQueue(queue_twin)
    assert list(u32_view(out_host, 64)) == [0] * 64, "a rejected launch must not run"
    assert list(u32_view(out_twin, 64)) == [0] * 64, "a rejected launch must not run"

    # The matching pairs work on both devices, and queues of the two devices can wait on each other.
    api.olLaunchKernel(queue_twin, twin, foo_twin, pointer_bytes(out_twin), size)
    done_twin = api.olCreateEvent(queue_twin)
    api.olWaitEvents(queue_host, [done_twin])
    api.olMemcpy(queue_twin, out_host, host, out_twin, twin, 64 * 4)
    api.olSyncQueue(queue_twin)
    assert list(u32_view(out_host, 64)) == list(range(64))
    api.olLaunchKernel(queue_host, host, foo_host, pointer_bytes(out_host), launch_args(2, 16))
    api.olSyncQueue(queue_host)
    assert list(u32_view(out_host, 64)) == list(range(64))
    assert api.olGetQueueError(queue_host) == (None, None)
    assert api.olGetQueueError(queue_twin) == (None, None)
    assert api.olGetQueueInfo(queue_twin, QueueInfo.DEVICE) is twin


# ---- handles used after their destroy call -----------------------------------------------------------

def test_queue_used_after_destroy_is_invalid_queue(world: World) -> None:
    w = world
    queue = api.olCreateQueue(w.host)
    event = api.olCreateEvent(queue)
    api.olDestroyQueue(queue)
    calls = [
        (api.olDestroyQueue, (queue,)),
        (api.olSyncQueue, (queue,)),
        (api.olQueryQueue, (queue,)),
        (api.olWaitEvents, (queue, [])),
        (api.olWaitEvents, (queue, [w.event])),
        (api.olGetQueueInfo, (queue, QueueInfo.DEVICE)),
        (api.olGetQueueInfoSize, (queue, QueueInfo.EMPTY)),
        (api.olLaunchHostFunction, (queue, noop)),
        (api.olGetQueueError, (queue,)),
        (api.olCreateEvent, (queue,)),
        (api.olMemFill, (queue, w.ptr, b"\x01", 16)),
        (api.olMemcpy, (queue, w.ptr, w.host, w.ptr2, w.host, 16)),
        (api.olLaunchKernel, (queue, w.host, w.kernel, pointer_bytes(w.ptr), launch_args(1, 4))),
    ]
    for fn, args in calls:
        expect(ErrorCode.INVALID_QUEUE, fn, *args)
    # The events of a destroyed queue stay valid.
    api.olSyncEvent(event)
    assert api.olGetEventInfo(event, EventInfo.QUEUE) is queue
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    api.olWaitEvents(w.queue, [event])
    api.olDestroyEvent(event)
    assert ctypes.string_at(w.ptr, 4096) == bytes([CANARY]) * 4096
    assert_runtime_works(w.host, w.program)


def test_event_used_after_destroy_is_invalid_event(world: World) -> None:
    w = world
    event = api.olCreateEvent(w.queue)
    api.olDestroyEvent(event)
    for fn, args in [
        (api.olDestroyEvent, (event,)),
        (api.olSyncEvent, (event,)),
        (api.olGetEventInfo, (event, EventInfo.IS_COMPLETE)),
        (api.olGetEventInfoSize, (event, EventInfo.QUEUE)),
        (api.olWaitEvents, (w.queue, [event])),
        (api.olWaitEvents, (w.queue, [w.event, event])),
        (api.olGetEventElapsedTime, (event, w.event)),
        (api.olGetEventElapsedTime, (w.event, event)),
    ]:
        expect(ErrorCode.INVALID_EVENT, fn, *args)
    assert api.olGetEventInfo(w.event, EventInfo.IS_COMPLETE) is True
    assert_runtime_works(w.host, w.program)


def test_program_and_its_symbols_used_after_destroy_are_invalid_argument(world: World) -> None:
    w = world
    program = api.olCreateProgram(w.host, w.image)
    kernel = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    global_var = api.olGetSymbol(program, "global", SymbolKind.GLOBAL_VARIABLE)
    api.olDestroyProgram(program)
    for fn, args in [
        (api.olDestroyProgram, (program,)),
        (api.olGetSymbol, (program, "foo", SymbolKind.KERNEL)),
        (api.olGetSymbol, (program, "global", SymbolKind.GLOBAL_VARIABLE)),
        (api.olGetSymbolInfo, (kernel, SymbolInfo.KIND)),
        (api.olGetSymbolInfo, (kernel, SymbolInfo.NAME)),
        (api.olGetSymbolInfoSize, (kernel, SymbolInfo.KIND)),
        (api.olGetSymbolInfo, (global_var, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)),
        (api.olGetSymbolInfoSize, (global_var, SymbolInfo.GLOBAL_VARIABLE_SIZE)),
        (api.olLaunchKernel, (w.queue, w.host, kernel, pointer_bytes(w.ptr), launch_args(1, 4))),
        (api.olLaunchKernel, (None, w.host, kernel, pointer_bytes(w.ptr), launch_args(1, 4))),
        (api.olCalculateOptimalOccupancy, (w.host, kernel, 0)),
    ]:
        expect(ErrorCode.INVALID_ARGUMENT, fn, *args)
    api.olSyncQueue(w.queue)
    assert api.olGetQueueError(w.queue) == (None, None)
    assert ctypes.string_at(w.ptr, 4096) == bytes([CANARY]) * 4096, "a kernel of a destroyed program ran"
    # the other program loaded from the same image is untouched
    assert_runtime_works(w.host, w.program)


def test_handles_of_a_runtime_that_was_shut_down_fail_cleanly_after_reinit(build) -> None:
    image = build("basic")
    api.olInit()
    try:
        old_host = next(d for d in all_devices() if device_type(d) == DeviceType.HOST)
        old_platform = api.olGetDeviceInfo(old_host, DeviceInfo.PLATFORM)
        old_queue = api.olCreateQueue(old_host)
        old_program = api.olCreateProgram(old_host, image)
        old_kernel = api.olGetSymbol(old_program, "foo", SymbolKind.KERNEL)
        old_ptr = api.olMemAlloc(old_host, AllocType.DEVICE, 256)
    finally:
        api.olShutDown()
    api.olInit()
    try:
        host = next(d for d in all_devices() if device_type(d) == DeviceType.HOST)
        assert host is not old_host
        assert old_host not in all_devices()
        program = api.olCreateProgram(host, image)
        kernel = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
        out = api.olMemAlloc(host, AllocType.HOST, 256)
        ctypes.memset(out, 0, 256)
        for fn, args in [
            (api.olGetDeviceInfo, (old_host, DeviceInfo.NAME)),
            (api.olGetDeviceInfoSize, (old_host, DeviceInfo.NAME)),
            (api.olCreateQueue, (old_host,)),
            (api.olMemAlloc, (old_host, AllocType.HOST, 64)),
            (api.olCreateProgram, (old_host, image)),
            (api.olIsValidBinary, (old_host, image)),
            (api.olMemcpy, (None, out, old_host, out + 128, host, 16)),
            (api.olMemcpy, (None, out, host, out + 128, old_host, 16)),
            (api.olLaunchKernel, (None, old_host, kernel, pointer_bytes(out), launch_args(1, 4))),
            (api.olLaunchKernel, (None, old_host, old_kernel, pointer_bytes(out), launch_args(1, 4))),
            (api.olCalculateOptimalOccupancy, (old_host, kernel, 0)),
        ]:
            expect(ErrorCode.INVALID_DEVICE, fn, *args)
        expect(ErrorCode.INVALID_PLATFORM, api.olGetPlatformInfo, old_platform, PlatformInfo.NAME)
        expect(ErrorCode.INVALID_PLATFORM, api.olGetPlatformInfoSize, old_platform, PlatformInfo.NAME)
        expect(ErrorCode.INVALID_QUEUE, api.olSyncQueue, old_queue)
        expect(ErrorCode.INVALID_ARGUMENT, api.olGetSymbol, old_program, "foo", SymbolKind.KERNEL)
        expect(ErrorCode.INVALID_ARGUMENT, api.olGetSymbolInfo, old_kernel, SymbolInfo.KIND)
        # a kernel of the old runtime on the new device: it belongs to another device
        expect(ErrorCode.INVALID_DEVICE, api.olLaunchKernel, None, host, old_kernel, pointer_bytes(out),
               launch_args(1, 4))
        if old_ptr != out:  # the allocator may hand the same address out again
            expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, old_ptr)
            expect(ErrorCode.NOT_FOUND, api.olGetMemInfo, old_ptr, MemInfo.BASE)
        assert list(u32_view(out, 64)) == [0] * 64, "a rejected launch must not run"
        assert_runtime_works(host, program)
    finally:
        api.olShutDown()


# ---- info queries: types and C sizes -------------------------------------------------------------

STR, U32, U64, BOOL, HANDLE, POINTER, DIMS = "str", "u32", "u64", "bool", "handle", "pointer", "dims"

PLATFORM_INFO: dict[PlatformInfo, Any] = {
    PlatformInfo.NAME: STR, PlatformInfo.VENDOR_NAME: STR, PlatformInfo.VERSION: STR,
    PlatformInfo.BACKEND: PlatformBackend,
}
DEVICE_INFO: dict[DeviceInfo, Any] = {
    DeviceInfo.TYPE: DeviceType, DeviceInfo.PLATFORM: api.Platform,
    DeviceInfo.NAME: STR, DeviceInfo.PRODUCT_NAME: STR, DeviceInfo.UID: STR, DeviceInfo.VENDOR: STR,
    DeviceInfo.DRIVER_VERSION: STR,
    DeviceInfo.MAX_WORK_GROUP_SIZE: U32, DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: DIMS,
    DeviceInfo.MAX_WORK_SIZE: U32, DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: DIMS,
    DeviceInfo.VENDOR_ID: U32, DeviceInfo.NUM_COMPUTE_UNITS: U32, DeviceInfo.MAX_CLOCK_FREQUENCY: U32,
    DeviceInfo.MEMORY_CLOCK_RATE: U32, DeviceInfo.ADDRESS_BITS: U32,
    DeviceInfo.MAX_MEM_ALLOC_SIZE: U64, DeviceInfo.GLOBAL_MEM_SIZE: U64, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: U64,
    DeviceInfo.SINGLE_FP_CONFIG: FpCapabilityFlag, DeviceInfo.DOUBLE_FP_CONFIG: FpCapabilityFlag,
    DeviceInfo.HALF_FP_CONFIG: FpCapabilityFlag,
    DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR: U32, DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT: U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_INT: U32, DeviceInfo.NATIVE_VECTOR_WIDTH_LONG: U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT: U32, DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE: U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_HALF: U32,
}
QUEUE_INFO: dict[QueueInfo, Any] = {QueueInfo.DEVICE: api.Device, QueueInfo.EMPTY: BOOL}
EVENT_INFO: dict[EventInfo, Any] = {EventInfo.QUEUE: api.Queue, EventInfo.IS_COMPLETE: BOOL}
SYMBOL_INFO: dict[SymbolInfo, Any] = {
    SymbolInfo.KIND: SymbolKind, SymbolInfo.GLOBAL_VARIABLE_ADDRESS: POINTER,
    SymbolInfo.GLOBAL_VARIABLE_SIZE: U64, SymbolInfo.NAME: STR,
}
MEM_INFO: dict[MemInfo, Any] = {
    MemInfo.DEVICE: api.Device, MemInfo.BASE: POINTER, MemInfo.SIZE: U64, MemInfo.TYPE: AllocType,
}


def check_info_value(label: str, kind: Any, value: Any, size: int) -> None:
    """``value`` has the Python type of C type ``kind`` and ``size`` is the size C reports."""
    assert type(size) is int, f"{label}: size {size!r} is not an int"
    if kind is STR:
        assert type(value) is str, f"{label}: {value!r} is not a str"
        assert "\0" not in value and value.strip(), f"{label}: {value!r}"
        assert size == len(value.encode()) + 1, f"{label}: size {size} for {value!r} (must count the NUL)"
    elif kind is U32 or kind is U64:
        bits = 32 if kind is U32 else 64
        assert type(value) is int, f"{label}: {value!r} is not an int"
        assert 0 <= value < 1 << bits, f"{label}: {value} does not fit uint{bits}_t"
        assert size == bits // 8, f"{label}: size {size}"
    elif kind is BOOL:
        assert type(value) is bool, f"{label}: {value!r} is not a bool"
        assert size == 1, f"{label}: size {size}"
    elif kind is POINTER:
        assert type(value) is int and 0 < value < 1 << 64, f"{label}: {value!r} is not an address"
        assert size == 8, f"{label}: size {size}"
    elif kind is DIMS:
        assert type(value) is Dimensions, f"{label}: {value!r} is not Dimensions"
        for extent in (value.x, value.y, value.z):
            assert type(extent) is int and 0 < extent < 1 << 32, f"{label}: {value!r}"
        assert size == 12, f"{label}: size {size}"
    elif isinstance(kind, type) and issubclass(kind, (IntEnum, FpCapabilityFlag)):
        assert type(value) is kind, f"{label}: {value!r} is not a {kind.__name__}"
        assert size == 4, f"{label}: size {size}"
    else:  # a handle class
        assert type(value) is kind, f"{label}: {value!r} is not a {kind.__name__}"
        assert size == 8, f"{label}: size {size}"


def test_the_info_tables_cover_every_enum_member() -> None:
    assert set(PLATFORM_INFO) == set(PlatformInfo)
    assert set(DEVICE_INFO) == set(DeviceInfo)
    assert set(QUEUE_INFO) == set(QueueInfo)
    assert set(EVENT_INFO) == set(EventInfo)
    assert set(SYMBOL_INFO) == set(SymbolInfo)
    assert set(MEM_INFO) == set(MemInfo)


def test_platform_and_device_info_values_and_sizes(runtime: None) -> None:
    devices = all_devices()
    assert devices
    platforms_seen = []
    for device in devices:
        is_host = device_type(device) == DeviceType.HOST
        for prop, kind in DEVICE_INFO.items():
            label = f"{device!r} {prop.name}"
            if prop is DeviceInfo.MEMORY_CLOCK_RATE and is_host:
                try:
                    value = api.olGetDeviceInfo(device, prop)
                except OffloadError as exc:  # Linux hides DRAM speed from unprivileged users
                    assert exc.code == ErrorCode.UNIMPLEMENTED and exc.details.strip(), exc
                    expect(ErrorCode.UNIMPLEMENTED, api.olGetDeviceInfoSize, device, prop)
                    continue
            else:
                value = api.olGetDeviceInfo(device, prop)
            check_info_value(label, kind, value, api.olGetDeviceInfoSize(device, prop))
        platform = api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)
        assert api.olGetDeviceInfo(device, DeviceInfo.PLATFORM) is platform, "one handle per platform"
        platforms_seen.append(platform)
        for prop, kind in PLATFORM_INFO.items():
            value = api.olGetPlatformInfo(platform, prop)
            check_info_value(f"{platform!r} {prop.name}", kind, value, api.olGetPlatformInfoSize(platform, prop))
        backend = api.olGetPlatformInfo(platform, PlatformInfo.BACKEND)
        assert (backend == PlatformBackend.HOST) == is_host
        if is_host:
            assert api.olGetDeviceInfo(device, DeviceInfo.ADDRESS_BITS) == 8 * ctypes.sizeof(ctypes.c_void_p)
            assert api.olGetDeviceInfo(device, DeviceInfo.NUM_COMPUTE_UNITS) >= 1
            assert api.olGetDeviceInfo(device, DeviceInfo.MAX_WORK_GROUP_SIZE) >= 1
            assert api.olGetDeviceInfo(device, DeviceInfo.GLOBAL_MEM_SIZE) > 0
            assert api.olGetDeviceInfo(device, DeviceInfo.SINGLE_FP_CONFIG) != 0
            assert api.olGetDeviceInfo(device, DeviceInfo.DOUBLE_FP_CONFIG) != 0
            for prop in (DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR, DeviceInfo.NATIVE_VECTOR_WIDTH_INT,
                         DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE):
                assert api.olGetDeviceInfo(device, prop) > 0, prop.name
    host_count = sum(device_type(d) == DeviceType.HOST for d in devices)
    assert host_count == 1, "the host platform has exactly one device of type HOST"


def test_queue_and_event_info_values_and_sizes(world: World) -> None:
    w = world
    with Gate(w.queue):
        pending = api.olCreateEvent(w.queue)
        for prop, kind in QUEUE_INFO.items():
            check_info_value(f"queue {prop.name}", kind, api.olGetQueueInfo(w.queue, prop),
                             api.olGetQueueInfoSize(w.queue, prop))
        for prop, kind in EVENT_INFO.items():
            check_info_value(f"event {prop.name}", kind, api.olGetEventInfo(pending, prop),
                             api.olGetEventInfoSize(pending, prop))
        assert api.olGetQueueInfo(w.queue, QueueInfo.DEVICE) is w.host
        assert api.olGetQueueInfo(w.queue, QueueInfo.EMPTY) is False  # held by the gate
        assert api.olQueryQueue(w.queue) is False
        assert api.olGetEventInfo(pending, EventInfo.QUEUE) is w.queue
        assert api.olGetEventInfo(pending, EventInfo.IS_COMPLETE) is False
    api.olSyncEvent(pending)
    assert api.olGetEventInfo(pending, EventInfo.IS_COMPLETE) is True
    api.olSyncQueue(w.queue)
    assert api.olGetQueueInfo(w.queue, QueueInfo.EMPTY) is True
    assert api.olQueryQueue(w.queue) is True
    for prop, kind in EVENT_INFO.items():
        check_info_value(f"event {prop.name}", kind, api.olGetEventInfo(pending, prop),
                         api.olGetEventInfoSize(pending, prop))


def test_symbol_info_values_and_sizes(world: World) -> None:
    w = world
    scalar = api.olGetSymbol(w.program, "scalar_global", SymbolKind.GLOBAL_VARIABLE)
    for symbol, kind, name, size in [(w.global_var, SymbolKind.GLOBAL_VARIABLE, "global", 64 * 4),
                                     (scalar, SymbolKind.GLOBAL_VARIABLE, "scalar_global", 4)]:
        for prop, value_kind in SYMBOL_INFO.items():
            check_info_value(f"{name} {prop.name}", value_kind, api.olGetSymbolInfo(symbol, prop),
                             api.olGetSymbolInfoSize(symbol, prop))
        assert api.olGetSymbolInfo(symbol, SymbolInfo.KIND) is kind
        assert api.olGetSymbolInfo(symbol, SymbolInfo.NAME) == name
        assert api.olGetSymbolInfoSize(symbol, SymbolInfo.NAME) == len(name) + 1
        assert api.olGetSymbolInfo(symbol, SymbolInfo.GLOBAL_VARIABLE_SIZE) == size
    assert ctypes.c_int32.from_address(api.olGetSymbolInfo(scalar, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)).value == 7
    for prop in (SymbolInfo.KIND, SymbolInfo.NAME):
        check_info_value(f"foo {prop.name}", SYMBOL_INFO[prop], api.olGetSymbolInfo(w.kernel, prop),
                         api.olGetSymbolInfoSize(w.kernel, prop))
    assert api.olGetSymbolInfo(w.kernel, SymbolInfo.KIND) is SymbolKind.KERNEL
    assert api.olGetSymbolInfo(w.kernel, SymbolInfo.NAME) == "foo"
    assert api.olGetSymbolInfoSize(w.kernel, SymbolInfo.NAME) == 4


# ---- memory info and free ------------------------------------------------------------------------

def test_olgetmeminfo_accepts_any_address_inside_an_allocation(host: api.Device) -> None:
    size = 1000  # not a page multiple: base + size is past the end yet on the same page
    allocations = {kind: api.olMemAlloc(host, kind, size) for kind in AllocType}
    assert len(set(allocations.values())) == len(AllocType)
    for kind, base in allocations.items():
        for address in (base, base + 123, base + size - 1):
            for prop, value_kind in MEM_INFO.items():
                check_info_value(f"{kind.name} {address - base:+} {prop.name}", value_kind,
                                 api.olGetMemInfo(address, prop), api.olGetMemInfoSize(address, prop))
            assert api.olGetMemInfo(address, MemInfo.DEVICE) is host
            assert api.olGetMemInfo(address, MemInfo.BASE) == base
            assert api.olGetMemInfo(address, MemInfo.SIZE) == size
            assert api.olGetMemInfo(address, MemInfo.TYPE) is kind
        for outside in (base + size, base - 1):
            expect(ErrorCode.NOT_FOUND, api.olGetMemInfo, outside, MemInfo.BASE)
            expect(ErrorCode.NOT_FOUND, api.olGetMemInfoSize, outside, MemInfo.SIZE)
    plain = ctypes.create_string_buffer(64)
    for address in (ctypes.addressof(plain), 0x1234):
        expect(ErrorCode.NOT_FOUND, api.olGetMemInfo, address, MemInfo.BASE)
        expect(ErrorCode.NOT_FOUND, api.olGetMemInfoSize, address, MemInfo.DEVICE)
    for base in allocations.values():
        api.olMemFree(base)
        expect(ErrorCode.NOT_FOUND, api.olGetMemInfo, base, MemInfo.BASE)
        expect(ErrorCode.NOT_FOUND, api.olGetMemInfo, base + 123, MemInfo.BASE)


def test_olmemfree_of_unknown_interior_or_freed_address_is_invalid_argument_and_frees_nothing(
        host: api.Device, basic: api.Program) -> None:
    size = 4096
    first = api.olMemAlloc(host, AllocType.DEVICE, size)
    second = api.olMemAlloc(host, AllocType.MANAGED, size)
    plain = ctypes.create_string_buffer(64)
    for address in (ctypes.addressof(plain), 0x1234, first + 1, first + size // 2, first + size - 1, second + 8):
        error = expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, address)  # as LLVM 22's liboffload
        assert ("inside the allocation" in error.details) == (address in (first + 1, first + size // 2,
                                                                          first + size - 1, second + 8))
    # both allocations are still registered and usable
    for base in (first, second):
        assert api.olGetMemInfo(base, MemInfo.BASE) == base
        assert api.olGetMemInfo(base + size - 1, MemInfo.SIZE) == size
        api.olMemFill(None, base, b"\x11\x22\x33\x44", size)
        assert ctypes.string_at(base, size) == b"\x11\x22\x33\x44" * (size // 4)
    queue = api.olCreateQueue(host)
    api.olMemcpy(queue, second, host, first, host, size)
    api.olSyncQueue(queue)
    assert ctypes.string_at(second, size) == b"\x11\x22\x33\x44" * (size // 4)
    api.olMemFree(first)
    # already freed: INVALID_ARGUMENT again, and the other allocation is untouched
    assert "already freed" in expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, first).details
    expect(ErrorCode.NOT_FOUND, api.olGetMemInfo, first, MemInfo.BASE)
    assert api.olGetMemInfo(second, MemInfo.SIZE) == size
    api.olMemFree(second)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, second)
    api.olDestroyQueue(queue)
    assert_runtime_works(host, basic)


# ---- environment variables -------------------------------------------------------------------------

def run_script(script: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_TRACE", "OFFLOAD_DISABLE_VALIDATION")}
    env.update(env_vars)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


TRACE_SCRIPT = """
    import offloadrt
    from offloadrt import api, AllocType, DeviceInfo, DeviceType
    api.olInit()
    devices = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
    ptr = api.olMemAlloc(host, AllocType.HOST, 4096)
    print("PTR", hex(ptr))
    try:
        api.olMemFree(ptr + 8)
    except offloadrt.OffloadError as exc:
        print("ERROR", exc.code.name, exc.details)
    api.olMemFree(ptr)
    api.olShutDown()
"""


def test_offload_trace_prints_each_call_with_its_arguments_and_result() -> None:
    quiet = run_script(TRACE_SCRIPT)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "", "without OFFLOAD_TRACE nothing is printed to stderr"

    traced = run_script(TRACE_SCRIPT, OFFLOAD_TRACE="1")
    assert traced.returncode == 0, traced.stderr
    out = dict(line.split(" ", 1) for line in traced.stdout.splitlines())
    ptr = out["PTR"]
    error_code, details = out["ERROR"].split(" ", 1)
    assert error_code == "INVALID_ARGUMENT"
    log = traced.stderr
    lines = log.splitlines()
    # every line has one shape: [offloadrt +<seconds> <thread>] <event>
    shape = re.compile(r"^\[offloadrt \+(\d+\.\d{6}) (\S+)\] (->|<-|!!|--) (.*)$")
    parsed = [shape.match(line) for line in lines]
    assert all(parsed), "\n".join(line for line, m in zip(lines, parsed) if not m)
    times = [float(m.group(1)) for m in parsed if m]
    assert times == sorted(times), "timestamps are monotonic"
    assert {m.group(2) for m in parsed if m} == {"MainThread"}
    events = [(m.group(3), m.group(4)) for m in parsed if m]
    calls = [text for kind, text in events if kind == "->"]
    results = [text for kind, text in events if kind == "<-"]
    assert len(calls) == len(results), "each call has its own result line"
    for name in ("olInit", "olIterateDevices", "olGetDeviceInfo", "olMemAlloc", "olMemFree", "olShutDown"):
        assert any(text.startswith(f"{name}(") for text in calls), f"{name} is not traced:\n{log}"
    alloc = next(i for i, (kind, text) in enumerate(events) if kind == "->" and text.startswith("olMemAlloc("))
    assert "size=4096" in events[alloc][1] and "HOST" in events[alloc][1], events[alloc]
    assert events[alloc + 1] == ("<-", f"olMemAlloc = {ptr}"), events[alloc + 1]
    frees = [i for i, (kind, text) in enumerate(events) if kind == "->" and text.startswith("olMemFree(")]
    assert len(frees) == 2, log
    bad_address = hex(int(ptr, 16) + 8)
    assert events[frees[0]][1] == f"olMemFree(address={bad_address})"
    assert events[frees[0] + 1] == ("<-", f"olMemFree: OL_ERRC_INVALID_ARGUMENT: {details}"), events[frees[0] + 1]
    assert events[frees[1]][1] == f"olMemFree(address={ptr})"
    assert events[frees[1] + 1] == ("<-", "olMemFree: OL_SUCCESS")
    # the trace goes to stderr only
    assert "olMemAlloc" not in traced.stdout


def test_offload_trace_reports_an_asynchronous_failure_when_it_happens() -> None:
    traced = run_script("""
        from offloadrt import api, OffloadError
        api.olInit()
        devices = []
        api.olIterateDevices(lambda d, _: devices.append(d))
        queue = api.olCreateQueue(devices[-1])

        def boom(_):
            raise ValueError("boom")

        api.olLaunchHostFunction(queue, boom)
        try:
            api.olSyncQueue(queue)
        except OffloadError:
            pass
        api.olDestroyQueue(queue)
        api.olShutDown()
    """, OFFLOAD_TRACE="1")
    assert traced.returncode == 0, traced.stderr
    lines = traced.stderr.splitlines()
    failure = next(i for i, line in enumerate(lines) if "] !! " in line)
    assert "offloadrt-host0-worker-" in lines[failure], "printed on the thread that ran the failing work"
    assert "Queue#" in lines[failure] and "host function raised ValueError: boom" in lines[failure]
    sync_result = next(i for i, line in enumerate(lines) if "<- olSyncQueue" in line)
    assert failure < sync_result, "the failure is traced when it happens, before the call that reports it"


def test_offload_trace_turns_on_faulthandler() -> None:
    script = """
        import faulthandler
        from offloadrt import api
        api.olInit()
        print(faulthandler.is_enabled())
        api.olShutDown()
    """
    assert run_script(script).stdout.strip() == "False"
    assert run_script(script, OFFLOAD_TRACE="1").stdout.strip() == "True"


VALIDATION_SCRIPT = """
    import ctypes
    import offloadrt
    from offloadrt import api, AllocType, DeviceInfo, DeviceType
    api.olInit()
    devices = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
    ptr = api.olMemAlloc(host, AllocType.HOST, 64)
    queue = api.olCreateQueue(host)
    ctypes.memset(ptr, 0xAA, 64)
    api.olMemFill(None, ptr, b"\\x01\\x02\\x03\\x04", 10)
    print("SYNC", ctypes.string_at(ptr, 64).hex())
    ctypes.memset(ptr, 0xAA, 64)
    api.olMemFill(queue, ptr + 16, b"\\x01\\x02\\x03\\x04", 3)
    api.olMemFill(queue, ptr + 32, b"\\x05\\x06\\x07\\x08", 5)
    api.olSyncQueue(queue)
    print("QUEUE", ctypes.string_at(ptr, 64).hex())
    api.olDestroyQueue(queue)
    api.olMemFree(ptr)
    api.olShutDown()
"""


def test_offload_disable_validation_lets_a_partial_fill_through_without_writing_past_it() -> None:
    checked = run_script(VALIDATION_SCRIPT)
    assert checked.returncode != 0 and "INVALID_SIZE" in checked.stderr, "validation must be on by default"

    result = run_script(VALIDATION_SCRIPT, OFFLOAD_DISABLE_VALIDATION="1")
    assert result.returncode == 0, result.stderr
    out = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    canary = "aa"
    assert out["SYNC"] == "01020304" * 2 + "0102" + canary * 54
    assert out["QUEUE"] == canary * 16 + "010203" + canary * 13 + "0506070805" + canary * 27


def test_offload_disable_validation_is_read_at_the_first_olinit() -> None:
    script = """
        import ctypes, os
        import offloadrt
        from offloadrt import api, AllocType, DeviceInfo, DeviceType
        api.olInit()
        devices = []
        api.olIterateDevices(lambda d, _: devices.append(d))
        host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
        ptr = api.olMemAlloc(host, AllocType.HOST, 64)
        os.environ["OFFLOAD_DISABLE_VALIDATION"] = "1"
        api.olInit()  # nested: the running runtime keeps its settings
        try:
            api.olMemFill(None, ptr, b"\\x01\\x02", 3)
            print("NESTED accepted")
        except offloadrt.OffloadError as exc:
            print("NESTED", exc.code.name)
        api.olShutDown()
        api.olShutDown()
        api.olInit()  # a fresh start reads the environment again
        devices = []
        api.olIterateDevices(lambda d, _: devices.append(d))
        host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
        ptr = api.olMemAlloc(host, AllocType.HOST, 64)
        api.olMemFill(None, ptr, b"\\x01\\x02", 3)
        print("FRESH accepted")
        api.olShutDown()
    """
    result = run_script(script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["NESTED INVALID_SIZE", "FRESH accepted"]


# ---- the runtime stays usable after errors -------------------------------------------------------------

def test_runtime_and_queue_stay_usable_after_a_burst_of_errors(world: World) -> None:
    w = world
    failing: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
        (api.olGetDeviceInfo, (None, DeviceInfo.NAME)),
        (api.olGetDeviceInfo, (w.host, 0x7FFFFFFF)),
        (api.olMemAlloc, (w.host, AllocType.DEVICE, 0)),
        (api.olMemFree, (0x1234,)),
        (api.olMemFree, (w.ptr + 1,)),
        (api.olMemFill, (w.queue, w.ptr, b"\x01\x02\x03", 4)),
        (api.olMemcpy, (w.queue, 0, w.host, w.ptr, w.host, 4)),
        (api.olLaunchKernel, (w.queue, w.host, w.global_var, None, launch_args())),
        (api.olLaunchKernel, (w.queue, w.host, w.kernel, None, None)),
        (api.olGetSymbol, (w.program, "missing", SymbolKind.KERNEL)),
        (api.olGetSymbolInfo, (w.kernel, SymbolInfo.GLOBAL_VARIABLE_SIZE)),
        (api.olCreateProgram, (w.host, b"\x7fELF but not really")),
        (api.olCreateProgram, (w.host, b"")),
        (api.olWaitEvents, (w.queue, [None])),
        (api.olGetEventElapsedTime, (w.event, None)),
    ]
    for fn, args in failing:
        with pytest.raises(OffloadError) as info:
            fn(*args)
        assert info.value.details.strip(), f"{fn.__name__}: blank details"
        # each error is synchronous and leaves both the queue and the runtime working
        assert api.olGetQueueError(w.queue) == (None, None), f"{fn.__name__} poisoned the queue"
    expect(ErrorCode.INVALID_BINARY, api.olCreateProgram, w.host, b"garbage")
    expect(ErrorCode.INVALID_BINARY, api.olCreateProgram, w.host, b"")
    api.olLaunchKernel(w.queue, w.host, w.kernel, pointer_bytes(w.ptr), launch_args(4, 8))
    api.olSyncQueue(w.queue)
    assert list(u32_view(w.ptr, 32)) == list(range(32))
    assert api.olGetMemInfo(w.ptr, MemInfo.SIZE) == 4096
    assert_runtime_works(w.host, w.program)


def test_every_public_name_has_a_docstring() -> None:
    for module in (api, offloadrt):
        for name in module.__all__:
            value = getattr(module, name)
            if callable(value) or isinstance(value, type):
                assert (value.__doc__ or "").strip(), f"{module.__name__}.{name} has no docstring"
