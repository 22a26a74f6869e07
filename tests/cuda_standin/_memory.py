"""Allocations, registered host memory, copies and fills of the CUDA stand-in (see driver.py for
the rules it follows).

TEST DOUBLE, not NVIDIA code. Device-side ranges must lie inside a driver allocation or
registered host memory (at its host or device address); CUDA_ERROR_INVALID_VALUE otherwise.

When an asynchronous copy returns, as measured on the H100 (gpu-hardware-facts.md "When async
copies return"): from pageable host memory (neither registered nor a driver allocation) the
driver stages the source during the call, so the caller may reuse or free it at once, and the
device write still happens in stream order; into pageable memory the call returns only once the
stream ran its earlier work and the copy (a stream held by a host function that waits for the
caller deadlocks on a GPU: here the call fails with CUDA_ERROR_UNKNOWN and a diagnostic after
``state().blocking_call_timeout`` seconds, 20 by default). With page-locked memory both return at
once and the host memory is read or written later, in stream order.

``cuPointerGetAttribute`` answers CONTEXT, MEMORY_TYPE, DEVICE_POINTER, HOST_POINTER,
DEVICE_ORDINAL and IS_MANAGED for driver allocations (device, pinned host, managed, module
globals) and registered host memory, with the bindings' result types (CUcontext, int, CUdeviceptr,
int, int, bool); CUDA_ERROR_INVALID_VALUE for memory the driver does not know (pageable host
memory), as CUDA documents, and where no such pointer exists (the host pointer of device memory,
the device pointer of memory registered without CU_MEMHOSTREGISTER_DEVICEMAP or for another
context without PORTABLE, as ``cuMemHostGetDevicePointer``). Unmeasured choices: managed memory
reads CU_MEMORYTYPE_DEVICE (IS_MANAGED tells it apart); other attributes are
CUDA_ERROR_NOT_SUPPORTED with a diagnostic.
"""
# ruff: noqa: N803  # parameter names follow cuda.bindings.driver (hStream, ByteCount, ...)

from __future__ import annotations

from typing import Any

from standin_common import operations as ops
from standin_common.controls import DriverError, fail
from standin_common.memory import Allocation

from . import _runtime as r
from ._convert import address, as_int, unsigned
from ._types import CUcontext, CUdeviceptr

# cuMemHostRegister's flags (plain ints in the bindings too)
CU_MEMHOSTREGISTER_PORTABLE = 0x01
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_MEMHOSTREGISTER_IOMEMORY = 0x04
CU_MEMHOSTREGISTER_READ_ONLY = 0x08


def _allocate(size: Any, kind: str) -> Allocation:
    st = r.STATE
    ctx = st.current()
    size = unsigned(size)
    if size == 0:
        raise fail(1, f"cannot allocate {size} bytes")
    return st.allocate(ctx.device, size, kind)


@r.api(1)
def cuMemAlloc(bytesize: int) -> tuple[Any]:
    return (CUdeviceptr(_allocate(bytesize, "device").ptr),)


@r.api(1)
def cuMemAllocHost(bytesize: int) -> tuple[int]:
    return (_allocate(bytesize, "host").ptr,)


@r.api(1)
def cuMemAllocManaged(bytesize: int, flags: int) -> tuple[Any]:
    if as_int(flags) not in (1, 2):  # CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST
        raise DriverError(1)
    return (CUdeviceptr(_allocate(bytesize, "managed").ptr),)


def _free(ptr: Any, kinds: tuple[str, ...]) -> tuple[()]:
    st = r.STATE
    st.current()
    at = as_int(ptr) if "device" in kinds else address(ptr)
    with st.lock:
        alloc = st.allocations.get(at)
        if alloc is None or alloc.kind not in kinds:
            raise fail(1, f"{at:#x} is not the start of a live {'/'.join(kinds)} allocation")
        st.release_locked(alloc)
    return ()


@r.api()
def cuMemFree(dptr: Any) -> tuple[()]:
    return _free(dptr, ("device", "managed"))


@r.api()
def cuMemFreeHost(p: Any) -> tuple[()]:
    return _free(p, ("host",))


