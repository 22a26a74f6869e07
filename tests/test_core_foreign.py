"""``offloadrt.asarray`` of other libraries' GPU arrays, over the CUDA and HIP driver stand-ins (two GPUs
of one vendor, or one of each): DLPack first (versioned and legacy capsules, a producer without
``max_version``), then the CUDA Array Interface. Checked: the values, that device memory never goes
through the host (the stand-in's call record), view on the device vs copy elsewhere, the producer
kept alive by a view, strides and byte offsets, read-only memory, refusals (a GPU without peer access,
another vendor, unknown memory, unsupported types), the DLPack deleter called exactly once, the
stream handed to ``__dlpack__`` and the CAI stream waited for.

The producers below are TEST DOUBLES of CuPy-like arrays: they hold memory allocated with the stand-in
driver on a thread of their own (as another library would, without touching offloadrt's current
device) and build their DLPack capsules with ctypes from their own copy of the DLPack structures.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import cuda_standin
import hip_standin
import numpy as np
import pytest

import offloadrt
from offloadrt import AllocType, ErrorCode, OffloadError, api
from offloadrt.core import _runtime

WAIT = 10.0  # the longest anything that should happen at once may take
STANDINS: dict[str, ModuleType] = {"cuda": cuda_standin, "amdgpu": hip_standin}
DLPACK_GPU = {"cuda": 2, "amdgpu": 10}  # kDLCUDA, kDLROCM
COPIES = {  # the stand-ins' copy calls: between device addresses, and those with host memory on one side
    "cuda": ({"cuMemcpyDtoDAsync", "cuMemcpyPeerAsync"}, {"cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"}),
    "amdgpu": ({"hipMemcpyDtoDAsync", "hipMemcpyPeerAsync"}, {"hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync"}),
}


# ---- the stand-in runtime -----------------------------------------------------------------------------

@contextmanager
def stand_ins(monkeypatch: pytest.MonkeyPatch, **vendors: Any) -> Iterator[None]:
    """offloadrt's layer over the stand-ins named (``cuda=2`` or ``amdgpu=[DeviceSpec(...)]``)."""
    _runtime.shutdown()
    for name, devices in vendors.items():
        STANDINS[name].install(monkeypatch, devices=devices)
    try:
        yield
    finally:
        try:
            _runtime.shutdown()
        finally:
            for name in vendors:
                STANDINS[name].shutdown()


