"""Typed arrays: :class:`Array`, ``offloadrt.empty`` and ``offloadrt.asarray``."""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import ErrorCode, OffloadError
from ..types import AllocType, DeviceType, PlatformBackend
from . import _copy, _device, _foreign, _hostmem, _memory
from ._errors import NotAvailableError
from ._layout import _basic_index, _c_strides, _contiguous, _extent, _probe, _reshaped, _strides

if TYPE_CHECKING:
    from ._device import Device
    from ._memory import Buffer
    from ._queue import Queue


class Array:
    """A typed view of a :class:`Buffer`: ``shape`` elements of ``dtype`` from byte ``offset``, in C
    order or with byte ``strides``.

    Make one with :func:`offloadrt.empty`, :func:`zeros`, :func:`full` or :func:`asarray`, or over an
    existing buffer with ``Array(buffer, shape, dtype, offset=0)``. Basic indexing and slicing,
    :meth:`reshape`, :attr:`T`/:meth:`transpose` and :meth:`ravel` give views of the same memory
    (with strides where they must); :meth:`get`/:meth:`numpy` copy to NumPy, :meth:`set`/
    :meth:`copy_from`, :meth:`copy_to`, :meth:`fill`, :meth:`copy` and :meth:`astype` copy on the
    device side. Where the host can reach the memory, ``numpy.asarray(array)`` is a zero-copy view;
    ``numpy.from_dlpack`` and other DLPack consumers work everywhere, and on CUDA memory
    ``__cuda_array_interface__`` (version 3) names the array's queue as its stream. ``queue`` is
    the array's queue: the one ``numpy()`` and interchange wait for by default.

    Reads from the host wait for the work that uses the memory: an array knows the queues its
    buffer was used on (launches that received it, copies into or out of it), and ``numpy()``,
    ``get``, ``copy_to``, ``numpy.asarray`` and DLPack exports wait for them first.
    Arithmetic operators are not offered: write an :func:`offloadrt.elementwise` kernel, or hand the
    array to an array library (``cupy.from_dlpack``, ``numpy.from_dlpack``).
    """

    __slots__ = ("_buf", "_offset", "shape", "dtype", "nbytes", "_queue", "_strides", "_at", "__weakref__")
    __array_ufunc__ = None  # NumPy's operators defer to this class, whose operators say what to do

    def __init__(self, buffer: Buffer, shape: int | tuple[int, ...], dtype: Any, offset: int = 0,
                 queue: Queue | None = None, strides: tuple[int, ...] | None = None) -> None:
        if not isinstance(buffer, _memory.Buffer):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"an Array views a Buffer, got {type(buffer).__name__}")
        self.dtype = _dtype(dtype)
        self.shape = _shape(shape)
        try:
            start = operator.index(offset)
        except TypeError:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"offset must be an integer, got {offset!r}") from None
        itemsize = self.dtype.itemsize
        if start < 0 or start % itemsize:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"offset {start} must be a non-negative multiple of the element size "
                               f"({itemsize} bytes of {self.dtype})")
        self.nbytes = math.prod(self.shape) * itemsize
        buffer._checked_ptr()
        steps = None if strides is None else _strides(strides, self.shape, itemsize)
        if steps is not None and steps == _c_strides(self.shape, itemsize):
            steps = None
        low, high = (start, start + self.nbytes) if steps is None else _extent(start, self.shape, steps, itemsize)
        if low < 0 or high > buffer.nbytes:
            raise OffloadError(ErrorCode.INVALID_SIZE,
                               f"{self.shape} elements of {self.dtype} from offset {start}"
                               f"{'' if steps is None else f' with strides {steps}'} reach bytes {low} to {high}; "
                               f"{buffer!r} has {buffer.nbytes}")
        self._buf = buffer
        self._offset = start
        self._queue = queue
        self._strides = steps  # None: C order
        self._at = start if steps is None else None  # what launches add to the buffer's pointer (None: refused)

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

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes from one element to the next along each dimension (as NumPy's ``strides``)."""
        steps = self._strides
        return _c_strides(self.shape, self.dtype.itemsize) if steps is None else steps

    @property
    def flags(self) -> ArrayFlags:
        """``c_contiguous`` and ``f_contiguous``, as NumPy's ``flags`` says them."""
        itemsize = self.dtype.itemsize
        c_order = self._strides is None
        f_order = _contiguous(self.shape[::-1], self.strides[::-1], itemsize)
        return ArrayFlags(c_order, f_order)

    @property
    def T(self) -> Array:  # noqa: N802  # NumPy's name
        """The transposed view (axes reversed)."""
        return self.transpose()

    # ---- views ---------------------------------------------------------------------------------

    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...] | None, offset: int) -> Array:
        return Array(self._buf, shape, self.dtype, offset, self._queue, strides)

    def __getitem__(self, key: Any) -> Array:
        """A view of the elements ``key`` selects: ints, slices (any step), ``...`` and ``None``, as in
        NumPy's basic indexing. An int for every dimension gives a 0-d array (``.get()`` reads it)."""
        index = _basic_index(key)
        probe = _probe(self.shape, self.strides, self.dtype.itemsize)
        selected = probe[index if Ellipsis in index else (*index, Ellipsis)]
        moved = selected.__array_interface__["data"][0] - probe.__array_interface__["data"][0]
        return self._view(selected.shape, selected.strides, self._offset + moved)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``array[key] = value``: fill the selected elements with a number, or copy an array of their
        shape into them (at once)."""
        target = self[key]
        if isinstance(value, (Array, np.ndarray, list, tuple)) or hasattr(value, "__array_interface__"):
            target.copy_from(value)
        else:
            target.fill(value)

    def reshape(self, *shape: Any) -> Array:
        """The same elements in another ``shape`` (one extent may be -1): a view of a C-ordered array,
        else a view of a C-ordered copy (as NumPy)."""
        wanted = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        extents = _reshaped(self.shape, wanted)
        source = self if self._strides is None else self.copy()
        return Array(source._buf, extents, self.dtype, source._offset, source._queue)

    def transpose(self, *axes: Any) -> Array:
        """A view with the dimensions permuted (reversed without ``axes``)."""
        order = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        ndim = len(self.shape)
        if not order:
            chosen = tuple(range(ndim))[::-1]
        else:
            try:
                chosen = tuple(operator.index(axis) % ndim if ndim else operator.index(axis) for axis in order)
            except TypeError:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"axes are ints, got {axes!r}") from None
            if sorted(chosen) != list(range(ndim)):
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"axes {tuple(order)} are not a permutation of the {ndim} dimensions")
        steps = self.strides
        return self._view(tuple(self.shape[a] for a in chosen), tuple(steps[a] for a in chosen), self._offset)

    def ravel(self) -> Array:
        """A 1-D array of the elements in C order: a view of a C-ordered array, else a copy."""
        return self.reshape(-1)

    # ---- copies --------------------------------------------------------------------------------

    def numpy(self, queue: Queue | None = None) -> np.ndarray:
        """A new NumPy array with a copy of the data, complete when the call returns.

        The copy runs on ``queue``, else on the array's own queue (after the work given to it), else
        at once; it waits first for the work of other queues that used the memory, and the call waits
        for the copy (``QUEUE_ERROR`` if a queue failed).
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

    def get(self, queue: Queue | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The data as a NumPy array (a copy, complete on return): ``out`` when given (its shape and
        dtype must be the array's), else a new one. ``queue`` as for :meth:`numpy`."""
        if out is None:
            return self.numpy(queue)
        if not isinstance(out, np.ndarray) or out.shape != self.shape or out.dtype != self.dtype:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"out must be a NumPy array of shape {self.shape} and dtype {self.dtype}, got "
                               f"{_hostmem._describe(out)}")
        self.copy_to(out, queue)
        if queue is not None:
            queue.sync()
        elif self._queue is not None and self._queue._handle is not None:
            self._queue.sync()
        return out

    def set(self, src: Any, queue: Queue | None = None) -> None:
        """Copy ``src`` (an array of this shape and dtype: an :class:`Array`, a NumPy array, a list)
        into this array: :meth:`copy_from`."""
        self.copy_from(src, queue)

    def copy_from(self, src: Any, queue: Queue | None = None) -> None:
        """Copy ``src`` into this array: an :class:`Array` or a host array (NumPy, a list...) of the
        same shape and dtype (``astype`` converts). Without ``queue`` the copy is done when the call
        returns; with one it runs in the queue's order (the host object is kept alive until then)."""
        source = _same_as(self, src, "copy from")
        _copy.transfer(self, source, queue)

    def copy_to(self, dst: Any, queue: Queue | None = None) -> None:
        """Copy this array into ``dst``: an :class:`Array` or a writable NumPy array of the same shape
        and dtype. ``queue`` as for :meth:`copy_from`."""
        target = _same_as(self, dst, "copy to", writable=True)
        _copy.transfer(target, self, queue)

    def fill(self, value: Any, queue: Queue | None = None) -> None:
        """Set every element to ``value`` (converted to the array's dtype, as NumPy converts it).
        ``queue`` as for :meth:`copy_from`."""
        try:
            pattern = np.asarray(value, dtype=self.dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"cannot fill {self!r} with {value!r}: {exc}") from None
        if pattern.ndim:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"fill takes one value, got an array of shape {pattern.shape}; use copy_from")
        if self._strides is None:
            _copy.fill(self._buf, self._offset, self.nbytes, pattern.reshape(()).tobytes(), queue)
        else:
            _copy.fill_strided(self, pattern.reshape(()).tobytes(), queue)

    def copy(self, queue: Queue | None = None) -> Array:
        """A new C-ordered array on the same device with a copy of the data (``queue``: as for
        :meth:`copy_from`, and the new array's queue)."""
        result = empty(self.shape, self.dtype, self.device, queue)
        result.copy_from(self, queue)
        return result

    def astype(self, dtype: Any, queue: Queue | None = None) -> Array:
        """A new array of the elements converted to ``dtype`` (as NumPy converts them). The
        conversion runs on the host: GPU memory goes there and back (write an elementwise kernel to
        convert on the device)."""
        wanted = _dtype(dtype)
        if wanted == self.dtype:
            return self.copy(queue)
        converted = self.numpy(queue).astype(wanted)
        return asarray(converted, self.device, queue)

    def close(self) -> None:
        """Give the memory back (:meth:`Buffer.close`): this array, and every view of the same buffer,
        cannot be used afterwards. Closing twice is allowed."""
        self._buf.close()

    def __enter__(self) -> Array:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of the array (zero-copy unless ``copy`` or another ``dl_device`` asks for one).

        Before exporting, the consumer's ``stream`` is made safe: the array's queue is waited for
        unless ``stream`` is -1 or that queue's own stream.
        """
        from ._dlpack import export

        return export(self._buf, self._offset, self.shape, self.dtype, self._queue, stream, max_version, dl_device,
                      copy, self._strides)

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
        _copy.settle(buffer, None)
        if self._strides is None:
            return {"shape": self.shape, "typestr": self.dtype.str, "version": 3, "strides": None,
                    "data": _hostmem.keeper(buffer, self._offset, self.nbytes)}
        low, high = _extent(self._offset, self.shape, self._strides, self.dtype.itemsize)
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3, "strides": self._strides,
                "data": _hostmem.keeper(buffer, low, high - low), "offset": self._offset - low}

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
                "strides": self._strides, "stream": stream}

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d Array")
        return self.shape[0]

    def __repr__(self) -> str:
        strided = "" if self._strides is None else f" strides {self._strides}"
        return f"<Array {self.dtype}{list(self.shape)}{strided} on {self._buf._device}>"

    def _no_arithmetic(self, *_: object) -> Any:
        raise TypeError("offloadrt arrays do not do arithmetic. Write the operation as a kernel: "
                        "offloadrt.elementwise('const float *x, float *y', 'y[i] = 2 * x[i]')(x, y), or hand the "
                        "array to an array library without a copy: cupy.from_dlpack(array) on a GPU, "
                        "numpy.asarray(array) or numpy.from_dlpack(array) on the host")

    __add__ = __radd__ = __iadd__ = __sub__ = __rsub__ = __isub__ = __mul__ = __rmul__ = __imul__ = _no_arithmetic
    __truediv__ = __rtruediv__ = __itruediv__ = __floordiv__ = __rfloordiv__ = __ifloordiv__ = _no_arithmetic
    __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = __neg__ = __pos__ = _no_arithmetic
    __abs__ = __invert__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _no_arithmetic
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _no_arithmetic
    __lt__ = __le__ = __gt__ = __ge__ = _no_arithmetic  # (== and != stay identity, so arrays can be dict keys)


class ArrayFlags(NamedTuple):
    """What :attr:`Array.flags` says of an array's layout."""

    c_contiguous: bool
    f_contiguous: bool


