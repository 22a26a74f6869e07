"""Queues and events: asynchronous in-order execution, cross-queue waits, events, host functions
and the queue-recycling design rule (olDestroyQueue never blocks, parked queues, shutdown)."""

from __future__ import annotations

import ctypes
import struct
import sys
import threading
import time
import tracemalloc
from typing import Any

import pytest
from conftest import (
    TIMEOUT,
    Gate,
    alloc_u32,
    call_with_timeout,
    expect_error,
    find_host,
    increment,
    kernel,
    launch_args,
    run_threads,
)

from offloadrt import AllocType, ErrorCode, EventFlags, EventInfo, OffloadError, QueueInfo, SymbolKind, api

TIMED = EventFlags.ENABLE_PROFILING


def fib(n: int) -> list[int]:
    values = [0, 1]
    while len(values) < n:
        values.append(values[-1] + values[-2])
    return values[:n]


def sequence(queue: api.Queue, device: api.Device, program: api.Program, index: int, data: int) -> None:
    # struct { uint32_t idx; uint32_t *data; }
    api.olLaunchKernel(queue, device, kernel(program, "sequence"), struct.pack("<I4xQ", index, data), launch_args())


def wait_backend_idle(device: api.Device, ai: Any) -> None:
    """Wait until a (possibly parked) backend queue has drained."""
    gdev = device._gdev
    call_with_timeout(gdev.synchronize, ai, False)
    assert not gdev.has_pending_work(ai)


# ---- order -------------------------------------------------------------------------------------

def test_work_runs_asynchronously_from_the_caller(host, queue, basic, gate):
    counter, view = alloc_u32(host, 1)
    g = gate(queue)
    increment(queue, host, basic, counter)
    assert g.entered.wait(TIMEOUT)
    assert api.olQueryQueue(queue) is False
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is False
    assert view[0] == 0, "the kernel after a blocked host function already ran"
    g.open()
    call_with_timeout(api.olSyncQueue, queue)
    assert view[0] == 1
    assert api.olQueryQueue(queue) is True
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True


def test_host_functions_compute_fibonacci_in_order(queue, gate):
    data = [0, 1]
    g = gate(queue)
    for _ in range(40):
        api.olLaunchHostFunction(queue, lambda d: d.append(d[-1] + d[-2]), data)
    assert data == [0, 1], "host functions ran before the gate opened"
    g.open()
    call_with_timeout(api.olSyncQueue, queue)
    assert data == fib(42)


def test_sequence_across_16_queues_each_waiting_on_the_previous_event(host, basic, gate):
    data, view = alloc_u32(host, 16)
    queues = [api.olCreateQueue(host) for _ in range(16)]
    g = gate(queues[0])
    events: list[api.Event] = []
    for i, q in enumerate(queues):
        if events:
            api.olWaitEvents(q, [events[-1]])
        sequence(q, host, basic, i, data)
        events.append(api.olCreateEvent(q))
    assert g.entered.wait(TIMEOUT)
    assert list(view) == [0] * 16, "a queue ran before the event it waits on"
    assert not any(api.olGetEventInfo(e, EventInfo.IS_COMPLETE) for e in events)
    g.open()
    for q in queues:
        call_with_timeout(api.olSyncQueue, q)
    assert list(view) == fib(16)
    for q in queues:
        api.olDestroyQueue(q)


def test_sequence_on_one_queue(host, queue, basic, gate):
    data, view = alloc_u32(host, 16)
    g = gate(queue)
    for i in range(16):
        sequence(queue, host, basic, i, data)
    assert list(view) == [0] * 16
    g.open()
    call_with_timeout(api.olSyncQueue, queue)
    assert list(view) == fib(16)


def test_sequence_across_queues_waiting_on_all_previous_events(host, basic, gate):
    data, view = alloc_u32(host, 16)
    queues = [api.olCreateQueue(host) for _ in range(16)]
    g = gate(queues[0])
    events: list[api.Event] = []
    for i, q in enumerate(queues):
        api.olWaitEvents(q, list(events))
        sequence(q, host, basic, i, data)
        events.append(api.olCreateEvent(q))
    assert list(view) == [0] * 16
    g.open()
    for e in events:
        call_with_timeout(api.olSyncEvent, e)
    assert list(view) == fib(16)
    for q in queues:
        api.olDestroyQueue(q)


