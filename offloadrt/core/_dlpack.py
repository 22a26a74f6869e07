"""DLPack with ctypes: ``__dlpack__`` capsules of buffers and arrays, and capsules of other libraries taken in.

Export: a capsule holds a ``DLManagedTensorVersioned`` (named ``dltensor_versioned``) when the
consumer passes ``max_version`` >= (1, 0), else a legacy ``DLManagedTensor`` (``dltensor``). The
tensor stays valid until the consumer calls its deleter (or the capsule is dropped unconsumed):
until then the buffer counts one export, so closing it does not hand its memory out again.

Import (:func:`take`): either kind of capsule is consumed (renamed ``used_dltensor[_versioned]``, so
its destructor leaves the tensor alone) and becomes a :class:`ForeignTensor`, which calls the
producer's deleter exactly once. What to do with the memory is ``_foreign``'s business.
"""

from __future__ import annotations

import ctypes
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import AllocType, DeviceType, PlatformBackend
from . import _hostmem
from ._errors import ExportError

if TYPE_CHECKING:
    from ._memory import Buffer
    from ._queue import Queue

CPU, CUDA, CUDA_HOST, ROCM, ROCM_HOST, CUDA_MANAGED = 1, 2, 3, 10, 11, 13
#: DLDeviceType names, for messages about memory offloadrt cannot take
DEVICE_TYPES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan", 8: "kDLMetal",
                9: "kDLVPI", 10: "kDLROCM", 11: "kDLROCMHost", 12: "kDLExtDev", 13: "kDLCUDAManaged",
                14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon", 17: "kDLMAIA"}
READ_ONLY = 1 << 0
IS_COPIED = 1 << 1
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
# The DLPack types offloadrt arrays hold: (code, bits) -> NumPy type string (IEEE floats only; bool is 8 bits)
_IMPORTED = {(0, 8): "i1", (0, 16): "i2", (0, 32): "i4", (0, 64): "i8", (1, 8): "u1", (1, 16): "u2", (1, 32): "u4",
             (1, 64): "u8", (2, 16): "f2", (2, 32): "f4", (2, 64): "f8", (5, 64): "c8", (5, 128): "c16",
             (6, 8): "?"}
_CODE_NAMES = {0: "kDLInt", 1: "kDLUInt", 2: "kDLFloat", 3: "kDLOpaqueHandle", 4: "kDLBfloat", 5: "kDLComplex",
               6: "kDLBool"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# The capsule names: module constants, so their bytes outlive every capsule.
_LEGACY = b"dltensor"
_VERSIONED = b"dltensor_versioned"

_live: dict[int, tuple[Any, ...]] = {}  # tensor address -> what it keeps alive
_live_lock = threading.Lock()  # guards _live


def _delete(address: int | None) -> None:
    """The tensors' deleter (called by the consumer, or by the capsule when it was never consumed)."""
    if not address:
        return
    with _live_lock:
        kept = _live.pop(address, None)
    if kept is not None and kept[1] is not None:
        _hostmem.unexport(kept[1])


_deleter = _DELETER(_delete)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.argtypes, _is_valid.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.argtypes, _get_pointer.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.argtypes, _new_capsule.restype = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR], ctypes.py_object


def _destroy_capsule(capsule: int | None) -> None:
    """A capsule is going away: if nobody consumed it (renamed it ``used_...``), delete its tensor."""
    for name in (_VERSIONED, _LEGACY):
        if _is_valid(capsule, name):
            _delete(_get_pointer(capsule, name))
            return


_capsule_destructor = _CAPSULE_DESTRUCTOR(_destroy_capsule)


def device_of(buffer: Buffer) -> tuple[int, int]:
    """(DLPack device type, device id) of a buffer's memory."""
    device = buffer._device
    if device.type in (DeviceType.HOST, DeviceType.CPU):
        return CPU, 0
    kind = buffer.kind
    if device.backend == PlatformBackend.CUDA:
        return {AllocType.DEVICE: (CUDA, device._ordinal), AllocType.HOST: (CUDA_HOST, 0),
                AllocType.MANAGED: (CUDA_MANAGED, 0)}[kind]
    if device.backend == PlatformBackend.AMDGPU:
        # DLPack has no ROCm managed type: managed memory is device memory the host can reach too
        return (ROCM_HOST, 0) if kind == AllocType.HOST else (ROCM, device._ordinal)
    raise ExportError(ErrorCode.UNSUPPORTED, f"DLPack has no device type for memory of {device}")


