"""Allocation, free, pointer info, copies and fills."""

from __future__ import annotations

import warnings
from typing import Any

from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import MEM_INFO_KINDS, AllocType, MemInfo
from ._allocations import Allocation
from ._entry import adopt_entry_point, entry_point
from ._info import value_size
from ._state import STATE as _STATE
from ._state import Context, shut_down_meanwhile
from .handles import Device, Queue, bad_handle, enum_value, live_device, live_queue, payload, pointer, size_value

_U64 = 1 << 64


@entry_point
def olMemAlloc(ctx: Context, device: Device, alloc_type: AllocType, size: int) -> int:
    """Allocate ``size`` bytes of ``alloc_type`` memory on ``device``; returns its address."""
    size = size_value(size, "size")  # checks in the order of LLVM 22's header: size, then handle
    if size == 0:
        raise OffloadError(ErrorCode.INVALID_SIZE, "size must not be zero")
    gdev = live_device(device)
    kind = enum_value(AllocType, alloc_type, "alloc_type")
    address = gdev.data_alloc(size, kind)
    if not ctx.allocations.add(Allocation(address, size, device, kind)):
        gdev.data_delete(address, kind)
        raise shut_down_meanwhile("olMemAlloc")
    return address


@entry_point
def olMemFree(ctx: Context, address: int) -> None:
    """Free the allocation that starts at ``address``; its device is found from the address.

    An unknown, interior or already freed address is ``INVALID_ARGUMENT`` (as in LLVM 22) and
    frees nothing; the details say which of the three it is.
    """
    address = pointer(address, "address")
    alloc = ctx.allocations.remove(address)
    gdev = alloc.device._gdev
    if gdev is None:
        raise OffloadError(ErrorCode.INVALID_DEVICE, "the allocation's device was shut down")
    for device in ctx.devices:  # registrations the user left inside it go first: nothing stays pinned
        owner = device._gdev
        if owner is not None:
            for error in owner.forget_registrations_in(alloc.base, alloc.size):
                warnings.warn(f"offloadrt: olMemFree: unregistering host memory inside the allocation failed: "
                              f"{error}", OffloadWarning, stacklevel=3)
    try:
        gdev.data_delete(alloc.base, alloc.kind)
    except OffloadError:
        ctx.allocations.add(alloc)  # still allocated: it can be freed again (or by the last olShutDown)
        raise


@entry_point
def olMemRegister(ctx: Context, device: Device, ptr: int, size: int, flags: int = 0) -> int:
    """Register (page-lock) ``size`` bytes of host memory at ``ptr`` for ``device``; returns the
    address the device uses for it (the same address on the host device and with unified addressing).

    Registering a range inside a registered one adds a user of it (each needs an
    ``olMemUnregister``); a range that overlaps a registered one only in part is
    ``INVALID_ARGUMENT``. ``flags`` are reserved, as in LLVM 22: any 32-bit value is accepted.
    """
    size = size_value(size, "size")
    if size == 0:
        raise OffloadError(ErrorCode.INVALID_SIZE, "size must not be zero")
    gdev = live_device(device)
    ptr = pointer(ptr, "ptr")
    flags = size_value(flags, "flags")
    if flags > 0xFFFFFFFF:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"flags {flags:#x} do not fit in 32 bits")
    if ptr + size > 1 << 64:
        raise OffloadError(ErrorCode.INVALID_SIZE, f"[{ptr:#x}, +{size}) runs past the end of the address space")
    return gdev.data_lock(ptr, size)


@entry_point
def olMemUnregister(ctx: Context, device: Device, ptr: int) -> None:
    """One user fewer of the host memory registered with ``device`` that contains ``ptr`` (its host
    address, or the address ``olMemRegister`` returned); the last one unlocks it. Memory that is not
    registered is ``INVALID_ARGUMENT``."""
    gdev = live_device(device)
    ptr = pointer(ptr, "ptr")
    gdev.data_unlock(ptr)


def _mem_value(ctx: Context, ptr: object, requested: object) -> tuple[MemInfo, Any]:
    address = pointer(ptr, "ptr")
    alloc = ctx.allocations.find(address)  # as liboffload: the address before the property
    if alloc is None:
        raise OffloadError(ErrorCode.NOT_FOUND, f"{address:#x} was not allocated by offloadrt")
    prop = enum_value(MemInfo, requested, "memory info")
    if prop is MemInfo.DEVICE:
        return prop, alloc.device
    if prop is MemInfo.BASE:
        return prop, alloc.base
    if prop is MemInfo.SIZE:
        return prop, alloc.size
    return prop, alloc.kind


