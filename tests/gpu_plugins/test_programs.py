"""Programs and launches on GPU stand-ins: symbols and globals, images the driver refuses, unloading,
argument blobs and launch sizes passed unchanged, launches the device cannot run, occupancy.

Each vendor's image formats (PTX, cubin and fatbin; code objects and offload bundles) are tested
in tests/test_cuda_plugin.py and tests/test_amdgpu_plugin.py.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from _pytest.mark import ParameterSet
from gpu_fixtures import (
    COUNTER,
    GLOBAL,
    KERNEL,
    TABLE_SIZE,
    Runtime,
    expect,
    host_buffer,
    in_new_thread,
    launch_size,
    recorder,
    tag,
)

from offloadrt import AllocType, ErrorCode, SymbolInfo, api

from .vendors import Vendor, per_vendor

# ---- programs -------------------------------------------------------------------------------------


def test_kernels_and_globals_are_found_and_read(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    prog = vendor.program(gpu, bytearray(vendor.image()))  # not bytes: the plugin copes
    assert vendor.count("module_load") == 1
    record = api.olGetSymbol(prog, "record", KERNEL)
    assert api.olGetSymbol(prog, "record", KERNEL) is record
    assert vendor.calls_of("module_get_function")[-1][1] == b"record"
    counter = api.olGetSymbol(prog, "counter", GLOBAL)
    module, name = vendor.calls_of("module_get_global")[-1]
    assert name == b"counter" and int(module) in vendor.standin.state().modules
    address = api.olGetSymbolInfo(counter, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert api.olGetSymbolInfo(counter, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 4
    value, value_address = host_buffer(4)
    api.olMemcpy(None, value_address, rt.host, address, gpu, 4)
    assert struct.unpack("<I", value.raw)[0] == COUNTER
    table = api.olGetSymbol(prog, "table", GLOBAL)
    assert api.olGetSymbolInfo(table, SymbolInfo.GLOBAL_VARIABLE_SIZE) == TABLE_SIZE
    api.olDestroyProgram(prog)
    assert vendor.standin.state().modules == {}


def test_globals_are_written_and_read_through_olMemcpy(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[1]
    prog = vendor.program(gpu)
    table = api.olGetSymbol(prog, "table", GLOBAL)
    address = api.olGetSymbolInfo(table, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert vendor.standin.state().allocations[address].device.ordinal == 1  # loaded on device 1
    source, source_address = host_buffer(bytes(range(TABLE_SIZE)))
    queue = api.olCreateQueue(gpu)
    api.olMemcpy(queue, address, gpu, source_address, rt.host, TABLE_SIZE)
    back, back_address = host_buffer(TABLE_SIZE)
    api.olMemcpy(queue, back_address, rt.host, address, gpu, TABLE_SIZE)
    in_new_thread(api.olSyncQueue, queue)
    assert back.raw == bytes(range(TABLE_SIZE))
    other = vendor.program(gpu)  # another load of the image has its own globals
    other_table = api.olGetSymbol(other, "table", GLOBAL)
    assert api.olGetSymbolInfo(other_table, SymbolInfo.GLOBAL_VARIABLE_ADDRESS) != address
    api.olDestroyQueue(queue)


def test_an_empty_image_is_an_invalid_binary(vendor: Vendor, rt: Runtime) -> None:
    expect(ErrorCode.INVALID_BINARY, vendor.program, rt.gpus[0], b"")
    assert api.olIsValidBinary(rt.gpus[0], b"") is False
    assert vendor.count("module_load") == 0


def refused_images(vendor: Vendor) -> Iterator[ParameterSet]:
    for status in vendor.refused_image_statuses():
        yield pytest.param(status, id=status)


@pytest.mark.parametrize(("vendor", "status"), per_vendor(refused_images), indirect=["vendor"])
def test_an_image_the_driver_refuses_is_an_invalid_binary_with_its_error(vendor: Vendor, rt: Runtime,
                                                                         status: str) -> None:
    gpu = rt.gpus[0]
    member = vendor.inject("module_load", status)
    err = expect(ErrorCode.INVALID_BINARY, vendor.program, gpu)
    assert f"{vendor.call('module_load')}: {member.name} (" in err.details, err
    assert vendor.count("module_load") == 1 and vendor.standin.state().modules == {}
    api.olDestroyProgram(vendor.program(gpu))  # a good image still loads


def test_destroy_program_unloads_the_module_at_once(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    first, second = vendor.program(gpu), vendor.program(gpu)
    handles = list(vendor.standin.state().modules)
    assert len(handles) == 2
    api.olDestroyProgram(first)
    assert [int(args[0]) for args in vendor.calls_of("module_unload")] == [handles[0]]
    assert list(vendor.standin.state().modules) == handles[1:]
    api.olGetSymbol(second, "record", KERNEL)  # the other program is untouched
    expect(ErrorCode.INVALID_ARGUMENT, api.olGetSymbol, first, "record", KERNEL)
    api.olDestroyProgram(second)
    assert vendor.count("module_unload") == 2 and vendor.standin.state().modules == {}


@pytest.mark.parametrize(("kind", "role"), [(KERNEL, "module_get_function"), (GLOBAL, "module_get_global")],
                         ids=["kernel", "global"])
def test_a_missing_symbol_is_not_found_with_the_drivers_error(vendor: Vendor, rt: Runtime, kind: Any,
                                                              role: str) -> None:
    prog = vendor.program(rt.gpus[0])
    err = expect(ErrorCode.NOT_FOUND, api.olGetSymbol, prog, "missing", kind)
    assert f"{vendor.call(role)}('missing'): {vendor.status('NOT_FOUND').name}" in err.details, err
    api.olGetSymbol(prog, "record" if kind == KERNEL else "counter", kind)


# ---- launches -------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_launch_passes_the_argument_blob_and_sizes_unchanged(vendor: Vendor, rt: Runtime, with_queue: bool) -> None:
    seen, body = recorder()
    blobs: list[Any] = [struct.pack("<QIB3xd", 0x1122334455667788, 0xDEADBEEF, 0x7F, -2.5),
                        bytes(range(256)) * 4 + b"tail",  # larger than the plugin's first argument buffer
                        bytearray(b"\x00\x01\x00\xff"), ctypes.c_uint64(0xFEEDFACECAFEBEEF), b"\x01"]
    names = [f"bytes{len(bytes(blob))}" for blob in blobs]  # each blob's own kernel: exactly its size
    for name in names:
        vendor.standin.register_kernel(name, body)
    shapes = [((2, 3, 4), (32, 2, 1), 1024), ((1, 1, 1), (1024, 1, 1), 0), ((7, 1, 1), (8, 8, 8), 48 * 1024),
              ((65536, 1, 1), (64, 1, 1), 1), ((3, 2, 1), (16, 1, 1), vendor.shared_memory_limit)]
    for ordinal, gpu in enumerate(rt.gpus):
        queue = api.olCreateQueue(gpu) if with_queue else None
        program = vendor.program(gpu, vendor.image(kernels=names))
        start = len(seen)
        for name, blob, (groups, items, dyn) in zip(names, blobs, shapes):
            kernel = api.olGetSymbol(program, name, KERNEL)
            api.olLaunchKernel(queue, gpu, kernel, blob, launch_size(groups, items, dyn))
            launch = vendor.calls_of("launch")[-1]
            assert launch[1:8] == (*groups, *items, dyn)
            assert launch[9] is None and launch[10]  # the blob goes through `extra`, not kernelParams
        if queue is not None:
            in_new_thread(api.olSyncQueue, queue)
            api.olDestroyQueue(queue)
        assert seen[start:] == [(bytes(blob), groups, items, dyn, ordinal)
                                for blob, (groups, items, dyn) in zip(blobs, shapes)]


@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_a_blob_is_trimmed_of_c_struct_tail_padding_and_a_short_one_is_refused(vendor: Vendor, rt: Runtime,
                                                                               with_queue: bool) -> None:
    """What C users pass, ``sizeof(struct args)``, launches: the driver gets the parameters' bytes
    only (CUDA refuses more; an H100 failed saxpy on it). A blob shorter than the parameters, or
    longer than their struct, is INVALID_ARGUMENT naming both sizes, and nothing is launched."""
    seen, body = recorder()
    vendor.standin.register_kernel("pair", body)  # (u64, u32): 12 bytes, 16 as a C struct
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu) if with_queue else None
    kernel = api.olGetSymbol(vendor.program(gpu, vendor.image(kernels=["pair"])), "pair", KERNEL)
    padded = struct.pack("<QI4x", 0x0102030405060708, 0x0A0B0C0D)
    for _ in range(3):  # the hot path too, once the launch shape is known
        api.olLaunchKernel(queue, gpu, kernel, padded, launch_size())
        api.olLaunchKernel(queue, gpu, kernel, padded[:12], launch_size())
        api.olLaunchKernel(queue, gpu, kernel, padded[:14], launch_size())
    launches = vendor.count("launch")
    for wrong, why in ((padded[:11], "too short"), (padded + b"\0", "longer than its parameters"), (None, "too short")):
        err = expect(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, queue, gpu, kernel, wrong, launch_size())
        assert why in err.details and "2 parameters in 12 bytes (16 with C struct padding)" in err.details, err
        assert f"a {len(wrong)}-byte argument blob" in err.details if wrong else "no argument blob" in err.details
    assert vendor.count("launch") == launches  # nothing reached the driver
    if queue is not None:
        in_new_thread(api.olSyncQueue, queue)
    assert [launch[0] for launch in seen] == [padded[:12]] * 9


def test_a_launch_without_arguments_passes_no_extra(vendor: Vendor, rt: Runtime) -> None:
    seen, body = recorder()
    vendor.standin.register_kernel("other", body)  # a kernel without parameters
    gpu = rt.gpus[0]
    kernel = api.olGetSymbol(vendor.program(gpu), "other", KERNEL)
    for args in (None, b""):
        api.olLaunchKernel(None, gpu, kernel, args, launch_size())
        assert vendor.calls_of("launch")[-1][9:] == (None, 0)
    assert [launch[0] for launch in seen] == [b"", b""]


def test_launches_beyond_the_devices_limits_never_reach_the_driver(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    kernel = api.olGetSymbol(vendor.program(gpu), "other", KERNEL)
    limit_y = vendor.standin.state().devices[0].attributes[vendor.grid_y_attribute]  # as the driver reports it
    shapes = [launch_size(dyn=vendor.shared_memory_limit + 1), launch_size(items=(1025, 1, 1)),
              launch_size(items=(32, 32, 2)), launch_size(groups=(1, limit_y + 1, 1))]  # more groups than the grid
    if vendor.items_per_axis is not None:  # one work item more than the plugin allows on one axis
        shapes.append(launch_size(groups=((vendor.items_per_axis + 1) // 512 + 1, 1, 1), items=(512, 1, 1)))
    for shape in shapes:
        err = expect(ErrorCode.INVALID_SIZE, api.olLaunchKernel, None, gpu, kernel, None, shape)
        assert vendor.call("launch") not in err.details
    assert vendor.count("launch") == 0
    api.olLaunchKernel(None, gpu, kernel, None, launch_size(dyn=vendor.shared_memory_limit))  # the limit itself runs


def refused_launches(vendor: Vendor) -> Iterator[ParameterSet]:
    for status, code in (("INVALID_VALUE", ErrorCode.INVALID_ARGUMENT), ("OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES),
                         ("INVALID_CONFIGURATION", ErrorCode.INVALID_SIZE), ("NOT_SUPPORTED", ErrorCode.UNSUPPORTED),
                         ("UNKNOWN", ErrorCode.UNKNOWN)):
        if vendor.has_status(status):
            yield pytest.param(status, code, id=status)


@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
@pytest.mark.parametrize(("vendor", "status", "code"), per_vendor(refused_launches), indirect=["vendor"])
def test_a_refused_launch_raises_the_mapped_error(vendor: Vendor, rt: Runtime, status: str, code: ErrorCode,
                                                  with_queue: bool) -> None:
    seen, body = recorder()
    vendor.standin.register_kernel("record", body)
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu) if with_queue else None
    kernel = api.olGetSymbol(vendor.program(gpu), "record", KERNEL)
    member = vendor.inject("launch", status)
    err = expect(code, api.olLaunchKernel, queue, gpu, kernel, tag(b"no"), launch_size())
    assert f"{vendor.call('launch')}('record'): {member.name}" in err.details, err
    api.olLaunchKernel(queue, gpu, kernel, tag(b"yes"), launch_size())
    if queue is not None:
        in_new_thread(api.olSyncQueue, queue)  # the queue did not fail
        api.olDestroyQueue(queue)
    assert [launch[0] for launch in seen] == [tag(b"yes")]
    api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 8))  # nothing is poisoned


def test_optimal_occupancy_is_the_drivers_block_size(vendor: Vendor, rt: Runtime) -> None:
    if not vendor.image_declares_launch_bounds:  # PTX says .maxntid 128; a code object here says nothing
        vendor.standin.register_kernel("small", lambda *_: None, max_threads=128)
    gpu = rt.gpus[0]
    prog = vendor.program(gpu)
    assert api.olCalculateOptimalOccupancy(gpu, api.olGetSymbol(prog, "small", KERNEL), 0) == 128
    record = api.olGetSymbol(prog, "record", KERNEL)
    assert api.olCalculateOptimalOccupancy(gpu, record, 2048) == 1024
    func, shared, limit = vendor.occupancy_arguments(vendor.calls_of("occupancy")[-1])
    assert (shared, limit) == (2048, 0) and int(func) in vendor.standin.state().functions
    status = vendor.inject("occupancy", "INVALID_VALUE")
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olCalculateOptimalOccupancy, gpu, record, 0)
    assert f"{vendor.call('occupancy')}: {status.name}" in err.details, err
