"""Thread safety: init/shutdown races, many threads launching on one queue and on many queues,
queues and events created and destroyed concurrently, allocation while another thread queries."""

from __future__ import annotations

import ctypes
import random
import struct
import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from conftest import JOIN_TIMEOUT, expect_error, find_host, launch_args, run_threads

from offloadrt import AllocType, DeviceInfo, DeviceType, ErrorCode, EventInfo, MemInfo, OffloadError, SymbolKind, api
from offloadrt.api import _state

FILLER = 0xFFFFFFFF


@pytest.fixture(autouse=True)
def uninitialized_runtime() -> Iterator[None]:
    """Each test starts and ends with the runtime shut down; a test that fails midway is cleaned up.

    Meanwhile the interpreter switches threads every 10 µs instead of every 5 ms, so that the
    threads of a test really interleave inside the runtime's calls.
    """
    assert _state.STATE.refcount == 0, "an earlier test left the runtime initialised"
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
    while _state.STATE.refcount:
        try:
            api.olShutDown()
        except OffloadError:
            pass


def u32_array(address: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(address))


# ---- init/shutdown races ----------------------------------------------------------------------

def test_concurrent_init_and_shutdown_from_16_threads() -> None:
    threads, rounds = 16, 25
    callbacks = [0] * threads
    callbacks_lock = threading.Lock()  # guards callbacks: a thread's parked queue may still be running

    def count_callback(index: int) -> None:
        with callbacks_lock:
            callbacks[index] += 1

    def body(index: int) -> None:
        for round_ in range(rounds):
            api.olInit()
            try:
                host = find_host()
                assert api.olGetDeviceInfo(host, DeviceInfo.TYPE) == DeviceType.HOST
                ptr = api.olMemAlloc(host, AllocType.HOST, 64 + index)
                api.olMemFill(None, ptr, bytes([index]), 64 + index)
                assert api.olGetMemInfo(ptr + 63, MemInfo.SIZE) == 64 + index
                queue = api.olCreateQueue(host)
                api.olLaunchHostFunction(queue, count_callback, index)
                if round_ % 2:
                    api.olSyncQueue(queue)
                    assert ctypes.string_at(ptr, 64 + index) == bytes([index]) * (64 + index)
                    api.olMemFree(ptr)
                api.olDestroyQueue(queue)  # busy or idle: the runtime drains it at the latest at shutdown
            finally:
                api.olShutDown()

    run_threads(threads, body)
    assert _state.STATE.refcount == 0
    assert _state.STATE.context is None
    expect_error(ErrorCode.UNINITIALIZED, api.olShutDown)
    expect_error(ErrorCode.UNINITIALIZED, api.olIterateDevices, lambda d, _: None)
    assert callbacks == [rounds] * threads, "every host function ran before its runtime shut down"
    api.olInit()
    assert api.olGetDeviceInfo(find_host(), DeviceInfo.TYPE) == DeviceType.HOST
    api.olShutDown()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("offloadrt")]


# ---- kernel launches from many threads ---------------------------------------------------------

LAUNCH_THREADS, LAUNCHES = 20, 50
REGION = 64  # uint32 per launch


@pytest.fixture
def foo_setup(runtime: None, build) -> tuple[api.Device, api.Symbol, int]:
    """(host, the foo kernel, a buffer of one REGION per launch filled with FILLER)."""
    host = find_host()
    foo = api.olGetSymbol(api.olCreateProgram(host, build("basic")), "foo", SymbolKind.KERNEL)
    total = LAUNCH_THREADS * LAUNCHES * REGION
    out = api.olMemAlloc(host, AllocType.DEVICE, total * 4)
    api.olMemFill(None, out, struct.pack("I", FILLER), total * 4)
    return host, foo, out


