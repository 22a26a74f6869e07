"""A stand-in for hip-python's ``hip.hip`` module: a TEST DOUBLE, not AMD code.

It follows the HIP runtime's documented behaviour on the host, with hip-python's calling
convention: every function takes the same parameters as hip-python 10 (converted the same way:
an out-of-range C integer is an OverflowError, a wrong type a TypeError) and returns
``(hipError_t, *outputs)``. Handles and device pointers it returns are plain ints (hip-python
accepts ints for every handle parameter). A name it does not simulate raises AttributeError.

Simulated, as HIP documents it: the runtime initialises itself on the first call; a current
device per thread (``hipSetDevice``; a new thread starts at device 0) on which memory, modules,
streams and events are created; work runs on the stream's device whatever device is current; the
null stream (None or 0) is the current device's legacy stream; streams run in submission order
on their own thread (``hipStreamQuery`` says hipErrorNotReady while work is pending); events
with timestamps; host functions called through their C address on the stream's thread; kernels
run by Python bodies registered by name; sticky faults after which every call touching the
device fails.

Deliberate simplifications and choices (pinned in tests/test_hip_standin.py):

- the null stream runs its work synchronously in the calling thread, after the device's blocking
  streams have drained; a non-sticky kernel fault is returned once, by the next sync or query of
  its stream; a sticky one by every later call touching the device (hipSetDevice and device
  queries, which HIP answers from cached properties, still work);
- a stream handle HIP does not know is hipErrorContextIsDestroyed (HIP's stream check), any other
  unknown handle hipErrorInvalidHandle;
- hipFree and hipHostFree wait for the allocation's device to finish its work (HIP: "performs an
  implicit hipDeviceSynchronize"); freeing an unknown pointer, or a host pointer with hipFree
  (a device pointer with hipHostFree), is hipErrorInvalidValue;
- HIP calls from a host function return hipErrorNotSupported (HIP: "must not make any HIP API calls");
- an event made with hipEventDisableTiming is recorded, synchronized, queried and waited for like
  any other, but ``hipEventElapsedTime`` with it is hipErrorInvalidHandle (HIP documents it; clr
  hip_event.cpp ``Event::elapsedTime``); host functions and events are counted and priced
  (``hip_standin.costs()``);
- a sticky fault lasts for the process: hipDeviceReset succeeds (HIP documents hipSuccess only)
  and destroys the device's streams, events, modules and memory, but the device stays poisoned
  until the stand-in is reset (a new process). On a real AMD GPU a device exception aborts the
  process (ROCclr rocdevice.cpp ``callbackQueue`` calls ``abort()``), so nothing recovers either;
- ``hipPointerGetAttributes`` describes HIP allocations (hipMalloc: Device; hipHostMalloc and
  registered memory: Host, with hostPointer; hipMallocManaged: Managed, isManaged 1) with the
  device, device pointer and allocation flags, and, as ROCm 6+ does (clr hip_memory.cpp, "Return
  success for unregistered ptr"), answers hipSuccess with type hipMemoryTypeUnregistered and
  device hipInvalidDeviceId for host memory HIP does not know (ROCm 5 and HIP's documentation
  still say hipErrorInvalidValue); a null pointer is hipErrorInvalidValue;
- ``init_error`` is returned by hipInit and by every call that would initialise the runtime;
- hipModuleLaunchKernel follows HIP's launch checks (see ``_kernels``): the stream must be the
  current device's, and a block beyond the kernel's launch bounds is hipErrorLaunchFailure;
- registered host memory (``hipHostRegister``) is the runtime's, for every device (HIP has one
  context: "portable" always holds) and always mapped: a range that overlaps registered memory
  or a ``hipHostMalloc`` allocation is hipErrorHostMemoryAlreadyRegistered;
  ``hipHostUnregister`` takes the base address given to the register call (anything else is
  hipErrorHostMemoryNotRegistered); ``hipHostGetDevicePointer`` gives the device address of any
  byte of a registration or of a ``hipHostMalloc`` allocation, hipErrorInvalidValue otherwise.
  The device address is the host address unless a device reports
  hipDeviceAttributeCanUseHostPointerForRegisteredMem 0 (see standin_common.memory).
"""
# ruff: noqa: N803  # parameter names follow hip-python (deviceId, sizeBytes, ...)