@r.api()
def cuMemHostRegister(p: Any, bytesize: int, Flags: int) -> tuple[()]:
    st = r.STATE
    ctx = st.current()
    host, size, flags = address(p), unsigned(bytesize), unsigned(Flags, 32, "unsigned int")
    if not host or not size or flags & ~0xF:
        raise fail(1, f"cuMemHostRegister({host:#x}, {size}, {flags:#x}): a null pointer, no bytes or unknown flags")
    if flags & CU_MEMHOSTREGISTER_IOMEMORY:
        raise fail(801, "cuMemHostRegister: the stand-in has no I/O memory to map")
    st.register_host(host, size, flags, ctx)
    return ()


@r.api()
def cuMemHostUnregister(p: Any) -> tuple[()]:
    st = r.STATE
    st.current()
    ops.unregister_host(st, address(p), "cuMemHostUnregister")
    return ()


@r.api(1)
def cuMemHostGetDevicePointer(p: Any, Flags: int) -> tuple[Any]:
    st = r.STATE
    ctx = st.current()
    host = address(p)
    if unsigned(Flags, 32, "unsigned int") != 0:
        raise fail(1, "cuMemHostGetDevicePointer: Flags must be 0")
    with st.lock:
        found = st.mapped_locked(host)
    if found is None:
        raise fail(1, f"cuMemHostGetDevicePointer: {host:#x} is not in mapped, page-locked host memory")
    device_ptr, registration = found
    if registration is None:  # a pinned allocation
        return (CUdeviceptr(device_ptr),)
    if not registration.flags & CU_MEMHOSTREGISTER_DEVICEMAP:
        raise fail(1, f"cuMemHostGetDevicePointer: {host:#x} was registered without CU_MEMHOSTREGISTER_DEVICEMAP")
    if registration.ctx is not ctx and not registration.flags & CU_MEMHOSTREGISTER_PORTABLE:
        raise fail(1, f"cuMemHostGetDevicePointer: {host:#x} was registered for another context only "
                      f"(without CU_MEMHOSTREGISTER_PORTABLE)")
    return (CUdeviceptr(device_ptr),)


_POINTER_ATTRIBUTES = {1: "CONTEXT", 2: "MEMORY_TYPE", 3: "DEVICE_POINTER", 4: "HOST_POINTER", 8: "IS_MANAGED",
                       9: "DEVICE_ORDINAL"}


@r.api(1)
def cuPointerGetAttribute(attribute: Any, ptr: Any) -> tuple[Any]:
    st = r.STATE
    which, at = int(attribute), as_int(ptr)
    name = _POINTER_ATTRIBUTES.get(which)
    if name is None:
        raise fail(801, f"cuPointerGetAttribute: the stand-in does not simulate {attribute!r}")
    with st.lock:
        info = st.describe_locked(at) if at else None
    if info is None:
        raise fail(1, f"cuPointerGetAttribute({name}): {at:#x} is not memory the driver allocated, mapped or "
                      f"registered (pageable host memory)")
    ctx = info.device.context if info.registration is None else info.registration.ctx
    if name == "CONTEXT":
        return (CUcontext(ctx.handle),)
    if name == "MEMORY_TYPE":
        return (1 if info.kind in ("host", "registered") else 2,)  # CU_MEMORYTYPE_HOST / _DEVICE
    if name == "DEVICE_ORDINAL":
        return (info.device.ordinal,)
    if name == "IS_MANAGED":
        return (info.kind == "managed",)
    if name == "HOST_POINTER":
        if not info.host:
            raise fail(1, f"cuPointerGetAttribute(HOST_POINTER): {at:#x} is device memory, which the host "
                          f"cannot reach")
        return (info.host,)
    current = st.current()  # DEVICE_POINTER: "through which kernels running in the current context" reach it
    registration = info.registration
    if registration is not None and not registration.flags & CU_MEMHOSTREGISTER_DEVICEMAP:
        raise fail(1, f"cuPointerGetAttribute(DEVICE_POINTER): {at:#x} was registered without "
                      f"CU_MEMHOSTREGISTER_DEVICEMAP")
    if registration is not None and registration.ctx is not current \
            and not registration.flags & CU_MEMHOSTREGISTER_PORTABLE:
        raise fail(1, f"cuPointerGetAttribute(DEVICE_POINTER): {at:#x} was registered for another context only")
    return (CUdeviceptr(info.device_address),)