@pytest.fixture(params=["cuda", "amdgpu"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Two stand-in GPUs of one vendor (and the host) under offloadrt's layer."""
    with stand_ins(monkeypatch, **{request.param: 2}):
        yield request.param


def ok(result: tuple[Any, ...]) -> Any:
    assert int(result[0]) == 0, f"stand-in call failed: {result[0]!r}"
    return result[1] if len(result) == 2 else result[1:] or None


def as_producer(backend: str, ordinal: int, fn: Callable[[Any], Any]) -> Any:
    """``fn(driver module)`` on a thread of its own with GPU ``ordinal`` current: driver calls of
    another library, which must not change the current device of offloadrt's thread."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            if backend == "cuda":
                d: Any = cuda_standin.driver
                ok(d.cuInit(0))
                ok(d.cuCtxSetCurrent(ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(ordinal))))))
            else:
                d = hip_standin.hip
                ok(d.hipInit(0))
                ok(d.hipSetDevice(ordinal))
            box["value"] = fn(d)
        except BaseException as exc:  # noqa: BLE001  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def allocate(backend: str, ordinal: int, nbytes: int, kind: str = "device") -> int:
    """Memory of GPU ``ordinal`` allocated with the stand-in driver (offloadrt never saw it)."""
    def alloc(d: Any) -> int:
        if backend == "cuda":
            call = {"device": lambda: d.cuMemAlloc(nbytes), "managed": lambda: d.cuMemAllocManaged(nbytes, 1),
                    "host": lambda: d.cuMemAllocHost(nbytes)}[kind]
        else:
            call = {"device": lambda: d.hipMalloc(nbytes), "managed": lambda: d.hipMallocManaged(nbytes, 1),
                    "host": lambda: d.hipHostMalloc(nbytes, 0)}[kind]
        return int(ok(call()))
    return as_producer(backend, ordinal, alloc)


def device_data(backend: str, ordinal: int, values: np.ndarray, kind: str = "device") -> int:
    """``values`` in new stand-in memory of GPU ``ordinal``; its address."""
    ptr = allocate(backend, ordinal, max(values.nbytes, 1), kind)
    STANDINS[backend].write(ptr, values.tobytes())
    return ptr


def read(backend: str, array: offloadrt.Array) -> np.ndarray:
    """An array's values as the stand-in's memory holds them (no offloadrt copy involved)."""
    raw = STANDINS[backend].read(array.ptr, array.nbytes)
    return np.frombuffer(raw, array.dtype).reshape(array.shape)


@contextmanager
def recorded(backend: str) -> Iterator[list[str]]:
    """The names of the stand-in calls made inside the block."""
    calls = STANDINS[backend].calls
    start = len(calls)
    names: list[str] = []
    yield names
    names.extend(name for name, _ in calls[start:])


def copies(backend: str, names: list[str]) -> tuple[list[str], list[str]]:
    device_side, host_side = COPIES[backend]
    return [n for n in names if n in device_side], [n for n in names if n in host_side]


def collect() -> None:
    for _ in range(3):
        gc.collect()


# ---- TEST DOUBLES: producers of another library's arrays --------------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


LEGACY, VERSIONED = b"dltensor", b"dltensor_versioned"
READ_ONLY_FLAG = 1
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_kept: dict[int, tuple[Any, ...]] = {}  # tensor address -> what it keeps alive (the producer last)


def _delete_tensor(address: int | None) -> None:
    entry = _kept.pop(address or 0, None)
    if entry is not None:
        entry[-1].deleter_calls += 1
    else:  # a second call: count it on whoever made that tensor
        DLPackProducer.stray_deleter_calls += 1


def _destroy_capsule(capsule: int | None) -> None:
    for name in (VERSIONED, LEGACY):
        if _is_valid(capsule, name):  # never consumed: the capsule deletes its tensor
            _delete_tensor(_pointer(capsule, name))
            return


_deleter = DELETER(_delete_tensor)
_capsule_destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy_capsule)


class DLPackProducer:
    """TEST DOUBLE of a CuPy-like GPU array that offers only DLPack.

    ``ptr`` is the allocation, ``byte_offset`` where the array starts in it, ``strides`` in elements
    (None: C order). ``versioned``: answer ``max_version >= (1, 0)`` with a versioned capsule.
    ``old_signature``: a ``__dlpack__`` from before DLPack 1.0 (TypeError on ``max_version``).
    ``on_export(stream)`` runs before each export (a producer ordering its work before ``stream``).
    The capsule's tensor keeps the producer alive until its deleter runs; ``deleter_calls`` counts them.
    """

    stray_deleter_calls = 0

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any, device: tuple[int, int], *,
                 strides: tuple[int, ...] | None = None, byte_offset: int = 0, versioned: bool = True,
                 read_only: bool = False, old_signature: bool = False, dl_dtype: tuple[int, int, int] | None = None,
                 on_export: Callable[[Any], None] | None = None) -> None:
        self.ptr, self.shape, self.device = ptr, shape, device
        self.strides, self.byte_offset = strides, byte_offset
        dt = np.dtype(dtype)
        code = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}[dt.kind]
        self.dl_dtype = dl_dtype or (code, dt.itemsize * 8, 1)
        self.versioned, self.read_only, self.old_signature = versioned, read_only, old_signature
        self.on_export = on_export
        self.streams: list[Any] = []
        self.max_versions: list[Any] = []
        self.deleter_calls = 0

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, *, stream: Any = None, **newer: Any) -> Any:
        if self.old_signature and newer:
            raise TypeError(f"__dlpack__() got an unexpected keyword argument {next(iter(newer))!r}")
        max_version = newer.get("max_version")
        self.streams.append(stream)
        self.max_versions.append(max_version)
        if self.on_export is not None:
            self.on_export(stream)
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = None if self.strides is None else (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        tensor = DLTensor(self.ptr, DLDevice(*self.device), ndim, DLDataType(*self.dl_dtype),
                          ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                          None if strides is None else ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)),
                          self.byte_offset)
        versioned = self.versioned and max_version is not None and tuple(max_version) >= (1, 0)
        if versioned:
            managed: Any = DLManagedTensorVersioned(DLPackVersion(1, 0), None, _deleter,
                                                    READ_ONLY_FLAG if self.read_only else 0, tensor)
        else:
            managed = DLManagedTensor(tensor, None, _deleter)
        address = ctypes.addressof(managed)
        _kept[address] = (managed, shape, strides, self)
        return _new_capsule(address, VERSIONED if versioned else LEGACY, ctypes.cast(_capsule_destructor,
                                                                                      ctypes.c_void_p))


class CaiProducer:
    """TEST DOUBLE of a Numba-like GPU array that offers only ``__cuda_array_interface__`` (version 3)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any, *, strides: tuple[int, ...] | None = None,
                 stream: int | None = None, read_only: bool = False, **extra: Any) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": np.dtype(dtype).str, "data": (ptr, read_only),
                                         "version": 3, "strides": strides, "stream": stream, **extra}


