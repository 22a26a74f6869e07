"""Back-pressure on host queues: a host queue holds at most ``OFFLOADRT_HOST_QUEUE_DEPTH`` items
(the one running included); a submit to a full queue blocks its thread until an item finishes,
raises ``QUEUE_ERROR`` if the queue fails meanwhile and ``UNINITIALIZED`` if the device shuts down,
and is refused (``INVALID_ARGUMENT``) in a host function, where waiting could deadlock.

Queues are held full by a gate (a host function waiting on a ``threading.Event``). That a submitter
is blocked is seen through the queue's ``_room`` condition, replaced by a spy that reports each wait
(:class:`WaitSpy`); the cases that could hang the process (a host function waiting for room, Ctrl-C)
run in a subprocess with a timeout.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import TIMEOUT, Gate, alloc_u32, find_host, kernel, launch_args

from offloadrt import AllocType, ErrorCode, EventInfo, OffloadError, OffloadWarning, api
from offloadrt.plugins.host import exec as host_exec
from offloadrt.plugins.host.exec import HostQueue
from offloadrt.plugins.host.pool import DEFAULT_QUEUE_DEPTH

DEPTH = 8


class WaitSpy(threading.Condition):
    """TEST DOUBLE: the queue's room condition, also setting ``waiting`` each time a submitter
    starts waiting for room (so a test knows, without sleeping, that a submit is blocked)."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def backend(queue: api.Queue) -> HostQueue:
    ai = queue._ai
    assert isinstance(ai, HostQueue)
    return ai


def spy_on(queue: api.Queue) -> WaitSpy:
    """Watch the waits for room in ``queue`` (a queue that never waits for room is never seen waiting)."""
    spy = WaitSpy()
    try:
        backend(queue)._room = spy
    except AttributeError:
        pass  # a runtime without back-pressure: the test fails on what it then sees
    return spy


class Producer(threading.Thread):
    """Calls ``submit()`` ``count`` times on its own thread; ``done`` counts the calls that returned,
    ``error`` is what the first failing call raised."""

    def __init__(self, submit: Callable[[], object], count: int) -> None:
        super().__init__(daemon=True, name="test-producer")
        self.submit, self.count = submit, count
        self.done = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for _ in range(self.count):
                self.submit()
                self.done += 1
        except BaseException as exc:  # noqa: BLE001  # the test looks at it
            self.error = exc

    def finish(self) -> None:
        self.join(TIMEOUT)
        assert not self.is_alive(), "the producer did not finish after room was made"


def nothing(_: object) -> None:
    pass


