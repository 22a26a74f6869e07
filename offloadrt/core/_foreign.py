"""Other libraries' arrays into offloadrt without a trip through the host: DLPack first, then the
CUDA Array Interface (``offloadrt.asarray`` asks :func:`take_in` before its host path).

- Where the memory lives: DLPack's ``__dlpack_device__()`` says (``kDLCUDA``/``kDLROCM`` with the
  ordinal, ``kDLCUDAManaged``); for a CUDA Array Interface pointer the GPU drivers are asked
  (``api._foreign.locate_pointer``). Host memory (``kDLCPU``, ``kDLCUDAHost``, ``kDLROCMHost``,
  page-locked memory behind a CAI pointer) takes the host path.
- View or copy: memory already on the target device, in C order and writable, is viewed in place
  (a Buffer over it that keeps the producer alive: the DLPack tensor until its deleter runs, or
  the CAI object); anything else is copied device to device (``olMemcpy`` between device
  pointers: within the device, or peer to peer from another GPU of the platform), a strided array
  as one copy per contiguous run. A copy that would pass through host memory (other vendor, GPUs
  without peer access) is refused, saying what was found and what to do instead.
- Order: the work runs on ``queue`` when the data is on its device, else on a temporary queue of
  the data's device that is synced before returning. DLPack producers get that queue's stream as
  ``__dlpack__(stream=...)`` and order their pending work before it; for a CAI ``stream`` a driver
  event recorded on it is waited for by that queue (or by the host, for a view without a queue).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import api
from ..api import _foreign as drivers
from ..errors import ErrorCode, OffloadError
from ..types import AllocType, DeviceType, PlatformBackend
from . import _array, _device, _dlpack, _memory
from ._errors import with_context
from ._queue import check, native_stream

if TYPE_CHECKING:
    from ._array import Array
    from ._device import Device
    from ._queue import Queue

#: the most contiguous runs a strided array is copied in (one olMemcpy each); more is refused
MAX_RUNS = 4096
_HOST_KINDS = frozenset({_dlpack.CPU, _dlpack.CUDA_HOST, _dlpack.ROCM_HOST})
_GPU_KINDS = {_dlpack.CUDA: PlatformBackend.CUDA, _dlpack.ROCM: PlatformBackend.AMDGPU}
_ELEMENT_TYPES = frozenset(np.dtype(code) for code in _dlpack._IMPORTED.values())


def take_in(obj: Any, target: Device, queue: Queue | None) -> Array | np.ndarray | None:
    """``obj`` as an :class:`Array` on ``target`` when it is another library's device memory
    (DLPack, else the CUDA Array Interface); a NumPy view of host memory that only the CUDA Array
    Interface describes; None for what the host path takes (NumPy arrays, buffer-protocol objects,
    DLPack host memory). ``queue`` must be a queue of ``target``."""
    if isinstance(obj, np.ndarray):
        return None
    where = _dlpack_device(obj)
    if where is not None:
        return _from_dlpack(obj, where, target, queue)
    interface = _interface(obj)
    if interface is not None:
        return _from_interface(obj, interface, target, queue)
    return None


# ---- DLPack ----------------------------------------------------------------------------------------

def _dlpack_device(obj: Any) -> tuple[int, int] | None:
    """``obj.__dlpack_device__()`` as two ints; None when ``obj`` does not offer DLPack."""
    ask = getattr(obj, "__dlpack_device__", None)
    if ask is None or not hasattr(obj, "__dlpack__"):
        return None
    try:
        found = ask()
        return int(found[0]), int(found[1])
    except OffloadError:
        raise
    except Exception as exc:  # noqa: BLE001  # whatever the producer raised, said as what it is
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{type(obj).__name__}.__dlpack_device__() did not give (device type, device id): "
                           f"{type(exc).__name__}: {exc}") from exc


def _from_dlpack(obj: Any, where: tuple[int, int], target: Device, queue: Queue | None) -> Array | None:
    kind, ordinal = where
    name = f"{type(obj).__name__} (DLPack device {_dlpack.DEVICE_TYPES.get(kind, kind)}, id {ordinal})"
    if kind in _HOST_KINDS or (kind == _dlpack.CUDA_MANAGED and target.type == DeviceType.HOST):
        return None  # the host reads it: NumPy's from_dlpack takes it in
    if kind == _dlpack.CUDA_MANAGED:
        _same_vendor(PlatformBackend.CUDA, target, name)
        source = target  # managed memory: every CUDA device uses it as it is
        memory = AllocType.MANAGED
    elif kind in _GPU_KINDS:
        source = _gpu(_GPU_KINDS[kind], ordinal, name)
        _reachable(source, target, name)
        memory = AllocType.DEVICE
    else:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"{name} is memory offloadrt cannot reach (it uses CUDA and ROCm devices, and the "
                           f"host); copy it to the host in the producing library first")
    _check_queue(queue, target)
    work, temporary = _work_queue(source, queue)
    try:
        tensor = _dlpack.take(_export(obj, native_stream(work._live())))
        try:
            if tensor.device != where:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"{name}: its DLPack tensor says device {tensor.device}, not {where}")
            dtype = _element_type(_dlpack.numpy_dtype(tensor.dtype), name)
            strides = None if tensor.strides is None else tuple(s * dtype.itemsize for s in tensor.strides)
            runs = _runs(tensor.shape, strides, dtype.itemsize, name)
        except BaseException:
            tensor.release()
            raise
        viewed = _viewable(source, target, runs, tensor.read_only)
        result = _place(source, target, tensor.data, tensor.shape, dtype, runs, viewed, memory, queue, work, tensor,
                        tensor.release)
    except BaseException:
        if temporary:
            _finish(work, failed=True)
        raise
    if temporary:
        _finish(work)
    if temporary and not viewed:
        tensor.release()  # copied, and the copy has run (a view keeps the tensor until its buffer goes)
    return result


def _export(obj: Any, stream: int) -> Any:
    """``obj.__dlpack__`` for ``stream`` as the array API standard has consumers call it: with
    ``max_version=(1, 0)``, again without it for a producer older than DLPack 1.0 (TypeError)."""
    try:
        try:
            return obj.__dlpack__(stream=stream, max_version=(1, 0))
        except TypeError:
            return obj.__dlpack__(stream=stream)
    except OffloadError:
        raise
    except (BufferError, TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{type(obj).__name__}.__dlpack__(stream={stream:#x}) failed: {type(exc).__name__}: "
                           f"{exc}") from exc


# ---- CUDA Array Interface ------------------------------------------------------------------------

def _interface(obj: Any) -> Mapping[str, Any] | None:
    try:
        found = obj.__cuda_array_interface__
    except AttributeError:
        return None
    if not isinstance(found, Mapping):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{type(obj).__name__}.__cuda_array_interface__ is a {type(found).__name__}, not a dict")
    return found


class _Described:
    """What a CUDA Array Interface dict says, checked."""

    def __init__(self, interface: Mapping[str, Any], name: str) -> None:
        try:
            self.shape = tuple(operator.index(n) for n in interface["shape"])
            ptr, read_only = interface["data"]
            self.ptr, self.read_only = operator.index(ptr), bool(read_only)
            typestr = interface["typestr"]
            strides = interface.get("strides")
            self.strides = None if strides is None else tuple(operator.index(s) for s in strides)
            stream = interface.get("stream")
            self.stream = None if stream is None else operator.index(stream)
        except (KeyError, TypeError, ValueError) as exc:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{name} is not a valid CUDA Array Interface (shape, typestr, data, version; "
                               f"optional strides, stream): {type(exc).__name__}: {exc}") from exc
        if any(n < 0 for n in self.shape):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{name} has a negative extent: {self.shape}")
        if self.strides is not None and len(self.strides) != len(self.shape):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{name} gives {len(self.strides)} strides for {len(self.shape)} dimensions")
        if interface.get("mask") is not None:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{name} is a masked array; offloadrt arrays have no mask: fill the masked elements "
                               f"in the producing library first")
        if self.stream is not None and self.stream <= 0:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{name} names stream {self.stream}; the CUDA Array Interface allows None, 1 (the "
                               f"legacy default stream), 2 (the per-thread default stream) or a stream handle "
                               f"(0 is ambiguous and disallowed)")
        try:
            found = np.dtype(typestr)
        except TypeError as exc:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{name} has typestr {typestr!r}, not a type: {exc}") \
                from None
        self.dtype = _element_type(found, name)
        self.size = math.prod(self.shape)
        if self.size and not self.ptr:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{name} has {self.size} elements at address 0")


def _from_interface(obj: Any, interface: Mapping[str, Any], target: Device,
                    queue: Queue | None) -> Array | np.ndarray:
    name = f"{type(obj).__name__} (CUDA Array Interface)"
    described = _Described(interface, name)
    if not described.size:
        return _array.empty(described.shape, described.dtype, target, queue)
    backend, location = _locate(described.ptr, target, name)
    name = f"{name}: {location.driver_kind} memory at {described.ptr:#x}"
    if location.kind is None:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"{name}, of {backend.name.lower()} device {location.ordinal}, is a kind of memory "
                           f"offloadrt arrays cannot view or copy; copy it into plain device memory first")
    owner = _gpu(backend, location.ordinal, name)  # the device the memory (and so its stream) belongs to
    stream = None if described.stream is None else _driver_stream(backend, described.stream)
    host_side = location.kind == AllocType.HOST or (location.kind == AllocType.MANAGED
                                                     and target.type == DeviceType.HOST)
    if host_side:  # the host path, once the host has waited for the producer's stream
        if stream is not None:
            drivers.wait_for_stream(owner.handle, stream, None)
        return np.asarray(_HostMemory(obj, location.host_address or described.ptr, described))
    if location.kind == AllocType.MANAGED:
        _same_vendor(backend, target, name)
        source, memory = target, AllocType.MANAGED
    else:
        source, memory = owner, AllocType.DEVICE
        _reachable(source, target, name)
    _check_queue(queue, target)
    runs = _runs(described.shape, described.strides, described.dtype.itemsize, name)
    viewed = _viewable(source, target, runs, described.read_only)
    if viewed and queue is None:
        if stream is not None:
            drivers.wait_for_stream(owner.handle, stream, None)
        return _place(source, target, described.ptr, described.shape, described.dtype, runs, True, memory, None,
                      None, obj, _nothing)
    work, temporary = _work_queue(source, queue)
    try:
        if stream is not None:
            if work._device is owner:
                drivers.wait_for_stream(owner.handle, stream, work._live())
            else:  # the stream is another device's (managed memory used elsewhere): the host waits
                drivers.wait_for_stream(owner.handle, stream, None)
        result = _place(source, target, described.ptr, described.shape, described.dtype, runs, viewed, memory, queue,
                        work, obj, _nothing)
    except BaseException:
        if temporary:
            _finish(work, failed=True)
        raise
    if temporary:
        _finish(work)
    return result


class _HostMemory:
    """Host memory another library described with the CUDA Array Interface (page-locked or managed),
    as NumPy views it; the view keeps the producer alive through this object."""

    def __init__(self, producer: object, address: int, described: _Described) -> None:
        self.producer = producer
        self.__array_interface__ = {"shape": described.shape, "typestr": described.dtype.str, "version": 3,
                                    "data": (address, described.read_only), "strides": described.strides}


def _driver_stream(backend: PlatformBackend, stream: int) -> int:
    """The driver handle of a CAI stream number: CUDA takes 1 (``CU_STREAM_LEGACY``) and 2
    (``CU_STREAM_PER_THREAD``) as they are; HIP has no legacy stream handle, and its null stream
    (0) is the one that waits for blocking streams, while 2 is ``hipStreamPerThread``."""
    if backend == PlatformBackend.AMDGPU and stream == 1:
        return 0
    return stream


def _locate(ptr: int, target: Device, name: str) -> tuple[PlatformBackend, drivers.PointerLocation]:
    """Ask the GPU drivers (the target's first) where ``ptr`` lives."""
    asked: dict[PlatformBackend, Device] = {}
    if target.type == DeviceType.GPU:
        asked[target.backend] = target
    for candidate in _device.devices():
        if candidate.type == DeviceType.GPU:
            asked.setdefault(candidate.backend, candidate)
    for backend, device in asked.items():
        try:
            found = drivers.locate_pointer(device.handle, ptr)
        except OffloadError as exc:
            raise with_context(exc, f"asking {device} where {name} at {ptr:#x} lives") from exc
        if found is not None:
            return backend, found
    platforms = ", ".join(b.name.lower() for b in asked) or "none: offloadrt found no GPU"
    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                       f"{name}: no GPU driver offloadrt uses knows the address {ptr:#x} (asked: {platforms}). The "
                       f"CUDA Array Interface describes device-accessible memory; pass host data as a NumPy array")