class Gate:
    """A host function holding an offloadrt queue (the producer's stream here) until opened."""

    def __init__(self, queue: offloadrt.Queue) -> None:
        self.entered, self.opened = threading.Event(), threading.Event()
        queue.host_function(self._hold)

    def _hold(self) -> None:
        self.entered.set()
        if not self.opened.wait(WAIT):
            raise TimeoutError("a test gate was never opened")


def read_while_held(gate: Gate, read: Callable[[], np.ndarray]) -> tuple[bool, np.ndarray]:
    """``read()`` on a helper thread while ``gate`` holds the producer's stream: (whether it was still
    waiting a moment later, what it read once the gate opened). Work ordered after the producer's
    cannot finish before the gate opens; work that ignores the order reads too early."""
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", read()))
    assert gate.entered.wait(WAIT)
    thread.start()
    thread.join(0.3)
    waiting = thread.is_alive()
    gate.opened.set()
    thread.join(WAIT)
    assert not thread.is_alive() and "value" in box
    return waiting, box["value"]


def stream_of(queue: offloadrt.Queue) -> int:
    return int(queue.handle.native_handle)


# ---- DLPack ------------------------------------------------------------------------------------

@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_dlpack_memory_on_the_device_is_viewed_and_keeps_its_producer(backend: str, versioned: bool) -> None:
    gpu0 = offloadrt.device(f"{backend}:0")
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    ptr = device_data(backend, 0, values)
    producer = DLPackProducer(ptr, (3, 4), np.float32, (DLPACK_GPU[backend], 0), versioned=versioned)
    alive = weakref.ref(producer)
    with recorded(backend) as names:
        view = offloadrt.asarray(producer, gpu0)
    assert producer.max_versions == [(1, 0)]
    assert view.ptr == ptr and view.device is gpu0 and view.shape == (3, 4) and view.dtype == np.float32
    assert copies(backend, names) == ([], [])  # nothing copied at all
    assert (view.numpy() == values).all()
    view.buffer.fill(np.float32(7.5))  # the view writes the producer's memory
    assert (np.frombuffer(STANDINS[backend].read(ptr, values.nbytes), np.float32) == 7.5).all()
    del producer
    collect()
    assert alive() is not None and alive().deleter_calls == 0  # type: ignore[union-attr]
    del view
    collect()
    assert alive() is None  # the deleter ran (once: the producer let go of its last reference)
    assert DLPackProducer.stray_deleter_calls == 0


