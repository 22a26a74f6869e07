"""Asynchronous errors: a kernel fault or a raising host function puts its queue in the error
state; the error is reported promptly, spreads through olWaitEvents naming the queue that failed
first, is never cleared, and never leaks into a recycled backend queue."""

from __future__ import annotations

import struct
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import SAFETY, TIMEOUT, Gate, alloc_u32, call_with_timeout, expect_error, increment, kernel, launch_args

from offloadrt import ErrorCode, EventFlags, EventInfo, OffloadError, OffloadWarning, QueueInfo, SymbolKind, api

FAULT = 4242  # what fail_with returns: it must show up in the error


def expect_queue_error(fn: Callable[..., Any], *args: Any) -> OffloadError:
    """``fn(*args)`` (guarded by a timeout) must raise QUEUE_ERROR."""
    return expect_error(ErrorCode.QUEUE_ERROR, call_with_timeout, fn, *args)


def fault(queue: api.Queue, device: api.Device, program: api.Program, groups: int = 1) -> None:
    api.olLaunchKernel(queue, device, kernel(program, "fail_with"), struct.pack("<i", FAULT), launch_args(groups))


def raise_value_error(_: object) -> None:
    raise ValueError("boom-31337")


@pytest.fixture
def never(runtime: None) -> Iterator[threading.Event]:
    """An event the test never sets: a host function waiting on it would block its queue for good
    (it is set at teardown so a runtime that ran it anyway can still shut down)."""
    event = threading.Event()
    yield event
    event.set()


def block_forever(never: threading.Event) -> Callable[[object], None]:
    def wait(_: object) -> None:
        never.wait(SAFETY)

    return wait


def assert_kernel_fault(error: OffloadError | None) -> None:
    assert isinstance(error, OffloadError)
    assert str(FAULT) in error.details, f"the error must carry the kernel's return value: {error!r}"
    assert "fail_with" in error.details, f"the error must name the kernel: {error!r}"


# ---- the failing queue ---------------------------------------------------------------------------

@pytest.mark.parametrize("groups", [1, 4], ids=["one-group", "four-groups"])
def test_kernel_fault_fails_the_queue_and_skips_later_work(host, queue, basic, gate, never, groups):
    counter, view = alloc_u32(host)
    ran = threading.Event()
    g = gate(queue)
    fault(queue, host, basic, groups)
    increment(queue, host, basic, counter)
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    after = api.olCreateEvent(queue)
    api.olLaunchHostFunction(queue, block_forever(never))
    assert api.olGetQueueError(queue) == (None, None)
    g.open()
    err = expect_queue_error(api.olSyncQueue, queue)
    assert str(FAULT) in str(err), "QUEUE_ERROR should say what failed"
    expect_queue_error(api.olSyncEvent, after)  # the event behind the fault is never reached
    assert view[0] == 0, "a kernel after the fault ran"
    assert not ran.is_set(), "a host function after the fault ran"
    error, origin = api.olGetQueueError(queue)
    assert_kernel_fault(error)
    assert origin is queue


def test_raising_host_function_fails_the_queue(host, queue, basic, gate, never):
    counter, view = alloc_u32(host)
    g = gate(queue)
    api.olLaunchHostFunction(queue, raise_value_error)
    increment(queue, host, basic, counter)
    after = api.olCreateEvent(queue)
    api.olLaunchHostFunction(queue, block_forever(never))
    g.open()
    err = expect_queue_error(api.olSyncQueue, queue)
    assert "boom-31337" in str(err), "QUEUE_ERROR should say what failed"
    expect_queue_error(api.olSyncEvent, after)
    assert view[0] == 0, "a kernel after the raising host function ran"
    error, origin = api.olGetQueueError(queue)
    assert isinstance(error, OffloadError)
    assert "ValueError" in error.details and "boom-31337" in error.details, error
    assert origin is queue


