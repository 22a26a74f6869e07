"""A stand-in for NVIDIA's ``cuda.bindings.driver``: a TEST DOUBLE, not NVIDIA code.

It follows the CUDA driver API's documented behaviour on the host, with the bindings' calling
convention: every function takes the same positional parameters as ``cuda.bindings.driver``
(handles or plain ints) and returns a tuple ``(CUresult, *outputs)``; a failure returns
``(code, None, ...)`` with one ``None`` per output, as the bindings do. Enums and handle classes
are the real ones when ``cuda-bindings`` is installed (see ``_types``).

Simulated, as documented for the driver: ``cuInit`` first (else CUDA_ERROR_NOT_INITIALIZED); a
per-thread current context (calls that need one return CUDA_ERROR_INVALID_CONTEXT without it);
streams that run in submission order on their own thread (``cuStreamQuery`` says NOT_READY
while work is pending); events with real timestamps; host functions called through their C
pointer on the stream's thread, never after a sticky error; kernels run by Python bodies
registered by name; sticky faults that make every later call on the context fail.

Deliberate simplifications (documented here, pinned in tests/test_cuda_standin.py):

- streams 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD run their work synchronously in the calling
  thread, after the context's blocking streams have drained;
- a non-sticky fault of a kernel is returned once, by the next sync or query of its stream (or
  by ``cuCtxSynchronize``); a sticky one by every later call on the context;
- freed memory is handed back to the system only when no stream has work left, so late work on
  a freed pointer cannot crash the test process;
- the driver's "may return CUDA_ERROR_NOT_PERMITTED" for driver calls made from a host function
  is always applied;
- ``cuMemAllocHost(0)`` and ``cuMemFree`` of an unknown pointer return CUDA_ERROR_INVALID_VALUE;
  the last release of a primary context destroys what was made in it (host memory registered in
  it included) and clears its sticky error, and the handle stays the same for the next retain
  (as for a real primary context);
- registered host memory (``cuMemHostRegister``): a range that overlaps registered memory or a
  ``cuMemAllocHost`` allocation is CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  ``cuMemHostUnregister`` takes the base address given to the register call (anything else is
  CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED), from any context; ``cuMemHostGetDevicePointer`` gives
  the device address of any byte of a registration made with CU_MEMHOSTREGISTER_DEVICEMAP (in
  another context only if it was also CU_MEMHOSTREGISTER_PORTABLE) or of a ``cuMemAllocHost``
  allocation (which unified addressing maps for every context), CUDA_ERROR_INVALID_VALUE
  otherwise. Device-side copies and memsets accept registered memory, at its host address or its
  device address, as they accept pinned allocations.
"""
# ruff: noqa: N803  # parameter names follow cuda.bindings.driver (hStream, ByteCount, ...)

from __future__ import annotations

import ctypes
import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

from . import _engine as e
from . import _images
from . import _modules as m
from . import _types as t
from ._types import (  # noqa: F401  # re-exported: the bindings' names
    CU_LAUNCH_PARAM_BUFFER_POINTER,
    CU_LAUNCH_PARAM_BUFFER_SIZE,
    CU_LAUNCH_PARAM_END,
    CUcontext,
    CUctx_flags,
    CUdevice,
    CUdevice_attribute,
    CUdeviceptr,
    CUevent,
    CUevent_flags,
    CUfunction,
    CUfunction_attribute,
    CUhostFn,
    CUjit_option,
    CUmemAttach_flags,
    CUmodule,
    CUresult,
    CUstream,
    CUstream_flags,
    CUuuid,
)

__standin__ = True  # lets tests (and _types) tell this module from the real one

# cuMemHostRegister's flags (plain ints in the bindings too)
CU_MEMHOSTREGISTER_PORTABLE = 0x01
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_MEMHOSTREGISTER_IOMEMORY = 0x04
CU_MEMHOSTREGISTER_READ_ONLY = 0x08