def data_type(dtype: np.dtype[Any]) -> DLDataType:
    code = _CODES.get(dtype.kind)
    if code is None or not dtype.isnative:
        raise ExportError(ErrorCode.UNSUPPORTED, f"DLPack cannot describe the dtype {dtype}")
    return DLDataType(code, dtype.itemsize * 8, 1)


def export(buffer: Buffer, offset: int, shape: tuple[int, ...], dtype: Any, queue: Queue | None, stream: Any,
           max_version: tuple[int, int] | None, dl_device: tuple[int, int] | None, copy: bool | None,
           strides: tuple[int, ...] | None = None) -> Any:
    """A DLPack capsule of ``shape`` elements of ``dtype`` at ``buffer.ptr + offset`` (C order, or byte
    ``strides``). Work of queues other than ``queue`` that used the buffer is waited for first."""
    from . import _copy

    dtype = np.dtype(dtype)
    here = device_of(buffer)
    buffer._checked_ptr()
    _copy.settle(buffer, queue)
    if dl_device is not None and tuple(dl_device) != here:
        if tuple(dl_device) != (CPU, 0):
            raise ExportError(ErrorCode.UNSUPPORTED,
                              f"cannot export {buffer!r} to DLPack device {tuple(dl_device)}; it lives on {here}")
        if copy is False:
            raise ExportError(ErrorCode.INVALID_ARGUMENT,
                              f"{buffer!r} is not CPU memory; exporting it to the CPU needs a copy (copy=False)")
        return _export_copy(buffer, offset, shape, dtype, queue, max_version, strides=strides)
    if here[0] == CPU and stream is not None:
        raise ExportError(ErrorCode.INVALID_ARGUMENT, f"stream must be None for CPU memory, got {stream!r}")
    _order(buffer, queue, stream)
    if copy:
        return _export_copy(buffer, offset, shape, dtype, None, max_version, same_device=True, strides=strides)
    return _capsule(buffer, buffer._checked_ptr(), offset, shape, dtype, here, max_version, 0, buffer,
                    strides=strides)


def _order(buffer: Buffer, queue: Queue | None, stream: Any) -> None:
    """Make the consumer's ``stream`` safe to use the data on: wait for the work of ``queue`` (the array's
    queue) unless the consumer opted out (-1) or uses that queue's own stream."""
    if stream == -1 or queue is None:
        return
    handle = queue._handle
    if handle is None:
        if queue._final_event is not None:
            queue._final_event.sync()
        return
    if isinstance(stream, int) and stream > 2:
        from ._queue import native_stream

        try:
            if native_stream(handle) == stream:
                return
        except AttributeError:
            pass
    queue.sync()


def _export_copy(buffer: Buffer, offset: int, shape: tuple[int, ...], dtype: np.dtype[Any], queue: Queue | None,
                 max_version: tuple[int, int] | None, same_device: bool = False,
                 strides: tuple[int, ...] | None = None) -> Any:
    from ._array import Array

    source = Array(buffer, shape, dtype, offset=offset, queue=queue, strides=strides)
    if same_device:
        copied = buffer._device.allocate(source.nbytes, buffer.kind)
        copied.copy_from(source)
        return _capsule(copied, copied._checked_ptr(), 0, shape, dtype, device_of(copied), max_version, IS_COPIED,
                        copied, owned=True)
    host = source.numpy()
    address = int(host.__array_interface__["data"][0]) if host.nbytes else 0
    return _capsule(host, address, 0, shape, dtype, (CPU, 0), max_version, IS_COPIED, None)


