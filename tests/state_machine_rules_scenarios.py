"""Rules that build the situations the random rules reach only rarely, each from a few ordinary
calls checked by the same model: memory freed under queued work (and handed out again at
once), work queued behind a failure that a gate still holds back (and a queue waiting on it),
and a busy queue and program destroyed before their work has run."""

from __future__ import annotations

import ctypes
import sys

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from state_machine_kernels import Shape, fail_effect, pointer_effect
from state_machine_model import Buffer, EventModel, QueueModel, join, known
from state_machine_rules_memory import MemoryRules
from state_machine_rules_programs import ProgramRules
from state_machine_rules_queues import QueueRules
from state_machine_support import KNOWN_BUGS, Gate, Violation
from state_machine_world import PARKED_LIMIT, E, HostCall, World, step

from offloadrt import AllocType, OffloadError, SymbolKind


def ready(self: World) -> bool:
    return self.host is not None and len(self.gates) < 2


class ScenarioRules(MemoryRules, QueueRules, ProgramRules):
    # ---- small steps, each checked like the rules that do them one at a time ------------------------
    def healthy_queue(self, data: st.DataObject) -> QueueModel:
        """A live queue that nothing makes fail (a new one when there is none)."""
        healthy = [q for q in self.live_queues() if q.doom is None]
        if bool(healthy) and data.draw(st.booleans(), label="reuse a queue"):
            return data.draw(st.sampled_from(healthy), label="queue")
        return self.new_queue()

    def gate(self, queue: QueueModel) -> Gate:
        gate = Gate(f"{self.new_name('hf')}(gate)")
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call("olLaunchHostFunction", queue.handle, gate, None, ok=ok, codes=codes)
        if self.after_work(queue, accepted, result):
            gate.queue, gate.seq = queue.ident, self.model.tick(queue)[queue.ident]
            self.gates.append(gate)
        return gate

    def release(self, gate: Gate) -> None:
        self.trace.append(f"   # open {gate.label}")
        gate.open()
        if gate in self.gates:
            self.gates.remove(gate)
        self.observe_failures()

    def copy(self, queue: QueueModel, dst: Buffer, dst_offset: int, src: Buffer, src_offset: int, size: int) -> None:
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call("olMemcpy", queue.handle, dst.address + dst_offset, self.host,
                                         src.address + src_offset, self.host, size, ok=ok, codes=codes)
        if self.after_work(queue, accepted, result):
            self.model.run(queue, [(src, src_offset, size)], [(dst, dst_offset, size)], lambda inputs: [inputs[0]],
                           f"olMemcpy on {queue.name}")

    def fill(self, queue: QueueModel, buf: Buffer, offset: int, pattern: bytes, size: int) -> None:
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call("olMemFill", queue.handle, buf.address + offset, pattern, size, ok=ok,
                                         codes=codes)
        if self.after_work(queue, accepted, result):
            values = (pattern * (size // len(pattern)))[:size]
            self.model.run(queue, [], [(buf, offset, size)], lambda _inputs: [known(values)],
                           f"olMemFill on {queue.name}")

    def snapshot(self, queue: QueueModel, buf: Buffer, offset: int, size: int) -> None:
        call = HostCall(f"{self.new_name('hf')}(snapshot of {buf.name}+{offset}, {size} bytes)", "snapshot")
        call.expected = Buffer(f"{call.label}.seen", 0, size, "snapshot")
        address = buf.address + offset

        def host_fn(_user_data: object) -> None:
            call.captured = ctypes.string_at(address, size)
            call.ran.set()

        host_fn.label = call.label  # type: ignore[attr-defined]
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call("olLaunchHostFunction", queue.handle, host_fn, ok=ok, codes=codes)
        if self.after_work(queue, accepted, result):
            call.op = self.model.run(queue, [(buf, offset, size)], [(call.expected, 0, size)],
                                     lambda inputs: [inputs[0]], call.label)
        if accepted:
            self.host_calls.append(call)

    def event(self, queue: QueueModel) -> EventModel | None:
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call("olCreateEvent", queue.handle, ok=ok, codes=codes)
        self.after_work(queue, accepted, result)
        if not accepted:
            return None
        event = EventModel(next(self.ids), "", result, queue, dict(self.model.tick(queue)))
        event.name = f"e{event.ident}"
        self.names.add(result, event.name)
        self.events.append(event)
        return event

    def fail(self, data: st.DataObject, queue: QueueModel, observe: bool = True) -> None:
        """Queue work that fails: a raising host function or a faulting kernel."""
        programs = self.live_programs()
        token = f"boom-{self.new_name('x')}"
        if bool(programs) and data.draw(st.booleans(), label="kernel fault"):
            symbol = self.symbol(data.draw(st.sampled_from(programs), label="program"), "fail_with",
                                 SymbolKind.KERNEL)
            assert symbol is not None
            effect = fail_effect(1000 + next(self.ids))
            token = f"returned {effect.fault}"
            ok, codes = self.work_outcome(queue)
            accepted, result = self.api.call("olLaunchKernel", queue.handle, self.host, symbol.handle, effect.blob,
                                             Shape((1, 1, 1), (1, 1, 1)).args(), ok=ok, codes=codes)
        else:
            own_error = data.draw(st.booleans(), label="raises an OffloadError")

            def raising(_user_data: object) -> None:
                raise OffloadError(E.UNKNOWN, token) if own_error else ValueError(token)

            raising.label = f"raises {token}"  # type: ignore[attr-defined]
            ok, codes = self.work_outcome(queue)
            accepted, result = self.api.call("olLaunchHostFunction", queue.handle, raising, ok=ok, codes=codes)
        if self.after_work(queue, accepted, result):
            self.doom(queue, frozenset({(queue.ident, token)}), self.model.ordered_clock(queue), observe)

    def some_work(self, data: st.DataObject, queue: QueueModel) -> None:
        """A copy, a fill or a snapshot on ``queue`` between live buffers."""
        kind = data.draw(st.sampled_from(["copy", "fill", "snapshot"]), label="work")
        buf, offset = self.draw_range(data, "buffer")
        size = data.draw(st.integers(1, min(64, buf.size - offset)), label="size")
        if kind == "fill":
            self.fill(queue, buf, offset, data.draw(st.binary(min_size=1, max_size=1), label="byte"), size)
        elif kind == "snapshot":
            self.snapshot(queue, buf, offset, size)
        else:
            src, src_offset = self.draw_range(data, "src")
            size = min(size, src.size - src_offset)
            if src is buf and abs(src_offset - offset) < size:
                return
            self.copy(queue, buf, offset, src, src_offset, size)

    # ---- the scenarios ---------------------------------------------------------------------------------
    @precondition(lambda self: ready(self) and bool(self.allocations))
    @rule(data=st.data())
    @step
    def free_under_queued_work(self, data: st.DataObject) -> None:
        """Queued work reads and writes memory that is freed before it runs; the memory is handed out
        again at once and scribbled over; the queued work must still see the old memory."""
        queue = self.healthy_queue(data)
        doomed = self.allocations[data.draw(st.integers(0, len(self.allocations) - 1), label="allocation")]
        others = [b for b in self.live_buffers() if b is not doomed]
        target = data.draw(st.sampled_from(others), label="target")
        size = min(doomed.size, target.size, 256)
        gate = self.gate(queue)
        self.copy(queue, target, 0, doomed, 0, size)
        self.snapshot(queue, doomed, 0, size)
        self.fill(queue, doomed, 0, b"\x5a", size)
        self.snapshot(queue, doomed, 0, size)
        free_address = doomed.address
        self.free(free_address)  # type: ignore[attr-defined]
        address = self.api.call("olMemAlloc", self.host, AllocType[doomed.kind], doomed.size)[1]
        if address < free_address + doomed.size and free_address < address + doomed.size:
            raise Violation("use-after-free", f"olMemAlloc handed out [{address:#x}, +{doomed.size}), memory of "
                                              f"{doomed.name}, which was freed while queued work still uses it")
        fresh = self.add_allocation(address, doomed.size, AllocType[doomed.kind])
        self.host_write(fresh, 0, bytes((3 * i + 1) & 0xFF for i in range(fresh.size)))
        self.release(gate)
        self.sync_queue(queue)
        self.check_buffer(target)
        self.check_buffer(fresh)
        self.check_host_calls()

    @precondition(lambda self: ready(self))
    @rule(data=st.data())
    @step
    def work_behind_a_held_failure(self, data: st.DataObject) -> None:
        """A gate holds a queue; behind it, some work, a failure, more work and an event; a second
        queue waits on that event and queues work too. Once the gate opens, the work before the
        failure has run, nothing after it has, and both queues name the first as the origin."""
        queue = self.healthy_queue(data)
        gate = self.gate(queue)
        for _ in range(data.draw(st.integers(0, 2), label="work before")):
            self.some_work(data, queue)
        self.fail(data, queue)
        for _ in range(data.draw(st.integers(0, 2), label="work after")):
            self.some_work(data, queue)
        event = self.event(queue)
        waiter = self.healthy_queue(data)
        if event is not None and waiter is not queue:
            ok, codes = self.work_outcome(waiter)
            accepted, result = self.api.call("olWaitEvents", waiter.handle, [event.handle], ok=ok, codes=codes)
            if self.after_work(waiter, accepted, result) and event.doom is not None:
                self.doom(waiter, event.doom.origins, join(self.model.ordered_clock(waiter), event.doom.finished))
            self.some_work(data, waiter)
        if data.draw(st.booleans(), label="destroy the failing queue first"):
            self.api.call("olDestroyQueue", queue.handle)  # parked: nobody will see it fail but events
            queue.destroyed = True
            self.destroyed_queues += 1
        self.release(gate)
        for q in (queue, waiter):
            self.check_queue_error(q)
        self.check_host_calls()
        for buf in self.live_buffers():
            self.check_buffer(buf)

    @precondition(lambda self: ready(self) and bool(self.live_programs()))
    @rule(data=st.data())
    @step
    def destroy_while_busy(self, data: st.DataObject) -> None:
        """A held queue has a launch and a copy queued (and maybe a failure); its program and then the
        queue itself are destroyed; once the gate opens the work still runs, as an event recorded
        before shows (or the event fails, when the failure came first)."""
        queue = self.healthy_queue(data)
        program = data.draw(st.sampled_from(self.live_programs()), label="program")
        symbol = self.symbol(program, "foo", SymbolKind.KERNEL)
        assert symbol is not None
        shape = Shape((2, 1, 1), (4, 1, 1))
        target = self.draw_target(data, 32)
        if target is None:
            return
        gate = self.gate(queue)
        effect = pointer_effect("foo", shape, *target)
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call("olLaunchKernel", queue.handle, self.host, symbol.handle, effect.blob,
                                         shape.args(), ok=ok, codes=codes)
        if self.after_work(queue, accepted, result):
            self.model.run(queue, effect.reads, effect.writes, effect.compute, f"{symbol.label} on {queue.name}")
        self.some_work(data, queue)
        if data.draw(st.booleans(), label="fail too"):
            self.fail(data, queue)  # held by the gate: the queue fails after it was destroyed
        event = self.event(queue)
        self.api.call("olDestroyProgram", program.handle)
        program.destroyed = True
        for buf in program.globals.values():
            buf.live = False
        self.api.call("olDestroyQueue", queue.handle)
        queue.destroyed = True
        self.destroyed_queues += 1
        self.release(gate)
        if event is not None:
            self.sync_event(event)
        if target[0].live:
            self.check_buffer(target[0])
        self.check_host_calls()

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def work_racing_a_failure(self, data: st.DataObject) -> None:
        """Work queued right behind failing work, while the failure may be happening: each call is
        refused with QUEUE_ERROR or accepted and then skipped; an event made then fails."""
        queue = self.new_queue()
        racing_events: list[object] = []
        kinds = data.draw(st.lists(st.sampled_from(["event", "fill", "record", "wait"]), min_size=1, max_size=4),
                          label="racing work")
        buf, offset = self.draw_range(data, "fill target")
        size = min(16, buf.size - offset)
        pattern = data.draw(st.binary(min_size=1, max_size=1), label="pattern")
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # let the queue's thread run between any two steps of a call
        try:
            self.fail(data, queue, observe=False)
            for kind in kinds:
                if kind == "event":
                    ok, handle = self.api.call("olCreateEvent", queue.handle, codes={E.QUEUE_ERROR})
                    if ok:
                        self.names.add(handle, f"{queue.name}.racing_event")
                        racing_events.append(handle)
                elif kind == "fill":
                    self.api.call("olMemFill", queue.handle, buf.address + offset, pattern, size, codes={E.QUEUE_ERROR})
                elif kind == "record":
                    call = HostCall(f"{self.new_name('hf')}(record behind a failure)", "record")

                    def host_fn(_user_data: object, call: HostCall = call) -> None:
                        call.ran.set()

                    host_fn.label = call.label  # type: ignore[attr-defined]
                    if self.api.call("olLaunchHostFunction", queue.handle, host_fn, codes={E.QUEUE_ERROR})[0]:
                        self.host_calls.append(call)  # op None: it must never run
                else:
                    events = [e.handle for e in self.live_events() if e.queue is not queue][:2]
                    self.api.call("olWaitEvents", queue.handle, events, codes={E.QUEUE_ERROR})
        finally:
            sys.setswitchinterval(switch)
        self.observe_failures()
        for handle in racing_events:
            ok, _ = self.api.call("olSyncEvent", handle, codes={E.QUEUE_ERROR})
            if ok:
                bug = "event behind a racing failure"
                if bug not in KNOWN_BUGS:
                    raise Violation("wrong-outcome", f"an event created on {queue.name} after its failing work "
                                                     f"completed without an error")
                self.stats.known_bug(bug)
                self.trace.append(f"   # known runtime bug: {KNOWN_BUGS[bug]}")
            self.api.call("olDestroyEvent", handle)
        self.api.call("olDestroyQueue", queue.handle)
        queue.destroyed = True
        self.destroyed_queues += 1
        self.check_host_calls()
        if buf.live:
            self.check_buffer(buf)

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def many_busy_queues(self, data: st.DataObject) -> None:
        """As many queues as the device parks (64) wait behind a gate and are destroyed; once the
        gate opens, olCreateQueue may have to wait for the oldest of them; every one still runs."""
        self.open_gates()  # queues parked before are not held: waiting for one of them is bounded
        blocker = self.new_queue()
        gate = self.gate(blocker)
        start = self.event(blocker)
        assert start is not None
        events: list[EventModel] = []
        for _ in range(PARKED_LIMIT):
            # directly: none of the queues parked before is held, so this never waits for long
            queue = self.add_queue(self.api.call("olCreateQueue", self.host)[1])
            self.api.call("olWaitEvents", queue.handle, [start.handle])
            queue.clock = join(self.model.tick(queue), start.clock)
            call = HostCall(f"{self.new_name('hf')}(record on {queue.name})", "record")

            def host_fn(_user_data: object, call: HostCall = call) -> None:
                call.ran.set()

            host_fn.label = call.label  # type: ignore[attr-defined]
            self.api.call("olLaunchHostFunction", queue.handle, host_fn)
            call.op = self.model.run(queue, [], [], lambda _inputs: [], call.label)
            self.host_calls.append(call)
            event = self.event(queue)
            assert event is not None
            events.append(event)
            self.api.call("olDestroyQueue", queue.handle)
            queue.destroyed = True
            self.destroyed_queues += 1
        self.release(gate)
        self.add_queue(self.api.call("olCreateQueue", self.host)[1])  # may wait for the oldest parked queue
        for event in [start, *events]:
            self.sync_event(event)
            self.api.call("olDestroyEvent", event.handle)
            event.destroyed = True
        self.check_host_calls()