@entry_point
def olGetMemInfo(ctx: Context, ptr: int, prop: MemInfo) -> Any:
    """Facts about the allocation that contains ``ptr`` (any address inside it)."""
    return _mem_value(ctx, ptr, prop)[1]


@entry_point
def olGetMemInfoSize(ctx: Context, ptr: int, prop: MemInfo) -> int:
    """The byte size the C API reports for ``prop`` (8 for ``DEVICE``, ``BASE`` and ``SIZE``, 4 for ``TYPE``)."""
    prop, value = _mem_value(ctx, ptr, prop)
    return value_size(MEM_INFO_KINDS[prop], value)


def _queue_for(queue: object, performer: Device, what: str) -> Any:
    """The backend queue of an optional queue argument, which must belong to ``performer``."""
    if queue is None:
        return None
    ai = live_queue(queue)
    assert isinstance(queue, Queue)
    if queue.device is not performer:
        raise OffloadError(ErrorCode.INVALID_DEVICE,
                           f"{what} is performed by {performer!r} but the queue belongs to {queue.device!r}")
    return ai


def _memcpy(ctx: Context, queue: Queue | None, dst: int, dst_device: Device, src: int, src_device: Device,
            size: int) -> None:
    """Copy ``size`` bytes from ``src`` on ``src_device`` to ``dst`` on ``dst_device``.

    Host memory is named with the host device. With a queue the copy runs in queue order
    and the queue must belong to the device doing the copy (the non-host side); without one
    the copy is done when the call returns. A range that starts inside an ``olMemAlloc``
    allocation must end inside it (``INVALID_SIZE`` otherwise).
    """
    # every check, in LLVM 22's order: the path of anything but olMemcpy's hot one
    dst_gdev = live_device(dst_device, "dst_device")
    src_gdev = live_device(src_device, "src_device")
    if queue is not None and type(queue) is not Queue:
        raise bad_handle(queue, Queue, "queue")
    dst = pointer(dst, "dst")
    src = pointer(src, "src")
    size = size_value(size, "size")
    assert isinstance(dst_device, Device) and isinstance(src_device, Device)
    if src_device.is_host:
        performer = dst_device
    else:
        performer = src_device
    ai = _queue_for(queue, performer, "the copy")
    if size == 0:
        return None
    if ctx.validate:
        _check_side(ctx, dst, dst_device, size, "olMemcpy destination")
        _check_side(ctx, src, src_device, size, "olMemcpy source")
    if dst_device.is_host and src_device.is_host:
        dst_gdev.data_memcpy(dst, src, size, ai)
    elif dst_device.is_host:
        src_gdev.data_retrieve(dst, src, size, ai)
    elif src_device.is_host:
        dst_gdev.data_submit(dst, src, size, ai)
    elif src_device is dst_device:
        src_gdev.data_memcpy(dst, src, size, ai)
    elif src_gdev.plugin is dst_gdev.plugin and src_gdev.plugin.is_data_exchangeable(src_gdev, dst_gdev):
        src_gdev.data_exchange(src, dst_gdev, dst, size, ai)
    else:
        _bounce_copy(ctx, dst, dst_gdev, src, src_gdev, size, ai)
    return None


_memcpy.__name__ = _memcpy.__qualname__ = "olMemcpy"
_checked_memcpy = entry_point(_memcpy)