def test_dlpack_memory_of_another_gpu_is_copied_peer_to_peer(backend: str) -> None:
    gpu0 = offloadrt.device(f"{backend}:0")
    values = np.arange(64, dtype=np.int32)
    producer = DLPackProducer(device_data(backend, 1, values), (64,), np.int32, (DLPACK_GPU[backend], 1))
    with recorded(backend) as names:
        copied = offloadrt.asarray(producer, gpu0)
    assert copied.device is gpu0 and copied.ptr != producer.ptr
    assert (read(backend, copied) == values).all()
    device_side, host_side = copies(backend, names)
    assert device_side and not host_side
    assert producer.deleter_calls == 1  # the copy is done: the tensor went back at once
    stream = producer.streams[0]  # a stream of the data's GPU, which runs the copy
    assert STANDINS[backend].state().streams[stream].ctx.device.ordinal == 1


def test_dlpack_memory_to_the_host_device_is_one_device_to_host_copy(backend: str) -> None:
    values = np.linspace(0, 1, 10)
    producer = DLPackProducer(device_data(backend, 0, values), (10,), np.float64, (DLPACK_GPU[backend], 0))
    with recorded(backend) as names:
        on_host = offloadrt.asarray(producer, "host")
    assert (np.asarray(on_host) == values).all()
    assert sum(n.endswith("DtoHAsync") for n in names) == 1 and not any(n.endswith("HtoDAsync") for n in names)
    assert producer.deleter_calls == 1


def test_dlpack_producer_without_max_version_gets_the_legacy_call(backend: str) -> None:
    values = np.arange(8, dtype=np.uint16)
    producer = DLPackProducer(device_data(backend, 0, values), (8,), np.uint16, (DLPACK_GPU[backend], 0),
                              old_signature=True)
    view = offloadrt.asarray(producer, f"{backend}:0")
    assert producer.max_versions == [None] and len(producer.streams) == 1
    assert (view.numpy() == values).all()
    del view
    collect()
    assert producer.deleter_calls == 1


def test_dlpack_strides_and_byte_offset(backend: str) -> None:
    whole = np.arange(36, dtype=np.float32).reshape(6, 6)
    ptr = device_data(backend, 0, whole)
    kind = (DLPACK_GPU[backend], 0)
    gpu0 = offloadrt.device(f"{backend}:0")
    # a contiguous part from a byte offset: still a view, at the offset
    rows = DLPackProducer(ptr, (2, 6), np.float32, kind, byte_offset=2 * 6 * 4)
    view = offloadrt.asarray(rows, gpu0)
    assert view.ptr == ptr + 48 and (view.numpy() == whole[2:4]).all()
    cases = {
        "columns 1..4": (DLPackProducer(ptr, (6, 3), np.float32, kind, strides=(6, 1), byte_offset=4),
                         whole[:, 1:4], 6),
        "rows reversed": (DLPackProducer(ptr, (6, 6), np.float32, kind, strides=(-6, 1), byte_offset=30 * 4),
                          whole[::-1], 6),
        "transposed": (DLPackProducer(ptr, (6, 6), np.float32, kind, strides=(1, 6)), whole.T, 36),
        "strides of C order": (DLPackProducer(ptr, (6, 6), np.float32, kind, strides=(6, 1)), whole, 0),
    }
    for what, (producer, expected, runs) in cases.items():
        with recorded(backend) as names:
            result = offloadrt.asarray(producer, gpu0)
        device_side, host_side = copies(backend, names)
        assert (read(backend, result) == expected).all(), what
        assert len(device_side) == runs and not host_side, what  # one copy per contiguous run; a view: none
        assert (result.ptr == ptr) == (runs == 0), what
    del view, result
    collect()
    assert all(p.deleter_calls == 1 for p, _, _ in cases.values()) and rows.deleter_calls == 1


def test_dlpack_too_many_runs_is_refused(backend: str) -> None:
    ptr = allocate(backend, 0, 8 * 5000)
    producer = DLPackProducer(ptr, (5000,), np.float32, (DLPACK_GPU[backend], 0), strides=(2,))
    with pytest.raises(OffloadError) as info:
        offloadrt.asarray(producer, f"{backend}:0")
    assert info.value.code == ErrorCode.UNSUPPORTED and "contiguous" in info.value.details
    assert producer.deleter_calls == 1


