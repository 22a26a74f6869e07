"""How the host device executes queued work: in-order queues served by the device's worker pool.

A :class:`HostQueue` holds its items in submission order; whichever worker of the device's
:class:`~.pool.WorkerPool` has *claimed* the queue runs them, one queue on one worker at a time,
so items of one queue never overlap and run in order. Kernels run with the GIL released; a
launch of several work-groups spreads over idle workers (:meth:`WorkerPool.run_groups`).

Design invariants (the program unload in :mod:`.image` relies on the first):

- An item stays at the head of ``_items`` until it has run (or been skipped), so a queue is idle
  exactly when ``_items`` is empty.
- A queue is claimed (``_claim`` held, ``_serving`` set) from the moment it is handed to the pool
  until a worker finds it empty: while claimed it is in the pool's ready list, being served, or
  suspended in a wait for an event, and submitters only append. The worker that finds it empty
  releases the claim and looks once more, so an item appended meanwhile is never stranded.
- Once the queue failed, later items are skipped; events and sync markers among them are still
  released, so nothing waits forever on a failed queue.
- A cross-queue wait never blocks a thread: a queue reaching a wait for an event that is not
  reached yet is *suspended* (it keeps its claim) and the event hands it back to the pool.
- A queue holds at most ``depth`` items a user gave it (:attr:`HostQueue.depth`, from
  ``OFFLOADRT_HOST_QUEUE_DEPTH``: see :func:`.pool.queue_depth_setting`): a submit to a full queue
  waits for room (:meth:`HostQueue.wait_for_room`), as a GPU driver's launch blocks once its
  launch queue is full. The runtime's own markers (a sync's, a free's, a program unload's) never
  wait, so they may take a queue past ``depth`` by a few. A host function never waits for room:
  its submit to a full queue raises ``INVALID_ARGUMENT`` (see :meth:`HostQueue.wait_for_room`).
"""

from __future__ import annotations

import struct
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice, repeat, starmap
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ...errors import ErrorCode, OffloadError, OffloadWarning
from ..common.resources import AsyncInfo, GenericEvent, QueueFailure, host_function_thread, set_host_function_queue
from .dispatch import BYTES_DATA_OFFSET, KERNEL_PROTOTYPE, Latch, LaunchStruct, kernel_fault, thread_state

if TYPE_CHECKING:
    from .image import HostKernel
    from .pool import WorkerPool

__all__ = ["ARGS_OFFSET", "BATCHED_ITEMS", "CALL", "HOST_FUNCTION", "KERNEL", "KERNEL_PROTOTYPE", "LAUNCH", "WAIT",
           "HostEvent", "HostQueue", "LaunchStruct", "Latch", "after_queued_work", "kernel_fault", "kernel_item",
           "pack_call", "program_gone"]


class HostEvent(GenericEvent):
    """A marker in a host queue; ``time_ns`` is when the queue reached it.

    Queues suspended in a wait for it are in ``waiters``; opening the event hands each back to
    its pool. A waiter adds itself and then looks at ``latch.is_open``, the event opens and then
    takes waiters out one by one: either may take a waiter (``list.remove``/``list.pop`` are
    atomic), never both, so each suspended queue is resumed exactly once.
    """

    __slots__ = ("latch", "time_ns", "waiters")

    def __init__(self, device: object, timed: bool = False):
        super().__init__(device, timed)
        self.latch = Latch()
        self.time_ns = 0
        self.waiters: list[HostQueue] = []

    def reach(self, _arg: object = None) -> None:
        self.time_ns = time.perf_counter_ns()
        self._open()

    def skip(self, _arg: object, failure: QueueFailure) -> None:
        self.failure = failure
        self.time_ns = time.perf_counter_ns()
        self._open()

    def _open(self) -> None:
        self.latch.open()
        waiters = self.waiters
        while waiters:
            try:
                queue = waiters.pop()
            except IndexError:
                break
            queue.pool.push(queue)

    def suspend(self, queue: HostQueue) -> bool:
        """Suspend ``queue`` until the event opens; False when it is open already (go on)."""
        self.waiters.append(queue)
        if self.latch.is_open:
            try:
                self.waiters.remove(queue)
            except ValueError:
                return True  # the opening took it: it is handed back to the pool
            return False
        return True


