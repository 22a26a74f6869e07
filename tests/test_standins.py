"""Pins down what both driver stand-ins simulate alike, once per stand-in (CUDA and HIP).

The stand-ins share their engine (tests/standin_common); these tests fix, through each driver's
own calls and statuses, the behaviour the GPU plugins rely on: stream order and NOT_READY while
work is pending, host functions on a stream thread that block nothing else and may not call the
driver, the legacy (null) stream, destroyed streams, events and their timestamps, waits across
devices, asynchronous and sticky kernel faults, fault injection and the record of calls. What
only one driver has is pinned in tests/test_cuda_standin.py and tests/test_hip_standin.py.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from standin_common.controls import KernelFault
from standin_fixtures import DRIVERS, WAIT, Gate, HostFn, StandinDriver, code, ok


@pytest.fixture(params=DRIVERS, ids=[driver.name for driver in DRIVERS])
def drv(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandinDriver]:
    """Each stand-in, installed with two default GPUs and device 0 current; shut down afterwards."""
    driver: StandinDriver = request.param
    driver.start(monkeypatch)
    yield driver
    driver.standin.shutdown()


# ---- streams and host functions ------------------------------------------------------------------

def test_stream_runs_in_order_and_is_not_ready_while_work_is_pending(drv: StandinDriver) -> None:
    stream = drv.stream()
    ok(drv.query(stream))
    pointer = ok(drv.alloc(8))
    order: list[str] = []
    drv.standin.register_kernel("foo", lambda params, *_: order.append(f"kernel {params.hex()}"))
    function = drv.kernel("foo")
    gate = Gate()
    gate.launch(drv.m, stream)
    assert gate.entered.wait(WAIT)
    ok(drv.copy_in(pointer, b"12345678", stream))  # queued behind the gate
    for i in range(3):
        HostFn(functools.partial(lambda index, _data: order.append(f"host {index}"), i)).launch(drv.m, stream)
        ok(drv.launch(function, stream, bytes([i])))
    assert code(drv.query(stream)) == drv.status("NOT_READY")
    assert drv.standin.read(int(pointer), 8) == bytes(8) and order == []
    gate.opened.set()
    ok(drv.sync(stream))
    ok(drv.query(stream))
    assert drv.standin.read(int(pointer), 8) == b"12345678"
    assert order == ["host 0", "kernel 00", "host 1", "kernel 01", "host 2", "kernel 02"]


def test_host_functions_run_on_a_stream_thread_and_block_nothing_else(drv: StandinDriver) -> None:
    held, other = drv.stream(), drv.stream()
    gate = Gate()
    received: list[int | None] = []
    recorder = HostFn(received.append)
    gate.launch(drv.m, held)
    recorder.launch(drv.m, held, 0xBEEF)
    assert gate.entered.wait(WAIT)
    assert gate.threads[0] != threading.get_ident()
    # While the host function blocks: the API works and another stream makes progress.
    side = HostFn()
    side.launch(drv.m, other)
    ok(drv.sync(other))
    assert len(side.threads) == 1 and side.threads[0] != gate.threads[0]
    # A sync from another thread waits for the host function without deadlocking with it.
    synced = threading.Event()

    def sync_held() -> None:
        drv.enter_thread()
        ok(drv.sync(held))
        synced.set()

    waiter = threading.Thread(target=sync_held)
    waiter.start()
    assert not synced.wait(0.05) and received == []
    gate.opened.set()
    waiter.join(WAIT)
    assert synced.is_set() and received == [0xBEEF]
    assert recorder.threads == gate.threads  # one thread per stream


def test_host_functions_may_not_call_the_driver(drv: StandinDriver) -> None:
    stream = drv.stream()
    results: list[str] = []
    HostFn(lambda _: results.append(code(drv.query(stream)))).launch(drv.m, stream)
    ok(drv.sync(stream))
    assert results == [drv.status("CALLED_FROM_HOST_FUNCTION")] and "host function" in drv.standin.diagnostics[-1]


def test_null_stream_runs_work_in_the_caller_after_blocking_streams(drv: StandinDriver) -> None:
    blocking, nonblocking = drv.stream(nonblocking=False), drv.stream()
    order: list[str] = []
    gate = Gate()
    gate.launch(drv.m, nonblocking)  # the null stream does not wait for a non-blocking stream
    HostFn(lambda _: order.append("blocking")).launch(drv.m, blocking)
    host = HostFn(lambda _: order.append("null"))
    host.launch(drv.m, None)
    assert host.threads == [threading.get_ident()] and order == ["blocking", "null"]
    pointer = ok(drv.alloc(4))
    ok(drv.fill32(pointer, 0x11223344, 1, 0))  # done when the call returns
    assert drv.standin.read(int(pointer), 4) == b"\x44\x33\x22\x11"
    ok(drv.sync(None))
    ok(drv.query(0))
    gate.opened.set()
    ok(drv.sync(nonblocking))


def test_destroyed_streams_finish_their_work(drv: StandinDriver) -> None:
    stream = drv.stream()
    gate, after = Gate(), HostFn()
    gate.launch(drv.m, stream)
    after.launch(drv.m, stream)
    ok(drv.destroy(stream))  # returns at once; the work still runs
    assert code(drv.query(stream)) == drv.status("DESTROYED_STREAM")
    assert code(drv.destroy(None)) == drv.status("INVALID_HANDLE")  # the null stream cannot be destroyed
    assert gate.entered.wait(WAIT) and after.threads == []
    gate.opened.set()
    drv.drain_device()  # waits for the destroyed stream's work too
    assert len(after.threads) == 1


def test_shutdown_stops_every_stream_thread(drv: StandinDriver) -> None:
    for _ in range(3):
        HostFn().launch(drv.m, drv.stream())
    drv.standin.shutdown()
    assert [t.name for t in threading.enumerate() if t.name.startswith(drv.stream_thread)] == []


# ---- events ----------------------------------------------------------------------------------------

def test_events_query_sync_and_time(drv: StandinDriver) -> None:
    stream = drv.stream()
    start, end, untimed = drv.event(), drv.event(), drv.event(timed=False)
    ok(drv.event_query(start))  # never recorded: no work captured, complete
    ok(drv.event_sync(start))
    assert code(drv.elapsed(start, end)) == drv.status("INVALID_HANDLE")
    gate = Gate()
    gate.launch(drv.m, stream)
    ok(drv.record(start, stream))
    HostFn(lambda _: time.sleep(0.02)).launch(drv.m, stream)  # a measurable gap, not a wait for work
    ok(drv.record(end, stream))
    ok(drv.record(untimed, stream))
    assert gate.entered.wait(WAIT)
    assert code(drv.event_query(end)) == drv.status("NOT_READY")
    assert code(drv.elapsed(start, end)) == drv.status("NOT_READY")
    gate.opened.set()
    ok(drv.event_sync(end))
    ok(drv.event_query(end))
    elapsed = ok(drv.elapsed(start, end))
    assert isinstance(elapsed, float) and 15.0 <= elapsed < 5000.0
    assert code(drv.elapsed(start, untimed)) == drv.status("INVALID_HANDLE")
    drv.select(1)
    other_stream = drv.stream()
    assert code(drv.record(start, other_stream)) == drv.status("INVALID_HANDLE")  # another device's stream
    drv.select(0)
    assert code(drv.create_event(drv.invalid_event_flags)) == drv.status("INVALID_VALUE")
    ok(drv.event_destroy(untimed))
    assert code(drv.event_query(untimed)) == drv.status("INVALID_HANDLE")


def test_back_to_back_records_share_a_timestamp(drv: StandinDriver) -> None:
    """A record does no work: the stream reaches it when the work before it completed, so two
    records with nothing between them read the same time, whatever the stream thread's delays
    or the host's load between the two calls."""
    stream = drv.stream()
    first, second, third = drv.event(), drv.event(), drv.event()
    gate = Gate()
    gate.launch(drv.m, stream)
    ok(drv.record(first, stream))
    ok(drv.record(second, stream))
    gate.opened.set()
    ok(drv.event_sync(second))
    assert ok(drv.elapsed(first, second)) == 0.0
    time.sleep(0.01)  # the stream is idle: a later record with no work between still reads the same time
    ok(drv.record(third, stream))
    ok(drv.event_sync(third))
    assert ok(drv.elapsed(first, third)) == 0.0
    HostFn(lambda _: time.sleep(0.01)).launch(drv.m, stream)  # work between: time passes
    ok(drv.record(third, stream))
    ok(drv.event_sync(third))
    assert ok(drv.elapsed(first, third)) >= 5.0