def test_wait_on_many_events_waits_for_every_one(host, gate):
    """A queue that waits on a list of events runs only once the last of them completes,
    whichever place it has in the list."""
    producers = [api.olCreateQueue(host) for _ in range(8)]
    gates = [gate() for _ in producers]
    events = []
    for q, g in zip(producers, gates):
        api.olLaunchHostFunction(q, g)
        events.append(api.olCreateEvent(q))
    consumer = api.olCreateQueue(host)
    ran = threading.Event()
    api.olWaitEvents(consumer, events)
    api.olLaunchHostFunction(consumer, lambda _: ran.set())
    done = api.olCreateEvent(consumer)
    held = 5  # a gate in the middle of the list stays closed
    for i, g in enumerate(gates):
        if i != held:
            g.open()
    for i, e in enumerate(events):
        if i != held:
            call_with_timeout(api.olSyncEvent, e)
    assert not ran.is_set(), "the consumer ran while one of its events was pending"
    assert api.olGetEventInfo(done, EventInfo.IS_COMPLETE) is False
    gates[held].open()
    call_with_timeout(api.olSyncEvent, done)
    assert ran.is_set()


# ---- events ------------------------------------------------------------------------------------

def test_event_on_an_idle_queue_is_complete_at_once(queue):
    event = api.olCreateEvent(queue)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    assert api.olGetEventInfo(event, EventInfo.QUEUE) is queue
    assert api.olGetEventInfoSize(event, EventInfo.IS_COMPLETE) == 1
    assert api.olGetEventInfoSize(event, EventInfo.QUEUE) == 8
    api.olSyncEvent(event)
    api.olDestroyEvent(event)


def test_event_is_complete_only_after_the_work_before_it(queue, gate):
    g = gate(queue)
    event = api.olCreateEvent(queue)
    assert g.entered.wait(TIMEOUT)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is False
    g.open()
    call_with_timeout(api.olSyncEvent, event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True


def test_sync_event_many_times(queue, gate):
    g = gate(queue)
    event = api.olCreateEvent(queue)
    waiters = [threading.Thread(target=api.olSyncEvent, args=(event,), daemon=True) for _ in range(4)]
    for t in waiters:
        t.start()
    g.open()
    for t in waiters:
        t.join(TIMEOUT)
        assert not t.is_alive()
    for _ in range(3):
        call_with_timeout(api.olSyncEvent, event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True


def test_event_outlives_its_destroyed_queue(host, basic, gate):
    counter, view = alloc_u32(host, 1)
    q = api.olCreateQueue(host)
    g = gate(q)
    event = api.olCreateEvent(q, TIMED)
    api.olDestroyQueue(q)
    assert api.olGetEventInfo(event, EventInfo.QUEUE) is q
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is False
    other = api.olCreateQueue(host)
    api.olWaitEvents(other, [event])
    increment(other, host, basic, counter)
    assert view[0] == 0
    g.open()
    call_with_timeout(api.olSyncEvent, event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    assert api.olGetEventInfo(event, EventInfo.QUEUE) is q
    call_with_timeout(api.olSyncQueue, other)
    assert view[0] == 1
    end = api.olCreateEvent(other, TIMED)
    assert api.olGetEventElapsedTime(event, end) >= 0.0
    api.olDestroyEvent(event)
    expect_error(ErrorCode.INVALID_EVENT, api.olSyncEvent, event)
    api.olDestroyQueue(other)


def test_elapsed_time_measures_real_time(queue):
    never = threading.Event()
    start_wall = time.perf_counter()
    start = api.olCreateEvent(queue, TIMED)
    api.olLaunchHostFunction(queue, lambda ev: ev.wait(0.05), never)
    end = api.olCreateEvent(queue, TIMED)
    elapsed = call_with_timeout(api.olGetEventElapsedTime, start, end)
    wall_ms = (time.perf_counter() - start_wall) * 1e3
    assert isinstance(elapsed, float)
    assert 40.0 <= elapsed <= wall_ms + 1.0, (elapsed, wall_ms)
    assert 0.0 <= api.olGetEventElapsedTime(start, start) < 1.0


def test_elapsed_time_counts_from_when_the_queue_reaches_the_event(queue, gate):
    """Events created behind a blocked host function are timestamped when the queue gets to
    them, not when they are created."""
    never = threading.Event()
    g = gate(queue)
    start = api.olCreateEvent(queue, TIMED)
    api.olLaunchHostFunction(queue, lambda ev: ev.wait(0.05), never)
    end = api.olCreateEvent(queue, TIMED)
    assert g.entered.wait(TIMEOUT)
    opened = time.perf_counter()
    g.open()
    elapsed = call_with_timeout(api.olGetEventElapsedTime, start, end)
    wall_ms = (time.perf_counter() - opened) * 1e3
    assert 40.0 <= elapsed <= wall_ms + 1.0, (elapsed, wall_ms)


def test_elapsed_time_argument_errors(queue):
    event = api.olCreateEvent(queue, TIMED)
    expect_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetEventElapsedTime, None, event)
    expect_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetEventElapsedTime, event, None)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetEventElapsedTime, event, queue)