def test_dlpack_read_only_memory_is_copied(backend: str) -> None:
    values = np.arange(16, dtype=np.int64)
    producer = DLPackProducer(device_data(backend, 0, values), (16,), np.int64, (DLPACK_GPU[backend], 0),
                              read_only=True)
    with recorded(backend) as names:
        result = offloadrt.asarray(producer, f"{backend}:0")
    assert result.ptr != producer.ptr and (read(backend, result) == values).all()
    assert copies(backend, names)[0] and not copies(backend, names)[1]
    assert producer.deleter_calls == 1


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint64, np.float16, np.complex128])
def test_dlpack_element_types(backend: str, dtype: Any) -> None:
    values = (np.arange(6) % 2).astype(dtype)
    producer = DLPackProducer(device_data(backend, 0, values), (6,), dtype, (DLPACK_GPU[backend], 0))
    result = offloadrt.asarray(producer, f"{backend}:0")
    assert result.dtype == np.dtype(dtype) and (result.numpy() == values).all()


@pytest.mark.parametrize("dl_dtype", [(4, 16, 1), (2, 32, 2), (2, 128, 1), (7, 8, 1)],
                         ids=["bfloat16", "float32x2", "float128", "float8"])
def test_dlpack_unsupported_element_types_are_refused_and_given_back(backend: str,
                                                                     dl_dtype: tuple[int, int, int]) -> None:
    producer = DLPackProducer(allocate(backend, 0, 64), (4,), np.float32, (DLPACK_GPU[backend], 0),
                              dl_dtype=dl_dtype)
    with pytest.raises(OffloadError) as info:
        offloadrt.asarray(producer, f"{backend}:0")
    assert info.value.code == ErrorCode.UNSUPPORTED and "element type" in info.value.details
    collect()
    assert producer.deleter_calls == 1 and DLPackProducer.stray_deleter_calls == 0


def test_dlpack_stream_is_the_queue_the_work_runs_on(backend: str) -> None:
    gpu0, gpu1 = offloadrt.devices(backend)
    queue = gpu0.queue()
    mine = DLPackProducer(device_data(backend, 0, np.zeros(4, np.float32)), (4,), np.float32,
                          (DLPACK_GPU[backend], 0))
    view = offloadrt.asarray(mine, gpu0, queue=queue)
    assert mine.streams == [stream_of(queue)] and view.queue is queue
    elsewhere = DLPackProducer(device_data(backend, 1, np.zeros(4, np.float32)), (4,), np.float32,
                               (DLPACK_GPU[backend], 1))
    offloadrt.asarray(elsewhere, gpu0, queue=queue)  # copied by GPU 1: a stream of GPU 1 is handed out
    assert elsewhere.streams[0] not in (None, stream_of(queue), 1, 2)
    unqueued = DLPackProducer(device_data(backend, 0, np.zeros(4, np.float32)), (4,), np.float32,
                              (DLPACK_GPU[backend], 0))
    offloadrt.asarray(unqueued, gpu0)
    assert isinstance(unqueued.streams[0], int) and unqueued.streams[0] > 2  # a real stream, never "legacy"
    queue.sync()
    queue.close()


def _order_after(backend: str, ordinal: int, own_stream: int) -> Callable[[Any], None]:
    """What a producer does with the consumer's stream: make it wait for its own stream's work."""
    def order(stream: Any) -> None:
        def wait(d: Any) -> None:
            if backend == "cuda":
                event = ok(d.cuEventCreate(2))  # CU_EVENT_DISABLE_TIMING
                ok(d.cuEventRecord(event, own_stream))
                ok(d.cuStreamWaitEvent(stream, event, 0))
            else:
                event = ok(d.hipEventCreateWithFlags(2))  # hipEventDisableTiming
                ok(d.hipEventRecord(event, own_stream))
                ok(d.hipStreamWaitEvent(stream, event, 0))
        as_producer(backend, ordinal, wait)
    return order


