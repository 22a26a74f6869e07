"""Typed arrays: :class:`Array`, ``offloadrt.empty`` and ``offloadrt.asarray``."""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ErrorCode, OffloadError
from ..types import AllocType, DeviceType, PlatformBackend
from . import _copy, _device, _foreign, _hostmem, _memory
from ._errors import NotAvailableError

if TYPE_CHECKING:
    from ._device import Device
    from ._memory import Buffer
    from ._queue import Queue


class Array:
    """A typed, C-ordered view of a :class:`Buffer`: ``shape`` elements of ``dtype`` from byte ``offset``.

    Make one with :func:`offloadrt.empty` or :func:`offloadrt.asarray`, or over an existing buffer
    with ``Array(buffer, shape, dtype, offset=0)``. ``numpy()`` copies it to a NumPy array. Where
    the host can reach the memory, ``numpy.asarray(array)`` is a zero-copy view; ``numpy.from_dlpack``
    and other DLPack consumers work everywhere, and on CUDA memory ``__cuda_array_interface__``
    (version 3) names the array's queue as its stream. ``queue`` is the array's queue: the one
    ``numpy()`` and interchange wait for by default.
    """

    __slots__ = ("_buf", "_offset", "shape", "dtype", "nbytes", "_queue", "__weakref__")

    def __init__(self, buffer: Buffer, shape: int | tuple[int, ...], dtype: Any, offset: int = 0,
                 queue: Queue | None = None) -> None:
        if not isinstance(buffer, _memory.Buffer):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"an Array views a Buffer, got {type(buffer).__name__}")
        self.dtype = _dtype(dtype)
        self.shape = _shape(shape)
        try:
            start = operator.index(offset)
        except TypeError:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"offset must be an integer, got {offset!r}") from None
        if start < 0 or start % self.dtype.itemsize:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"offset {start} must be a non-negative multiple of the element size "
                               f"({self.dtype.itemsize} bytes of {self.dtype})")
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        buffer._checked_ptr()
        if start + self.nbytes > buffer.nbytes:
            raise OffloadError(ErrorCode.INVALID_SIZE,
                               f"{self.shape} elements of {self.dtype} from offset {start} need {start + self.nbytes} "
                               f"bytes; {buffer!r} has {buffer.nbytes}")
        self._buf = buffer
        self._offset = start
        self._queue = queue

    @property
    def buffer(self) -> Buffer:
        """The buffer the array views."""
        return self._buf

    @property
    def device(self) -> Device:
        """The device the array's memory belongs to."""
        return self._buf._device

    @property
    def offset(self) -> int:
        """Where the array starts in its buffer, in bytes."""
        return self._offset

    @property
    def queue(self) -> Queue | None:
        """The array's queue (given to ``empty``/``asarray``), or None."""
        return self._queue

    @property
    def ptr(self) -> int:
        """The device address of the first element."""
        return self._buf._checked_ptr() + self._offset

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def numpy(self, queue: Queue | None = None) -> np.ndarray:
        """A new NumPy array with a copy of the data, complete when the call returns.

        The copy runs on ``queue``, else on the array's own queue (after the work given to it), else
        at once; the call waits for it (``QUEUE_ERROR`` if that queue failed).
        """
        out = np.empty(self.shape, self.dtype)
        order = queue if queue is not None else self._queue
        if order is not None and order._handle is None:
            if order._final_event is not None:
                order._final_event.sync()
            order = None
        _copy.transfer(out, self, order)
        if order is not None:
            order.sync()
        return out

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of the array (zero-copy unless ``copy`` or another ``dl_device`` asks for one).

        Before exporting, the consumer's ``stream`` is made safe: the array's queue is waited for
        unless ``stream`` is -1 or that queue's own stream.
        """
        from ._dlpack import export

        return export(self._buf, self._offset, self.shape, self.dtype, self._queue, stream, max_version, dl_device,
                      copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, device id) of the array's memory."""
        return self._buf.__dlpack_device__()

    @property
    def __array_interface__(self) -> dict[str, Any]:
        buffer = self._buf
        if not buffer._host_reachable:
            raise NotAvailableError(ErrorCode.INVALID_ARGUMENT,
                                    f"the array's memory ({buffer!r}) is device memory the host cannot reach; "
                                    f"use array.numpy() for a copy")
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3, "strides": None,
                "data": _hostmem.keeper(buffer, self._offset, self.nbytes)}

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if not self._buf._host_reachable:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"the array's memory ({self._buf!r}) is device memory the host cannot reach; "
                               f"use array.numpy() for a copy")
        view = np.asarray(self)
        return np.array(view, dtype=dtype, copy=True) if copy or dtype is not None else view

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface (version 3) of an array in CUDA memory; ``stream`` is its queue's."""
        buffer = self._buf
        if buffer._device.backend != PlatformBackend.CUDA:
            raise NotAvailableError(ErrorCode.UNSUPPORTED,
                                    f"__cuda_array_interface__ describes CUDA memory; this array is on "
                                    f"{buffer._device}")
        ptr = buffer._checked_ptr() + self._offset if self.nbytes else 0
        stream = None
        queue = self._queue
        if queue is not None:
            if queue._handle is not None:
                from ._queue import native_stream

                stream = native_stream(queue._handle)
            elif queue._final_event is not None:
                queue._final_event.sync()  # closed with work pending: nothing to name, so wait for it
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (ptr, False), "version": 3,
                "strides": None, "stream": stream}

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d Array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Array {self.dtype}{list(self.shape)} on {self._buf._device}>"