# A queue item is a tuple whose first element says what it is:
#   (CALL, run, arg, skip): run(arg); skip is None or skip(arg, failure), called instead once the queue failed.
#   (HOST_FUNCTION, callback, user_data, None): a user's host function, which may block.
#   (KERNEL, record, kernel, args, launch_address): a launch of one work-group without work-group
#       memory, with a prepared read-only launch struct; record is its ol_host_call_t for the batch runner.
#   (LAUNCH, kernel, args, (num_groups, group_size, dyn_shared_memory)): any other launch.
#   (WAIT, event, None, None): later items wait for the event; its queue's failure becomes this one's.
# Items are never changed, so one item may sit in a queue several times (a launcher reuses them).
CALL = 0
KERNEL = 1
HOST_FUNCTION = 2
LAUNCH = 3
WAIT = 4
_KERNEL_TAG = bytes([KERNEL])
BATCH_LIMIT = 1024  # queued one-group launches handed to the batch runner in one call
MIN_BATCH = 8  # shorter runs are called one by one: setting a batch up costs about six single calls
#: the longest one wait of a submitter blocked on a full queue lasts before it looks again (it is woken
#: at once by every item that finishes, a failure and shutdown; the slice bounds each wait so that
#: Ctrl-C reaches a blocked main thread on every Python)
ROOM_WAIT_SLICE_S = 0.25
FAIR_SHARE = 64  # items a worker runs of one queue before it serves another ready queue
GATHER_LIMIT = 256  # queues whose launches one batch runner call may run
#: whether a KERNEL item's record holds its blob's address (then runs of them go to the batch runner)
BATCHED_ITEMS = BYTES_DATA_OFFSET is not None
ARGS_OFFSET = BYTES_DATA_OFFSET or 0  # a bytes blob's data address less its id()
pack_call = struct.Struct("@PPP").pack  # ol_host_call_t

_tag_of = itemgetter(0)
_record_of = itemgetter(1)
_kernel_of = itemgetter(2)


def kernel_item(kernel: HostKernel, args: bytes | None, launch_address: int) -> tuple[Any, ...]:
    """The KERNEL item of a one-group launch (``args`` is ``bytes`` or None; the item keeps it alive)."""
    record: bytes | None
    if args is None:
        record = pack_call(kernel.address, 0, launch_address)
    else:
        record = pack_call(kernel.address, id(args) + ARGS_OFFSET, launch_address) if BATCHED_ITEMS else None
    return (KERNEL, record, kernel, args, launch_address)


def program_gone(name: str) -> OffloadError:
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"kernel '{name}' did not run: its program was destroyed before the launch could start")