def test_sync_already_waiting_returns_promptly_on_failure(host, queue, basic, gate, never):
    """A sync that is already waiting when the fault happens returns with QUEUE_ERROR at once,
    though the work behind the fault would block forever."""
    g = gate(queue)
    fault(queue, host, basic)
    api.olLaunchHostFunction(queue, block_forever(never))
    event = api.olCreateEvent(queue)
    outcomes: dict[str, BaseException | None] = {}

    def sync(name: str, fn: Callable[[Any], None], handle: Any) -> None:
        try:
            fn(handle)
            outcomes[name] = None
        except BaseException as exc:  # noqa: BLE001  # checked by the test's thread
            outcomes[name] = exc

    threads = [threading.Thread(target=sync, args=("queue", api.olSyncQueue, queue), daemon=True),
               threading.Thread(target=sync, args=("event", api.olSyncEvent, event), daemon=True)]
    for t in threads:
        t.start()
    assert g.entered.wait(TIMEOUT)
    g.open()
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive(), "a sync did not return after the queue failed"
    for name in ("queue", "event"):
        exc = outcomes[name]
        assert isinstance(exc, OffloadError) and exc.code == ErrorCode.QUEUE_ERROR, (name, exc)


def test_query_queue_on_a_failed_queue_raises(host, queue, basic):
    fault(queue, host, basic)
    expect_queue_error(api.olSyncQueue, queue)
    expect_queue_error(api.olQueryQueue, queue)


def test_error_is_never_cleared(host, queue, basic):
    fault(queue, host, basic)
    for _ in range(3):
        expect_queue_error(api.olSyncQueue, queue)
        expect_queue_error(api.olQueryQueue, queue)
    first, origin = api.olGetQueueError(queue)
    again, origin_again = api.olGetQueueError(queue)
    assert_kernel_fault(first)
    assert again is first and origin is origin_again is queue
    expect_queue_error(api.olSyncQueue, queue)


def test_work_enqueued_on_a_failed_queue_is_refused(host, queue, basic):
    counter, view = alloc_u32(host)
    other = api.olCreateQueue(host)
    other_event = api.olCreateEvent(other)
    fault(queue, host, basic)
    expect_queue_error(api.olSyncQueue, queue)
    expect_queue_error(increment, queue, host, basic, counter)
    expect_queue_error(api.olLaunchHostFunction, queue, lambda _: None)
    expect_queue_error(api.olCreateEvent, queue)
    expect_queue_error(api.olMemcpy, queue, counter, host, counter, host, 4)
    expect_queue_error(api.olMemFill, queue, counter, b"\x07", 4)
    expect_queue_error(api.olWaitEvents, queue, [other_event])
    assert view[0] == 0
    expect_queue_error(api.olSyncQueue, queue)
    api.olDestroyQueue(other)


def test_healthy_queues_are_unaffected(host, basic, gate):
    counter, view = alloc_u32(host)
    bad = api.olCreateQueue(host)
    good = api.olCreateQueue(host)
    g = gate(bad)
    fault(bad, host, basic)
    increment(good, host, basic, counter)
    before = api.olCreateEvent(good, EventFlags.ENABLE_PROFILING)
    g.open()
    expect_queue_error(api.olSyncQueue, bad)
    for _ in range(3):
        increment(good, host, basic, counter)
    after = api.olCreateEvent(good, EventFlags.ENABLE_PROFILING)
    call_with_timeout(api.olSyncQueue, good)
    assert view[0] == 4
    assert api.olQueryQueue(good) is True
    assert api.olGetQueueError(good) == (None, None)
    call_with_timeout(api.olSyncEvent, before)
    call_with_timeout(api.olSyncEvent, after)
    assert api.olGetEventElapsedTime(before, after) >= 0.0
    api.olDestroyQueue(bad)
    api.olDestroyQueue(good)


# ---- spreading through olWaitEvents --------------------------------------------------------------

