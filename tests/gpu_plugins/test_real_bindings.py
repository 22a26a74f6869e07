"""The driver calls the plugin makes, against the vendor's real bindings.

A representative workload makes every driver call the plugin's source contains, with each kind
of argument; each distinct call is then replayed against the installed bindings
(``cuda.bindings.driver``, hip-python), which convert every argument before they find that the
driver library is missing: a refused argument is a wrong type or value that a GPU machine would
hit. Skipped where the bindings are not installed, and where the driver library loads (stand-in
handles must never reach a real driver; the real-GPU tests make the real calls there).
"""

from __future__ import annotations

from typing import Any

import pytest
from gpu_fixtures import (
    GLOBAL,
    KERNEL,
    WAIT,
    Runtime,
    call_key,
    host_buffer,
    in_new_thread,
    launch_size,
    shut_down_fully,
    tag,
)

from offloadrt import AllocType, EventFlags, EventInfo, OffloadError, api
from offloadrt.api import _foreign

from .vendors import Vendor

# Values at both ends of every C type: memsets of 1, 2 and 4 bytes, 2-D lanes of each width.
FILL_PATTERNS = (b"\x00", b"\xff", b"\xff\xff", b"\x01\x00", b"\xff\xff\xff\xff", b"\x00\x00\x00\x80",
                 b"\x01\x02\x03", b"\xff" * 6, b"\xff" * 8, bytes(range(1, 13)), b"\x00\x00\x00\x80" * 4,
                 bytes(range(1, 18)))


