"""Copies and fills of the HIP stand-in (see hip.py for the rules it follows).

TEST DOUBLE, not AMD code. As HIP validates them: a device-side pointer range must lie inside one
HIP allocation (device, managed or pinned host memory) or in host memory registered with
``hipHostRegister``, at its host or its device address (hipErrorInvalidValue otherwise), a copy of
zero bytes or a fill of zero elements does nothing, fills take any alignment and a 2D fill's pitch
must hold a row. The work runs on the stream's device (the null stream: the current device's);
memory of a device poisoned by a sticky fault is refused with that fault.
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


def _copy(dst: int, src: int, size: int, stream: int, check_dst: bool, check_src: bool) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    if size and not (dst and src):
        raise fail(1, "a copy to or from a null pointer")
    to = _touch(st, dst, size, "destination") if check_dst else dst
    frm = _touch(st, src, size, "source") if check_src else src
    ops.copy(st, queue, ctx, to, frm, size, keep=(dst, src))  # the ints keep a caller's buffers alive
    return ()


@r.api()
def hipMemcpyHtoDAsync(dst: Ptr, src: Ptr, sizeBytes: SizeT, stream: Ptr) -> tuple[()]:
    return _copy(dst, src, sizeBytes, stream, True, False)


@r.api()
def hipMemcpyDtoHAsync(dst: Ptr, src: Ptr, sizeBytes: SizeT, stream: Ptr) -> tuple[()]:
    return _copy(dst, src, sizeBytes, stream, False, True)


@r.api()
def hipMemcpyDtoDAsync(dst: Ptr, src: Ptr, sizeBytes: SizeT, stream: Ptr) -> tuple[()]:
    return _copy(dst, src, sizeBytes, stream, True, True)


@r.api()
def hipMemcpyPeerAsync(dst: Ptr, dstDeviceId: CInt, src: Ptr, srcDevice: CInt, sizeBytes: SizeT,
                       stream: Ptr) -> tuple[()]:
    st = r.STATE
    for ordinal in (dstDeviceId, srcDevice):  # peer copies need no peer access: HIP stages them
        r.usable(r.device(st, ordinal).context)
    return _copy(dst, src, sizeBytes, stream, True, True)


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
