"""olGetQueueError: an offloadrt addition, no upstream file (liboffload's RFC #155596 was never
merged). Written from the "Async errors" rules of the runtime issue and docs/api.md:

* ``olGetQueueError(queue) -> (OffloadError or None, failing Queue or None)``: ``(None, None)``
  while the queue is healthy; once it failed, the original error and the queue that failed first;
* a kernel fault or a host function that raises puts its queue in the error state: later work
  on it does not run, ``olSyncQueue`` / ``olSyncEvent`` raise ``QUEUE_ERROR`` promptly;
* a queue that waited on an event of a failed queue fails too, naming the queue that failed first;
* the error is never cleared; a failed queue is destroyed normally and its backend queue is not
  handed to a new ``olCreateQueue`` in the failed state;
* usual handle rules: ``None`` → ``INVALID_NULL_HANDLE``, a destroyed queue → ``INVALID_QUEUE``,
  another type → ``INVALID_ARGUMENT``.

Faults come from host functions that raise (every device); the kernel-fault case uses a kernel
that returns non-zero, which docs/api.md defines for host kernels, so it runs on the host device.
"""

from __future__ import annotations

import itertools
import shutil
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import offloadrt
from offloadrt import ErrorCode, OffloadError, SymbolKind, api

from ..conftest import assert_error
from ._helpers import TIMEOUT, launch_size, within

MESSAGE = "boom-4711"
FAULT = 4242

FAIL_WITH_C = r"""
#include <offloadrt/host_kernel.h>
#include <string.h>
/* fail_with(int32_t status): returns status, so a non-zero status is a kernel fault */
OL_HOST_KERNEL fail_with(const void *args, const ol_host_launch_t *launch) {
  (void)launch;
  int status;
  memcpy(&status, args, sizeof status);
  return status;
}
"""


def raise_error(_: object) -> None:
    raise RuntimeError(MESSAGE)


def raise_second(_: object) -> None:
    raise ValueError("second-fault")


class Gate:
    """A host function that holds its queue until :meth:`open`, so that everything the test
    enqueues behind it is enqueued before any fault happens (at most ``TIMEOUT`` s)."""

    def __init__(self, queue: api.Queue):
        self._flag = threading.Event()
        api.olLaunchHostFunction(queue, lambda _: self._flag.wait(TIMEOUT))

    def open(self) -> None:
        self._flag.set()


@pytest.fixture
def gates() -> Iterator[Callable[[api.Queue], Gate]]:
    made: list[Gate] = []

    def gate(queue: api.Queue) -> Gate:
        made.append(Gate(queue))
        return made[-1]

    yield gate
    for g in made:  # never leave a queue blocked for the teardown's olShutDown
        g.open()


def expect_queue_error(fn: Callable[..., object], *args: object) -> OffloadError:
    """``fn(*args)`` must raise QUEUE_ERROR, promptly (never hang)."""
    return assert_error(ErrorCode.QUEUE_ERROR, within, fn, *args)


def enqueue_on_failed(fn: Callable[..., object], *args: object) -> None:
    """Enqueue work on a queue that has already failed: the runtime may reject it with
    QUEUE_ERROR or accept it (it must then never run); any other outcome is wrong."""
    try:
        fn(*args)
    except OffloadError as exc:
        assert exc.code == ErrorCode.QUEUE_ERROR, f"enqueue on a failed queue: expected QUEUE_ERROR, got {exc!r}"


def assert_original(error: object) -> None:
    assert isinstance(error, OffloadError), f"expected the original OffloadError, got {error!r}"
    assert error.code != ErrorCode.QUEUE_ERROR, f"the original error, not the QUEUE_ERROR wrapper: {error!r}"
    assert MESSAGE in str(error), f"the error must say what failed (the host function's exception): {error!r}"


def fail(queue: api.Queue) -> None:
    """Make ``queue`` fail and wait until it has: a raising host function, then a sync."""
    api.olLaunchHostFunction(queue, raise_error)
    expect_queue_error(api.olSyncQueue, queue)


# ---- healthy queues ------------------------------------------------------------------------------

def test_success_healthy_new_queue(queue: api.Queue) -> None:
    assert api.olGetQueueError(queue) == (None, None)


