"""Rules for queues and events: create, destroy, sync, query, waits, info, host functions
(recording, snapshotting, raising, gates), queue errors, and event timing."""

from __future__ import annotations

import ctypes
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from state_machine_model import Buffer, Clock, EventModel, QueueModel, join
from state_machine_support import Gate
from state_machine_world import WRONG_USER_DATA, E, HostCall, World, step

from offloadrt import DeviceInfo, ErrorCode, EventFlags, EventInfo, OffloadError, QueueInfo, api

MAX_QUEUES = 6
MAX_EVENTS = 12
MAX_GATES = 2
RAISED = {"ValueError": ValueError, "RuntimeError": RuntimeError, "KeyboardInterrupt": KeyboardInterrupt,
          "SystemExit": SystemExit}


def has_queue(self: World) -> bool:
    return self.host is not None and bool(self.live_queues())


def has_event(self: World) -> bool:
    return self.host is not None and bool(self.live_events())


def outcome_of(name: str, args: list[Any]) -> str:
    """What ``api.<name>(*args)`` gives, as HostCall.calls records it (run on a queue's thread)."""
    try:
        result = getattr(api, name)(*args)
        if name == "olCreateQueue":
            api.olDestroyQueue(result)
    except OffloadError as exc:
        return exc.code.name
    except BaseException as exc:  # noqa: BLE001  # a finding, reported on the test's thread
        return f"!{type(exc).__name__}: {exc}"
    return "False" if result is False else "ok"