def test_plain_events_take_no_timestamp_and_elapsed_time_refuses_them(queue):
    plain, timed = api.olCreateEvent(queue), api.olCreateEvent(queue, TIMED)
    assert api.olCreateEvent(queue, 0) is not None and api.olCreateEvent(queue, EventFlags.NONE) is not None
    for start, end, named in ((plain, timed, "start"), (timed, plain, "end"), (plain, plain, "start")):
        with pytest.raises(OffloadError) as info:
            api.olGetEventElapsedTime(start, end)
        assert info.value.code == ErrorCode.INVALID_ARGUMENT
        assert f"{named} (<Event#" in info.value.details and "EventFlags.ENABLE_PROFILING" in info.value.details
    assert api.olGetEventElapsedTime(timed, timed) >= 0.0


@pytest.mark.parametrize("flags", [2, 3, -1, 1.0, None, "ENABLE_PROFILING"])
def test_unknown_event_flags_are_invalid_enumeration(queue, flags):
    expect_error(ErrorCode.INVALID_ENUMERATION, api.olCreateEvent, queue, flags)
    api.olSyncQueue(queue)  # the queue is untouched


def test_elapsed_time_across_devices_is_invalid_device(two_devices):
    queues = [api.olCreateQueue(d) for d in two_devices]
    events = [api.olCreateEvent(q, TIMED) for q in queues]
    expect_error(ErrorCode.INVALID_DEVICE, api.olGetEventElapsedTime, events[0], events[1])
    for q in queues:
        api.olSyncQueue(q)
        api.olDestroyQueue(q)


# ---- olWaitEvents ------------------------------------------------------------------------------

def test_wait_on_events_of_the_same_queue_is_skipped(host, queue, basic, gate):
    counter, view = alloc_u32(host, 1)
    g = gate(queue)
    first = api.olCreateEvent(queue, TIMED)
    api.olWaitEvents(queue, [first, first])
    increment(queue, host, basic, counter)
    api.olWaitEvents(queue, [])
    assert view[0] == 0
    g.open()
    call_with_timeout(api.olSyncQueue, queue)
    assert view[0] == 1


def test_wait_events_argument_errors(host, queue):
    other = api.olCreateQueue(host)
    event = api.olCreateEvent(other, TIMED)
    expect_error(ErrorCode.INVALID_NULL_HANDLE, api.olWaitEvents, queue, [event, None])
    expect_error(ErrorCode.INVALID_NULL_POINTER, api.olWaitEvents, queue, None)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olWaitEvents, queue, [other])
    expect_error(ErrorCode.INVALID_NULL_HANDLE, api.olWaitEvents, None, [event])
    api.olDestroyEvent(event)
    expect_error(ErrorCode.INVALID_EVENT, api.olWaitEvents, queue, [event])
    api.olDestroyQueue(other)
    expect_error(ErrorCode.INVALID_QUEUE, api.olWaitEvents, other, [])


# ---- host functions ----------------------------------------------------------------------------

def test_host_functions_and_kernels_run_in_queue_order(host, queue, basic):
    counter, view = alloc_u32(host, 1)
    seen: list[int] = []
    for _ in range(5):
        increment(queue, host, basic, counter)
        api.olLaunchHostFunction(queue, lambda out: out.append(view[0]), seen)
    call_with_timeout(api.olSyncQueue, queue)
    assert seen == [1, 2, 3, 4, 5]