def test_streams_wait_for_events_across_streams_and_devices(drv: StandinDriver) -> None:
    producer = drv.stream()
    event, never_recorded = drv.event(), drv.event()
    drv.select(1)
    consumer = drv.stream()
    order: list[str] = []
    gate = Gate()
    ok(drv.wait(consumer, never_recorded))  # stands for no work
    gate.launch(drv.m, producer)
    HostFn(lambda _: order.append("producer")).launch(drv.m, producer)
    ok(drv.record(event, producer))  # device 0's stream and event, device 1 current
    ok(drv.wait(consumer, event))
    HostFn(lambda _: order.append("consumer")).launch(drv.m, consumer)
    ok(drv.record(event, producer))  # a later record does not change what consumer waits for
    assert code(drv.query(consumer)) == drv.status("NOT_READY")
    gate.opened.set()
    ok(drv.sync(consumer))
    assert order == ["producer", "consumer"]
    assert code(drv.wait(consumer, event, flags=1)) == drv.status("INVALID_VALUE")


# ---- kernels, faults, injection --------------------------------------------------------------------

def test_kernel_faults_are_asynchronous_and_sticky(drv: StandinDriver) -> None:
    drv.select(1)
    other_stream = drv.stream()
    drv.select(0)
    function = drv.kernel("foo")

    def illegal_address(*_: Any) -> None:
        raise KernelFault(drv.member("ILLEGAL_ADDRESS"), "load from 0x0")

    drv.standin.register_kernel("foo", illegal_address)
    faulting, bystander = drv.stream(), drv.stream()
    event = drv.event()
    gate, skipped = Gate(), HostFn()
    gate.launch(drv.m, faulting)
    ok(drv.launch(function, faulting))  # the launch itself succeeds
    skipped.launch(drv.m, faulting)
    gate.opened.set()
    assert code(drv.sync(faulting)) == drv.status("ILLEGAL_ADDRESS")
    assert skipped.threads == []  # nothing runs on the device after the fault
    for result in (drv.query(bystander), drv.sync(bystander), drv.alloc(8), drv.sync(None), drv.sync(faulting),
                   *drv.calls_on_a_poisoned_device(event)):
        assert code(result) == drv.status("ILLEGAL_ADDRESS")
    drv.select(1)
    ok(drv.sync(other_stream))  # the other device is unaffected
    ok(drv.alloc(8))
    drv.after_sticky_fault()


