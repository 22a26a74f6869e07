"""Ordinary mistakes that used to corrupt the heap or crash the process: copies and fills past the
end of an allocation, frees under queued work, destroys racing launches, calls racing the last
olShutDown, and waits whose outcome depended on the order of their events."""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
import textwrap
import threading

import pytest
from conftest import Gate, alloc_u32, expect_error, increment, kernel, launch_args

import offloadrt
from offloadrt import AllocType, ErrorCode, MemInfo, api
from offloadrt.plugins.host import memory as host_memory

CANARY = 0xA5


def fenced(host: api.Device, size: int) -> tuple[int, int]:
    """Two allocations, ``size`` bytes each, filled with the canary: (first, second)."""
    first = api.olMemAlloc(host, AllocType.HOST, size)
    second = api.olMemAlloc(host, AllocType.HOST, size)
    ctypes.memset(first, CANARY, size)
    ctypes.memset(second, CANARY, size)
    return first, second


# ---- copies and fills that run past the end of an allocation ---------------------------------------

@pytest.mark.parametrize("kind", list(AllocType), ids=lambda k: k.name)
def test_copy_past_the_end_of_either_side_is_invalid_size_and_copies_nothing(host, queue, kind) -> None:
    size = 256
    dst = api.olMemAlloc(host, kind, size)
    src = api.olMemAlloc(host, kind, size)
    ctypes.memset(dst, CANARY, size)
    ctypes.memset(src, 0x11, size)
    try:
        for q in (None, queue):
            err = expect_error(ErrorCode.INVALID_SIZE, api.olMemcpy, q, dst, host, src, host, size + 1)
            assert "destination" in err.details and "1 bytes past the end" in err.details
            assert f"{dst:#x}" in err.details and f"({size} bytes" in err.details
            err = expect_error(ErrorCode.INVALID_SIZE, api.olMemcpy, q, dst + 200, host, src, host, 100)
            assert "44 bytes past the end" in err.details
            # the source side is checked too, from an interior address
            err = expect_error(ErrorCode.INVALID_SIZE, api.olMemcpy, q, dst, host, src + 128, host, 129)
            assert "source" in err.details and "1 bytes past the end" in err.details
        api.olSyncQueue(queue)
        assert ctypes.string_at(dst, size) == bytes([CANARY]) * size
        # exactly up to the end is fine
        api.olMemcpy(queue, dst + 128, host, src + 128, host, 128)
        api.olSyncQueue(queue)
        assert ctypes.string_at(dst, size) == bytes([CANARY]) * 128 + b"\x11" * 128
    finally:
        api.olMemFree(dst)
        api.olMemFree(src)


def test_fill_past_the_end_is_invalid_size_and_writes_nothing(host, queue) -> None:
    first, second = fenced(host, 4096)
    try:
        for q in (None, queue):
            err = expect_error(ErrorCode.INVALID_SIZE, api.olMemFill, q, first + 4000, b"\x01\x02\x03\x04", 100)
            assert "4 bytes past the end" in err.details and f"{first:#x}" in err.details
        api.olSyncQueue(queue)
        assert ctypes.string_at(first, 4096) == bytes([CANARY]) * 4096
        assert ctypes.string_at(second, 4096) == bytes([CANARY]) * 4096
        api.olMemFill(queue, first + 4000, b"\x01\x02\x03\x04", 96)
        api.olSyncQueue(queue)
        assert ctypes.string_at(first + 4000, 96) == b"\x01\x02\x03\x04" * 24
    finally:
        api.olMemFree(first)
        api.olMemFree(second)


def test_plain_host_memory_is_not_bounds_checked(host) -> None:
    """Only offloadrt's allocations have a known end; a user's own buffer is the user's business."""
    buffer = ctypes.create_string_buffer(64)
    source = ctypes.create_string_buffer(b"x" * 64)
    api.olMemcpy(None, ctypes.addressof(buffer), host, ctypes.addressof(source), host, 64)
    assert buffer.raw == b"x" * 64


