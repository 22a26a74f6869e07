"""offloadrt's Python API (offloadrt.core) on the host device: every public method's success and
error paths, lifetimes, the pool's stream-ordered reuse, argument packing and runtime sharing."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import call_with_timeout
from fake_plugins import TWIN_PLATFORM_NAME, Factory, HostTwinPlugin, registered

import offloadrt
from offloadrt import AllocType, DeviceInfo, DeviceType, ErrorCode, OffloadError, PlatformBackend, api
from offloadrt.core import _args, _runtime

WAIT = 10.0


@pytest.fixture(autouse=True, scope="module")
def layer() -> Iterator[None]:
    """The layer's runtime starts on first use; give it back after the module so that other tests
    find no runtime running."""
    _runtime.shutdown()
    yield
    _runtime.shutdown()


@pytest.fixture
def host() -> offloadrt.Device:
    return offloadrt.device("host")


@pytest.fixture
def program(host: offloadrt.Device, build) -> offloadrt.Program:
    return host.load(build("core_kernels"))


@pytest.fixture
def saxpy(program: offloadrt.Program) -> offloadrt.Kernel:
    kernel = program.kernel("saxpy")
    kernel.signature = ("float32", "ptr", "ptr", "uint32")
    return kernel


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Opened after the test: a host function waiting on it holds its queue until then."""
    event = threading.Event()
    yield event
    event.set()


def hold(queue: offloadrt.Queue, gate: threading.Event) -> None:
    queue.host_function(gate.wait, WAIT)


def code_of(error: pytest.ExceptionInfo[OffloadError]) -> ErrorCode:
    assert error.value.details, "an error says what was wrong"
    return error.value.code


# ---- devices ---------------------------------------------------------------------------------

def test_devices_and_device_specs(host: offloadrt.Device) -> None:
    found = offloadrt.devices()
    assert found[-1] is host and host.type == DeviceType.HOST and host.backend == PlatformBackend.HOST
    assert offloadrt.device() is host  # no GPU here: the host
    assert offloadrt.device("host:0") is host and offloadrt.device(" HOST ") is host and offloadrt.device(host) is host
    assert offloadrt.devices("host") == [host] == offloadrt.devices(PlatformBackend.HOST)
    assert offloadrt.devices("cuda") == []
    with pytest.raises(OffloadError) as info:
        offloadrt.device("cuda:3")
    assert code_of(info) == ErrorCode.NOT_FOUND and "host:0" in info.value.details
    with pytest.raises(OffloadError) as info:
        offloadrt.device(3)  # type: ignore[arg-type]
    assert code_of(info) == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(OffloadError) as info:
        offloadrt.devices("opencl")
    assert code_of(info) == ErrorCode.INVALID_ENUMERATION and "'cuda'" in info.value.details


def test_device_properties(host: offloadrt.Device) -> None:
    assert isinstance(host.handle, api.Device)
    assert host.name == host.info[DeviceInfo.NAME] == api.olGetDeviceInfo(host.handle, DeviceInfo.NAME)
    assert host.info[DeviceInfo.TYPE] == DeviceType.HOST
    keys = list(host.info)
    assert DeviceInfo.NAME in keys and len(host.info) == len(keys) and all(isinstance(k, DeviceInfo) for k in keys)
    with pytest.raises(KeyError):
        host.info["NAME"]  # type: ignore[index]
    assert host.info.get("NAME", "default") == "default"  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        host.info[DeviceInfo.NAME] = "x"  # type: ignore[index]
    assert "host:0" in repr(host) and str(host) == "host:0" and repr(host.info).startswith("<DeviceProperties")


