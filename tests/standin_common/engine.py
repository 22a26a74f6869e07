"""The simulated GPU behind the driver stand-ins: devices, contexts, streams and events.

TEST DOUBLE, not NVIDIA or AMD code. It follows the CUDA driver's documented behaviour on the
host, and the HIP runtime's where the two agree; each stand-in makes a :class:`State` of its own,
with its device class, the fault codes that poison a context, its diagnostics and a label:

- each stream has a worker thread (a "driver thread") that runs its operations in submission
  order; the legacy default stream (handle 0) runs them in the calling thread, after the blocking
  streams of the context have drained;
- a kernel fault is reported asynchronously; a sticky one poisons the whole context: its streams
  skip all later work (host functions included) and every later call on it returns the fault.
  The fault lasts as long as the simulated driver (the process): releasing or resetting the
  context destroys what was made in it but leaves the fault in place (the H100: "Nothing in the
  process recovers the device"); only a new State (the stand-ins' ``reset()``) clears it;
- an operation a caller waits for (a copy into pageable memory) can be cancelled if the wait
  gives up, so the stream never writes into memory its caller may have freed since;
- :class:`~standin_common.costs.CostMeter` counts what the driver was asked to do (``State.costs``);
- an event's timestamp is the device-side time at which its stream reached the record, never the
  time the worker thread happened to process it: the completion time of the work before it on
  the stream, or, on an idle stream, the time the record was submitted. A record does no work,
  so records with no work between them share one timestamp (back-to-back events read 0 ms
  elapsed, however loaded the host is), and a wait ends when the awaited record was reached.

Locking: one lock per :class:`State` (``State.lock``, with the condition ``State.cv``) guards
every table of the state and every mutable field of its contexts, streams, events and
allocations. It is held only for bookkeeping: never while an operation copies memory, a host
function runs or a kernel body runs, so a blocked host function blocks neither other streams
nor the API. Waits (stream/event sync, stream-wait-event) are ``cv.wait_for`` calls, which
release the lock and the GIL.
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .controls import DriverError, KernelFault, in_host_function
from .costs import CostMeter
from .memory import MemoryTables

SUCCESS = 0
NOT_READY = 600  # CUDA_ERROR_NOT_READY and hipErrorNotReady alike
LAUNCH_FAILED = 719  # CUDA_ERROR_LAUNCH_FAILED and hipErrorLaunchFailure alike

_handle_ids = itertools.count(1)  # never reset: handles of a reset driver never match new ones


def new_handle() -> int:
    return 0x7E5700000000 + next(_handle_ids) * 0x40


class SimulatedDevice:
    """What the engine needs of a GPU: its memory budget and its (primary) context.

    ``spec`` needs ``total_memory``, ``memory_budget`` (None: the total) and ``peers`` (the
    ordinals it can access directly; None: every other device). Subclasses describe the rest.
    """

    def __init__(self, ordinal: int, spec: Any) -> None:
        self.ordinal = ordinal
        self.spec = spec
        self.budget: int = spec.total_memory if spec.memory_budget is None else spec.memory_budget
        self.used = 0
        self.context = Context(self)

    def can_access(self, peer: SimulatedDevice) -> bool:
        if peer is self:
            return False
        return self.spec.peers is None or peer.ordinal in self.spec.peers

    def uses_host_pointers_for_registered_memory(self) -> bool:
        """Whether the device reaches registered host memory at its host address (a subclass reads
        its attribute for it)."""
        return True


class Context:
    """A device's primary context: one handle for the life of the driver, active while retained."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.handle = new_handle()
        self.refcount = 0
        self.flags = 0
        self.active = False
        self.sticky: int | None = None
        self.legacy_error: int | None = None  # a non-sticky fault of work on the legacy stream
        self.peers: set[int] = set()


@dataclass(eq=False)
class Event:
    handle: int
    ctx: Context
    flags: int
    recorded: int = 0  # how many times it was recorded (the sequence number of the newest record)
    done: int = 0  # the newest record the stream has reached
    time: float | None = None  # perf_counter() at which the stream reached the newest completed record
    gone: bool = False  # its context was destroyed: nothing will ever complete it


@dataclass(eq=False)
class Op:
    """One stream operation: ``run`` (None for a record or a wait), or a wait for ``event``."""

    kind: str
    run: Callable[[], None] | None = None
    event: Event | None = None
    seq: int = 0
    keep: Any = None  # objects the operation reads later (a caller's buffer)
    enqueued: float = field(default_factory=time.perf_counter)  # when the caller submitted it
    started: bool = False  # a stream thread runs it now (or ran it)
    finished: bool = False  # the stream is past it (ran, skipped or dropped)
    cancelled: bool = False  # its caller gave up waiting: the stream skips it