def _launch_regions(host: api.Device, foo: api.Symbol, out: int, queue: api.Queue, index: int) -> None:
    for launch in range(LAUNCHES):
        region = out + (index * LAUNCHES + launch) * REGION * 4
        groups = (1, 2, 4, 8)[(index + launch) % 4]
        api.olLaunchKernel(queue, host, foo, struct.pack("P", region), launch_args(groups, REGION // groups))


def _check_regions(out: int) -> None:
    values = u32_array(out, LAUNCH_THREADS * LAUNCHES * REGION).reshape(LAUNCH_THREADS * LAUNCHES, REGION)
    wrong = np.nonzero((values != np.arange(REGION, dtype=np.uint32)).any(axis=1))[0]
    assert wrong.size == 0, f"{wrong.size} launches wrote wrong results, first: launch {wrong[0]}: {values[wrong[0]]}"


def test_many_threads_launch_on_one_queue(foo_setup) -> None:
    host, foo, out = foo_setup
    queue = api.olCreateQueue(host)
    run_threads(LAUNCH_THREADS, lambda index: _launch_regions(host, foo, out, queue, index))
    api.olSyncQueue(queue)
    assert api.olQueryQueue(queue) is True
    _check_regions(out)
    api.olDestroyQueue(queue)


def test_many_threads_launch_on_their_own_queues(foo_setup) -> None:
    host, foo, out = foo_setup
    queues: list[api.Queue | None] = [None] * LAUNCH_THREADS

    def body(index: int) -> None:
        queue = queues[index] = api.olCreateQueue(host)
        _launch_regions(host, foo, out, queue, index)
        if index % 2:  # half sync themselves, half leave it to the main thread
            api.olSyncQueue(queue)

    run_threads(LAUNCH_THREADS, body)
    assert len({id(q) for q in queues}) == LAUNCH_THREADS
    for queue in queues:
        assert queue is not None
        api.olSyncQueue(queue)
    _check_regions(out)
    for queue in queues:
        api.olDestroyQueue(queue)


# ---- queues and events created and destroyed concurrently -------------------------------------

def test_many_threads_create_and_destroy_queues_and_events(runtime: None) -> None:
    host = find_host()
    collector = api.olCreateQueue(host)  # waits for every event of every thread
    threads, rounds = 16, 60
    ran = [0] * threads
    ran_lock = threading.Lock()  # guards ran: a thread's parked queues may run at the same time

    def bump(index: int) -> None:
        with ran_lock:
            ran[index] += 1

    def body(index: int) -> None:
        for round_ in range(rounds):
            queue = api.olCreateQueue(host)
            api.olLaunchHostFunction(queue, bump, index)
            event = api.olCreateEvent(queue)
            assert api.olGetEventInfo(event, EventInfo.QUEUE) is queue
            api.olWaitEvents(collector, [event])
            if round_ % 3 == 0:
                api.olSyncEvent(event)
                assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
            api.olDestroyEvent(event)
            expect_error(ErrorCode.INVALID_EVENT, api.olSyncEvent, event)
            if round_ % 3 == 1:
                api.olSyncQueue(queue)
            api.olDestroyQueue(queue)  # idle or busy (parked)
            expect_error(ErrorCode.INVALID_QUEUE, api.olSyncQueue, queue)

    run_threads(threads, body)
    api.olSyncQueue(collector)
    assert ran == [rounds] * threads, "every host function ran before the collector passed its event"
    api.olDestroyQueue(collector)


def _destroy_race(create: Callable[[], object], destroy: Callable[[object], None], stale_code: ErrorCode,
                  rounds: int, threads: int = 8, profile: Callable[..., object] | None = None) -> list[int]:
    """Each round, ``threads`` threads destroy one fresh handle at once; returns the successes per round.

    The interpreter switches threads every microsecond meanwhile, so that a check-then-clear
    of a handle that is not atomic is caught; ``profile`` (a ``threading.setprofile`` hook) can
    hold threads at a chosen point to make the race certain.
    """
    handles: list[object] = []
    outcomes = [[0, 0] for _ in range(rounds)]  # [successes, stale-handle errors]
    lock = threading.Lock()  # guards outcomes
    barrier = threading.Barrier(threads, action=lambda: handles.append(create()))

    def body(index: int) -> None:
        for round_ in range(rounds):
            barrier.wait(JOIN_TIMEOUT)
            try:
                destroy(handles[round_])
            except OffloadError as exc:
                assert exc.code == stale_code, repr(exc)
                with lock:
                    outcomes[round_][1] += 1
            else:
                with lock:
                    outcomes[round_][0] += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    if profile is not None:
        threading.setprofile(profile)
    try:
        run_threads(threads, body)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setswitchinterval(interval)
    assert all(ok + stale == threads for ok, stale in outcomes)
    return [ok for ok, _ in outcomes]


def _pair_up_after(function: str, caller: str) -> Callable[..., object]:
    """A profile hook that holds a thread returning from ``function`` (called by ``caller``)
    until a second thread gets there too, or 50 ms passed: both have then passed the check."""
    pair = threading.Barrier(2)

    def hook(frame, event, arg):
        if (event == "return" and frame.f_code.co_name == function and frame.f_back is not None
                and frame.f_back.f_code.co_name == caller):
            try:
                pair.wait(0.05)
            except threading.BrokenBarrierError:
                pair.reset()
        return hook

    return hook


def test_concurrent_destroy_of_one_queue_succeeds_once(runtime: None) -> None:
    host = find_host()
    # First with two destroyers held together right after the handle check (the runtime's
    # live_queue helper), then a free-running race.
    held = _destroy_race(lambda: api.olCreateQueue(host), api.olDestroyQueue, ErrorCode.INVALID_QUEUE, rounds=20,
                         profile=_pair_up_after("live_queue", "olDestroyQueue"))
    free = _destroy_race(lambda: api.olCreateQueue(host), api.olDestroyQueue, ErrorCode.INVALID_QUEUE, rounds=2000)
    wrong = [ok for ok in held + free if ok != 1]
    assert not wrong, f"{len(wrong)} of {len(held + free)} queues were destroyed {wrong} times at once, not once"
    # the pool was not corrupted: live queues never share a backend queue (white-box: Queue._ai)
    queues = [api.olCreateQueue(host) for _ in range(16)]
    assert len({id(q._ai) for q in queues}) == len(queues)
    for queue in queues:
        api.olDestroyQueue(queue)


def test_concurrent_destroy_of_one_event_succeeds_once(runtime: None) -> None:
    queue = api.olCreateQueue(find_host())
    held = _destroy_race(lambda: api.olCreateEvent(queue), api.olDestroyEvent, ErrorCode.INVALID_EVENT, rounds=20,
                         profile=_pair_up_after("live_event", "olDestroyEvent"))
    free = _destroy_race(lambda: api.olCreateEvent(queue), api.olDestroyEvent, ErrorCode.INVALID_EVENT, rounds=1000)
    wrong = [ok for ok in held + free if ok != 1]
    assert not wrong, f"{len(wrong)} of {len(held + free)} events were destroyed {wrong} times at once, not once"
    api.olDestroyQueue(queue)


# ---- allocation while another thread queries -------------------------------------------------

def test_alloc_and_free_while_another_thread_queries_mem_info(runtime: None) -> None:
    host = find_host()
    anchor_size = 1 << 16
    anchor = api.olMemAlloc(host, AllocType.HOST, anchor_size)
    threads, rounds = 8, 150
    done = threading.Event()
    live: dict[int, int] = {}  # base -> size of every allocation a worker currently holds
    live_lock = threading.Lock()  # guards live
    query_failures: list[str] = []
    queries = [0]

    def querier() -> None:
        try:
            query_loop()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            query_failures.append(f"the querier stopped: {exc!r}")

    def query_loop() -> None:
        rng = random.Random(1)
        while not done.is_set():
            offset = rng.randrange(anchor_size)
            if api.olGetMemInfo(anchor + offset, MemInfo.BASE) != anchor:
                query_failures.append(f"anchor+{offset}: wrong base")
            if api.olGetMemInfo(anchor + offset, MemInfo.SIZE) != anchor_size:
                query_failures.append(f"anchor+{offset}: wrong size")
            # Query under live_lock: a worker removes an allocation from `live` before it frees
            # it, so a sampled allocation is certainly live while the lock is held.
            with live_lock:
                sample = rng.choice(list(live.items())) if live else None
                if sample is not None:
                    base, size = sample
                    found = api.olGetMemInfo(base + size - 1, MemInfo.BASE)
                    if found != base:
                        query_failures.append(f"{base:#x}+{size - 1} resolved to {found:#x}")
            queries[0] += 1

    def worker(index: int) -> None:
        rng = random.Random(index)
        mine: list[tuple[int, int]] = []
        for round_ in range(rounds):
            size = rng.choice((1, 7, 4096, 5000, 1 << 16))
            kind = list(AllocType)[round_ % 3]
            ptr = api.olMemAlloc(host, kind, size)
            with live_lock:
                assert ptr not in live, f"{ptr:#x} handed out twice"
                live[ptr] = size
            ctypes.memset(ptr, index, size)
            mine.append((ptr, size))
            assert api.olGetMemInfo(ptr + size // 2, MemInfo.BASE) == ptr
            assert api.olGetMemInfo(ptr + size - 1, MemInfo.SIZE) == size
            assert api.olGetMemInfo(ptr, MemInfo.TYPE) == kind
            assert api.olGetMemInfo(ptr, MemInfo.DEVICE) is host
            if len(mine) > 4 or round_ == rounds - 1:
                while mine:
                    base, size = mine.pop(rng.randrange(len(mine)))
                    assert ctypes.string_at(base, size) == bytes([index]) * size, "another thread wrote here"
                    with live_lock:
                        del live[base]
                    if size > 1:
                        expect_error(ErrorCode.INVALID_ARGUMENT, api.olMemFree, base + 1)  # interior: frees nothing
                    api.olMemFree(base)
                    expect_error(ErrorCode.INVALID_ARGUMENT, api.olMemFree, base)

    query_thread = threading.Thread(target=querier, name="test-querier", daemon=True)
    query_thread.start()
    try:
        run_threads(threads, worker)
    finally:
        done.set()
        query_thread.join(JOIN_TIMEOUT)
    assert not query_thread.is_alive(), "the querier thread hung"
    assert not query_failures, query_failures[:5]
    assert queries[0] > 0
    context = _state.STATE.context
    assert context is not None and len(context.allocations) == 1, "only the anchor is left"
    assert api.olGetMemInfo(anchor + 1, MemInfo.BASE) == anchor
    api.olMemFree(anchor)