def _same_as(array: Array, other: Any, what: str, writable: bool = False) -> Any:
    """``other`` checked to have ``array``'s shape and dtype (a list becomes a NumPy array of its dtype)."""
    if isinstance(other, Array):
        shape, dtype = other.shape, other.dtype
    elif isinstance(other, np.ndarray):
        shape, dtype = other.shape, other.dtype
    elif writable:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"cannot {what} {type(other).__name__}: pass an offloadrt Array or a writable NumPy array")
    else:
        try:
            other = np.asarray(other, dtype=array.dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"cannot {what} {type(other).__name__}: {exc}") from None
        other = _hostmem.mapped(other, other, "the source")
        shape, dtype = other.shape, other.dtype
    if shape != array.shape:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"cannot {what} an array of shape {shape} with {array!r}: the shapes must be the same")
    if dtype != array.dtype:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"cannot {what} an array of dtype {dtype} with {array!r}: the dtypes must be the same "
                           f"(convert with astype first)")
    return other


def zeros(shape: int | tuple[int, ...], dtype: Any = np.float64, device: Device | str | None = None,
          queue: Queue | None = None) -> Array:
    """A new :class:`Array` of zeros (as :func:`empty`, then filled)."""
    result = empty(shape, dtype, device, queue)
    result.fill(0, queue)
    return result


