"""Pins down the behaviour of tests/cuda_standin, the test double for ``cuda.bindings.driver``.

The stand-in must follow the CUDA driver's documented behaviour closely enough that the CUDA
plugin's logic can be trusted to it. What both stand-ins simulate alike (stream order, host
functions, events, faults, injection) is pinned once for both in tests/test_standins.py; these
tests fix what only the CUDA driver has: cuInit and device queries, per-thread contexts and
primary context lifetime, memory calls and registered memory with their contexts, kernel
argument passing (extra and kernelParams), launch limits and module parsing (PTX, cubin, fatbin),
and the signatures of the real bindings.
"""

from __future__ import annotations

import ctypes
import inspect
import struct
import threading
from collections.abc import Iterator
from typing import Any

import cuda_standin as standin
import pytest
import standin_fixtures
from cuda_standin import DeviceSpec
from standin_fixtures import WAIT, Gate, code, ok, run_alone

PTX = b"""
.version 8.0
.target sm_90
.address_size 64

// .entry commented_out(  is not a kernel
.visible .global .align 4 .u32 counter = 7;
.visible .global .align 8 .b8 table[24];
.global .align 4 .f32 scale = 0f3F800000;
.const .align 4 .u32 limits[3] = {1, 2, 3};
.extern .global .align 4 .u32 elsewhere;

.visible .entry add_one(
    .param .u64 .ptr .global .align 1 add_one_param_0,
    .param .u32 add_one_param_1
)
.maxntid 128, 1, 1
{
    ret;
}

.visible .entry packed(
    .param .align 8 .b8 packed_param_0[16],
    .param .u8 packed_param_1,
    .param .f64 packed_param_2
)
{
    ld.global.u32 %r1, [counter];
    ret;
}
"""


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in, installed as cuda.bindings.driver, with cuInit done; shut down afterwards."""
    standin.install(monkeypatch)
    from cuda.bindings import driver as installed  # type: ignore[import-untyped]

    assert installed is standin.driver
    ok(installed.cuInit(0))
    yield installed
    standin.shutdown()


def retain(driver: Any, ordinal: int = 0) -> Any:
    """Retain device ``ordinal``'s primary context and make it current on this thread."""
    ctx = ok(driver.cuDevicePrimaryCtxRetain(ok(driver.cuDeviceGet(ordinal))))
    ok(driver.cuCtxSetCurrent(ctx))
    return ctx


@pytest.fixture
def ctx(driver: Any) -> Any:
    return retain(driver)


def extra_array(blob: bytes) -> tuple[Any, ...]:
    """A CU_LAUNCH_PARAM_BUFFER_* ``extra`` array for ``blob``: (array, blob buffer, size)."""
    return standin_fixtures.extra_array(blob, 0)


def load(driver: Any, image: bytes, log_size: int = 0) -> Any:
    options = [driver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, driver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    log = bytes(bytearray(log_size)) if log_size else b""
    result = driver.cuModuleLoadDataEx(image, 2 if log_size else 0, options, [log, log_size])
    return result, log


# ---- initialisation, devices, errors ---------------------------------------------------------------

def test_calls_need_cuinit_and_devices_describe_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    d = standin.install(monkeypatch, devices=[DeviceSpec(name="Alpha", compute_capability=(8, 6),
                                                         attributes={"MULTIPROCESSOR_COUNT": 84}), DeviceSpec()])
    assert code(d.cuDeviceGetCount()) == "CUDA_ERROR_NOT_INITIALIZED"
    assert ok(d.cuDriverGetVersion()) == 12040  # allowed before cuInit
    assert code(d.cuInit(1)) == "CUDA_ERROR_INVALID_VALUE"
    ok(d.cuInit(0))
    assert ok(d.cuDeviceGetCount()) == 2
    dev = ok(d.cuDeviceGet(0))
    assert isinstance(dev, d.CUdevice) and int(dev) == 0
    name = ok(d.cuDeviceGetName(32, dev))
    assert len(name) == 32 and name.split(b"\0")[0] == b"Alpha"
    assert len(ok(d.cuDeviceGetUuid(dev)).bytes) == 16
    assert ok(d.cuDeviceGetUuid(0)).bytes != ok(d.cuDeviceGetUuid(1)).bytes
    attr = d.CUdevice_attribute
    assert ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) == 8
    assert ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) == 6
    assert ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) == 84
    assert ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1)) == 32
    assert ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 1)) == 48 * 1024
    assert ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_INTEGRATED, 1)) == 0
    assert ok(d.cuDeviceTotalMem(dev)) == DeviceSpec().total_memory
    assert d.cuDeviceGet(2) == (d.CUresult.CUDA_ERROR_INVALID_DEVICE, None)
    standin.shutdown()


