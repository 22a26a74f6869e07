"""Host memory: addresses of host objects, and zero-copy views of buffers that keep them open.

A view of a buffer (``numpy.asarray``, ``memoryview``, a DLPack capsule) is backed by a *keeper*,
a ctypes array over the buffer's memory that counts as one export of the buffer while it lives.
A buffer closed while exported stays valid for its views and returns to its pool when the last
view is gone, so a view never reads memory that was handed out again or freed.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ErrorCode, OffloadError

if TYPE_CHECKING:
    from ._device import Device
    from ._memory import Buffer

_exports_lock = threading.Lock()  # guards Buffer._exports and the deferred return of closed buffers


def keeper(buffer: Buffer, offset: int, nbytes: int) -> Any:
    """A writable buffer-protocol object over ``nbytes`` bytes at ``buffer.ptr + offset`` that keeps
    ``buffer``'s memory out of the pool while it lives."""
    if nbytes == 0:
        return bytearray()
    view = (ctypes.c_ubyte * nbytes).from_address(buffer._checked_ptr() + offset)
    export(buffer)
    # Not at exit: weakref.finalize runs its pending callbacks from an atexit hook, which may come before
    # a user's atexit handler that still reads this view.
    weakref.finalize(view, unexport, buffer).atexit = False
    return view


_exported: set[Buffer] = set()  # buffers with at least one export (guarded by _exports_lock)
# Blocks of buffers still exported when their runtime shut down: the shutdown left them alone (their
# views stay valid); each is freed by the function stored with it once its last export ends.
_orphans: dict[int, tuple[int, Callable[[int], None]]] = {}  # id(buffer) -> (block, free)


def export(buffer: Buffer) -> None:
    with _exports_lock:
        buffer._exports += 1
        _exported.add(buffer)


def unexport(buffer: Buffer) -> None:
    """One export of ``buffer`` ended; a buffer closed meanwhile goes back to its pool with the last
    (or, when its runtime was shut down meanwhile, is freed)."""
    with _exports_lock:
        buffer._exports -= 1
        ptr = None
        orphan = None
        if buffer._exports == 0:
            _exported.discard(buffer)
            orphan = _orphans.pop(id(buffer), None)
            ptr = getattr(buffer, "_closed_ptr", None)
            if ptr is not None:
                buffer._closed_ptr = None
    if orphan is not None:
        orphan[1](orphan[0])
    elif ptr is not None:
        buffer._give_back(ptr)


def keep_exported(devices: Iterable[Device]) -> list[Buffer]:
    """Before the runtime of ``devices`` shuts down: take the blocks of their buffers that are still
    exported (a NumPy view, a memoryview, a DLPack capsule) out of the runtime's hands, so the
    shutdown does not free memory a view still reads; each is freed when its last export ends.

    Memory that cannot outlive its plugin (a GPU driver's pinned or managed memory goes with its
    context) stays the runtime's: those buffers are returned, for a warning."""
    from .. import api

    mine = set(devices)
    lost: list[Buffer] = []
    with _exports_lock:
        for buffer in list(_exported):
            home = buffer._home
            if home.device not in mine or home.pool is None:
                continue  # another runtime's, or memory a program owns (it unloads with the program)
            block = buffer._ptr if buffer._ptr is not None else getattr(buffer, "_closed_ptr", None)
            if not block:
                continue
            free = api._state.keep_past_shutdown(block)
            if free is None:
                lost.append(buffer)
                continue
            buffer._closed_ptr = None
            _orphans[id(buffer)] = (block, free)
    return lost


def source(obj: object) -> tuple[int, int, object]:
    """(address, nbytes, what to keep alive) of a host object to copy from; a non-contiguous one is
    copied to a contiguous temporary first."""
    array = _as_array(obj, "the source")
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    return _address(array), array.nbytes, array


def destination(obj: object) -> tuple[int, int, object]:
    """(address, nbytes, what to keep alive) of a writable, contiguous host object to copy into."""
    array = _as_array(obj, "the destination")
    if not array.flags.c_contiguous:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"the destination {_describe(obj)} is not contiguous; copy into a contiguous array "
                           f"(numpy.ascontiguousarray) and assign from it")
    if not array.flags.writeable:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"the destination {_describe(obj)} is read-only; pass a writable object such as a "
                           f"bytearray or a NumPy array")
    return _address(array), array.nbytes, array


_char_at = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _address(array: np.ndarray) -> int:
    """The address of a contiguous array's first byte (0 when empty)."""
    if not array.nbytes:
        return 0
    try:
        return _addressof(_char_at(array))  # type: ignore[arg-type]  # a third of __array_interface__'s time
    except TypeError:  # read-only memory: ctypes takes writable buffers only
        return int(array.__array_interface__["data"][0])


def _as_array(obj: object, what: str) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        return obj
    try:
        view = memoryview(obj)  # type: ignore[arg-type]
    except TypeError:
        pass
    else:
        if view.c_contiguous:
            return np.frombuffer(view, dtype=np.uint8) if view.nbytes else np.empty(0, np.uint8)
        return np.asarray(view)
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        return np.asarray(obj)
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)  # type: ignore[arg-type]
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{what} {_describe(obj)} is DLPack memory the host cannot reach ({exc}); copy it "
                               f"to the host first") from exc
    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                       f"{what} must be an offloadrt Buffer or Array, or a host object with the buffer protocol "
                       f"(a NumPy array, bytes, bytearray, memoryview), got {_describe(obj)}")


def _describe(obj: object) -> str:
    if isinstance(obj, np.ndarray):
        return f"NumPy array {obj.dtype}{list(obj.shape)}"
    return type(obj).__name__
