"""Copies and fills of the HIP stand-in (see hip.py for the rules it follows).

TEST DOUBLE, not AMD code. As HIP validates them: a device-side pointer range must lie inside one
HIP allocation (device, managed or pinned host memory) or in host memory registered with
``hipHostRegister``, at its host or its device address (hipErrorInvalidValue otherwise), a copy of
zero bytes or a fill of zero elements does nothing, fills take any alignment and a 2D fill's pitch
must hold a row. The work runs on the stream's device (the null stream: the current device's);
memory of a device poisoned by a sticky fault is refused with that fault.

Copies with pageable host memory (neither a HIP allocation nor registered), as HIP does them:
HIP documents that "if host or dest are not pinned, the memory copy will be performed
synchronously" (hipMemcpyAsync); ROCm's clr (hipamd/src/hip_memory.cpp ``ihipMemcpy``) waits for
the stream (``queue()->finish()``) after every such copy except a host-to-device one of at most
``stagedXferSize_`` bytes under direct dispatch (the Linux default), which it stages and returns
at once. So here: ``hipMemcpyHtoDAsync`` from pageable memory of at most :data:`STAGED_LIMIT`
bytes (1 MiB + 4 KiB, ROCclr's default for a discrete GPU) reads the source during the call
(the caller may reuse it at once; the device write stays in stream order); a larger one, and
every ``hipMemcpyDtoHAsync`` into pageable memory, returns only once the stream ran its earlier
work and the copy (failing with hipErrorUnknown and a diagnostic after
``state().blocking_call_timeout`` seconds instead of deadlocking). Page-locked memory: the copy
returns at once and runs in stream order.
"""
# ruff: noqa: N803  # parameter names follow hip-python

from __future__ import annotations

from standin_common import engine as e
from standin_common import operations as ops
from standin_common.controls import fail

from . import _runtime as r
from ._convert import CInt, CUChar, CUInt, CUShort, Ptr, SizeT


def _touch(st: e.State, address: int, size: int, what: str) -> int:
    """``[address, +size)`` must be HIP memory of a device that still works, or registered host
    memory; the host address the access touches."""
    host, device = ops.device_range(st, address, size, what, "a HIP allocation")
    if device is not None:
        r.usable(device.context)
    return host


STAGED_LIMIT = (1 << 20) + (4 << 10)  # ROCclr's stagedXferSize_: max(1 MiB, pinnedMinXferSize_ + 4 KiB)


def _copy(dst: int, src: int, size: int, stream: int, check_dst: bool, check_src: bool, call: str) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    if size and not (dst and src):
        raise fail(1, "a copy to or from a null pointer")
    to = _touch(st, dst, size, "destination") if check_dst else dst
    frm = _touch(st, src, size, "source") if check_src else src
    with st.lock:  # host memory HIP does not know is pageable
        pageable = bool(size) and ((not check_src and st.pageable_locked(frm))
                                   or (not check_dst and st.pageable_locked(to)))
    staged = pageable and not check_src and size <= STAGED_LIMIT
    # the ints keep a caller's buffers alive
    ops.copy(st, queue, ctx, to, frm, size, keep=(dst, src), stage=staged, wait=call if pageable and not staged else "")
    return ()


@r.api()
def hipMemcpyHtoDAsync(dst: Ptr, src: Ptr, sizeBytes: SizeT, stream: Ptr) -> tuple[()]:
    return _copy(dst, src, sizeBytes, stream, True, False, "hipMemcpyHtoDAsync")


@r.api()
def hipMemcpyDtoHAsync(dst: Ptr, src: Ptr, sizeBytes: SizeT, stream: Ptr) -> tuple[()]:
    return _copy(dst, src, sizeBytes, stream, False, True, "hipMemcpyDtoHAsync")


@r.api()
def hipMemcpyDtoDAsync(dst: Ptr, src: Ptr, sizeBytes: SizeT, stream: Ptr) -> tuple[()]:
    return _copy(dst, src, sizeBytes, stream, True, True, "hipMemcpyDtoDAsync")


@r.api()
def hipMemcpyPeerAsync(dst: Ptr, dstDeviceId: CInt, src: Ptr, srcDevice: CInt, sizeBytes: SizeT,
                       stream: Ptr) -> tuple[()]:
    st = r.STATE
    for ordinal in (dstDeviceId, srcDevice):  # peer copies need no peer access: HIP stages them
        r.usable(r.device(st, ordinal).context)
    return _copy(dst, src, sizeBytes, stream, True, True, "hipMemcpyPeerAsync")


def _fill(width: int, dst: int, value: int, count: int, stream: int, pitch: int = 0, height: int = 1) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    row = count * width
    if height > 1 and pitch < row:
        raise fail(1, f"2D fill: pitch {pitch} is smaller than a row of {row} bytes")
    extent = ops.fill_extent(width, count, pitch, height)
    if extent and not dst:
        raise fail(1, "a fill of a null pointer")
    target = _touch(st, dst, extent, "fill destination")
    ops.fill(st, queue, ctx, target, width, value, count, pitch, height)
    return ()


@r.api()
def hipMemsetD8Async(dest: Ptr, value: CUChar, count: SizeT, stream: Ptr) -> tuple[()]:
    return _fill(1, dest, value, count, stream)


@r.api()
def hipMemsetD16Async(dest: Ptr, value: CUShort, count: SizeT, stream: Ptr) -> tuple[()]:
    return _fill(2, dest, value, count, stream)


@r.api()
def hipMemsetD32Async(dst: Ptr, value: CInt, count: SizeT, stream: Ptr) -> tuple[()]:
    # hip-python types this value as a C int: 0xFFFFFFFF overflows; -1 fills 0xFFFFFFFF.
    return _fill(4, dst, value, count, stream)


@r.api()
def hipMemsetD2D8Async(dst: Ptr, dstPitch: SizeT, value: CUChar, width: SizeT, height: SizeT,
                       stream: Ptr) -> tuple[()]:
    return _fill(1, dst, value, width, stream, dstPitch, height)


@r.api()
def hipMemsetD2D16Async(dst: Ptr, dstPitch: SizeT, value: CUShort, width: SizeT, height: SizeT,
                        stream: Ptr) -> tuple[()]:
    return _fill(2, dst, value, width, stream, dstPitch, height)


@r.api()
def hipMemsetD2D32Async(dst: Ptr, dstPitch: SizeT, value: CUInt, width: SizeT, height: SizeT,
                        stream: Ptr) -> tuple[()]:
    return _fill(4, dst, value, width, stream, dstPitch, height)