def _copy(dst: Any, src: Any, size: Any, stream: Any, check_dst: bool, check_src: bool, call: str) -> tuple[()]:
    st = r.STATE
    ctx = st.current()
    queue, run_ctx = r.stream(st, stream, ctx)
    # Device pointers convert like CUdeviceptr (int()); host pointers like void* (ints or buffers).
    to = as_int(dst) if check_dst else address(dst)
    frm = as_int(src) if check_src else address(src)
    count = unsigned(size)
    if count and not (to and frm):
        raise fail(1, "a copy to or from a null pointer")
    if check_dst:
        to = r.check_range(st, to, count, "destination")
    if check_src:
        frm = r.check_range(st, frm, count, "source")
    with st.lock:  # host memory the driver does not know is pageable
        pageable_src = bool(count) and not check_src and st.pageable_locked(frm)
        pageable_dst = bool(count) and not check_dst and st.pageable_locked(to)
    ops.copy(st, queue, run_ctx, to, frm, count, keep=(dst, src), stage=pageable_src,
             wait=call if pageable_dst else "")
    return ()


@r.api()
def cuMemcpyHtoDAsync(dstDevice: Any, srcHost: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstDevice, srcHost, ByteCount, hStream, True, False, "cuMemcpyHtoDAsync")


@r.api()
def cuMemcpyDtoHAsync(dstHost: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstHost, srcDevice, ByteCount, hStream, False, True, "cuMemcpyDtoHAsync")


@r.api()
def cuMemcpyDtoDAsync(dstDevice: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstDevice, srcDevice, ByteCount, hStream, True, True, "cuMemcpyDtoDAsync")


@r.api()
def cuMemcpyHtoD(dstDevice: Any, srcHost: Any, ByteCount: int) -> tuple[()]:
    return _copy(dstDevice, srcHost, ByteCount, 0, True, False, "cuMemcpyHtoD")


@r.api()
def cuMemcpyDtoH(dstHost: Any, srcDevice: Any, ByteCount: int) -> tuple[()]:
    return _copy(dstHost, srcDevice, ByteCount, 0, False, True, "cuMemcpyDtoH")


@r.api()
def cuMemcpyPeerAsync(dstDevice: Any, dstContext: Any, srcDevice: Any, srcContext: Any, ByteCount: int,
                      hStream: Any) -> tuple[()]:
    st = r.STATE
    for handle in (dstContext, srcContext):
        other = st.contexts.get(as_int(handle))
        if other is None or not other.active:
            raise fail(201, f"peer copy names an inactive or unknown context {as_int(handle):#x}")
    return _copy(dstDevice, srcDevice, ByteCount, hStream, True, True, "cuMemcpyPeerAsync")


def _memset(width: int, dst: Any, value: Any, count: Any, stream: Any, pitch: int = 0,
            height: int = 1) -> tuple[()]:
    st = r.STATE
    ctx = st.current()
    queue, run_ctx = r.stream(st, stream, ctx)
    at, count, height, pitch = as_int(dst), unsigned(count), unsigned(height), unsigned(pitch)
    value = unsigned(value, 8 * width, {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}[width])
    if at % width or (height > 1 and pitch < count * width):
        raise fail(1, f"memset of {width}-byte values at {at:#x} (pitch {pitch}) is misaligned")
    target = r.check_range(st, at, ops.fill_extent(width, count, pitch, height), "memset destination")
    ops.fill(st, queue, run_ctx, target, width, value, count, pitch, height)
    return ()


@r.api()
def cuMemsetD8Async(dstDevice: Any, uc: int, N: int, hStream: Any) -> tuple[()]:
    return _memset(1, dstDevice, uc, N, hStream)


@r.api()
def cuMemsetD16Async(dstDevice: Any, us: int, N: int, hStream: Any) -> tuple[()]:
    return _memset(2, dstDevice, us, N, hStream)


@r.api()
def cuMemsetD32Async(dstDevice: Any, ui: int, N: int, hStream: Any) -> tuple[()]:
    return _memset(4, dstDevice, ui, N, hStream)


@r.api()
def cuMemsetD2D8Async(dstDevice: Any, dstPitch: int, uc: int, Width: int, Height: int, hStream: Any) -> tuple[()]:
    return _memset(1, dstDevice, uc, Width, hStream, dstPitch, Height)


@r.api()
def cuMemsetD2D16Async(dstDevice: Any, dstPitch: int, us: int, Width: int, Height: int,
                       hStream: Any) -> tuple[()]:
    return _memset(2, dstDevice, us, Width, hStream, dstPitch, Height)


@r.api()
def cuMemsetD2D32Async(dstDevice: Any, dstPitch: int, ui: int, Width: int, Height: int,
                       hStream: Any) -> tuple[()]:
    return _memset(4, dstDevice, ui, Width, hStream, dstPitch, Height)
