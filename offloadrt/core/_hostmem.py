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
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ErrorCode, OffloadError

if TYPE_CHECKING:
    from ._memory import Buffer

_exports_lock = threading.Lock()  # guards Buffer._exports and the deferred return of closed buffers


def keeper(buffer: Buffer, offset: int, nbytes: int) -> Any:
    """A writable buffer-protocol object over ``nbytes`` bytes at ``buffer.ptr + offset`` that keeps
    ``buffer``'s memory out of the pool while it lives."""
    if nbytes == 0:
        return bytearray()
    view = (ctypes.c_ubyte * nbytes).from_address(buffer._checked_ptr() + offset)
    export(buffer)
    weakref.finalize(view, unexport, buffer)
    return view


def export(buffer: Buffer) -> None:
    with _exports_lock:
        buffer._exports += 1


def unexport(buffer: Buffer) -> None:
    """One export of ``buffer`` ended; a buffer closed meanwhile goes back to its pool with the last."""
    with _exports_lock:
        buffer._exports -= 1
        ptr = getattr(buffer, "_closed_ptr", None) if buffer._exports == 0 else None
        if ptr is not None:
            buffer._closed_ptr = None
    if ptr is not None:
        buffer._give_back(ptr)


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
