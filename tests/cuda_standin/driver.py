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
  the last release of a primary context, or ``cuDevicePrimaryCtxReset``, destroys what was made
  in it (host memory registered in it included), and the handle stays the same for the next
  retain (as for a real primary context); a reset leaves the context unretained (refcount 0);
- an event made with CU_EVENT_DISABLE_TIMING is recorded, synchronized, queried and waited for
  like any other, but ``cuEventElapsedTime`` with it is CUDA_ERROR_INVALID_HANDLE (as CUDA
  documents); host functions and events are counted and priced (``cuda_standin.costs()``);
- a sticky fault lasts for the process, as on the H100 (gpu-hardware-facts.md "Sticky faults"):
  ``cuDevicePrimaryCtxRelease`` succeeds and the state reads inactive, ``cuDevicePrimaryCtxRetain``
  then returns the fault, ``cuDevicePrimaryCtxReset`` succeeds and a retain after it still
  returns the fault, and so do ``cuMemAlloc`` and every call that needs the context, even while
  it is inactive; other devices are unaffected; only a fresh simulated driver
  (``cuda_standin.reset()``/``install()``: a new process) clears it. Unmeasured choices: a
  retain while the poisoned context is still retained returns the fault too, and calls on the
  released, poisoned context return the fault rather than CUDA_ERROR_INVALID_CONTEXT;
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

from typing import Any

from standin_common import operations as ops
from standin_common.controls import DriverError, fail

from . import _runtime as r
from . import _types as t
from ._convert import as_int
from ._kernels import (  # noqa: F401  # the bindings' names
    cuFuncGetAttribute,
    cuFuncGetParamInfo,
    cuFuncSetAttribute,
    cuLaunchKernel,
    cuModuleGetFunction,
    cuModuleGetGlobal,
    cuModuleLoadDataEx,
    cuModuleUnload,
    cuOccupancyMaxPotentialBlockSize,
)
from ._memory import (  # noqa: F401  # the bindings' names
    CU_MEMHOSTREGISTER_DEVICEMAP,
    CU_MEMHOSTREGISTER_IOMEMORY,
    CU_MEMHOSTREGISTER_PORTABLE,
    CU_MEMHOSTREGISTER_READ_ONLY,
    cuMemAlloc,
    cuMemAllocHost,
    cuMemAllocManaged,
    cuMemcpyDtoDAsync,
    cuMemcpyDtoH,
    cuMemcpyDtoHAsync,
    cuMemcpyHtoD,
    cuMemcpyHtoDAsync,
    cuMemcpyPeerAsync,
    cuMemFree,
    cuMemFreeHost,
    cuMemHostGetDevicePointer,
    cuMemHostRegister,
    cuMemHostUnregister,
    cuMemsetD2D8Async,
    cuMemsetD2D16Async,
    cuMemsetD2D32Async,
    cuMemsetD8Async,
    cuMemsetD16Async,
    cuMemsetD32Async,
    cuPointerGetAttribute,
)
from ._queues import (  # noqa: F401  # the bindings' names
    cuEventCreate,
    cuEventDestroy,
    cuEventElapsedTime,
    cuEventQuery,
    cuEventRecord,
    cuEventSynchronize,
    cuLaunchHostFunc,
    cuStreamCreate,
    cuStreamDestroy,
    cuStreamQuery,
    cuStreamSynchronize,
    cuStreamWaitEvent,
)
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
    CUmemorytype,
    CUmodule,
    CUpointer_attribute,
    CUresult,
    CUstream,
    CUstream_flags,
    CUuuid,
)

__standin__ = True  # lets tests (and _types) tell this module from the real one



# ---- initialisation, devices, errors ---------------------------------------------------------------

@r.api(needs_init=False)
def cuInit(Flags: int) -> tuple[()]:
    st = r.STATE
    if as_int(Flags) != 0:
        raise DriverError(1)
    if st.init_error is not None:
        raise DriverError(st.init_error)
    if not st.devices:
        raise DriverError(100)
    st.initialized = True
    return ()


@r.api(1, needs_init=False)
def cuDriverGetVersion() -> tuple[int]:
    return (r.STATE.driver_version,)


@r.api(1)
def cuDeviceGetCount() -> tuple[int]:
    return (len(r.STATE.devices),)


@r.api(1)
def cuDeviceGet(ordinal: int) -> tuple[Any]:
    return (CUdevice(r.device(r.STATE, ordinal).ordinal),)


@r.api(1)
def cuDeviceGetName(length: int, dev: Any) -> tuple[bytes]:
    # The bindings hand the driver a buffer of `length` bytes and return all of it: the name,
    # its NUL, then the buffer's untouched filler.
    if length <= 0:
        raise DriverError(1)
    name = r.device(r.STATE, dev).name.encode()[:length - 1] + b"\0"
    return (name.ljust(length, b" "),)