@pytest.mark.parametrize("with_queue", [True, False], ids=["queue", "no-queue"])
def test_dlpack_producer_work_is_ordered_before_the_use(backend: str, with_queue: bool) -> None:
    gpu0 = offloadrt.device(f"{backend}:0")
    ptr = device_data(backend, 0, np.zeros(8, np.uint8))
    producer_queue = gpu0.queue()  # the producer's own stream, with pending work: a fill behind a gate
    gate = Gate(producer_queue)
    api.olMemFill(producer_queue.handle, ptr, b"\x2a", 8)
    producer = DLPackProducer(ptr, (8,), np.uint8, (DLPACK_GPU[backend], 0),
                              on_export=_order_after(backend, 0, stream_of(producer_queue)), read_only=True)
    try:
        if with_queue:  # returns at once: the copy waits on the queue for the producer's work
            queue = gpu0.queue()
            copied = offloadrt.asarray(producer, gpu0, queue=queue)
            waiting, seen = read_while_held(gate, copied.numpy)
            queue.close()
        else:  # returns once the data is ready
            waiting, seen = read_while_held(gate, lambda: offloadrt.asarray(producer, gpu0).numpy())
    finally:
        gate.opened.set()
    assert waiting and (seen == 42).all()
    producer_queue.sync()
    producer_queue.close()


# ---- the CUDA Array Interface -----------------------------------------------------------------------

def test_cai_memory_is_viewed_on_its_device_and_copied_to_another(backend: str) -> None:
    gpu0, gpu1 = offloadrt.devices(backend)
    values = np.arange(20, dtype=np.float64).reshape(4, 5)
    ptr = device_data(backend, 0, values)
    producer = CaiProducer(ptr, (4, 5), np.float64)
    alive = weakref.ref(producer)
    with recorded(backend) as names:
        view = offloadrt.asarray(producer, gpu0)
        copied = offloadrt.asarray(producer, gpu1)
    assert view.ptr == ptr and copied.device is gpu1 and copied.ptr != ptr
    assert (read(backend, view) == values).all() and (read(backend, copied) == values).all()
    device_side, host_side = copies(backend, names)
    assert len(device_side) == 1 and not host_side  # the copy between the GPUs; the view none
    del producer
    collect()
    assert alive() is not None  # the view keeps it
    del view
    collect()
    assert alive() is None


def test_cai_strides_and_read_only(backend: str) -> None:
    whole = np.arange(30, dtype=np.int16).reshape(5, 6)
    ptr = device_data(backend, 0, whole)
    gpu0 = offloadrt.device(f"{backend}:0")
    part = offloadrt.asarray(CaiProducer(ptr + 2 * 2, (5, 3), np.int16, strides=(12, 2)), gpu0)
    assert part.ptr != ptr and (read(backend, part) == whole[:, 2:5]).all()
    frozen = offloadrt.asarray(CaiProducer(ptr, (5, 6), np.int16, strides=(12, 2), read_only=True), gpu0)
    assert frozen.ptr != ptr and (read(backend, frozen) == whole).all()
    empty = offloadrt.asarray(CaiProducer(0, (0, 6), np.int16), gpu0)
    assert empty.shape == (0, 6) and empty.nbytes == 0


@pytest.mark.parametrize("with_queue", [True, False], ids=["queue", "no-queue"])
def test_cai_stream_is_waited_for(backend: str, with_queue: bool) -> None:
    gpu0 = offloadrt.device(f"{backend}:0")
    ptr = device_data(backend, 0, np.zeros(16, np.uint8))
    producer_queue = gpu0.queue()
    gate = Gate(producer_queue)
    api.olMemFill(producer_queue.handle, ptr, b"\x07", 16)
    producer = CaiProducer(ptr, (16,), np.uint8, stream=stream_of(producer_queue))
    try:
        if with_queue:  # a view ordered on the queue: the queue waits for the producer's stream
            queue = gpu0.queue()
            view = offloadrt.asarray(producer, gpu0, queue=queue)
            assert view.ptr == ptr
            waiting, seen = read_while_held(gate, view.numpy)
            queue.close()
        else:  # a view without a queue: the call returns once the stream's work is done
            waiting, seen = read_while_held(gate, lambda: offloadrt.asarray(producer, gpu0).numpy())
    finally:
        gate.opened.set()
    assert waiting and (seen == 7).all()
    producer_queue.sync()
    producer_queue.close()