from __future__ import annotations

from typing import Any

from standin_common import operations as ops
from standin_common.controls import DriverError, fail

from . import _runtime as r
from ._convert import CInt, CUInt, DeviceAttributeArg, ErrorArg, Ptr, SizeT
from ._kernels import (  # noqa: F401  # hip-python's names
    hipFuncGetAttribute,
    hipModuleGetFunction,
    hipModuleGetGlobal,
    hipModuleLaunchKernel,
    hipModuleLoadData,
    hipModuleOccupancyMaxPotentialBlockSize,
    hipModuleUnload,
)
from ._memory import (  # noqa: F401  # hip-python's names
    hipMemcpyDtoDAsync,
    hipMemcpyDtoHAsync,
    hipMemcpyHtoDAsync,
    hipMemcpyPeerAsync,
    hipMemsetD2D8Async,
    hipMemsetD2D16Async,
    hipMemsetD2D32Async,
    hipMemsetD8Async,
    hipMemsetD16Async,
    hipMemsetD32Async,
)
from ._queues import (  # noqa: F401  # hip-python's names
    hipEventCreateWithFlags,
    hipEventDestroy,
    hipEventElapsedTime,
    hipEventQuery,
    hipEventRecord,
    hipEventSynchronize,
    hipLaunchHostFunc,
    hipStreamCreateWithFlags,
    hipStreamDestroy,
    hipStreamQuery,
    hipStreamSynchronize,
    hipStreamWaitEvent,
)
from ._types import (  # noqa: F401  # hip-python's names
    HIP_LAUNCH_PARAM_BUFFER_POINTER,
    HIP_LAUNCH_PARAM_BUFFER_SIZE,
    HIP_LAUNCH_PARAM_END,
    CStr,
    hipDeviceAttribute_t,
    hipDeviceProp_t,
    hipDeviceScheduleAuto,
    hipDeviceScheduleBlockingSync,
    hipDeviceScheduleSpin,
    hipDeviceScheduleYield,
    hipError_t,
    hipEventBlockingSync,
    hipEventDefault,
    hipEventDisableTiming,
    hipEventInterprocess,
    hipEventReleaseToDevice,
    hipEventReleaseToSystem,
    hipExtHostRegisterCoarseGrained,
    hipFunction_attribute,
    hipHostMallocCoherent,
    hipHostMallocDefault,
    hipHostMallocMapped,
    hipHostMallocNonCoherent,
    hipHostMallocNumaUser,
    hipHostMallocPortable,
    hipHostMallocWriteCombined,
    hipHostRegisterDefault,
    hipHostRegisterIoMemory,
    hipHostRegisterMapped,
    hipHostRegisterPortable,
    hipInvalidDeviceId,
    hipMemAttachGlobal,
    hipMemAttachHost,
    hipMemAttachSingle,
    hipMemoryType,
    hipPointerAttribute_t,
    hipStreamDefault,
    hipStreamNonBlocking,
    hipUUID_t,
    message,
)

__standin__ = True  # lets tests tell this module from the real one


# ---- initialisation, versions, errors -------------------------------------------------------------

@r.api(needs_init=False)
def hipInit(flags: CUInt) -> tuple[()]:
    if flags != 0:
        raise fail(1, "hipInit: flags must be 0")
    r.initialize(r.STATE)
    return ()


@r.api(0, needs_init=False)
def hipDriverGetVersion() -> tuple[int]:
    return (r.STATE.driver_version,)


@r.api(0, needs_init=False)
def hipRuntimeGetVersion() -> tuple[int]:
    return (r.STATE.driver_version,)


@r.api(None, needs_init=False)
def hipGetErrorName(hip_error: ErrorArg) -> tuple[CStr]:
    return (CStr(hipError_t(int(hip_error)).name.encode()),)


@r.api(None, needs_init=False)
def hipGetErrorString(hipError: ErrorArg) -> tuple[CStr]:
    return (CStr(message(int(hipError)).encode()),)


# ---- devices -----------------------------------------------------------------------------------------