def test_waiting_queue_fails_and_names_the_first_queue(host, basic, gate, never):
    counter, view = alloc_u32(host)
    first = api.olCreateQueue(host)
    waiter = api.olCreateQueue(host)
    g = gate(first)
    fault(first, host, basic)
    failed_event = api.olCreateEvent(first)
    api.olWaitEvents(waiter, [failed_event])
    increment(waiter, host, basic, counter)
    waiter_event = api.olCreateEvent(waiter)
    api.olLaunchHostFunction(waiter, block_forever(never))
    g.open()
    expect_queue_error(api.olSyncQueue, waiter)
    expect_queue_error(api.olSyncEvent, waiter_event)
    assert view[0] == 0, "work after a wait on a failed queue ran"
    error, origin = api.olGetQueueError(waiter)
    assert_kernel_fault(error)
    assert origin is first
    first_error, first_origin = api.olGetQueueError(first)
    assert first_error is error and first_origin is first
    expect_queue_error(api.olQueryQueue, waiter)
    api.olDestroyQueue(first)
    api.olDestroyQueue(waiter)


def test_chain_of_three_queues_names_the_first(host, basic, gate, never):
    counters, view = alloc_u32(host, 3)
    a, b, c = (api.olCreateQueue(host) for _ in range(3))
    healthy = api.olCreateQueue(host)
    g = gate(a)
    api.olLaunchHostFunction(a, raise_value_error)
    increment(a, host, basic, counters)
    event_a = api.olCreateEvent(a)
    api.olWaitEvents(b, [event_a])
    increment(b, host, basic, counters + 4)
    event_b = api.olCreateEvent(b)
    api.olWaitEvents(c, [event_b])
    increment(c, host, basic, counters + 8)
    event_c = api.olCreateEvent(c)
    api.olLaunchHostFunction(c, block_forever(never))
    increment(healthy, host, basic, counters)
    call_with_timeout(api.olSyncQueue, healthy)
    g.open()
    for q, e in ((c, event_c), (b, event_b), (a, event_a)):
        expect_queue_error(api.olSyncEvent, e)
        expect_queue_error(api.olSyncQueue, q)
    assert list(view) == [1, 0, 0], "only the healthy queue's increment may run"
    errors = [api.olGetQueueError(q) for q in (a, b, c)]
    for error, origin in errors:
        assert origin is a
        assert isinstance(error, OffloadError) and "boom-31337" in error.details
    assert errors[1][0] is errors[0][0] and errors[2][0] is errors[0][0]
    assert api.olGetQueueError(healthy) == (None, None)
    for q in (a, b, c, healthy):
        api.olDestroyQueue(q)


def failed_event(host: api.Device, basic: api.Program, gate: Callable[..., Gate]) -> tuple[api.Queue, api.Event]:
    """A queue that failed with a kernel fault, and an event it never reached."""
    first = api.olCreateQueue(host)
    g = gate(first)
    fault(first, host, basic)
    event = api.olCreateEvent(first)
    g.open()
    expect_queue_error(api.olSyncEvent, event)
    return first, event


def test_waiting_on_an_already_failed_event_fails_the_queue(host, basic, gate):
    first, event = failed_event(host, basic, gate)
    waiter = api.olCreateQueue(host)
    api.olWaitEvents(waiter, [event])
    expect_queue_error(api.olQueryQueue, waiter)
    expect_queue_error(api.olSyncQueue, waiter)
    error, origin = api.olGetQueueError(waiter)
    assert_kernel_fault(error)
    assert origin is first
    api.olDestroyQueue(first)
    api.olDestroyQueue(waiter)


def test_work_before_a_wait_on_a_failed_event_still_runs(host, basic, gate):
    """The waiting queue fails at the wait, in queue order: what it was given before the wait
    does not depend on the failed work and still runs."""
    first, event = failed_event(host, basic, gate)
    counter, view = alloc_u32(host)
    waiter = api.olCreateQueue(host)
    g = gate(waiter)
    increment(waiter, host, basic, counter)
    before_wait = api.olCreateEvent(waiter)
    api.olWaitEvents(waiter, [event])
    try:
        increment(waiter, host, basic, counter)
    except OffloadError as exc:  # refusing it is fine too: the queue fails at the wait
        assert exc.code == ErrorCode.QUEUE_ERROR, exc
    g.open()
    call_with_timeout(api.olSyncEvent, before_wait)
    assert view[0] == 1, "work enqueued before the wait was dropped"
    expect_queue_error(api.olSyncQueue, waiter)
    assert view[0] == 1, "work after the wait on a failed event ran"
    assert api.olGetQueueError(waiter)[1] is first
    api.olDestroyQueue(first)
    api.olDestroyQueue(waiter)