def _host_function_error(exc: BaseException) -> OffloadError:
    if isinstance(exc, OffloadError):
        return exc
    err = OffloadError(ErrorCode.UNKNOWN, f"host function raised {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def _open_latch(latch: Latch) -> None:
    latch.open()


def _open_latch_skipped(latch: Latch, _failure: QueueFailure) -> None:
    latch.open()


class HostQueue(AsyncInfo):
    """An in-order queue of the host device, run by its worker pool (see the module docstring)."""

    __slots__ = ("_items", "_claim", "_serving", "pool", "depth", "_room", "submitters_waiting")

    def __init__(self, device: object, pool: WorkerPool):
        super().__init__(device)
        self._items: deque[tuple[Any, ...]] = deque()
        self._claim = threading.Lock()  # held while the queue is ready, being served or suspended
        self._serving = False  # set while claimed; read without the lock by submitters
        self.pool = pool
        #: the most items a submit leaves in the queue (the one running included); a submit to a
        #: queue holding as many waits for room
        self.depth = pool.queue_depth
        # Guards submitters_waiting; submitters waiting for room wait on it, and whoever takes an
        # item off while one waits, fails the queue's waiters or closes the pool notifies it.
        self._room = threading.Condition(threading.Lock())
        #: submitting threads blocked in wait_for_room (read without the lock by the worker)
        self.submitters_waiting = 0

    # ---- submitting -------------------------------------------------------------------------
    def push(self, item: tuple[Any, ...]) -> None:
        """Append a user's item, after waiting for room if the queue is full (:meth:`wait_for_room`)."""
        if len(self._items) >= self.depth:
            self.wait_for_room()
        self._items.append(item)
        if not self._serving:
            self.schedule()

    def _push_marker(self, item: tuple[Any, ...]) -> None:
        """Append one of the runtime's own markers: never waits (see the module docstring)."""
        self._items.append(item)
        if not self._serving:
            self.schedule()

    def schedule(self) -> None:
        """Hand the queue to the pool unless it is claimed already (call after an append)."""
        if self._claim.acquire(False):
            self._serving = True
            self.pool.push(self)

    def submit(self, run: Callable[[Any], object], arg: Any,
               skip: Callable[[Any, QueueFailure], object] | None = None) -> None:
        """Run ``run(arg)`` in queue order; ``skip(arg, failure)`` instead if the queue failed.

        A copy, a fill or an event record waits for room in a full queue (:meth:`push`); a marker
        of the runtime's bookkeeping, whose ``skip`` is ``run`` itself (it runs whether or not the
        queue failed: a free's, a program unload's), never does: the call that adds it (olMemFree,
        olDestroyProgram) must neither block on a full queue nor be refused in a host function.
        """
        if skip is not None and skip == run:  # == : a bound method is a new object at each access
            self._push_marker((CALL, run, arg, skip))
        else:
            self.push((CALL, run, arg, skip))

    def submit_host_function(self, callback: Callable[[Any], object], user_data: Any) -> None:
        self.push((HOST_FUNCTION, callback, user_data, None))

    def submit_wait(self, event: HostEvent) -> None:
        self.push((WAIT, event, None, None))

    def wait_for_room(self) -> None:
        """Block the calling thread until the queue holds fewer than :attr:`depth` items.

        It wakes as soon as an item finishes (the worker notifies :attr:`_room`), and raises
        instead of waiting on: ``QUEUE_ERROR`` once the queue failed (what a submit to a failed
        queue raises), ``UNINITIALIZED`` once the device shut down, ``INVALID_ARGUMENT`` at once
        in a host function (see :meth:`_refuse_in_host_function`). No lock but :attr:`_room`
        is held while it waits, and that one is released by the wait; an exception (Ctrl-C
        included) leaves the queue as it was: the caller's item is not appended.
        """
        running = host_function_thread.queue
        if running is not None:
            raise self._refuse_in_host_function(running)
        room, items, pool = self._room, self._items, self.pool
        with room:
            self.submitters_waiting += 1
            if self.submitters_waiting == 1:
                pool.full_queues.add(self)  # shutdown wakes it (WorkerPool.shutdown)
            try:
                while True:
                    if self.failure is not None:
                        raise self.queue_error()
                    if len(items) < self.depth:
                        return
                    if pool.closed:
                        raise OffloadError(ErrorCode.UNINITIALIZED,
                                           f"the host device was shut down (olShutDown) while this call waited "
                                           f"for room in {self.owner or 'a queue'}, which holds {len(items)} "
                                           f"items (OFFLOADRT_HOST_QUEUE_DEPTH={self.depth}); the work was "
                                           f"not queued")
                    room.wait(ROOM_WAIT_SLICE_S)
            finally:
                self.submitters_waiting -= 1
                if not self.submitters_waiting:
                    pool.full_queues.discard(self)

    def _refuse_in_host_function(self, running: AsyncInfo) -> OffloadError:
        """The error of a host function's submit to a full queue. Waiting for room there could
        wait forever: for its own queue, the room comes only when the host function returns; for
        another, that queue may wait (olWaitEvents) on work behind this host function, and a
        blocked worker also holds up every queue it would serve. Refusing is the one safe answer
        the runtime can give without proving there is no such cycle."""
        where = (f"its own queue {self.owner or ''}".rstrip() if running is self
                 else f"{self.owner or 'another queue'} (it runs in the order of {running.owner or 'a queue'})")
        return OffloadError(
            ErrorCode.INVALID_ARGUMENT,
            f"a host function cannot submit work to {where} while it is full ({len(self._items)} items, "
            f"OFFLOADRT_HOST_QUEUE_DEPTH={self.depth}): it would have to wait for room, and that room may come "
            f"only after the host function itself returns, so it could never return. Submit that work from "
            f"an ordinary thread, or raise OFFLOADRT_HOST_QUEUE_DEPTH")

    def _notify_room(self) -> None:
        """Wake the submitters waiting for room (an item finished, or the queue failed)."""
        room = self._room
        with room:
            room.notify_all()

    def is_idle(self) -> bool:
        return not self._items

    def is_alive(self) -> bool:
        """Whether a thread could still run this queue's work (its pool has a live worker)."""
        return self.pool.has_threads()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every item submitted so far finished (or was skipped after a failure)."""
        if not self._items:
            return True
        marker = Latch()
        self._push_marker((CALL, _open_latch, marker, _open_latch_skipped))
        return marker.wait(-1 if timeout is None else timeout)

    # ---- serving (on a pool worker that holds the claim) ------------------------------------
    def serve(self, pool: WorkerPool) -> None:
        """Run items until the queue is empty, suspended, or owes other ready queues a turn."""
        items = self._items
        done = 0
        while True:
            if self.submitters_waiting:  # an item was taken off (or the queue failed): there is room
                self._notify_room()
            if not items:
                self._serving = False
                self._claim.release()
                if items and self._claim.acquire(False):  # appended after we looked: ours again
                    self._serving = True
                    continue
                return
            if done >= FAIR_SHARE and pool.ready:
                pool.ready.append(self)  # let the other ready queues have a turn; the claim stays
                return
            if self.failure is not None:
                done += self._skip_one(items)
                continue
            item = items[0]
            tag = item[0]
            if tag is KERNEL:
                done += self._run_kernels(pool, items, item)
                continue
            if tag is WAIT:
                event = item[1]
                if not event.latch.is_open and event.suspend(self):
                    return  # the event hands the queue back to the pool, still claimed
                if event.failure is not None:
                    self.adopt(event.failure)
            elif tag is CALL:
                if item[1] is _open_latch:  # a sync's marker: taken off first, so that the queue
                    items.popleft()  # reads idle (olQueryQueue) once the waiting thread wakes
                    done += 1
                    item[2].open()
                    continue
                try:
                    item[1](item[2])
                except BaseException as exc:  # noqa: BLE001  # the queue fails; the worker goes on
                    self.fail(_host_function_error(exc))
            elif tag is HOST_FUNCTION:
                self._run_host_function(pool, item)
            else:  # LAUNCH
                self._run_launch(pool, item)
            items.popleft()
            done += 1

    def _run_host_function(self, pool: WorkerPool, item: tuple[Any, ...]) -> None:
        """Call a user's host function; while it runs, the API knows this thread runs one (and
        refuses to wait in it) and the pool does not count this worker."""
        set_host_function_queue(self)
        pool.enter_blocking()
        try:
            item[1](item[2])
        except BaseException as exc:  # noqa: BLE001  # the queue fails; the worker goes on
            self.fail(_host_function_error(exc))
        finally:
            pool.leave_blocking()
            set_host_function_queue(None)

    def _skip_one(self, items: deque[tuple[Any, ...]]) -> int:
        item = items[0]
        if item[3] is _open_latch_skipped:  # a sync's marker: off the queue before the waiter wakes
            items.popleft()
            item[2].open()
            return 1
        if item[0] is CALL and item[3] is not None:
            try:
                item[3](item[2], self.failure)
            except BaseException as exc:  # noqa: BLE001  # a skip hook must not stop the queue
                self.fail(_host_function_error(exc))
        items.popleft()
        return 1

    def _run_launch(self, pool: WorkerPool, item: tuple[Any, ...]) -> None:
        kernel, args, (num_groups, group_size, dyn) = item[1], item[2], item[3]
        if not kernel.image.may_run(self):
            self.fail(program_gone(kernel.name))
            return
        try:
            pool.run_groups(kernel, args, num_groups, group_size, dyn)
        except OffloadError as exc:
            self.fail(exc)

    def _run_kernels(self, pool: WorkerPool, items: deque[tuple[Any, ...]], head: tuple[Any, ...]) -> int:
        """Run the one-group launches at the head: with the batch runner, the run of them at the
        head, joined by those at the heads of other ready queues (see :meth:`_gather`), in one
        native call when that saves calls; else the head alone. Returns how many items were taken
        from this queue."""
        kernel: HostKernel = head[2]
        image = kernel.image
        # A launch racing olDestroyProgram must not call into a closed library (HostImage.may_run).
        if image.unloaded and not image.may_run(self):
            self.fail(program_gone(kernel.name))
            items.popleft()
            return 1
        runners = kernel.runners
        if runners is not None and BATCHED_ITEMS and (
                pool.ready or (len(items) >= MIN_BATCH and items[MIN_BATCH - 1][0] is KERNEL)):
            run = self._leading_kernels(BATCH_LIMIT)
            if run is not None:
                parts = [(self, run)]
                total = len(run)
                if total < BATCH_LIMIT and pool.ready:
                    total = _gather(pool, parts, total)
                if total >= MIN_BATCH or len(parts) > 1:
                    return self._run_batch(pool, parts, total, runners)
        status = kernel.fn(head[3], head[4])
        if status:
            self.fail(kernel_fault(kernel.name, status, (0, 0, 0)))
        items.popleft()
        return 1

    def _leading_kernels(self, limit: int) -> list[tuple[Any, ...]] | None:
        """The run of one-group launches at the head (at most ``limit``), or None when there is none
        or one of its kernels has no runners or may not run any more (the single path decides)."""
        items = self._items
        if len(items) < 2 or items[1][0] is not KERNEL:  # a run of one: no copies
            head = items[0]
            if head[0] is not KERNEL:
                return None
            run = [head]
            kernels: Iterable[HostKernel] = (head[2],)
        else:
            run = _head_of(items, limit)
            tags = bytes(map(_tag_of, run))
            count = len(tags) - len(tags.lstrip(_KERNEL_TAG))
            if count < len(run):
                del run[count:]
            kernels = set(map(_kernel_of, run))
        for kernel in kernels:
            if kernel.runners is None or (kernel.image.unloaded and not kernel.image.may_run(self)):
                return None
        return run

    def _run_batch(self, pool: WorkerPool, parts: list[tuple[HostQueue, list[tuple[Any, ...]]]], total: int,
                   runners: Any) -> int:
        """Run the launches of ``parts`` (this queue's first) in one native call; pop what ran, fail
        the queue whose launch faulted, hand the other queues back. Returns how many items were
        taken from this queue."""
        state = thread_state()
        if len(parts) == 1:
            records = b"".join(map(_record_of, parts[0][1]))
        else:
            records = b"".join([b"".join(map(_record_of, run)) for _, run in parts])
        left = runners.call_all(records, total, state.status_address)  # how many ran before a fault
        taken_here = 0
        for queue, run in parts:
            count = len(run)
            queue_items = queue._items
            if left >= count:
                taken = count
                left -= count
            elif left >= 0:  # the launch at run[left] faulted; nothing after it ran
                taken = left + 1
                queue.fail(kernel_fault(run[left][2].name, state.status.value, (0, 0, 0)))
                left = -1
            else:
                taken = 0
            deque(starmap(queue_items.popleft, repeat((), taken)), 0)  # in C
            if taken and queue.submitters_waiting:
                queue._notify_room()
            if queue is self:
                taken_here = taken
            else:
                queue.hand_back(pool)
        return taken_here

    def recover(self, pool: WorkerPool, exc: Exception) -> None:
        """After :meth:`serve` raised (a bug of the runtime, never of user code, whose errors fail
        the queue): warn, fail the queue, and hand it back, so the worker lives on and the queue's
        remaining work is skipped (its syncs and events are released) instead of hanging."""
        warnings.warn(f"offloadrt: a host worker failed while running {self.owner or 'a queue'}: {exc!r}; "
                      f"the queue is put in the error state", OffloadWarning, stacklevel=2)
        error = OffloadError(ErrorCode.UNKNOWN, f"the host worker running the queue failed: {exc!r}")
        error.__cause__ = exc
        self.fail(error)
        try:
            self.hand_back(pool)
        except RuntimeError:  # the claim was released already (serve raised on its way out)
            pass

    def hand_back(self, pool: WorkerPool) -> None:
        """Give up serving this claimed queue: to the ready list when it has work, else release the
        claim (and take it once more if work came in meanwhile, as :meth:`serve` does)."""
        if not self._items:
            self._serving = False
            self._claim.release()
            if not (self._items and self._claim.acquire(False)):
                return
            self._serving = True
        pool.push(self)  # wakes an idle worker: this one may be held up by its own queue's next item


def _head_of(items: deque[tuple[Any, ...]], limit: int) -> list[tuple[Any, ...]]:
    """The first ``limit`` items. ``list(islice(...))`` copies them in C without letting another
    thread run, but another thread may append between making the iterator and the copy: then
    the iterator refuses to go on, and the copy starts over."""
    while True:
        try:
            return list(islice(items, limit))
        except RuntimeError:  # "deque mutated during iteration"
            continue


def _gather(pool: WorkerPool, parts: list[tuple[HostQueue, list[tuple[Any, ...]]]], total: int) -> int:
    """Take ready queues whose heads are one-group launches that can run in the batch runner and add
    their runs to ``parts``, up to :data:`BATCH_LIMIT` launches; return the new total. Launches of
    different queues have no order between them, so one call may run them one queue after
    another: with many queues of a few launches each, that saves a visit and a call per queue."""
    ready = pool.ready
    while total < BATCH_LIMIT and len(parts) < GATHER_LIMIT:
        try:
            queue = ready.popleft()  # its claim passes to this worker
        except IndexError:
            break
        run = None
        if queue.failure is None and queue._items and queue._items[0][0] is KERNEL:
            run = queue._leading_kernels(BATCH_LIMIT - total)
        if run is None:
            ready.appendleft(queue)  # not a launch at its head: left for a worker to serve
            break
        parts.append((queue, run))
        total += len(run)
    return total


def after_queued_work(queues: list[HostQueue], action: Callable[[Any], object], arg: Any) -> None:
    """Run ``action(arg)`` once each of ``queues`` has finished (or skipped) the work it holds now.

    It runs on the worker of the queue that gets there last, or at once when ``queues`` is empty.
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
