"""olMemRegister/olMemUnregister on GPU stand-ins.

The plugin pins a range with the driver's host-register call (portable and mapped) and answers
the device address the driver gives; the generic layer counts the users of a range per device,
the GPU layer counts the devices of the plugin that use one driver registration (the driver pins
a range once for all its devices).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from _pytest.mark import ParameterSet
from gpu_fixtures import Runtime, expect, host_buffer, in_new_thread, registered, shut_down_fully

from offloadrt import AllocType, ErrorCode, api

from .vendors import Vendor, per_vendor


@pytest.mark.parametrize("own_addresses", [False, True], ids=["host-addresses", "device-addresses"])
def test_register_pins_the_range_and_answers_the_drivers_device_address(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch, own_addresses: bool) -> None:
    """The address olMemRegister returns is the driver's (a window of its own where a device cannot
    use host pointers); a range inside it is one more user, at the same offset, with no driver call,
    on either GPU; the driver unpins the range only at the last olMemUnregister."""
    devices = [vendor.spec(), vendor.spec(attributes=vendor.no_host_pointers) if own_addresses else vendor.spec()]
    with vendor.runtime(monkeypatch, devices=devices) as runtime:
        gpu0, gpu1 = runtime.gpus
        buffer, host = host_buffer(8192)
        pinned = api.olMemRegister(gpu0, host, 8192)
        assert registered(vendor.standin) == {host: (8192, pinned)}
        assert (pinned != host) == own_addresses
        assert vendor.calls_of("host_register") == [(host, 8192, vendor.host_register_flags())]
        assert vendor.calls_of("host_device_pointer") == [vendor.device_pointer_arguments(host)]
        inner = api.olMemRegister(gpu0, host + 4096, 64)
        again = api.olMemRegister(gpu0, host, 8192)
        shared = api.olMemRegister(gpu1, host + 64, 64)  # the other GPU shares the pin
        assert (inner, again, shared) == (pinned + 4096, pinned, pinned + 64)
        assert vendor.count("host_register") == 1 and vendor.count("host_device_pointer") == 1
        for device, ptr in ((gpu0, host + 4096), (gpu0, host), (gpu1, host + 64)):
            api.olMemUnregister(device, ptr)
            assert registered(vendor.standin) == {host: (8192, pinned)}, "unpinned while it had users"
        api.olMemUnregister(gpu0, host + 100)  # any address inside names the range
        assert registered(vendor.standin) == {} and vendor.calls_of("host_unregister") == [(host,)]
        expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu0, host)


@pytest.mark.parametrize("at", ["returned-address", "host-address"])
@pytest.mark.parametrize("host_pointers", [0, 1], ids=["CanUseHostPointer-0", "CanUseHostPointer-1"])
def test_unregister_takes_the_address_register_returned_or_the_host_address(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch, host_pointers: int, at: str) -> None:
    """olMemUnregister names a registration by the address olMemRegister returned (as LLVM's tests
    pass it) or by its host address, whether the device reaches registered memory at its host
    address (attribute 1) or through an address of its own (0: the two differ); either way the
    driver unpins the range, once, and the other address is no registration any more."""
    attributes = {name: host_pointers for name in vendor.no_host_pointers}
    with vendor.runtime(monkeypatch, devices=[vendor.spec(attributes=attributes)]) as runtime:
        gpu = runtime.gpus[0]
        buffer, host = host_buffer(4096)
        for attempt in range(2):  # unregistered memory registers again, at a fresh device address
            pinned = api.olMemRegister(gpu, host, 4096)
            assert (pinned != host) == (host_pointers == 0)
            assert registered(vendor.standin) == {host: (4096, pinned)}
            name, other = (pinned, host) if at == "returned-address" else (host, pinned)
            api.olMemUnregister(gpu, name)
            assert registered(vendor.standin) == {}
            assert vendor.calls_of("host_unregister") == [(host,)] * (attempt + 1)
            expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu, other)
            expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu, name)


def test_a_partial_overlap_is_invalid_argument_and_registers_nothing(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    buffer, host = host_buffer(1024)
    api.olMemRegister(gpu0, host + 256, 256)
    for device, start, size in ((gpu0, host + 384, 256), (gpu0, host, 512), (gpu1, host + 384, 256),
                                (gpu1, host, 1024)):
        err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, device, start, size)
        assert "only in part" in err.details, err
        if device is gpu1:  # registered with the other GPU: the driver pins a range once for both
            assert f"another {vendor.label} device" in err.details, err
    assert registered(vendor.standin) == {host + 256: (256, host + 256)} and vendor.count("host_register") == 1
    api.olMemUnregister(gpu0, host + 256)
    assert api.olMemRegister(gpu1, host, 1024) == host  # apart from every registration: fine


def test_unregistering_memory_that_is_not_registered_is_invalid_argument(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    buffer, host = host_buffer(256)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu0, host)
    api.olMemRegister(gpu0, host, 256)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu1, host)  # registered with the other GPU only
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu0, host + 256)
    api.olMemUnregister(gpu0, host)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu0, host)
    assert vendor.count("host_unregister") == 1 and registered(vendor.standin) == {}


def test_registering_inside_a_host_allocation_of_the_device_makes_no_driver_call(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    pinned = api.olMemAlloc(gpu, AllocType.HOST, 4096)
    assert api.olMemRegister(gpu, pinned + 128, 256) == pinned + 128
    assert api.olMemRegister(gpu, pinned, 4096) == pinned
    assert vendor.count("host_register") == vendor.count("host_device_pointer") == 0
    api.olMemUnregister(gpu, pinned + 128)
    api.olMemUnregister(gpu, pinned)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu, pinned)  # the allocation's own pin stays
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, gpu, pinned + 4000, 200)  # runs past it
    assert vendor.count("host_unregister") == 0 and registered(vendor.standin) == {}
    api.olMemFree(pinned)


def test_a_host_allocation_of_another_gpu_is_page_locked_already(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    pinned = api.olMemAlloc(gpu0, AllocType.HOST, 256)
    assert api.olMemRegister(gpu1, pinned + 8, 8) == pinned + 8  # the driver finds it page-locked
    assert vendor.count("host_register") == 1 and registered(vendor.standin) == {}
    assert api.olMemRegister(gpu0, pinned + 8, 8) == pinned + 8  # its own HOST allocation: no driver call
    assert vendor.count("host_register") == 1
    for device in (gpu0, gpu1):
        api.olMemUnregister(device, pinned + 8)
    assert vendor.count("host_unregister") == 0
    api.olMemFree(pinned)


@pytest.mark.parametrize("first_out", [0, 1], ids=["gpu0-first-out", "gpu1-first-out"])
def test_the_gpus_of_the_plugin_share_one_driver_registration(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch, first_out: int) -> None:
    """The driver pins a host range once for all its devices (a second registration is
    ALREADY_REGISTERED): the second GPU uses gpu0's registration, and it stays pinned until no
    GPU uses it, whichever lets go first."""
    devices = [vendor.spec(), vendor.spec(attributes=vendor.no_host_pointers)]
    with vendor.runtime(monkeypatch, devices=devices) as runtime:
        buffer, host = host_buffer(4096)
        pinned = api.olMemRegister(runtime.gpus[0], host, 4096)
        assert api.olMemRegister(runtime.gpus[1], host, 4096) == pinned
        assert api.olMemRegister(runtime.gpus[1], host + 512, 512) == pinned + 512
        assert vendor.count("host_register") == 1
        last_out = 1 - first_out
        for _ in range(2 if first_out else 1):
            api.olMemUnregister(runtime.gpus[first_out], host)
        assert registered(vendor.standin) == {host: (4096, pinned)}, "unpinned while the other GPU used it"
        for _ in range(1 if first_out else 2):
            api.olMemUnregister(runtime.gpus[last_out], host)
        assert registered(vendor.standin) == {} and vendor.count("host_unregister") == 1


def test_memory_registered_outside_offloadrt_is_used_as_it_is_and_never_unregistered(
        vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    buffer, host = host_buffer(1024)
    vendor.register_elsewhere(host, 512)  # another library's pin
    assert api.olMemRegister(gpu1, host + 64, 64) == host + 64
    assert api.olMemRegister(gpu0, host, 512) == host
    assert api.olMemRegister(gpu0, host + 128, 128) == host + 128
    for device, ptr in ((gpu1, host + 64), (gpu0, host), (gpu0, host + 128)):
        api.olMemUnregister(device, ptr)
    assert vendor.count("host_unregister") == 0 and registered(vendor.standin) == {host: (512, host)}
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, gpu0, host + 256, 512)  # runs past it
    assert vendor.status("HOST_MEMORY_ALREADY_REGISTERED").name in err.details, err
    assert "outside offloadrt" in err.details and f"another {vendor.label} device" not in err.details, err
    # A HOST allocation of one GPU is pinned memory the other GPU can register as it is.
    other = api.olMemAlloc(gpu1, AllocType.HOST, 256)
    assert api.olMemRegister(gpu0, other + 16, 32) == other + 16
    api.olMemUnregister(gpu0, other + 16)
    api.olMemFree(other)
    assert vendor.count("host_unregister") == 0


def register_failures(vendor: Vendor) -> Iterator[ParameterSet]:
    for role, status, code in (("host_register", "OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
                               ("host_register", "NOT_PERMITTED", ErrorCode.BACKEND_FAILURE),
                               ("host_device_pointer", "INVALID_VALUE", ErrorCode.INVALID_ARGUMENT)):
        if vendor.has_status(status):
            yield pytest.param(role, status, code, id=f"{vendor.call(role)}-{status}")


@pytest.mark.parametrize(("vendor", "role", "status", "code"), per_vendor(register_failures), indirect=["vendor"])
def test_a_failed_registration_leaves_nothing_registered(vendor: Vendor, rt: Runtime, role: str, status: str,
                                                         code: ErrorCode) -> None:
    gpu = rt.gpus[0]
    buffer, host = host_buffer(512)
    member = vendor.inject(role, status)
    err = expect(code, api.olMemRegister, gpu, host, 512)
    assert f"{vendor.call(role)}: {member.name}" in err.details, err
    assert registered(vendor.standin) == {}  # a failed device-address query unregistered what it had pinned
    assert vendor.calls_of("host_unregister") == ([(host,)] if role == "host_device_pointer" else [])
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, gpu, host)
    assert api.olMemRegister(gpu, host, 512) == host  # nothing half-registered is in the way
    api.olMemUnregister(gpu, host)
    assert registered(vendor.standin) == {}


def test_a_failed_undo_says_so_and_a_failed_unregister_keeps_the_registration(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    buffer, host = host_buffer(512)
    vendor.inject("host_device_pointer", "INVALID_VALUE")
    unknown = vendor.inject("host_unregister", "UNKNOWN")
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, gpu, host, 512)
    assert "undoing the registration failed too" in err.details and unknown.name in err.details, err
    unregister: Any = getattr(vendor.bindings, vendor.call("host_unregister"))
    assert int(unregister(host)[0]) == 0  # what offloadrt could not undo
    pinned = api.olMemRegister(gpu, host, 512)
    vendor.inject("host_unregister", "UNKNOWN")
    err = expect(ErrorCode.UNKNOWN, api.olMemUnregister, gpu, host)
    assert f"{vendor.call('host_unregister')}: {unknown.name}" in err.details, err
    assert registered(vendor.standin) == {host: (512, pinned)}
    api.olMemUnregister(gpu, host)  # still registered: it can be unregistered again
    assert registered(vendor.standin) == {}


def test_the_last_shutdown_unregisters_what_is_left(vendor: Vendor, rt: Runtime) -> None:
    """Leftovers are unpinned by olShutDown, a range two GPUs share included."""
    gpu0, gpu1 = rt.gpus
    buffers = [host_buffer(256) for _ in range(3)]
    (_, a), (_, b), (_, c) = buffers
    api.olMemRegister(gpu0, a, 256)
    api.olMemRegister(gpu0, a + 16, 16)
    api.olMemRegister(gpu1, b, 256)
    api.olMemRegister(gpu0, c, 256)
    api.olMemRegister(gpu1, c, 256)
    assert len(registered(vendor.standin)) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)
    assert registered(vendor.standin) == {}
    assert sorted(int(args[0]) for args in vendor.calls_of("host_unregister")) == sorted([a, b, c])


@pytest.mark.parametrize("own_addresses", [False, True], ids=["host-addresses", "device-addresses"])
def test_copies_to_and_from_registered_memory(vendor: Vendor, monkeypatch: pytest.MonkeyPatch,
                                              own_addresses: bool) -> None:
    """Registered memory is host memory to olMemcpy (named with the host device) and device memory
    at its registered address (named with the GPU), with and without a queue."""
    devices = [vendor.spec(attributes=vendor.no_host_pointers) if own_addresses else vendor.spec(), vendor.spec()]
    read, write = vendor.standin.read, vendor.standin.write
    with vendor.runtime(monkeypatch, devices=devices) as runtime:
        gpu, host_device = runtime.gpus[0], runtime.host
        data = bytes((7 * i + 3) % 256 for i in range(1024))
        buffer, host = host_buffer(data)
        back, back_address = host_buffer(1024)
        pinned = api.olMemRegister(gpu, host, 1024)
        assert (pinned != host) == own_addresses
        api.olMemRegister(gpu, back_address, 1024)
        device = api.olMemAlloc(gpu, AllocType.DEVICE, 1024)
        queue = api.olCreateQueue(gpu)
        for q in (None, queue):
            write(device, bytes(1024))
            api.olMemcpy(q, device, gpu, host, host_device, 1024)  # host -> device
            api.olMemcpy(q, back_address, host_device, device, gpu, 1024)  # device -> host
            if q is not None:
                in_new_thread(api.olSyncQueue, q)
            assert read(device, 1024) == data and back.raw == data
            write(device, bytes(1024))
            api.olMemcpy(q, device, gpu, pinned + 256, gpu, 512)  # the GPU reads it at its address
            api.olMemcpy(q, pinned, gpu, device, gpu, 256)  # and writes it
            if q is not None:
                in_new_thread(api.olSyncQueue, q)
            assert read(device, 512) == data[256:768]
            assert buffer.raw[:256] == data[256:512]
            buffer.raw = data
        api.olMemFill(queue, pinned + 1000, b"\x5a", 24)
        api.olMemFill(queue, pinned, b"\x01\x02\x03", 6)
        in_new_thread(api.olSyncQueue, queue)
        assert buffer.raw[1000:] == b"\x5a" * 24 and buffer.raw[:6] == b"\x01\x02\x03" * 2
        api.olMemcpy(None, host + 8, host_device, device, gpu, 8)  # into registered memory, as host memory
        assert buffer.raw[8:16] == data[256:264]
        api.olDestroyQueue(queue)


def test_a_poisoned_device_registers_nothing_and_leaves_its_registrations(vendor: Vendor, rt: Runtime) -> None:
    """As its frees do: a poisoned device makes no driver call to unregister; its registrations
    stay with the driver (CUDA's context takes them along when it is released; HIP, which cannot
    reset a faulted device, keeps them)."""
    gpu0, gpu1 = rt.gpus
    buffer, host = host_buffer(1024)
    api.olMemRegister(gpu0, host, 512)
    api.olMemRegister(gpu1, host + 512, 512)
    vendor.standin.poison(0)
    other, other_address = host_buffer(64)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olMemRegister, gpu0, other_address, 64)
    assert vendor.status("ILLEGAL_ADDRESS").name in err.details and vendor.poisoned in err.details, err
    api.olMemUnregister(gpu0, host)
    assert vendor.count("host_unregister") == 0 and host in registered(vendor.standin)
    api.olMemUnregister(gpu1, host + 512)  # the other GPU is unaffected
    assert host + 512 not in registered(vendor.standin)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)
    assert registered(vendor.standin) == ({host: (512, host)} if vendor.keeps_sticky_faults else {})