def test_the_bounds_check_is_off_without_validation(monkeypatch) -> None:
    monkeypatch.setenv("OFFLOAD_DISABLE_VALIDATION", "1")
    api.olInit()
    try:
        ctx = api.olMemAlloc.__globals__["_STATE"].context
        host = ctx.host_device
        first = api.olMemAlloc(host, AllocType.HOST, 4096)

        def refuse(*_args: object) -> None:
            raise AssertionError("the bounds check ran although validation is disabled")

        monkeypatch.setattr(ctx.allocations, "check_range", refuse)
        api.olMemcpy(None, first, host, first + 2048, host, 2048)
        api.olMemFill(None, first, b"\x00", 4096)
        api.olMemFree(first)
    finally:
        api.olShutDown()


# ---- frees under queued work -------------------------------------------------------------------------

def test_free_under_queued_work_waits_for_that_work(host, queue, monkeypatch) -> None:
    freed: list[int] = []
    real_free = host_memory.free

    def recording_free(ptr: int) -> None:
        freed.append(ptr)
        real_free(ptr)

    monkeypatch.setattr(host_memory, "free", recording_free)
    size = 1 << 20
    src = api.olMemAlloc(host, AllocType.HOST, size)
    dst = api.olMemAlloc(host, AllocType.DEVICE, size)
    ctypes.memset(src, 0x5A, size)
    seen = bytearray()
    with Gate(queue) as gate:
        api.olMemcpy(queue, dst, host, src, host, size)
        api.olLaunchHostFunction(queue, lambda _: seen.extend(ctypes.string_at(dst, size)))
        api.olMemFree(src)
        api.olMemFree(dst)
        # both are gone for the API at once, but the memory stays until the queue is past them
        expect_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, src, MemInfo.SIZE)
        expect_error(ErrorCode.INVALID_ARGUMENT, api.olMemFree, dst)
        assert freed == []
        gate.open()
    api.olSyncQueue(queue)
    assert sorted(freed) == sorted([src, dst])
    assert bytes(seen) == b"\x5a" * size


def test_free_waits_for_every_busy_queue_and_survives_a_failed_one(host, basic, monkeypatch) -> None:
    freed: list[int] = []
    real_free = host_memory.free
    monkeypatch.setattr(host_memory, "free", lambda ptr: (freed.append(ptr), real_free(ptr)))
    queues = [api.olCreateQueue(host) for _ in range(3)]
    gates = [Gate(q) for q in queues]
    counter, _view = alloc_u32(host)
    api.olLaunchKernel(queues[1], host, kernel(basic, "fail_with"), struct.pack("<i", 3), launch_args())
    api.olMemFree(counter)
    for index, g in enumerate(gates):
        assert freed == [], f"freed before queue {index} was past its work"
        g.open()
        if index == 1:
            with pytest.raises(offloadrt.OffloadError):
                api.olSyncQueue(queues[1])
        else:
            api.olSyncQueue(queues[index])
    assert freed == [counter]
    for q in queues:
        api.olDestroyQueue(q)


def test_free_without_queued_work_is_immediate(host, queue, monkeypatch) -> None:
    freed: list[int] = []
    real_free = host_memory.free
    monkeypatch.setattr(host_memory, "free", lambda ptr: (freed.append(ptr), real_free(ptr)))
    address = api.olMemAlloc(host, AllocType.DEVICE, 64)
    api.olMemFree(address)
    assert freed == [address]


# ---- waits: the outcome does not depend on the order of the events ------------------------------------