def _nothing() -> None:
    """What releases a CAI producer: nothing (it is kept alive by reference)."""


# ---- devices, queues, layouts ------------------------------------------------------------------------

def _gpu(backend: PlatformBackend, ordinal: int, name: str) -> Device:
    """offloadrt's device ``ordinal`` of ``backend``; ``INVALID_DEVICE`` when there is none."""
    found = _device.devices()
    for candidate in found:
        if candidate.backend == backend and candidate._ordinal == ordinal and candidate.type == DeviceType.GPU:
            return candidate
    there = ", ".join(str(d) for d in found)
    raise OffloadError(ErrorCode.INVALID_DEVICE,
                       f"{name} is on {backend.name.lower()} device {ordinal}, which offloadrt does not have (its "
                       f"devices: {there}); copy it to the host in the producing library first")


def _same_vendor(backend: PlatformBackend, target: Device, name: str) -> None:
    if target.type == DeviceType.GPU and target.backend != backend:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"{name} is {backend.name.lower()} memory and {target} is a {target.backend.name.lower()} "
                           f"device: offloadrt does not copy between vendors' GPUs (it would go through the host). "
                           f"Copy it to the host first (e.g. numpy.asarray of the producer's host copy), or pass "
                           f"device='{backend.name.lower()}'")


