"""Kernels on the host device: launch shapes, parallel work-groups, local memory, argument blobs,
faults, launch validation, global variables, occupancy."""

from __future__ import annotations

import ctypes
import os
import struct

import numpy as np
import pytest
from conftest import Gate, expect_error, kernel, launch_args, u32_view

from offloadrt import (
    AllocType,
    DeviceInfo,
    Dimensions,
    ErrorCode,
    KernelLaunchSizeArgs,
    OffloadError,
    SymbolInfo,
    SymbolKind,
    api,
)

GLOBAL = SymbolKind.GLOBAL_VARIABLE
TIMEOUT_NS = 20_000_000_000  # how long the rendezvous kernels wait for the other groups


@pytest.fixture
def concurrency(host: api.Device, build) -> api.Program:
    return api.olCreateProgram(host, build("concurrency"))


def ptr_arg(address: int) -> bytes:
    return struct.pack("P", address)


def launch(groups: tuple[int, int, int], size: tuple[int, int, int] = (1, 1, 1), dims: int = 3,
           dyn: int = 0) -> KernelLaunchSizeArgs:
    return KernelLaunchSizeArgs(dims, Dimensions(*groups), Dimensions(*size), dyn)


def parallelism() -> int:
    return len(os.sched_getaffinity(0))


# ---- launch shapes -------------------------------------------------------------------------------

@pytest.mark.parametrize("use_queue", [False, True], ids=["sync", "queue"])
@pytest.mark.parametrize("dims, groups, size", [
    (1, (1, 1, 1), 1),
    (1, (1, 1, 1), 100),
    (1, (37, 1, 1), 13),
    (2, (5, 7, 1), 9),
    (3, (3, 4, 5), 11),
    (3, (2, 1, 64), 3),
], ids=["1d-one", "1d-one-group", "1d", "2d", "3d", "3d-tall"])
def test_foo_writes_every_element(host, basic, queue, alloc, dims, groups, size, use_queue):
    total = groups[0] * groups[1] * groups[2] * size
    out = alloc(4 * (total + 16))
    view = u32_view(out, total + 16)
    ctypes.memset(out, 0xFF, 4 * (total + 16))
    api.olLaunchKernel(queue if use_queue else None, host, kernel(basic, "foo"), ptr_arg(out),
                       launch(groups, (size, 1, 1), dims))
    if use_queue:
        api.olSyncQueue(queue)
    result = np.frombuffer(view, dtype=np.uint32)
    assert (result[:total] == np.arange(total, dtype=np.uint32)).all()
    assert (result[total:] == 0xFFFFFFFF).all(), "the kernel wrote past its range"


def test_synchronous_launch_is_done_at_return(host, basic, alloc):
    total = 256 * 32
    out = alloc(4 * total)
    ctypes.memset(out, 0, 4 * total)
    api.olLaunchKernel(None, host, kernel(basic, "foo"), ptr_arg(out), launch_args(256, 32))
    result = np.frombuffer(u32_view(out, total), dtype=np.uint32)
    assert (result == np.arange(total, dtype=np.uint32)).all()


def test_queued_launch_waits_for_earlier_work(host, basic, queue, alloc):
    counter = alloc(4)
    u32_view(counter, 1)[0] = 0
    with Gate(queue) as gate:
        for _ in range(3):
            api.olLaunchKernel(queue, host, kernel(basic, "increment"), ptr_arg(counter), launch_args())
        assert u32_view(counter, 1)[0] == 0, "a launch ran before the work queued ahead of it"
        gate.open()
    api.olSyncQueue(queue)
    assert u32_view(counter, 1)[0] == 3


# ---- parallel work-groups ------------------------------------------------------------------------

@pytest.mark.parametrize("use_queue", [False, True], ids=["sync", "queue"])
def test_work_groups_run_in_parallel(host, concurrency, queue, alloc, use_queue):
    cores = parallelism()
    if cores < 2:
        pytest.skip("one CPU core: work-groups cannot run in parallel")
    groups = min(cores, 16)
    assert api.olGetDeviceInfo(host, DeviceInfo.NUM_COMPUTE_UNITS) >= groups
    arrived = alloc(4)
    threads = alloc(8 * groups)
    u32_view(arrived, 1)[0] = 0
    ctypes.memset(threads, 0, 8 * groups)
    args = struct.pack("PPQ", arrived, threads, TIMEOUT_NS)
    # Every group waits until all have arrived: this only finishes if they all run at once.
    api.olLaunchKernel(queue if use_queue else None, host, kernel(concurrency, "rendezvous"), args,
                       launch_args(groups))
    if use_queue:
        api.olSyncQueue(queue)
    assert u32_view(arrived, 1)[0] == groups
    ids = list((ctypes.c_uint64 * groups).from_address(threads))
    assert all(ids)
    assert len(set(ids)) == groups, f"{groups} groups ran on only {len(set(ids))} thread(s)"