class QueueRules(World):
    def covered(self, clock: Clock) -> bool:
        """Whether the test has seen everything ``clock`` covers finish."""
        return all(self.model.finished.get(key, 0) >= value for key, value in clock.items())

    def queue_by_ident(self, ident: int) -> QueueModel:
        return next(q for q in self.queues if q.ident == ident)

    def draw_bad_queue(self, data: st.DataObject) -> tuple[Any, ErrorCode] | None:
        """A queue argument that is not a live queue, and its error; None when there is none to hand."""
        options: list[tuple[Any, ErrorCode]] = [(None, E.INVALID_NULL_HANDLE),
                                                (self.draw_wrong(data, api.Queue), E.INVALID_ARGUMENT)]
        options += [(q.handle, E.INVALID_QUEUE) for q in self.queues if q.destroyed][-1:]
        options += [(q, E.INVALID_QUEUE) for q in self.stale.get("queue", [])][:1]
        return data.draw(st.sampled_from(options), label="bad queue")

    def draw_bad_event(self, data: st.DataObject) -> tuple[Any, ErrorCode]:
        options: list[tuple[Any, ErrorCode]] = [(None, E.INVALID_NULL_HANDLE),
                                                (self.draw_wrong(data, api.Event), E.INVALID_ARGUMENT)]
        options += [(e.handle, E.INVALID_EVENT) for e in self.events if e.destroyed][-1:]
        options += [(e, E.INVALID_EVENT) for e in self.stale.get("event", [])][:1]
        return data.draw(st.sampled_from(options), label="bad event")

    # ---- queues -------------------------------------------------------------------------------------
    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def create_queue(self, data: st.DataObject) -> None:
        variant = data.draw(st.sampled_from(["ok"] * 3 + ["null", "wrong", "stale"]), label="variant")
        if variant == "ok" and len(self.live_queues()) < MAX_QUEUES:
            self.new_queue()
            return
        device, code = {"null": (None, E.INVALID_NULL_HANDLE), "ok": (None, E.INVALID_NULL_HANDLE),
                        "wrong": (self.draw_wrong(data, api.Device), E.INVALID_ARGUMENT),
                        "stale": (self.stale.get("device", [None])[0], E.INVALID_DEVICE)}[variant]
        if device is None:
            code = E.INVALID_NULL_HANDLE
        self.api.call("olCreateQueue", device, ok=False, codes={code})

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def destroy_queue(self, data: st.DataObject) -> None:
        live = self.live_queues()
        if live and data.draw(st.integers(0, 3), label="valid") > 0:
            queue = data.draw(st.sampled_from(live), label="queue")
            self.api.call("olDestroyQueue", queue.handle)  # never blocks: a busy queue is parked
            queue.destroyed = True
            self.destroyed_queues += 1
            return
        bad = self.draw_bad_queue(data)
        assert bad is not None
        self.api.call("olDestroyQueue", bad[0], ok=False, codes={bad[1]})

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def sync_queue_rule(self, data: st.DataObject) -> None:
        live = self.live_queues()
        if live and data.draw(st.integers(0, 3), label="valid") > 0:
            self.sync_queue(data.draw(st.sampled_from(live), label="queue"))
            return
        bad = self.draw_bad_queue(data)
        assert bad is not None
        self.api.call("olSyncQueue", bad[0], ok=False, codes={bad[1]})

    @precondition(has_queue)
    @rule(data=st.data())
    @step
    def query_queue(self, data: st.DataObject) -> None:
        queue = data.draw(st.sampled_from(self.queues), label="queue")
        if queue.destroyed:
            self.api.call("olQueryQueue", queue.handle, ok=False, codes={E.INVALID_QUEUE})
            return
        if queue.doom is not None:  # seen failing, or held back by a gate
            ok, result = self.api.call("olQueryQueue", queue.handle, ok=not queue.failure_seen,
                                       codes={E.QUEUE_ERROR} if queue.failure_seen else set())
            if ok and result is not False:
                raise AssertionError(f"olQueryQueue of a queue whose failure a gate holds back returned {result!r}")
            return
        drained = queue.drained == queue.seq
        blocked = self.blocked(queue.clock)
        result = self.api.call("olQueryQueue", queue.handle)[1]
        if type(result) is not bool or (drained and result is not True) or (blocked and result is not False):
            raise AssertionError(f"olQueryQueue({queue.name}) returned {result!r}; " + (
                "olSyncQueue returned and nothing was queued since" if drained else
                "a closed gate holds work on it" if blocked else "it must be a bool"))
        if result:
            self.model.learn(queue.clock)
            queue.drained = queue.seq

    @precondition(has_queue)
    @rule(data=st.data())
    @step
    def queue_info(self, data: st.DataObject) -> None:
        queue = data.draw(st.sampled_from(self.queues), label="queue")
        size_query = data.draw(st.booleans(), label="size query")
        name = "olGetQueueInfoSize" if size_query else "olGetQueueInfo"
        prop: Any = data.draw(st.sampled_from([*QueueInfo, 2, -1]), label="prop")
        if queue.destroyed:
            self.api.call(name, queue.handle, prop, ok=False, codes={E.INVALID_QUEUE})
            return
        if not isinstance(prop, QueueInfo):
            self.api.call(name, queue.handle, prop, ok=False, codes={E.INVALID_ENUMERATION})
            return
        value = self.api.call(name, queue.handle, prop)[1]
        if size_query:
            if value != {QueueInfo.DEVICE: 8, QueueInfo.EMPTY: 1}[prop]:
                raise AssertionError(f"{name}({prop.name}) is {value!r}")
        elif prop is QueueInfo.DEVICE:
            if value is not self.host:
                raise AssertionError(f"olGetQueueInfo(DEVICE) is {value!r}, not the host device")
        else:
            if type(value) is not bool:
                raise AssertionError(f"olGetQueueInfo(EMPTY) is {value!r}")
            if queue.doom is None and queue.drained == queue.seq and not value:
                raise AssertionError(f"olGetQueueInfo({queue.name}, EMPTY) is False although olSyncQueue returned "
                                     f"and nothing was queued since")
            if value and self.blocked(queue.clock):
                raise AssertionError(f"olGetQueueInfo({queue.name}, EMPTY) is True although a closed gate holds "
                                     f"work on it")
            if value and queue.doom is None:
                self.model.learn(queue.clock)
                queue.drained = queue.seq
            elif value and not queue.failure_seen:
                raise AssertionError(f"{queue.name} is EMPTY although a gate holds back work on it")

    @precondition(has_queue)
    @rule(data=st.data())
    @step
    def wait_events(self, data: st.DataObject) -> None:
        variant = data.draw(st.sampled_from(["ok"] * 6 + ["bad event", "None list", "int list", "bad queue"]),
                            label="variant")
        queue = data.draw(st.sampled_from(self.live_queues()), label="queue")
        events = data.draw(st.lists(st.sampled_from(self.live_events()), max_size=3) if self.live_events()
                           else st.just([]), label="events")
        handles: Any = [e.handle for e in events]
        if variant == "bad event":
            bad, code = self.draw_bad_event(data)
            handles.insert(data.draw(st.integers(0, len(handles)), label="position"), bad)
            self.api.call("olWaitEvents", queue.handle, handles, ok=False, codes={code})
            return
        if variant in ("None list", "int list"):
            value, code = (None, E.INVALID_NULL_POINTER) if variant == "None list" else (5, E.INVALID_ARGUMENT)
            self.api.call("olWaitEvents", queue.handle, value, ok=False, codes={code})
            return
        if variant == "bad queue":
            bad_queue = self.draw_bad_queue(data)
            assert bad_queue is not None
            self.api.call("olWaitEvents", bad_queue[0], handles, ok=False, codes={bad_queue[1]})
            return
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call("olWaitEvents", queue.handle, handles, ok=ok, codes=codes)
        if not self.after_work(queue, accepted, result):
            return
        for event in events:
            if event.queue is queue:
                continue
            if event.doom is not None:  # the wait succeeds; the queue fails at it, naming the first queue
                self.doom(queue, event.doom.origins, join(self.model.ordered_clock(queue), event.doom.finished))
                return
            queue.clock = join(self.model.tick(queue), event.clock)

    @precondition(has_queue)
    @rule(data=st.data())
    @step
    def host_function(self, data: st.DataObject) -> None:
        kinds = ["record", "snapshot", "snapshot", "raise", "api", "api", "bad callback", "bad queue"]
        if len(self.gates) < MAX_GATES:
            kinds.append("gate")
        kind = data.draw(st.sampled_from(kinds), label="kind")
        queue = data.draw(st.sampled_from(self.live_queues()), label="queue")
        if kind == "bad queue":
            bad = self.draw_bad_queue(data)
            assert bad is not None
            self.api.call("olLaunchHostFunction", bad[0], lambda _: None, ok=False, codes={bad[1]})
            return
        if kind == "bad callback":
            callback, code = data.draw(st.sampled_from([(None, E.INVALID_NULL_POINTER),
                                                        (42, E.INVALID_ARGUMENT)]), label="callback")
            self.api.call("olLaunchHostFunction", queue.handle, callback, ok=False, codes={code})
            return
        label = self.new_name("hf")
        ok, codes = self.work_outcome(queue)
        if kind == "gate":
            gate = Gate(f"{label}(gate)")
            accepted, result = self.api.call("olLaunchHostFunction", queue.handle, gate, None, ok=ok, codes=codes)
            if self.after_work(queue, accepted, result):  # behind a failure it is skipped and holds nothing
                gate.queue, gate.seq = queue.ident, self.model.tick(queue)[queue.ident]
                self.gates.append(gate)
            return
        if kind == "raise":
            token = f"boom-{label}"
            name = data.draw(st.sampled_from([*RAISED, "OffloadError", "a waiting call"]), label="exception")
            if name == "a waiting call":
                token = "cannot be called from a host function"

            def raising(_user_data: object) -> None:
                if name == "OffloadError":
                    raise OffloadError(ErrorCode.UNKNOWN, token)
                if name == "a waiting call":  # its INVALID_ARGUMENT, uncaught, fails the queue
                    api.olSyncQueue(queue.handle)
                raise RAISED[name](token)

            raising.label = f"{label}(raises {name})"  # type: ignore[attr-defined]
            accepted, result = self.api.call("olLaunchHostFunction", queue.handle, raising, None, ok=ok, codes=codes)
            if self.after_work(queue, accepted, result):
                self.doom(queue, frozenset({(queue.ident, token)}), self.model.ordered_clock(queue))
            return
        call = HostCall(label, kind)
        token_data = object()
        reads: list[Any] = []
        writes: list[Any] = []
        plan = self.draw_api_plan(data, queue) if kind == "api" else []
        call.runtime = self.runtime
        if kind == "api":
            address = size = 0
            call.label = f"{label}(calls {', '.join(name for name, _, _, _ in plan)})"
        elif kind == "snapshot":
            buf = data.draw(st.sampled_from(self.live_buffers()), label="buffer")
            offset = data.draw(st.integers(0, buf.size - 1), label="offset")
            size = data.draw(st.integers(1, min(64, buf.size - offset)), label="size")
            call.expected = Buffer(f"{label}.seen", 0, size, "snapshot")
            reads, writes = [(buf, offset, size)], [(call.expected, 0, size)]
            address = buf.address + offset
            call.label = f"{label}(snapshot of {buf.name}+{offset}, {size} bytes)"
        else:
            address = size = 0
            call.label = f"{label}(record)"

        def host_fn(user_data: object) -> None:
            if user_data is not token_data:
                call.captured = WRONG_USER_DATA
            elif address:
                call.captured = ctypes.string_at(address, size)
            for name, args, expected, handles in plan:
                call.calls.append((name, expected, handles, outcome_of(name, args)))
            call.ran.set()

        host_fn.label = call.label  # type: ignore[attr-defined]
        accepted, result = self.api.call("olLaunchHostFunction", queue.handle, host_fn, token_data, ok=ok,
                                         codes=codes)
        will_run = self.after_work(queue, accepted, result)
        if not accepted:
            return
        if will_run:
            call.op = self.model.run(queue, reads, writes, lambda inputs: [inputs[0]] if inputs else [], call.label)
        self.host_calls.append(call)

    def draw_api_plan(self, data: st.DataObject, queue: QueueModel) -> list[tuple[str, list[Any], str, list[Any]]]:
        """Calls a host function on ``queue`` makes: those that wait must be refused there
        (INVALID_ARGUMENT: the host function holds up its own queue); queries and a queue created and
        destroyed at once are allowed. Nothing here changes what the model tracks."""
        other = data.draw(st.sampled_from(self.live_queues()), label="other queue")
        options: list[tuple[str, list[Any], str, list[Any]]] = [
            ("olSyncQueue", [queue.handle], "INVALID_ARGUMENT", [queue]),
            ("olSyncQueue", [other.handle], "INVALID_ARGUMENT", [other]),
            ("olShutDown", [], "INVALID_ARGUMENT", []),
            ("olGetQueueInfo", [queue.handle, QueueInfo.DEVICE], "ok", [queue]),
            ("olQueryQueue", [queue.handle], "False", [queue]),  # it is running this very host function
            ("olGetQueueError", [queue.handle], "ok", [queue]),
            ("olGetDeviceInfo", [self.host, DeviceInfo.NAME], "ok", []),
            ("olCreateQueue", [self.host], "ok", []),  # and destroyed at once; never waits for a parked queue
        ]
        if self.live_events():
            event = data.draw(st.sampled_from(self.live_events()), label="event")
            options += [("olSyncEvent", [event.handle], "INVALID_ARGUMENT", [event]),
                        ("olGetEventElapsedTime", [event.handle, event.handle], "INVALID_ARGUMENT", [event])]
        return data.draw(st.lists(st.sampled_from(options), min_size=1, max_size=4), label="calls")

    @precondition(lambda self: bool(self.gates))
    @rule(data=st.data())
    @step
    def open_gate(self, data: st.DataObject) -> None:
        gate = data.draw(st.sampled_from(self.gates), label="gate")
        self.trace.append(f"   # open {gate.label}")
        gate.open()
        self.gates.remove(gate)
        self.observe_failures()

    @precondition(has_queue)
    @rule(data=st.data())
    @step
    def queue_error(self, data: st.DataObject) -> None:
        self.check_queue_error(data.draw(st.sampled_from(self.queues), label="queue"))

    def check_queue_error(self, queue: QueueModel) -> None:
        """``olGetQueueError``: (None, None) unless the failure has happened, then the first failure."""
        if queue.destroyed:
            self.api.call("olGetQueueError", queue.handle, ok=False, codes={E.INVALID_QUEUE})
            return
        error, origin = self.api.call("olGetQueueError", queue.handle)[1]
        if queue.doom is None or not queue.failure_seen:
            if (error, origin) != (None, None):
                raise AssertionError(f"olGetQueueError({queue.name}) is {(error, origin)!r}; the model expects "
                                     f"(None, None)")
            return
        if not isinstance(error, OffloadError):
            raise AssertionError(f"olGetQueueError({queue.name}) gave {error!r} for a failed queue")
        allowed = {self.queue_by_ident(ident).handle: token for ident, token in queue.doom.origins}
        if origin not in allowed:
            raise AssertionError(f"olGetQueueError({queue.name}) names {self.names.format(origin)} as the failing "
                                 f"queue; the model expects one of {[self.names.format(h) for h in allowed]}")
        if allowed[origin] not in str(error):
            raise AssertionError(f"olGetQueueError({queue.name}) gave {error!r}; expected the error of "
                                 f"{allowed[origin]}")
        self.failure_seen(queue)

    # ---- events -----------------------------------------------------------------------------------------
    @precondition(has_queue)
    @rule(data=st.data())
    @step
    def create_event(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 4), label="valid") == 0 or len(self.live_events()) >= MAX_EVENTS:
            bad = self.draw_bad_queue(data)
            assert bad is not None
            self.api.call("olCreateEvent", bad[0], ok=False, codes={bad[1]})
            return
        queue = data.draw(st.sampled_from(self.live_queues()), label="queue")
        timed = data.draw(st.booleans(), label="timed")
        ok, codes = self.work_outcome(queue)
        flags = EventFlags.ENABLE_PROFILING if timed else EventFlags.NONE
        accepted, result = self.api.call("olCreateEvent", queue.handle, flags, ok=ok, codes=codes)
        self.after_work(queue, accepted, result)
        if not accepted:
            return
        if type(result) is not api.Event:
            raise AssertionError(f"olCreateEvent returned {result!r}")
        event = EventModel(next(self.ids), "", result, queue, dict(self.model.tick(queue)), timed)
        event.name = f"e{event.ident}"
        self.names.add(result, event.name)
        self.events.append(event)

    @precondition(has_event)
    @rule(data=st.data())
    @step
    def destroy_event(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 3), label="valid") == 0:
            bad, code = self.draw_bad_event(data)
            self.api.call("olDestroyEvent", bad, ok=False, codes={code})
            return
        event = data.draw(st.sampled_from(self.live_events()), label="event")
        self.api.call("olDestroyEvent", event.handle)
        event.destroyed = True

    def sync_event(self, event: EventModel) -> None:
        self.open_gates()
        if event.doom is not None:
            self.api.call("olSyncEvent", event.handle, ok=False, codes={E.QUEUE_ERROR})
            self.failure_seen(event.queue)
        else:
            self.api.call("olSyncEvent", event.handle)
            self.model.learn(event.clock)

    @precondition(has_event)
    @rule(data=st.data())
    @step
    def sync_event_rule(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 4), label="valid") == 0:
            bad, code = self.draw_bad_event(data)
            self.api.call("olSyncEvent", bad, ok=False, codes={code})
            return
        self.sync_event(data.draw(st.sampled_from(self.live_events()), label="event"))

    @precondition(has_event)
    @rule(data=st.data())
    @step
    def event_info(self, data: st.DataObject) -> None:
        event = data.draw(st.sampled_from(self.events), label="event")
        size_query = data.draw(st.booleans(), label="size query")
        name = "olGetEventInfoSize" if size_query else "olGetEventInfo"
        prop: Any = data.draw(st.sampled_from([*EventInfo, 2, -1]), label="prop")
        if event.destroyed:
            self.api.call(name, event.handle, prop, ok=False, codes={E.INVALID_EVENT})
            return
        if not isinstance(prop, EventInfo):
            self.api.call(name, event.handle, prop, ok=False, codes={E.INVALID_ENUMERATION})
            return
        value = self.api.call(name, event.handle, prop)[1]
        if size_query:
            if value != {EventInfo.QUEUE: 8, EventInfo.IS_COMPLETE: 1}[prop]:
                raise AssertionError(f"{name}({prop.name}) is {value!r}")
        elif prop is EventInfo.QUEUE:
            if value is not event.queue.handle:
                raise AssertionError(f"olGetEventInfo({event.name}, QUEUE) is {self.names.format(value)}, "
                                     f"not {event.queue.name}")
        else:
            if type(value) is not bool:
                raise AssertionError(f"olGetEventInfo(IS_COMPLETE) is {value!r}")
            if event.doom is None and self.covered(event.clock) and not value:
                raise AssertionError(f"{event.name} is not complete although the work before it is known finished")
            if value and self.blocked(event.clock):
                raise AssertionError(f"{event.name} is complete although a closed gate holds work before it")
            if value and event.doom is None:
                self.model.learn(event.clock)
            if value and event.doom is not None and self.held(event.doom):
                raise AssertionError(f"{event.name} is complete although a gate holds back the failure before it")

    @precondition(has_event)
    @rule(data=st.data())
    @step
    def elapsed_time(self, data: st.DataObject) -> None:
        start = data.draw(st.sampled_from(self.live_events()), label="start")
        end = data.draw(st.sampled_from(self.live_events()), label="end")
        if data.draw(st.integers(0, 4), label="valid") == 0:
            bad, code = self.draw_bad_event(data)
            args = (bad, end.handle) if data.draw(st.booleans(), label="bad start") else (start.handle, bad)
            self.api.call("olGetEventElapsedTime", *args, ok=False, codes={code})
            return
        if not (start.timed and end.timed):  # refused before anything is waited for
            self.api.call("olGetEventElapsedTime", start.handle, end.handle, ok=False, codes={E.INVALID_ARGUMENT})
            return
        self.open_gates()
        if start.doom is not None or end.doom is not None:
            self.api.call("olGetEventElapsedTime", start.handle, end.handle, ok=False, codes={E.QUEUE_ERROR})
            if start.doom is not None:
                self.failure_seen(start.queue)
            else:
                self.model.learn(start.clock)
                self.failure_seen(end.queue)
            return
        value = self.api.call("olGetEventElapsedTime", start.handle, end.handle)[1]
        self.model.learn(start.clock)
        self.model.learn(end.clock)
        if type(value) is not float:
            raise AssertionError(f"olGetEventElapsedTime returned {value!r}")
        if start.queue is end.queue and start.clock[start.queue.ident] <= end.clock[end.queue.ident] and value < 0:
            raise AssertionError(f"{end.name} was recorded after {start.name} on one queue, yet the elapsed time "
                                 f"between them is {value} ms")