def full(shape: int | tuple[int, ...], value: Any, dtype: Any = None, device: Device | str | None = None,
         queue: Queue | None = None) -> Array:
    """A new :class:`Array` with every element ``value`` (``dtype``: NumPy's choice for ``value`` when
    not given)."""
    chosen = np.asarray(value).dtype if dtype is None else dtype
    result = empty(shape, chosen, device, queue)
    result.fill(value, queue)
    return result


def empty_like(array: Any, dtype: Any = None, device: Device | str | None = None,
               queue: Queue | None = None) -> Array:
    """A new, uninitialised C-ordered array of ``array``'s shape and dtype (an Array's device and queue
    unless given)."""
    shape, kind, where, order = _like(array, device, queue)
    return empty(shape, kind if dtype is None else dtype, where, order)


def zeros_like(array: Any, dtype: Any = None, device: Device | str | None = None,
               queue: Queue | None = None) -> Array:
    """As :func:`empty_like`, filled with zeros."""
    shape, kind, where, order = _like(array, device, queue)
    return zeros(shape, kind if dtype is None else dtype, where, order)


def _like(array: Any, device: Device | str | None, queue: Queue | None) -> tuple[Any, Any, Any, Any]:
    if isinstance(array, Array):
        if device is None and queue is None:
            return array.shape, array.dtype, array.device, array._queue
        return array.shape, array.dtype, device, queue
    if isinstance(array, np.ndarray):
        return array.shape, array.dtype, device, queue
    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                       f"*_like takes an offloadrt Array or a NumPy array, got {type(array).__name__}")


def ascontiguousarray(array: Any, device: Device | str | None = None, queue: Queue | None = None) -> Array:
    """``array`` itself when it is a C-ordered Array on ``device`` (default: its own), else a C-ordered
    copy there (host objects are copied as :func:`asarray` does)."""
    if isinstance(array, Array):
        target = array.device if device is None and queue is None else _target(device, queue)
        if array._strides is None and target is array.device:
            return array
        if target is array.device:
            return array.copy(queue)
        return asarray(array.copy(), target, queue)
    return asarray(array, device, queue)


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