# ---- work-group memory ---------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 16, 250])
def test_dynamic_shared_memory(host, basic, queue, alloc, size):
    groups = 4
    out = alloc(4 * groups * size)
    ctypes.memset(out, 0xFF, 4 * groups * size)
    api.olLaunchKernel(queue, host, kernel(basic, "localmem"), ptr_arg(out), launch_args(groups, size, 4 * size))
    api.olSyncQueue(queue)
    result = np.frombuffer(u32_view(out, groups * size), dtype=np.uint32)
    expected = (np.arange(groups * size, dtype=np.uint32) % size) * 2
    assert (result == expected).all()


def test_dynamic_shared_memory_grows_between_launches(host, basic, alloc):
    """A launch that needs more work-group memory than the last one gets all of it."""
    for size in (4, 64, 4096, 16):
        out = alloc(4 * 3 * size)
        api.olLaunchKernel(None, host, kernel(basic, "localmem"), ptr_arg(out), launch_args(3, size, 4 * size))
        result = np.frombuffer(u32_view(out, 3 * size), dtype=np.uint32)
        assert (result == (np.arange(3 * size, dtype=np.uint32) % size) * 2).all()


def test_dynamic_shared_memory_is_private_to_each_group(host, concurrency, alloc):
    groups = min(parallelism(), 16)
    words = 512
    arrived = alloc(4)
    ok = alloc(4 * groups)
    u32_view(arrived, 1)[0] = 0
    ctypes.memset(ok, 0, 4 * groups)
    args = struct.pack("PPQI4x", arrived, ok, TIMEOUT_NS, words)
    # All groups hold their buffers at the same time (they meet in the middle), so sharing shows.
    api.olLaunchKernel(None, host, kernel(concurrency, "shared_private"), args, launch_args(groups, 1, 4 * words))
    assert list(u32_view(ok, groups)) == [1] * groups


def test_static_thread_local_reduction(host, basic, queue, alloc):
    groups, size = 24, 100
    out = alloc(4 * groups)
    ctypes.memset(out, 0, 4 * groups)
    api.olLaunchKernel(queue, host, kernel(basic, "localmem_static"), ptr_arg(out), launch_args(groups, size))
    api.olSyncQueue(queue)
    assert list(u32_view(out, groups)) == [2 * size] * groups


# ---- argument blobs ------------------------------------------------------------------------------

class MultiArgs(ctypes.Structure):
    """``struct { char a; int *b; short c; }`` with C alignment."""

    _fields_ = [("a", ctypes.c_byte), ("b", ctypes.c_void_p), ("c", ctypes.c_short)]


def multiargs_expected(a: int, c: int, count: int) -> list[int]:
    return [a + c + i for i in range(count)]


@pytest.mark.parametrize("form", ["bytes", "bytearray", "memoryview", "structure"])
def test_argument_blob_with_c_alignment(host, basic, queue, alloc, form):
    groups, size = 3, 7
    out = alloc(4 * groups * size)
    ctypes.memset(out, 0, 4 * groups * size)
    packed = MultiArgs(5, out, 1000)
    assert ctypes.sizeof(packed) == 24
    # The same layout by hand: a at 0, b at 8, c at 16.
    raw = struct.pack("b7xPh6x", 5, out, 1000)
    assert bytes(packed) == raw
    args = {"bytes": raw, "bytearray": bytearray(raw), "memoryview": memoryview(raw), "structure": packed}[form]
    api.olLaunchKernel(queue, host, kernel(basic, "multiargs"), args, launch_args(groups, size))
    api.olSyncQueue(queue)
    assert list((ctypes.c_int32 * (groups * size)).from_address(out)) == multiargs_expected(5, 1000, groups * size)