def empty(shape: int | tuple[int, ...], dtype: Any, device: Device | str | None = None,
          queue: Queue | None = None) -> Array:
    """A new, uninitialised :class:`Array` in ``DEVICE`` memory of ``device`` (default:
    ``offloadrt.device()``, or ``queue``'s device). ``queue`` becomes the array's queue."""
    dtype, shape = _dtype(dtype), _shape(shape)
    target = _target(device, queue)
    buffer = target.allocate(math.prod(shape) * dtype.itemsize, AllocType.DEVICE, queue)
    return Array(buffer, shape, dtype, queue=queue)


def asarray(obj: Any, device: Device | str | None = None, queue: Queue | None = None) -> Array:
    """``obj`` as an :class:`Array` on ``device`` (default: ``offloadrt.device()``, or ``queue``'s device).

    - An Array already there is returned as it is; an Array of another device is copied.
    - Another library's GPU memory (CuPy, PyTorch, Numba...; DLPack first, then the CUDA Array
      Interface) is viewed in place when it is on ``device``, in C order and writable (the view
      keeps the producer alive), else copied device to device (peer to peer from another GPU of
      the platform). It never passes through host memory: another vendor's memory, GPUs without
      peer access or memory offloadrt cannot reach are refused with an ``OffloadError`` saying why.
    - Anything else (a NumPy array, a list, buffer-protocol objects, DLPack host memory) is copied
      from the host into a new array.

    With ``queue`` (a queue of ``device``) the work runs in its order: copies of host objects keep
    them alive until they have run, and the producer of GPU memory orders its pending work before
    the queue (DLPack: ``__dlpack__(stream=<the queue's stream>)``; CUDA Array Interface: the queue
    waits for the interface's ``stream``). The queue becomes the array's queue. Without one the
    call returns once the data is ready.
    """
    target = _target(device, queue)
    if isinstance(obj, Array):
        if obj._buf._device is target:
            return obj
        result = empty(obj.shape, obj.dtype, target, queue)
        doing = target if obj.device.type == DeviceType.HOST else obj.device
        _copy.transfer(result, obj, queue if queue is not None and queue._device is doing else None)
        return result
    found = _foreign.take_in(obj, target, queue)
    if isinstance(found, Array):
        return found
    host = _host_array(obj if found is None else found)
    result = empty(host.shape, host.dtype, target, queue)
    _copy.transfer(result, host, queue)
    return result


def _target(device: Device | str | None, queue: Queue | None) -> Device:
    if device is None and queue is not None:
        return queue._device
    return _device.device(device)


def _host_array(obj: Any) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        host = obj
    elif hasattr(obj, "__dlpack__") and not hasattr(obj, "__array_interface__"):
        try:
            host = np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"cannot read the DLPack object {type(obj).__name__} from the host ({exc}); copy it to "
                               f"the host first") from exc
    else:
        try:
            host = np.asarray(obj)
        except (TypeError, ValueError) as exc:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"cannot make an array of {type(obj).__name__}: {exc}") from exc
        host = _hostmem.mapped(host, obj, "the object")
    _dtype(host.dtype)
    return host if host.flags.c_contiguous else host.copy(order="C")


_DTYPES: dict[Any, np.dtype[Any]] = {}  # the dtypes asked for so far, by what they were asked as
_DTYPES_KEPT = 256


def _dtype(dtype: Any) -> np.dtype[Any]:
    try:
        return _DTYPES[dtype]
    except (KeyError, TypeError):  # not asked yet, or unhashable
        pass
    try:
        result = np.dtype(dtype)
    except TypeError as exc:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{dtype!r} is not a dtype: {exc}") from None
    if result.kind not in "biufc" or not result.isnative:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"arrays hold numbers in native byte order (bool, int, uint, float, complex), not {result}")
    try:
        if len(_DTYPES) < _DTYPES_KEPT:
            _DTYPES[dtype] = result
    except TypeError:
        pass
    return result


def _shape(shape: Any) -> tuple[int, ...]:
    if type(shape) is int and shape >= 0:
        return (shape,)
    items = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    try:
        extents = tuple(map(operator.index, items))
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"a shape is an int or a tuple of ints, got {shape!r}") from None
    if extents and min(extents) < 0:
        raise OffloadError(ErrorCode.INVALID_SIZE, f"a shape has no negative extents, got {shape!r}")
    return extents