# ---- destroying a failed queue ---------------------------------------------------------------------

def _check_fresh_queue(host: api.Device, basic: api.Program, failed_backends: list[Any]) -> None:
    counter, view = alloc_u32(host)
    fresh = api.olCreateQueue(host)
    assert fresh._ai not in failed_backends, "a failed backend queue was handed out again"
    assert api.olGetQueueError(fresh) == (None, None)
    increment(fresh, host, basic, counter)
    call_with_timeout(api.olSyncQueue, fresh)
    assert view[0] == 1
    assert api.olQueryQueue(fresh) is True
    assert api.olGetQueueError(fresh) == (None, None)
    api.olDestroyQueue(fresh)


def test_failed_idle_queue_is_destroyed_and_not_recycled(host, basic):
    pool = host._gdev.queue_pool
    q = api.olCreateQueue(host)
    backend = q._ai
    fault(q, host, basic)
    expect_queue_error(api.olSyncQueue, q)
    pooled, live = pool.pooled, pool.live
    with warnings.catch_warnings():
        warnings.simplefilter("error", OffloadWarning)  # the failure was seen: nothing to warn about
        call_with_timeout(api.olDestroyQueue, q)
    expect_error(ErrorCode.INVALID_QUEUE, api.olSyncQueue, q)
    assert pool.pooled == pooled, "a failed backend queue went back to the pool"
    assert pool.live == live - 1, "a failed backend queue must be destroyed"
    for _ in range(3):
        _check_fresh_queue(host, basic, [backend])


def test_failed_busy_queue_is_parked_and_not_recycled(host, basic, gate, never):
    q = api.olCreateQueue(host)
    backend = q._ai
    g = gate(q)
    fault(q, host, basic)
    api.olLaunchHostFunction(q, block_forever(never))
    event = api.olCreateEvent(q)  # the last item: once it is skipped, the queue has finished
    call_with_timeout(api.olDestroyQueue, q, timeout=2.0)
    assert backend in host.parked
    g.open()
    expect_queue_error(api.olSyncEvent, event)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OffloadWarning)  # nobody synced the destroyed queue
        for _ in range(3):
            _check_fresh_queue(host, basic, [backend])
    assert backend not in host.parked, "a finished failed parked queue should have been released"


def test_event_info_on_a_failed_queue(host, queue, basic, gate):
    g = gate(queue)
    fault(queue, host, basic)
    event = api.olCreateEvent(queue)
    g.open()
    expect_queue_error(api.olSyncEvent, event)
    assert api.olGetEventInfo(event, EventInfo.QUEUE) is queue
    assert isinstance(api.olGetEventInfo(event, EventInfo.IS_COMPLETE), bool)
    assert api.olGetQueueInfo(queue, QueueInfo.DEVICE) is host


def test_an_event_recorded_while_the_failing_work_finishes_fails_with_it(host, basic) -> None:
    """olCreateEvent racing the failure of the work before it: the event is behind the failure
    whether the queue still holds that work or has just let it go."""
    fail = api.olGetSymbol(basic, "fail_with", SymbolKind.KERNEL)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: the window shows within a few hundred tries
    try:
        record_events_racing_a_failure(host, fail)
    finally:
        sys.setswitchinterval(interval)


def record_events_racing_a_failure(host: api.Device, fail: api.Symbol) -> None:
    for _ in range(500):
        queue = api.olCreateQueue(host)
        api.olLaunchKernel(queue, host, fail, struct.pack("<i", 5), launch_args())
        try:
            event = api.olCreateEvent(queue)
        except OffloadError as exc:  # the failure was already seen: refused at once
            assert exc.code == ErrorCode.QUEUE_ERROR
        else:
            with pytest.raises(OffloadError) as info:
                api.olSyncEvent(event)
            assert info.value.code == ErrorCode.QUEUE_ERROR
            api.olDestroyEvent(event)
        api.olDestroyQueue(queue)