def test_success_healthy_after_work(queue: api.Queue) -> None:
    ran = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    event = api.olCreateEvent(queue)
    within(api.olSyncQueue, queue)
    within(api.olSyncEvent, event)
    assert ran.is_set()
    assert api.olGetQueueError(queue) == (None, None)


def test_success_healthy_while_blocked(queue: api.Queue, gates: Callable[[api.Queue], Gate]) -> None:
    """Pending work that has not failed (yet) is no error."""
    gate = gates(queue)
    api.olLaunchHostFunction(queue, raise_error)
    assert api.olGetQueueError(queue) == (None, None)
    gate.open()
    expect_queue_error(api.olSyncQueue, queue)
    assert_original(api.olGetQueueError(queue)[0])


# ---- invalid arguments ---------------------------------------------------------------------------

def test_invalid_null_handle(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetQueueError, None)


def test_invalid_queue_destroyed(device: api.Device) -> None:
    queue = api.olCreateQueue(device)
    api.olDestroyQueue(queue)
    assert_error(ErrorCode.INVALID_QUEUE, api.olGetQueueError, queue)


def test_invalid_argument_not_a_queue(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_ARGUMENT, api.olGetQueueError, device)


# ---- a failed queue ------------------------------------------------------------------------------

def test_host_function_error(queue: api.Queue) -> None:
    fail(queue)
    error, origin = api.olGetQueueError(queue)
    assert_original(error)
    assert origin is queue


def test_sync_queue_after_fault(queue: api.Queue) -> None:
    api.olLaunchHostFunction(queue, raise_error)
    err = expect_queue_error(api.olSyncQueue, queue)
    assert MESSAGE in str(err), f"QUEUE_ERROR should say what failed: {err!r}"


def test_sync_event_after_fault(queue: api.Queue, gates: Callable[[api.Queue], Gate]) -> None:
    gate = gates(queue)
    api.olLaunchHostFunction(queue, raise_error)
    event = api.olCreateEvent(queue)
    gate.open()
    expect_queue_error(api.olSyncEvent, event)


def test_later_work_does_not_run(queue: api.Queue, gates: Callable[[api.Queue], Gate]) -> None:
    ran = threading.Event()
    gate = gates(queue)
    api.olLaunchHostFunction(queue, raise_error)
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    gate.open()
    expect_queue_error(api.olSyncQueue, queue)
    assert not ran.is_set(), "a host function enqueued behind the fault ran"


def test_enqueue_after_fault_does_not_run(queue: api.Queue) -> None:
    fail(queue)
    ran = threading.Event()
    enqueue_on_failed(api.olLaunchHostFunction, queue, lambda _: ran.set())
    expect_queue_error(api.olSyncQueue, queue)
    assert not ran.is_set(), "a host function enqueued on a failed queue ran"


def test_error_never_cleared(queue: api.Queue) -> None:
    fail(queue)
    first = api.olGetQueueError(queue)
    assert_original(first[0])
    for _ in range(3):
        expect_queue_error(api.olSyncQueue, queue)
        assert api.olGetQueueError(queue) == first
    # More failing work does not replace the original error.
    enqueue_on_failed(api.olLaunchHostFunction, queue, raise_second)
    expect_queue_error(api.olSyncQueue, queue)
    error, origin = api.olGetQueueError(queue)
    assert error is first[0]
    assert origin is queue


def test_waiting_queue_names_first_failing_queue(device: api.Device, gates: Callable[[api.Queue], Gate]) -> None:
    first = api.olCreateQueue(device)
    gate = gates(first)
    api.olLaunchHostFunction(first, raise_error)
    event = api.olCreateEvent(first)
    second = api.olCreateQueue(device)
    ran = threading.Event()
    api.olWaitEvents(second, [event])
    api.olLaunchHostFunction(second, lambda _: ran.set())
    gate.open()
    expect_queue_error(api.olSyncQueue, second)
    assert not ran.is_set(), "work behind a wait on a failed queue ran"

    error, origin = api.olGetQueueError(second)
    assert_original(error)
    assert origin is first
    assert api.olGetQueueError(first) == (error, first)


