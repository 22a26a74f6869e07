"""Driver statuses as offloadrt errors: each status's error code and the driver's own name for it, a
failure of each driver call the plugin makes (it reaches the ``ol*`` call with its name and
leaves the runtime usable), failing waits and queries, failures while shutting down."""

from __future__ import annotations

import ctypes
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _pytest.mark import ParameterSet
from gpu_fixtures import (
    GLOBAL,
    KERNEL,
    Runtime,
    error_details,
    expect,
    host_buffer,
    in_new_thread,
    launch_size,
    shut_down_fully,
    tag,
)

from offloadrt import AllocType, ErrorCode, EventFlags, EventInfo, OffloadError, api

from .vendors import Vendor, per_vendor

# ---- statuses and their names ---------------------------------------------------------------------

STATUS_CODES = [
    ("OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
    ("INVALID_IMAGE", ErrorCode.INVALID_BINARY),
    ("INVALID_PTX", ErrorCode.INVALID_BINARY),
    ("INVALID_KERNEL_FILE", ErrorCode.INVALID_BINARY),
    ("NO_BINARY_FOR_GPU", ErrorCode.INVALID_BINARY),
    ("NOT_SUPPORTED", ErrorCode.UNSUPPORTED),
    ("NOT_FOUND", ErrorCode.NOT_FOUND),
    ("INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("INVALID_CONFIGURATION", ErrorCode.INVALID_SIZE),
    ("UNKNOWN", ErrorCode.UNKNOWN),
    ("INVALID_CONTEXT", ErrorCode.BACKEND_FAILURE),
    ("ILLEGAL_ADDRESS", ErrorCode.BACKEND_FAILURE),
]


def status_codes(vendor: Vendor) -> Iterator[ParameterSet]:
    for status, code in STATUS_CODES:
        if vendor.has_status(status):
            yield pytest.param(status, code, id=status)


@pytest.mark.parametrize(("vendor", "status", "code"), per_vendor(status_codes), indirect=["vendor"])
def test_driver_statuses_map_to_error_codes_with_the_drivers_name(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch, status: str, code: ErrorCode) -> None:
    module = vendor.standin.install(monkeypatch)
    member = vendor.status(status)
    assert vendor.driver_class.error_code(int(member)) == code
    driver = vendor.driver_class(module)
    err = driver.error(int(member), "someCall", "while testing")
    assert err.code == code
    assert err.details.startswith(f"someCall: {member.name} (")  # the name, then the driver's explanation
    assert err.details.endswith(": while testing")
    assert err.driver_status == int(member)  # type: ignore[attr-defined]
    with pytest.raises(OffloadError) as info:
        driver.check((member, None), "otherCall")
    assert info.value.code == code and info.value.details.startswith(f"otherCall: {member.name} (")
    assert info.value.driver_status == int(member)  # type: ignore[attr-defined]


def test_an_unknown_status_is_a_backend_failure_and_check_unpacks_outputs(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    module = vendor.standin.install(monkeypatch)
    driver = vendor.driver_class(module)
    err = driver.error(12345, "futureCall")
    assert err.code == ErrorCode.BACKEND_FAILURE
    assert err.details == f"futureCall: {vendor.driver_class.status_enum} 12345"
    assert err.driver_status == 12345  # type: ignore[attr-defined]
    with pytest.raises(OffloadError, match=f"futureCall: {vendor.driver_class.status_enum} 12345"):
        driver.check((12345,), "futureCall")
    success = vendor.status("SUCCESS")
    assert driver.check((success, 7), "x") == 7
    assert driver.check((success, 7, 8), "x") == (7, 8)
    assert driver.check((0, None), "x") is None
    try:
        driver.check(getattr(module, vendor.call("init"))(0), "init")  # real calls through the stand-in
        assert int(driver.check(getattr(module, vendor.call("driver_version"))(), "version")) > 0
    finally:
        vendor.standin.shutdown()


def test_a_failing_call_through_the_stand_in_names_the_status(vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    module = vendor.standin.install(monkeypatch)
    try:
        driver = vendor.driver_class(module)
        module_init = getattr(module, vendor.call("init"))
        driver.check(module_init(0), "init")
        status = vendor.inject("alloc_device", "OUT_OF_MEMORY")
        with pytest.raises(OffloadError) as info:
            driver.check(getattr(module, vendor.call("alloc_device"))(64), vendor.call("alloc_device"))
        assert info.value.code == ErrorCode.OUT_OF_RESOURCES
        assert info.value.details == f"{vendor.call('alloc_device')}: {status.name} (out of memory)"
    finally:
        vendor.standin.shutdown()


def test_naming_a_status_never_hides_it(vendor: Vendor) -> None:
    """Where the naming functions themselves fail, the error still has its code and a name."""
    broken = types.ModuleType("broken_bindings")

    def refuse(*_args: object) -> tuple[int, None]:
        raise RuntimeError("the driver library is broken")

    setattr(broken, vendor.driver_class.status_enum, vendor.status_enum)
    setattr(broken, vendor.call("name_status"), refuse)
    setattr(broken, vendor.call("explain_status"), refuse)
    driver = vendor.driver_class(broken)
    err = driver.error(2, "allocCall")
    assert err.code == ErrorCode.OUT_OF_RESOURCES
    assert err.details == f"allocCall: {vendor.driver_class.vendor} status 2"


def test_an_error_is_named_even_when_the_driver_cannot_name_it(vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    with vendor.runtime(monkeypatch) as runtime:
        for role in ("name_status", "explain_status"):
            vendor.inject(role, "INVALID_VALUE")
        status = vendor.inject("alloc_device", "OUT_OF_MEMORY")
        err = expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, runtime.gpus[0], AllocType.DEVICE, 8)
        assert err.details == f"{vendor.call('alloc_device')}: {status.name}"  # the enum's name, no explanation
        assert [int(args[0]) for args in vendor.calls_of("name_status")] == [int(status)]


# ---- a failure of each driver call the plugin makes -------------------------------------------------

def actions(vendor: Vendor, rt: Runtime) -> dict[str, Callable[[], Any]]:
    """For each driver call (by role): an ``ol*`` action that makes it (on gpu0, with a fresh queue)."""
    gpu0, gpu1 = rt.gpus
    vendor.standin.register_kernel("record", lambda *_: None)
    prog = vendor.program(gpu0)
    record = api.olGetSymbol(prog, "record", KERNEL)
    pointer = api.olMemAlloc(gpu0, AllocType.DEVICE, 64)
    peer = api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    buffer = ctypes.create_string_buffer(64)  # kept alive by the actions that use it
    registrable = ctypes.addressof(buffer) + 32  # 32 bytes no copy of these actions touches

    def queue() -> api.Queue:
        return api.olCreateQueue(gpu0)

    def event_pair() -> tuple[api.Event, api.Event]:
        q = queue()
        return api.olCreateEvent(q, EventFlags.ENABLE_PROFILING), api.olCreateEvent(q, EventFlags.ENABLE_PROFILING)

    def register_and_unregister() -> None:
        api.olMemRegister(gpu0, registrable, 32)
        api.olMemUnregister(gpu0, registrable)

    return {
        "alloc_device": lambda: api.olMemAlloc(gpu0, AllocType.DEVICE, 8),
        "alloc_host": lambda: api.olMemAlloc(gpu0, AllocType.HOST, 8),
        "alloc_managed": lambda: api.olMemAlloc(gpu0, AllocType.MANAGED, 8),
        "free_device": lambda: api.olMemFree(api.olMemAlloc(gpu0, AllocType.DEVICE, 8)),
        "free_host": lambda: api.olMemFree(api.olMemAlloc(gpu0, AllocType.HOST, 8)),
        "memcpy_htod": lambda: api.olMemcpy(queue(), pointer, gpu0, ctypes.addressof(buffer), rt.host, 64),
        "memcpy_dtoh": lambda: api.olMemcpy(None, ctypes.addressof(buffer), rt.host, pointer, gpu0, 64),
        "memcpy_dtod": lambda: api.olMemcpy(queue(), pointer, gpu0, pointer + 32, gpu0, 32),
        "memcpy_peer": lambda: api.olMemcpy(None, peer, gpu1, pointer, gpu0, 64),
        "peer_can_access": lambda: api.olMemcpy(None, pointer, gpu0, peer, gpu1, 64),
        "peer_enable": lambda: api.olMemcpy(queue(), peer, gpu1, pointer, gpu0, 64),
        "memset8": lambda: api.olMemFill(None, pointer, b"\x01", 64),
        "memset16": lambda: api.olMemFill(queue(), pointer, b"\x01\x02", 64),
        "memset32": lambda: api.olMemFill(None, pointer, b"\x01\x02\x03\x04", 64),
        "memset2d8": lambda: api.olMemFill(queue(), pointer, b"\x01\x02\x03", 63),
        "memset2d16": lambda: api.olMemFill(None, pointer, b"\x01\x02" * 3, 60),
        "memset2d32": lambda: api.olMemFill(queue(), pointer, b"\x01\x02" * 4, 64),
        "module_load": lambda: vendor.program(gpu0),
        "module_get_function": lambda: api.olGetSymbol(vendor.program(gpu0), "other", KERNEL),
        "module_get_global": lambda: api.olGetSymbol(vendor.program(gpu0), "counter", GLOBAL),
        "launch": lambda: api.olLaunchKernel(queue(), gpu0, record, tag(b"x"), launch_size()),
        "occupancy": lambda: api.olCalculateOptimalOccupancy(gpu0, record, 0),
        "stream_create": lambda: [queue() for _ in range(4)],
        "stream_wait_event": lambda: api.olWaitEvents(queue(), [api.olCreateEvent(queue())]),
        "host_func": lambda: api.olLaunchHostFunction(queue(), lambda _: None),
        "event_create": lambda: [api.olCreateEvent(queue()) for _ in range(4)],
        "event_record": lambda: api.olCreateEvent(queue()),
        "event_elapsed": lambda: api.olGetEventElapsedTime(*event_pair()),
        "select": lambda: in_new_thread(api.olMemAlloc, gpu0, AllocType.DEVICE, 8),
        "host_register": lambda: api.olMemRegister(gpu0, registrable, 32),
        "host_device_pointer": lambda: api.olMemRegister(gpu0, registrable, 32),
        "host_unregister": register_and_unregister,
    }


FAILURES = [  # (the driver call's role, the status injected, the error the ol* call raises)
    ("alloc_device", "OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
    ("alloc_device", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("alloc_host", "OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
    ("alloc_host", "UNKNOWN", ErrorCode.UNKNOWN),
    ("alloc_managed", "NOT_SUPPORTED", ErrorCode.UNSUPPORTED),
    ("free_device", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("free_host", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("memcpy_htod", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("memcpy_dtoh", "UNKNOWN", ErrorCode.UNKNOWN),
    ("memcpy_dtod", "INVALID_HANDLE", ErrorCode.BACKEND_FAILURE),
    ("memcpy_peer", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("peer_can_access", "INVALID_DEVICE", ErrorCode.BACKEND_FAILURE),
    ("peer_enable", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("memset8", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("memset16", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("memset32", "NOT_SUPPORTED", ErrorCode.UNSUPPORTED),
    ("memset2d8", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("memset2d16", "UNKNOWN", ErrorCode.UNKNOWN),
    ("memset2d32", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("module_load", "OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
    ("module_load", "NO_BINARY_FOR_GPU", ErrorCode.INVALID_BINARY),
    ("module_get_function", "INVALID_HANDLE", ErrorCode.BACKEND_FAILURE),
    ("module_get_global", "NOT_FOUND", ErrorCode.NOT_FOUND),
    ("launch", "INVALID_CONFIGURATION", ErrorCode.INVALID_SIZE),
    ("launch", "INVALID_HANDLE", ErrorCode.BACKEND_FAILURE),
    ("occupancy", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("stream_create", "OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
    ("stream_create", "NOT_SUPPORTED", ErrorCode.UNSUPPORTED),
    ("stream_wait_event", "INVALID_HANDLE", ErrorCode.BACKEND_FAILURE),
    ("host_func", "NOT_SUPPORTED", ErrorCode.UNSUPPORTED),
    ("event_create", "OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
    ("event_create", "INVALID_CONTEXT", ErrorCode.BACKEND_FAILURE),
    ("event_record", "INVALID_HANDLE", ErrorCode.BACKEND_FAILURE),
    ("event_elapsed", "INVALID_HANDLE", ErrorCode.BACKEND_FAILURE),
    ("select", "INVALID_DEVICE", ErrorCode.BACKEND_FAILURE),
    ("host_register", "OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
    ("host_device_pointer", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT),
    ("host_unregister", "UNKNOWN", ErrorCode.UNKNOWN),
]


def failures(vendor: Vendor) -> Iterator[ParameterSet]:
    for role, status, code in FAILURES:
        if vendor.has_status(status):
            yield pytest.param(role, status, code, id=f"{vendor.call(role)}-{status}")


@pytest.mark.parametrize(("vendor", "role", "status", "code"), per_vendor(failures), indirect=["vendor"])
def test_a_failing_driver_call_raises_its_mapped_error_and_leaves_the_runtime_usable(
        vendor: Vendor, rt: Runtime, role: str, status: str, code: ErrorCode) -> None:
    action = actions(vendor, rt)[role]
    member = vendor.inject(role, status)
    err = expect(code, action)
    assert vendor.call(role) in err.details and f"{member.name} (" in err.details, err
    assert vendor.poisoned not in err.details
    action()  # the next call works: the failure was not sticky
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)


@pytest.mark.parametrize("role", ["stream_sync", "stream_query", "event_sync", "event_query"])
def test_a_failing_wait_or_query_fails_the_queue_with_the_drivers_error(vendor: Vendor, rt: Runtime,
                                                                       role: str) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    event = api.olCreateEvent(queue)
    failure = f"{vendor.call(role)}: {vendor.inject(role, 'INVALID_HANDLE').name}"
    if role == "stream_sync":
        err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    elif role == "stream_query":
        err = expect(ErrorCode.QUEUE_ERROR, api.olQueryQueue, queue)
    elif role == "event_sync":
        err = expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    else:
        assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True  # complete: it will never be reached
        err = expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    assert failure in error_details(err), err
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and error is not None and failure in error.details
    api.olDestroyQueue(queue)  # destroyed, not pooled
    healthy = api.olCreateQueue(gpu)
    api.olSyncEvent(api.olCreateEvent(healthy))
    api.olSyncQueue(healthy)
    assert api.olQueryQueue(healthy) is True


@pytest.mark.parametrize("role", ["stream_destroy", "event_destroy", "module_unload", "host_unregister"])
def test_a_failure_while_shutting_down_is_reported_and_the_next_init_works(vendor: Vendor, rt: Runtime,
                                                                          role: str) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    api.olDestroyEvent(api.olCreateEvent(queue))
    api.olDestroyQueue(queue)
    vendor.program(gpu)
    buffer, host = host_buffer(64)
    api.olMemRegister(gpu, host, 64)
    failure = f"{vendor.call(role)}: {vendor.inject(role, 'INVALID_HANDLE').name}"
    with pytest.raises(OffloadError) as info:
        in_new_thread(api.olShutDown)
    assert failure in str(info.value) + "".join(str(e) for e in getattr(info.value, "errors", [])), info.value
    expect(ErrorCode.UNINITIALIZED, api.olCreateQueue, gpu)  # the runtime did stop
    vendor.init()
    rt.refresh()
    api.olSyncQueue(api.olCreateQueue(rt.gpus[0]))
