"""Device memory: :class:`Buffer`, a block of one device's memory (from its pool, or foreign)."""

from __future__ import annotations

import ctypes
import sys
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import api
from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import AllocType, DeviceType
from . import _copy, _hostmem, _runtime  # (_copy: used at call time only)
from ._errors import NotAvailableError, with_context
from ._queue import Queue

_ndarray = np.ndarray
_char_at = ctypes.c_char.from_buffer
_addressof = ctypes.addressof

if TYPE_CHECKING:
    from ._device import Device
    from ._pool import _Home


def foreign(device: Device, ptr: int, nbytes: int, kind: AllocType, owner: object) -> Buffer:
    """A Buffer over memory no pool owns (a global variable of ``owner``); closing it frees nothing."""
    from ._pool import _Home

    return Buffer(ptr, nbytes, _Home(device, kind, None, 0, owner))


class Buffer:
    """Memory of one device: ``nbytes`` bytes at ``ptr``, of a ``kind`` (``AllocType``).

    Make one with :meth:`Device.allocate`; :meth:`close` (or the end of a ``with`` block) gives it
    back to the pool. ``copy_from``, ``copy_to`` and ``fill`` run at once, or in order on a
    ``queue``. Memory the host can reach (every buffer of the host device, ``HOST`` and ``MANAGED``
    buffers of a GPU) can be viewed without a copy: ``numpy.asarray(buffer)`` (and, on Python 3.12
    and later, ``memoryview(buffer)``). Every buffer has ``__dlpack__``. A buffer keeps its device
    alive; a buffer closed while views or DLPack capsules of it exist stays valid for them and
    returns to its pool when the last one is gone.
    """

    __slots__ = ("_ptr", "nbytes", "_home", "_queues", "_exports", "_closed_ptr", "__weakref__")
    _closed_ptr: int | None  # set by close() while exported: the block goes back with the last export

    def __init__(self, ptr: int, nbytes: int, home: _Home) -> None:
        self._ptr: int | None = ptr
        self.nbytes = nbytes
        self._home = home
        self._queues: Any = None  # None, the Queue it was used on, or a set of them
        self._exports = 0

    @property
    def ptr(self) -> int:
        """The address of the memory on its device (0 for an empty buffer)."""
        return self._checked_ptr()

    @property
    def device(self) -> Device:
        """The device the memory belongs to."""
        return self._home.device

    @property
    def _device(self) -> Device:
        return self._home.device

    @property
    def kind(self) -> AllocType:
        """The kind of memory: ``DEVICE``, ``HOST`` or ``MANAGED``."""
        return self._home.kind

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._ptr is None

    def _checked_ptr(self) -> int:
        ptr = self._ptr
        if ptr is None:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{self!r} is closed; allocate a new buffer")
        if self._home.device._runtime.closed:
            raise _runtime.stale()
        return ptr

    @property
    def _host_reachable(self) -> bool:
        home = self._home
        return home.device.type in (DeviceType.HOST, DeviceType.CPU) or home.kind != AllocType.DEVICE

    def close(self) -> None:
        """Give the memory back to the pool; the buffer cannot be used afterwards. Closing twice is
        allowed. Work already queued on it is safe: the block is reused only after that work."""
        ptr = self._ptr
        if ptr is None:
            return
        self._ptr = None
        if self._home.pool is None or not ptr:
            return
        if self._exports:
            with _hostmem._exports_lock:
                if self._exports:
                    self._closed_ptr = ptr
                    return
        if self._queues is None:
            self._home.ready.append(ptr)
        else:
            self._give_back(ptr)

    def _give_back(self, ptr: int) -> None:
        home = self._home
        if home.pool is None:
            return
        if self._queues is None:
            home.ready.append(ptr)
        else:
            home.pool._free_used(ptr, home, self._queues)

    def _use(self, queue: Queue) -> None:
        """Note that work on ``queue`` uses this buffer (its block is reused only after that work)."""
        used = self._queues
        if used is queue:
            return
        if used is None:
            self._queues = queue
        elif type(used) is set:
            used.add(queue)
        else:
            self._queues = {used, queue}

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self._ptr:
            try:
                self.close()
            except Exception as exc:  # noqa: BLE001  # a finaliser must not raise: leak and say so
                try:
                    warnings.warn(f"offloadrt: could not return a garbage-collected buffer to its pool "
                                  f"({exc}); its memory is leaked until shutdown", OffloadWarning, stacklevel=2)
                except Exception:  # noqa: BLE001, S110  # interpreter shutdown: nothing left to warn with
                    pass

    # ---- copies and fills ----------------------------------------------------------------------

    def copy_from(self, src: Any, queue: Queue | None = None) -> None:
        """Copy all of ``src`` into this buffer: a :class:`Buffer`, an :class:`Array`, or a host object
        with the buffer protocol (a NumPy array, ``bytes``...). Sizes must match.

        Without ``queue`` the copy is done when the call returns; with one it runs in the queue's
        order, and a host object is kept alive until it has run.
        """
        # The hot path, in this frame: a C-contiguous NumPy array (ctypes takes only those) of this
        # buffer's size onto an open queue of this buffer's device, whose runtime is running, as
        # _copy.transfer would check it; anything else takes transfer, which says what is wrong.
        if type(src) is _ndarray and isinstance(queue, Queue):
            home = self._home
            device = home.device
            ptr = self._ptr
            handle = queue._handle
            if (ptr is not None and handle is not None and queue._device is device and src.nbytes == self.nbytes
                    and self.nbytes and not device._runtime.closed):
                try:
                    address = _addressof(_char_at(src))  # type: ignore[arg-type]
                except (TypeError, ValueError, BufferError):
                    pass  # not C-contiguous, or read-only: transfer copies it or says why
                else:
                    if self._queues is not None and self._queues is not queue:
                        _copy.follow(self, queue)  # after other queues' work on this buffer
                    try:
                        api.olMemcpy(handle, ptr, device.handle, address, device._runtime.host.handle, self.nbytes)
                    except OffloadError as exc:
                        raise with_context(exc, f"copying {self.nbytes} bytes from {_hostmem._describe(src)} "
                                                f"to {self!r}") from exc
                    if self._queues is not queue:
                        self._use(queue)
                    queue._hold(src)
                    return
        _copy.copy(self, src, queue, into=True)

    def copy_to(self, dst: Any, queue: Queue | None = None) -> None:
        """Copy this buffer into ``dst`` (a :class:`Buffer`, an :class:`Array`, or a writable host object
        with the buffer protocol, such as a NumPy array). Sizes must match. ``queue`` as for
        :meth:`copy_from`."""
        # The hot path, as in copy_from: a writable C-contiguous NumPy array, on an open queue of
        # this buffer's device (which does a device-to-host copy).
        if type(dst) is _ndarray and isinstance(queue, Queue):
            device = self._home.device
            ptr = self._ptr
            handle = queue._handle
            if (ptr is not None and handle is not None and queue._device is device and dst.nbytes == self.nbytes
                    and self.nbytes and not device._runtime.closed):
                try:
                    address = _addressof(_char_at(dst))  # type: ignore[arg-type]
                except (TypeError, ValueError, BufferError):
                    pass
                else:
                    if self._queues is not None and self._queues is not queue:
                        _copy.follow(self, queue)
                    try:
                        api.olMemcpy(handle, address, device._runtime.host.handle, ptr, device.handle, self.nbytes)
                    except OffloadError as exc:
                        raise with_context(exc, f"copying {self.nbytes} bytes from {self!r} to "
                                                f"{_hostmem._describe(dst)}") from exc
                    if self._queues is not queue:
                        self._use(queue)
                    queue._hold(dst)
                    return
        _copy.copy(self, dst, queue, into=False)

    def fill(self, pattern: Any, queue: Queue | None = None) -> None:
        """Fill the buffer with repeated copies of ``pattern``: an int 0..255 (one byte), a NumPy scalar
        (its bytes, e.g. ``numpy.float32(1.0)``) or any bytes-like object. ``nbytes`` must be a
        multiple of the pattern's length. ``queue`` as for :meth:`copy_from`."""
        _copy.fill(self, 0, self.nbytes, pattern, queue)

    # ---- interchange ---------------------------------------------------------------------------

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of the buffer as a 1-D array of ``nbytes`` uint8 (zero-copy)."""
        from ._dlpack import export

        return export(self, 0, (self.nbytes,), "|u1", None, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, device id) of the memory: CPU, CUDA, CUDAHost, CUDAManaged, ROCM, ROCMHost."""
        from ._dlpack import device_of

        return device_of(self)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        if not self._host_reachable:
            raise NotAvailableError(ErrorCode.INVALID_ARGUMENT, _unreachable(self))
        _copy.settle(self, None)  # the view reads now: after the queued work that uses the buffer
        return {"shape": (self.nbytes,), "typestr": "|u1", "version": 3,
                "data": _hostmem.keeper(self, 0, self.nbytes)}

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        import numpy as np

        if not self._host_reachable:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, _unreachable(self))
        view = np.asarray(_hostmem.keeper(self, 0, self.nbytes)).view(np.uint8) if self.nbytes else \
            np.empty(0, np.uint8)
        return np.array(view, dtype=dtype, copy=True) if copy or dtype is not None else view

    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview:
            if not self._host_reachable:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT, _unreachable(self))
            _copy.settle(self, None)
            return memoryview(_hostmem.keeper(self, 0, self.nbytes)).cast("B")

        def __release_buffer__(self, view: memoryview, /) -> None:
            view.release()

    def __repr__(self) -> str:
        state = "closed" if self._ptr is None else f"at {self._ptr:#x}"
        return f"<Buffer of {self.nbytes} bytes of {self._home.kind.name} memory on {self._home.device}, {state}>"


def _unreachable(buffer: Buffer) -> str:
    return (f"{buffer!r} is device memory the host cannot reach; copy it with buffer.copy_to(numpy_array) "
            f"(or Array.numpy()), or allocate HOST or MANAGED memory to share it with the host")