class Stream:
    def __init__(self, state: State, ctx: Context, flags: int) -> None:
        self.handle = new_handle()
        self.ctx = ctx
        self.flags = flags
        self.nonblocking = bool(flags & 1)
        self.ops: deque[Op] = deque()
        self.destroyed = False
        self.stop = False
        self.async_error: int | None = None
        # The stream's device clock: when its latest operation completed, the timestamp of its
        # newest record, and whether any operation ran since that record.
        self.last_done = 0.0
        self.last_stamp: float | None = None
        self.worked_since_stamp = True
        self.thread = threading.Thread(target=_worker, args=(state, self), daemon=True,
                                       name=f"{state.label}-stream-{self.handle:#x}")

    def reach_record(self, op: Op) -> float:
        """The time the stream reaches the record ``op`` (with the state's lock held)."""
        if self.last_stamp is not None and not self.worked_since_stamp:
            reached = self.last_stamp  # nothing ran since the previous record: the same instant
        else:
            reached = max(op.enqueued, self.last_done)  # when the work before it completed, or on submission
        self.last_stamp = reached
        self.worked_since_stamp = False
        self.last_done = max(self.last_done, reached)
        return reached

    def complete(self, op: Op, finished: float) -> None:
        """Advance the clock past the operation ``op`` that ended at ``finished`` (lock held)."""
        if op.kind == "wait" and op.event is not None and op.event.done == op.seq and op.event.time is not None:
            # A wait ends when the awaited record was reached (or when the stream got to it).
            finished = max(op.enqueued, self.last_done, op.event.time)
        self.last_done = finished
        self.worked_since_stamp = True


class State(MemoryTables):
    """One simulated driver instance (a fresh one per reset of a stand-in).

    ``make_device(ordinal, spec)`` makes the vendor's device; ``sticky`` lists the fault codes
    that poison a context; diagnostics go to ``diagnostics``; ``label`` names threads and warnings.
    """

    def __init__(self, devices: list[Any], driver_version: int, init_error: int | None,
                 library_missing: bool, *, make_device: Callable[[int, Any], Any], sticky: frozenset[int],
                 diagnostics: list[str], label: str) -> None:
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        super().__init__()
        self.devices: list[Any] = [make_device(i, spec) for i, spec in enumerate(devices)]
        self.sticky = sticky
        self.diagnostics = diagnostics
        self.label = label
        self.driver_version = driver_version
        self.init_error = init_error
        self.library_missing = library_missing
        self.initialized = False
        self.tls = threading.local()  # the calling thread's current context or device (front end's)
        self.contexts = {d.context.handle: d.context for d in self.devices}
        self.streams: dict[int, Stream] = {}
        self.live: set[Stream] = set()  # streams whose worker may still run (destroyed ones drain)
        self.events: dict[int, Event] = {}
        self.modules: dict[int, Any] = {}
        self.functions: dict[int, Any] = {}
        self.inline = 0  # legacy-stream operations running in callers' threads
        self.costs = CostMeter()
        # How long a call that must wait for its stream (a copy into pageable memory) waits before
        # it fails instead of hanging the test run: on a GPU it would wait for ever.
        self.blocking_call_timeout = 20.0

    # ---- contexts ------------------------------------------------------------------------------
    def deactivate_locked(self, ctx: Context) -> None:
        """The last release (or a reset) of a primary context: everything created in it goes away;
        a sticky fault stays (nothing in the process recovers the device)."""
        ctx.active = False
        self.destroy_contents_locked(ctx)

    def destroy_contents_locked(self, ctx: Context) -> None:
        """Destroy the streams, events, modules, allocations and registrations of ``ctx`` (its
        sticky fault stays)."""
        ctx.legacy_error = None
        ctx.peers.clear()
        for stream in self.streams_of_locked(ctx):
            stream.stop = True
            self.streams.pop(stream.handle, None)
            if stream.thread.ident is None:  # never ran anything: no worker to wind down
                self.live.discard(stream)
        for handle in [h for h, e in self.events.items() if e.ctx is ctx]:
            self.events.pop(handle).gone = True
        for handle in [h for h, m in self.modules.items() if m.ctx is ctx]:
            self.modules.pop(handle).unloaded = True
        for handle in [h for h, f in self.functions.items() if f.module.ctx is ctx]:
            del self.functions[handle]
        for alloc in [a for a in self.allocations.values() if a.device is ctx.device]:
            self.release_locked(alloc)
        for registration in [r for r in self.registered.values() if r.ctx is ctx]:
            self.unregister_host_locked(registration.host)
        self.cv.notify_all()

    def quiet_locked(self) -> bool:
        return not self.inline and not any(s.ops for s in self.live)

    # ---- streams -------------------------------------------------------------------------------
    def add_stream(self, ctx: Context, flags: int) -> Stream:
        """A new stream of ``ctx`` (its worker starts with its first operation)."""
        stream = Stream(self, ctx, flags)
        with self.lock:
            self.streams[stream.handle] = stream
            self.live.add(stream)
        return stream

    def enqueue(self, stream: Stream | None, ctx: Context, op: Op) -> None:
        """Queue ``op`` on ``stream`` (returns at once), or run it now on the legacy stream."""
        if stream is not None:
            with self.lock:
                stream.ops.append(op)
                if not stream.thread.is_alive() and stream.thread.ident is None:
                    stream.thread.start()
                self.cv.notify_all()
            return
        with self.cv:
            self.cv.wait_for(lambda: self.idle_locked(s for s in self.streams_of_locked(ctx) if not s.nonblocking))
            skip = ctx.sticky is not None or op.cancelled
            self.inline += 1
        code = None
        try:
            if op.kind == "wait" and not skip:
                with self.cv:
                    self.cv.wait_for(lambda: _reached(op) or ctx.sticky is not None)
            elif op.run is not None and not skip:
                code = self.run_op(op)
        finally:
            with self.cv:
                self.inline -= 1
                self.finish_locked(None, ctx, op, code)
                self.cv.notify_all()

    def wait_finished(self, op: Op, ctx: Context) -> bool:
        """Wait until the stream is past ``op`` or ``ctx`` is poisoned. False if that took longer
        than :attr:`blocking_call_timeout`: ``op`` is then cancelled (the stream skips it), unless
        it already runs, in which case this waits for it to end."""
        with self.cv:
            if self.cv.wait_for(lambda: op.finished or ctx.sticky is not None, self.blocking_call_timeout):
                return True
            op.cancelled = True
            self.cv.wait_for(lambda: op.finished or not op.started)
            return False

    def run_op(self, op: Op) -> int | None:
        in_host_function.active = op.kind == "host"
        try:
            assert op.run is not None
            op.run()
        except KernelFault as fault:
            return fault.code
        except Exception:  # noqa: BLE001  # a broken kernel implementation: a launch failure
            self.diagnostics.append(f"kernel implementation raised:\n{traceback.format_exc()}")
            return LAUNCH_FAILED
        finally:
            in_host_function.active = False
        return None

    def finish_locked(self, stream: Stream | None, ctx: Context, op: Op, code: int | None) -> None:
        op.finished = True
        if op.kind == "record" and op.event is not None:
            # The legacy stream runs in the caller's thread: it reaches the record now.
            reached = time.perf_counter() if stream is None else stream.reach_record(op)
            event = op.event
            if op.seq >= event.done:
                event.done = op.seq
                event.time = reached
        if code is not None:
            if code in self.sticky:
                ctx.sticky = ctx.sticky or code
            elif stream is not None:
                stream.async_error = stream.async_error or code
            else:
                ctx.legacy_error = ctx.legacy_error or code

    def idle_locked(self, streams: Iterable[Stream]) -> bool:
        return not any(s.ops for s in streams)

    def streams_of_locked(self, ctx: Context) -> list[Stream]:
        """The context's streams that may still run work, destroyed ones still draining included."""
        return [s for s in self.live if s.ctx is ctx]