@pytest.mark.parametrize("order", ["good-bad", "bad-good"])
def test_a_wait_on_a_failed_event_succeeds_whatever_its_place_and_fails_the_queue(host, basic, order) -> None:
    good_queue, bad_queue, waiter = (api.olCreateQueue(host) for _ in range(3))
    with Gate(bad_queue):
        api.olLaunchKernel(bad_queue, host, kernel(basic, "fail_with"), struct.pack("<i", 9), launch_args())
        bad = api.olCreateEvent(bad_queue)
    with pytest.raises(offloadrt.OffloadError):
        api.olSyncQueue(bad_queue)
    good = api.olCreateEvent(good_queue)
    api.olWaitEvents(waiter, [good, bad] if order == "good-bad" else [bad, good])
    error, origin = api.olGetQueueError(waiter)
    assert origin is bad_queue and error is not None
    err = expect_error(ErrorCode.QUEUE_ERROR, api.olSyncQueue, waiter)
    assert f"because it waited (olWaitEvents) on {bad_queue}, which failed" in err.details, err.details
    assert "waited" not in expect_error(ErrorCode.QUEUE_ERROR, api.olSyncQueue, bad_queue).details
    # a queue that had already failed refuses new waits
    expect_error(ErrorCode.QUEUE_ERROR, api.olWaitEvents, waiter, [good])
    for q in (good_queue, bad_queue, waiter):
        api.olDestroyQueue(q)


# ---- races, in a child process so that a crash fails the test instead of ending the run ---------------

def run_child(script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_TRACE", "OFFLOAD_DISABLE_VALIDATION")}
    result = subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(script)], env=env,
                            capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


RACE_PRELUDE = """
    import struct, sys, threading
    import offloadrt
    from offloadrt import api, AllocType, DeviceInfo, DeviceType, Dimensions, KernelLaunchSizeArgs, SymbolKind
    IMAGE = open(sys.argv[1], "rb").read() if len(sys.argv) > 1 else None

    def host_device():
        devices = []
        api.olIterateDevices(lambda d, _: devices.append(d))
        return next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
"""


def test_destroying_a_program_while_other_threads_launch_it_never_crashes(build, tmp_path) -> None:
    image = tmp_path / "basic.so"
    image.write_bytes(build("basic"))
    script = RACE_PRELUDE + """
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show within a few rounds
    api.olInit()
    host = host_device()
    counter = api.olMemAlloc(host, AllocType.HOST, 64)
    blob = struct.pack("<Q", counter)
    one = KernelLaunchSizeArgs(1, Dimensions(1), Dimensions(1))
    four = KernelLaunchSizeArgs(1, Dimensions(4), Dimensions(1))
    outcomes = {"ran": 0, "refused": 0, "queue failed": 0}
    lock = threading.Lock()
    for round_ in range(150):
        program = api.olCreateProgram(host, IMAGE)
        symbol = api.olGetSymbol(program, "increment", SymbolKind.KERNEL)
        start = threading.Barrier(4)

        def launcher(index):
            queue = api.olCreateQueue(host)
            start.wait()
            for _ in range(30):
                try:
                    api.olLaunchKernel(queue if index % 3 else None, host, symbol, blob, one if index % 2 else four)
                except offloadrt.OffloadError as exc:
                    assert exc.code == offloadrt.ErrorCode.INVALID_ARGUMENT, exc
                    with lock: outcomes["refused"] += 1
                    break
            try:
                api.olSyncQueue(queue)
                with lock: outcomes["ran"] += 1
            except offloadrt.OffloadError as exc:
                assert exc.code == offloadrt.ErrorCode.QUEUE_ERROR, exc
                assert "program was destroyed" in str(api.olGetQueueError(queue)[0]), exc
                with lock: outcomes["queue failed"] += 1
            api.olDestroyQueue(queue)

        threads = [threading.Thread(target=launcher, args=(i,)) for i in range(3)]
        for t in threads: t.start()
        start.wait()
        api.olDestroyProgram(program)
        for t in threads: t.join()
    api.olMemFree(counter)
    api.olShutDown()
    print(outcomes)
    """
    result = subprocess_with_image(script, image)
    assert "ran" in result.stdout


