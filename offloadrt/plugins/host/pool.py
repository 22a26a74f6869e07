"""The host device's worker threads: about one per core, serving every queue and helping launches.

A queue with work is *ready*: it sits in :attr:`WorkerPool.ready` until a worker takes it and
runs its items in order (:meth:`HostQueue.serve`). Work-groups of a launch are offered to the
workers as *helper* requests, which they take before queues, so a launch spreads over the idle
cores. :attr:`WorkerPool.size` threads start with the device's first queue.

A host function may block for as long as it likes. While one runs, its worker is *blocked* and
does not count: whenever work is waiting that no idle worker can take and fewer than ``size``
workers are available, one more starts (checked when work arrives and when a host function
starts), so every queue keeps being served however many host functions block. A worker that has
been idle for :data:`IDLE_RETIRE_S` while more than ``size`` workers are available exits.

The pool also carries the device's queue depth (:func:`queue_depth_setting`, read when the device
starts) and knows the queues whose submitters wait for room, so that :meth:`WorkerPool.shutdown`
wakes them.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import warnings
from collections import deque
from typing import TYPE_CHECKING

from ...errors import OffloadWarning
from .dispatch import GroupJob, run_one_group

if TYPE_CHECKING:
    from .exec import HostQueue
    from .image import HostKernel

IDLE_RETIRE_S = 5.0  # an extra worker idle this long exits
#: the items a host queue holds before a submit waits for room, unless OFFLOADRT_HOST_QUEUE_DEPTH
#: says otherwise: four of the batch runner's runs (exec.BATCH_LIMIT), so that one follows another
#: without a pause, and under a MiB of queued launches
DEFAULT_QUEUE_DEPTH = 4096


def queue_depth_setting() -> int:
    """``OFFLOADRT_HOST_QUEUE_DEPTH``: how many items a host queue holds before a submit waits.

    An integer >= 1; 0 means no bound (``sys.maxsize``). Unset: :data:`DEFAULT_QUEUE_DEPTH`;
    anything else: the default, with an :class:`OffloadWarning`.
    """
    text = os.environ.get("OFFLOADRT_HOST_QUEUE_DEPTH")
    if text is None or not text.strip():
        return DEFAULT_QUEUE_DEPTH
    try:
        depth = int(text)
    except ValueError:
        depth = -1
    if depth < 0:
        warnings.warn(f"offloadrt: OFFLOADRT_HOST_QUEUE_DEPTH={text!r} is not an integer >= 0 (0: no bound); "
                      f"host queues hold {DEFAULT_QUEUE_DEPTH} items", OffloadWarning, stacklevel=2)
        return DEFAULT_QUEUE_DEPTH
    return depth or sys.maxsize


class _Worker:
    __slots__ = ("wake", "thread")

    def __init__(self) -> None:
        self.wake = threading.Lock()  # released by whoever takes this worker off the idle list
        self.wake.acquire()
        self.thread: threading.Thread | None = None


class WorkerPool:
    """The threads that run a host device's queues and work-groups (see the module docstring)."""

    def __init__(self, size: int, name: str):
        self.size = max(1, size)
        self.name = name
        self.ready: deque[HostQueue] = deque()  # queues with work; each is claimed (HostQueue._claim)
        self.helpers: deque[GroupJob] = deque()  # launches asking for one more thread each
        # Sleeping workers. Whoever pops one releases its wake lock; a worker that takes itself
        # back off (list.remove) is not woken. Both are atomic, so no wake-up is lost or doubled.
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()  # guards _workers, _blocked and closed
        self._workers: set[_Worker] = set()
        self._blocked = 0  # workers inside a host function
        self.closed = False  # set by shutdown: no thread starts any more, idle ones exit
        self._numbers = itertools.count()
        self.queue_depth = queue_depth_setting()  # each HostQueue's depth
        # Queues with submitters waiting for room (HostQueue.wait_for_room adds and discards them,
        # under the queue's _room; set.add/discard are atomic).
        self.full_queues: set[HostQueue] = set()

    # ---- scheduling (hot) -------------------------------------------------------------------
    def push(self, queue: HostQueue) -> None:
        """Make ``queue`` ready; its claim passes to the worker that takes it."""
        self.ready.append(queue)
        if self._idle:
            self._wake_one()
        elif len(self._workers) - self._blocked < self.size:
            self._grow()

    def _wake_one(self) -> None:
        try:
            worker = self._idle.pop()
        except IndexError:
            return
        worker.wake.release()

    def _grow(self) -> None:
        with self._lock:
            if not self.closed and len(self._workers) - self._blocked < self.size:
                self._start_worker()

    def start(self) -> None:
        """Start the pool's ``size`` workers, if they are not running yet."""
        if len(self._workers) < self.size:
            with self._lock:
                while not self.closed and len(self._workers) - self._blocked < self.size:
                    self._start_worker()

    def has_threads(self) -> bool:
        """Whether any worker thread is still alive."""
        with self._lock:
            return bool(self._workers)

    def _start_worker(self) -> None:
        """Start one more worker (the lock is held)."""
        worker = _Worker()
        worker.thread = threading.Thread(target=self._run, args=(worker,), daemon=True,
                                         name=f"offloadrt-{self.name}-worker-{next(self._numbers)}")
        self._workers.add(worker)
        worker.thread.start()

    # ---- host functions ----------------------------------------------------------------------
    def enter_blocking(self) -> None:
        """The calling worker starts a host function, which may block: if work is waiting that no
        idle worker will take, and fewer than ``size`` others are available, start one more."""
        with self._lock:
            self._blocked += 1
            if ((self.ready or self.helpers) and not self._idle and not self.closed
                    and len(self._workers) - self._blocked < self.size):
                self._start_worker()

    def leave_blocking(self) -> None:
        with self._lock:
            self._blocked -= 1

    # ---- work-groups -------------------------------------------------------------------------
    def run_groups(self, kernel: HostKernel, args: bytes | None, num_groups: tuple[int, int, int],
                   group_size: tuple[int, int, int], dyn: int) -> None:
        """Run every work-group of a launch, on this thread and idle workers; raise its first fault."""
        total = num_groups[0] * num_groups[1] * num_groups[2]
        if total == 1:
            run_one_group(kernel, args, group_size, dyn)
            return
        helpers = 0 if self.closed else min(self.size, total) - 1
        job = GroupJob(kernel, args, num_groups, group_size, dyn, helpers + 1)
        for _ in range(helpers):
            self.helpers.append(job)
        for _ in range(helpers):  # wake sleeping workers (or start threads) to help
            if self._idle:
                self._wake_one()
            elif len(self._workers) - self._blocked < self.size:
                self._grow()
            else:
                break
        job.work()
        # Requests no worker took yet would only hold this launch up: withdraw them.
        withdrawn = 0
        for _ in range(helpers):
            try:
                self.helpers.remove(job)
            except ValueError:
                break
            withdrawn += 1
        if withdrawn:
            job.leave(withdrawn)
        job.done.wait()
        fault = job.fault()
        if fault is not None:
            raise fault

    # ---- the workers -------------------------------------------------------------------------
    def _run(self, me: _Worker) -> None:
        ready, helpers = self.ready, self.helpers
        try:
            while True:
                if helpers:
                    try:
                        job = helpers.popleft()
                    except IndexError:
                        pass
                    else:
                        job.work()
                        continue
                try:
                    queue = ready.popleft()
                except IndexError:
                    if not self._sleep(me):
                        return
                    continue
                try:
                    queue.serve(self)
                except Exception as exc:  # noqa: BLE001  # a runtime bug: keep the worker and drain the queue
                    queue.recover(self, exc)
        finally:
            with self._lock:
                self._workers.discard(me)

    def _sleep(self, me: _Worker) -> bool:
        """Wait for work; False when this worker should exit (the pool closed, or it is not needed)."""
        if self.closed:
            return False
        idle = self._idle
        idle.append(me)
        if self.ready or self.helpers or self.closed:  # work (or shutdown) came in meanwhile
            self._take_back(me)
            return True
        if me.wake.acquire(timeout=IDLE_RETIRE_S):
            return True
        if not self._take_back(me):
            return True  # someone woke us just as the wait ended
        with self._lock:
            if len(self._workers) - self._blocked > self.size:
                self._workers.discard(me)
                return False
        return True

    def _take_back(self, me: _Worker) -> bool:
        """Take this worker off the idle list; if a waker took it first, consume its wake-up (False)."""
        try:
            self._idle.remove(me)
        except ValueError:
            me.wake.acquire()
            return False
        return True

    def shutdown(self, timeout: float) -> int:
        """Stop every worker once the work it can see is done; return how many did not stop in time."""
        with self._lock:
            self.closed = True
            workers = list(self._workers)
        while self._idle:
            self._wake_one()
        for queue in list(self.full_queues):  # their submitters see `closed` and give up
            queue._notify_room()
        stuck = 0
        for worker in workers:
            assert worker.thread is not None
            worker.thread.join(timeout)
            if worker.thread.is_alive():
                stuck += 1
        return stuck
