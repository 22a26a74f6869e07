"""How the host device executes work: one worker thread per queue, kernels over a group pool.

A :class:`HostQueue` runs its items in submission order on its own thread. A kernel launch
runs its work-groups on the queue's thread and, when there are several, on the device's
:class:`GroupPool` too; ctypes releases the GIL during each call, so groups run in parallel.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

from ...errors import ErrorCode, OffloadError
from ..common.resources import AsyncInfo, GenericEvent, QueueFailure, set_host_function_queue

KERNEL_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class LaunchStruct(ctypes.Structure):
    """``ol_host_launch_t`` from ``host_kernel.h``, flattened (same layout)."""

    _fields_ = [
        ("gx", ctypes.c_uint32), ("gy", ctypes.c_uint32), ("gz", ctypes.c_uint32),
        ("ngx", ctypes.c_uint32), ("ngy", ctypes.c_uint32), ("ngz", ctypes.c_uint32),
        ("bx", ctypes.c_uint32), ("by", ctypes.c_uint32), ("bz", ctypes.c_uint32),
        ("dyn_shared_memory", ctypes.c_void_p),
    ]


class _Latch:
    """A one-shot gate: closed when made, opened once; waiting on an open latch returns at once."""

    __slots__ = ("_lock", "is_open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.is_open = False

    def open(self) -> None:
        self.is_open = True
        self._lock.release()

    def wait(self, timeout: float = -1) -> bool:
        if self.is_open:
            return True
        if self._lock.acquire(timeout=timeout):
            self._lock.release()
            return True
        return False


class HostEvent(GenericEvent):
    """A marker in a host queue; ``time_ns`` is when the queue reached it."""

    __slots__ = ("latch", "time_ns")

    def __init__(self, device: object):
        super().__init__(device)
        self.latch = _Latch()
        self.time_ns = 0

    def reach(self, _arg: object = None) -> None:
        self.time_ns = time.perf_counter_ns()
        self.latch.open()

    def skip(self, _arg: object, failure: QueueFailure) -> None:
        self.failure = failure
        self.time_ns = time.perf_counter_ns()
        self.latch.open()


# A queue item is (tag, run, arg, extra):
#   CALL:   run(arg); ``extra`` is None or skip(arg, failure), called instead once the queue failed.
#   KERNEL: a one-group launch: ``run`` is the HostKernel, ``arg`` the argument blob and ``extra``
#           the address of a prepared, read-only launch struct; a non-zero return is a fault.
CALL = 0
KERNEL = 1
Item = tuple[int, Any, Any, Any]


def kernel_fault(name: str, status: int, group: tuple[int, int, int]) -> OffloadError:
    return OffloadError(ErrorCode.BACKEND_FAILURE,
                        f"kernel '{name}' faulted: it returned {status} in work-group {group}")


def program_gone(name: str) -> OffloadError:
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"kernel '{name}' did not run: its program was destroyed before the launch could start")


def _open_latch(latch: _Latch) -> None:
    latch.open()


def _open_latch_skipped(latch: _Latch, _failure: QueueFailure) -> None:
    latch.open()


class HostQueue(AsyncInfo):
    """An in-order queue served by its own daemon thread.

    An item stays at the head of ``_items`` until it has finished, so the queue is idle exactly
    when ``_items`` is empty. Submitting is a lock-free append; the thread sleeps on ``_wake``
    only when it has found the queue empty after announcing that it will sleep. Once the queue
    fails, later items are skipped (events and sync markers among them are still released).
    """

    __slots__ = ("_items", "_sleeping", "_wake", "_thread")

    def __init__(self, device: object, name: str):
        super().__init__(device)
        self._items: deque[Item | None] = deque()
        self._sleeping = False
        self._wake = threading.Lock()  # released to wake the sleeping thread (a binary semaphore)
        self._wake.acquire()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _push(self, item: Item | None) -> None:
        self._items.append(item)
        if self._sleeping:
            self.wake()

    def wake(self) -> None:
        """Wake the thread after an append (call only when ``_sleeping`` was seen set)."""
        self._sleeping = False
        try:
            self._wake.release()
        except RuntimeError:  # another submitter woke it first
            pass

    def submit(self, run: Callable[[Any], object], arg: Any,
               skip: Callable[[Any, QueueFailure], object] | None = None) -> None:
        """Run ``run(arg)`` in queue order; ``skip(arg, failure)`` instead if the queue failed."""
        self._push((CALL, run, arg, skip))

    def submit_kernel(self, kernel: Any, args: bytes | None, launch_address: int) -> None:
        """Run a one-group launch of ``kernel`` with a prepared launch struct."""
        self._push((KERNEL, kernel, args, launch_address))

    def is_idle(self) -> bool:
        return not self._items

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every item submitted so far finished (or was skipped after a failure)."""
        if not self._items:
            return True
        marker = _Latch()
        self.submit(_open_latch, marker, _open_latch_skipped)
        return marker.wait(-1 if timeout is None else timeout)

    def stop(self) -> None:
        """Let the thread finish what was submitted, then exit. Never blocks."""
        self._push(None)

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _serve(self) -> None:
        set_host_function_queue(self)  # every host function of this queue runs on this thread
        items = self._items
        kernel_tag, call_tag = KERNEL, CALL
        while True:
            if not items:
                self._sleeping = True
                if not items:  # nothing arrived after we announced the sleep: wait for a submitter
                    self._wake.acquire()
                self._sleeping = False
                continue
            item = items[0]
            if item is None:
                items.popleft()
                return
            tag, run, arg, extra = item
            failure = self.failure
            if failure is None:
                try:
                    if tag is kernel_tag:
                        # A launch racing olDestroyProgram must not call into a closed library (HostImage).
                        if run.image.unloaded and not run.image.may_run(self):
                            self.fail(program_gone(run.name))
                        else:
                            status = run.fn(arg, extra)
                            if status:
                                self.fail(kernel_fault(run.name, status, (0, 0, 0)))
                    else:
                        run(arg)
                except OffloadError as exc:
                    self.fail(exc)
                except BaseException as exc:  # a host function raised: the queue fails, we go on
                    err = OffloadError(ErrorCode.UNKNOWN, f"host function raised {type(exc).__name__}: {exc}")
                    err.__cause__ = exc
                    self.fail(err)
            elif tag is call_tag and extra is not None:
                extra(arg, failure)
            items.popleft()