@pytest.mark.parametrize("groups", [1, 4])
def test_argument_blob_is_copied_at_launch(host, basic, queue, alloc, groups):
    size = 8
    out = alloc(4 * groups * size)
    other = alloc(4 * groups * size)
    ctypes.memset(out, 0, 4 * groups * size)
    ctypes.memset(other, 0, 4 * groups * size)
    args = bytearray(bytes(MultiArgs(3, out, 40)))
    with Gate(queue) as gate:
        api.olLaunchKernel(queue, host, kernel(basic, "multiargs"), args, launch_args(groups, size))
        # Rewrite the caller's buffer while the launch is still waiting in the queue.
        args[:] = bytes(MultiArgs(100, other, 200))
        gate.open()
    api.olSyncQueue(queue)
    assert list((ctypes.c_int32 * (groups * size)).from_address(out)) == multiargs_expected(3, 40, groups * size)
    assert list((ctypes.c_int32 * (groups * size)).from_address(other)) == [0] * (groups * size)


def test_argument_blob_none(host, basic):
    api.olLaunchKernel(None, host, kernel(basic, "noargs"), None, launch_args(4))


def test_argument_blob_of_wrong_type(host, basic):
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, None, host, kernel(basic, "noargs"), 12345,
                 launch_args())


# ---- kernel faults -------------------------------------------------------------------------------

@pytest.mark.parametrize("groups", [1, 5])
def test_fault_in_a_synchronous_launch_raises_the_fault(host, basic, alloc, groups):
    with pytest.raises(OffloadError) as info:
        api.olLaunchKernel(None, host, kernel(basic, "fail_with"), struct.pack("i", 42), launch_args(groups))
    assert info.value.code not in (ErrorCode.QUEUE_ERROR, ErrorCode.SUCCESS)
    assert "42" in info.value.details
    assert "fail_with" in info.value.details
    # A zero return is no fault, and the runtime goes on working.
    api.olLaunchKernel(None, host, kernel(basic, "fail_with"), struct.pack("i", 0), launch_args(groups))
    out = alloc(4 * 8)
    api.olLaunchKernel(None, host, kernel(basic, "foo"), ptr_arg(out), launch_args(2, 4))
    assert list(u32_view(out, 8)) == list(range(8))


# ---- launch validation ---------------------------------------------------------------------------

def test_launch_size_validation(host, basic, queue, alloc):
    foo = kernel(basic, "foo")
    out = alloc(4 * 64)
    ctypes.memset(out, 0xFF, 4 * 64)
    args = ptr_arg(out)
    max_local = api.olGetDeviceInfo(host, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE)
    for q in (None, queue):
        expect_error(ErrorCode.INVALID_SIZE, api.olLaunchKernel, q, host, foo, args, launch_args(0, 1))
        expect_error(ErrorCode.INVALID_SIZE, api.olLaunchKernel, q, host, foo, args, launch((2, 0, 1), (1, 1, 1)))
        expect_error(ErrorCode.INVALID_SIZE, api.olLaunchKernel, q, host, foo, args, launch_args(1, 0))
        expect_error(ErrorCode.INVALID_SIZE, api.olLaunchKernel, q, host, foo, args, launch_args(1, 1, max_local + 1))
        expect_error(ErrorCode.INVALID_VALUE, api.olLaunchKernel, q, host, foo, args, launch((1, 1, 1), dims=4))
        expect_error(ErrorCode.INVALID_VALUE, api.olLaunchKernel, q, host, foo, args, launch((1, 1, 1), dims=0))
        expect_error(ErrorCode.INVALID_NULL_POINTER, api.olLaunchKernel, q, host, foo, args, None)
    api.olSyncQueue(queue)
    assert list(u32_view(out, 64)) == [0xFFFFFFFF] * 64, "a rejected launch ran"
    # The limit itself is fine.
    api.olLaunchKernel(None, host, kernel(basic, "localmem"), args, launch_args(2, 4, max_local))
    assert list(u32_view(out, 8)) == [0, 2, 4, 6] * 2


# ---- global variables ----------------------------------------------------------------------------

def test_global_written_by_one_kernel_is_read_by_another(host, basic, queue, alloc):
    out = alloc(4 * 64)
    ctypes.memset(out, 0xFF, 4 * 64)
    api.olLaunchKernel(queue, host, kernel(basic, "write"), None, launch_args(1, 64))
    api.olLaunchKernel(queue, host, kernel(basic, "read"), ptr_arg(out), launch_args(1, 64))
    api.olSyncQueue(queue)
    assert list(u32_view(out, 64)) == [2 * i for i in range(64)]


