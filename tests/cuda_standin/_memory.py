"""Allocations, registered host memory, copies and fills of the CUDA stand-in (see driver.py for
the rules it follows).

TEST DOUBLE, not NVIDIA code. Device-side ranges must lie inside a driver allocation or
registered host memory (at its host or device address); CUDA_ERROR_INVALID_VALUE otherwise.
"""
# ruff: noqa: N803  # parameter names follow cuda.bindings.driver (hStream, ByteCount, ...)

from __future__ import annotations

from typing import Any

from standin_common import operations as ops
from standin_common.controls import DriverError, fail
from standin_common.memory import Allocation

from . import _runtime as r
from ._convert import address, as_int, unsigned
from ._types import CUdeviceptr

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


def _copy(dst: Any, src: Any, size: Any, stream: Any, check_dst: bool, check_src: bool) -> tuple[()]:
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
    ops.copy(st, queue, run_ctx, to, frm, count, keep=(dst, src))
    return ()


@r.api()
def cuMemcpyHtoDAsync(dstDevice: Any, srcHost: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstDevice, srcHost, ByteCount, hStream, True, False)


@r.api()
def cuMemcpyDtoHAsync(dstHost: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstHost, srcDevice, ByteCount, hStream, False, True)


@r.api()
def cuMemcpyDtoDAsync(dstDevice: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[()]:
    return _copy(dstDevice, srcDevice, ByteCount, hStream, True, True)


@r.api()
def cuMemcpyHtoD(dstDevice: Any, srcHost: Any, ByteCount: int) -> tuple[()]:
    return _copy(dstDevice, srcHost, ByteCount, 0, True, False)


@r.api()
def cuMemcpyDtoH(dstHost: Any, srcDevice: Any, ByteCount: int) -> tuple[()]:
    return _copy(dstHost, srcDevice, ByteCount, 0, False, True)


@r.api()
def cuMemcpyPeerAsync(dstDevice: Any, dstContext: Any, srcDevice: Any, srcContext: Any, ByteCount: int,
                      hStream: Any) -> tuple[()]:
    st = r.STATE
    for handle in (dstContext, srcContext):
        other = st.contexts.get(as_int(handle))
        if other is None or not other.active:
            raise fail(201, f"peer copy names an inactive or unknown context {as_int(handle):#x}")
    return _copy(dstDevice, srcDevice, ByteCount, hStream, True, True)


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