def test_a_property_the_backend_cannot_tell_is_a_missing_key(host: offloadrt.Device,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    info = offloadrt.core.DeviceProperties(host)
    real = api.olGetDeviceInfo

    def without_clock(device: api.Device, prop: DeviceInfo) -> object:
        if prop == DeviceInfo.MEMORY_CLOCK_RATE:
            raise OffloadError(ErrorCode.UNIMPLEMENTED, "no SMBIOS records")
        return real(device, prop)

    monkeypatch.setattr(api, "olGetDeviceInfo", without_clock)
    with pytest.raises(KeyError) as info_error:
        info[DeviceInfo.MEMORY_CLOCK_RATE]
    assert isinstance(info_error.value, OffloadError) and info_error.value.code == ErrorCode.UNIMPLEMENTED
    assert DeviceInfo.MEMORY_CLOCK_RATE not in info and info.get(DeviceInfo.MEMORY_CLOCK_RATE) is None
    assert DeviceInfo.MEMORY_CLOCK_RATE not in list(info)


def test_import_offloadrt_starts_nothing() -> None:
    code = ("import sys, offloadrt; "
            "print(sorted(m for m in ('numpy', 'offloadrt.core', 'offloadrt.plugins.host.plugin', 'offloadrt.api') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_the_layer_coexists_with_a_programs_own_init_and_shutdown(host: offloadrt.Device) -> None:
    api.olInit()
    api.olShutDown()  # the program's pair: the layer's reference keeps the runtime running
    assert offloadrt.device("host") is host
    buffer = host.allocate(64)
    buffer.fill(1)
    api.olInit()  # a pair around the layer's use
    buffer.fill(2)
    api.olShutDown()
    assert np.asarray(buffer)[0] == 2
    buffer.close()


def test_a_runtime_ended_under_the_layer_is_started_afresh(host: offloadrt.Device) -> None:
    buffer = host.allocate(64)
    api.olShutDown()  # one olShutDown too many: the layer's own reference is gone
    fresh = offloadrt.device("host")
    assert fresh is not host and fresh.allocate(8).nbytes == 8
    with pytest.raises(OffloadError) as info:
        buffer.fill(0)
    assert code_of(info) == ErrorCode.INVALID_DEVICE and "shut down" in info.value.details
    with pytest.raises(OffloadError):
        host.queue()
    buffer.close()  # a stale buffer closes quietly
    _runtime.shutdown()


EXIT_SCRIPT = """
import atexit, threading, offloadrt
done = []
atexit.register(lambda: print("ran before exit" if done else "not run"))   # runs after the layer's handler
host = offloadrt.device("host")
queue = host.queue()
gate = threading.Event()
queue.host_function(gate.wait, 5)
queue.host_function(done.append, 1)
threading.Timer(0.05, gate.set).start()
{extra}
"""


@pytest.mark.parametrize("extra,expected_out,expected_err", [
    ("", "ran before exit", ""),
    ("failing = host.queue()\nfailing.host_function(int, 'x')", "ran before exit", "failed and nobody synced it"),
])
def test_at_exit_the_layer_drains_its_queues_first(extra: str, expected_out: str, expected_err: str) -> None:
    result = subprocess.run([sys.executable, "-c", EXIT_SCRIPT.format(extra=extra)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected_out
    assert "without olShutDown" not in result.stderr  # the runtime's own exit check found nothing queued
    if expected_err:
        assert expected_err in result.stderr and "OffloadWarning" in result.stderr
    else:
        assert result.stderr == ""


STUCK_SCRIPT = """
import atexit, threading, offloadrt
atexit.register(lambda: print("exit handlers ran"))   # runs after the layer's handler
host = offloadrt.device("host")
queue = host.queue()
queue.host_function(threading.Event().wait)   # never set: this work never finishes
"""


def test_at_exit_queued_work_that_never_finishes_is_waited_for_only_until_a_deadline() -> None:
    env = {**os.environ, "OFFLOADRT_EXIT_TIMEOUT": "0.3"}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", STUCK_SCRIPT], capture_output=True, text=True, timeout=60,
                            check=False, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "exit handlers ran"
    assert "1 queue(s) still have work after 0.3 s (OFFLOADRT_EXIT_TIMEOUT)" in result.stderr, result.stderr
    assert "will not finish" in result.stderr and time.monotonic() - started < 30


@pytest.mark.parametrize("value,seconds", [(None, _runtime.EXIT_TIMEOUT), ("0", 0.0), ("2.5", 2.5), ("-1", None),
                                           ("soon", None), ("inf", None), ("nan", None)])
def test_the_exit_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                                     seconds: float | None) -> None:
    if value is None:
        monkeypatch.delenv("OFFLOADRT_EXIT_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("OFFLOADRT_EXIT_TIMEOUT", value)
    if seconds is not None:
        assert _runtime.exit_timeout() == seconds
        return
    with pytest.warns(offloadrt.OffloadWarning, match="is not a number of seconds >= 0"):
        assert _runtime.exit_timeout() == _runtime.EXIT_TIMEOUT


@pytest.mark.parametrize("leaving", [KeyboardInterrupt, SystemExit])
def test_a_queue_block_left_by_a_base_exception_does_not_wait(host: offloadrt.Device, gate: threading.Event,
                                                               leaving: type[BaseException]) -> None:
    held: list[offloadrt.Queue] = []

    def body() -> None:
        with host.queue() as queue:
            held.append(queue)
            hold(queue, gate)
            raise leaving()

    with pytest.raises(leaving):
        call_with_timeout(body, timeout=WAIT / 2)  # the queue's work waits for the gate: no sync happened
    assert held[0]._handle is None  # closed all the same
    gate.set()


# ---- buffers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(AllocType))
def test_allocate_every_kind(host: offloadrt.Device, kind: AllocType) -> None:
    with host.allocate(100, kind) as buffer:
        assert buffer.nbytes == 100 and buffer.kind == kind and buffer.device is host and buffer.ptr
        assert api.olGetMemInfo(buffer.ptr, offloadrt.MemInfo.TYPE) == kind
        assert f"{kind.name} memory on host:0" in repr(buffer)
    assert buffer.closed and "closed" in repr(buffer)


@pytest.mark.parametrize("nbytes,kind,code", [
    (-1, AllocType.DEVICE, ErrorCode.INVALID_SIZE),
    ("10", AllocType.DEVICE, ErrorCode.INVALID_ARGUMENT),
    (10.0, AllocType.DEVICE, ErrorCode.INVALID_ARGUMENT),
    (10, 7, ErrorCode.INVALID_ENUMERATION),
    (1 << 62, AllocType.DEVICE, ErrorCode.OUT_OF_RESOURCES),
])
def test_allocate_errors(host: offloadrt.Device, nbytes: object, kind: object, code: ErrorCode) -> None:
    with pytest.raises(OffloadError) as info:
        host.allocate(nbytes, kind)  # type: ignore[arg-type]
    assert code_of(info) == code


def test_an_empty_buffer(host: offloadrt.Device) -> None:
    empty = host.allocate(0)
    assert empty.ptr == 0 and np.asarray(empty).size == 0 and np.from_dlpack(empty).size == 0
    empty.copy_from(b"")
    empty.fill(1)
    empty.close()


def test_copies_between_buffers_and_host_objects(host: offloadrt.Device) -> None:
    data = np.arange(16, dtype=np.int32)
    with host.allocate(data.nbytes) as a, host.allocate(data.nbytes, AllocType.HOST) as b:
        a.copy_from(data)
        a.copy_to(b)
        out = np.zeros_like(data)
        b.copy_to(out)
        assert (out == data).all()
        a.copy_from(bytes(range(64)))  # any buffer-protocol object
        a.copy_to(out)
        assert out.tobytes() == bytes(range(64))
        a.copy_from(np.arange(32, dtype=np.int32)[::2])  # not contiguous: copied through a temporary
        a.copy_to(out)
        assert (out == np.arange(0, 32, 2)).all()
        mv = memoryview(bytearray(64))
        a.copy_to(mv)
        assert mv.tobytes() == out.tobytes()


@pytest.mark.parametrize("call,code,words", [
    (lambda b: b.copy_from(np.zeros(3, np.float32)), ErrorCode.INVALID_SIZE, "sizes must match"),
    (lambda b: b.copy_to(bytes(64)), ErrorCode.INVALID_ARGUMENT, "read-only"),
    (lambda b: b.copy_to(np.zeros((8, 4), np.int16)[:, ::2]), ErrorCode.INVALID_ARGUMENT, "not contiguous"),
    (lambda b: b.copy_from(object()), ErrorCode.INVALID_ARGUMENT, "buffer protocol"),
    (lambda b: b.copy_from(b"x" * 64, queue="q"), ErrorCode.INVALID_ARGUMENT, "offloadrt Queue"),
    (lambda b: b.fill(300), ErrorCode.INVALID_ARGUMENT, "0..255"),
    (lambda b: b.fill(1.5), ErrorCode.INVALID_ARGUMENT, "numpy.float32"),
    (lambda b: b.fill(b"abc"), ErrorCode.INVALID_SIZE, "multiple"),
    (lambda b: b.fill(b""), ErrorCode.INVALID_SIZE, "empty"),
    (lambda b: b.fill(object()), ErrorCode.INVALID_ARGUMENT, "bytes-like"),
])
def test_copy_and_fill_errors(host: offloadrt.Device, call, code: ErrorCode, words: str) -> None:
    with host.allocate(64) as buffer:
        with pytest.raises(OffloadError) as info:
            call(buffer)
        assert code_of(info) == code and words in info.value.details


def test_fill_patterns(host: offloadrt.Device) -> None:
    with host.allocate(16) as buffer:
        buffer.fill(7)
        assert bytes(np.asarray(buffer)) == b"\x07" * 16
        buffer.fill(np.float32(1.5))
        assert (np.asarray(buffer).view(np.float32) == 1.5).all()
        buffer.fill(b"\x01\x02")
        assert bytes(np.asarray(buffer)) == b"\x01\x02" * 8


def test_a_closed_buffer_is_a_clear_error(host: offloadrt.Device) -> None:
    buffer = host.allocate(64)
    buffer.close()
    buffer.close()  # twice is fine
    for use in (lambda: buffer.ptr, lambda: buffer.fill(0), lambda: buffer.copy_from(bytes(64)),
                lambda: np.asarray(buffer), lambda: buffer.__dlpack__(), lambda: offloadrt.core.Array(buffer, 4, "u1")):
        with pytest.raises(OffloadError) as info:
            use()
        assert code_of(info) == ErrorCode.INVALID_ARGUMENT and "closed" in info.value.details


def test_host_views_are_zero_copy(host: offloadrt.Device) -> None:
    with host.allocate(32) as buffer:
        view = np.asarray(buffer)
        assert view.dtype == np.uint8 and view.shape == (32,)
        view[:] = 9
        out = bytearray(32)
        buffer.copy_to(out)
        assert out == b"\x09" * 32
        assert memoryview(view).nbytes == 32
        assert np.array(buffer, copy=True).ctypes.data != buffer.ptr
        assert view.ctypes.data == buffer.ptr


@pytest.mark.skipif(sys.version_info < (3, 12), reason="memoryview() of a Python class needs Python 3.12 (PEP 688)")
def test_memoryview_of_a_buffer(host: offloadrt.Device) -> None:
    with host.allocate(8) as buffer:
        view = memoryview(buffer)
        view[0] = 5
        assert np.asarray(buffer)[0] == 5
        view.release()


def test_a_buffer_closed_while_viewed_returns_to_the_pool_after_the_view(host: offloadrt.Device) -> None:
    buffer = host.allocate(3000)
    address = buffer.ptr
    view = np.asarray(buffer)[10:]
    buffer.close()
    other = host.allocate(3000)
    assert other.ptr != address  # still viewed: not handed out
    view[0] = 1  # still valid
    del view
    gc.collect()
    again = host.allocate(3000)
    assert again.ptr == address
    other.close()
    again.close()


def test_buffer_dlpack(host: offloadrt.Device) -> None:
    with host.allocate(16) as buffer:
        buffer.fill(3)
        assert buffer.__dlpack_device__() == (1, 0)
        from_dlpack = np.from_dlpack(buffer)
        assert from_dlpack.ctypes.data == buffer.ptr and (from_dlpack == 3).all()
        copied = np.from_dlpack(buffer, copy=True)
        assert copied.ctypes.data != buffer.ptr and (copied == 3).all()
        for kwargs in ({"stream": 1}, {"dl_device": (2, 0)}):
            with pytest.raises(BufferError) as info:
                buffer.__dlpack__(**kwargs)
            assert isinstance(info.value, OffloadError)


def test_dlpack_capsule_names_and_release(host: offloadrt.Device) -> None:
    name_of = ctypes.pythonapi.PyCapsule_GetName
    name_of.restype, name_of.argtypes = ctypes.c_char_p, [ctypes.py_object]
    buffer = host.allocate(600)
    address = buffer.ptr
    assert name_of(buffer.__dlpack__()) == b"dltensor"
    assert name_of(buffer.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    capsule = buffer.__dlpack__(max_version=(1, 0))
    buffer.close()
    assert host.allocate(600).ptr != address  # an unconsumed capsule still holds it
    del capsule
    gc.collect()
    assert host.allocate(600).ptr == address


# ---- the pool ----------------------------------------------------------------------------------

def test_the_pool_reuses_and_releases(host: offloadrt.Device) -> None:
    pool = host.memory_pool
    assert pool is host.memory_pool and pool.device is host
    pool.release()
    base = pool.used_bytes
    first = host.allocate(1000)
    assert pool.used_bytes == base + 1024 and pool.cached_bytes == 0
    address = first.ptr
    first.close()
    assert pool.used_bytes == base and pool.cached_bytes == 1024
    second = host.allocate(700)  # same size class
    assert second.ptr == address and pool.cached_bytes == 0
    second.close()
    assert pool.release() == 1024 and pool.cached_bytes == 0
    with pytest.raises(OffloadError):
        api.olGetMemInfo(address, offloadrt.MemInfo.SIZE)  # really freed
    assert "MemoryPool of host:0" in repr(pool)


def test_reuse_is_stream_ordered(host: offloadrt.Device, gate: threading.Event) -> None:
    host.memory_pool.release()
    busy, other = host.queue(), host.queue()
    hold(busy, gate)
    buffer = host.allocate(5000, queue=busy)
    buffer.fill(1, busy)  # queued behind the gate
    address = buffer.ptr
    buffer.close()
    elsewhere = [host.allocate(5000), host.allocate(5000, queue=other)]
    assert address not in {b.ptr for b in elsewhere}  # neither the host nor another queue may have it
    same = host.allocate(5000, queue=busy)  # its own queue may: the queue's order protects it
    assert same.ptr == address
    same.close()
    gate.set()
    busy.sync()
    assert host.allocate(5000).ptr == address  # the work before the free has completed
    busy.close()
    other.close()


def test_a_block_used_by_a_launch_waits_for_it(host: offloadrt.Device, saxpy: offloadrt.Kernel,
                                               gate: threading.Event) -> None:
    host.memory_pool.release()
    queue = host.queue()
    hold(queue, gate)
    x, y = host.allocate(4 * 64), host.allocate(4 * 64)
    queue.launch(saxpy, 1, 64, 2.0, x, y, 64)
    address = y.ptr
    x.close()
    y.close()
    held = [host.allocate(4 * 64), host.allocate(4 * 64)]
    assert address not in {b.ptr for b in held}
    gate.set()
    queue.sync()
    queue.close()  # a closed queue's blocks are free once its work is done
    again = [host.allocate(4 * 64), host.allocate(4 * 64)]
    assert address in {b.ptr for b in again}


def test_out_of_memory_releases_the_cache_and_retries(host: offloadrt.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = host.memory_pool
    host.allocate(100_000).close()
    assert pool.cached_bytes
    real, failures = api.olMemAlloc, []

    def scarce(device: api.Device, kind: AllocType, size: int) -> int:
        if pool.cached_bytes or len(failures) >= 2:  # out of memory while the pool holds a cache
            failures.append(size)
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES, "stand-in: no memory")
        return real(device, kind, size)

    monkeypatch.setattr(api, "olMemAlloc", scarce)
    with host.allocate(300_000) as buffer:  # the first try fails, the retry after release works
        assert buffer.nbytes == 300_000 and pool.cached_bytes == 0 and len(failures) == 1
    failures.append(0)
    with pytest.raises(OffloadError) as info:
        host.allocate(600_000)
    assert code_of(info) == ErrorCode.OUT_OF_RESOURCES and "gave back its cache" in info.value.details


# ---- arrays ------------------------------------------------------------------------------------

def test_empty_asarray_and_numpy(host: offloadrt.Device) -> None:
    a = offloadrt.empty((3, 4), np.float64)
    assert a.shape == (3, 4) and a.dtype == np.float64 and a.nbytes == 96 and a.device is host and a.size == 12
    assert a.ndim == 2 and len(a) == 3 and a.buffer.nbytes == 96 and a.offset == 0 and a.queue is None
    data = np.arange(12.0).reshape(3, 4)
    b = offloadrt.asarray(data)
    assert (b.numpy() == data).all() and offloadrt.asarray(b) is b and offloadrt.asarray(b, "host:0") is b
    assert (offloadrt.asarray([1, 2, 3]).numpy() == [1, 2, 3]).all()
    assert (offloadrt.asarray(data.T).numpy() == data.T).all()  # not contiguous: copied in C order
    view = np.asarray(b)
    assert view.ctypes.data == b.ptr and (view == data).all()
    assert "float64[3, 4] on host:0" in repr(b)
    assert not hasattr(b, "__cuda_array_interface__")
    assert (np.from_dlpack(b) == data).all() and b.__dlpack_device__() == (1, 0)


def test_an_array_at_an_offset(host: offloadrt.Device) -> None:
    buffer = host.allocate(64)
    buffer.copy_from(np.arange(16, dtype=np.int32))
    tail = offloadrt.Array(buffer, (2, 3), np.int32, offset=8)
    assert (tail.numpy() == np.arange(2, 8).reshape(2, 3)).all()
    assert (np.asarray(tail) == tail.numpy()).all() and (np.from_dlpack(tail) == tail.numpy()).all()
    assert tail.ptr == buffer.ptr + 8


@pytest.mark.parametrize("args,code", [
    ((b"x", 4, "u1"), ErrorCode.INVALID_ARGUMENT),
    ((None, 4, "u1", 3), ErrorCode.INVALID_ARGUMENT),  # not a multiple of the item size... of int32 below
    ((None, 100, "u1"), ErrorCode.INVALID_SIZE),
    ((None, -1, "u1"), ErrorCode.INVALID_SIZE),
    ((None, "4", "u1"), ErrorCode.INVALID_ARGUMENT),
    ((None, 4, object), ErrorCode.INVALID_ARGUMENT),
    ((None, 4, ">i4"), ErrorCode.INVALID_ARGUMENT),
    ((None, 4, "no-such-type"), ErrorCode.INVALID_ARGUMENT),
])
def test_array_errors(host: offloadrt.Device, args: tuple, code: ErrorCode) -> None:
    buffer = host.allocate(64)
    args = tuple(buffer if a is None else a for a in args)
    if len(args) == 4:
        args = (args[0], args[1], "i4", args[3])
    with pytest.raises(OffloadError) as info:
        offloadrt.Array(*args)
    assert code_of(info) == code


def test_asarray_errors() -> None:
    with pytest.raises(OffloadError) as info:
        offloadrt.asarray(np.array(["a"]))
    assert code_of(info) == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(OffloadError) as info:
        offloadrt.asarray(object())
    assert code_of(info) == ErrorCode.INVALID_ARGUMENT


def test_numpy_waits_for_the_arrays_queue(host: offloadrt.Device, saxpy: offloadrt.Kernel,
                                          gate: threading.Event) -> None:
    queue = host.queue()
    x = offloadrt.asarray(np.ones(100, np.float32), queue=queue)
    y = offloadrt.asarray(np.ones(100, np.float32), queue=queue)
    assert x.queue is queue and x.device is host
    hold(queue, gate)
    queue.launch(saxpy, 2, 64, 3.0, x, y, 100)
    threading.Timer(0.05, gate.set).start()
    assert (y.numpy() == 4.0).all()  # ordered after the launch on the array's queue
    other = host.queue()
    assert (y.numpy(other) == 4.0).all()
    queue.close()
    other.close()


# ---- queues and events -------------------------------------------------------------------------

def test_queue_context_manager_events_and_host_functions(host: offloadrt.Device, gate: threading.Event) -> None:
    calls = []
    with host.queue() as queue:
        assert queue.device is host and isinstance(queue.handle, api.Queue) and not hasattr(queue, "__cuda_stream__")
        start = queue.record(timing=True)
        hold(queue, gate)
        queue.host_function(calls.append, "a")
        queue.host_function(lambda *args: calls.append(args), 1, 2)
        end = queue.record(timing=True)
        plain = queue.record()
        assert not queue.done and not end.done and calls == []
        gate.set()
        end.sync()
        assert end.done and queue.done and calls == ["a", (1, 2)] and queue.error is None
        elapsed = end - start
        assert isinstance(elapsed, float) and elapsed >= 0
        with pytest.raises(offloadrt.OffloadError, match=r"record both with queue.record\(timing=True\)") as info:
            plain - start
        assert info.value.code == ErrorCode.INVALID_ARGUMENT
        plain.close()
        assert isinstance(end.handle, api.Event) and "Event of" in repr(end)
        end.close()
        end.close()
        with pytest.raises(OffloadError) as info:
            end.sync()
        assert code_of(info) == ErrorCode.INVALID_EVENT
    assert "closed" in repr(queue)
    for use in (queue.sync, queue.record, lambda: queue.launch(None, 1, 1), lambda: queue.host_function(print),
                lambda: queue.done, lambda: queue.error, lambda: queue.handle, lambda: host.allocate(8, queue=queue)):
        with pytest.raises(OffloadError) as info:
            use()
        assert code_of(info) == ErrorCode.INVALID_QUEUE
    queue.close()  # twice is fine


def test_wait_orders_work_across_queues(host: offloadrt.Device, gate: threading.Event) -> None:
    log: list[str] = []
    producer, consumer = host.queue(), host.queue()
    hold(producer, gate)
    producer.host_function(log.append, "produced")
    consumer.wait(producer.record())
    consumer.host_function(log.append, "consumed")
    gate.set()
    consumer.sync()
    assert log == ["produced", "consumed"]
    with pytest.raises(OffloadError) as info:
        consumer.wait("event")  # type: ignore[arg-type]
    assert code_of(info) == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(OffloadError) as info:
        consumer.host_function(42)  # type: ignore[arg-type]
    assert code_of(info) == ErrorCode.INVALID_ARGUMENT
    producer.close()
    consumer.close()


def test_a_failing_queue(host: offloadrt.Device, program: offloadrt.Program) -> None:
    queue = host.queue()
    queue.launch(program.kernel("fault"), 2, 1)
    with pytest.raises(OffloadError) as info:
        queue.sync()
    assert info.value.code == ErrorCode.QUEUE_ERROR
    error, failing = queue.error  # type: ignore[misc]
    assert error.code == ErrorCode.BACKEND_FAILURE and "returned 7" in error.details and failing is queue.handle
    with pytest.raises(OffloadError) as info:
        assert queue.done
    assert info.value.code == ErrorCode.QUEUE_ERROR
    with pytest.raises(OffloadError) as info:
        queue.host_function(print)
    assert info.value.code == ErrorCode.QUEUE_ERROR
    queue.close()


def test_queued_copies_hold_host_objects_in_batches_until_their_work_is_done(host: offloadrt.Device,
                                                                             gate: threading.Event) -> None:
    """Sources of queued copies are held without a host function per copy: in batches, each let go
    once an event after it completes; a blocked queue holds them all."""
    from offloadrt.core._queue import HOLD_BATCH

    queue = host.queue()
    buffer = host.allocate(4)
    hold(queue, gate)
    alive = []
    for index in range(3 * HOLD_BATCH):
        temporary = np.full(1, index, np.int32)
        alive.append(weakref.ref(temporary))
        buffer.copy_from(temporary, queue)
        del temporary
    gc.collect()
    assert all(ref() is not None for ref in alive), "a blocked queue holds every source"
    gate.set()
    queue.record().sync()  # the work so far is done (an event's sync lets go of nothing itself)
    for index in range(HOLD_BATCH):  # the next seal lets go of the batches that are done
        buffer.copy_from(np.full(1, index, np.int32), queue)
    gc.collect()
    assert all(ref() is None for ref in alive[:2 * HOLD_BATCH]), "done batches are let go before any sync"
    queue.sync()
    gc.collect()
    out = np.zeros(1, np.int32)
    buffer.copy_to(out)
    assert all(ref() is None for ref in alive) and out[0] == HOLD_BATCH - 1
    queue.close()


def test_a_closed_queue_hands_its_held_objects_to_the_runtime(host: offloadrt.Device, gate: threading.Event) -> None:
    queue = host.queue()
    buffer = host.allocate(4000)
    hold(queue, gate)
    temporary = np.full(1000, 3, np.float32)
    alive = weakref.ref(temporary)
    buffer.copy_from(temporary, queue)
    del temporary
    queue.close()  # does not wait: the copy is still queued
    final = queue._final_event
    assert final is not None
    del queue
    gc.collect()
    assert alive() is not None, "the runtime holds the source of a closed queue's pending copy"
    gate.set()
    final.sync()
    _runtime.runtime().hold(None, [])  # holding more lets go of what is done
    gc.collect()
    assert alive() is None
    out = np.zeros(1000, np.float32)
    buffer.copy_to(out)
    assert (out == 3).all()
    buffer.close()


def test_a_host_function_may_not_wait(host: offloadrt.Device) -> None:
    queue = host.queue()
    queue.host_function(queue.sync)
    with pytest.raises(OffloadError):
        queue.sync()
    error, _ = queue.error  # type: ignore[misc]
    assert error.code == ErrorCode.INVALID_ARGUMENT and "host function" in error.details
    queue.close()


def test_a_queued_copy_keeps_a_temporary_host_object_alive(host: offloadrt.Device, gate: threading.Event) -> None:
    queue = host.queue()
    hold(queue, gate)
    buffer = host.allocate(4000)
    temporary = np.full(1000, 7, np.float32)
    alive = weakref.ref(temporary)
    buffer.copy_from(temporary, queue)
    del temporary
    gc.collect()
    assert alive() is not None  # the queued copy holds it
    out = np.zeros(1000, np.float32)
    buffer.copy_to(out, queue)
    gate.set()
    queue.sync()
    gc.collect()
    assert alive() is None and (out == 7).all()
    queue.close()
    buffer.close()


# ---- programs and kernels ------------------------------------------------------------------------

def test_programs_load_from_bytes_or_a_path(host: offloadrt.Device, build, tmp_path: Path) -> None:
    image = build("core_kernels")
    (tmp_path / "k.so").write_bytes(image)
    with host.load(tmp_path / "k.so") as program, host.load(bytearray(image)) as other:
        assert program.device is host and isinstance(program.handle, api.Program)
        assert program.kernel("saxpy") is program.kernel("saxpy")
        assert program.kernel("saxpy") is not other.kernel("saxpy")
        kernel = program.kernel("saxpy")
        assert kernel.name == "saxpy" and kernel.program is program and isinstance(kernel.handle, api.Symbol)
        assert kernel.signature is None and "saxpy" in repr(kernel)
    for use in (lambda: program.kernel("saxpy"), lambda: program.global_var("counter"), lambda: kernel.handle):
        with pytest.raises(OffloadError) as info:
            use()
        assert code_of(info) == ErrorCode.INVALID_ARGUMENT and "closed" in info.value.details
    program.close()


@pytest.mark.parametrize("image,code", [(b"not an image", ErrorCode.INVALID_BINARY),
                                        ("core_kernels.so", ErrorCode.INVALID_ARGUMENT),
                                        (42, ErrorCode.INVALID_ARGUMENT)])
def test_load_errors(host: offloadrt.Device, image: object, code: ErrorCode) -> None:
    with pytest.raises(OffloadError) as info:
        host.load(image)  # type: ignore[arg-type]
    assert code_of(info) == code


def test_kernel_lookup_errors(program: offloadrt.Program) -> None:
    with pytest.raises(OffloadError) as info:
        program.kernel("missing")
    assert code_of(info) == ErrorCode.NOT_FOUND and "missing" in info.value.details
    with pytest.raises(OffloadError) as info:
        program.global_var("saxpy")
    assert code_of(info) == ErrorCode.NOT_FOUND


def test_global_variables(host: offloadrt.Device, build) -> None:
    program = host.load(build("core_kernels"))
    counter = program.global_var("counter")
    assert counter.nbytes == 4 and np.asarray(counter).view(np.int32)[0] == 5
    bump = program.kernel("bump")
    with host.queue() as queue:
        queue.launch(bump, 3, 1, np.int32(2))
    assert np.asarray(counter).view(np.int32)[0] == 11
    del program, bump
    gc.collect()
    assert np.asarray(counter).view(np.int32)[0] == 11  # the buffer keeps its program loaded
    counter.close()  # frees nothing


def test_a_kernel_keeps_its_program_alive(host: offloadrt.Device, build) -> None:
    kernel = host.load(build("core_kernels")).kernel("saxpy")
    gc.collect()
    kernel.signature = ("float", "float*", "float*", "unsigned")
    with host.queue() as queue:
        x = offloadrt.asarray(np.ones(8, np.float32))
        queue.launch(kernel, 1, 8, 1.0, x, x, 8)
    assert (x.numpy() == 2).all()


def test_launch_packs_with_c_alignment(program: offloadrt.Program) -> None:
    out = offloadrt.empty(6, np.float64)
    mixed = program.kernel("mixed")
    with offloadrt.device("host").queue() as queue:
        queue.launch(mixed, 1, 1, np.int8(-3), np.float64(2.5), np.int16(-300), out, np.float32(0.25),
                     np.uint64(1 << 40), np.uint8(200))
        assert (out.numpy(queue) == [-3, 2.5, -300, 0.25, 1 << 40, 200]).all()
        mixed.signature = ("int8", "double", "short", "ptr", "float32", "uint64", "uint8")
        queue.launch(mixed, 1, 1, -4, 3, 7, out.buffer, 0.5, 9, True)  # plain numbers, a Buffer for the pointer
        assert (out.numpy(queue) == [-4, 3, 7, 0.5, 9, 1]).all()
        queue.launch(mixed, 1, 1, ctypes.c_int8(1), 2.0, 3, out, 4.0, 5, 6)  # a ctypes value for a scalar
        assert (out.numpy(queue) == [1, 2, 3, 4, 5, 6]).all()
    plan = _args.build_plan(mixed._params, (-4, 3, 7, out, 0.5, 9, True), "mixed")
    # struct mixed_args's layout up to its last member: the host kernel (OL_HOST_KERNEL_ARGS) gets it
    # zero-extended to sizeof(struct mixed_args)
    assert plan.format == "<b7xdh6xQf4xQB"
    assert _args.build_plan(None, (), "none")(None) is None


def test_launch_shapes_and_shared_memory(program: offloadrt.Program) -> None:
    out = offloadrt.asarray(np.zeros(7, np.uint32))
    shape = program.kernel("shape")
    with offloadrt.device("host").queue() as queue:
        for grid, block, expect in [(4, 8, [4, 1, 1, 8, 1, 1]), ((2, 3), (4, 2), [2, 3, 1, 4, 2, 1]),
                                    ([2, 2, 2], (1, 1, 3), [2, 2, 2, 1, 1, 3])]:
            out.buffer.fill(0)
            queue.launch(shape, grid, block, out, shared_mem=64)
            queue.sync()
            result = out.numpy()
            assert list(result[:6]) == expect and result[6] == np.prod(expect[:3])


@pytest.mark.parametrize("grid,block,shared,code", [
    (0, 1, 0, ErrorCode.INVALID_SIZE), ((1, 1, 1, 1), 1, 0, ErrorCode.INVALID_SIZE), ("2", 1, 0,
                                                                                      ErrorCode.INVALID_ARGUMENT),
    (1, (), 0, ErrorCode.INVALID_SIZE), (1, 1, -1, ErrorCode.INVALID_SIZE), (1, 1, 1.5, ErrorCode.INVALID_ARGUMENT),
    (1, 1 << 32, 0, ErrorCode.INVALID_SIZE),
])
def test_launch_size_errors(program: offloadrt.Program, grid: object, block: object, shared: object,
                            code: ErrorCode) -> None:
    out = offloadrt.empty(7, np.uint32)
    with offloadrt.device("host").queue() as queue:
        with pytest.raises(OffloadError) as info:
            queue.launch(program.kernel("shape"), grid, block, out, shared_mem=shared)
        assert code_of(info) == code


def test_launch_argument_errors(host: offloadrt.Device, saxpy: offloadrt.Kernel, program: offloadrt.Program) -> None:
    x = offloadrt.empty(64, np.float32)
    closed = host.allocate(256)
    closed.close()
    affine = program.kernel("affine")
    cases = [
        (saxpy, (2.0, x, x), ErrorCode.INVALID_ARGUMENT, "takes 4 arguments"),
        (saxpy, (2.0, x, x, -1), ErrorCode.INVALID_ARGUMENT, "does not fit"),
        (saxpy, (2.0, x, x, 1.5), ErrorCode.INVALID_ARGUMENT, "does not fit"),
        (saxpy, (x, x, x, 1), ErrorCode.INVALID_ARGUMENT, "signature says float32"),
        (saxpy, (2.0, "x", x, 1), ErrorCode.INVALID_ARGUMENT, "does not fit"),
        (saxpy, (2.0, closed, x, 1), ErrorCode.INVALID_ARGUMENT, "closed buffer"),
        (affine, (x, x, np.float32(1), "n"), ErrorCode.INVALID_ARGUMENT, "cannot be a kernel argument"),
        (affine, (x, x), ErrorCode.INVALID_ARGUMENT, "blob"),  # the kernel's declared size catches it
    ]
    with host.queue() as queue:
        for kernel, args, code, words in cases:
            with pytest.raises(OffloadError) as info:
                queue.launch(kernel, 1, 64, *args)
            assert code_of(info) == code and words in info.value.details, info.value
        with pytest.raises(TypeError, match="kernel.signature"):
            queue.launch(affine, 1, 64, x, x, 2.0, 3)
        with pytest.raises(OffloadError) as info:
            queue.launch("saxpy", 1, 1)  # type: ignore[arg-type]
        assert code_of(info) == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(OffloadError) as info:
        saxpy.signature = ("float32", "struct")
    assert code_of(info) == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(OffloadError):
        saxpy.signature = "float32"  # type: ignore[assignment]


def test_the_packing_plan_is_cached_per_argument_types(host: offloadrt.Device, saxpy: offloadrt.Kernel) -> None:
    x = offloadrt.asarray(np.ones(64, np.float32))
    y = offloadrt.asarray(np.zeros(64, np.float32))
    with host.queue() as queue:
        queue.launch(saxpy, 1, 64, 1.0, x, y, 64)
        first = saxpy._fast
        assert first is not _args.not_built
        queue.launch(saxpy, 1, 64, 1.0, x, y, 64)
        assert saxpy._fast is first  # reused
        queue.launch(saxpy, 1, 64, np.float32(1.0), x.buffer, y, np.uint32(64))  # other types: a new plan
        assert saxpy._fast is not first
        queue.launch(saxpy, 2, 32, 1.0, x, y, 64)  # another launch shape
    assert (y.numpy() == 4).all()
    saxpy.signature = None
    assert saxpy._fast is _args.not_built and saxpy.signature is None


def _kept(kernel: offloadrt.Kernel) -> tuple:
    """The values and blob a kernel's launcher keeps from its last launch (its ``_last`` cell)."""
    cells = dict(zip(kernel._fast.__code__.co_freevars, kernel._fast.__closure__ or ()))
    return cells["_last"].cell_contents


def test_a_launch_with_the_same_values_passes_the_kept_blob(host: offloadrt.Device, program: offloadrt.Program) -> None:
    mixed = program.kernel("mixed")
    mixed.signature = ("int8", "double", "short", "ptr", "float32", "uint64", "uint8")
    out = host.allocate(48)
    view = offloadrt.Array(out, (6,), np.float64)

    def launched(*args: object) -> list[float]:
        queue.launch(mixed, 1, 1, *args)
        return [float(v) for v in view.numpy(queue)]

    with host.queue() as queue:
        assert launched(-4, 3.0, 7, out, 0.5, 9, True) == [-4, 3, 7, 0.5, 9, 1]  # builds the launcher
        assert launched(-4, 3.0, 7, out, 0.5, 9, True) == [-4, 3, 7, 0.5, 9, 1]  # which keeps the blob
        blob = _kept(mixed)[-1]
        assert launched(-4, 3.0, 7, out, 0.5, 9, True) == [-4, 3, 7, 0.5, 9, 1]
        assert _kept(mixed)[-1] is blob  # the same values: the same bytes object again
        assert launched(-4, 3.0, 8, out, 0.5, 9, True)[2] == 8  # one value changed: packed afresh
        assert _kept(mixed)[-1] is not blob
        # equal but not the same: -0.0 == 0.0, yet the kernel must see the sign
        launched(-4, 0.0, 8, out, 0.5, 9, True)
        assert not np.signbit(launched(-4, 0.0, 8, out, -0.0, 9, True)[4])
        assert np.signbit(launched(-4, -0.0, 8, out, -0.0, 9, True)[1])
        # numbers of one value but another type: the checks of a new argument still run
        with pytest.raises(OffloadError, match="does not fit"):
            queue.launch(mixed, 1, 1, -4, 3.0, 7.0, out, 0.5, 9, True)
        # a mutable ctypes value is packed every time, never kept
        value = ctypes.c_int8(1)
        assert launched(value, 2.0, 3, out, 4.0, 5, 6)[0] == 1
        value.value = 5
        assert launched(value, 2.0, 3, out, 4.0, 5, 6)[0] == 5
        # an array's pointer (a sum) compares by value; a NumPy scalar is immutable, so kept
        six = np.uint8(6)
        assert launched(-1, 2.0, 3, view, 4.0, 5, six) == [-1, 2, 3, 4, 5, 6]
        assert launched(-1, 2.0, 3, view, 4.0, 5, six) == [-1, 2, 3, 4, 5, 6]
        blob = _kept(mixed)[-1]
        assert launched(-1, 2.0, 3, view, 4.0, 5, six) == [-1, 2, 3, 4, 5, 6]
        assert _kept(mixed)[-1] is blob
        # a buffer closed since the blob was kept is refused, and a new buffer at the same address
        # is noted as used by the queue (its block waits for the launch)
        other = host.allocate(48 * 1021)  # a size of its own: the pool hands its block out again
        launched(1, 2.0, 3, view, 4.0, 5, 6)
        queue.launch(mixed, 1, 1, 1, 2.0, 3, other, 4.0, 5, 6)
        queue.sync()
        other.close()
        with pytest.raises(OffloadError, match="closed buffer"):
            queue.launch(mixed, 1, 1, 1, 2.0, 3, other, 4.0, 5, 6)
        again = host.allocate(48 * 1021)  # mostly at the same address (the pool may not have it back yet)
        queue.launch(mixed, 1, 1, 1, 2.0, 3, again, 4.0, 5, 6)
        assert again._queues is queue
        assert list(offloadrt.Array(again, (6,), np.float64).numpy(queue)) == [1, 2, 3, 4, 5, 6]


def test_a_launcher_whose_values_change_every_launch_stops_keeping_blobs(host: offloadrt.Device,
                                                                           program: offloadrt.Program) -> None:
    bump = program.kernel("bump")
    bump.signature = ("int32",)
    with host.queue() as queue:
        queue.launch(bump, 1, 1, 1000)
        queue.launch(bump, 1, 1, 1000)
        queue.launch(bump, 1, 1, 1000)  # found again: no launches in a row with other values
        assert _kept(bump)[0] == 1000
        for value in range(_args.KEEP_AFTER_MISSES):
            queue.launch(bump, 1, 1, value)
        assert _kept(bump)[0] == _args.KEEP_AFTER_MISSES - 1  # each kept until then
        queue.launch(bump, 1, 1, 2000)
        assert _kept(bump)[0] is _args._NOTHING  # no longer: nothing is kept
        # values that settle after many changes are kept again within KEEP_EVERY launches, and from
        # then on every new value is kept again
        for value in range(_args.KEEP_EVERY):
            queue.launch(bump, 1, 1, value)
        for _ in range(_args.KEEP_EVERY):
            queue.launch(bump, 1, 1, 4000)
        assert _kept(bump)[0] == 4000
        queue.launch(bump, 1, 1, 3000)
        assert _kept(bump)[0] == 3000
        bump.signature = None
        queue.launch(bump, 1, 1, np.int32(1))  # without a signature: kept too (NumPy scalars are immutable)
        queue.launch(bump, 1, 1, np.int32(2))
        assert _kept(bump)[0] == 2


def test_launches_of_one_kernel_from_threads_keep_their_own_values(host: offloadrt.Device,
                                                                   program: offloadrt.Program) -> None:
    mixed = program.kernel("mixed")
    mixed.signature = ("int8", "double", "short", "ptr", "float32", "uint64", "uint8")
    outs = [offloadrt.empty(6, np.float64) for _ in range(2)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def launch(index: int) -> None:
        try:
            with host.queue() as queue:
                start.wait(WAIT)
                for value in range(300):
                    value_ = value % 7
                    queue.launch(mixed, 1, 1, index, 1.0, value_, outs[index].buffer, 2.0, index, 3)
                    seen = outs[index].numpy(queue)
                    assert list(seen) == [index, 1, value_, 2, index, 3], (index, value_, list(seen))
        except BaseException as exc:  # noqa: BLE001  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors[0]


def test_a_closed_program_cannot_launch(host: offloadrt.Device, build) -> None:
    program = host.load(build("core_kernels"))
    kernel = program.kernel("bump")
    with host.queue() as queue:
        queue.launch(kernel, 1, 1, np.int32(1))
        program.close()
        with pytest.raises(OffloadError) as info:
            queue.launch(kernel, 1, 1, np.int32(1))
        assert code_of(info) == ErrorCode.INVALID_ARGUMENT and "launching kernel 'bump'" in info.value.details


# ---- two devices --------------------------------------------------------------------------------

def test_work_on_the_wrong_device_is_a_clear_error(build) -> None:
    _runtime.shutdown()
    with registered(Factory(HostTwinPlugin, PlatformBackend.UNKNOWN)):
        try:
            host, twin = offloadrt.device("host"), offloadrt.device(TWIN_PLATFORM_NAME)
            assert twin.type == DeviceType.CPU
            data = offloadrt.asarray(np.arange(4.0), twin)
            on_host = offloadrt.asarray(data, host)  # between devices
            assert (on_host.numpy() == np.arange(4.0)).all() and on_host.device is host
            assert np.from_dlpack(data).tolist() == [0, 1, 2, 3] and data.__dlpack_device__() == (1, 0)
            host_queue = host.queue()
            with pytest.raises(OffloadError) as info:
                data.buffer.fill(0, host_queue)
            assert info.value.code == ErrorCode.INVALID_DEVICE and "pass a queue of host-twin:0" in info.value.details
            with pytest.raises(OffloadError) as info:
                twin.allocate(8, queue=host_queue)
            assert info.value.code == ErrorCode.INVALID_DEVICE
            kernel = twin.load(build("core_kernels")).kernel("bump")
            with pytest.raises(OffloadError) as info:
                host_queue.launch(kernel, 1, 1, np.int32(1))
            assert info.value.code == ErrorCode.INVALID_DEVICE and "loaded on host-twin:0" in info.value.details
            host_queue.close()
        finally:
            _runtime.shutdown()


def test_help_reads_well() -> None:
    text = subprocess.run([sys.executable, "-c", "import offloadrt; help(offloadrt.Queue)"], capture_output=True,
                          text=True, check=True, timeout=60).stdout
    for words in ("in-order queue", "launch(self, kernel", "must not wait", "sync(self)", "record(self, timing"):
        assert words in text
    for name in offloadrt.core.__all__:
        public = getattr(offloadrt.core, name)
        assert name == "DeviceProperties" or getattr(offloadrt, name) is public
        assert public.__doc__ and public.__doc__.strip(), name
        for attribute, member in vars(public).items() if isinstance(public, type) else ():
            if not attribute.startswith("_") and callable(getattr(member, "fget", member)):
                assert getattr(member, "__doc__", None), f"{name}.{attribute}"



def test_the_end_of_a_with_block_raises_a_failure_nobody_saw(program: offloadrt.Program) -> None:
    with pytest.raises(OffloadError) as info:
        with offloadrt.device("host").queue() as queue:
            queue.launch(program.kernel("fault"), 1, 1)
    assert info.value.code == ErrorCode.QUEUE_ERROR
    with offloadrt.device("host").queue() as seen:  # already seen in the block: not raised again
        seen.launch(program.kernel("fault"), 1, 1)
        with pytest.raises(OffloadError):
            seen.sync()
    with pytest.raises(ValueError):  # the body's own exception wins
        with offloadrt.device("host").queue() as failing:
            failing.launch(program.kernel("fault"), 1, 1)
            raise ValueError("body")


def test_queued_copies_of_numpy_arrays_keep_every_check(host: offloadrt.Device) -> None:
    """copy_from/copy_to take a hot path for a C-contiguous NumPy array on an open queue of the
    buffer's device; whatever it does not take still gets transfer's checks and errors."""
    queue, other = host.queue(), offloadrt.Queue(host)
    buffer = host.allocate(16)
    data = np.arange(4, dtype=np.int32)
    buffer.copy_from(data, queue)
    out = np.zeros(4, np.int32)
    buffer.copy_to(out, queue)
    strided_in = np.arange(8, dtype=np.int32)[::2] * 10
    buffer.copy_from(strided_in, queue)  # not contiguous: copied to a contiguous temporary
    out2 = np.zeros(4, np.int32)
    buffer.copy_to(out2, queue)
    queue.sync()
    assert list(out) == [0, 1, 2, 3] and list(out2) == [0, 20, 40, 60]
    read_only = np.zeros(4, np.int32)
    read_only.flags.writeable = False
    strided_out = np.zeros(8, np.int32)[::2]
    cases = [(lambda: buffer.copy_from(np.zeros(3, np.int32), queue), ErrorCode.INVALID_SIZE),
             (lambda: buffer.copy_to(np.zeros(5, np.int32), queue), ErrorCode.INVALID_SIZE),
             (lambda: buffer.copy_to(read_only, queue), ErrorCode.INVALID_ARGUMENT),
             (lambda: buffer.copy_to(strided_out, queue), ErrorCode.INVALID_ARGUMENT),
             (lambda: buffer.copy_from(data, "queue"), ErrorCode.INVALID_ARGUMENT)]
    other.close()
    cases += [(lambda: buffer.copy_from(data, other), ErrorCode.INVALID_QUEUE),
              (lambda: buffer.copy_to(out, other), ErrorCode.INVALID_QUEUE)]
    for call, code in cases:
        with pytest.raises(OffloadError) as info:
            call()
        assert code_of(info) == code, info.value
    buffer.close()
    with pytest.raises(OffloadError) as info:
        buffer.copy_from(data, queue)
    assert code_of(info) == ErrorCode.INVALID_ARGUMENT and "closed" in info.value.details
    queue.close()


def test_threads_copying_on_one_queue_seal_and_let_go_safely(host: offloadrt.Device) -> None:
    """Several threads queue copies of temporaries on one queue at once (batches are sealed and let
    go concurrently): every copy lands, none raises, and after sync nothing is held."""
    from offloadrt.core._queue import HOLD_BATCH

    queue = host.queue()
    buffers = [host.allocate(8) for _ in range(4)]
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            for value in range(3 * HOLD_BATCH):
                buffers[index].copy_from(np.array([index, value], np.int32), queue)
        except BaseException as exc:  # noqa: BLE001  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors
    queue.sync()
    for index, buffer in enumerate(buffers):
        out = np.zeros(2, np.int32)
        buffer.copy_to(out)
        assert list(out) == [index, 3 * HOLD_BATCH - 1]
    assert queue._held == [] and queue._sealed == []
    queue.close()
