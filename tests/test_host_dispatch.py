"""How the host device runs work-groups and queues: native dispatch through the runners that
host_kernel.h exports against the Python fallback for images without them (same results, same
fault reports), work-group memory, multi-dimensional grids, batches of queued one-group launches,
many queues, blocking host functions, event waits between queues, and shutdown with work in flight."""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import (
    TIMEOUT,
    Gate,
    call_with_timeout,
    compile_kernels,
    expect_error,
    find_host,
    kernel,
    launch_args,
    u32_view,
)

from offloadrt import AllocType, Dimensions, ErrorCode, KernelLaunchSizeArgs, OffloadError, OffloadWarning, api
from offloadrt.plugins.host.exec import HostQueue

SOURCE = r"""
#ifdef NO_RUNNERS  /* the kernel ABI written out by hand: an image without the native runners */
#include <stdint.h>
typedef struct { uint32_t x, y, z; } ol_host_dim3_t;
typedef struct { ol_host_dim3_t group_id, num_groups, group_size; void *dyn_shared_memory; } ol_host_launch_t;
#define OL_HOST_KERNEL __attribute__((visibility("default"))) int
#else
#include <offloadrt/host_kernel.h>
#endif

/* out[4 * linear group + 0..3] = group x, y, z and the group's item count */
OL_HOST_KERNEL group_ids(const void *args, const ol_host_launch_t *l) {
  uint32_t *out = *(uint32_t *const *)args;
  uint64_t g = l->group_id.x + (uint64_t)l->num_groups.x * (l->group_id.y + (uint64_t)l->num_groups.y * l->group_id.z);
  out[4 * g + 0] = l->group_id.x;
  out[4 * g + 1] = l->group_id.y;
  out[4 * g + 2] = l->group_id.z;
  out[4 * g + 3] = l->group_size.x * l->group_size.y * l->group_size.z;
  return 0;
}

struct fault_args { uint32_t x, y, z; int32_t status; };
OL_HOST_KERNEL fault_at(const void *args, const ol_host_launch_t *l) {
  const struct fault_args *a = args;
  return l->group_id.x == a->x && l->group_id.y == a->y && l->group_id.z == a->z ? a->status : 0;
}

/* Each group writes its work-group memory, then reads it back in reverse ("after a barrier"). */
struct shared_args { uint32_t *out; uint32_t words; };
OL_HOST_KERNEL shared_sum(const void *args, const ol_host_launch_t *l) {
  const struct shared_args *a = args;
  uint32_t *memory = l->dyn_shared_memory;
  uint64_t sum = 0;
  if (!memory) return 99;
  for (uint32_t i = 0; i < a->words; ++i) memory[i] = l->group_id.x + i;
  for (uint32_t i = 0; i < a->words; ++i) sum += memory[a->words - 1 - i];
  a->out[l->group_id.x] = (uint32_t)sum;
  return 0;
}

/* Adds `add` to *cell once per work-group (groups of a launch may run at once: atomically). */
struct add_args { uint32_t *cell; uint32_t add; uint32_t pad; };
OL_HOST_KERNEL accumulate(const void *args, const ol_host_launch_t *l) {
  const struct add_args *a = args;
  (void)l;
  __atomic_fetch_add(a->cell, a->add, __ATOMIC_RELAXED);
  return 0;
}

/* In-order check: faults (7) unless *cell == expect, then counts it up. */
struct step_args { uint32_t *cell; uint32_t expect; uint32_t pad; };
OL_HOST_KERNEL step(const void *args, const ol_host_launch_t *l) {
  const struct step_args *a = args;
  (void)l;
  if (*a->cell != a->expect) return 7;
  *a->cell = a->expect + 1;
  return 0;
}
"""
MODES = ("native", "fallback")


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The kernels built with host_kernel.h (native runners) and without it (Python fallback)."""
    workdir = tmp_path_factory.mktemp("host_dispatch")
    source = Path(workdir) / "host_dispatch.c"
    source.write_text(SOURCE)
    return {"native": compile_kernels(source, workdir), "fallback": compile_kernels(source, workdir, ("-DNO_RUNNERS",))}


@pytest.fixture
def programs(host: api.Device, images: dict[str, bytes]) -> dict[str, api.Program]:
    return {mode: api.olCreateProgram(host, image) for mode, image in images.items()}


@pytest.fixture
def words(host: api.Device) -> Iterator[Callable[..., tuple[int, ctypes.Array]]]:
    """``words(count, fill)`` → (address, uint32 view) of host memory, freed after the test."""
    live: list[int] = []

    def make(count: int, fill: int = 0) -> tuple[int, ctypes.Array]:
        address = api.olMemAlloc(host, AllocType.HOST, 4 * count)
        live.append(address)
        view = u32_view(address, count)
        ctypes.memset(address, fill & 0xFF, 4 * count)
        return address, view

    yield make
    for address in live:
        api.olMemFree(address)


def sizes(groups: tuple[int, int, int], group: tuple[int, int, int] = (1, 1, 1), dyn: int = 0) -> KernelLaunchSizeArgs:
    return KernelLaunchSizeArgs(3, Dimensions(*groups), Dimensions(*group), dyn)


def test_the_fallback_image_has_no_runners_and_the_native_one_has(programs) -> None:
    assert kernel(programs["native"], "group_ids")._target.runners is not None
    assert kernel(programs["fallback"], "group_ids")._target.runners is None


@pytest.mark.parametrize("queued", [True, False], ids=["queued", "no-queue"])
@pytest.mark.parametrize("grid, group", [((1000, 1, 1), (1, 1, 1)), ((5, 3, 2), (2, 2, 1)), ((7, 1, 3), (4, 1, 2)),
                                         ((1, 1, 1), (8, 1, 1)), ((2, 65, 1), (1, 1, 1))])
def test_every_group_runs_once_with_its_coordinates_native_and_fallback(host, programs, words, grid, group,
                                                                         queued) -> None:
    total = grid[0] * grid[1] * grid[2]
    expected = [value for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])
                for value in (x, y, z, group[0] * group[1] * group[2])]
    queue = api.olCreateQueue(host) if queued else None
    for mode in MODES:
        address, view = words(4 * total, 0xFF)
        api.olLaunchKernel(queue, host, kernel(programs[mode], "group_ids"), struct.pack("<Q", address),
                           sizes(grid, group))
        if queue is not None:
            api.olSyncQueue(queue)
        assert list(view) == expected, mode
    if queue is not None:
        api.olDestroyQueue(queue)


@pytest.mark.parametrize("grid, where", [((6, 4, 3), (2, 1, 0)), ((6, 4, 3), (5, 3, 2)), ((3000, 1, 1), (2999, 0, 0)),
                                         ((1, 1, 1), (0, 0, 0))])
def test_a_fault_names_the_same_group_native_and_fallback(host, programs, grid, where) -> None:
    blob = struct.pack("<3Ii", *where, 5)
    reports = {}
    for mode in MODES:
        fault_at = kernel(programs[mode], "fault_at")
        error = expect_error(ErrorCode.BACKEND_FAILURE, api.olLaunchKernel, None, host, fault_at, blob, sizes(grid))
        queue = api.olCreateQueue(host)
        api.olLaunchKernel(queue, host, fault_at, blob, sizes(grid))
        queued = expect_error(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
        api.olDestroyQueue(queue)
        assert str(queued.__cause__) == str(error)
        reports[mode] = error.details
    assert reports["native"] == reports["fallback"]
    assert f"returned 5 in work-group {where}" in reports["native"]


def test_a_fault_stops_the_launch_and_the_queue_runs_nothing_after_it(host, programs, words) -> None:
    for mode in MODES:
        queue = api.olCreateQueue(host)
        address, view = words(1)
        api.olLaunchKernel(queue, host, kernel(programs[mode], "fault_at"), struct.pack("<3Ii", 40, 0, 0, 3),
                           sizes((4000, 1, 1)))
        api.olLaunchKernel(queue, host, kernel(programs[mode], "step"), struct.pack("<QII", address, 0, 0),
                           launch_args())
        expect_error(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
        assert view[0] == 0, "work after the faulted launch ran"
        api.olDestroyQueue(queue)


@pytest.mark.parametrize("groups, dyn_words", [(1, 16), (64, 1024), (300, 5)])
def test_each_group_gets_its_own_work_group_memory(host, programs, words, groups, dyn_words) -> None:
    expected = [dyn_words * g + dyn_words * (dyn_words - 1) // 2 for g in range(groups)]
    queue = api.olCreateQueue(host)
    for mode in MODES:
        address, view = words(groups)
        blob = struct.pack("<QI4x", address, dyn_words)
        api.olLaunchKernel(queue, host, kernel(programs[mode], "shared_sum"), blob,
                           launch_args(groups, 1, 4 * dyn_words))
        api.olSyncQueue(queue)
        assert list(view) == expected, mode
        # without work-group memory the kernel sees NULL (and faults on purpose)
        expect_error(ErrorCode.BACKEND_FAILURE, api.olLaunchKernel, None, host, kernel(programs[mode], "shared_sum"),
                     blob, launch_args(groups))
    api.olDestroyQueue(queue)


@pytest.mark.parametrize("launches", [3, 8, 40, 2500], ids=lambda n: f"{n}-launches")
def test_queued_one_group_launches_run_in_order_singly_and_in_batches(host, programs, words, gate,
                                                                     launches) -> None:
    """Held behind a gate, the launches reach the worker as one run: below the batch threshold
    they are called one by one, above it in one native call (and in several for the largest)."""
    for mode in MODES:
        queue = api.olCreateQueue(host)
        step = kernel(programs[mode], "step")
        address, view = words(1)
        with gate(queue):
            for i in range(launches):
                api.olLaunchKernel(queue, host, step, struct.pack("<QII", address, i, 0), launch_args())
        api.olSyncQueue(queue)
        assert view[0] == launches, mode
        api.olDestroyQueue(queue)


@pytest.mark.parametrize("faulty", [0, 5, 13, 1023, 1030])
def test_a_fault_inside_a_batch_fails_the_queue_at_that_launch(host, programs, words, gate, faulty) -> None:
    for mode in MODES:
        queue = api.olCreateQueue(host)
        step = kernel(programs[mode], "step")
        address, view = words(1)
        with gate(queue):
            for i in range(1100):
                api.olLaunchKernel(queue, host, step, struct.pack("<QII", address, i + 1 if i == faulty else i, 0),
                                   launch_args())
        error = expect_error(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
        assert "kernel 'step' faulted: it returned 7" in str(error.__cause__)
        assert view[0] == faulty, f"{mode}: the launches before the fault ran, none after it"
        api.olDestroyQueue(queue)


def test_equal_blobs_in_new_objects_and_many_different_blobs_launch_what_they_say(host, programs, words) -> None:
    """Queued items are kept per blob content: a new bytes object equal to an earlier blob, more
    different blobs than are kept, the same object again, across launch shapes, all add up."""
    queue = api.olCreateQueue(host)
    for mode in MODES:
        accumulate = kernel(programs[mode], "accumulate")
        address, view = words(1)
        expected = 0
        same = struct.pack("<QII", address, 1000, 0)
        for i in range(600):
            groups = 1 + i % 3
            add = i % 97  # more distinct blobs than a shape keeps items of
            blob = same if i % 5 == 0 else struct.pack("<QII", address, add, 0)
            api.olLaunchKernel(queue, host, accumulate, blob, launch_args(groups))
            expected += groups * (1000 if i % 5 == 0 else add)
        api.olSyncQueue(queue)
        assert view[0] == expected, mode
    api.olDestroyQueue(queue)


def test_many_queues_each_run_in_order(host, programs, words) -> None:
    count, per_queue = 300, 12
    step = kernel(programs["native"], "step")
    queues = [api.olCreateQueue(host) for _ in range(count)]
    address, view = words(count)
    for i in range(per_queue):
        for q, queue in enumerate(queues):
            api.olLaunchKernel(queue, host, step, struct.pack("<QII", address + 4 * q, i, 0), launch_args())
    for queue in queues:
        api.olSyncQueue(queue)
        api.olDestroyQueue(queue)
    assert list(view) == [per_queue] * count


@pytest.mark.parametrize("rounds", [1, 3, 20])
def test_round_robin_over_many_queues_a_fault_fails_only_its_queue(host, programs, words, rounds) -> None:
    """Workers run the launches at the heads of several ready queues in one native call; each queue
    still runs in order, and a fault there fails only the queue whose launch faulted."""
    count, faulty_queue, faulty_step = 128, 37, rounds // 2
    queues = [api.olCreateQueue(host) for _ in range(count)]
    address, view = words(count)
    for i in range(rounds):
        for q, queue in enumerate(queues):
            mode = "fallback" if q % 16 == 5 else "native"  # some without runners, among the others
            expect = i + 1 if (q, i) == (faulty_queue, faulty_step) else i
            blob = struct.pack("<QII", address + 4 * q, expect, 0)
            try:
                api.olLaunchKernel(queue, host, kernel(programs[mode], "step"), blob, launch_args())
            except OffloadError as exc:  # the failed queue refuses more work once the fault has happened
                assert q == faulty_queue and i > faulty_step and exc.code == ErrorCode.QUEUE_ERROR, exc
    for q, queue in enumerate(queues):
        if q == faulty_queue:
            error = expect_error(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
            assert "kernel 'step' faulted: it returned 7" in str(error.__cause__)
        else:
            api.olSyncQueue(queue)
        api.olDestroyQueue(queue)
    assert list(view) == [faulty_step if q == faulty_queue else rounds for q in range(count)]


def test_blocking_host_functions_do_not_starve_other_queues(host, programs, words) -> None:
    """More queues block in host functions than the pool has workers; another queue still runs."""
    pool_size = host._gdev.pool.size
    blocked = [api.olCreateQueue(host) for _ in range(pool_size + 2)]
    gates = [Gate(queue) for queue in blocked]
    try:
        for g in gates:
            assert g.entered.wait(TIMEOUT), "a blocking host function never started"
        free = api.olCreateQueue(host)
        address, view = words(1)
        for i in range(20):
            api.olLaunchKernel(free, host, kernel(programs["native"], "step"), struct.pack("<QII", address, i, 0),
                               launch_args())
        call_with_timeout(api.olSyncQueue, free)
        assert view[0] == 20
        assert not any(g.opened.is_set() for g in gates)
        api.olDestroyQueue(free)
    finally:
        for g in gates:
            g.open()
    for queue in blocked:
        call_with_timeout(api.olSyncQueue, queue)
        api.olDestroyQueue(queue)


def test_host_functions_run_on_the_pool_workers_between_launches(host, programs, words) -> None:
    queue = api.olCreateQueue(host)
    address, view = words(1)
    names: list[str] = []
    step = kernel(programs["native"], "step")
    for round_ in range(50):
        for i in range(3):
            api.olLaunchKernel(queue, host, step, struct.pack("<QII", address, 4 * round_ + i, 0), launch_args())
        api.olLaunchHostFunction(queue, lambda _: names.append(threading.current_thread().name))
        api.olLaunchKernel(queue, host, step, struct.pack("<QII", address, 4 * round_ + 3, 0), launch_args())
        api.olSyncQueue(queue)
    assert view[0] == 200
    assert len(names) == 50 and all(name.startswith("offloadrt-host") for name in names), set(names)
    api.olDestroyQueue(queue)


def test_a_queue_waiting_on_another_queue_resumes_when_the_event_is_reached(host, programs, words, gate) -> None:
    first, second = api.olCreateQueue(host), api.olCreateQueue(host)
    address, view = words(1)
    step = kernel(programs["native"], "step")
    with gate(first):
        api.olLaunchKernel(first, host, step, struct.pack("<QII", address, 0, 0), launch_args())
        event = api.olCreateEvent(first)
        api.olWaitEvents(second, [event])
        api.olLaunchKernel(second, host, step, struct.pack("<QII", address, 1, 0), launch_args())
    call_with_timeout(api.olSyncQueue, second)
    assert view[0] == 2
    api.olDestroyEvent(event)
    for queue in (first, second):
        api.olDestroyQueue(queue)


def test_a_runtime_bug_while_serving_fails_that_queue_and_the_worker_lives_on(host, programs, words,
                                                                              monkeypatch) -> None:
    """Fault injection: the worker's queue code raises. The queue fails (its sync says why, after a
    warning), its remaining work is skipped, and every worker still serves other queues."""
    victim, other = api.olCreateQueue(host), api.olCreateQueue(host)
    broken_queue = victim._ai
    original = HostQueue._run_kernels

    def run_kernels(self: HostQueue, *args: object) -> int:
        if self is broken_queue:
            raise RuntimeError("injected failure")
        return original(self, *args)

    monkeypatch.setattr(HostQueue, "_run_kernels", run_kernels)
    step = kernel(programs["native"], "step")
    address, view = words(2)
    with pytest.warns(OffloadWarning, match="injected failure"):
        for i in range(3):
            api.olLaunchKernel(victim, host, step, struct.pack("<QII", address, i, 0), launch_args())
        error = expect_error(ErrorCode.QUEUE_ERROR, call_with_timeout, api.olSyncQueue, victim)
    assert "injected failure" in str(error)
    for i in range(50):
        api.olLaunchKernel(other, host, step, struct.pack("<QII", address + 4, i, 0), launch_args())
    call_with_timeout(api.olSyncQueue, other)
    assert list(view) == [0, 50]
    for queue in (victim, other):
        api.olDestroyQueue(queue)


def test_shutdown_with_work_in_flight_finishes_it_and_stops_every_worker(images) -> None:
    api.olInit()
    try:
        host = find_host()
        native = api.olCreateProgram(host, images["native"])
        fallback = api.olCreateProgram(host, images["fallback"])
        view = (ctypes.c_uint32 * 16)()  # the test's own memory: it outlives the runtime
        cells = ctypes.addressof(view)
        queues = [api.olCreateQueue(host) for _ in range(16)]
        for i in range(200):
            for q, queue in enumerate(queues):
                program = native if q % 2 else fallback
                api.olLaunchKernel(queue, host, kernel(program, "step"), struct.pack("<QII", cells + 4 * q, i, 0),
                                   launch_args())
        for queue in queues[:8]:
            api.olLaunchKernel(queue, host, kernel(native, "fault_at"), struct.pack("<3Ii", 1 << 20, 0, 0, 1),
                               launch_args(50_000))
            api.olDestroyQueue(queue)
    except BaseException:
        api.olShutDown()
        raise
    call_with_timeout(api.olShutDown, timeout=30.0)
    assert list(view) == [200] * 16, "queued work must finish before olShutDown returns"
    assert not [t.name for t in threading.enumerate() if t.name.startswith("offloadrt-host")]
    with pytest.raises(OffloadError):
        api.olCreateQueue(host)