@pytest.fixture(autouse=True)
def _wakeups_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blocked submitter also looks again every ROOM_WAIT_SLICE_S (for Ctrl-C): made long here, so
    that a submitter nobody wakes stays blocked and the test fails, instead of finding room later."""
    monkeypatch.setattr(host_exec, "ROOM_WAIT_SLICE_S", 600.0, raising=False)


@pytest.fixture
def depth_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[str | None], None]:
    def set_depth(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("OFFLOADRT_HOST_QUEUE_DEPTH", raising=False)
        else:
            monkeypatch.setenv("OFFLOADRT_HOST_QUEUE_DEPTH", value)
    return set_depth


@pytest.fixture
def gates() -> Iterator[list[Gate]]:
    made: list[Gate] = []
    yield made
    for gate in made:
        gate.open()


@pytest.fixture
def shallow(depth_env: Callable[[str | None], None], gates: list[Gate]) -> Iterator[api.Device]:
    """The host device of a runtime started with OFFLOADRT_HOST_QUEUE_DEPTH=8 (gates are opened first
    at teardown: the ``gates`` fixture is torn down after this one)."""
    depth_env(str(DEPTH))
    api.olInit()
    try:
        yield find_host()
    finally:
        for gate in gates:
            gate.open()
        api.olShutDown()


def held_queue(host: api.Device, gates: list[Gate], fill: int = 0) -> tuple[api.Queue, Gate, WaitSpy]:
    """A queue blocked by a gate (its first item) with ``fill`` host functions behind it."""
    queue = api.olCreateQueue(host)
    spy = spy_on(queue)
    gate = Gate(queue)
    gates.append(gate)
    for _ in range(fill):
        api.olLaunchHostFunction(queue, nothing)
    return queue, gate, spy


def test_a_producer_blocks_at_the_depth_and_finishes_when_the_queue_moves(shallow: api.Device, gates: list[Gate],
                                                                          build: Callable[..., bytes]) -> None:
    program = api.olCreateProgram(shallow, build("basic"))
    counter, view = alloc_u32(shallow)
    queue, gate, spy = held_queue(shallow, gates)
    blob, sizes, increment = struct.pack("<Q", counter), launch_args(), kernel(program, "increment")
    total = DEPTH + 5
    producer = Producer(lambda: api.olLaunchKernel(queue, shallow, increment, blob, sizes), total)
    producer.start()
    assert spy.waiting.wait(TIMEOUT), f"the producer was never blocked; it made {producer.done} launches"
    assert producer.is_alive() and producer.done == DEPTH - 1  # the gate is the depth's first item
    assert len(backend(queue)._items) == DEPTH
    assert view[0] == 0
    gate.open()
    producer.finish()
    assert producer.error is None
    api.olSyncQueue(queue)
    assert view[0] == total
    api.olDestroyQueue(queue)
    api.olMemFree(counter)
    api.olDestroyProgram(program)


SUBMITS: dict[str, Callable[[api.Device, api.Queue, dict[str, Any]], Callable[[], object]]] = {
    # what to submit to a full queue, and (in ``made``) what the test checks once it ran
    "launch with work-group memory": lambda host, queue, made: (
        lambda: api.olLaunchKernel(queue, host, kernel(made["program"], "increment"),
                                   struct.pack("<Q", made["counter"]), launch_args(groups=1, size=1, dyn=4))),
    "memcpy": lambda host, queue, made: (
        lambda: api.olMemcpy(queue, made["dst"], host, made["src"], host, 8)),
    "fill": lambda host, queue, made: (
        lambda: api.olMemFill(queue, made["dst"], b"\x5a", 8)),
    "host function": lambda host, queue, made: (
        lambda: api.olLaunchHostFunction(queue, made["ran"].append, "ran")),
    "event record": lambda host, queue, made: (
        lambda: made.__setitem__("event", api.olCreateEvent(queue))),
    "event wait": lambda host, queue, made: (
        lambda: api.olWaitEvents(queue, [made["other_event"]])),
}


@pytest.mark.parametrize("kind", SUBMITS)
def test_every_kind_of_work_waits_for_room(shallow: api.Device, gates: list[Gate], build: Callable[..., bytes],
                                           kind: str) -> None:
    counter, counter_view = alloc_u32(shallow)
    dst = api.olMemAlloc(shallow, AllocType.HOST, 8)
    src = api.olMemAlloc(shallow, AllocType.HOST, 8)
    ctypes.memmove(src, b"abcdefgh", 8)
    ctypes.memset(dst, 0, 8)
    other = api.olCreateQueue(shallow)
    other_gate = Gate(other)
    gates.append(other_gate)
    made: dict[str, Any] = {"program": api.olCreateProgram(shallow, build("basic")), "counter": counter,
                            "dst": dst, "src": src, "ran": [], "other_event": api.olCreateEvent(other)}
    queue, gate, spy = held_queue(shallow, gates, fill=DEPTH - 1)
    producer = Producer(SUBMITS[kind](shallow, queue, made), 1)
    producer.start()
    assert spy.waiting.wait(TIMEOUT), f"a {kind} on a full queue did not wait for room"
    assert producer.is_alive() and producer.done == 0
    gate.open()
    producer.finish()
    assert producer.error is None
    other_gate.open()
    api.olSyncQueue(queue)
    result = ctypes.string_at(dst, 8)
    expected = {"launch with work-group memory": lambda: counter_view[0] == 1,
                "memcpy": lambda: result == b"abcdefgh",
                "fill": lambda: result == b"\x5a" * 8,
                "host function": lambda: made["ran"] == ["ran"],
                "event record": lambda: api.olGetEventInfo(made["event"], EventInfo.IS_COMPLETE),
                "event wait": lambda: api.olGetEventInfo(made["other_event"], EventInfo.IS_COMPLETE)}
    assert expected[kind](), f"the {kind} did not do its work once it was queued"
    api.olSyncQueue(other)
    for name in ("event", "other_event"):
        if name in made:
            api.olDestroyEvent(made[name])
    for queue_ in (queue, other):
        api.olDestroyQueue(queue_)
    for address in (counter, dst, src):
        api.olMemFree(address)
    api.olDestroyProgram(made["program"])


def test_a_failing_queue_wakes_its_blocked_submitter_with_queue_error(shallow: api.Device, gates: list[Gate]) -> None:
    queue = api.olCreateQueue(shallow)
    spy = spy_on(queue)
    go = threading.Event()

    def fail_when_told(_: object) -> None:
        if not go.wait(TIMEOUT):
            raise TimeoutError("never told")
        raise ValueError("the gate failed on purpose")

    api.olLaunchHostFunction(queue, fail_when_told)
    for _ in range(DEPTH - 1):
        api.olLaunchHostFunction(queue, nothing)
    ran: list[str] = []
    producer = Producer(lambda: api.olLaunchHostFunction(queue, ran.append, "too late"), 1)
    producer.start()
    assert spy.waiting.wait(TIMEOUT), "the producer was never blocked"
    go.set()
    producer.finish()
    assert isinstance(producer.error, OffloadError) and producer.error.code == ErrorCode.QUEUE_ERROR, producer.error
    assert "the gate failed on purpose" in str(producer.error)
    assert ran == []  # its work was not queued
    with pytest.raises(OffloadError):
        api.olSyncQueue(queue)
    api.olDestroyQueue(queue)


def test_a_submitter_blocked_when_the_device_shuts_down_gets_uninitialized(shallow: api.Device,
                                                                           gates: list[Gate]) -> None:
    queue, gate, spy = held_queue(shallow, gates, fill=DEPTH - 1)
    producer = Producer(lambda: api.olLaunchHostFunction(queue, nothing), 1)
    producer.start()
    assert spy.waiting.wait(TIMEOUT), "the producer was never blocked"
    pool = backend(queue).pool
    pool.shutdown(timeout=0)  # what olShutDown does to the device once its queues are drained
    producer.finish()
    assert isinstance(producer.error, OffloadError) and producer.error.code == ErrorCode.UNINITIALIZED, producer.error
    assert len(backend(queue)._items) == DEPTH  # nothing was added
    gate.open()  # the worker that holds the queue finishes it, then exits
    api.olSyncQueue(queue)
    api.olDestroyQueue(queue)


def test_olshutdown_with_a_blocked_submitter_finishes_once_the_queue_moves(depth_env: Callable[[str | None], None],
                                                                            gates: list[Gate]) -> None:
    depth_env(str(DEPTH))
    api.olInit()
    try:
        queue, gate, spy = held_queue(find_host(), gates, fill=DEPTH - 1)
        producer = Producer(lambda: api.olLaunchHostFunction(queue, nothing), 1)
        producer.start()
        assert spy.waiting.wait(TIMEOUT), "the producer was never blocked"
        shutdown = threading.Thread(target=api.olShutDown, daemon=True)
        shutdown.start()  # it drains the queue: it waits for the gate like the producer
        assert shutdown.is_alive()
    except BaseException:
        for gate_ in gates:
            gate_.open()
        api.olShutDown()
        raise
    gate.open()
    shutdown.join(TIMEOUT)
    assert not shutdown.is_alive(), "olShutDown did not finish"
    producer.finish()
    assert producer.error is None  # its item went in as the queue drained


def run_script(script: str, depth: str | None = str(DEPTH), timeout: float = 60) -> dict[str, Any]:
    """Run ``script`` in a fresh process (OFFLOADRT_HOST_QUEUE_DEPTH=``depth``); its last stdout
    line is JSON, returned. A hang is a failure, not a hung test run."""
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_TRACE", "OFFLOADRT_HOST_QUEUE_DEPTH")}
    if depth is not None:
        env["OFFLOADRT_HOST_QUEUE_DEPTH"] = depth
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(script)], env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the script hung (no result within {timeout} s); its stderr:\n{exc.stderr!r}")
    assert done.returncode == 0, f"the script failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


PRELUDE = """
    import json, os, signal, threading
    from offloadrt import api, DeviceInfo, DeviceType, OffloadError
    api.olInit()
    devices = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
    def nothing(_):
        pass
    def gated(queue):
        opened, entered = threading.Event(), threading.Event()
        def gate(_):
            entered.set()
            opened.wait(60)
        api.olLaunchHostFunction(queue, gate)
        entered.wait(60)
        return opened