@r.api(1)
def cuDeviceGetUuid(dev: Any) -> tuple[Any]:
    return (t.make_uuid(r.device(r.STATE, dev).uuid),)


@r.api(1)
def cuDeviceTotalMem(dev: Any) -> tuple[int]:
    return (r.device(r.STATE, dev).spec.total_memory,)


@r.api(1)
def cuDeviceGetAttribute(attrib: Any, dev: Any) -> tuple[int]:
    return (r.device(r.STATE, dev).attributes.get(int(attrib), 0),)


@r.api(1)
def cuDeviceCanAccessPeer(dev: Any, peerDev: Any) -> tuple[int]:
    st = r.STATE
    return (int(r.device(st, dev).can_access(r.device(st, peerDev))),)


@r.api(2)
def cuDevicePrimaryCtxGetState(dev: Any) -> tuple[int, int]:
    ctx = r.device(r.STATE, dev).context
    return (ctx.flags, int(ctx.active))


@r.api()
def cuDevicePrimaryCtxSetFlags(dev: Any, flags: int) -> tuple[()]:
    ctx = r.device(r.STATE, dev).context
    flags = as_int(flags)
    if flags & ~0xFF or (flags & 7) not in (0, 1, 2, 4):
        raise DriverError(1)
    ctx.flags = flags
    return ()


@r.api(1)
def cuDevicePrimaryCtxRetain(dev: Any) -> tuple[Any]:
    st = r.STATE
    ctx = r.device(st, dev).context
    with st.lock:
        if ctx.sticky is not None:  # the H100: a retain after a sticky fault returns it, for ever
            raise fail(ctx.sticky, f"cuDevicePrimaryCtxRetain: device {ctx.device.ordinal} had a sticky fault; "
                                   f"nothing in this process recovers it")
        ctx.refcount += 1
        ctx.active = True
    return (CUcontext(ctx.handle),)


@r.api()
def cuDevicePrimaryCtxReset(dev: Any) -> tuple[()]:
    st = r.STATE
    ctx = r.device(st, dev).context
    with st.lock:
        ctx.refcount = 0
        if ctx.active:
            st.deactivate_locked(ctx)
    return ()


@r.api()
def cuDevicePrimaryCtxRelease(dev: Any) -> tuple[()]:
    st = r.STATE
    ctx = r.device(st, dev).context
    with st.lock:
        if ctx.refcount == 0:
            raise fail(201, f"primary context of device {ctx.device.ordinal} is not retained")
        ctx.refcount -= 1
        if ctx.refcount == 0:
            st.deactivate_locked(ctx)
    return ()


@r.api()
def cuCtxSetCurrent(ctx: Any) -> tuple[()]:
    st = r.STATE
    value = as_int(ctx)
    st.tls.ctx = None if value == 0 else r.lookup(st.contexts, value, "context")
    return ()


@r.api(1)
def cuCtxGetCurrent() -> tuple[Any]:
    ctx = getattr(r.STATE.tls, "ctx", None)
    return (CUcontext(ctx.handle if ctx is not None else 0),)


@r.api()
def cuCtxSynchronize() -> tuple[()]:
    st = r.STATE
    ops.synchronize_context(st, st.current())
    return ()


@r.api()
def cuCtxEnablePeerAccess(peerContext: Any, Flags: int) -> tuple[()]:
    st = r.STATE
    ctx = st.current()
    peer = st.contexts.get(as_int(peerContext))
    if as_int(Flags) != 0:
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


@r.api(1, needs_init=False)
def cuGetErrorName(error: Any) -> tuple[bytes]:
    code = t.result(int(error))
    if isinstance(code, int) and not hasattr(code, "name"):
        raise DriverError(1)
    return (code.name.encode(),)


@r.api(1, needs_init=False)
def cuGetErrorString(error: Any) -> tuple[bytes]:
    code = t.result(int(error))
    if isinstance(code, int) and not hasattr(code, "name"):
        raise DriverError(1)
    text = _MESSAGES.get(int(code)) or code.name.removeprefix("CUDA_ERROR_").replace("_", " ").lower()
    return (text.encode(),)


def __getattr__(name: str) -> Any:
    """Other bindings names: enums and types come from the real module; driver calls the stand-in
    does not simulate fail loudly instead of silently reaching for a GPU."""
    if name.startswith("cu") and name[2:3].isupper():
        raise AttributeError(f"cuda_standin does not simulate {name}; add it to tests/cuda_standin/driver.py")
    if t.real is not None and not name.startswith("__"):
        return getattr(t.real, name)
    raise AttributeError(name)