def _reachable(source: Device, target: Device, name: str) -> None:
    """The data on GPU ``source`` reaches ``target`` without a detour through host memory: the same
    device, the host itself (the copy's destination), or a GPU of the platform with peer access."""
    if source is target or target.type == DeviceType.HOST:
        return
    _same_vendor(source.backend, target, name)
    if not drivers.reaches_directly(source.handle, target.handle):
        raise OffloadError(ErrorCode.INVALID_DEVICE,
                           f"{name} is on {source}, which has no peer access to {target}: a copy would go through "
                           f"host memory. Pass device='{source}' to use it where it is (a view, no copy), or copy "
                           f"it to the host first")


def _check_queue(queue: Queue | None, target: Device) -> None:
    if queue is not None:
        check(queue, target, f"make an array on {target} with")


def _work_queue(source: Device, queue: Queue | None) -> tuple[Queue, bool]:
    """The queue the import's work runs on, and whether it is a temporary one (synced and closed
    by :func:`_finish`): ``queue`` if it is the data's device's, else a new queue of that device."""
    if queue is not None and queue._device is source:
        return queue, False
    return source.queue(), True


def _finish(work: Queue, failed: bool = False) -> None:
    """Wait for a temporary queue's work and close it (what it holds goes once its work is done).

    ``failed``: the import already failed, and that error says more than one of the sync would.
    """
    try:
        work.sync()
    except OffloadError:
        if not failed:
            raise
    finally:
        work.close()