"""


def test_a_host_function_submitting_to_its_own_full_queue_is_refused() -> None:
    result = run_script("""
        queue = api.olCreateQueue(host)
        outcome = {"submitted": 0}
        finished = threading.Event()
        def submitter(_):
            try:
                for _ in range(100):
                    api.olLaunchHostFunction(queue, nothing)
                    outcome["submitted"] += 1
            except OffloadError as exc:
                outcome["code"], outcome["details"] = exc.code.name, exc.details
            finished.set()
        api.olLaunchHostFunction(queue, submitter)
        outcome["finished"] = finished.wait(30)  # False if the host function waits for room behind itself
        api.olSyncQueue(queue)
        print(json.dumps(outcome))
    """)
    assert result["finished"], "the host function hung"
    assert result["submitted"] == DEPTH - 1  # the host function itself is the depth's first item
    assert result["code"] == "INVALID_ARGUMENT"
    assert "host function" in result["details"] and "its own queue" in result["details"]
    assert "OFFLOADRT_HOST_QUEUE_DEPTH" in result["details"]


def test_a_host_function_submitting_to_another_full_queue_is_refused() -> None:
    result = run_script(f"""
        full = api.olCreateQueue(host)
        opened = gated(full)
        for _ in range({DEPTH} - 1):
            api.olLaunchHostFunction(full, nothing)
        outcome = {{}}
        def submitter(_):
            try:
                api.olLaunchHostFunction(full, nothing)
                outcome["submitted"] = True
            except OffloadError as exc:
                outcome["code"], outcome["details"] = exc.code.name, exc.details
        queue = api.olCreateQueue(host)
        api.olLaunchHostFunction(queue, submitter)
        api.olSyncQueue(queue)  # hangs if the host function waits for room in the other queue
        opened.set()
        api.olSyncQueue(full)
        print(json.dumps(outcome))
    """)
    assert "submitted" not in result
    assert result["code"] == "INVALID_ARGUMENT"
    assert "host function" in result["details"] and "full" in result["details"]


def test_ctrl_c_interrupts_a_blocked_submit_and_leaves_the_queue_whole() -> None:
    result = run_script(f"""
        queue = api.olCreateQueue(host)
        ai = queue._ai
        class Spy(threading.Condition):
            waiting = threading.Event()
            def wait(self, timeout=None):
                self.waiting.set()
                return super().wait(timeout)
        ai._room = Spy(threading.Lock())
        opened = gated(queue)
        ran = []
        for index in range({DEPTH} - 1):
            api.olLaunchHostFunction(queue, ran.append, index)
        def interrupt():
            if ai._room.waiting.wait(30):
                os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt, daemon=True).start()
        outcome = {{}}
        try:
            api.olLaunchHostFunction(queue, ran.append, "interrupted")
            outcome["returned"] = True
        except KeyboardInterrupt:
            outcome["interrupted"] = True
        outcome["pending"], outcome["waiting"] = len(ai._items), ai.submitters_waiting
        opened.set()
        api.olLaunchHostFunction(queue, ran.append, "after")
        api.olSyncQueue(queue)
        outcome["ran"] = ran
        print(json.dumps(outcome))
    """)
    assert result.get("interrupted") and "returned" not in result
    assert result["pending"] == DEPTH and result["waiting"] == 0
    assert result["ran"] == [*range(DEPTH - 1), "after"]


def test_the_default_depth_is_a_few_thousand(depth_env: Callable[[str | None], None], gates: list[Gate]) -> None:
    depth_env(None)
    api.olInit()
    try:
        queue, gate, spy = held_queue(find_host(), gates)
        producer = Producer(lambda: api.olLaunchHostFunction(queue, nothing), 20_000)
        producer.start()
        assert spy.waiting.wait(TIMEOUT), f"{producer.done} submits did not fill the queue"
        assert producer.done == DEFAULT_QUEUE_DEPTH - 1
        assert 1000 <= DEFAULT_QUEUE_DEPTH <= 10_000
        gate.open()
        producer.finish()
        assert producer.error is None
    finally:
        for gate_ in gates:
            gate_.open()
        api.olShutDown()


@pytest.mark.parametrize(("setting", "depth", "warns"), [("1", 1, False), ("0", sys.maxsize, False),
                                                         ("lots", DEFAULT_QUEUE_DEPTH, True),
                                                         ("-3", DEFAULT_QUEUE_DEPTH, True)])
def test_the_depth_setting_is_read_when_the_runtime_starts(depth_env: Callable[[str | None], None], setting: str,
                                                           depth: int, warns: bool) -> None:
    depth_env(setting)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        api.olInit()
    try:
        queue = api.olCreateQueue(find_host())
        assert backend(queue).depth == depth
        api.olDestroyQueue(queue)
    finally:
        api.olShutDown()
    about_it = [w for w in seen
                if issubclass(w.category, OffloadWarning) and "OFFLOADRT_HOST_QUEUE_DEPTH" in str(w.message)]
    assert bool(about_it) == warns, [str(w.message) for w in seen]