def subprocess_with_image(script: str, image: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_TRACE", "OFFLOAD_DISABLE_VALIDATION")}
    result = subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(script), str(image)],
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def test_calls_racing_the_last_shutdown_leave_no_thread_memory_or_program_behind(build, tmp_path) -> None:
    image = tmp_path / "basic.so"
    image.write_bytes(build("basic"))
    script = RACE_PRELUDE + """
    import gc
    baseline = threading.active_count()
    refused = 0
    for round_ in range(40):
        api.olInit()
        host = host_device()
        stop = threading.Event()
        made = []

        def creator(index):
            global refused
            while not stop.is_set():
                try:
                    if index == 0:
                        made.append(api.olCreateQueue(host))
                    elif index == 1:
                        made.append(api.olMemAlloc(host, AllocType.HOST, 4096))
                    else:
                        made.append(api.olCreateProgram(host, IMAGE))
                except offloadrt.OffloadError as exc:
                    # UNINITIALIZED once the runtime is gone; a shut-down device or handle otherwise
                    assert exc.code in (offloadrt.ErrorCode.UNINITIALIZED, offloadrt.ErrorCode.INVALID_DEVICE), exc
                    refused += 1
                    return

        threads = [threading.Thread(target=creator, args=(i,)) for i in range(3)]
        for t in threads: t.start()
        while len(made) < 6:
            pass
        api.olShutDown()
        stop.set()
        for t in threads: t.join()
    gc.collect()
    assert threading.active_count() == baseline, [t.name for t in threading.enumerate()]
    from offloadrt.plugins.host import loader as host_loader
    assert not host_loader._OPEN_FDS, f"{len(host_loader._OPEN_FDS)} programs were left loaded"
    print("refused", refused)
    """
    result = subprocess_with_image(script, image)
    assert "refused" in result.stdout


def test_a_launch_queued_before_the_destroy_still_runs(host, queue, basic) -> None:
    counter, view = alloc_u32(host)
    with Gate(queue):
        increment(queue, host, basic, counter)
        api.olDestroyProgram(basic)
    api.olSyncQueue(queue)
    assert view[0] == 1
    api.olMemFree(counter)


def test_parked_thread_count_is_bounded_after_free_markers(host) -> None:
    """Deferred frees ride on existing queues: they start no thread of their own."""
    queue = api.olCreateQueue(host)
    before = threading.active_count()
    with Gate(queue):
        for _ in range(50):
            api.olMemFree(api.olMemAlloc(host, AllocType.HOST, 128))
        assert threading.active_count() == before
    api.olSyncQueue(queue)
    api.olDestroyQueue(queue)


def test_freeing_memory_drops_the_registrations_made_inside_it(host) -> None:
    base = api.olMemAlloc(host, AllocType.HOST, 8192)
    assert api.olMemRegister(host, base + 4096, 1024) == base + 4096
    api.olMemFree(base)
    # the range is no longer registered: unregistering it is an error, registering anew is fine
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, host, base + 4096)
    buffer = ctypes.create_string_buffer(8192)
    address = ctypes.addressof(buffer)
    assert api.olMemRegister(host, address, 8192) == address
    api.olMemUnregister(host, address)


def test_enum_arguments_must_be_integers(host) -> None:
    expect_error(ErrorCode.INVALID_ENUMERATION, api.olMemAlloc, host, 1.0, 64)
    expect_error(ErrorCode.INVALID_ENUMERATION, api.olGetDeviceInfo, host, 2.0)
    api.olMemFree(api.olMemAlloc(host, True, 64))  # a bool is an int (DEVICE), as in C


def test_unregister_takes_the_address_register_returned(host) -> None:
    buffer = ctypes.create_string_buffer(4096)
    address = ctypes.addressof(buffer)
    pinned = api.olMemRegister(host, address, 4096)
    api.olMemUnregister(host, pinned)  # LLVM's tests unregister with the returned pointer
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, host, pinned)


def test_the_registration_map_finds_a_range_by_its_device_address_too() -> None:
    from offloadrt.plugins.common.registrations import RegistrationMap

    registrations = RegistrationMap()
    unlocked: list[int] = []
    device_address = registrations.register(0x10000, 4096, lambda ptr, size: 0x900000)
    assert device_address == 0x900000
    assert registrations.register(0x10100, 16, lambda ptr, size: 0) == 0x900100  # a user inside it
    registrations.unregister(0x900100, unlocked.append)  # by device address, as LLVM's tests do
    registrations.unregister(0x10000, unlocked.append)  # by host address
    assert unlocked == [0x10000]
    with pytest.raises(offloadrt.OffloadError):
        registrations.unregister(0x900000, unlocked.append)