def test_memcpy_to_and_from_a_global(host, basic, queue, alloc):
    symbol = api.olGetSymbol(basic, "global", GLOBAL)
    address = api.olGetSymbolInfo(symbol, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert isinstance(address, int) and address
    values = (ctypes.c_uint32 * 64)(*(1000 + 3 * i for i in range(64)))
    api.olMemcpy(queue, address, host, ctypes.addressof(values), host, ctypes.sizeof(values))
    out = alloc(4 * 64)
    api.olLaunchKernel(queue, host, kernel(basic, "read"), ptr_arg(out), launch_args(1, 64))
    api.olSyncQueue(queue)
    assert list(u32_view(out, 64)) == list(values)
    api.olLaunchKernel(None, host, kernel(basic, "write"), None, launch_args(1, 64))
    back = (ctypes.c_uint32 * 64)()
    api.olMemcpy(None, ctypes.addressof(back), host, address, host, ctypes.sizeof(back))
    assert list(back) == [2 * i for i in range(64)]


def test_global_variable_info(host, basic):
    array = api.olGetSymbol(basic, "global", GLOBAL)
    scalar = api.olGetSymbol(basic, "scalar_global", GLOBAL)
    assert api.olGetSymbolInfo(array, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 256
    assert api.olGetSymbolInfo(scalar, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 4
    assert api.olGetSymbolInfo(scalar, SymbolInfo.KIND) == GLOBAL
    assert api.olGetSymbolInfo(scalar, SymbolInfo.NAME) == "scalar_global"
    scalar_address = api.olGetSymbolInfo(scalar, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert ctypes.c_int32.from_address(scalar_address).value == 7
    array_address = api.olGetSymbolInfo(array, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert not (array_address <= scalar_address < array_address + 256)
    foo = kernel(basic, "foo")
    expect_error(ErrorCode.SYMBOL_KIND, api.olGetSymbolInfo, foo, SymbolInfo.GLOBAL_VARIABLE_SIZE)
    expect_error(ErrorCode.SYMBOL_KIND, api.olGetSymbolInfo, foo, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)


def test_launching_a_global_is_symbol_kind(host, basic):
    symbol = api.olGetSymbol(basic, "global", GLOBAL)
    expect_error(ErrorCode.SYMBOL_KIND, api.olLaunchKernel, None, host, symbol, None, launch_args())


# ---- occupancy -----------------------------------------------------------------------------------

def test_optimal_occupancy_on_the_host_is_the_preferred_group_size(host, basic):
    """The host answers with the group size that runs best there, whatever the work-group memory."""
    foo = kernel(basic, "foo")
    size = api.olCalculateOptimalOccupancy(host, foo, 0)
    assert type(size) is int and 0 < size <= api.olGetDeviceInfo(host, DeviceInfo.MAX_WORK_GROUP_SIZE)
    assert api.olCalculateOptimalOccupancy(host, foo, 4096) == size


# ---- kernels that declare the size of their argument blob ------------------------------------------

class ScaleArgs(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("factor", ctypes.c_float)]


def test_a_declared_argument_size_refuses_a_wrong_or_missing_blob(host, queue, build) -> None:
    program = api.olCreateProgram(host, build("declared_args"))
    scale = kernel(program, "scale")
    data = api.olMemAlloc(host, AllocType.HOST, 64 * 4)
    values = (ctypes.c_float * 64).from_address(data)
    values[:] = list(range(64))
    good = bytes(ScaleArgs(data, 2.0))  # {float *data; float factor;}: 16 bytes, 12 of them parameters
    for q in (None, queue):
        for blob, given in ((None, "no argument blob"), (good[:8], "a 8-byte argument blob"),
                            (good + b"\0" * 8, f"a {len(good) + 8}-byte argument blob")):
            err = expect_error(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, q, host, scale, blob, launch_args(1, 64))
            assert (f"kernel 'scale' takes a {len(good)}-byte argument struct (aligned to 8 bytes); got {given}"
                    in err.details), err.details
    api.olSyncQueue(queue)
    assert values[10] == 10.0, "a refused launch did not run"
    api.olLaunchKernel(queue, host, scale, good, launch_args(1, 64))
    api.olSyncQueue(queue)
    assert values[10] == 20.0
    # Without the struct's tail padding (what a GPU takes, and what queue.launch packs): zero-extended.
    for _ in range(3):  # the hot path too
        api.olLaunchKernel(queue, host, scale, good[:12], launch_args(1, 64))
    api.olSyncQueue(queue)
    assert values[10] == 160.0
    nothing = kernel(program, "nothing")
    api.olLaunchKernel(None, host, nothing, None, launch_args())
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, None, host, nothing, b"\0" * 8, launch_args())
    api.olLaunchKernel(None, host, kernel(program, "undeclared"), b"\0" * 3, launch_args())  # nothing to check
    api.olMemFree(data)