def test_waiting_on_already_failed_queue(device: api.Device) -> None:
    """The same when the event's queue had failed before olWaitEvents was called."""
    first = api.olCreateQueue(device)
    api.olLaunchHostFunction(first, raise_error)
    event = api.olCreateEvent(first)
    expect_queue_error(api.olSyncQueue, first)
    second = api.olCreateQueue(device)
    ran = threading.Event()
    enqueue_on_failed(api.olWaitEvents, second, [event])
    enqueue_on_failed(api.olLaunchHostFunction, second, lambda _: ran.set())
    expect_queue_error(api.olSyncQueue, second)
    assert not ran.is_set(), "work behind a wait on a failed queue ran"
    error, origin = api.olGetQueueError(second)
    assert_original(error)
    assert origin is first


def test_chain_names_first_failing_queue(device: api.Device, gates: Callable[[api.Queue], Gate]) -> None:
    """A waits-on chain of three queues: the last still names the first."""
    queues = [api.olCreateQueue(device) for _ in range(3)]
    gate = gates(queues[0])
    api.olLaunchHostFunction(queues[0], raise_error)
    for before, after in itertools.pairwise(queues):
        api.olWaitEvents(after, [api.olCreateEvent(before)])
    gate.open()
    expect_queue_error(api.olSyncQueue, queues[2])
    error, origin = api.olGetQueueError(queues[2])
    assert_original(error)
    assert origin is queues[0]
    assert api.olGetQueueError(queues[1]) == (error, queues[0])


def test_failed_queue_destroyed_and_not_reused_failed(device: api.Device) -> None:
    queue = api.olCreateQueue(device)
    fail(queue)
    api.olDestroyQueue(queue)
    for _ in range(4):  # whatever backend queue a new queue gets, it is healthy
        fresh = api.olCreateQueue(device)
        assert api.olGetQueueError(fresh) == (None, None)
        ran = threading.Event()
        api.olLaunchHostFunction(fresh, threading.Event.set, ran)
        within(api.olSyncQueue, fresh)
        assert ran.is_set()
        api.olDestroyQueue(fresh)


def test_failed_busy_queue_destroyed_and_not_reused_failed(device: api.Device,
                                                             gates: Callable[[api.Queue], Gate]) -> None:
    """A failed queue destroyed while still busy (parked) is not recycled in the failed state."""
    queue = api.olCreateQueue(device)
    gate = gates(queue)
    api.olLaunchHostFunction(queue, raise_error)
    done = api.olCreateEvent(queue)
    api.olDestroyQueue(queue)
    gate.open()
    expect_queue_error(api.olSyncEvent, done)  # the parked queue has now failed and finished
    for _ in range(4):
        fresh = api.olCreateQueue(device)
        assert api.olGetQueueError(fresh) == (None, None)
        ran = threading.Event()
        api.olLaunchHostFunction(fresh, threading.Event.set, ran)
        within(api.olSyncQueue, fresh)
        assert ran.is_set()
        api.olDestroyQueue(fresh)


# ---- a kernel fault (host kernel ABI: a non-zero return) ------------------------------------------

@pytest.fixture(scope="module")
def fail_with_image(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.fail("no C compiler (cc) on PATH: the host device kernels are built with it")
    out = tmp_path_factory.mktemp("queue_error")
    source = out / "fail_with.c"
    source.write_text(FAIL_WITH_C)
    target = out / "fail_with.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-I", offloadrt.get_include(), str(source),
                    "-o", str(target)], check=True, capture_output=True)
    return Path(target).read_bytes()


def test_kernel_fault(host: api.Device, fail_with_image: bytes, gates: Callable[[api.Queue], Gate]) -> None:
    program = api.olCreateProgram(host, fail_with_image)
    kernel = api.olGetSymbol(program, "fail_with", SymbolKind.KERNEL)
    queue = api.olCreateQueue(host)
    ran = threading.Event()
    gate = gates(queue)
    api.olLaunchKernel(queue, host, kernel, struct.pack("<i", FAULT), launch_size(1))
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    assert api.olGetQueueError(queue) == (None, None)
    gate.open()
    err = expect_queue_error(api.olSyncQueue, queue)
    assert str(FAULT) in str(err), f"QUEUE_ERROR should carry the kernel's return value: {err!r}"
    assert not ran.is_set(), "work enqueued after the kernel fault ran"

    error, origin = api.olGetQueueError(queue)
    assert isinstance(error, OffloadError)
    assert error.code != ErrorCode.QUEUE_ERROR
    assert str(FAULT) in error.details, f"the error must carry the kernel's return value: {error!r}"
    assert origin is queue
    api.olDestroyQueue(queue)
    api.olDestroyProgram(program)