def _capsule(owner: Any, ptr: int, offset: int, shape: tuple[int, ...], dtype: np.dtype[Any], device: tuple[int, int],
             max_version: tuple[int, int] | None, flags: int, exported: Buffer | None, owned: bool = False,
             strides: tuple[int, ...] | None = None) -> Any:
    ndim = len(shape)
    shape_array = (ctypes.c_int64 * max(ndim, 1))(*shape)
    if strides is None:
        steps, step = [], 1
        for extent in reversed(shape):
            steps.append(step)
            step *= extent
        steps.reverse()
    else:  # DLPack counts strides in elements
        steps = [stride // dtype.itemsize for stride in strides]
    strides_array = (ctypes.c_int64 * max(ndim, 1))(*steps)
    empty = 0 in shape
    tensor = DLTensor(None if empty else ptr, DLDevice(*device), ndim, data_type(dtype),
                      ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64)),
                      ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64)), 0 if empty else offset)
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    if _NUMPY_CARRIES:
        return _carried(tensor, versioned, flags, (None if owned else exported, shape_array, strides_array, owner))
    if versioned:
        managed: Any = DLManagedTensorVersioned(DLPackVersion(1, 0), None, _deleter, flags, tensor)
    else:
        managed = DLManagedTensor(tensor, None, _deleter)
    address = ctypes.addressof(managed)
    if exported is not None and not owned:
        _hostmem.export(exported)
    with _live_lock:
        _live[address] = (managed, None if owned else exported, shape_array, strides_array, owner)
    try:
        return _new_capsule(address, _VERSIONED if versioned else _LEGACY, _capsule_destructor)
    except BaseException:
        _delete(address)
        raise


# A capsule's destructor may run while an exception is pending: a consumer that took the capsule and
# then refused it (NumPy and a tensor of more than 64 dimensions) drops it while raising. Python code
# cannot run then (a ctypes callback would replace the consumer's exception with a SystemError and
# leak the export), and offloadrt has no C of its own. NumPy's capsules have a C destructor that keeps
# the pending exception, and their deleter only drops the array that carries the tensor: so a NumPy
# capsule of an empty carrier array is made, its tensor is rewritten to describe this memory, and the
# export ends when the carrier is deallocated (a weakref callback, which CPython runs with the pending
# exception set aside). NumPy before 2.1 (no max_version) gets capsules of offloadrt's own.
_NUMPY_CARRIES = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def _carried(tensor: DLTensor, versioned: bool, flags: int, kept: tuple[Any, ...]) -> Any:
    carrier = np.empty(0, np.uint8)
    capsule = carrier.__dlpack__(max_version=(1, 0) if versioned else None)
    if versioned:
        managed: Any = DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, _VERSIONED))
        managed.version = DLPackVersion(1, 0)
        managed.flags = flags
    else:
        managed = DLManagedTensor.from_address(_capsule_pointer(capsule, _LEGACY))
    managed.dl_tensor = tensor
    key = ctypes.addressof(managed)
    exported = kept[0]
    if exported is not None:
        _hostmem.export(exported)
    with _live_lock:
        _live[key] = (None, *kept)
    weakref.finalize(carrier, _delete, key).atexit = False  # at exit the process takes everything with it
    return capsule


# ---- import ----------------------------------------------------------------------------------------

_USED_LEGACY = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"
# Prototypes of their own (not attributes of ctypes.pythonapi, whose argtypes the export side sets):
# called with the GIL held, on capsule objects.
_capsule_is = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_capsule_rename = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi))
# A producer's deleter, called with the GIL held: one that takes the GIL itself (NumPy, CuPy) or
# needs it held (a ctypes callback) both work.
_DELETER_CALL = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
_MAX_DIMENSIONS = 64


class ForeignTensor:
    """A DLPack tensor of another library, taken from its capsule: where the data is and how it is
    laid out, and the producer's deleter.

    ``data`` is the address of the first element (``byte_offset`` added); ``strides`` are in
    elements, None for C order; ``dtype`` is ``(code, bits, lanes)``; ``read_only`` is the
    versioned tensor's flag. The memory stays valid until :meth:`release` calls the deleter,
    exactly once, also when the object is collected without it.
    """

    __slots__ = ("data", "device", "shape", "strides", "dtype", "read_only", "version", "_address", "_deleter",
                 "_pending")

    def __init__(self, address: int, deleter: int | None) -> None:
        self._address = address
        self._deleter = deleter
        self._pending = [True]  # popped by the one release that calls the deleter (list.pop is atomic)
        self.data = 0
        self.device = (0, 0)
        self.shape: tuple[int, ...] = ()
        self.strides: tuple[int, ...] | None = None
        self.dtype = (0, 0, 0)
        self.read_only = False
        self.version: tuple[int, int] | None = None

    def release(self) -> None:
        """Give the tensor back to its producer (its deleter, once; later calls do nothing)."""
        try:
            self._pending.pop()
        except IndexError:
            return
        if self._deleter:
            _DELETER_CALL(self._deleter)(self._address)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception as exc:  # noqa: BLE001  # a finaliser must not raise
            try:
                warnings.warn(f"offloadrt: the deleter of a DLPack tensor taken in failed ({exc})", OffloadWarning,
                              stacklevel=2)
            except Exception:  # noqa: BLE001, S110  # interpreter shutdown: nothing left to warn with
                pass

    def __repr__(self) -> str:
        return f"<ForeignTensor {self.shape} {self.dtype} on DLPack device {self.device} at {self.data:#x}>"