def test_cai_default_stream_numbers(backend: str) -> None:
    values = np.arange(4, dtype=np.uint32)
    ptr = device_data(backend, 0, values)
    for stream in (1, 2) if backend == "cuda" else (1,):  # HIP: 1 is its null stream; the stand-in has no 2
        result = offloadrt.asarray(CaiProducer(ptr, (4,), np.uint32, stream=stream, read_only=True),
                                   f"{backend}:0")
        assert (read(backend, result) == values).all()
    with pytest.raises(OffloadError) as info:
        offloadrt.asarray(CaiProducer(ptr, (4,), np.uint32, stream=0), f"{backend}:0")
    assert info.value.code == ErrorCode.INVALID_ARGUMENT and "disallowed" in info.value.details


def test_cai_managed_memory_is_viewed_and_host_memory_copied_in(backend: str) -> None:
    gpu0 = offloadrt.device(f"{backend}:0")
    values = np.arange(6, dtype=np.float32)
    managed = device_data(backend, 1, values, "managed")
    view = offloadrt.asarray(CaiProducer(managed, (6,), np.float32), gpu0)  # usable as it is on every GPU
    assert view.ptr == managed and view.buffer.kind == AllocType.MANAGED and (view.numpy() == values).all()
    pinned = device_data(backend, 0, values, "host")
    with recorded(backend) as names:
        copied = offloadrt.asarray(CaiProducer(pinned, (6,), np.float32), gpu0)
    assert copied.ptr != pinned and (read(backend, copied) == values).all()
    assert copies(backend, names)[1]  # host memory: the host path, as for a NumPy array


# ---- refusals -----------------------------------------------------------------------------------

@pytest.mark.parametrize("vendor", ["cuda", "amdgpu"])
def test_gpus_without_peer_access_are_refused(monkeypatch: pytest.MonkeyPatch, vendor: str) -> None:
    specs = [STANDINS[vendor].DeviceSpec(peers=set()), STANDINS[vendor].DeviceSpec(peers=set())]
    with stand_ins(monkeypatch, **{vendor: specs}):
        ptr = device_data(vendor, 1, np.arange(4, dtype=np.float32))
        dlpack = DLPackProducer(ptr, (4,), np.float32, (DLPACK_GPU[vendor], 1))
        for producer in (dlpack, CaiProducer(ptr, (4,), np.float32)):
            with recorded(vendor) as names:
                with pytest.raises(OffloadError) as info:
                    offloadrt.asarray(producer, f"{vendor}:0")
            assert info.value.code == ErrorCode.INVALID_DEVICE
            assert "peer access" in info.value.details and f"device='{vendor}:1'" in info.value.details
            assert copies(vendor, names) == ([], [])
        assert dlpack.streams == []  # refused before anything was exported
        assert (offloadrt.asarray(dlpack, f"{vendor}:1").numpy() == np.arange(4)).all()  # where it is: fine


def test_another_vendors_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_ins(monkeypatch, cuda=1, amdgpu=1):
        amd = device_data("amdgpu", 0, np.arange(4, dtype=np.int32))
        nvidia = device_data("cuda", 0, np.arange(4, dtype=np.int32))
        cases = [(DLPackProducer(amd, (4,), np.int32, (DLPACK_GPU["amdgpu"], 0)), "cuda:0"),
                 (CaiProducer(amd, (4,), np.int32), "cuda:0"),
                 (DLPackProducer(nvidia, (4,), np.int32, (DLPACK_GPU["cuda"], 0)), "amdgpu:0"),
                 (CaiProducer(nvidia, (4,), np.int32), "amdgpu:0")]
        for producer, target in cases:
            with pytest.raises(OffloadError) as info:
                offloadrt.asarray(producer, target)
            assert info.value.code == ErrorCode.UNSUPPORTED and "between vendors" in info.value.details
        # each where it lives: a view
        assert offloadrt.asarray(CaiProducer(amd, (4,), np.int32), "amdgpu:0").ptr == amd
        assert offloadrt.asarray(CaiProducer(nvidia, (4,), np.int32), "cuda:0").ptr == nvidia


