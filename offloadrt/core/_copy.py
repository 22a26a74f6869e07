"""Copies and fills between buffers, arrays and host objects, at once or on a queue."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import api
from ..errors import ErrorCode, OffloadError
from ..types import DeviceType
from . import _array, _hostmem, _memory  # module references: used at call time only
from ._errors import with_context
from ._queue import check

if TYPE_CHECKING:
    from ._device import Device
    from ._memory import Buffer
    from ._queue import Queue


def region(obj: Any) -> tuple[Buffer, int, int] | None:
    """(buffer, offset, nbytes) of a Buffer or Array; None for anything else."""
    if isinstance(obj, _memory.Buffer):
        return obj, 0, obj.nbytes
    if isinstance(obj, _array.Array):
        return obj._buf, obj._offset, obj.nbytes
    return None


def describe(obj: Any) -> str:
    found = region(obj)
    return repr(obj) if found is not None else _hostmem._describe(obj)


def copy(mine: Any, other: Any, queue: Queue | None, into: bool) -> None:
    """Copy ``other`` into ``mine`` (``into``) or ``mine`` into ``other``; ``mine`` is a Buffer or Array."""
    if into:
        transfer(mine, other, queue)
    else:
        transfer(other, mine, queue)


def transfer(dst: Any, src: Any, queue: Queue | None) -> None:
    """Copy all of ``src`` to ``dst``; each is a Buffer, an Array or a host object."""
    dst_region, src_region = region(dst), region(src)
    keep: list[object] = []
    if dst_region is not None:
        dst_buf, dst_offset, size = dst_region
        dst_ptr = dst_buf._checked_ptr() + dst_offset
        dst_device: Device = dst_buf._device
    else:
        dst_buf = None
        dst_ptr, size, held = _hostmem.destination(dst)
        keep.append(held)
    if src_region is not None:
        src_buf, src_offset, src_size = src_region
        src_ptr = src_buf._checked_ptr() + src_offset
        src_device: Device = src_buf._device
    else:
        src_buf = None
        src_ptr, src_size, held = _hostmem.source(src)
        keep.append(held)
    if dst_buf is None and src_buf is None:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, "a copy needs an offloadrt Buffer or Array on one side")
    host = (dst_buf or src_buf)._device._runtime.host  # type: ignore[union-attr]
    if dst_buf is None:
        dst_device = host
    if src_buf is None:
        src_device = host
    if size != src_size:
        raise OffloadError(ErrorCode.INVALID_SIZE,
                           f"cannot copy {src_size} bytes ({describe(src)}) into {size} bytes ({describe(dst)}): "
                           f"the sizes must match")
    if size == 0:
        return
    doing = dst_device if src_device.type == DeviceType.HOST else src_device
    handle = None
    if queue is not None:
        check(queue, doing, f"copy from {src_device} to {dst_device} with")
        handle = queue._handle
    try:
        api.olMemcpy(handle, dst_ptr, dst_device.handle, src_ptr, src_device.handle, size)
    except OffloadError as exc:
        raise with_context(exc, f"copying {size} bytes from {describe(src)} to {describe(dst)}") from exc
    if queue is not None:
        for buf in (dst_buf, src_buf):
            if buf is not None:
                buf._use(queue)
        if keep:  # the host side outlives the copy
            queue._hold(keep[0] if len(keep) == 1 else tuple(keep))


def fill(buffer: Buffer, offset: int, nbytes: int, pattern: Any, queue: Queue | None) -> None:
    """Fill ``nbytes`` at ``buffer.ptr + offset`` with ``pattern`` (see Buffer.fill)."""
    data = _pattern(pattern)
    if nbytes % len(data):
        raise OffloadError(ErrorCode.INVALID_SIZE,
                           f"cannot fill {nbytes} bytes with a {len(data)}-byte pattern: the size must be a "
                           f"multiple of the pattern's length")
    ptr = buffer._checked_ptr() + offset
    if nbytes == 0:
        return
    handle = None
    if queue is not None:
        check(queue, buffer._device, "fill with")
        handle = queue._handle
    try:
        api.olMemFill(handle, ptr, data, nbytes)
    except OffloadError as exc:
        raise with_context(exc, f"filling {nbytes} bytes of {buffer!r}") from exc
    if queue is not None:
        buffer._use(queue)


def _pattern(pattern: Any) -> bytes:
    if isinstance(pattern, np.generic):
        return pattern.tobytes()
    if isinstance(pattern, (int, np.integer)) and not isinstance(pattern, bool):
        value = operator.index(pattern)
        if not 0 <= value <= 255:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"an int pattern is one byte (0..255), got {value}; for wider values pass a NumPy "
                               f"scalar such as numpy.uint32({value})")
        return bytes((value,))
    if isinstance(pattern, (float, complex, bool)):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"a {type(pattern).__name__} pattern has no byte size; pass a NumPy scalar such as "
                           f"numpy.float32({pattern!r})")
    try:
        data = memoryview(pattern).tobytes()
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"a fill pattern is an int 0..255, a NumPy scalar or a bytes-like object, got "
                           f"{type(pattern).__name__}") from None
    if not data:
        raise OffloadError(ErrorCode.INVALID_SIZE, "the fill pattern is empty")
    return data