@r.api(0)
def hipGetDeviceCount() -> tuple[int]:
    return (len(r.STATE.devices),)


@r.api()
def hipSetDevice(deviceId: CInt) -> tuple[()]:
    st = r.STATE
    st.tls.device = r.device(st, deviceId).ordinal
    return ()


@r.api()
def hipDeviceReset() -> tuple[()]:
    """The current device's streams, events, modules and memory are destroyed (HIP: "The state of
    current device is discarded and updated to a fresh state", hipSuccess only). A sticky fault
    stays: on a GPU the runtime aborted the process at the fault, nothing recovers it."""
    st = r.STATE
    ctx = st.devices[r.current_ordinal(st)].context
    with st.cv:
        st.destroy_contents_locked(ctx)
    return ()


@r.api()
def hipSetDeviceFlags(flags: CUInt) -> tuple[()]:
    """Scheduling flags of the current device (recorded; the simulation always blocks)."""
    if flags & ~0x1F:  # hipDeviceSchedule* (0..4) | hipDeviceMapHost (8) | hipDeviceLmemResizeToMax (16)
        raise fail(1, "hipSetDeviceFlags: unknown flags")
    st = r.STATE
    r.device(st, r.current_ordinal(st)).schedule_flags = int(flags)
    return ()


@r.api(0)
def hipGetDevice() -> tuple[int]:
    return (r.current_ordinal(r.STATE),)


@r.api(0)
def hipDeviceGetAttribute(attr: DeviceAttributeArg, deviceId: CInt) -> tuple[int]:
    device = r.device(r.STATE, deviceId)
    value = device.attributes.get(int(attr))
    if value is None:
        raise fail(1, f"hip_standin does not simulate {attr!r} (add it to tests/hip_standin/_devices.py)")
    return (value,)


@r.api(hipDeviceProp_t())
def hipGetDeviceProperties(deviceId: CInt) -> tuple[hipDeviceProp_t]:
    return (r.device(r.STATE, deviceId).properties(),)


@r.api(0)
def hipDeviceTotalMem(device: CInt) -> tuple[int]:
    return (r.device(r.STATE, device).spec.total_memory,)


@r.api(0, 0)
def hipMemGetInfo() -> tuple[int, int]:
    st = r.STATE
    device = r.current(st).device
    with st.lock:
        free = max(0, min(device.budget, device.spec.total_memory) - device.used)
    return (free, device.spec.total_memory)


@r.api(0)
def hipDeviceCanAccessPeer(deviceId: CInt, peerDeviceId: CInt) -> tuple[int]:
    st = r.STATE
    return (int(r.device(st, deviceId).can_access(r.device(st, peerDeviceId))),)


@r.api()
def hipDeviceEnablePeerAccess(peerDeviceId: CInt, flags: CUInt) -> tuple[()]:
    st = r.STATE
    ctx = r.current(st)
    if flags != 0:
        raise fail(1, "hipDeviceEnablePeerAccess: flags must be 0")
    peer = r.device(st, peerDeviceId)
    if peer is ctx.device:
        raise fail(101, "hipDeviceEnablePeerAccess: a device is not its own peer")
    if not ctx.device.can_access(peer):
        raise fail(217, f"device {ctx.device.ordinal} cannot access device {peer.ordinal}")
    with st.lock:
        if peer.ordinal in ctx.peers:  # the engine's peer set holds device ordinals here
            raise DriverError(704)
        ctx.peers.add(peer.ordinal)
    return ()


# ---- memory ------------------------------------------------------------------------------------------

def _allocate(size: int, kind: str, flags: int = 0) -> int | None:
    st = r.STATE
    ctx = r.current(st)
    if size == 0:  # HIP: no memory, a NULL pointer and hipSuccess
        return None
    return st.allocate(ctx.device, size, kind, flags).ptr


@r.api(None)
def hipMalloc(size: SizeT) -> tuple[int | None]:
    return (_allocate(size, "device"),)


@r.api(None)
def hipHostMalloc(size: SizeT, flags: CUInt) -> tuple[int | None]:
    coherence = flags & 0xC0000000
    if flags & ~0xE0000007 or coherence == 0xC0000000:  # unknown bits, or coherent and non-coherent
        raise fail(1, f"hipHostMalloc: invalid flags {flags:#x}")
    return (_allocate(size, "host", flags),)