def test_unknown_memory_and_devices_are_refused(backend: str) -> None:
    target = f"{backend}:0"
    ptr = allocate(backend, 0, 64)
    refusals = [
        (DLPackProducer(ptr, (4,), np.float32, (14, 0)), ErrorCode.UNSUPPORTED, "kDLOneAPI"),
        (DLPackProducer(ptr, (4,), np.float32, (DLPACK_GPU[backend], 5)), ErrorCode.INVALID_DEVICE, "device 5"),
        (CaiProducer(np.zeros(4).ctypes.data, (4,), np.float64), ErrorCode.INVALID_ARGUMENT, "no GPU driver"),
        (CaiProducer(ptr, (4,), ">f4"), ErrorCode.UNSUPPORTED, ">f4"),
        (CaiProducer(ptr, (4,), np.float32, mask=object()), ErrorCode.UNSUPPORTED, "masked"),
        (CaiProducer(ptr, (4,), np.float32, strides=(4, 4)), ErrorCode.INVALID_ARGUMENT, "strides"),
    ]
    for producer, code, said in refusals:
        with pytest.raises(OffloadError) as info:
            offloadrt.asarray(producer, target)
        assert info.value.code == code and said in info.value.details, info.value
    other_queue = offloadrt.device(f"{backend}:1").queue()
    with pytest.raises(OffloadError) as info:
        offloadrt.asarray(CaiProducer(ptr, (4,), np.float32), target, queue=other_queue)
    assert info.value.code == ErrorCode.INVALID_DEVICE
    other_queue.close()


def test_host_dlpack_still_takes_the_host_path(backend: str) -> None:
    class HostOnly:
        """TEST DOUBLE: a CPU array offering only DLPack (NumPy's own capsules)."""

        def __init__(self, values: np.ndarray) -> None:
            self._values = values

        def __dlpack__(self, **kwargs: Any) -> Any:
            return self._values.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> Any:
            return self._values.__dlpack_device__()

    values = np.arange(10, dtype=np.int16)
    with recorded(backend) as names:
        result = offloadrt.asarray(HostOnly(values), f"{backend}:0")
    assert (result.numpy() == values).all() and copies(backend, names)[1]


def test_dlpack_managed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_ins(monkeypatch, cuda=2, amdgpu=1):
        values = np.arange(5, dtype=np.float32)
        managed = device_data("cuda", 1, values, "managed")
        producer = DLPackProducer(managed, (5,), np.float32, (13, 0))  # kDLCUDAManaged
        with recorded("cuda") as names:
            view = offloadrt.asarray(producer, "cuda:0")  # every CUDA GPU uses it as it is
        assert view.ptr == managed and view.buffer.kind == AllocType.MANAGED and copies("cuda", names) == ([], [])
        assert (np.asarray(offloadrt.asarray(producer, "host")) == values).all()  # the host reads it: host path
        with pytest.raises(OffloadError) as info:
            offloadrt.asarray(producer, "amdgpu:0")
        assert info.value.code == ErrorCode.UNSUPPORTED
        del view
        collect()
        assert producer.deleter_calls == 2  # the view's tensor, and the one NumPy took


def test_an_offloadrt_buffer_comes_in_through_dlpack(backend: str) -> None:
    gpu0, gpu1 = offloadrt.devices(backend)
    buffer = gpu0.allocate(32)
    buffer.fill(3)
    view = offloadrt.asarray(buffer, gpu0)
    copied = offloadrt.asarray(buffer, gpu1)
    assert view.ptr == buffer.ptr and view.dtype == np.uint8 and view.shape == (32,)
    assert (read(backend, copied) == 3).all() and copied.device is gpu1
    buffer.close()  # the view's DLPack export keeps the block out of the pool
    assert gpu0.allocate(32).ptr != view.ptr
    assert (view.numpy() == 3).all()
