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


def settle(buffer: Buffer, queue: Queue | None) -> None:
    """Wait (on the host) for the work given so far to every queue other than ``queue`` that used
    ``buffer`` (launches that received it, copies into or out of it): a read from the host must
    not overtake it. ``QUEUE_ERROR`` when such a queue failed, until that failure was reported
    (a sync or query of the queue raised it): then the read goes ahead."""
    used = buffer._queues
    if used is None or used is queue:
        return
    for other in (used,) if type(used) is not set else tuple(used):
        if other is queue or other._error_seen:  # a failure already reported: the data's fate is known
            continue
        if other._handle is not None:
            other.sync()
        elif other._final_event is not None:
            _final_sync(other._final_event)


def _final_sync(event: Any) -> None:
    """Wait for a closed queue's final event; one closed meanwhile was reached (the runtime closes it
    once its work is done)."""
    try:
        event.sync()
    except OffloadError as exc:
        if exc.code != ErrorCode.INVALID_EVENT:
            raise


def follow(buffer: Buffer, queue: Queue) -> None:
    """Make ``queue``'s next work wait for the work given so far to the other queues that used
    ``buffer`` (one event each, only when there are such queues)."""
    used = buffer._queues
    if used is None or used is queue:
        return
    for other in (used,) if type(used) is not set else tuple(used):
        if other is queue or other._error_seen:
            continue
        if other._handle is not None:
            event = other.record()
            try:
                queue.wait(event)
            finally:
                event.close()
        elif other._final_event is not None:
            try:
                queue.wait(other._final_event)
            except OffloadError as exc:
                if exc.code != ErrorCode.INVALID_EVENT:
                    raise


def transfer(dst: Any, src: Any, queue: Queue | None) -> None:
    """Copy all of ``src`` to ``dst``; each is a Buffer, an Array or a host object. The copy waits for
    other queues' work on the buffers involved (:func:`settle`, :func:`follow`)."""
    if (type(dst) is _array.Array and dst._strides is not None) or \
            (type(src) is _array.Array and src._strides is not None):
        _strided(dst, src, queue)
        return
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
    for buf in (dst_buf, src_buf):
        if buf is not None and buf._queues is not None and buf._queues is not queue:
            if queue is None:
                settle(buf, None)
            else:
                follow(buf, queue)
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
    if buffer._queues is not None and buffer._queues is not queue:
        if queue is None:
            settle(buffer, None)
        else:
            follow(buffer, queue)
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


# ---- strided arrays ----------------------------------------------------------------------------------

def _runs(array: Any) -> tuple[int, np.ndarray]:
    """(bytes per run, the byte offset of each run in the buffer) of a strided array: the elements split
    into the fewest runs of contiguous bytes, in C order."""
    itemsize = array.dtype.itemsize
    shape, strides = array.shape, array.strides
    run, inner = itemsize, len(shape)
    while inner and (shape[inner - 1] == 1 or strides[inner - 1] == run):
        run *= shape[inner - 1]
        inner -= 1
    offsets = np.array([array._offset], dtype=np.int64)
    for extent, stride in zip(shape[:inner], strides[:inner]):
        offsets = (offsets[:, None] + np.arange(extent, dtype=np.int64)[None, :] * stride).reshape(-1)
    return run, offsets


def _host_view(array: Any) -> np.ndarray:
    """A NumPy view of a host-reachable array, with its strides (kept open while the view lives)."""
    from ._layout import _extent

    low, high = _extent(array._offset, array.shape, array.strides, array.dtype.itemsize)
    keeper = _hostmem.keeper(array._buf, low, high - low)
    return np.ndarray(array.shape, array.dtype, buffer=keeper, offset=array._offset - low,
                      strides=array.strides)


