"""Port of offload/unittests/OffloadAPI/memory/olMemcpy.cpp (late 2025/2026, all cases).

Host buffers (upstream's ``std::vector`` and ``new int[]``) are ctypes arrays, passed by address
with the host device. ``olMemcpyGlobalTest`` uses program "global" (variable ``global[64]``,
kernels ``read`` and ``write``) with a 1-D launch of one group of 64.
"""

from __future__ import annotations

import ctypes
import struct

from offloadrt import AllocType, Dimensions, KernelLaunchSizeArgs, SymbolInfo, SymbolKind, api

SIZE = 1024


def _bytes(value: int, count: int = SIZE) -> ctypes.Array:
    return (ctypes.c_uint8 * count)(*([value] * count))


def _addr(buffer: ctypes.Array) -> int:
    return ctypes.addressof(buffer)


def _assert_all(buffer: ctypes.Array, value: int) -> None:
    wrong = [i for i, v in enumerate(buffer) if v != value]
    assert not wrong, f"{len(wrong)} bytes differ from {value}, first at {wrong[0]}: {buffer[wrong[0]]}"


# ---- olMemcpyTest (OffloadQueueTest) ------------------------------------------------------------


def test_success_h_to_d(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    alloc = api.olMemAlloc(device, AllocType.DEVICE, SIZE)
    source = _bytes(42)
    api.olMemcpy(queue, alloc, device, _addr(source), host, SIZE)
    api.olSyncQueue(queue)
    api.olMemFree(alloc)


def test_success_d_to_h(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    source = _bytes(42)
    output = _bytes(0)
    alloc = api.olMemAlloc(device, AllocType.DEVICE, SIZE)
    api.olMemcpy(queue, alloc, device, _addr(source), host, SIZE)
    api.olMemcpy(queue, _addr(output), host, alloc, device, SIZE)
    api.olSyncQueue(queue)
    _assert_all(output, 42)
    api.olMemFree(alloc)


def test_success_d_to_d(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    source = _bytes(42)
    output = _bytes(0)
    alloc_a = api.olMemAlloc(device, AllocType.DEVICE, SIZE)
    alloc_b = api.olMemAlloc(device, AllocType.DEVICE, SIZE)
    api.olMemcpy(queue, alloc_a, device, _addr(source), host, SIZE)
    api.olMemcpy(queue, alloc_b, device, alloc_a, device, SIZE)
    api.olMemcpy(queue, _addr(output), host, alloc_b, device, SIZE)
    api.olSyncQueue(queue)
    _assert_all(output, 42)
    api.olMemFree(alloc_a)
    api.olMemFree(alloc_b)


def test_success_h_to_h_sync(queue: api.Queue, host: api.Device) -> None:
    source = _bytes(42)
    output = _bytes(0)
    api.olMemcpy(None, _addr(output), host, _addr(source), host, SIZE)
    _assert_all(output, 42)


def test_success_d_to_h_sync(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    source = _bytes(42)
    output = _bytes(0)
    alloc = api.olMemAlloc(device, AllocType.DEVICE, SIZE)
    api.olMemcpy(None, alloc, device, _addr(source), host, SIZE)
    api.olMemcpy(None, _addr(output), host, alloc, device, SIZE)
    _assert_all(output, 42)
    api.olMemFree(alloc)


NUM_ELEMS = 1024
NUM_BYTES = NUM_ELEMS * ctypes.sizeof(ctypes.c_int)


def _iota_on_device(queue: api.Queue, device: api.Device, host: api.Device) -> tuple[int, ctypes.Array]:
    """A DEVICE allocation receiving 0..1023 (as int) from a host vector on the queue."""
    device_src = api.olMemAlloc(device, AllocType.DEVICE, NUM_BYTES)
    source = (ctypes.c_int * NUM_ELEMS)(*range(NUM_ELEMS))
    api.olMemcpy(queue, device_src, device, _addr(source), host, NUM_BYTES)
    return device_src, source


def test_success_d_to_h_unregistered_host_int_1k(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    host_dst = (ctypes.c_int * NUM_ELEMS)()  # plain host memory, unknown to the runtime
    device_src, source = _iota_on_device(queue, device, host)
    api.olMemcpy(queue, _addr(host_dst), host, device_src, device, NUM_BYTES)
    api.olSyncQueue(queue)
    for i in range(NUM_ELEMS):
        assert host_dst[i] == i, f"mismatch at {i}"
    api.olMemFree(device_src)
    del source


def test_success_d_to_h_adjacent_plain_host_allocs(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    # One plain buffer cut in three, so that "before" and "after" really touch the destination.
    block = (ctypes.c_int * (3 * NUM_ELEMS))(*([-1] * NUM_ELEMS + [0] * NUM_ELEMS + [-2] * NUM_ELEMS))
    host_dst = _addr(block) + NUM_BYTES
    device_src, source = _iota_on_device(queue, device, host)
    api.olMemcpy(queue, host_dst, host, device_src, device, NUM_BYTES)
    api.olSyncQueue(queue)
    for i in range(NUM_ELEMS):
        assert block[i] == -1, f"adjacent (before) clobbered at {i}"
        assert block[NUM_ELEMS + i] == i, f"destination mismatch at {i}"
        assert block[2 * NUM_ELEMS + i] == -2, f"adjacent (after) clobbered at {i}"
    api.olMemFree(device_src)
    del source


def test_success_size_zero(queue: api.Queue, host: api.Device) -> None:
    source = _bytes(42)
    output = _bytes(0)
    # As with memcpy, size 0 is allowed; all other arguments stay valid.
    api.olMemcpy(None, _addr(output), host, _addr(source), host, 0)
    _assert_all(output, 0)


# ---- olMemcpyGlobalTest (OffloadGlobalTest + a queue) -------------------------------------------

LAUNCH_ARGS = KernelLaunchSizeArgs(dimensions=1, num_groups=Dimensions(1, 1, 1), group_size=Dimensions(64, 1, 1),
                                   dyn_shared_memory=0)
GLOBAL_BYTES = 64 * ctypes.sizeof(ctypes.c_uint32)


def _global_address(global_symbol: api.Symbol) -> int:
    return api.olGetSymbolInfo(global_symbol, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)


def _u32(address: int) -> ctypes.Array:
    return (ctypes.c_uint32 * 64).from_address(address)


class TestGlobal:
    """``olMemcpyGlobalTest``: OffloadGlobalTest plus a queue (the ``queue`` fixture)."""

    def test_success_round_trip(self, global_symbol: api.Symbol, queue: api.Queue, device: api.Device,
                                host: api.Device) -> None:
        addr = _global_address(global_symbol)
        source_mem = api.olMemAlloc(device, AllocType.MANAGED, GLOBAL_BYTES)
        source = _u32(source_mem)
        for i in range(64):
            source[i] = i
        dest_mem = api.olMemAlloc(device, AllocType.MANAGED, GLOBAL_BYTES)
        api.olMemcpy(queue, addr, device, source_mem, host, GLOBAL_BYTES)
        api.olSyncQueue(queue)
        api.olMemcpy(queue, dest_mem, host, addr, device, GLOBAL_BYTES)
        api.olSyncQueue(queue)
        assert list(_u32(dest_mem)) == list(range(64))
        api.olMemFree(dest_mem)
        api.olMemFree(source_mem)

    def test_success_write(self, global_program: api.Program, global_symbol: api.Symbol, queue: api.Queue,
                           device: api.Device, host: api.Device) -> None:
        read_kernel = api.olGetSymbol(global_program, "read", SymbolKind.KERNEL)
        addr = _global_address(global_symbol)
        source_mem = api.olMemAlloc(device, AllocType.MANAGED, LAUNCH_ARGS.group_size.x * 4)
        source = _u32(source_mem)
        for i in range(64):
            source[i] = i
        dest_mem = api.olMemAlloc(device, AllocType.MANAGED, LAUNCH_ARGS.group_size.x * 4)
        args = struct.pack("P", dest_mem)  # struct { void *Mem; }
        api.olMemcpy(queue, addr, device, source_mem, host, GLOBAL_BYTES)
        api.olSyncQueue(queue)
        api.olLaunchKernel(queue, device, read_kernel, args, LAUNCH_ARGS)
        api.olSyncQueue(queue)
        assert list(_u32(dest_mem)) == list(range(64))
        api.olMemFree(dest_mem)
        api.olMemFree(source_mem)

    def test_success_read(self, global_program: api.Program, global_symbol: api.Symbol, queue: api.Queue,
                          device: api.Device, host: api.Device) -> None:
        write_kernel = api.olGetSymbol(global_program, "write", SymbolKind.KERNEL)
        addr = _global_address(global_symbol)
        dest_mem = api.olMemAlloc(device, AllocType.MANAGED, LAUNCH_ARGS.group_size.x * 4)
        api.olLaunchKernel(queue, device, write_kernel, None, LAUNCH_ARGS)
        api.olSyncQueue(queue)
        api.olMemcpy(queue, dest_mem, host, addr, device, GLOBAL_BYTES)
        api.olSyncQueue(queue)
        assert list(_u32(dest_mem)) == [i * 2 for i in range(64)]
        api.olMemFree(dest_mem)
