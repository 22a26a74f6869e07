"""Host memory: addresses of host objects, and zero-copy views of buffers that keep them open.

A view of a buffer (``numpy.asarray``, ``memoryview``, a DLPack capsule) is backed by a *keeper*,
a ctypes array over the buffer's memory that counts as one export of the buffer while it lives.
A buffer closed while exported stays valid for its views and returns to its pool when the last
view is gone, so a view never reads memory that was handed out again or freed.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ErrorCode, OffloadError
from ..types import AllocType

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


_held_images: dict[int, Any] = {}  # id(buffer) -> the loaded image a global variable's export holds


def export(buffer: Buffer) -> None:
    with _exports_lock:
        buffer._exports += 1
        _exported.add(buffer)
        if buffer._exports == 1 and buffer._home.pool is None:
            image = _loaded_image(buffer)
            if image is not None:  # a global variable: its program's code stays loaded while viewed
                image.hold()
                _held_images[id(buffer)] = image


def _loaded_image(buffer: Buffer) -> Any:
    """The loaded host image that owns a global-variable buffer's memory, where it can be held
    (host programs unload their shared object once the last hold is released)."""
    handle = getattr(buffer._home.owner, "_handle", None)
    image = getattr(handle, "_image", None)
    return image if hasattr(image, "hold") and hasattr(image, "release") else None


def unexport(buffer: Buffer) -> None:
    """One export of ``buffer`` ended; a buffer closed meanwhile goes back to its pool with the last
    (or, when its runtime was shut down meanwhile, is freed)."""
    with _exports_lock:
        buffer._exports -= 1
        ptr = None
        orphan = None
        held = None
        if buffer._exports == 0:
            _exported.discard(buffer)
            held = _held_images.pop(id(buffer), None)
            orphan = _orphans.pop(id(buffer), None)
            ptr = getattr(buffer, "_closed_ptr", None)
            if ptr is not None:
                buffer._closed_ptr = None
    if held is not None:
        held.release()
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

    if _exported:
        gc.collect()  # exports only garbage cycles still hold (a frame kept by a traceback) end first
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
        return mapped(np.asarray(obj), obj, what, writable=what == "the destination")
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


def mapped(array: np.ndarray, obj: object, what: str, writable: bool = False) -> np.ndarray:
    """``array`` (made from ``obj``) when its memory may be read (and written, if ``writable``);
    ``INVALID_ARGUMENT`` when ``obj`` handed out a raw address (``__array_interface__``'s
    ``data`` tuple, ``__array_struct__``) of memory the process has not mapped so.

    Objects that hand out raw addresses are a rare path, and a wrong address there would crash the
    process at the copy (NumPy's own copy crashes on it too), so such a range is checked against
    offloadrt's allocations, then against the process's mappings (``/proc/self/maps``). Memory a
    NumPy array or a buffer-protocol object owns is not looked at again.
    """
    if array.base is not obj or isinstance(obj, np.ndarray) or not array.nbytes:
        return array
    low, high = _byte_bounds(array)
    if _allocated(low, high - low):
        return array
    problem = _unmapped(low, high, writable)
    if problem:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what} {type(obj).__name__} describes {high - low} bytes at {low:#x} "
                           f"(its __array_interface__ or __array_struct__), but {problem}; nothing was copied")
    return array


try:
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # NumPy 1.x
    _byte_bounds = np.byte_bounds  # type: ignore[attr-defined]


def _allocated(address: int, size: int) -> bool:
    """Whether the range lies in one live offloadrt allocation the host can reach."""
    from .. import api

    context = api._state.STATE.context
    if context is None:
        return False
    alloc = context.allocations.find(address)
    return (alloc is not None and address + size <= alloc.end
            and (alloc.device.is_host or alloc.kind is not AllocType.DEVICE))


def _unmapped(low: int, high: int, writable: bool) -> str:
    """Why ``[low, high)`` cannot be read (or written) by this process; "" when it can, or when the
    mappings cannot be read (not Linux): then the range is trusted as before."""
    need = "rw" if writable else "r"
    try:
        with open("/proc/self/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return ""
    at = low
    for line in lines:
        span, perms = line.split(b" ", 2)[:2]
        start_text, _, end_text = span.partition(b"-")
        start, end = int(start_text, 16), int(end_text, 16)
        if end <= at:
            continue
        if start > at:
            break  # a hole at `at`
        if any(chr(perms[i]) != need[i] for i in range(len(need))):
            kind = "writable" if writable and perms[0:1] == b"r" else "readable"
            return f"the memory at {at:#x} is not {kind} (mapped {perms.decode()})"
        at = end
        if at >= high:
            return ""
    return f"the process has no memory mapped at {at:#x}"