@r.api(None)
def hipMallocManaged(size: SizeT, flags: CUInt) -> tuple[int | None]:
    if flags not in (hipMemAttachGlobal, hipMemAttachHost):
        raise fail(1, f"hipMallocManaged: flags must be hipMemAttachGlobal or hipMemAttachHost, not {flags:#x}")
    return (_allocate(size, "managed", flags),)


def _free(address: int, kinds: tuple[str, ...], call: str) -> tuple[()]:
    st = r.STATE
    if address == 0:
        return ()
    with st.lock:
        alloc = st.allocations.get(address)
    if alloc is None or alloc.kind not in kinds:
        raise fail(1, f"{call}: {address:#x} is not the start of a live {'/'.join(kinds)} allocation")
    ctx = alloc.device.context
    with st.cv:  # the implicit hipDeviceSynchronize
        st.cv.wait_for(lambda: st.idle_locked(st.streams_of_locked(ctx)) or ctx.sticky is not None)
        r.usable(ctx)
        if st.allocations.get(address) is not alloc:
            raise fail(1, f"{call}: {address:#x} was freed meanwhile")
        st.release_locked(alloc)
    return ()


@r.api()
def hipHostRegister(hostPtr: Ptr, sizeBytes: SizeT, flags: CUInt) -> tuple[()]:
    st = r.STATE
    ctx = r.current(st)
    if not hostPtr or not sizeBytes or flags & ~0xF:
        raise fail(1, f"hipHostRegister({hostPtr:#x}, {sizeBytes}, {flags:#x}): a null pointer, no bytes or "
                        f"unknown flags")
    st.register_host(hostPtr, sizeBytes, flags, ctx)
    return ()


@r.api()
def hipHostUnregister(hostPtr: Ptr) -> tuple[()]:
    st = r.STATE
    r.current(st)
    ops.unregister_host(st, hostPtr, "hipHostUnregister")
    return ()


@r.api(None)
def hipHostGetDevicePointer(hstPtr: Ptr, flags: CUInt) -> tuple[int]:
    st = r.STATE
    r.current(st)
    if flags != 0:
        raise fail(1, "hipHostGetDevicePointer: flags must be 0")
    with st.lock:
        found = st.mapped_locked(hstPtr)
    if found is None:
        raise fail(1, f"hipHostGetDevicePointer: {hstPtr:#x} is not in registered or pinned host memory")
    return (found[0],)


@r.api(hipPointerAttribute_t())
def hipPointerGetAttributes(ptr: Ptr) -> tuple[hipPointerAttribute_t]:
    st = r.STATE
    if not ptr:
        raise fail(1, "hipPointerGetAttributes: a null pointer")
    with st.lock:
        info = st.describe_locked(ptr)
    if info is None:  # ROCm 6+: success, "unregistered" (clr SWDEV-371332, "Return success for unregistered ptr")
        return (hipPointerAttribute_t(hipMemoryType.hipMemoryTypeUnregistered, hipInvalidDeviceId),)
    if info.kind == "managed":
        kind = hipMemoryType.hipMemoryTypeManaged
    elif info.kind in ("host", "registered"):
        kind = hipMemoryType.hipMemoryTypeHost
    else:
        kind = hipMemoryType.hipMemoryTypeDevice
    flags = info.registration.flags if info.registration is not None else info.allocation.flags  # type: ignore[union-attr]
    return (hipPointerAttribute_t(kind, info.device.ordinal, info.device_address,
                                  info.host if kind != hipMemoryType.hipMemoryTypeDevice else 0,
                                  int(info.kind == "managed"), flags),)


@r.api()
def hipFree(ptr: Ptr) -> tuple[()]:
    return _free(ptr, ("device", "managed"), "hipFree")


@r.api()
def hipHostFree(ptr: Ptr) -> tuple[()]:
    return _free(ptr, ("host",), "hipHostFree")


def __getattr__(name: str) -> Any:
    """hip-python names the stand-in does not simulate fail loudly instead of reaching for a GPU."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"hip_standin does not simulate hip.{name}; add it to tests/hip_standin/")