def _reached(op: Op) -> bool:
    assert op.event is not None
    return op.event.done >= op.seq or op.event.gone


def _worker(state: State, stream: Stream) -> None:
    """A stream's driver thread: runs its operations in order; exits once destroyed and drained."""
    cv = state.cv
    while True:
        with cv:
            cv.wait_for(lambda: stream.ops or stream.stop or stream.destroyed)
            if stream.stop or not stream.ops:
                for op in stream.ops:  # the context is gone: mark events so no waiter hangs
                    state.finish_locked(stream, stream.ctx, op, None)
                stream.ops.clear()
                state.live.discard(stream)
                state.flush_graveyard_locked()
                cv.notify_all()
                return
            op = stream.ops[0]
            ctx = stream.ctx
            skip = ctx.sticky is not None or not ctx.active or op.cancelled
            op.started = not skip
        code = None
        if op.kind == "wait" and not skip:
            with cv:
                cv.wait_for(lambda: _reached(op) or stream.stop or ctx.sticky is not None)  # noqa: B023
        elif op.run is not None and not skip:
            code = state.run_op(op)
        finished = time.perf_counter()
        with cv:
            if op.kind != "record":
                stream.complete(op, finished)
            state.finish_locked(stream, ctx, op, code)
            stream.ops.popleft()
            state.flush_graveyard_locked()
            cv.notify_all()


def shut_down(state: State, timeout: float = 5.0) -> None:
    """Stop every worker of ``state`` and free its memory (leaked, with a warning, if one hangs)."""
    with state.cv:
        state.initialized = False
        for stream in state.live:
            stream.stop = True
        workers = [s.thread for s in state.live if s.thread.ident is not None]
        state.cv.notify_all()
    deadline = time.monotonic() + timeout
    for thread in workers:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for thread in workers if thread.is_alive()]
    if stuck:
        warnings.warn(f"{state.label}: stream workers still busy at reset (a host function or kernel "
                      f"blocks?): {stuck}; their memory is leaked", RuntimeWarning, stacklevel=3)
        return
    with state.lock:
        state.free_all_locked()
        state.inline = 0
        state.live.clear()
        state.flush_graveyard_locked()


__all__ = ["LAUNCH_FAILED", "NOT_READY", "SUCCESS", "Context", "DriverError", "Event", "Op", "SimulatedDevice",
           "State", "Stream", "new_handle", "shut_down"]