def olMemcpy(queue: Queue | None, dst: int, dst_device: Device, src: int, src_device: Device, size: int) -> None:
    # The hot path in one frame: a queued copy between host memory and the queue's GPU, with plain
    # int arguments that pass every check of the checked path, goes to the device's fast_copy,
    # whose own hot path checks that the queue has not failed (it answers False, having done
    # nothing, for anything it does not take). Anything else (no queue, a wrong argument,
    # tracing on, no runtime, a span not seen before) takes the checked entry point, which finds
    # and reports what is wrong.
    ctx = _STATE.untraced
    if (ctx is not None and type(queue) is Queue and type(dst) is int and type(src) is int and type(size) is int
            and size > 0):
        ai = queue._ai
        performer = queue.device
        host = ctx.host_device
        host_side: Device | None
        if dst_device is performer:
            to_device = True
            device_at, host_at, host_side = dst, src, src_device
        else:
            to_device = False
            device_at, host_at = src, dst
            host_side = dst_device if src_device is performer else None
        if host_side is host and ai is not None:
            gdev = performer._gdev
            copy = gdev.fast_copy if gdev is not None else None  # (the host device has none)
            if copy is not None:
                if ctx.validate:
                    # The spans of the last copy that passed (AllocationMap.pair, always true of
                    # the map as it is): both lie within [1, 2**64), so a copy inside them also
                    # passes the pointer and size range checks.
                    amap = ctx.allocations
                    device_low, device_high, host_low, host_high = amap.pair
                    fits = ((device_low <= device_at and device_at + size <= device_high
                             and host_low <= host_at and host_at + size <= host_high)
                            or (size < _U64 and 0 < dst < _U64 and 0 < src < _U64
                                and amap.copy_fits(dst, src, size, to_device)))
                else:
                    fits = size < _U64 and 0 < dst < _U64 and 0 < src < _U64
                if fits and copy(dst, src, size, ai, to_device):
                    return
    _checked_memcpy(queue, dst, dst_device, src, src_device, size)


adopt_entry_point(olMemcpy, _checked_memcpy)


def _check_side(ctx: Context, address: int, device: Device, size: int, what: str) -> None:
    """One side of a copy: within its allocation, and not GPU memory named as host memory."""
    alloc = ctx.allocations.check_range(address, size, what)
    if alloc is not None and device.is_host and alloc.kind is AllocType.DEVICE and not alloc.device.is_host:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what} {address:#x} is device memory of {alloc.device!r}, which the host cannot "
                           f"reach; name {alloc.device!r} as its device")


def _bounce_copy(ctx: Context, dst: int, dst_gdev: Any, src: int, src_gdev: Any, size: int, ai: Any) -> None:
    """Copy between devices that cannot reach each other, through a host buffer."""
    if ai is not None:
        src_gdev.synchronize(ai, release=False)
    host = ctx.host_device._gdev
    assert host is not None
    staging = host.data_alloc(size, AllocType.HOST)
    try:
        src_gdev.data_retrieve(staging, src, size, None)
        dst_gdev.data_submit(dst, staging, size, None)
    finally:
        host.data_delete(staging, AllocType.HOST)


@entry_point
def olMemFill(ctx: Context, queue: Queue | None, ptr: int, pattern: bytes, fill_size: int) -> None:
    """Fill ``fill_size`` bytes at ``ptr`` with copies of ``pattern``.

    ``fill_size`` must be a multiple of the pattern's length. With a queue the fill runs in
    queue order on the queue's device; without one it is done when the call returns, on the
    device that owns ``ptr`` (the host device for plain host memory). A fill that starts
    inside an ``olMemAlloc`` allocation must end inside it (``INVALID_SIZE`` otherwise).
    """
    # checks in the order of LLVM 22's header: the size rule, then the queue, then the pointers
    fill_size = size_value(fill_size, "fill_size")
    pattern = payload(pattern, "pattern")
    if ctx.validate:
        if not pattern:
            raise OffloadError(ErrorCode.INVALID_SIZE, "pattern must not be empty")
        if fill_size % len(pattern):
            raise OffloadError(ErrorCode.INVALID_SIZE,
                               f"fill_size {fill_size} is not a multiple of the pattern size {len(pattern)}")
    if queue is not None:
        ai = live_queue(queue)
        assert isinstance(queue, Queue)
        device = queue.device
    else:
        ai = None
        device = None
    ptr = pointer(ptr, "ptr")
    if not pattern:
        return
    alloc = ctx.allocations.check_range(ptr, fill_size, "olMemFill") if ctx.validate else ctx.allocations.find(ptr)
    if alloc is not None:
        if device is not None and alloc.device is not device:
            raise OffloadError(ErrorCode.INVALID_DEVICE,
                               f"{ptr:#x} belongs to {alloc.device!r} but the queue belongs to {device!r}")
        device = alloc.device
    elif device is None:
        device = ctx.host_device
    gdev = live_device(device)
    gdev.data_fill(ptr, pattern, fill_size, ai)
