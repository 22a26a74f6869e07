"""The state of tests/test_api_state_machine.py's machine: the runtime's handles next to their
model, the start and end of a runtime (with the thread and UNINITIALIZED checks), and the
helpers the rules share (picking handles, bad arguments, queue outcomes, data checks)."""

from __future__ import annotations

import ctypes
import functools
import inspect
import itertools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from state_machine_model import Buffer, Clock, Doom, EventModel, Model, QueueModel, Registrations, known
from state_machine_support import Caller, Gate, Names, Stats, Violation, Watchdog

from offloadrt import DeviceInfo, DeviceType, ErrorCode, PlatformBackend, SymbolKind, api

E = ErrorCode
ENTRY_POINTS = sorted(name for name in api.__all__ if name.startswith("ol"))
JOIN_WAIT = 10.0  # longest the test waits for a leaked thread before reporting it
WRONG_USER_DATA = b"<the host function got another user_data>"
PARKED_LIMIT = 64  # busy destroyed queues a device parks before olCreateQueue waits for the oldest


def step(fn: Callable[..., None]) -> Callable[..., None]:
    """Mark a rule's start and end, so that teardown knows whether a step failed half-way."""

    @functools.wraps(fn)
    def run(self: World, **kwargs: Any) -> None:
        self.begin(fn.__name__)
        try:
            fn(self, **kwargs)
        except BaseException as exc:
            self.remember_failure(exc)
            raise
        self.end_step()

    return run


@dataclass
class ProgramModel:
    ident: int
    name: str
    handle: api.Program
    destroyed: bool = False
    symbols: dict[tuple[str, SymbolKind], api.Symbol] = field(default_factory=dict)
    globals: dict[str, Buffer] = field(default_factory=dict)


@dataclass
class SymbolModel:
    name: str
    kind: SymbolKind
    program: ProgramModel
    handle: api.Symbol
    label: str


@dataclass
class HostCall:
    """A host function the test queued and what it must have done."""

    label: str
    kind: str  # "record", "snapshot" or "api"
    op: Any = None  # the model's Op (None when it is queued behind a failure and must never run)
    ran: threading.Event = field(default_factory=threading.Event)
    captured: bytes | None = None
    expected: Buffer | None = None
    checked: bool = False
    # "api": the calls it made: name, what it must give ("ok", "False" or an error code name), the
    # handles it uses (destroyed since, they may have been gone when it ran), what it gave
    calls: list[tuple[str, str, list[Any], str]] = field(default_factory=list)
    runtime: int = 0  # which runtime (olInit ... last olShutDown) it was queued in