def take(capsule: object) -> ForeignTensor:
    """Consume a DLPack capsule (versioned or legacy): it is renamed ``used_...`` and its tensor
    becomes a :class:`ForeignTensor`, whose deleter runs exactly once from then on (at once when
    the tensor cannot be read). ``INVALID_ARGUMENT`` for anything but an unused DLPack capsule,
    ``UNSUPPORTED`` for a DLPack major version other than 1."""
    if _capsule_is(capsule, _VERSIONED):
        name, used, versioned = _VERSIONED, _USED_VERSIONED, True
    elif _capsule_is(capsule, _LEGACY):
        name, used, versioned = _LEGACY, _USED_LEGACY, False
    else:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"__dlpack__ returned {type(capsule).__name__}, not an unused PyCapsule named "
                           f"'dltensor_versioned' or 'dltensor' (a capsule can be consumed once)")
    address = _capsule_pointer(capsule, name)
    if not address or _capsule_rename(capsule, used):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"cannot take the tensor of the DLPack capsule {name!r}")
    layout: type[DLManagedTensorVersioned] | type[DLManagedTensor] = (
        DLManagedTensorVersioned if versioned else DLManagedTensor)
    deleter = ctypes.c_void_p.from_address(address + layout.deleter.offset).value  # type: ignore[attr-defined]
    tensor = ForeignTensor(address, deleter)
    try:
        if versioned:
            managed_v = DLManagedTensorVersioned.from_address(address)
            tensor.version = (int(managed_v.version.major), int(managed_v.version.minor))
            if tensor.version[0] != 1:
                raise OffloadError(ErrorCode.UNSUPPORTED,
                                   f"the DLPack tensor is of version {tensor.version[0]}.{tensor.version[1]}; "
                                   f"offloadrt reads version 1.x")
            tensor.read_only = bool(int(managed_v.flags) & READ_ONLY)
            described = managed_v.dl_tensor
        else:
            described = DLManagedTensor.from_address(address).dl_tensor
        _read(described, tensor)
    except BaseException:
        tensor.release()
        raise
    return tensor


def _read(described: DLTensor, tensor: ForeignTensor) -> None:
    ndim = int(described.ndim)
    if not 0 <= ndim <= _MAX_DIMENSIONS:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"the DLPack tensor claims {ndim} dimensions")
    shape = tuple(int(described.shape[i]) for i in range(ndim)) if ndim else ()
    if any(extent < 0 for extent in shape):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"the DLPack tensor has a negative extent: {shape}")
    tensor.shape = shape
    tensor.strides = tuple(int(described.strides[i]) for i in range(ndim)) if ndim and described.strides else None
    tensor.data = int(described.data or 0) + int(described.byte_offset)
    tensor.device = (int(described.device.device_type), int(described.device.device_id))
    tensor.dtype = (int(described.dtype.code), int(described.dtype.bits), int(described.dtype.lanes))


def numpy_dtype(dtype: tuple[int, int, int]) -> np.dtype[Any]:
    """The NumPy dtype of a DLPack ``(code, bits, lanes)``; ``UNSUPPORTED`` for one offloadrt arrays
    do not hold (bfloat16, float8, vectors, 128-bit floats...)."""
    code, bits, lanes = dtype
    found = _IMPORTED.get((code, bits)) if lanes == 1 else None
    if found is None:
        kind = _CODE_NAMES.get(code, f"type code {code}")
        vector = f" x {lanes} lanes" if lanes != 1 else ""
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"the DLPack element type {kind} of {bits} bits{vector} has no NumPy type that offloadrt "
                           f"arrays hold (bool, int and uint of 8-64 bits, float16/32/64, complex64/128); convert "
                           f"it in the producing library first")
    return np.dtype(found)