def test_a_sticky_fault_lasts_until_a_fresh_driver(drv: StandinDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the process recovers a poisoned device (drv.after_sticky_fault: release,
    retain, reset, device reset); only a new simulated driver, a new process, starts clean."""
    drv.select(0)
    drv.standin.poison(0, drv.member("LAUNCH_FAILED"))
    drv.after_sticky_fault()
    drv.make_current(0)
    assert code(drv.alloc(8)) == drv.status("LAUNCH_FAILED")
    drv.standin.shutdown()
    drv.start(monkeypatch)  # reset(): a fresh driver
    ok(drv.alloc(8))


def test_launch_buffer_sizes_follow_the_driver(drv: StandinDriver) -> None:
    """saxpy(float, const float*, float*, int): parameters at 0, 8, 16, 24, ending at byte 28.
    CUDA (the H100): 28 bytes launch, 32 (rounded up to the struct's alignment) fail at the call
    with nothing enqueued and nothing poisoned; HIP ignores the size. A size short of the
    parameters launches on both, and the kernel reads garbage past the end of the buffer."""
    seen: list[bytes] = []
    drv.standin.register_kernel("saxpy", lambda params, *_: seen.append(params))
    function = drv.kernel("saxpy", (4, 8, 8, 4))
    stream = drv.stream()
    blob = bytes(range(1, 33))
    ok(drv.launch(function, stream, blob[:28]))
    oversized = drv.launch(function, stream, blob)
    if drv.oversized_buffer_status is None:
        ok(oversized)
    else:
        assert code(oversized) == drv.oversized_buffer_status
        assert "28" in drv.standin.diagnostics[-1]
    ok(drv.launch(function, stream, blob[:24]))
    ok(drv.sync(stream))
    ok(drv.alloc(8))  # a refused launch poisons nothing

    def parameters(params: bytes) -> list[bytes]:  # what the kernel reads (not the padding at 4..7)
        assert len(params) == 28
        return [params[0:4], params[8:16], params[16:24], params[24:28]]

    passed, short = parameters(blob[:28]), parameters(blob[:24] + drv.standin.GARBAGE)
    expected = [passed, passed, short] if drv.oversized_buffer_status is None else [passed, short]
    assert [parameters(params) for params in seen] == expected
    assert drv.standin.GARBAGE == bytes.fromhex("deadbeef")


def test_non_sticky_faults_are_reported_once_and_poison_acts_at_once(drv: StandinDriver) -> None:
    function = drv.kernel("foo")
    stream = drv.stream()

    def fault(*_: Any) -> None:
        raise KernelFault(drv.member("LAUNCH_OUT_OF_RESOURCES"))

    drv.standin.register_kernel("foo", fault)
    ok(drv.launch(function, stream))
    assert code(drv.sync(stream)) == drv.status("LAUNCH_OUT_OF_RESOURCES")
    ok(drv.sync(stream))
    ok(drv.alloc(8))
    drv.standin.register_kernel("foo", lambda *_: 1 / 0)  # a broken body is a launch failure (sticky)
    ok(drv.launch(function, stream))
    assert code(drv.sync(stream)) == drv.status("LAUNCH_FAILED")
    assert "ZeroDivisionError" in drv.standin.diagnostics[-1]
    drv.select(1)
    drv.standin.poison(1, drv.member("ASSERT"))
    assert code(getattr(drv.m, drv.functions["stream_create"])(0)) == drv.status("ASSERT")
    assert drv.standin.STICKY == drv.sticky


def test_injected_failures_do_nothing_and_calls_are_recorded(drv: StandinDriver) -> None:
    alloc, create, query = (drv.functions[role] for role in ("alloc", "stream_create", "stream_query"))
    drv.standin.inject(alloc, drv.member("OUT_OF_MEMORY"))
    assert drv.alloc(64) == (drv.member("OUT_OF_MEMORY"), None)
    assert drv.standin.state().devices[0].used == 0
    ok(drv.alloc(64))
    drv.standin.inject(create, drv.member("UNKNOWN"), times=2, skip=1)
    results = [code(getattr(drv.m, create)(0)) for _ in range(4)]
    success, unknown = drv.status("SUCCESS"), drv.status("UNKNOWN")
    assert results == [success, unknown, unknown, success]
    drv.standin.inject(query, drv.member("NOT_READY"), times=None)
    assert {code(drv.query(None)) for _ in range(3)} == {drv.status("NOT_READY")}
    assert (alloc, (64,)) in drv.standin.calls
    assert [name for name, _ in drv.standin.calls].count(create) == 4
    with pytest.raises(ValueError, match="NoSuchCall"):
        drv.standin.inject(f"{alloc}NoSuchCall", 1)
    if drv.checks_injected_codes:
        with pytest.raises(ValueError):
            drv.standin.inject(alloc, 12345)  # no status of the driver: the bindings could not return it


# ---- untimed events and what work costs ------------------------------------------------------------

def test_untimed_events_do_everything_but_time(drv: StandinDriver) -> None:
    stream, other = drv.stream(), drv.stream()
    untimed, also_untimed, timed = drv.event(timed=False), drv.event(timed=False), drv.event()
    gate, after = Gate(), HostFn()
    gate.launch(drv.m, stream)
    ok(drv.record(untimed, stream))
    ok(drv.record(timed, stream))
    ok(drv.wait(other, untimed))
    after.launch(drv.m, other)
    assert code(drv.event_query(untimed)) == drv.status("NOT_READY")
    assert gate.entered.wait(WAIT) and after.threads == []  # the wait holds the other stream
    gate.opened.set()
    ok(drv.event_sync(untimed))
    ok(drv.event_query(untimed))
    ok(drv.sync(other))
    assert len(after.threads) == 1
    ok(drv.record(also_untimed, stream))
    ok(drv.event_sync(also_untimed))
    for start, end in ((untimed, also_untimed), (timed, untimed), (untimed, timed)):
        assert code(drv.elapsed(start, end)) == drv.status("INVALID_HANDLE")  # recorded and complete, untimed
    assert ok(drv.elapsed(timed, timed)) == 0.0


def test_costs_count_host_functions_events_and_launches_at_the_h100_prices(
        drv: StandinDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    costs = drv.standin.costs
    assert costs() == drv.standin.Costs()  # a fresh driver has done nothing
    stream = drv.stream()
    function = drv.kernel("foo")
    ok(drv.alloc(64))
    ok(drv.sync(stream))
    assert costs().driver_time_us == 0.0  # streams, memory, modules and syncs are not counted
    HostFn().launch(drv.m, stream)
    HostFn().launch(drv.m, stream)
    drv.event()
    drv.event(timed=False)
    drv.event(timed=False)
    ok(drv.launch(function, stream, b"\x01"))
    ok(drv.sync(stream))
    spent = costs()
    assert (spent.host_functions, spent.timed_events, spent.untimed_events, spent.launches) == (2, 1, 2, 1)
    assert spent.driver_time_us == pytest.approx(2 * 50.0 + 7.2 + 2 * 1.8 + 3.6)
    drv.standin.shutdown()
    drv.start(monkeypatch)  # the counters reset with the driver
    assert costs() == drv.standin.Costs()


# ---- when asynchronous copies return ----------------------------------------------------------------

def _in_thread(drv: StandinDriver, call: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``call()`` on a new thread with device 0 current; (the thread, [its result] once done)."""
    result: list[Any] = []

    def run() -> None:
        drv.enter_thread()
        result.append(call())

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def test_copies_with_pageable_memory_stage_the_source_and_wait_to_write_the_destination(drv: StandinDriver) -> None:
    stream = drv.stream()
    pointer = ok(drv.alloc(16))
    gate = Gate()
    gate.launch(drv.m, stream)
    source = bytearray(b"pageable source!")
    ok(drv.copy_in(pointer, source, stream))  # returns at once behind the gate
    source[:] = bytes(16)  # the driver staged it: reusing the source changes nothing
    assert drv.standin.read(int(pointer), 16) == bytes(16)  # the device write stays in stream order
    target = ctypes.create_string_buffer(16)
    thread, result = _in_thread(drv, lambda: drv.copy_out(ctypes.addressof(target), pointer, 16, stream))
    thread.join(0.2)
    assert thread.is_alive() and result == []  # into pageable memory: the call waits for the stream
    gate.opened.set()
    thread.join(WAIT)
    ok(result[0])
    assert target.raw == b"pageable source!"  # written when the call returned


def test_copies_with_page_locked_memory_return_at_once_and_run_in_stream_order(drv: StandinDriver) -> None:
    stream = drv.stream()
    pointer = ok(drv.alloc(8))
    pinned = drv.host_alloc(16)
    ctypes.memmove(pinned, b"pinned!!", 8)
    gate = Gate()
    gate.launch(drv.m, stream)
    ok(drv.copy_in(pointer, pinned, stream, 8))
    ctypes.memmove(pinned, b"changed!", 8)  # read later, in stream order: the copy sees this
    ok(drv.copy_out(pinned + 8, pointer, 8, stream))  # returns at once
    assert ctypes.string_at(pinned + 8, 8) == bytes(8)
    gate.opened.set()
    ok(drv.sync(stream))
    assert ctypes.string_at(pinned, 16) == b"changed!changed!"


def test_a_copy_into_pageable_memory_behind_a_host_function_that_waits_for_the_caller_fails(
        drv: StandinDriver) -> None:
    """On a GPU this deadlocks (the H100: the conformance suite's fill cases timed out); the
    stand-in gives up after ``blocking_call_timeout`` seconds, fails the call and drops the copy."""
    drv.standin.state().blocking_call_timeout = 0.2
    stream = drv.stream()
    pointer = ok(drv.alloc(8))
    ok(drv.fill32(pointer, 0x01020304, 2, stream))
    gate = Gate()
    gate.launch(drv.m, stream)
    target = ctypes.create_string_buffer(8)
    assert code(drv.copy_out(ctypes.addressof(target), pointer, 8, stream)) == drv.status("UNKNOWN")
    assert "pageable" in drv.standin.diagnostics[-1] and "host function" in drv.standin.diagnostics[-1]
    gate.opened.set()
    ok(drv.sync(stream))
    assert target.raw == bytes(8)  # the dropped copy never writes into the caller's memory


def test_large_pageable_copies_to_the_device(drv: StandinDriver) -> None:
    """CUDA staged every pageable source the H100 was given; HIP stages up to ROCclr's staging
    size and waits for the stream beyond it (clr hip_memory.cpp ihipMemcpy)."""
    limit = drv.staged_copy_limit
    size = (limit or 1 << 20) + 4096
    stream = drv.stream()
    pointer = ok(drv.alloc(size))
    gate = Gate()
    gate.launch(drv.m, stream)
    source = bytearray(b"\x5a" * size)
    thread, result = _in_thread(drv, lambda: drv.copy_in(pointer, source, stream))
    thread.join(0.2)
    assert thread.is_alive() == (limit is not None)
    gate.opened.set()
    thread.join(WAIT)
    ok(result[0])
    ok(drv.sync(stream))
    assert drv.standin.read(int(pointer), size) == bytes(source)