def after_queued_work(queues: list[HostQueue], action: Callable[[Any], object], arg: Any) -> None:
    """Run ``action(arg)`` once each of ``queues`` has finished (or skipped) the work it holds now.

    It runs on the thread of the queue that gets there last, or at once when ``queues`` is empty.
    """
    if not queues:
        action(arg)
        return
    left = [len(queues)]
    lock = threading.Lock()  # guards left

    def arrive(_arg: object = None, _failure: object = None) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            action(arg)

    for queue in queues:
        queue.submit(arrive, None, arrive)


class _GroupJob:
    """One launch's work-groups, split in chunks that pool threads take in turn."""

    __slots__ = ("fn", "args", "num_groups", "group_size", "dyn", "total", "chunk", "nchunks",
                 "_next", "_lock", "_active", "done", "fault", "name")

    def __init__(self, fn: Any, args: bytes | None, num_groups: tuple[int, int, int],
                 group_size: tuple[int, int, int], dyn: int, name: str, participants: int, nchunks: int):
        self.fn = fn
        self.args = args
        self.num_groups = num_groups
        self.group_size = group_size
        self.dyn = dyn
        self.name = name
        self.total = num_groups[0] * num_groups[1] * num_groups[2]
        self.nchunks = nchunks
        self.chunk = -(-self.total // nchunks)
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._active = participants
        self.done = _Latch()
        self.fault: OffloadError | None = None

    def work(self, local: threading.local) -> None:
        try:
            while self.fault is None:
                index = next(self._next)
                if index >= self.nchunks:
                    break
                start = index * self.chunk
                run_groups(self, local, start, min(start + self.chunk, self.total))
        finally:
            with self._lock:
                self._active -= 1
                last = self._active == 0
            if last:
                self.done.open()


def _thread_state(local: threading.local, dyn: int) -> tuple[LaunchStruct, int]:
    """This thread's launch struct, with a work-group memory buffer of at least ``dyn`` bytes."""
    state = getattr(local, "state", None)
    if state is None:
        state = local.state = [LaunchStruct(), None, 0]
    launch = state[0]
    if dyn > state[2]:
        state[1] = ctypes.create_string_buffer(dyn)
        state[2] = dyn
        launch.dyn_shared_memory = ctypes.addressof(state[1])
    elif dyn == 0 and state[2] == 0:
        launch.dyn_shared_memory = None
    return launch, ctypes.addressof(launch)


def run_groups(job: _GroupJob, local: threading.local, start: int, end: int) -> None:
    """Call the kernel once per work-group in [start, end), in linear group order."""
    launch, address = _thread_state(local, job.dyn)
    ngx, ngy, ngz = job.num_groups
    launch.ngx, launch.ngy, launch.ngz = ngx, ngy, ngz
    launch.bx, launch.by, launch.bz = job.group_size
    fn = job.fn
    args = job.args
    plane = ngx * ngy
    for linear in range(start, end):
        z, rest = divmod(linear, plane)
        y, x = divmod(rest, ngx)
        launch.gx = x
        launch.gy = y
        launch.gz = z
        status = fn(args, address)
        if status:
            if job.fault is None:
                job.fault = kernel_fault(job.name, status, (x, y, z))
            return


class GroupPool:
    """Worker threads shared by every queue of a host device, for multi-group launches.

    Threads start on first use; ``shutdown`` asks them to exit without waiting for them.
    """

    def __init__(self, size: int):
        self.size = max(1, size)
        self._tasks: SimpleQueue[_GroupJob | None] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # guards _threads and closed
        self.closed = False  # after shutdown a launch runs all its groups on the caller's thread
        self._local = threading.local()  # per-thread launch struct of callers that run groups

    def _ensure_threads(self) -> None:
        if len(self._threads) >= self.size - 1:
            return
        with self._lock:
            while not self.closed and len(self._threads) < self.size - 1:
                thread = threading.Thread(target=self._serve, name=f"offloadrt-host-group-{len(self._threads)}",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        local = threading.local()
        while True:
            job = self._tasks.get()
            if job is None:
                return
            job.work(local)

    def run(self, fn: Any, args: bytes | None, num_groups: tuple[int, int, int],
            group_size: tuple[int, int, int], dyn: int, name: str) -> None:
        """Run every work-group of a launch and return when all are done; raise on a fault."""
        num_groups = (int(num_groups[0]), int(num_groups[1]), int(num_groups[2]))
        group_size = (int(group_size[0]), int(group_size[1]), int(group_size[2]))
        total = num_groups[0] * num_groups[1] * num_groups[2]
        if total == 1:
            launch, address = _thread_state(self._local, dyn)
            launch.gx = launch.gy = launch.gz = 0
            launch.ngx = launch.ngy = launch.ngz = 1
            launch.bx, launch.by, launch.bz = group_size
            status = fn(args, address)
            if status:
                raise kernel_fault(name, status, (0, 0, 0))
            return
        helpers = min(self.size, total) - 1
        with self._lock:
            if self.closed:
                helpers = 0
        nchunks = min(total, (helpers + 1) * 4)
        job = _GroupJob(fn, args, num_groups, group_size, dyn, name, helpers + 1, nchunks)
        if helpers:
            self._ensure_threads()
            with self._lock:
                if self.closed:  # shut down meanwhile: its threads may be gone; run what is left here
                    job._active -= helpers
                    helpers = 0
                else:
                    for _ in range(helpers):
                        self._tasks.put(job)
        job.work(self._local)
        job.done.wait()
        if job.fault is not None:
            raise job.fault

    def shutdown(self, wait: bool = False) -> None:
        """Ask the threads to exit once the work they hold is done; with ``wait``, join them."""
        with self._lock:
            self.closed = True
            threads, self._threads = self._threads, []
            for _ in threads:
                self._tasks.put(None)
        if wait:
            for thread in threads:
                thread.join()