def test_init_failure_and_missing_library(monkeypatch: pytest.MonkeyPatch) -> None:
    d = standin.install(monkeypatch, init_error=standin.driver.CUresult.CUDA_ERROR_NO_DEVICE)
    assert code(d.cuInit(0)) == "CUDA_ERROR_NO_DEVICE"
    assert code(d.cuDeviceGetCount()) == "CUDA_ERROR_NOT_INITIALIZED"
    standin.reset(library_missing=True)
    with pytest.raises(RuntimeError) as info:
        d.cuInit(0)
    assert type(info.value).__name__ == "DynamicLibNotFoundError"
    standin.reset(devices=0)
    assert code(d.cuInit(0)) == "CUDA_ERROR_NO_DEVICE"


def test_failures_return_none_for_each_output_and_errors_have_names(driver: Any, ctx: Any) -> None:
    assert driver.cuModuleGetGlobal(0x1234, b"x") == (driver.CUresult.CUDA_ERROR_INVALID_HANDLE, None, None)
    assert driver.cuStreamCreate(8) == (driver.CUresult.CUDA_ERROR_INVALID_VALUE, None)
    assert ok(driver.cuGetErrorName(driver.CUresult.CUDA_ERROR_NOT_READY)) == b"CUDA_ERROR_NOT_READY"
    assert ok(driver.cuGetErrorString(700)) == b"an illegal memory access was encountered"
    assert ok(driver.cuGetErrorString(driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY)) == b"out of memory"
    with pytest.raises(AttributeError, match="does not simulate cuMemAllocAsync"):
        driver.cuMemAllocAsync  # noqa: B018


# ---- contexts --------------------------------------------------------------------------------------

def test_current_context_is_per_thread(driver: Any) -> None:
    assert code(driver.cuMemAlloc(64)) == "CUDA_ERROR_INVALID_CONTEXT"
    context = retain(driver)
    ok(driver.cuMemAlloc(64))
    seen: dict[str, Any] = {}

    def other() -> None:
        seen["before"] = code(driver.cuMemAlloc(64)), int(ok(driver.cuCtxGetCurrent()))
        ok(driver.cuCtxSetCurrent(context))
        seen["after"] = code(driver.cuStreamCreate(0))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(WAIT)
    assert seen == {"before": ("CUDA_ERROR_INVALID_CONTEXT", 0), "after": "CUDA_SUCCESS"}
    assert ok(driver.cuCtxGetCurrent()) == context


def test_primary_context_lifetime(driver: Any) -> None:
    dev = ok(driver.cuDeviceGet(1))
    assert ok(driver.cuDevicePrimaryCtxGetState(dev)) == (0, 0)
    ok(driver.cuDevicePrimaryCtxSetFlags(dev, driver.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC))
    first = retain(driver, 1)
    assert ok(driver.cuDevicePrimaryCtxGetState(dev)) == (4, 1)
    again = ok(driver.cuDevicePrimaryCtxRetain(dev))
    assert again == first
    stream = ok(driver.cuStreamCreate(1))
    pointer = ok(driver.cuMemAlloc(16))
    ok(driver.cuDevicePrimaryCtxRelease(dev))
    ok(driver.cuStreamQuery(stream))  # still retained once
    ok(driver.cuDevicePrimaryCtxRelease(dev))
    assert code(driver.cuDevicePrimaryCtxRelease(dev)) == "CUDA_ERROR_INVALID_CONTEXT"
    assert ok(driver.cuDevicePrimaryCtxGetState(dev))[1] == 0
    assert code(driver.cuStreamQuery(stream)) == "CUDA_ERROR_INVALID_CONTEXT"  # current but inactive
    assert retain(driver, 1) == first  # the primary context keeps its handle
    assert code(driver.cuStreamQuery(stream)) == "CUDA_ERROR_INVALID_HANDLE"  # destroyed with the context
    assert code(driver.cuMemFree(pointer)) == "CUDA_ERROR_INVALID_VALUE"


def test_peer_access(monkeypatch: pytest.MonkeyPatch) -> None:
    d = standin.install(monkeypatch, devices=[DeviceSpec(), DeviceSpec(), DeviceSpec(peers=set())])
    ok(d.cuInit(0))
    contexts = [retain(d, i) for i in (2, 1, 0)][::-1]
    assert ok(d.cuDeviceCanAccessPeer(0, 1)) == 1
    assert ok(d.cuDeviceCanAccessPeer(0, 0)) == 0
    assert ok(d.cuDeviceCanAccessPeer(2, 0)) == 0
    ok(d.cuCtxEnablePeerAccess(contexts[1], 0))
    assert code(d.cuCtxEnablePeerAccess(contexts[1], 0)) == "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"
    assert code(d.cuCtxEnablePeerAccess(contexts[0], 0)) == "CUDA_ERROR_INVALID_CONTEXT"
    assert code(d.cuCtxEnablePeerAccess(contexts[2], 1)) == "CUDA_ERROR_INVALID_VALUE"
    ok(d.cuCtxSetCurrent(contexts[2]))
    assert code(d.cuCtxEnablePeerAccess(contexts[0], 0)) == "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"
    standin.shutdown()