def test_host_function_gets_its_user_data(queue):
    payload = object()
    received: list[object] = []
    api.olLaunchHostFunction(queue, received.append, payload)
    api.olLaunchHostFunction(queue, received.append)
    call_with_timeout(api.olSyncQueue, queue)
    assert len(received) == 2
    assert received[0] is payload
    assert received[1] is None


def test_host_function_argument_errors(queue):
    expect_error(ErrorCode.INVALID_NULL_POINTER, api.olLaunchHostFunction, queue, None)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olLaunchHostFunction, queue, 42)
    expect_error(ErrorCode.INVALID_NULL_HANDLE, api.olLaunchHostFunction, None, print)


def test_many_threads_launch_on_one_queue(host, queue, basic):
    counter, view = alloc_u32(host, 1)
    threads_n, launches = 20, 50
    order: list[tuple[int, int]] = []

    def worker(tid: int) -> None:
        for i in range(launches):
            increment(queue, host, basic, counter)
            api.olLaunchHostFunction(queue, order.append, (tid, i))

    run_threads(threads_n, worker, timeout=TIMEOUT * 3)
    call_with_timeout(api.olSyncQueue, queue)
    assert view[0] == threads_n * launches, "one in-order queue must not lose increments"
    assert len(order) == threads_n * launches
    for tid in range(threads_n):
        assert [i for t, i in order if t == tid] == list(range(launches)), "one thread's work ran out of order"


def test_many_threads_launch_on_many_queues(host, basic):
    threads_n, launches = 20, 50
    counters, view = alloc_u32(host, threads_n)
    calls: list[int] = []

    def worker(tid: int) -> None:
        q = api.olCreateQueue(host)
        for _ in range(launches):
            increment(q, host, basic, counters + 4 * tid)
            api.olLaunchHostFunction(q, calls.append, tid)
        api.olSyncQueue(q)
        api.olDestroyQueue(q)

    run_threads(threads_n, worker, timeout=TIMEOUT * 3)
    assert list(view) == [launches] * threads_n
    assert sorted(calls) == sorted(list(range(threads_n)) * launches)


# ---- queue recycling ---------------------------------------------------------------------------

def test_destroy_queue_never_blocks_and_its_work_completes(host, basic, gate):
    counter, view = alloc_u32(host, 1)
    q = api.olCreateQueue(host)
    ai = q._ai
    g = gate()
    done = threading.Event()
    api.olLaunchHostFunction(q, g)
    increment(q, host, basic, counter)
    api.olLaunchHostFunction(q, lambda _: done.set())
    assert g.entered.wait(TIMEOUT)
    call_with_timeout(api.olDestroyQueue, q, timeout=2.0)
    assert ai in host.parked, "a busy queue must be parked"
    assert not done.is_set() and view[0] == 0
    expect_error(ErrorCode.INVALID_QUEUE, api.olSyncQueue, q)
    expect_error(ErrorCode.INVALID_QUEUE, api.olLaunchHostFunction, q, print)
    g.open()
    assert done.wait(TIMEOUT), "the work of a destroyed queue did not complete"
    assert view[0] == 1


def test_idle_queue_returns_to_the_pool_at_once(host):
    pool = host._gdev.queue_pool
    q = api.olCreateQueue(host)
    api.olLaunchHostFunction(q, lambda _: None)
    call_with_timeout(api.olSyncQueue, q)
    ai = q._ai
    pooled, live = pool.pooled, pool.live
    api.olDestroyQueue(q)
    assert pool.pooled == pooled + 1
    assert pool.live == live
    assert ai not in host.parked
    again = api.olCreateQueue(host)
    assert again._ai is ai, "olCreateQueue must reuse the pooled backend queue"
    assert pool.pooled == pooled
    assert pool.live == live
    ran = threading.Event()
    api.olLaunchHostFunction(again, lambda _: ran.set())
    call_with_timeout(api.olSyncQueue, again)
    assert ran.is_set()
    api.olDestroyQueue(again)


