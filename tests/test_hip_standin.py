"""Pins down the behaviour of tests/hip_standin, the test double for hip-python's ``hip.hip``.

The stand-in must follow the HIP runtime's documented behaviour closely enough that the AMDGPU
plugin's logic can be trusted to it, and accept exactly the arguments hip-python accepts. What
both stand-ins simulate alike (stream order, host functions, events, faults, injection) is
pinned once for both in tests/test_standins.py; these tests fix what only HIP has: its implicit
initialisation and device properties, hip-python's argument conversion, the per-thread current
device, hipFree's implicit sync, registered memory and peer copies as HIP does them, HIP's launch
checks, code objects and bundles, and (where hip-python is installed) every signature, enum value
and argument conversion against the real module.
"""

from __future__ import annotations

import ctypes
import inspect
import io
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hip_standin as standin
import pytest
import standin_fixtures
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from hip_standin import DeviceSpec, hiprtc, images
from hip_standin._code_objects import parse_code_object
from standin_fixtures import HOST_FN_TYPE, WAIT, Gate, HostFn, code, ok, run_alone


@pytest.fixture
def hip(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in, installed as hip.hip with two MI210s; shut down afterwards."""
    module = standin.install(monkeypatch)
    from hip import hip as installed  # type: ignore[import-untyped,import-not-found,unused-ignore]

    assert installed is module is standin.hip
    yield module
    standin.shutdown()


def extra_array(blob: bytes, end: int = 3) -> tuple[Any, ...]:
    """HIP's ``extra`` array for ``blob``: (array, blob buffer, size); keep all three alive."""
    return standin_fixtures.extra_array(blob, end)


def kernel_function(hip: Any, name: str = "foo", arch: str = "gfx90a") -> int:
    module = ok(hip.hipModuleLoadData(images.code_object(arch, kernels=(name,))))
    return int(ok(hip.hipModuleGetFunction(module, name.encode())))


def launch(hip: Any, function: int, stream: Any, blob: bytes = b"", grid: tuple[int, int, int] = (1, 1, 1),
           block: tuple[int, int, int] = (64, 1, 1), shared: int = 0) -> tuple[Any, ...]:
    array, *_ = extra_array(blob)
    return hip.hipModuleLaunchKernel(function, *grid, *block, shared, stream, None, ctypes.addressof(array))


def in_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` run in a brand-new thread; its result (or exception)."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(_capture(fn)))
    thread.start()
    thread.join(WAIT)
    outcome, value = box[0]
    if outcome == "raised":
        raise value
    return value


def _capture(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "returned", fn()
    except Exception as exc:  # noqa: BLE001  # handed back to the test's thread
        return "raised", exc


# ---- installation, initialisation, devices ---------------------------------------------------------

def test_install_replaces_hip_hip_for_the_test_only() -> None:
    before = sys.modules.get("hip"), sys.modules.get("hip.hip")
    with pytest.MonkeyPatch.context() as patch:
        module = standin.install(patch)
        import hip.hip  # type: ignore[import-untyped,import-not-found,unused-ignore]
        from hip import hip as imported  # type: ignore[import-untyped,import-not-found,unused-ignore]

        assert imported is module and sys.modules["hip.hip"] is module and hip.hip is module
        with pytest.raises(AttributeError, match="hip_standin"):
            module.hipGraphLaunch  # noqa: B018  # a function it does not simulate fails loudly
        with pytest.raises(AttributeError, match="hip_standin"):
            hip.hiprtc  # noqa: B018
        standin.shutdown()
    assert (sys.modules.get("hip"), sys.modules.get("hip.hip")) == before


def test_devices_describe_themselves_the_same_way_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    rdna = DeviceSpec(name="AMD Radeon RX 7900 XTX", arch="gfx1100", total_memory=24 << 30, compute_units=96,
                      warp_size=32, attributes={"ClockRate": 2_500_000})
    hip = standin.install(monkeypatch, devices=[DeviceSpec(), rdna])
    ok(hip.hipInit(0))
    assert ok(hip.hipGetDeviceCount()) == 2 and ok(hip.hipGetDevice()) == 0
    mi210, navi = ok(hip.hipGetDeviceProperties(0)), ok(hip.hipGetDeviceProperties(1))
    assert (mi210.name, mi210.gcnArchName, mi210.warpSize, mi210.multiProcessorCount) == (
        "AMD Instinct MI210", "gfx90a:sramecc+:xnack-", 64, 104)
    assert (mi210.sharedMemPerBlock, mi210.maxThreadsPerBlock, mi210.maxThreadsDim, mi210.major, mi210.minor) == (
        65536, 1024, [1024, 1024, 1024], 9, 0)
    assert len(mi210.uuid.bytes) == 16 and mi210.uuid.bytes != navi.uuid.bytes
    assert (navi.name, navi.gcnArchName, navi.warpSize, navi.clockRate, navi.major, navi.minor) == (
        "AMD Radeon RX 7900 XTX", "gfx1100", 32, 2_500_000, 11, 0)
    attribute = hip.hipDeviceAttribute_t
    for prop, attr in (("warpSize", "WarpSize"), ("clockRate", "ClockRate"), ("pciBusID", "PciBusId"),
                       ("l2CacheSize", "L2CacheSize"), ("memoryBusWidth", "MemoryBusWidth"),
                       ("multiProcessorCount", "MultiprocessorCount"), ("managedMemory", "ManagedMemory")):
        for ordinal, props in ((0, mi210), (1, navi)):
            member = getattr(attribute, f"hipDeviceAttribute{attr}")
            assert ok(hip.hipDeviceGetAttribute(member, ordinal)) == getattr(props, prop), (prop, ordinal)
    assert ok(hip.hipDeviceTotalMem(1)) == navi.totalGlobalMem == 24 << 30
    assert ok(hip.hipMemGetInfo()) == (64 << 30, 64 << 30)
    assert hip.hipGetDeviceProperties(2)[0] == hip.hipError_t.hipErrorInvalidDevice
    assert code(hip.hipSetDevice(-1)) == "hipErrorInvalidDevice"
    assert hip.hipDeviceGetAttribute(attribute.hipDeviceAttributeLuid, 0) == (hip.hipError_t.hipErrorInvalidValue, 0)
    with pytest.raises(TypeError, match="_hipDeviceAttribute_t__Base"):
        hip.hipDeviceGetAttribute(87, 0)  # hip-python takes only its enum members
    with pytest.raises(AttributeError, match="hip_standin"):
        mi210.maxTexture1D  # noqa: B018  # a property it does not fill says so


def test_init_errors_a_missing_library_and_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    hip = standin.install(monkeypatch, init_error=35)
    assert code(hip.hipInit(0)) == "hipErrorInsufficientDriver"
    assert hip.hipGetDeviceCount() == (hip.hipError_t.hipErrorInsufficientDriver, 0)
    assert code(hip.hipMalloc(8)) == "hipErrorInsufficientDriver"
    assert ok(hip.hipDriverGetVersion()) == 60342134  # needs no initialisation
    hip = standin.install(monkeypatch, devices=0)
    assert code(hip.hipInit(0)) == "hipErrorNoDevice"
    assert hip.hipGetDeviceCount() == (hip.hipError_t.hipErrorNoDevice, 0)
    hip = standin.install(monkeypatch, library_missing=True, driver_version=70000000)
    for call in (lambda: hip.hipInit(0), lambda: hip.hipGetDeviceCount(), lambda: hip.hipMalloc(8)):
        with pytest.raises(RuntimeError, match=r"failed to dlopen 'b'libamdhip64\.so''"):
            call()
    # hip-python's error-name functions swallow the dlopen failure and return NULL.
    assert hip.hipGetErrorName(hip.hipError_t.hipErrorNotReady) == (hip.hipError_t.hipSuccess, None)
    with pytest.raises(TypeError):  # arguments are converted before the library is looked for
        hip.hipMalloc("eight")
    standin.reset()
    assert standin.hip.hipDriverGetVersion() == (standin.hip.hipError_t.hipSuccess, 60342134)


def test_error_names_and_strings(hip: Any) -> None:
    error = hip.hipError_t
    assert hip.hipGetErrorName(error.hipErrorNotReady) == (error.hipSuccess, b"hipErrorNotReady")
    result, text = hip.hipGetErrorString(error.hipErrorIllegalAddress)
    assert result == error.hipSuccess and str(text) == "an illegal memory access was encountered"
    assert text.decode() == str(text)  # bytes that print as text, as hip-python's CStr
    assert str(hip.hipGetErrorString(error.hipErrorStreamCaptureMerge)[1]) == "stream capture merge"
    with pytest.raises(TypeError, match="_hipError_t__Base"):
        hip.hipGetErrorName(600)


def test_arguments_convert_as_hip_python_converts_them(hip: Any) -> None:
    pointer = ok(hip.hipMalloc(16))
    with pytest.raises(OverflowError, match="value too large to convert to int"):
        hip.hipMemsetD32Async(pointer, 0xFFFFFFFF, 4, None)  # a C int in hip-python
    ok(hip.hipMemsetD32Async(pointer, -1, 4, None))
    assert standin.read(pointer, 16) == b"\xff" * 16
    with pytest.raises(OverflowError, match="unsigned char"):
        hip.hipMemsetD8Async(pointer, 256, 1, None)
    with pytest.raises(OverflowError, match="can't convert negative value to size_t"):
        hip.hipMalloc(-1)
    with pytest.raises(OverflowError, match="unsigned int"):
        hip.hipStreamCreateWithFlags(-1)
    with pytest.raises(TypeError, match="an integer is required"):
        hip.hipMalloc("16")
    with pytest.raises(TypeError, match="unsupported input type"):
        hip.hipFree("0x10")
    with pytest.raises(TypeError, match="address"):  # hip-python would call the ctypes object's storage
        hip.hipLaunchHostFunc(None, HOST_FN_TYPE(lambda _: None), None)
    stream = ok(hip.hipStreamCreateWithFlags(True))  # bools and floats are numbers to Cython
    assert isinstance(stream, int) and isinstance(pointer, int)
    ok(hip.hipStreamSynchronize(ctypes.c_void_p(stream)))  # handles may come as c_void_p too


def test_current_device_is_per_thread_and_work_follows_the_stream(hip: Any) -> None:
    ok(hip.hipSetDevice(1))
    one = ok(hip.hipMalloc(8))
    stream_one = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    assert standin.state().allocations[one].device.ordinal == 1
    assert in_thread(lambda: ok(hip.hipGetDevice())) == 0  # a new thread starts at device 0
    zero = in_thread(lambda: ok(hip.hipMalloc(8)))
    assert standin.state().allocations[zero].device.ordinal == 0
    assert ok(hip.hipGetDevice()) == 1  # another thread's hipSetDevice changes nothing here

    def copy_from_device_zero() -> None:  # device 1's stream, used while device 0 is current
        ok(hip.hipMemcpyHtoDAsync(one, b"12345678", 8, stream_one))
        ok(hip.hipStreamSynchronize(stream_one))

    in_thread(copy_from_device_zero)
    assert standin.read(one, 8) == b"12345678"
    assert standin.state().streams[stream_one].ctx.device.ordinal == 1


# ---- memory ----------------------------------------------------------------------------------------

def test_memory_is_real_tracked_and_budgeted(monkeypatch: pytest.MonkeyPatch) -> None:
    hip = standin.install(monkeypatch, devices=[DeviceSpec(memory_budget=1024)])
    assert hip.hipMalloc(0) == (hip.hipError_t.hipSuccess, None)
    assert hip.hipHostMalloc(0, 0) == (hip.hipError_t.hipSuccess, None)
    device = ok(hip.hipMalloc(1000))
    assert hip.hipMalloc(100) == (hip.hipError_t.hipErrorOutOfMemory, None)
    assert ok(hip.hipMemGetInfo())[0] == 24
    host = ok(hip.hipHostMalloc(4096, hip.hipHostMallocDefault))  # pinned host memory is not budgeted
    managed = ok(hip.hipMallocManaged(16, hip.hipMemAttachGlobal))  # managed memory is
    assert code(hip.hipMallocManaged(16, hip.hipMemAttachGlobal)) == "hipErrorOutOfMemory"
    assert code(hip.hipMallocManaged(8, 0)) == "hipErrorInvalidValue"
    assert code(hip.hipHostMalloc(8, 0x40000000 | 0x80000000)) == "hipErrorInvalidValue"
    standin.write(device, b"abc")
    assert standin.read(device, 3) == b"abc" and standin.read(host, 4) == bytes(4)
    assert code(hip.hipFree(host)) == "hipErrorInvalidValue"  # a host pointer is not hipFree's
    assert code(hip.hipHostFree(device)) == "hipErrorInvalidValue"
    assert code(hip.hipFree(device + 8)) == "hipErrorInvalidValue"
    ok(hip.hipFree(None))  # NULL: nothing to do
    ok(hip.hipFree(device))
    ok(hip.hipFree(managed))
    ok(hip.hipHostFree(host))
    assert code(hip.hipFree(device)) == "hipErrorInvalidValue"
    assert standin.state().allocations == {} and ok(hip.hipMemGetInfo())[0] == 1024


def test_free_waits_for_the_device_to_finish(hip: Any) -> None:
    stream = ok(hip.hipStreamCreateWithFlags(1))
    pointer = ok(hip.hipMalloc(8))
    gate = Gate()
    gate.launch(hip, stream)
    ok(hip.hipMemsetD8Async(pointer, 7, 8, stream))
    assert gate.entered.wait(WAIT)
    freed = threading.Event()

    def free() -> None:
        ok(hip.hipFree(pointer))
        freed.set()

    worker = threading.Thread(target=free)
    worker.start()
    assert not freed.wait(0.05)  # the implicit hipDeviceSynchronize
    gate.opened.set()
    worker.join(WAIT)
    assert freed.is_set() and pointer not in standin.state().allocations


def test_copies_and_fills_move_data(hip: Any) -> None:
    stream = ok(hip.hipStreamCreateWithFlags(1))
    a, b = ok(hip.hipMalloc(64)), ok(hip.hipMalloc(64))
    ok(hip.hipMemcpyHtoDAsync(a, bytes(range(64)), 64, stream))
    ok(hip.hipMemcpyDtoDAsync(b, a, 64, stream))
    out = bytearray(64)
    ok(hip.hipMemcpyDtoHAsync(out, b, 64, stream))
    ok(hip.hipStreamSynchronize(stream))
    assert bytes(out) == bytes(range(64))
    ok(hip.hipMemsetD16Async(a + 1, 0xBEEF, 2, stream))  # fills take any alignment
    ok(hip.hipMemsetD2D32Async(b, 16, 0x11223344, 2, 3, stream))  # 3 rows of 2 values, 16 bytes apart
    ok(hip.hipMemsetD2D8Async(b + 8, 16, 0xAA, 1, 2, stream))
    ok(hip.hipMemsetD2D16Async(b + 60, 0, 0xCCDD, 2, 1, stream))
    ok(hip.hipStreamSynchronize(stream))
    assert standin.read(a, 6) == b"\x00\xef\xbe\xef\xbe\x05"
    row = b"\x44\x33\x22\x11" * 2
    assert standin.read(b, 48) == row + b"\xaa" + bytes(range(9, 16)) + row + b"\xaa" + bytes(range(25, 32)) + (
        row + bytes(range(40, 48)))
    assert standin.read(b + 60, 4) == b"\xdd\xcc\xdd\xcc"
    assert code(hip.hipMemcpyHtoDAsync(a + 60, b"12345678", 8, stream)) == "hipErrorInvalidValue"
    assert code(hip.hipMemcpyDtoHAsync(out, 0x1000, 8, stream)) == "hipErrorInvalidValue"
    assert code(hip.hipMemsetD2D8Async(b, 2, 0, 4, 2, stream)) == "hipErrorInvalidValue"  # pitch < row
    ok(hip.hipMemcpyHtoDAsync(0, None, 0, stream))  # nothing to copy: nothing checked


def test_registered_host_memory_is_tracked_and_refused_as_hip_documents(hip: Any) -> None:
    buffer = ctypes.create_string_buffer(bytes(range(256)), 4096)
    host = ctypes.addressof(buffer)
    ok(hip.hipHostRegister(host, 4096, hip.hipHostRegisterPortable | hip.hipHostRegisterMapped))
    assert standin.state().registered[host].size == 4096
    assert ok(hip.hipHostGetDevicePointer(host + 100, 0)) == host + 100  # every device uses host pointers
    ok(hip.hipSetDevice(1))
    assert ok(hip.hipHostGetDevicePointer(host, 0)) == host  # one context: every device sees it
    for start, size in ((host, 4096), (host + 64, 8), (host - 64, 128), (host + 4095, 10)):
        assert code(hip.hipHostRegister(start, size, 0)) == "hipErrorHostMemoryAlreadyRegistered"
    pinned = ok(hip.hipHostMalloc(64, 0))
    assert code(hip.hipHostRegister(pinned + 8, 8, 0)) == "hipErrorHostMemoryAlreadyRegistered"
    assert ok(hip.hipHostGetDevicePointer(pinned + 8, 0)) == pinned + 8
    other = ctypes.create_string_buffer(64)
    for args in ((0, 64, 0), (ctypes.addressof(other), 0, 0), (ctypes.addressof(other), 64, 0x10)):
        assert code(hip.hipHostRegister(*args)) == "hipErrorInvalidValue"
    assert hip.hipHostGetDevicePointer(ctypes.addressof(other), 0) == (hip.hipError_t.hipErrorInvalidValue, None)
    assert code(hip.hipHostGetDevicePointer(host, 1)) == "hipErrorInvalidValue"
    stream = ok(hip.hipStreamCreateWithFlags(1))
    device = ok(hip.hipMalloc(64))
    ok(hip.hipMemcpyDtoDAsync(device, host, 64, stream))  # device-side access takes registered memory
    ok(hip.hipMemsetD8Async(host + 64, 0xAB, 4, stream))
    ok(hip.hipStreamSynchronize(stream))
    assert standin.read(device, 64) == bytes(range(64)) and buffer.raw[64:68] == b"\xab" * 4
    assert code(hip.hipMemsetD8Async(host + 4090, 0, 8, stream)) == "hipErrorInvalidValue"  # runs past it
    for address in (host + 8, pinned, ctypes.addressof(other)):
        assert code(hip.hipHostUnregister(address)) == "hipErrorHostMemoryNotRegistered"
    ok(hip.hipHostUnregister(host))
    assert host not in standin.state().registered
    assert code(hip.hipHostGetDevicePointer(host, 0)) == "hipErrorInvalidValue"
    assert code(hip.hipMemcpyDtoDAsync(device, host, 64, stream)) == "hipErrorInvalidValue"


def test_registered_memory_has_device_addresses_of_its_own_where_a_device_cannot_use_host_pointers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hip = standin.install(monkeypatch, devices=[DeviceSpec(attributes={"CanUseHostPointerForRegisteredMem": 0})])
    buffer = ctypes.create_string_buffer(bytes(range(128)), 128)
    host = ctypes.addressof(buffer)
    ok(hip.hipHostRegister(host, 128, 0))
    alias = ok(hip.hipHostGetDevicePointer(host, 0))
    assert alias != host and ok(hip.hipHostGetDevicePointer(host + 10, 0)) == alias + 10
    stream = ok(hip.hipStreamCreateWithFlags(1))
    device = ok(hip.hipMalloc(128))
    ok(hip.hipMemcpyDtoDAsync(device, alias, 128, stream))
    ok(hip.hipMemsetD8Async(alias + 120, 0xCD, 8, stream))
    ok(hip.hipStreamSynchronize(stream))
    assert standin.read(device, 120) == bytes(range(120)) and buffer.raw[120:] == b"\xcd" * 8
    assert standin.read(alias, 4) == bytes(range(4))
    ok(hip.hipHostUnregister(host))
    assert standin.state().aliases == {}
    standin.shutdown()


def test_peer_access_and_peer_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    hip = standin.install(monkeypatch, devices=[DeviceSpec(peers={1}), DeviceSpec(peers=set()), DeviceSpec()])
    assert [ok(hip.hipDeviceCanAccessPeer(0, peer)) for peer in range(3)] == [0, 1, 0]
    assert ok(hip.hipDeviceCanAccessPeer(1, 0)) == 0
    ok(hip.hipDeviceEnablePeerAccess(1, 0))  # device 0 (current) gets access to device 1
    assert code(hip.hipDeviceEnablePeerAccess(1, 0)) == "hipErrorPeerAccessAlreadyEnabled"
    assert code(hip.hipDeviceEnablePeerAccess(2, 0)) == "hipErrorPeerAccessUnsupported"
    assert code(hip.hipDeviceEnablePeerAccess(0, 0)) == "hipErrorInvalidDevice"
    assert code(hip.hipDeviceEnablePeerAccess(5, 0)) == "hipErrorInvalidDevice"
    assert code(hip.hipDeviceEnablePeerAccess(1, 1)) == "hipErrorInvalidValue"
    source = ok(hip.hipMalloc(16))
    ok(hip.hipSetDevice(2))
    target = ok(hip.hipMalloc(16))
    standin.write(source, b"peer-to-peer!!!!")
    ok(hip.hipMemcpyPeerAsync(target, 2, source, 0, 16, None))  # needs no peer access
    assert standin.read(target, 16) == b"peer-to-peer!!!!"
    assert code(hip.hipMemcpyPeerAsync(target, 7, source, 0, 16, None)) == "hipErrorInvalidDevice"


# ---- kernels and launches --------------------------------------------------------------------------

def test_launch_passes_the_argument_blob_and_checks_the_configuration(hip: Any) -> None:
    seen: list[tuple[Any, ...]] = []
    standin.register_kernel("foo", lambda *args: seen.append(args), param_sizes=(8, 4), max_threads=256)
    function = kernel_function(hip)
    stream = ok(hip.hipStreamCreateWithFlags(1))
    ok(launch(hip, function, stream, b"\x01" * 12, grid=(4, 2, 1), block=(128, 2, 1), shared=1024))
    value, number = ctypes.c_uint64(0x1122), ctypes.c_uint32(7)
    ok(hip.hipModuleLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream,  # pointers to each argument
                                 [ctypes.addressof(value), ctypes.addressof(number)], None))
    ok(hip.hipModuleLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, None, [value, number]))  # hip-python packs
    ok(hip.hipStreamSynchronize(stream))
    packed = (0x1122).to_bytes(8, "little") + (7).to_bytes(4, "little")
    assert seen == [(b"\x01" * 12, (4, 2, 1), (128, 2, 1), 1024, 0), (packed, (1, 1, 1), (1, 1, 1), 0, 0),
                    (packed, (1, 1, 1), (1, 1, 1), 0, 0)]
    cuda_style, *_keep = extra_array(b"\x01", end=0)  # CUDA ends the array with 0, HIP with 3
    bad = {
        "cuda end marker": (lambda: hip.hipModuleLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, None,
                                                              ctypes.addressof(cuda_style)), "hipErrorInvalidValue"),
        "both argument forms": (lambda: hip.hipModuleLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream,
                                                                  [ctypes.addressof(value)], [value]),
                                "hipErrorInvalidValue"),
        "shared memory": (lambda: launch(hip, function, stream, shared=65537), "hipErrorInvalidValue"),
        "block size": (lambda: launch(hip, function, stream, block=(1024, 2, 1)), "hipErrorInvalidValue"),
        "zero grid": (lambda: launch(hip, function, stream, grid=(0, 1, 1)), "hipErrorInvalidValue"),
        "grid y": (lambda: launch(hip, function, stream, grid=(1, 65537, 1)), "hipErrorInvalidValue"),
        "work-items": (lambda: launch(hip, function, stream, grid=(2**31 - 1, 1, 1), block=(4, 1, 1)),
                       "hipErrorInvalidConfiguration"),
        "launch bounds": (lambda: launch(hip, function, stream, block=(512, 1, 1)), "hipErrorLaunchFailure"),
        "null function": (lambda: launch(hip, 0, stream), "hipErrorInvalidHandle"),
        "no arguments for a kernel that takes some": (
            lambda: hip.hipModuleLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, None, None),
            "hipErrorInvalidValue"),
    }
    assert {what: code(call()) for what, (call, _) in bad.items()} == {what: c for what, (_, c) in bad.items()}
    assert len(seen) == 3
    ok(launch(hip, function, stream))  # a launch-bounds failure poisons nothing
    ok(hip.hipStreamSynchronize(stream))


def test_launches_go_to_the_current_device_with_its_own_kernels(hip: Any) -> None:
    function = kernel_function(hip)  # loaded on device 0
    stream_zero = ok(hip.hipStreamCreateWithFlags(1))
    ok(hip.hipSetDevice(1))
    stream_one = ok(hip.hipStreamCreateWithFlags(1))
    assert code(launch(hip, function, stream_zero)) == "hipErrorInvalidHandle"  # not the current device's stream
    assert code(launch(hip, function, stream_one)) == "hipErrorInvalidDevice"  # not loaded on device 1
    ok(launch(hip, kernel_function(hip), stream_one))
    ok(hip.hipStreamSynchronize(stream_one))


def test_function_attributes_and_occupancy(hip: Any) -> None:
    standin.register_kernel("bounded", lambda *_: None, max_threads=256)
    function = kernel_function(hip, "bounded")
    attribute = hip.hipFunction_attribute
    assert ok(hip.hipFuncGetAttribute(attribute.HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function)) == 256
    assert ok(hip.hipFuncGetAttribute(attribute.HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, function)) == 65536
    assert ok(hip.hipFuncGetAttribute(attribute.HIP_FUNC_ATTRIBUTE_BINARY_VERSION, function)) == 90
    assert code(hip.hipFuncGetAttribute(attribute.HIP_FUNC_ATTRIBUTE_MAX, function)) == "hipErrorInvalidValue"
    assert code(hip.hipFuncGetAttribute(attribute.HIP_FUNC_ATTRIBUTE_NUM_REGS, 12345)) == "hipErrorInvalidHandle"
    with pytest.raises(TypeError, match="_hipFunction_attribute__Base"):
        hip.hipFuncGetAttribute(0, function)
    assert ok(hip.hipModuleOccupancyMaxPotentialBlockSize(function, 0, 0)) == (8 * 104, 256)
    assert ok(hip.hipModuleOccupancyMaxPotentialBlockSize(function, 32768, 100)) == (2 * 104, 64)
    assert hip.hipModuleOccupancyMaxPotentialBlockSize(function, 65537, 0) == (hip.hipError_t.hipErrorInvalidValue, 0,
                                                                               0)


def test_kernel_arguments_are_read_as_the_code_object_metadata_lays_them_out(hip: Any) -> None:
    """saxpy(float, const float*, float*, int) and multiargs(char, int*, short), described by the
    code object's NT_AMDGPU_METADATA note (hidden arguments after the explicit ones)."""
    seen: list[bytes] = []
    for kernel in ("saxpy", "multiargs"):
        standin.register_kernel(kernel, lambda params, *_: seen.append(params), param_sizes=(64,))  # the note wins
    image = images.code_object("gfx90a", kernels=("saxpy", "multiargs"), args={"saxpy": (4, 8, 8, 4),
                                                                               "multiargs": (1, 8, 2)},
                               launch_bounds={"multiargs": 128})
    module = ok(hip.hipModuleLoadData(image))
    saxpy, multiargs = (ok(hip.hipModuleGetFunction(module, name)) for name in (b"saxpy", b"multiargs"))
    stream = ok(hip.hipStreamCreateWithFlags(1))
    blob = struct.pack("<b7xQh6x", -3, 0x1000, 7)  # multiargs's arguments as a padded C struct
    a, x, n = ctypes.c_float(2.0), ctypes.c_uint64(0xA0), ctypes.c_int32(9)
    ok(hip.hipModuleLaunchKernel(saxpy, 1, 1, 1, 1, 1, 1, 0, stream,
                                 [ctypes.addressof(a), ctypes.addressof(x), ctypes.addressof(x), ctypes.addressof(n)],
                                 None))
    ok(launch(hip, multiargs, stream, blob, block=(128, 1, 1)))  # 24 bytes: HIP reads the 18 it needs
    assert code(launch(hip, multiargs, stream, blob, block=(256, 1, 1))) == "hipErrorLaunchFailure"  # the note's bound
    reversed_keys = (ctypes.c_void_p * 5)(2, 0, 1, 0, 3)  # HIP reads only {POINTER, p, SIZE, &size, END}
    assert code(hip.hipModuleLaunchKernel(multiargs, 1, 1, 1, 1, 1, 1, 0, stream, None,
                                          ctypes.addressof(reversed_keys))) == "hipErrorInvalidValue"
    ok(hip.hipStreamSynchronize(stream))
    assert seen == [struct.pack("<f4xQQi", 2.0, 0xA0, 0xA0, 9), blob[:18]]


def test_code_objects_clang_builds_carry_their_argument_layout() -> None:
    clang = hiprtc.find_clang()
    if clang is None:
        pytest.skip("no clang >= 20 with the AMDGPU target: nothing to build a real code object with")
    source = ('#define __global__ __attribute__((global))\n'
              'extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {}\n'
              'extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(1, 256)))\n'
              'void multiargs(char a, int* b, short c) {}\n')
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder)
        (path / "k.hip").write_text(source)
        subprocess.run([clang, "-x", "hip", "--offload-arch=gfx90a", "-nogpulib", "-nogpuinc", "--cuda-device-only",
                        "--no-gpu-bundle-output", "-O2", "-o", str(path / "k.co"), str(path / "k.hip")],
                       check=True, capture_output=True, timeout=120)
        code_object = parse_code_object((path / "k.co").read_bytes())
    assert code_object.params == {"saxpy": [(0, 4), (8, 8), (16, 8), (24, 4)], "multiargs": [(0, 1), (8, 8), (16, 2)]}
    assert code_object.max_threads == {"saxpy": 1024, "multiargs": 256}


def test_pointer_attributes_describe_hip_memory_and_unregistered_memory(hip: Any) -> None:
    ok(hip.hipSetDevice(1))
    on_one = ok(hip.hipMalloc(64))
    ok(hip.hipSetDevice(0))
    device, managed = ok(hip.hipMalloc(64)), ok(hip.hipMallocManaged(64, hip.hipMemAttachGlobal))
    pinned = ok(hip.hipHostMalloc(64, hip.hipHostMallocMapped))
    buffer = ctypes.create_string_buffer(64)
    registered = ctypes.addressof(buffer)
    ok(hip.hipHostRegister(registered, 64, hip.hipHostRegisterMapped))
    kinds = hip.hipMemoryType
    rows = {  # pointer: (type, device, devicePointer, hostPointer, isManaged, allocationFlags)
        device + 8: (kinds.hipMemoryTypeDevice, 0, device + 8, 0, 0, 0),
        on_one: (kinds.hipMemoryTypeDevice, 1, on_one, 0, 0, 0),
        managed + 1: (kinds.hipMemoryTypeManaged, 0, managed + 1, managed + 1, 1, hip.hipMemAttachGlobal),
        pinned: (kinds.hipMemoryTypeHost, 0, pinned, pinned, 0, hip.hipHostMallocMapped),
        registered + 4: (kinds.hipMemoryTypeHost, 0, registered + 4, registered + 4, 0, hip.hipHostRegisterMapped),
    }
    for pointer, expected in rows.items():
        found = ok(hip.hipPointerGetAttributes(pointer))
        assert (found.type, found.device, int(found.devicePointer), int(found.hostPointer), found.isManaged,
                found.allocationFlags) == expected, hex(pointer)
    # ROCm 6+: memory HIP does not know is "unregistered", with hipSuccess.
    pageable = ctypes.create_string_buffer(64)
    found = ok(hip.hipPointerGetAttributes(ctypes.addressof(pageable)))
    assert (found.type, found.device, int(found.devicePointer), int(found.hostPointer)) == (
        kinds.hipMemoryTypeUnregistered, hip.hipInvalidDeviceId, 0, 0)
    assert code(hip.hipPointerGetAttributes(0)) == "hipErrorInvalidValue"
    ok(hip.hipFree(device))
    assert ok(hip.hipPointerGetAttributes(device)).type == kinds.hipMemoryTypeUnregistered


def test_device_reset_destroys_what_the_current_device_held(hip: Any) -> None:
    stream, event = ok(hip.hipStreamCreateWithFlags(1)), ok(hip.hipEventCreateWithFlags(0))
    pointer = ok(hip.hipMalloc(64))
    module = ok(hip.hipModuleLoadData(images.code_object()))
    ok(hip.hipSetDevice(1))
    kept = ok(hip.hipMalloc(64))
    ok(hip.hipSetDevice(0))
    ok(hip.hipDeviceReset())
    assert code(hip.hipStreamQuery(stream)) == "hipErrorContextIsDestroyed"
    assert code(hip.hipEventQuery(event)) == "hipErrorInvalidHandle"
    assert code(hip.hipFree(pointer)) == "hipErrorInvalidValue"
    assert code(hip.hipModuleGetFunction(module, b"foo")) == "hipErrorInvalidHandle"
    assert standin.state().devices[0].used == 0
    ok(hip.hipFree(kept))  # device 1 was not reset
    ok(hip.hipStreamSynchronize(ok(hip.hipStreamCreateWithFlags(1))))  # device 0 works afresh


# ---- images ----------------------------------------------------------------------------------------

def test_code_objects_give_kernels_and_initialised_globals(hip: Any) -> None:
    image = images.code_object("gfx90a", kernels=("foo", "bar"), globals={"counter": (7).to_bytes(4, "little"),
                                                                         "table": 24})
    elf = ELFFile(io.BytesIO(image))  # a real ELF that pyelftools reads
    assert (elf["e_machine"], elf["e_type"], elf["e_ident"]["EI_ABIVERSION"], elf["e_flags"] & 0xFF) == (
        "EM_AMDGPU", "ET_DYN", 2, 0x3F)
    dynsym = elf.get_section_by_name(".dynsym")
    assert isinstance(dynsym, SymbolTableSection)
    assert {s.name for s in dynsym.iter_symbols()} >= {"foo.kd", "bar.kd", "counter"}
    module = ok(hip.hipModuleLoadData(image))
    assert isinstance(module, int)
    ok(hip.hipModuleGetFunction(module, b"bar"))
    ok(hip.hipModuleGetFunction(module, "foo"))  # hip-python takes str too
    counter, size = ok(hip.hipModuleGetGlobal(module, b"counter"))
    table, table_size = ok(hip.hipModuleGetGlobal(module, b"table"))
    assert (size, table_size) == (4, 24)
    assert standin.read(counter, 4) == b"\x07\0\0\0" and standin.read(table, 24) == bytes(24)
    assert standin.state().devices[0].used == 28
    assert hip.hipModuleGetFunction(module, b"counter") == (hip.hipError_t.hipErrorNotFound, None)
    assert hip.hipModuleGetGlobal(module, b"foo") == (hip.hipError_t.hipErrorNotFound, None, 0)
    assert code(hip.hipModuleGetFunction(module, b"")) == "hipErrorInvalidValue"
    buffer = ctypes.create_string_buffer(image, len(image))  # an image given by its address
    from_address = ok(hip.hipModuleLoadData(ctypes.addressof(buffer)))
    assert ok(hip.hipModuleGetGlobal(from_address, b"table"))[1] == 24
    ok(hip.hipModuleUnload(module))
    assert standin.state().devices[0].used == 28 and counter not in standin.state().allocations
    assert code(hip.hipModuleGetFunction(module, b"foo")) == "hipErrorInvalidHandle"
    assert code(hip.hipModuleUnload(None)) == "hipErrorInvalidHandle"


@pytest.mark.parametrize(("image", "expected"), [
    (images.code_object("gfx90a"), "hipSuccess"),
    (images.code_object("gfx90a:xnack-", sramecc="any"), "hipSuccess"),
    (images.code_object("gfx90a:sramecc+:xnack-", abi_version=6), "hipSuccess"),
    (images.code_object("gfx90a", xnack=True), "hipErrorNoBinaryForGpu"),
    (images.code_object("gfx90a:sramecc-"), "hipErrorNoBinaryForGpu"),
    (images.code_object("gfx942"), "hipErrorNoBinaryForGpu"),
    (images.offload_bundle({images.HOST_TRIPLE: b"", images.bundle_triple("gfx1100"): images.code_object("gfx1100"),
                            images.bundle_triple("gfx90a:xnack-"): images.code_object("gfx90a:xnack-")}), "hipSuccess"),
    (images.offload_bundle({images.HOST_TRIPLE: b"", images.bundle_triple("gfx90a:xnack+"): images.code_object(
        "gfx90a:xnack+"), images.bundle_triple("gfx908"): images.code_object("gfx908")}), "hipErrorNoBinaryForGpu"),
    (images.offload_bundle({images.bundle_triple("gfx90a", kind="openmp"): images.code_object()}),
     "hipErrorNoBinaryForGpu"),
    (b"__CLANG_OFFLOAD_BUNDLE__\x05\0\0\0\0\0\0\0", "hipErrorInvalidKernelFile"),
    (images.code_object()[:200], "hipErrorInvalidKernelFile"),
    (images.code_object()[:16] + b"\x01" + images.code_object()[17:], "hipErrorInvalidKernelFile"),  # ET_REL
    (images.code_object()[:18] + b"\xbe\x00" + images.code_object()[20:], "hipErrorInvalidKernelFile"),  # EM_CUDA
    (images.code_object()[:8] + b"\x01" + images.code_object()[9:], "hipErrorInvalidKernelFile"),  # ABI v3
    (b"//\n// PTX is not for AMD GPUs\n.version 8.0\n", "hipErrorInvalidImage"),
], ids=["plain", "features-any", "v6", "xnack-on", "sramecc-off", "other-gfx", "bundle", "bundle-no-match",
        "bundle-openmp", "bundle-truncated", "truncated-elf", "relocatable", "cuda-elf", "old-abi", "ptx"])
def test_images_load_only_where_the_device_can_run_them(hip: Any, image: bytes, expected: str) -> None:
    result = hip.hipModuleLoadData(image)
    assert code(result) == expected, standin.diagnostics[-1:]
    assert (result[1] is None) == (expected != "hipSuccess")


def test_builders_reject_what_no_code_object_holds() -> None:
    with pytest.raises(ValueError, match="code object version"):
        images.code_object(abi_version=2)
    with pytest.raises(ValueError, match="processor"):
        images.code_object("sm_90")
    with pytest.raises(ValueError, match="feature"):
        images.code_object("gfx90a:xnack")
    bundle = images.offload_bundle({images.bundle_triple("gfx942:sramecc+"): b"abc"})
    assert bundle.startswith(b"__CLANG_OFFLOAD_BUNDLE__") and bundle[4096:4099] == b"abc"


# ---- against the real hip-python -------------------------------------------------------------------

def _real() -> Any:
    real = standin.real_module()
    if real is None:
        pytest.skip("hip-python (rocm.bindings.hip) is not importable: nothing to compare with")
    return real


def _functions() -> dict[str, Any]:
    return {name: value for name, value in vars(standin.hip).items() if getattr(value, "__hip_standin__", False)}


def test_every_function_has_the_real_signature() -> None:
    real = _real()
    functions = _functions()
    assert len(functions) == 54
    for name, function in functions.items():
        assert inspect.signature(function) == inspect.signature(getattr(real, name)), name


def test_enums_and_constants_have_the_real_values() -> None:
    real = _real()
    for enum in ("hipError_t", "hipDeviceAttribute_t", "hipFunction_attribute", "hipMemoryType"):
        ours, theirs = getattr(standin.hip, enum), getattr(real, enum)
        assert {n: int(m) for n, m in ours.__members__.items()} == {n: int(m) for n, m in theirs.__members__.items()}
    for constant in ("hipStreamDefault", "hipStreamNonBlocking", "hipEventDefault", "hipEventBlockingSync",
                     "hipEventDisableTiming", "hipEventInterprocess", "hipEventReleaseToDevice",
                     "hipEventReleaseToSystem", "hipHostMallocDefault", "hipHostMallocPortable", "hipHostMallocMapped",
                     "hipHostMallocWriteCombined", "hipHostMallocNumaUser", "hipHostMallocCoherent",
                     "hipHostMallocNonCoherent", "hipMemAttachGlobal", "hipMemAttachHost", "hipMemAttachSingle",
                     "hipHostRegisterDefault", "hipHostRegisterPortable", "hipHostRegisterMapped",
                     "hipHostRegisterIoMemory", "hipExtHostRegisterCoarseGrained",
                     "HIP_LAUNCH_PARAM_BUFFER_POINTER", "HIP_LAUNCH_PARAM_BUFFER_SIZE", "HIP_LAUNCH_PARAM_END",
                     "hipInvalidDeviceId"):
        assert getattr(standin.hip, constant) == int(getattr(real, constant)), constant
    props = real.hipDeviceProp_t()
    for field in vars(standin.hip.hipDeviceProp_t()):
        assert hasattr(props, field), field
    attributes = real.hipPointerAttribute_t()
    for field in vars(standin.hip.hipPointerAttribute_t()):
        assert hasattr(attributes, field), field


def test_replay_accepts_recorded_calls_and_reports_refused_arguments(hip: Any) -> None:
    _real()
    pointer = ok(hip.hipMalloc(64))
    stream = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    ok(hip.hipMemcpyHtoDAsync(pointer, b"x" * 64, 64, stream))
    ok(hip.hipMemsetD32Async(pointer, -1, 16, stream))
    ok(hip.hipDeviceGetAttribute(hip.hipDeviceAttribute_t.hipDeviceAttributeWarpSize, 0))
    function = kernel_function(hip)
    ok(launch(hip, function, stream, b"\x01" * 8))
    HostFn().launch(hip, stream, 0x10)
    ok(hip.hipStreamSynchronize(stream))
    ok(hip.hipGetErrorName(hip.hipError_t.hipErrorNotReady))
    recorded = list(standin.calls)
    assert len(recorded) == 11
    assert standin.replay_against_real(recorded) == []
    wrong = [("hipMemsetD32Async", (pointer, 0xFFFFFFFF, 16, stream)), ("hipDeviceGetAttribute", (87, 0)),
             ("hipStreamSynchronize", (1.5,))]
    refused = standin.replay_against_real(wrong)
    assert [(name, type(exc)) for name, _, exc in refused] == [
        ("hipMemsetD32Async", OverflowError), ("hipDeviceGetAttribute", TypeError), ("hipStreamSynchronize", TypeError)]


def test_works_without_hip_python_installed() -> None:
    """The stand-in needs nothing from hip-python: its enums and structs are its own."""
    run_alone("""
        import importlib, sys
        sys.modules["hip"] = sys.modules["rocm"] = None  # hip-python is not installed
        import pytest
        import hip_standin as standin
        monkeypatch = pytest.MonkeyPatch()
        hip = standin.install(monkeypatch)
        assert importlib.import_module("hip.hip") is hip and standin.real_module() is None
        assert hip.hipInit(0) == (hip.hipError_t.hipSuccess,)
        stream = hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking)[1]
        assert hip.hipStreamSynchronize(stream)[0] == 0
        assert repr(hip.hipSetDevice(9)[0]) == "<hipError_t.hipErrorInvalidDevice: 101>"
        standin.shutdown()
        monkeypatch.undo()
        print("standalone ok")
    """, "standalone ok")