def _strided(dst: Any, src: Any, queue: Queue | None) -> None:
    """A copy where one side is an Array with strides (at least one). Memory the host can reach is copied
    by NumPy; a strided source elsewhere is read through the host (its byte range, then NumPy picks
    the elements); a strided destination elsewhere is written run by run (one copy per contiguous run,
    so a transposed destination costs one copy per element: use a kernel for those). Either way the
    call returns once the copy is done, also with a queue (after that queue's earlier work)."""
    src_strided = type(src) is _array.Array and src._strides is not None
    dst_strided = type(dst) is _array.Array and dst._strides is not None
    if queue is not None:
        for side in (dst, src):
            found = region(side)
            if found is not None:
                check(queue, found[0]._device, "copy with")
    if src_strided:
        data = _read_host(src, queue) if src._buf._host_reachable else _read_device(src, queue)
    elif region(src) is not None:
        found = region(src)
        assert found is not None
        data = np.empty(found[2], np.uint8)
        transfer(data, src, queue)
        if queue is not None:
            queue.sync()
    else:
        data = np.ascontiguousarray(_hostmem.source(src)[2])
    if not dst_strided:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if region(dst) is not None:
            transfer(dst, flat, queue)
            if queue is not None:
                queue.sync()
            return
        held: np.ndarray = _hostmem.destination(dst)[2]  # type: ignore[assignment]
        target = held.reshape(-1).view(np.uint8)
        if target.nbytes != flat.nbytes:
            raise OffloadError(ErrorCode.INVALID_SIZE, f"cannot copy {flat.nbytes} bytes ({describe(src)}) into "
                                                       f"{target.nbytes} bytes ({describe(dst)}): the sizes must match")
        target[...] = flat
        return
    data = np.ascontiguousarray(data)
    if data.shape != dst.shape or data.dtype != dst.dtype:
        if data.nbytes != dst.nbytes:
            raise OffloadError(ErrorCode.INVALID_SIZE, f"cannot copy {data.nbytes} bytes ({describe(src)}) into "
                                                       f"{dst.nbytes} bytes ({describe(dst)}): the sizes must match")
        data = data.reshape(-1).view(np.uint8).view(dst.dtype).reshape(dst.shape)
    if dst._buf._host_reachable:
        _wait_for(dst._buf, queue)
        _host_view(dst)[...] = data
        return
    run, offsets = _runs(dst)
    flat = data.reshape(-1).view(np.uint8)
    base = dst._buf._checked_ptr()
    host = dst._buf._device._runtime.host.handle
    _wait_for(dst._buf, queue)
    address = flat.__array_interface__["data"][0]
    device = dst._buf._device.handle
    try:
        for index, offset in enumerate(offsets.tolist()):
            api.olMemcpy(None, base + offset, device, address + index * run, host, run)
    except OffloadError as exc:
        raise with_context(exc, f"copying into the strided {dst!r}") from exc


def _read_device(array: Any, queue: Queue | None) -> np.ndarray:
    """The elements of a strided array the host cannot reach: its byte range copied to the host, and
    the elements picked from there."""
    from ._layout import _extent

    low, high = _extent(array._offset, array.shape, array.strides, array.dtype.itemsize)
    stage = np.empty(high - low, np.uint8)
    transfer(stage, _array.Array(array._buf, (high - low,), np.uint8, offset=low), queue)
    if queue is not None:
        queue.sync()
    return np.array(np.ndarray(array.shape, array.dtype, buffer=stage, offset=array._offset - low,
                               strides=array.strides))


def _read_host(array: Any, queue: Queue | None) -> np.ndarray:
    _wait_for(array._buf, queue)
    return np.array(_host_view(array))


def _wait_for(buffer: Buffer, queue: Queue | None) -> None:
    """Before the host touches ``buffer`` now: the work of every queue that used it, and ``queue``'s."""
    settle(buffer, None)
    if queue is not None:
        queue.sync()


def fill_strided(array: Any, pattern: bytes, queue: Queue | None) -> None:
    """Fill every element of a strided array with ``pattern`` (one element's bytes), done on return."""
    if queue is not None:
        check(queue, array._buf._device, "fill with")
    if array._buf._host_reachable:
        _wait_for(array._buf, queue)
        _host_view(array)[...] = np.frombuffer(pattern, array.dtype)[0]
        return
    run, offsets = _runs(array)
    base = array._buf._checked_ptr()
    _wait_for(array._buf, queue)
    try:
        for offset in offsets.tolist():
            api.olMemFill(None, base + offset, pattern, run)
    except OffloadError as exc:
        raise with_context(exc, f"filling the strided {array!r}") from exc
