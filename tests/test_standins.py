"""Pins down what both driver stand-ins simulate alike, once per stand-in (CUDA and HIP).

The stand-ins share their engine (tests/standin_common); these tests fix, through each driver's
own calls and statuses, the behaviour the GPU plugins rely on: stream order and NOT_READY while
work is pending, host functions on a stream thread that block nothing else and may not call the
driver, the legacy (null) stream, destroyed streams, events and their timestamps, waits across
devices, asynchronous and sticky kernel faults, fault injection and the record of calls. What
only one driver has is pinned in tests/test_cuda_standin.py and tests/test_hip_standin.py.
"""

from __future__ import annotations

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
    drv.standin.poison(1, drv.member("ASSERT"))
    drv.select(1)
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