# ---- memory ----------------------------------------------------------------------------------------

def test_allocations_are_real_tracked_and_budgeted(monkeypatch: pytest.MonkeyPatch) -> None:
    d = standin.install(monkeypatch, devices=[DeviceSpec(memory_budget=1 << 20)])
    ok(d.cuInit(0))
    retain(d)
    device_memory = ok(d.cuMemAlloc(1 << 19))
    assert isinstance(device_memory, d.CUdeviceptr) and int(device_memory) % 256 == 0
    standin.write(int(device_memory), b"abc")
    assert standin.read(int(device_memory), 3) == b"abc"
    assert code(d.cuMemAlloc((1 << 19) + 1)) == "CUDA_ERROR_OUT_OF_MEMORY"
    managed = ok(d.cuMemAllocManaged(1 << 18, d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL))
    assert standin.state().devices[0].used == (1 << 19) + (1 << 18)
    pinned = ok(d.cuMemAllocHost(4 << 20))  # pinned host memory does not use the device budget
    assert isinstance(pinned, int)
    assert code(d.cuMemAlloc(0)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(d.cuMemAllocManaged(16, 4)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(d.cuMemFree(pinned)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(d.cuMemFreeHost(device_memory)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(d.cuMemFree(int(device_memory) + 8)) == "CUDA_ERROR_INVALID_VALUE"
    ok(d.cuMemFree(device_memory))
    assert code(d.cuMemFree(device_memory)) == "CUDA_ERROR_INVALID_VALUE"
    ok(d.cuMemFree(int(managed)))
    ok(d.cuMemFreeHost(pinned))
    assert standin.state().devices[0].used == 0
    standin.shutdown()


def test_copies_and_fills_move_data(driver: Any) -> None:
    ctx1, ctx0 = retain(driver, 1), retain(driver, 0)
    stream = ok(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
    a, b = ok(driver.cuMemAlloc(64)), ok(driver.cuMemAlloc(64))
    source = ctypes.create_string_buffer(bytes(range(64)), 64)
    ok(driver.cuMemcpyHtoDAsync(a, source, 64, stream))
    ok(driver.cuMemcpyDtoDAsync(b, a, 32, stream))
    ok(driver.cuMemsetD8Async(int(b) + 32, 0xEE, 8, stream))
    ok(driver.cuMemsetD16Async(int(b) + 40, 0x1234, 2, int(stream)))
    ok(driver.cuMemsetD32Async(int(b) + 44, 0xA1B2C3D4, 1, stream))
    target = bytearray(64)
    ok(driver.cuMemcpyDtoHAsync(target, b, 48, stream))
    ok(driver.cuStreamSynchronize(stream))
    assert target[:32] == bytes(range(32))
    assert target[32:48] == b"\xee" * 8 + b"\x34\x12\x34\x12" + b"\xd4\xc3\xb2\xa1"
    # A 3-byte pattern as three strided lanes (pitch 3, one element per row, 5 rows).
    for lane, value in enumerate(b"xyz"):
        ok(driver.cuMemsetD2D8Async(int(a) + lane, 3, value, 1, 5, stream))
    ok(driver.cuStreamSynchronize(stream))
    assert standin.read(int(a), 16) == b"xyz" * 5 + bytes([15])
    ok(driver.cuMemsetD2D32Async(a, 8, 0x01010101, 1, 2, stream))
    ok(driver.cuStreamSynchronize(stream))
    assert standin.read(int(a), 16)[:12] == b"\x01" * 4 + b"yzxy" + b"\x01" * 4
    ok(driver.cuCtxSetCurrent(ctx1))
    peer = ok(driver.cuMemAlloc(16))
    ok(driver.cuCtxSetCurrent(ctx0))
    ok(driver.cuMemcpyPeerAsync(peer, ctx1, a, ctx0, 16, stream))
    ok(driver.cuStreamSynchronize(stream))
    assert standin.read(int(peer), 16) == standin.read(int(a), 16)
    ok(driver.cuMemcpyHtoD(a, b"synchronous", 11))
    back = ctypes.create_string_buffer(11)
    ok(driver.cuMemcpyDtoH(back, a, 11))
    assert back.raw == b"synchronous"
    # Invalid ranges and alignments are refused when the call is made.
    assert code(driver.cuMemsetD32Async(int(a) + 2, 0, 1, stream)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(driver.cuMemcpyHtoDAsync(int(a) + 60, source, 8, stream)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(driver.cuMemcpyDtoHAsync(target, 0x10, 8, stream)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(driver.cuMemsetD2D8Async(a, 1, 0, 2, 2, stream)) == "CUDA_ERROR_INVALID_VALUE"  # pitch < width
    with pytest.raises(OverflowError):  # as in the bindings: the value is an unsigned char
        driver.cuMemsetD8Async(a, 300, 1, stream)


def test_registered_host_memory_is_tracked_and_refused_as_the_driver_documents(driver: Any) -> None:
    ctx1, ctx0 = retain(driver, 1), retain(driver, 0)
    portable_mapped = driver.CU_MEMHOSTREGISTER_PORTABLE | driver.CU_MEMHOSTREGISTER_DEVICEMAP
    buffer = ctypes.create_string_buffer(bytes(range(256)), 4096)
    host = ctypes.addressof(buffer)
    ok(driver.cuMemHostRegister(host, 4096, portable_mapped))
    registration = standin.state().registered[host]
    assert (registration.size, registration.flags, registration.ctx.handle) == (4096, 3, int(ctx0))
    assert int(ok(driver.cuMemHostGetDevicePointer(host, 0))) == host  # every device uses host pointers
    assert int(ok(driver.cuMemHostGetDevicePointer(host + 100, 0))) == host + 100
    for start, size in ((host, 4096), (host + 64, 8), (host - 64, 128), (host + 4095, 10)):
        assert code(driver.cuMemHostRegister(start, size, 0)) == "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"
    pinned = ok(driver.cuMemAllocHost(64))
    assert code(driver.cuMemHostRegister(pinned + 8, 8, 0)) == "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"
    assert int(ok(driver.cuMemHostGetDevicePointer(pinned + 8, 0))) == pinned + 8
    other = ctypes.create_string_buffer(64)
    for args in ((0, 64, 0), (ctypes.addressof(other), 0, 0), (ctypes.addressof(other), 64, 0x10)):
        assert code(driver.cuMemHostRegister(*args)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(driver.cuMemHostGetDevicePointer(ctypes.addressof(other), 0)) == "CUDA_ERROR_INVALID_VALUE"
    assert driver.cuMemHostGetDevicePointer(host, 1) == (driver.CUresult.CUDA_ERROR_INVALID_VALUE, None)
    # Device-side copies and memsets take registered memory as they take pinned allocations.
    stream = ok(driver.cuStreamCreate(1))
    device = ok(driver.cuMemAlloc(64))
    ok(driver.cuMemcpyDtoDAsync(device, host, 64, stream))
    ok(driver.cuMemsetD8Async(host + 64, 0xAB, 4, stream))
    ok(driver.cuStreamSynchronize(stream))
    assert standin.read(int(device), 64) == bytes(range(64)) and buffer.raw[64:68] == b"\xab" * 4
    assert code(driver.cuMemsetD8Async(host + 4090, 0, 8, stream)) == "CUDA_ERROR_INVALID_VALUE"  # runs past it
    # Without DEVICEMAP there is no device address; without PORTABLE, none in another context.
    ok(driver.cuMemHostRegister(ctypes.addressof(other), 32, driver.CU_MEMHOSTREGISTER_PORTABLE))
    assert code(driver.cuMemHostGetDevicePointer(ctypes.addressof(other), 0)) == "CUDA_ERROR_INVALID_VALUE"
    ok(driver.cuMemHostRegister(ctypes.addressof(other) + 32, 32, driver.CU_MEMHOSTREGISTER_DEVICEMAP))
    ok(driver.cuMemHostGetDevicePointer(ctypes.addressof(other) + 32, 0))
    ok(driver.cuCtxSetCurrent(ctx1))
    assert code(driver.cuMemHostGetDevicePointer(ctypes.addressof(other) + 32, 0)) == "CUDA_ERROR_INVALID_VALUE"
    assert int(ok(driver.cuMemHostGetDevicePointer(host + 8, 0))) == host + 8  # portable
    # Unregistering takes the base address, from any context.
    for address in (host + 8, pinned, ctypes.addressof(other) + 8):
        assert code(driver.cuMemHostUnregister(address)) == "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"
    ok(driver.cuMemHostUnregister(host))
    assert host not in standin.state().registered
    assert code(driver.cuMemHostUnregister(host)) == "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"
    assert code(driver.cuMemHostGetDevicePointer(host, 0)) == "CUDA_ERROR_INVALID_VALUE"
    ok(driver.cuMemHostRegister(host + 64, 64, 0))  # pageable again: it can be registered anew (in ctx1)
    # The last release of a primary context takes what was registered in it along.
    ok(driver.cuDevicePrimaryCtxRelease(0))
    assert list(standin.state().registered) == [host + 64]


def test_registered_memory_has_device_addresses_of_its_own_where_a_device_cannot_use_host_pointers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As cuMemHostRegister documents: if any device lacks CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
    device addresses differ from host addresses, for every device."""
    no_host_pointers = DeviceSpec(attributes={"CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 0})
    d = standin.install(monkeypatch, devices=[DeviceSpec(), no_host_pointers])
    ok(d.cuInit(0))
    retain(d)
    buffer = ctypes.create_string_buffer(bytes(range(128)), 128)
    host = ctypes.addressof(buffer)
    ok(d.cuMemHostRegister(host, 128, d.CU_MEMHOSTREGISTER_PORTABLE | d.CU_MEMHOSTREGISTER_DEVICEMAP))
    alias = int(ok(d.cuMemHostGetDevicePointer(host, 0)))
    assert alias != host and alias % 4096 == host % 4096
    assert int(ok(d.cuMemHostGetDevicePointer(host + 10, 0))) == alias + 10
    stream = ok(d.cuStreamCreate(1))
    device = ok(d.cuMemAlloc(128))
    ok(d.cuMemcpyDtoDAsync(device, alias, 128, stream))  # the device address reads the host memory
    ok(d.cuMemsetD8Async(alias + 120, 0xCD, 8, stream))  # and writes it
    ok(d.cuStreamSynchronize(stream))
    assert standin.read(int(device), 120) == bytes(range(120)) and buffer.raw[120:] == b"\xcd" * 8
    assert standin.read(alias, 4) == bytes(range(4))  # the test helpers translate it too
    assert code(d.cuMemsetD8Async(alias + 120, 0, 9, stream)) == "CUDA_ERROR_INVALID_VALUE"
    ok(d.cuMemHostUnregister(host))
    assert standin.state().aliases == {}
    assert code(d.cuMemcpyDtoDAsync(device, alias, 8, stream)) == "CUDA_ERROR_INVALID_VALUE"
    standin.shutdown()


# ---- kernels and launches --------------------------------------------------------------------------

def test_launch_copies_the_extra_blob_and_checks_its_arguments(driver: Any, ctx: Any) -> None:
    seen: list[tuple[Any, ...]] = []
    standin.register_kernel("add_one", lambda *args: seen.append(args))
    module = ok(load(driver, PTX + b"\0")[0])
    function = ok(driver.cuModuleGetFunction(module, b"add_one"))
    stream = ok(driver.cuStreamCreate(1))
    gate = Gate()
    gate.launch(driver, stream)
    array, buffer, _size = extra_array(struct.pack("<QI", 0x1122334455667788, 9))
    ok(driver.cuLaunchKernel(function, 2, 3, 4, 32, 2, 1, 1024, stream, None, ctypes.addressof(array)))
    ctypes.memset(buffer, 0, 12)  # the caller may reuse its buffer once the launch returned
    gate.opened.set()
    ok(driver.cuStreamSynchronize(stream))
    assert seen == [(struct.pack("<QI", 0x1122334455667788, 9), (2, 3, 4), (32, 2, 1), 1024, 0)]
    address = ctypes.addressof(array)
    both = driver.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, address, address)
    assert code(both) == "CUDA_ERROR_INVALID_VALUE"
    bad = (ctypes.c_void_p * 3)(7, 0, 0)
    assert code(driver.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, None,
                                      ctypes.addressof(bad))) == "CUDA_ERROR_INVALID_VALUE"
    # kernelParams: an array of pointers to each argument, packed as the PTX parameter list says.
    packed = ok(driver.cuModuleGetFunction(module, b"packed"))
    standin.register_kernel("packed", lambda *args: seen.append(args))
    first, second, third = ctypes.create_string_buffer(b"A" * 16, 16), ctypes.c_uint8(5), ctypes.c_double(2.5)
    pointers = (ctypes.c_void_p * 3)(*(ctypes.addressof(x) for x in (first, second, third)))
    ok(driver.cuLaunchKernel(packed, 1, 1, 1, 1, 1, 1, 0, stream, ctypes.addressof(pointers), 0))
    ok(driver.cuLaunchKernel(packed, 1, 1, 1, 1, 1, 1, 0, stream,
                             ((7, 2.5), (ctypes.c_uint32, ctypes.c_double)), 0))
    ok(driver.cuStreamSynchronize(stream))
    assert seen[1][0] == b"A" * 16 + b"\x05" + bytes(7) + struct.pack("<d", 2.5)
    assert seen[2][0] == struct.pack("<I", 7) + bytes(4) + struct.pack("<d", 2.5)


def test_launch_limits_and_function_attributes(driver: Any) -> None:
    retain(driver, 1)
    foreign = ok(driver.cuModuleGetFunction(ok(load(driver, PTX + b"\0")[0]), b"packed"))
    retain(driver, 0)
    module = ok(load(driver, PTX + b"\0")[0])
    add_one = ok(driver.cuModuleGetFunction(module, b"add_one"))
    packed = ok(driver.cuModuleGetFunction(module, b"packed"))
    stream = ok(driver.cuStreamCreate(1))
    attribute = driver.CUfunction_attribute

    def launch(function: Any, block: int = 1, grid: int = 1, shared: int = 0, on: Any = stream) -> str:
        return code(driver.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, shared, on, None, 0))

    assert ok(driver.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add_one)) == 128
    assert ok(driver.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, packed)) == 1024
    assert launch(add_one, block=256) == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"  # above its .maxntid
    assert launch(packed, block=2048) == "CUDA_ERROR_INVALID_VALUE"
    assert code(driver.cuLaunchKernel(packed, 1, 1, 1, 1, 1, 65, 0, stream, None, 0)) == "CUDA_ERROR_INVALID_VALUE"
    assert launch(packed, grid=0) == "CUDA_ERROR_INVALID_VALUE"
    assert launch(packed, shared=64 * 1024) == "CUDA_ERROR_INVALID_VALUE"
    dynamic = attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert code(driver.cuFuncSetAttribute(packed, dynamic, 300 * 1024)) == "CUDA_ERROR_INVALID_VALUE"
    assert code(driver.cuFuncSetAttribute(packed, attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, 1)) == \
        "CUDA_ERROR_INVALID_VALUE"
    ok(driver.cuFuncSetAttribute(packed, dynamic, 64 * 1024))
    assert ok(driver.cuFuncGetAttribute(dynamic, packed)) == 64 * 1024
    assert launch(packed, shared=64 * 1024) == "CUDA_SUCCESS"
    assert launch(foreign) == "CUDA_ERROR_INVALID_HANDLE"  # a function of another context
    grid, block = ok(driver.cuOccupancyMaxPotentialBlockSize(add_one, None, 0, 0))
    assert block == 128 and grid == 132 * 16
    assert ok(driver.cuOccupancyMaxPotentialBlockSize(packed, None, 0, 200))[1] == 192
    ok(driver.cuStreamSynchronize(stream))


SAXPY_MULTIARGS = b"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry saxpy(
    .param .f32 saxpy_param_0,
    .param .u64 .ptr .global .align 1 saxpy_param_1,
    .param .u64 .ptr .global .align 1 saxpy_param_2,
    .param .u32 saxpy_param_3
)
{
    ret;
}

.visible .entry multiargs(
    .param .u8 multiargs_param_0,
    .param .u64 .ptr .global .align 1 multiargs_param_1,
    .param .u16 multiargs_param_2
)
{
    ret;
}

.visible .entry noargs()
{
    ret;
}
"""


def test_param_info_gives_each_parameter_as_the_h100_did(driver: Any, ctx: Any) -> None:
    module = ok(load(driver, SAXPY_MULTIARGS + b"\0")[0])
    expected = {b"saxpy": [(0, 4), (8, 8), (16, 8), (24, 4)], b"multiargs": [(0, 1), (8, 8), (16, 2)], b"noargs": []}
    for name, layout in expected.items():
        function = ok(driver.cuModuleGetFunction(module, name))
        assert [ok(driver.cuFuncGetParamInfo(function, i)) for i in range(len(layout))] == layout
        assert driver.cuFuncGetParamInfo(function, len(layout)) == (driver.CUresult.CUDA_ERROR_INVALID_VALUE, None,
                                                                    None)
    # A cubin tells the stand-in no layout: param_sizes does, or the call is refused with a reason.
    cubin = b"\x7fELF\x02\x01\x01" + bytes(11) + struct.pack("<H", 190) + bytes(44)
    standin.set_binary_symbols(kernels=["opaque", "described"])
    standin.register_kernel("described", lambda *_: None, param_sizes=[(1, 1), (8, 8), (2, 2)])
    binary = ok(load(driver, cubin)[0])
    opaque = ok(driver.cuModuleGetFunction(binary, b"opaque"))
    assert code(driver.cuFuncGetParamInfo(opaque, 0)) == "CUDA_ERROR_NOT_SUPPORTED"
    assert "param_sizes" in standin.diagnostics[-1]
    described = ok(driver.cuModuleGetFunction(binary, b"described"))
    assert [ok(driver.cuFuncGetParamInfo(described, i)) for i in range(3)] == [(0, 1), (8, 8), (16, 2)]


def test_multiargs_launches_with_its_parameter_size_and_not_the_padded_struct(driver: Any, ctx: Any) -> None:
    """The H100: multiargs(char, int*, short) launches with 18 bytes, fails at the call with 24
    (the struct's size) with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, and a short buffer launches."""
    seen: list[bytes] = []
    standin.register_kernel("multiargs", lambda params, *_: seen.append(params))
    function = ok(driver.cuModuleGetFunction(ok(load(driver, SAXPY_MULTIARGS + b"\0")[0]), b"multiargs"))
    stream = ok(driver.cuStreamCreate(1))
    blob = struct.pack("<b7xQh6x", -3, 0x1000, 7)  # the C struct: 24 bytes with its tail padding

    def launch(size: int, block: int = 1) -> str:
        array, *_keep = extra_array(blob[:size])
        return code(driver.cuLaunchKernel(function, 1, 1, 1, block, 1, 1, 0, stream, None, ctypes.addressof(array)))

    assert [launch(24, block) for block in (1, 32, 1024)] == ["CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"] * 3
    assert launch(18) == "CUDA_SUCCESS"
    assert launch(16) == "CUDA_SUCCESS"
    ok(driver.cuStreamSynchronize(stream))
    assert seen == [blob[:18], blob[:16] + b"\xde\xad"]  # bytes 16-17 read past the buffer: GARBAGE[16 % 4:]
    assert standin.costs().launches == 2  # the refused launches were never accepted


def test_pointer_attributes_describe_driver_memory(driver: Any) -> None:
    retain(driver, 1)
    on_one = ok(driver.cuMemAlloc(64))
    ctx0 = retain(driver, 0)
    attribute = driver.CUpointer_attribute
    device, pinned = ok(driver.cuMemAlloc(64)), ok(driver.cuMemAllocHost(64))
    managed = ok(driver.cuMemAllocManaged(64, 1))
    buffer, unmapped = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64)
    ok(driver.cuMemHostRegister(ctypes.addressof(buffer), 64, driver.CU_MEMHOSTREGISTER_DEVICEMAP))
    ok(driver.cuMemHostRegister(ctypes.addressof(unmapped), 64, 0))
    registered = ctypes.addressof(buffer)

    def query(name: str, pointer: Any) -> Any:
        result = driver.cuPointerGetAttribute(getattr(attribute, f"CU_POINTER_ATTRIBUTE_{name}"), pointer)
        return result[1] if int(result[0]) == 0 else code(result)

    host_type, device_type = int(driver.CUmemorytype.CU_MEMORYTYPE_HOST), int(driver.CUmemorytype.CU_MEMORYTYPE_DEVICE)
    rows = {  # pointer: (MEMORY_TYPE, HOST_POINTER, DEVICE_POINTER, IS_MANAGED, DEVICE_ORDINAL)
        int(device) + 8: (device_type, "CUDA_ERROR_INVALID_VALUE", int(device) + 8, False, 0),
        int(pinned): (host_type, int(pinned), int(pinned), False, 0),
        int(managed) + 1: (device_type, int(managed) + 1, int(managed) + 1, True, 0),
        registered + 4: (host_type, registered + 4, registered + 4, False, 0),
        ctypes.addressof(unmapped): (host_type, ctypes.addressof(unmapped), "CUDA_ERROR_INVALID_VALUE", False, 0),
        int(on_one): (device_type, "CUDA_ERROR_INVALID_VALUE", int(on_one), False, 1),
    }
    for pointer, expected in rows.items():
        found = tuple(query(name, pointer) for name in ("MEMORY_TYPE", "HOST_POINTER", "DEVICE_POINTER", "IS_MANAGED",
                                                          "DEVICE_ORDINAL"))
        assert tuple(int(v) if isinstance(v, driver.CUdeviceptr) else v for v in found) == expected, hex(pointer)
        assert isinstance(query("IS_MANAGED", pointer), bool)
    assert query("CONTEXT", device) == ctx0 and isinstance(query("CONTEXT", device), driver.CUcontext)
    assert query("CONTEXT", registered) == ctx0
    assert int(query("CONTEXT", on_one)) != int(ctx0)
    assert isinstance(query("DEVICE_POINTER", device), driver.CUdeviceptr)
    # Pageable host memory the driver does not know: CUDA_ERROR_INVALID_VALUE, as CUDA documents.
    pageable = ctypes.create_string_buffer(64)
    for name in ("CONTEXT", "MEMORY_TYPE", "DEVICE_POINTER", "HOST_POINTER", "DEVICE_ORDINAL", "IS_MANAGED"):
        assert driver.cuPointerGetAttribute(getattr(attribute, f"CU_POINTER_ATTRIBUTE_{name}"),
                                            ctypes.addressof(pageable)) == (driver.CUresult.CUDA_ERROR_INVALID_VALUE,
                                                                            None)
    ok(driver.cuMemFree(device))
    assert query("MEMORY_TYPE", device) == "CUDA_ERROR_INVALID_VALUE"  # freed: unknown again


# ---- modules ---------------------------------------------------------------------------------------

def test_ptx_modules_give_kernels_and_initialised_globals(driver: Any, ctx: Any) -> None:
    module = ok(load(driver, PTX + b"\0")[0])
    for kernel in (b"add_one", b"packed"):
        assert isinstance(ok(driver.cuModuleGetFunction(module, kernel)), driver.CUfunction)
    assert code(driver.cuModuleGetFunction(module, b"commented_out")) == "CUDA_ERROR_NOT_FOUND"
    with pytest.raises(TypeError):
        driver.cuModuleGetFunction(module, "add_one")
    expected = {b"counter": (4, struct.pack("<I", 7)), b"table": (24, bytes(24)),
                b"scale": (4, struct.pack("<f", 1.0)), b"limits": (12, struct.pack("<3I", 1, 2, 3))}
    for name, (size, content) in expected.items():
        pointer, found_size = ok(driver.cuModuleGetGlobal(module, name))
        assert found_size == size and standin.read(int(pointer), size) == content
    assert code(driver.cuModuleGetGlobal(module, b"elsewhere")) == "CUDA_ERROR_NOT_FOUND"
    second = ok(load(driver, PTX + b"\0")[0])  # each module has its own globals
    assert int(ok(driver.cuModuleGetGlobal(second, b"counter"))[0]) != int(ok(driver.cuModuleGetGlobal(module,
                                                                                                   b"counter"))[0])
    used = standin.state().devices[0].used
    ok(driver.cuModuleUnload(module))
    assert standin.state().devices[0].used == used - 44
    assert code(driver.cuModuleGetFunction(module, b"add_one")) == "CUDA_ERROR_INVALID_HANDLE"


def test_rejected_images_and_the_jit_log(driver: Any, ctx: Any) -> None:
    result, log = load(driver, PTX + b"// standin-invalid\n\0", log_size=256)
    assert code(result) == "CUDA_ERROR_INVALID_PTX" and result[1] is None
    assert log.split(b"\0")[0] == b"ptxas fatal : standin: invalid PTX"
    assert code(load(driver, PTX)[0]) == "CUDA_ERROR_INVALID_PTX"  # not NUL-terminated
    newer = PTX.replace(b"sm_90", b"sm_100") + b"\0"
    result, log = load(driver, newer, log_size=128)
    assert code(result) == "CUDA_ERROR_INVALID_PTX" and b"sm_100" in log
    assert code(load(driver, b"not an image\0")[0]) == "CUDA_ERROR_INVALID_IMAGE"
    x86_elf = b"\x7fELF\x02\x01\x01" + bytes(11) + struct.pack("<H", 62) + bytes(44)
    assert code(load(driver, x86_elf)[0]) == "CUDA_ERROR_INVALID_IMAGE"
    with pytest.raises(RuntimeError, match="too small"):
        driver.cuModuleLoadDataEx(PTX + b"\0", 3, [], [])


def test_cubin_and_fatbin_images_take_names_from_the_control(driver: Any, ctx: Any) -> None:
    cubin = b"\x7fELF\x02\x01\x01" + bytes(11) + struct.pack("<H", 190) + bytes(44)
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 8) + bytes(8)
    standin.set_binary_symbols(kernels=["vector_add"], globals={"state": 8})
    for image in (cubin, fatbin):
        module = ok(load(driver, image)[0])
        ok(driver.cuModuleGetFunction(module, b"vector_add"))
        assert ok(driver.cuModuleGetGlobal(module, b"state"))[1] == 8
    raw = ctypes.create_string_buffer(fatbin, len(fatbin))
    ok(driver.cuModuleLoadDataEx(ctypes.addressof(raw), 0, None, None))  # an image given by address


def test_works_without_cuda_bindings_installed() -> None:
    """Without the package, look-alike enums and handles stand in for the real ones."""
    run_alone("""
        import importlib, sys
        sys.modules["cuda"] = None  # cuda-bindings is not installed
        import pytest
        import cuda_standin as standin
        monkeypatch = pytest.MonkeyPatch()
        standin.install(monkeypatch)
        driver = importlib.import_module("cuda.bindings.driver")
        assert driver is standin.driver and standin._types.real is None
        assert driver.cuInit(0) == (driver.CUresult.CUDA_SUCCESS,)
        context = driver.cuDevicePrimaryCtxRetain(driver.CUdevice(1))[1]
        assert driver.cuCtxSetCurrent(context)[0] == 0 and int(driver.cuCtxGetCurrent()[1]) == int(context)
        stream = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)[1]
        assert driver.cuStreamSynchronize(stream)[0] == 0
        assert len(driver.cuDeviceGetUuid(0)[1].bytes) == 16
        assert repr(driver.cuMemAlloc(0)[0]) == "<CUresult.CUDA_ERROR_INVALID_VALUE: 1>"
        standin.shutdown()
        monkeypatch.undo()
        print("fallback ok")
    """, "fallback ok")


def test_every_driver_function_has_the_real_parameters() -> None:
    """Each ``cu*`` function of the stand-in takes the real bindings' parameters, by name and in order."""
    real = standin._types.real
    if real is None:
        pytest.skip("the real cuda-bindings (cuda.bindings.driver) is not importable: nothing to compare with")
    functions = {name: fn for name, fn in vars(standin.driver).items()
                 if name.startswith("cu") and callable(getattr(fn, "__wrapped__", None))}
    assert {"cuMemHostRegister", "cuMemHostUnregister", "cuMemHostGetDevicePointer", "cuLaunchKernel"} <= set(functions)
    wrong = {name: (str(inspect.signature(fn)), str(inspect.signature(getattr(real, name))))
             for name, fn in functions.items()
             if list(inspect.signature(fn).parameters) != list(inspect.signature(getattr(real, name)).parameters)}
    assert not wrong, wrong
    for flag in ("CU_MEMHOSTREGISTER_PORTABLE", "CU_MEMHOSTREGISTER_DEVICEMAP", "CU_MEMHOSTREGISTER_IOMEMORY",
                 "CU_MEMHOSTREGISTER_READ_ONLY"):
        assert vars(standin.driver)[flag] == int(getattr(real, flag)), flag