def _element_type(dtype: np.dtype[Any], name: str) -> np.dtype[Any]:
    if dtype not in _ELEMENT_TYPES:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"{name} holds {dtype}, which offloadrt arrays do not (bool, int and uint of 8-64 bits, "
                           f"float16/32/64, complex64/128, native byte order); convert it in the producing library "
                           f"first")
    return dtype


def _runs(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int,
          name: str) -> tuple[int, list[int]]:
    """``(run, offsets)``: the array in C order as contiguous runs of ``run`` bytes starting at
    ``offsets`` (bytes from the first element; negative strides give negative ones). One run at 0
    is a C-contiguous array. ``strides`` are in bytes (None: C order). More than
    :data:`MAX_RUNS` runs is ``UNSUPPORTED``."""
    if strides is None or 0 in shape:
        return math.prod(shape) * itemsize, [0]
    dimensions = [(n, s) for n, s in zip(shape, strides) if n != 1]
    run = itemsize
    while dimensions and dimensions[-1][1] == run:
        run *= dimensions.pop()[0]
    count = math.prod(n for n, _ in dimensions)
    if count > MAX_RUNS:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"{name} is not contiguous (shape {shape}, byte strides {strides}): copying it would take "
                           f"{count} separate copies of {run} bytes, more than {MAX_RUNS}. Make it contiguous in the "
                           f"producing library first (cupy.ascontiguousarray(x), x.contiguous())")
    offsets = [0]
    for extent, stride in dimensions:
        offsets = [offset + i * stride for offset in offsets for i in range(extent)]
    return run, offsets


def _viewable(source: Device, target: Device, runs: tuple[int, list[int]], read_only: bool) -> bool:
    """Whether the import is a view: the data is on the target device, in C order, and writable
    (offloadrt arrays have no read-only state, so read-only memory is copied)."""
    return source is target and not read_only and runs[1] == [0]


def _place(source: Device, target: Device, ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any],
           runs: tuple[int, list[int]], view: bool, memory: AllocType, queue: Queue | None, work: Queue | None,
           keep: object, release: Callable[[], None]) -> Array:
    """The import itself: a view of ``ptr`` on ``target`` (``view``), or a device-to-device copy on ``work``.

    ``keep`` is what keeps the memory valid (a DLPack tensor, the CAI object) and ``release`` lets it
    go early; from here on this function owns both. A view keeps ``keep`` for as long as its
    buffer lives; a copy hands it to ``work``, which holds it until the copy has run. Ordering the
    producer's work before ``work`` (or the host) is the caller's.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    run, offsets = runs
    try:
        if nbytes == 0:
            release()
            return _array.empty(shape, dtype, target, queue)
        if view:
            return _array.Array(_memory.foreign(target, ptr, nbytes, memory, keep), shape, dtype, queue=queue)
        assert work is not None
        buffer = target.allocate(nbytes, AllocType.DEVICE, queue if work is queue else None)
    except BaseException:
        release()
        raise
    result = _array.Array(buffer, shape, dtype, queue=queue)
    work._hold(keep)  # the queue lets go of it once the copies below have run
    handle, dst = work._live(), buffer.ptr
    try:
        for index, offset in enumerate(offsets):
            api.olMemcpy(handle, dst + index * run, target.handle, ptr + offset, source.handle, run)
    except OffloadError as exc:
        raise with_context(exc, f"copying {nbytes} bytes at {ptr:#x} on {source} into {buffer!r}") from exc
    buffer._use(work)
    return result