class World(RuleBasedStateMachine):
    """Handles and model of one run; the rules live in the state_machine_rules_* mixins."""

    IMAGE: bytes = b""
    stats = Stats()
    trace: deque[str] = deque(maxlen=20000)
    watchdog: Watchdog | None = None
    first_failure: list[str] = []  # the trace when the first violation happened (a replay may pass)

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        if cls.watchdog is None:
            cls.watchdog = Watchdog(30.0, cls.trace)
        self.stats.examples += 1
        self.trace.clear()
        self.trace.append(f"# example {self.stats.examples}")
        self.names = Names(self.describe_address)
        self.api = Caller(self.stats, cls.watchdog, self.names, self.trace)
        self.baseline = set(threading.enumerate())
        self.ids = itertools.count(1)
        self.refcount = 0
        self.runtime = 0
        self.in_step: str | None = None
        self.plain: list[Buffer] = []  # host memory the test owns (outlives runtimes)
        self.gates: list[Gate] = []
        self.host_calls: list[HostCall] = []
        self.stale: dict[str, Any] = {}
        self.fresh_runtime()

    def fresh_runtime(self) -> None:
        self.model = Model(self.trace.append)
        self.registrations = Registrations()
        self.host: api.Device | None = None
        self.platform: api.Platform | None = None
        self.queues: list[QueueModel] = []
        self.events: list[EventModel] = []
        self.programs: list[ProgramModel] = []
        self.symbols: list[SymbolModel] = []
        self.allocations: list[Buffer] = []  # live
        self.freed: list[Buffer] = []
        self.destroyed_queues = 0
        self.model.learn_everything()

    # ---- names and picks -----------------------------------------------------------------------
    def new_name(self, prefix: str) -> str:
        return f"{prefix}{next(self.ids)}"

    def describe_address(self, address: int) -> str | None:
        for buf in itertools.chain(self.allocations, self.plain, self.global_buffers(), self.freed):
            if buf.address <= address < buf.address + buf.size:
                state = "" if buf.live else "(freed)"
                return f"{buf.name}{state}+{address - buf.address}"
        return None

    def remember_failure(self, exc: BaseException) -> None:
        if not World.first_failure:
            World.first_failure = [*self.trace, f"# {type(exc).__name__}: {exc}"]

    def begin(self, rule: str) -> None:
        self.in_step = rule
        self.stats.steps += 1
        self.stats.rules[rule] += 1
        self.trace.append(f"## {rule}")

    def end_step(self) -> None:
        self.in_step = None

    def global_buffers(self) -> list[Buffer]:
        return [buf for p in self.programs for buf in p.globals.values() if buf.live]

    def live_buffers(self) -> list[Buffer]:
        return [b for b in itertools.chain(self.allocations, self.plain, self.global_buffers()) if b.live]

    def live_queues(self) -> list[QueueModel]:
        return [q for q in self.queues if not q.destroyed]

    def live_events(self) -> list[EventModel]:
        return [e for e in self.events if not e.destroyed]

    def live_programs(self) -> list[ProgramModel]:
        return [p for p in self.programs if not p.destroyed]

    def allocation_at(self, address: int) -> Buffer | None:
        for buf in self.allocations:
            if buf.address <= address < buf.address + buf.size:
                return buf
        return None

    def wrong_handles(self, wanted: type) -> list[object]:
        """Values of the wrong type for a ``wanted`` handle parameter."""
        candidates: list[object] = [object(), "handle", 1234, self.host, self.platform]
        candidates += [q.handle for q in self.queues[-1:]] + [e.handle for e in self.events[-1:]]
        candidates += [p.handle for p in self.programs[-1:]] + [s.handle for s in self.symbols[-1:]]
        return [c for c in candidates if c is not None and type(c) is not wanted]

    def draw_wrong(self, data: st.DataObject, wanted: type) -> object:
        return data.draw(st.sampled_from(self.wrong_handles(wanted)), label="wrong handle")

    # ---- queue outcomes ----------------------------------------------------------------------------
    @staticmethod
    def work_outcome(queue: QueueModel | None) -> tuple[bool, set[ErrorCode]]:
        """Whether new work on ``queue`` may be accepted, and the errors it may raise."""
        if queue is None:
            return True, set()
        if queue.destroyed:
            return False, {E.INVALID_QUEUE}
        if queue.failure_seen:
            return False, {E.QUEUE_ERROR}
        return True, set()  # on a queue bound to fail (held by a gate, see observe_failures): skipped

    def failure_seen(self, queue: QueueModel) -> None:
        """A call reported ``queue``'s failure: the work before its failure point has finished."""
        if queue.doom is None:
            raise Violation("model-mismatch", f"{queue.name} reported a failure, but nothing on it can fail")
        queue.failure_seen = True
        self.model.learn(queue.doom.finished)

    def after_work(self, queue: QueueModel | None, ok: bool, result: Any) -> bool:
        """Account for the outcome of queueing work; True when the work will run."""
        if queue is None:
            return ok
        if not ok and isinstance(result, Exception) and getattr(result, "code", None) == E.QUEUE_ERROR:
            self.failure_seen(queue)
        return ok and queue.doom is None

    def doom(self, queue: QueueModel, origins: frozenset[tuple[int, str]], holds: Clock,
             observe: bool = True) -> None:
        """Work that fails is queued on ``queue`` (everything before it still runs); it fails once
        everything ``holds`` covers has finished."""
        if queue.doom is None:
            queue.doom = Doom(origins, dict(holds))
            self.model.tick(queue)
            if observe:
                self.observe_failures()

    def blocked(self, clock: Clock) -> bool:
        """Whether what ``clock`` covers waits for a closed gate (so it cannot have finished)."""
        return any(clock.get(gate.queue, 0) >= gate.seq for gate in self.gates)

    def held(self, doom: Doom) -> bool:
        """Whether a closed gate keeps the failure from happening."""
        return self.blocked(doom.finished)

    def observe_failures(self) -> None:
        """Make every failure that nothing holds back seen at once (olSyncQueue raises when it has
        happened), so that later calls have one outcome, not one that depends on timing: a queue
        is bound to fail but not yet seen failing only while a closed gate holds the failure."""
        for queue in self.live_queues():
            if queue.doom is not None and not queue.failure_seen and not self.held(queue.doom):
                self.api.call("olSyncQueue", queue.handle, ok=False, codes={E.QUEUE_ERROR})
                self.failure_seen(queue)

    def open_gates(self) -> None:
        """Before any call that may block: nothing may wait on a closed gate."""
        for gate in self.gates:
            gate.open()
        self.gates = []
        self.observe_failures()

    # ---- data checks ---------------------------------------------------------------------------------
    def check_buffer(self, buf: Buffer) -> None:
        compared, wrong = self.model.mismatches(buf, buf.actual())
        self.stats.checks["bytes compared"] += compared
        if wrong:
            raise Violation("model-mismatch", f"{buf.name} ({buf.kind}, {buf.size} bytes at {buf.address:#x}) "
                                              f"does not hold what the model expects: " + "; ".join(wrong))

    def check_host_calls(self) -> None:
        for call in self.host_calls:
            if call.checked:
                continue
            if call.op is None:
                if call.ran.is_set():
                    raise Violation("model-mismatch", f"{call.label} ran although it was queued behind a failure")
                continue
            if not call.op.done:
                continue
            if not call.ran.is_set():
                raise Violation("model-mismatch", f"{call.label} has finished for the model but never ran")
            call.checked = True
            if call.captured == WRONG_USER_DATA:
                raise Violation("wrong-outcome", f"{call.label} was not called with the user_data it was given")
            for name, expected, handles, outcome in call.calls:
                self.stats.calls[f"{name} (in a host function)"] += 1
                if call.runtime != self.runtime or self.refcount == 0 or any(h.destroyed for h in handles):
                    # it may have run after a handle was destroyed, or while olShutDown drained the queues
                    late = {"UNINITIALIZED", "INVALID_QUEUE", "INVALID_EVENT"}
                    if outcome in late:
                        continue
                if outcome != expected:
                    category = "non-OffloadError" if outcome.startswith("!") else "wrong-outcome"
                    raise Violation(category, f"{call.label}: {name} inside the host function gave {outcome}, "
                                              f"expected {expected}")
            if call.kind == "snapshot":
                assert call.expected is not None and call.captured is not None
                compared, wrong = self.model.mismatches(call.expected, call.captured)
                self.stats.checks["snapshot bytes compared"] += compared
                if wrong:
                    raise Violation("model-mismatch", f"{call.label} saw other bytes than the model expects at its "
                                                      f"place in queue order: " + "; ".join(wrong))

    def check_all(self) -> None:
        for buf in self.live_buffers():
            self.check_buffer(buf)
        self.check_host_calls()

    # ---- start and end of a runtime ----------------------------------------------------------------
    def start_runtime(self, platforms: Any = None) -> None:
        self.api.call("olInit", platforms)
        self.refcount = 1
        self.runtime += 1
        devices: list[api.Device] = []
        self.api.call("olIterateDevices", lambda device, _: devices.append(device), None)
        hosts = [d for d in devices if self.api.call("olGetDeviceInfo", d, DeviceInfo.TYPE)[1] == DeviceType.HOST]
        if len(hosts) != 1:
            raise Violation("wrong-outcome", f"expected one host device, found {hosts}")
        self.host = hosts[0]
        self.names.add(self.host, "host")
        self.platform = self.api.call("olGetDeviceInfo", self.host, DeviceInfo.PLATFORM)[1]
        self.names.add(self.platform, "host_platform")
        backend = self.api.call("olGetPlatformInfo", self.platform, 3)[1]  # PlatformInfo.BACKEND
        if backend != PlatformBackend.HOST:
            raise Violation("wrong-outcome", f"the host device's platform reports backend {backend!r}")

    def end_runtime(self) -> None:
        """Drain and check everything, shut the runtime down to refcount 0, check the threads, the
        data that outlives it, and that every entry point is UNINITIALIZED now."""
        self.open_gates()
        for queue in self.live_queues():
            self.sync_queue(queue)
        self.check_all()
        stale = {"queue": [q.handle for q in self.queues[-2:]], "event": [e.handle for e in self.events[-2:]],
                 "program": [p.handle for p in self.programs[-2:]], "symbol": [s.handle for s in self.symbols[-2:]],
                 "device": [self.host], "platform": [self.platform],
                 "pointer": [b.address for b in self.allocations[-2:]]}
        while self.refcount:
            self.api.call("olShutDown")
            self.refcount -= 1
        self.model.learn_everything()
        for buf in self.allocations:
            buf.live = False
        for buf in self.global_buffers():
            buf.live = False
        for buf in self.plain:
            self.check_buffer(buf)
        self.check_host_calls()
        self.check_threads()
        self.check_uninitialized(stale)
        self.stale = stale
        self.fresh_runtime()

    def check_threads(self) -> None:
        extra = [t for t in threading.enumerate() if t not in self.baseline]
        if not extra:
            self.stats.checks["thread baselines"] += 1
            return
        names = [t.name for t in extra]
        for thread in extra:  # do not let them spill into the next run
            thread.join(JOIN_WAIT)
        still = [t.name for t in extra if t.is_alive()]
        raise Violation("thread-leak", f"after the last olShutDown returned, {len(extra)} thread(s) besides the "
                                       f"baseline were alive: {names}; after {JOIN_WAIT:.0f} s more: {still}")

    def check_uninitialized(self, stale: dict[str, list[Any]]) -> None:
        for name in ENTRY_POINTS:
            if name.startswith("olInit"):
                continue
            fn = getattr(api, name)
            required = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
            self.api.call(name, *[None] * len(required), ok=False, codes={E.UNINITIALIZED})
        for queue in stale["queue"]:
            self.api.call("olSyncQueue", queue, ok=False, codes={E.UNINITIALIZED})
        for pointer in stale["pointer"]:
            self.api.call("olMemFree", pointer, ok=False, codes={E.UNINITIALIZED})
        self.api.call("olGetDeviceInfo", stale["device"][0], DeviceInfo.NAME, ok=False, codes={E.UNINITIALIZED})

    def abandon(self) -> None:
        """After a failed step: release what can be released, without checking anything."""
        self.open_gates()
        for _ in range(self.refcount + 2):
            try:
                api.olShutDown()
            except Exception:  # noqa: BLE001  # best effort; the failure is already reported
                break
        for thread in threading.enumerate():
            if thread not in self.baseline:
                thread.join(JOIN_WAIT)

    def teardown(self) -> None:
        if self.in_step is not None or self.refcount == 0:
            self.trace.append(f"# teardown after a failed step ({self.in_step})")
            self.abandon()
            return
        self.in_step = "teardown"
        try:
            self.end_runtime()
        except BaseException as exc:
            self.remember_failure(exc)
            self.abandon()
            raise
        self.in_step = None

    # ---- operations shared by several rules ----------------------------------------------------------
    def sync_queue(self, queue: QueueModel) -> None:
        """``olSyncQueue`` of a live queue, with the outcome the model predicts."""
        self.open_gates()
        if queue.doom is not None:
            ok, result = self.api.call("olSyncQueue", queue.handle, ok=False, codes={E.QUEUE_ERROR})
            self.failure_seen(queue)
        else:
            self.api.call("olSyncQueue", queue.handle)
            self.model.learn(queue.clock)
            queue.drained = queue.seq

    def new_queue(self) -> QueueModel:
        """``olCreateQueue`` on the host device. With 64 busy queues parked it waits for the oldest,
        so gates open first when that many destroyed queues wait behind one."""
        if sum(1 for q in self.queues if q.destroyed and self.blocked(q.clock)) >= PARKED_LIMIT - 2:
            self.open_gates()
        handle = self.api.call("olCreateQueue", self.host)[1]
        if type(handle) is not api.Queue:
            raise AssertionError(f"olCreateQueue returned {handle!r}")
        return self.add_queue(handle)

    def add_queue(self, handle: api.Queue) -> QueueModel:
        queue = QueueModel(next(self.ids), "", handle)
        queue.name = f"q{queue.ident}"
        self.names.add(handle, queue.name)
        self.queues.append(queue)
        return queue

    def new_plain(self, size: int, contents: bytes) -> Buffer:
        raw = ctypes.create_string_buffer(contents, size)
        buf = Buffer(self.new_name("h"), ctypes.addressof(raw), size, "plain", keepalive=raw)
        self.model.run(None, [], [(buf, 0, size)], lambda _inputs: [known(contents)], f"init {buf.name}")
        self.plain.append(buf)
        return buf

    def host_write(self, buf: Buffer, offset: int, values: bytes) -> None:
        """The test writes ``values`` at ``buf + offset`` itself (a ctypes store on this thread)."""
        assert buf.live
        self.trace.append(f"   # the test writes {len(values)} bytes at {buf.name}+{offset}")
        ctypes.memmove(buf.address + offset, values, len(values))
        self.model.run(None, [], [(buf, offset, len(values))], lambda _inputs: [known(values)],
                       f"host write {buf.name}+{offset}")