def test_parked_queue_is_reused_only_once_finished_newest_first(host, gate):
    pool = host._gdev.queue_pool
    queues = [api.olCreateQueue(host) for _ in range(3)]
    gates = [gate() for _ in queues]
    backends = [q._ai for q in queues]
    results: list[int] = []
    for i, (q, g) in enumerate(zip(queues, gates)):
        api.olLaunchHostFunction(q, g)
        api.olLaunchHostFunction(q, results.append, i)
    pooled = pool.pooled
    for q in queues:
        api.olDestroyQueue(q)
    assert host.parked == backends
    assert pool.pooled == pooled

    busy = api.olCreateQueue(host)  # nothing parked has finished
    assert busy._ai not in backends
    assert host.parked == backends

    gates[0].open()
    gates[2].open()
    wait_backend_idle(host, backends[0])
    wait_backend_idle(host, backends[2])
    newest = api.olCreateQueue(host)
    assert newest._ai is backends[2], "the newest finished parked queue comes first"
    older = api.olCreateQueue(host)
    assert older._ai is backends[0], "a finished parked queue is taken before a busy newer one"
    assert host.parked == [backends[1]]
    assert sorted(results) == [0, 2]

    fresh = api.olCreateQueue(host)
    assert fresh._ai not in backends, "a busy parked queue must not be handed out"
    gates[1].open()
    wait_backend_idle(host, backends[1])
    last = api.olCreateQueue(host)
    assert last._ai is backends[1]
    assert host.parked == []
    assert sorted(results) == [0, 1, 2]
    for q in (newest, older, last):
        ran = threading.Event()
        api.olLaunchHostFunction(q, lambda _, ran=ran: ran.set())
        call_with_timeout(api.olSyncQueue, q)
        assert ran.is_set()
    for q in (busy, newest, older, fresh, last):
        api.olDestroyQueue(q)


@pytest.mark.slow
def test_100k_queues_with_pending_work_stay_bounded(build):
    """Creating and destroying 100,000 queues that each hold pending work, without any sync,
    keeps the backend queues, the threads and the memory bounded; all the work still runs."""
    api.olInit()
    try:
        host = find_host()
        program = api.olCreateProgram(host, build("basic"))
        noargs = kernel(program, "noargs")
        size = launch_args()
        pool = host._gdev.queue_pool
        calls: list[None] = []
        max_live = max_threads = 0

        def churn(n: int) -> None:
            nonlocal max_live, max_threads
            for i in range(n):
                q = api.olCreateQueue(host)
                if i & 1:
                    api.olLaunchKernel(q, host, noargs, None, size)
                else:
                    api.olLaunchHostFunction(q, calls.append)
                api.olDestroyQueue(q)
                if i % 500 == 0:
                    max_live = max(max_live, pool.live)
                    max_threads = max(max_threads, threading.active_count())

        churn(5_000)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            churn(95_000)
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        assert max_live < 200, f"{max_live} live backend queues"
        assert max_threads < 200, f"{max_threads} threads"
        assert grown < 1 << 20, f"memory grew by {grown} bytes over 95,000 queues"
    finally:
        call_with_timeout(api.olShutDown, timeout=30.0)
    assert len(calls) == 50_000, "the work of destroyed queues must still run"


def test_last_shutdown_syncs_and_releases_parked_queues():
    api.olInit()
    order: list[str] = []
    g = Gate()
    try:
        host = find_host()
        gdev = host._gdev
        q = api.olCreateQueue(host)
        ai = q._ai
        api.olLaunchHostFunction(q, g)
        api.olLaunchHostFunction(q, lambda _: order.append("work"))
        api.olDestroyQueue(q)
        assert host.parked == [ai]
    except BaseException:
        g.open()
        api.olShutDown()
        raise

    def shut_down() -> None:
        api.olShutDown()
        order.append("shutdown")

    thread = threading.Thread(target=shut_down, daemon=True)
    thread.start()
    try:
        thread.join(0.1)
        assert thread.is_alive(), "olShutDown returned while a parked queue still had work"
    finally:
        g.open()
    thread.join(TIMEOUT)
    assert not thread.is_alive(), "olShutDown did not return after the parked work finished"
    assert order == ["work", "shutdown"]
    assert host.parked == []
    assert gdev.queue_pool.live == 0
    assert not ai.is_alive(), "the parked queue's thread still runs after olShutDown"
    expect_error(ErrorCode.UNINITIALIZED, api.olCreateQueue, host)