DriverError = e.DriverError
_SUCCESS = CUresult.CUDA_SUCCESS
_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _api(outputs: int = 0, needs_init: bool = True) -> Callable[[Callable[..., tuple[Any, ...]]], Any]:
    """Wrap an implementation: record the call, honour the library-missing switch and injected
    failures, require cuInit, and build the bindings' result tuple."""

    def wrap(fn: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
        name = fn.__name__

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
            e.calls.append((name, args + tuple(kwargs.values())))
            st = e.STATE
            if st.library_missing:
                raise t.DynamicLibNotFoundError(
                    '"cuda" (libcuda.so.1) not found: the NVIDIA driver is not installed (cuda_standin simulation)')
            code = e.take_injection(name)
            if code is None and needs_init and getattr(e.in_host_function, "active", False):
                # The driver documents that host functions must not call it, and that it may refuse.
                code = 800
                e.diagnostics.append(f"{name} called from a host function")
            if code is None:
                try:
                    if needs_init and not st.initialized:
                        raise DriverError(3)
                    return (_SUCCESS, *fn(*args, **kwargs))
                except DriverError as failure:
                    code = failure.code
                    if failure.why:
                        e.diagnostics.append(failure.why)
            return (t.result(code), *([None] * outputs))

        parameters = ", ".join(inspect.signature(fn).parameters)
        call.__doc__ = (f"{name}({parameters})\n\ncuda_standin test double of the driver call of that name: "
                        f"returns (CUresult, *outputs) as the bindings do; see the module docstring.")
        return call

    return wrap


# ---- argument conversion (as the bindings do: handles, ints, None, buffers) ---------------------

def _device(st: e.State, dev: Any) -> e.Device:
    ordinal = m.as_int(dev)
    if not 0 <= ordinal < len(st.devices):
        raise e.fail(101, f"no device {ordinal}")
    return st.devices[ordinal]


def _stream(st: e.State, handle: Any, ctx: e.Context) -> tuple[e.Stream | None, e.Context]:
    """(stream, the context its work runs in); None for the legacy default stream."""
    value = m.as_int(handle)
    if value in e.LEGACY_STREAMS:
        return None, ctx
    with st.lock:
        stream = st.streams.get(value)
    if stream is None:
        raise e.fail(400, f"unknown or destroyed stream {value:#x}")
    if stream.ctx.sticky is not None:
        raise DriverError(stream.ctx.sticky)
    return stream, stream.ctx


def _lookup(table: dict[int, Any], handle: Any, what: str) -> Any:
    found = table.get(m.as_int(handle))
    if found is None:
        raise e.fail(400, f"unknown or destroyed {what} {m.as_int(handle):#x}")
    return found


def _check_range(st: e.State, ptr: int, size: int, what: str) -> int:
    """The host address a device-side access of ``[ptr, +size)`` touches (an allocation, or
    registered host memory at its host or device address); INVALID_VALUE for anything else."""
    if size == 0:
        return ptr
    with st.lock:
        found = st.resolve_locked(ptr, size)
    if found is None:
        raise e.fail(1, f"{what} [{ptr:#x}, +{size}) is not inside a driver allocation or registered host memory")
    return int(found[0])


# ---- initialisation, devices, errors ---------------------------------------------------------------

@_api(needs_init=False)
def cuInit(Flags: int) -> tuple[()]:
    st = e.STATE
    if m.as_int(Flags) != 0:
        raise DriverError(1)
    if st.init_error is not None:
        raise DriverError(st.init_error)
    if not st.devices:
        raise DriverError(100)
    st.initialized = True
    return ()


@_api(1, needs_init=False)
def cuDriverGetVersion() -> tuple[int]:
    return (e.STATE.driver_version,)


@_api(1)
def cuDeviceGetCount() -> tuple[int]:
    return (len(e.STATE.devices),)


@_api(1)
def cuDeviceGet(ordinal: int) -> tuple[Any]:
    return (CUdevice(_device(e.STATE, ordinal).ordinal),)


@_api(1)
def cuDeviceGetName(length: int, dev: Any) -> tuple[bytes]:
    # The bindings hand the driver a buffer of `length` bytes and return all of it: the name,
    # its NUL, then the buffer's untouched filler.
    if length <= 0:
        raise DriverError(1)
    name = _device(e.STATE, dev).name.encode()[:length - 1] + b"\0"
    return (name.ljust(length, b" "),)


@_api(1)
def cuDeviceGetUuid(dev: Any) -> tuple[Any]:
    return (t.make_uuid(_device(e.STATE, dev).uuid),)


@_api(1)
def cuDeviceTotalMem(dev: Any) -> tuple[int]:
    return (_device(e.STATE, dev).spec.total_memory,)


@_api(1)
def cuDeviceGetAttribute(attrib: Any, dev: Any) -> tuple[int]:
    return (_device(e.STATE, dev).attributes.get(int(attrib), 0),)


@_api(1)
def cuDeviceCanAccessPeer(dev: Any, peerDev: Any) -> tuple[int]:
    st = e.STATE
    return (int(_device(st, dev).can_access(_device(st, peerDev))),)


@_api(2)
def cuDevicePrimaryCtxGetState(dev: Any) -> tuple[int, int]:
    ctx = _device(e.STATE, dev).context
    return (ctx.flags, int(ctx.active))


@_api()
def cuDevicePrimaryCtxSetFlags(dev: Any, flags: int) -> tuple[()]:
    ctx = _device(e.STATE, dev).context
    flags = m.as_int(flags)
    if flags & ~0xFF or (flags & 7) not in (0, 1, 2, 4):
        raise DriverError(1)
    ctx.flags = flags
    return ()


@_api(1)
def cuDevicePrimaryCtxRetain(dev: Any) -> tuple[Any]:
    st = e.STATE
    ctx = _device(st, dev).context
    with st.lock:
        ctx.refcount += 1
        ctx.active = True
    return (CUcontext(ctx.handle),)


@_api()
def cuDevicePrimaryCtxRelease(dev: Any) -> tuple[()]:
    st = e.STATE
    ctx = _device(st, dev).context
    with st.lock:
        if ctx.refcount == 0:
            raise e.fail(201, f"primary context of device {ctx.device.ordinal} is not retained")
        ctx.refcount -= 1
        if ctx.refcount == 0:
            st.deactivate_locked(ctx)
    return ()


@_api()
def cuCtxSetCurrent(ctx: Any) -> tuple[()]:
    st = e.STATE
    value = m.as_int(ctx)
    st.tls.ctx = None if value == 0 else _lookup(st.contexts, value, "context")
    return ()


@_api(1)
def cuCtxGetCurrent() -> tuple[Any]:
    ctx = getattr(e.STATE.tls, "ctx", None)
    return (CUcontext(ctx.handle if ctx is not None else 0),)


@_api()
def cuCtxSynchronize() -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    with st.cv:
        st.cv.wait_for(lambda: st.idle_locked(st.streams_of_locked(ctx)) or ctx.sticky is not None)
        streams = st.streams_of_locked(ctx)
        code = ctx.sticky or ctx.legacy_error or next((s.async_error for s in streams if s.async_error), None)
        ctx.legacy_error = None
        for stream in streams:
            stream.async_error = None
    if code:
        raise DriverError(code)
    return ()


@_api()
def cuCtxEnablePeerAccess(peerContext: Any, Flags: int) -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    peer = st.contexts.get(m.as_int(peerContext))
    if m.as_int(Flags) != 0:
        raise DriverError(1)
    if peer is None or peer is ctx or not peer.active:
        raise DriverError(201)
    if not ctx.device.can_access(peer.device):
        raise DriverError(217)
    with st.lock:
        if peer.handle in ctx.peers:
            raise DriverError(704)
        ctx.peers.add(peer.handle)
    return ()


_MESSAGES = {
    0: "no error", 1: "invalid argument", 2: "out of memory", 3: "initialization error",
    100: "no CUDA-capable device is detected", 101: "invalid device ordinal", 200: "device kernel image is invalid",
    201: "invalid device context", 209: "no kernel image is available for execution on the device",
    217: "peer access is not supported between these two devices", 218: "a PTX JIT compilation failed",
    400: "invalid resource handle", 500: "named symbol not found", 600: "device not ready",
    700: "an illegal memory access was encountered", 701: "too many resources requested for launch",
    704: "peer access is already enabled", 710: "device-side assert triggered",
    715: "an illegal instruction was encountered", 716: "misaligned address", 719: "unspecified launch failure",
    801: "operation not supported", 999: "unknown error",
}


@_api(1, needs_init=False)
def cuGetErrorName(error: Any) -> tuple[bytes]:
    code = t.result(int(error))
    if isinstance(code, int) and not hasattr(code, "name"):
        raise DriverError(1)
    return (code.name.encode(),)


@_api(1, needs_init=False)
def cuGetErrorString(error: Any) -> tuple[bytes]:
    code = t.result(int(error))
    if isinstance(code, int) and not hasattr(code, "name"):
        raise DriverError(1)
    text = _MESSAGES.get(int(code)) or code.name.removeprefix("CUDA_ERROR_").replace("_", " ").lower()
    return (text.encode(),)


# ---- memory ----------------------------------------------------------------------------------------

def _allocate(size: Any, kind: str) -> e.Allocation:
    st = e.STATE
    ctx = st.current()
    size = m.unsigned(size)
    if size == 0:
        raise e.fail(1, f"cannot allocate {size} bytes")
    return st.allocate(ctx.device, size, kind)


@_api(1)
def cuMemAlloc(bytesize: int) -> tuple[Any]:
    return (CUdeviceptr(_allocate(bytesize, "device").ptr),)


@_api(1)
def cuMemAllocHost(bytesize: int) -> tuple[int]:
    return (_allocate(bytesize, "host").ptr,)


@_api(1)
def cuMemAllocManaged(bytesize: int, flags: int) -> tuple[Any]:
    if m.as_int(flags) not in (1, 2):  # CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST
        raise DriverError(1)
    return (CUdeviceptr(_allocate(bytesize, "managed").ptr),)


def _free(ptr: Any, kinds: tuple[str, ...]) -> tuple[()]:
    st = e.STATE
    st.current()
    address = m.as_int(ptr) if "device" in kinds else m.address(ptr)
    with st.lock:
        alloc = st.allocations.get(address)
        if alloc is None or alloc.kind not in kinds:
            raise e.fail(1, f"{address:#x} is not the start of a live {'/'.join(kinds)} allocation")
        st.release_locked(alloc)
    return ()


@_api()
def cuMemFree(dptr: Any) -> tuple[()]:
    return _free(dptr, ("device", "managed"))


@_api()
def cuMemFreeHost(p: Any) -> tuple[()]:
    return _free(p, ("host",))


@_api()
def cuMemHostRegister(p: Any, bytesize: int, Flags: int) -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    host, size, flags = m.address(p), m.unsigned(bytesize), m.unsigned(Flags, 32, "unsigned int")
    if not host or not size or flags & ~0xF:
        raise e.fail(1, f"cuMemHostRegister({host:#x}, {size}, {flags:#x}): a null pointer, no bytes or unknown flags")
    if flags & CU_MEMHOSTREGISTER_IOMEMORY:
        raise e.fail(801, "cuMemHostRegister: the stand-in has no I/O memory to map")
    st.register_host(host, size, flags, ctx)
    return ()


@_api()
def cuMemHostUnregister(p: Any) -> tuple[()]:
    st = e.STATE
    st.current()
    host = m.address(p)
    with st.lock:
        if st.unregister_host_locked(host) is None:
            raise e.fail(713, f"cuMemHostUnregister: {host:#x} is not the base of registered host memory")
    return ()


@_api(1)
def cuMemHostGetDevicePointer(p: Any, Flags: int) -> tuple[Any]:
    st = e.STATE
    ctx = st.current()
    host = m.address(p)
    if m.unsigned(Flags, 32, "unsigned int") != 0:
        raise e.fail(1, "cuMemHostGetDevicePointer: Flags must be 0")
    with st.lock:
        registration = st.registration_locked(host)
        if registration is None:
            alloc = st.find_locked(host, 1)
            if alloc is not None and alloc.kind == "host":
                return (CUdeviceptr(host),)  # unified addressing: pinned allocations keep their address
            raise e.fail(1, f"cuMemHostGetDevicePointer: {host:#x} is not in mapped, page-locked host memory")
    if not registration.flags & CU_MEMHOSTREGISTER_DEVICEMAP:
        raise e.fail(1, f"cuMemHostGetDevicePointer: {host:#x} was registered without CU_MEMHOSTREGISTER_DEVICEMAP")
    if registration.ctx is not ctx and not registration.flags & CU_MEMHOSTREGISTER_PORTABLE:
        raise e.fail(1, f"cuMemHostGetDevicePointer: {host:#x} was registered for another context only "
                        f"(without CU_MEMHOSTREGISTER_PORTABLE)")
    return (CUdeviceptr(registration.device_ptr + (host - registration.host)),)


def _copy(dst: Any, src: Any, size: Any, stream: Any, check_dst: bool, check_src: bool) -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    queue, run_ctx = _stream(st, stream, ctx)
    # Device pointers convert like CUdeviceptr (int()); host pointers like void* (ints or buffers).
    to = m.as_int(dst) if check_dst else m.address(dst)
    frm = m.as_int(src) if check_src else m.address(src)
    count = m.unsigned(size)
    if count and not (to and frm):
        raise e.fail(1, "a copy to or from a null pointer")
    if check_dst:
        to = _check_range(st, to, count, "destination")
    if check_src:
        frm = _check_range(st, frm, count, "source")
    keep = (dst, src)  # a caller's buffer objects stay alive until the copy ran

    def run() -> None:
        if count:
            ctypes.memmove(to, frm, count)

    st.enqueue(queue, run_ctx, e.Op("copy", run, keep=keep))
    return ()


@_api()
def cuMemcpyHtoDAsync(dstDevice: Any, srcHost: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstDevice, srcHost, ByteCount, hStream, True, False)


@_api()
def cuMemcpyDtoHAsync(dstHost: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstHost, srcDevice, ByteCount, hStream, False, True)


@_api()
def cuMemcpyDtoDAsync(dstDevice: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstDevice, srcDevice, ByteCount, hStream, True, True)


@_api()
def cuMemcpyHtoD(dstDevice: Any, srcHost: Any, ByteCount: int) -> tuple[()]:
    return _copy(dstDevice, srcHost, ByteCount, 0, True, False)


@_api()
def cuMemcpyDtoH(dstHost: Any, srcDevice: Any, ByteCount: int) -> tuple[()]:
    return _copy(dstHost, srcDevice, ByteCount, 0, False, True)


@_api()
def cuMemcpyPeerAsync(dstDevice: Any, dstContext: Any, srcDevice: Any, srcContext: Any, ByteCount: int,
                      hStream: Any) -> tuple[()]:
    st = e.STATE
    for handle in (dstContext, srcContext):
        other = st.contexts.get(m.as_int(handle))
        if other is None or not other.active:
            raise e.fail(201, f"peer copy names an inactive or unknown context {m.as_int(handle):#x}")
    return _copy(dstDevice, srcDevice, ByteCount, hStream, True, True)


def _memset(width: int, dst: Any, value: Any, count: Any, stream: Any, pitch: int = 0,
            height: int = 1) -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    queue, run_ctx = _stream(st, stream, ctx)
    address, count, height, pitch = m.as_int(dst), m.unsigned(count), m.unsigned(height), m.unsigned(pitch)
    value = m.unsigned(value, 8 * width, {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}[width])
    row = count * width
    if address % width or (height > 1 and pitch < row):
        raise e.fail(1, f"memset of {width}-byte values at {address:#x} (pitch {pitch}) is misaligned")
    extent = pitch * (height - 1) + row if count and height else 0
    address = _check_range(st, address, extent, "memset destination")
    pattern = value.to_bytes(width, "little") * count

    def run() -> None:
        if not extent:
            return
        if height == 1:
            ctypes.memmove(address, pattern, row)
            return
        import numpy as np  # a strided fill of many rows, without a Python loop

        base = np.frombuffer(memoryview((ctypes.c_uint8 * extent).from_address(address)), dtype=np.uint8)
        rows = np.lib.stride_tricks.as_strided(base, shape=(height, row), strides=(pitch, 1))
        rows[:] = np.frombuffer(pattern, dtype=np.uint8)

    st.enqueue(queue, run_ctx, e.Op("memset", run))
    return ()


@_api()
def cuMemsetD8Async(dstDevice: Any, uc: int, N: int, hStream: Any) -> tuple[()]:
    return _memset(1, dstDevice, uc, N, hStream)


@_api()
def cuMemsetD16Async(dstDevice: Any, us: int, N: int, hStream: Any) -> tuple[()]:
    return _memset(2, dstDevice, us, N, hStream)


@_api()
def cuMemsetD32Async(dstDevice: Any, ui: int, N: int, hStream: Any) -> tuple[()]:
    return _memset(4, dstDevice, ui, N, hStream)


@_api()
def cuMemsetD2D8Async(dstDevice: Any, dstPitch: int, uc: int, Width: int, Height: int, hStream: Any) -> tuple[()]:
    return _memset(1, dstDevice, uc, Width, hStream, dstPitch, Height)


@_api()
def cuMemsetD2D16Async(dstDevice: Any, dstPitch: int, us: int, Width: int, Height: int,
                       hStream: Any) -> tuple[()]:
    return _memset(2, dstDevice, us, Width, hStream, dstPitch, Height)


@_api()
def cuMemsetD2D32Async(dstDevice: Any, dstPitch: int, ui: int, Width: int, Height: int,
                       hStream: Any) -> tuple[()]:
    return _memset(4, dstDevice, ui, Width, hStream, dstPitch, Height)


# ---- modules and kernels -----------------------------------------------------------------------------

@_api(1)
def cuModuleLoadDataEx(image: Any, numOptions: int, options: Any, optionValues: Any) -> tuple[Any]:
    st = e.STATE
    jit = m.jit_options(numOptions, options, optionValues)
    ctx = st.current()
    error_log, error_size = int(CUjit_option.CU_JIT_ERROR_LOG_BUFFER), int(
        CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
    if image is None or (isinstance(image, int) and image == 0):
        raise DriverError(1)
    data = _images.read_at(image) if isinstance(image, int) else bytes(memoryview(image))
    device = ctx.device
    try:
        info = _images.parse(data, st.binary_kernels, st.binary_globals)
        sm = device.attr("COMPUTE_CAPABILITY_MAJOR") * 10 + device.attr("COMPUTE_CAPABILITY_MINOR")
        if info.target_sm is not None and info.target_sm > sm:
            raise _images.ImageError("CUDA_ERROR_INVALID_PTX", f"ptxas fatal : SM version specified by .target "
                                     f"(sm_{info.target_sm}) is higher than the device's (sm_{sm})")
    except _images.ImageError as err:
        m.write_log(jit, error_log, error_size, err.log)
        raise e.fail(int(getattr(CUresult, err.code_name)), err.log or err.code_name) from None
    module = m.Module(e.new_handle(), ctx)
    try:
        for name, variable in info.globals.items():
            alloc = st.allocate(device, variable.size, "global")
            ctypes.memmove(alloc.ptr, variable.init, len(variable.init))
            module.globals[name] = alloc
    except DriverError:
        with st.lock:
            for alloc in module.globals.values():
                st.release_locked(alloc)
        raise
    shared = device.attr("MAX_SHARED_MEMORY_PER_BLOCK")
    with e.control_lock:
        registered = dict(e.kernels)
    with st.lock:
        for name, kernel in info.kernels.items():
            impl = registered.get(name)
            limit = kernel.max_threads or (impl.max_threads if impl else None) or device.attr("MAX_THREADS_PER_BLOCK")
            params = kernel.params if kernel.params is not None else (impl.params if impl else None)
            function = m.Function(e.new_handle(), module, name, params, limit, shared)
            module.functions[name] = function
            st.functions[function.handle] = function
        st.modules[module.handle] = module
    return (CUmodule(module.handle),)


@_api()
def cuModuleUnload(hmod: Any) -> tuple[()]:
    st = e.STATE
    st.current()
    with st.lock:
        module = _lookup(st.modules, hmod, "module")
        del st.modules[module.handle]
        module.unloaded = True
        for function in module.functions.values():
            st.functions.pop(function.handle, None)
        for alloc in module.globals.values():
            st.release_locked(alloc)
    return ()


def _symbol(hmod: Any, name: Any) -> tuple[m.Module, str]:
    if not isinstance(name, bytes):
        raise TypeError(f"expected bytes, {type(name).__name__} found")
    st = e.STATE
    st.current()
    with st.lock:
        return _lookup(st.modules, hmod, "module"), name.decode()


@_api(1)
def cuModuleGetFunction(hmod: Any, name: bytes) -> tuple[Any]:
    module, text = _symbol(hmod, name)
    function = module.functions.get(text)
    if function is None:
        raise e.fail(500, f"no kernel {text!r} in the module")
    return (CUfunction(function.handle),)


@_api(2)
def cuModuleGetGlobal(hmod: Any, name: bytes) -> tuple[Any, int]:
    module, text = _symbol(hmod, name)
    alloc = module.globals.get(text)
    if alloc is None:
        raise e.fail(500, f"no global {text!r} in the module")
    return (CUdeviceptr(alloc.ptr), alloc.size)


def _function(hfunc: Any) -> m.Function:
    st = e.STATE
    st.current()
    with st.lock:
        return _lookup(st.functions, hfunc, "function")


@_api()
def cuFuncSetAttribute(hfunc: Any, attrib: Any, value: int) -> tuple[()]:
    function = _function(hfunc)
    which, value = int(attrib), int(value)
    device = function.module.ctx.device
    if which == 8:  # MAX_DYNAMIC_SHARED_SIZE_BYTES
        if not 0 <= value <= device.attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"):
            raise e.fail(1, f"dynamic shared memory {value} is above the device's opt-in limit")
        function.max_dynamic_shared = value
    elif which == 9:  # PREFERRED_SHARED_MEMORY_CARVEOUT
        if not -1 <= value <= 100:
            raise DriverError(1)
        function.carveout = value
    elif which < 8:  # read-only attributes
        raise DriverError(1)
    return ()


@_api(1)
def cuFuncGetAttribute(attrib: Any, hfunc: Any) -> tuple[int]:
    function = _function(hfunc)
    device = function.module.ctx.device
    arch = device.attr("COMPUTE_CAPABILITY_MAJOR") * 10 + device.attr("COMPUTE_CAPABILITY_MINOR")
    values = {0: function.max_threads, 4: 32, 5: arch, 6: arch, 8: function.max_dynamic_shared, 9: function.carveout}
    return (values.get(int(attrib), 0),)


@_api()
def cuLaunchKernel(f: Any, gridDimX: int, gridDimY: int, gridDimZ: int, blockDimX: int, blockDimY: int,
                   blockDimZ: int, sharedMemBytes: int, hStream: Any, kernelParams: Any, extra: Any) -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    function = _function(f)
    queue, _ = _stream(st, hStream, ctx)
    if function.module.ctx is not ctx or (queue is not None and queue.ctx is not ctx):
        raise e.fail(400, "cuLaunchKernel: the function and the stream must belong to the current context")
    extra_address = int(extra)  # typed void* in the bindings: an int (None is a TypeError there too)
    grid, block = (int(gridDimX), int(gridDimY), int(gridDimZ)), (int(blockDimX), int(blockDimY), int(blockDimZ))
    device = ctx.device
    grid_limits = [device.attr(f"MAX_GRID_DIM_{axis}") for axis in "XYZ"]
    block_limits = [device.attr(f"MAX_BLOCK_DIM_{axis}") for axis in "XYZ"]
    threads = math.prod(block)
    if not all(1 <= g <= limit for g, limit in zip(grid, grid_limits)) or not all(
            1 <= b <= limit for b, limit in zip(block, block_limits)) or threads > device.attr(
            "MAX_THREADS_PER_BLOCK"):
        raise e.fail(1, f"launch of {function.name!r}: grid {grid} / block {block} outside the device limits")
    if threads > function.max_threads:
        raise e.fail(701, f"launch of {function.name!r}: {threads} threads > the kernel's {function.max_threads}")
    shared = int(sharedMemBytes)
    if shared > function.max_dynamic_shared:
        raise e.fail(1, f"launch of {function.name!r}: {shared} B dynamic shared memory > "
                     f"{function.max_dynamic_shared} B (raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)")
    has_params = kernelParams is not None and not (isinstance(kernelParams, int) and kernelParams == 0)
    if has_params and extra_address:
        raise e.fail(1, "cuLaunchKernel: kernelParams and extra are both given")
    with e.control_lock:
        impl = e.kernels.get(function.name)
    if function.params is None and impl is not None:
        function.params = impl.params
    params = m.extra_blob(extra_address) if extra_address else (
        m.packed_params(kernelParams, function) if has_params else b"")
    ordinal = device.ordinal

    def run() -> None:
        if impl is not None:
            impl.fn(params, grid, block, shared, ordinal)

    st.enqueue(queue, ctx, e.Op("kernel", run))
    return ()


@_api(2)
def cuOccupancyMaxPotentialBlockSize(func: Any, blockSizeToDynamicSMemSize: Any, dynamicSMemSize: int,
                                     blockSizeLimit: int) -> tuple[int, int]:
    function = _function(func)  # blockSizeToDynamicSMemSize is not simulated: dynamicSMemSize counts
    device = function.module.ctx.device
    dynamic = m.as_int(dynamicSMemSize)
    if dynamic > function.max_dynamic_shared:
        return (0, 0)
    block = min(function.max_threads, m.as_int(blockSizeLimit) or function.max_threads)
    warp = device.attr("WARP_SIZE") or 1
    block = block - block % warp if block >= warp else block
    per_sm = min(device.attr("MAX_THREADS_PER_MULTIPROCESSOR") // block, device.attr("MAX_BLOCKS_PER_MULTIPROCESSOR"))
    if dynamic:
        per_sm = min(per_sm, device.attr("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR") // dynamic)
    return (max(1, per_sm) * device.attr("MULTIPROCESSOR_COUNT"), block)


# ---- streams, host functions, events ---------------------------------------------------------------

@_api(1)
def cuStreamCreate(Flags: int) -> tuple[Any]:
    st = e.STATE
    if m.as_int(Flags) & ~1:
        raise DriverError(1)
    ctx = st.current()
    stream = e.Stream(st, ctx, m.as_int(Flags))
    with st.lock:
        st.streams[stream.handle] = stream
        st.live.add(stream)
    return (CUstream(stream.handle),)


@_api()
def cuStreamDestroy(hStream: Any) -> tuple[()]:
    st = e.STATE
    st.current()
    with st.cv:
        stream = _lookup(st.streams, hStream, "stream")
        del st.streams[stream.handle]
        stream.destroyed = True  # its worker finishes the queued work, then exits
        if stream.thread.ident is None:
            st.live.discard(stream)
        st.cv.notify_all()
    return ()


def _watched(queue: e.Stream | None, ctx: e.Context) -> list[e.Stream]:
    """What a sync or query of ``queue`` waits for: the stream, or for the legacy stream the
    context's blocking streams (call with the lock held)."""
    return [queue] if queue is not None else [s for s in e.STATE.streams_of_locked(ctx) if not s.nonblocking]


def _stream_error(stream: e.Stream | None, ctx: e.Context) -> int | None:
    """The error a sync/query reports once the stream is drained (clears a non-sticky one)."""
    if ctx.sticky is not None:
        return ctx.sticky
    if stream is None:
        code, ctx.legacy_error = ctx.legacy_error, None
    else:
        code, stream.async_error = stream.async_error, None
    return code


@_api()
def cuStreamSynchronize(hStream: Any) -> tuple[()]:
    st = e.STATE
    ctx = st.current(allow_sticky=True)
    queue, run_ctx = _stream(st, hStream, ctx)
    with st.cv:
        st.cv.wait_for(lambda: st.idle_locked(_watched(queue, ctx)) or run_ctx.sticky is not None)
        code = _stream_error(queue, run_ctx)
    if code:
        raise DriverError(code)
    return ()


@_api()
def cuStreamQuery(hStream: Any) -> tuple[()]:
    st = e.STATE
    ctx = st.current(allow_sticky=True)
    queue, run_ctx = _stream(st, hStream, ctx)
    with st.lock:
        if run_ctx.sticky is None and not st.idle_locked(_watched(queue, ctx)):
            raise DriverError(600)
        code = _stream_error(queue, run_ctx)
    if code:
        raise DriverError(code)
    return ()


@_api()
def cuStreamWaitEvent(hStream: Any, hEvent: Any, Flags: int) -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    if m.as_int(Flags) != 0:
        raise DriverError(1)
    queue, run_ctx = _stream(st, hStream, ctx)
    with st.lock:
        event = _lookup(st.events, hEvent, "event")
        seq = event.recorded
    if seq:  # an event never recorded stands for no work: nothing to wait for
        st.enqueue(queue, run_ctx, e.Op("wait", event=event, seq=seq))
    return ()


@_api()
def cuLaunchHostFunc(hStream: Any, fn: Any, userData: Any) -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    queue, run_ctx = _stream(st, hStream, ctx)
    function = m.as_int(fn)
    if not function:
        raise DriverError(1)
    data = m.address(userData)
    call = _HOST_FN(function)

    def run() -> None:
        call(data or None)  # through ctypes: the GIL is released around the C call

    st.enqueue(queue, run_ctx, e.Op("host", run, keep=userData))
    return ()


@_api(1)
def cuEventCreate(Flags: int) -> tuple[Any]:
    st = e.STATE
    if m.as_int(Flags) & ~7:
        raise DriverError(1)
    ctx = st.current()
    event = e.Event(e.new_handle(), ctx, m.as_int(Flags))
    with st.lock:
        st.events[event.handle] = event
    return (CUevent(event.handle),)


@_api()
def cuEventDestroy(hEvent: Any) -> tuple[()]:
    st = e.STATE
    st.current()
    with st.lock:
        event = _lookup(st.events, hEvent, "event")
        del st.events[event.handle]  # work that records or waits on it still completes
    return ()


@_api()
def cuEventRecord(hEvent: Any, hStream: Any) -> tuple[()]:
    st = e.STATE
    ctx = st.current()
    queue, run_ctx = _stream(st, hStream, ctx)
    with st.lock:
        event = _lookup(st.events, hEvent, "event")
        if event.ctx is not run_ctx:
            raise e.fail(400, "cuEventRecord: the event and the stream belong to different contexts")
        event.recorded += 1
        seq = event.recorded
    st.enqueue(queue, run_ctx, e.Op("record", event=event, seq=seq))
    return ()


def _event(hEvent: Any) -> e.Event:
    st = e.STATE
    st.current(allow_sticky=True)
    with st.lock:
        event = _lookup(st.events, hEvent, "event")
    if event.ctx.sticky is not None:
        raise DriverError(event.ctx.sticky)
    return event


@_api()
def cuEventSynchronize(hEvent: Any) -> tuple[()]:
    st = e.STATE
    event = _event(hEvent)
    with st.cv:
        seq = event.recorded
        st.cv.wait_for(lambda: event.done >= seq or event.gone or event.ctx.sticky is not None)
        if event.ctx.sticky is not None:
            raise DriverError(event.ctx.sticky)
    return ()


@_api()
def cuEventQuery(hEvent: Any) -> tuple[()]:
    st = e.STATE
    event = _event(hEvent)
    with st.lock:
        if event.done < event.recorded:
            raise DriverError(600)
    return ()


@_api(1)
def cuEventElapsedTime(hStart: Any, hEnd: Any) -> tuple[float]:
    st = e.STATE
    start, end = _event(hStart), _event(hEnd)
    with st.lock:
        if not start.recorded or not end.recorded:
            raise e.fail(400, "cuEventElapsedTime: an event was never recorded")
        if (start.flags | end.flags) & 2:  # CU_EVENT_DISABLE_TIMING
            raise e.fail(400, "cuEventElapsedTime: an event was created with CU_EVENT_DISABLE_TIMING")
        if start.ctx is not end.ctx:
            raise e.fail(400, "cuEventElapsedTime: the events belong to different contexts")
        if start.done < start.recorded or end.done < end.recorded:
            raise DriverError(600)
        assert start.time is not None and end.time is not None
        return ((end.time - start.time) * 1000.0,)


def __getattr__(name: str) -> Any:
    """Other bindings names: enums and types come from the real module; driver calls the stand-in
    does not simulate fail loudly instead of silently reaching for a GPU."""
    if name.startswith("cu") and name[2:3].isupper():
        raise AttributeError(f"cuda_standin does not simulate {name}; add it to tests/cuda_standin/driver.py")
    if t.real is not None and not name.startswith("__"):
        return getattr(t.real, name)
    raise AttributeError(name)