def representative_workload(vendor: Vendor, runtime: Runtime) -> None:
    """Every driver call the plugin can make, each kind of argument included: memory of every kind,
    copies and fills, each image format, registered host memory, symbols, launches, occupancy,
    events, waits, a faulting kernel, failed allocations, a parked queue, another thread's device,
    and a full shutdown (which unregisters what is left)."""
    gpu0, gpu1 = runtime.gpus
    vendor.standin.register_kernel("record", lambda *_: None)
    vendor.standin.register_kernel("boom", vendor.faulting_kernel("LAUNCH_OUT_OF_RESOURCES"))
    vendor.prepare_workload()
    source, source_address = host_buffer(bytes(range(64)))
    queues = [api.olCreateQueue(gpu) for gpu in (gpu0, gpu0, gpu1)]
    pointers = {kind: api.olMemAlloc(gpu0, kind, 256) for kind in AllocType}
    other = api.olMemAlloc(gpu1, AllocType.DEVICE, 256)
    for queue in (None, queues[0]):
        api.olMemcpy(queue, pointers[AllocType.DEVICE], gpu0, source_address, runtime.host, 64)
        api.olMemcpy(queue, pointers[AllocType.MANAGED], gpu0, pointers[AllocType.DEVICE], gpu0, 64)
        api.olMemcpy(queue, other, gpu1, pointers[AllocType.DEVICE], gpu0, 64)
        api.olMemcpy(queue, source_address, runtime.host, pointers[AllocType.MANAGED], gpu0, 64)
        for pattern in FILL_PATTERNS:
            api.olMemFill(queue, pointers[AllocType.DEVICE], pattern, len(pattern) * 4)
    api.olMemFill(None, pointers[AllocType.HOST] + 1, b"\x01\x02\x03\x04\x05\x06", 12)
    for address in (*pointers.values(), source_address):  # where memory lives (foreign arrays coming in)
        _foreign.locate_pointer(gpu0, address)
    _foreign.wait_for_stream(gpu0, queues[1]._ai.stream, queues[0])  # a driver stream offloadrt did not make
    prog = vendor.program(gpu0)
    for image in vendor.other_images():
        api.olDestroyProgram(vendor.program(gpu0, image))
    for bad in vendor.refused_images():
        with pytest.raises(OffloadError):
            vendor.program(gpu0, bad)
    staging, staging_address = host_buffer(4096)
    api.olMemRegister(gpu0, staging_address, 4096)  # pinned and mapped
    api.olMemRegister(gpu1, staging_address + 64, 64)  # a user of gpu0's pin
    api.olMemUnregister(gpu1, staging_address + 64)
    api.olMemUnregister(gpu0, staging_address)  # unpinned
    pinned_by_gpu1 = api.olMemAlloc(gpu1, AllocType.HOST, 256)
    api.olMemRegister(gpu0, pinned_by_gpu1 + 16, 64)  # the driver finds it page-locked already
    api.olMemUnregister(gpu0, pinned_by_gpu1 + 16)
    api.olMemRegister(gpu1, staging_address, 4096)  # left for the shutdown
    record = api.olGetSymbol(prog, "record", KERNEL)
    api.olGetSymbol(prog, "counter", GLOBAL)
    for symbol_kind in (KERNEL, GLOBAL):
        with pytest.raises(OffloadError):
            api.olGetSymbol(prog, "missing", symbol_kind)
    for queue in (None, queues[0]):
        api.olLaunchKernel(queue, gpu0, record, tag(1), launch_size((2, 3, 4), (32, 2, 1), 1024))
        api.olLaunchKernel(queue, gpu0, record, tag(2), launch_size(dyn=vendor.shared_memory_limit))
    api.olCalculateOptimalOccupancy(gpu0, record, 1024)
    start = api.olCreateEvent(queues[0], EventFlags.ENABLE_PROFILING)
    api.olLaunchHostFunction(queues[0], lambda _: None)
    end = api.olCreateEvent(queues[0], EventFlags.ENABLE_PROFILING)
    api.olGetEventInfo(end, EventInfo.IS_COMPLETE)
    api.olWaitEvents(queues[1], [end])
    api.olWaitEvents(queues[2], [end])
    api.olSyncEvent(end)
    api.olGetEventElapsedTime(start, end)
    for queue in queues:
        api.olQueryQueue(queue)
        api.olSyncQueue(queue)
    api.olLaunchKernel(queues[1], gpu0, api.olGetSymbol(prog, "boom", KERNEL), None, launch_size())
    with pytest.raises(OffloadError):
        api.olSyncQueue(queues[1])
    for role in ("alloc_device", "alloc_host", "alloc_managed"):
        vendor.inject(role, "OUT_OF_MEMORY")
    for kind in AllocType:
        with pytest.raises(OffloadError):
            api.olMemAlloc(gpu0, kind, 64)
    gate_queue = api.olCreateQueue(gpu0)
    gate = runtime.gate(gate_queue)
    api.olDestroyQueue(gate_queue)  # parked while busy
    gate.open()
    for event in (start, end):
        api.olDestroyEvent(event)
    for queue in queues:
        api.olDestroyQueue(queue)
    in_new_thread(lambda: api.olMemFree(api.olMemAlloc(gpu1, AllocType.DEVICE, 8)))  # another thread's device
    shut_down_fully()  # frees, unloads, destroys the pools, releases the devices


def test_the_workload_makes_every_driver_call_of_the_plugin_and_the_real_bindings_accept_them(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    with vendor.runtime(monkeypatch, devices=2) as runtime:
        in_new_thread(representative_workload, vendor, runtime, timeout=3 * WAIT)
        recorded = list(vendor.standin.calls)
    wanted = vendor.plugin_calls()
    essential = {vendor.call(role) for role in ("init", "name_status", "select", "launch", "module_load")}
    assert len(wanted) >= 40 and essential <= wanted, wanted
    assert all(vendor.standin_function(name) for name in wanted), wanted
    missing = wanted - {name for name, _ in recorded}
    assert not missing, f"the workload does not exercise {sorted(missing)}"
    distinct: dict[tuple[Any, ...], tuple[str, tuple[Any, ...]]] = {}
    for name, args in recorded:
        distinct.setdefault(call_key(name, args), (name, args))
    assert len(distinct) > vendor.min_distinct_calls, len(distinct)
    refused = vendor.replay(distinct.values())
    assert not refused, "\n".join(f"{name}{args!r}: {type(exc).__name__}: {exc}" for name, args, exc in refused)