# ---- host functions that call the API ------------------------------------------------------------

def test_a_host_function_syncing_its_own_queue_fails_the_queue_instead_of_hanging(host) -> None:
    queue = api.olCreateQueue(host)
    api.olLaunchHostFunction(queue, lambda _: api.olSyncQueue(queue))
    with pytest.raises(OffloadError) as info:
        call_with_timeout(api.olSyncQueue, queue)
    assert info.value.code == ErrorCode.QUEUE_ERROR
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and isinstance(error, OffloadError) and error.code == ErrorCode.INVALID_ARGUMENT
    assert "olSyncQueue cannot be called from a host function" in error.details and str(queue) in error.details
    api.olDestroyQueue(queue)


@pytest.mark.parametrize("call", ["olSyncEvent", "olGetEventElapsedTime", "olShutDown", "olSyncQueue-other"])
def test_every_waiting_call_is_refused_in_a_host_function(host, call) -> None:
    queue, other = api.olCreateQueue(host), api.olCreateQueue(host)
    event = api.olCreateEvent(other, TIMED)
    seen: list[BaseException] = []

    def body(_: object) -> None:
        try:
            if call == "olSyncEvent":
                api.olSyncEvent(event)
            elif call == "olGetEventElapsedTime":
                api.olGetEventElapsedTime(event, event)
            elif call == "olShutDown":
                api.olShutDown()
            else:
                api.olSyncQueue(other)
        except BaseException as exc:  # noqa: BLE001  # inspected below
            seen.append(exc)

    api.olLaunchHostFunction(queue, body)
    call_with_timeout(api.olSyncQueue, queue)
    assert len(seen) == 1 and isinstance(seen[0], OffloadError), seen
    assert seen[0].code == ErrorCode.INVALID_ARGUMENT and "cannot be called from a host function" in seen[0].details
    api.olSyncQueue(other)  # the same calls work outside host functions
    api.olDestroyQueue(queue)
    api.olDestroyQueue(other)


def test_host_functions_may_enqueue_allocate_free_and_query(host, basic) -> None:
    queue, other = api.olCreateQueue(host), api.olCreateQueue(host)
    done: dict[str, object] = {}

    def body(_: object) -> None:
        counter = api.olMemAlloc(host, AllocType.HOST, 4)
        ctypes.memset(counter, 0, 4)
        api.olLaunchKernel(other, host, api.olGetSymbol(basic, "increment", SymbolKind.KERNEL),
                           struct.pack("<Q", counter), launch_args())
        done["event"] = api.olCreateEvent(other)
        done["queue"] = api.olCreateQueue(host)
        done["empty"] = api.olGetQueueInfo(other, QueueInfo.EMPTY)
        done["counter"] = counter

    api.olLaunchHostFunction(queue, body)
    call_with_timeout(api.olSyncQueue, queue)
    api.olSyncEvent(done["event"])
    assert ctypes.c_uint32.from_address(done["counter"]).value == 1
    api.olMemFree(done["counter"])
    for q in (queue, other, done["queue"]):
        api.olDestroyQueue(q)


def test_a_host_queue_has_no_driver_handle(host) -> None:
    queue = api.olCreateQueue(host)
    assert queue.native_handle == 0
    api.olDestroyQueue(queue)
    expect_error(ErrorCode.INVALID_QUEUE, lambda: queue.native_handle)


def test_a_synced_queue_reads_idle_at_once_from_many_threads(host):
    """olSyncQueue returns only when the queue is empty: olQueryQueue right after it answers True,
    also while other threads keep the workers busy (a sync's marker once woke the waiter before it
    was taken off the queue)."""
    failures: list[str] = []

    def body(index: int) -> None:
        queue = api.olCreateQueue(host)
        try:
            for round_ in range(300):
                api.olLaunchHostFunction(queue, lambda _: None)
                api.olSyncQueue(queue)
                if api.olQueryQueue(queue) is not True:
                    failures.append(f"thread {index}, round {round_}: busy after olSyncQueue")
                    return
        finally:
            api.olDestroyQueue(queue)

    threads = [threading.Thread(target=body, args=(index,)) for index in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as CPython allows: the window, if any, shows
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures, failures[:3]
