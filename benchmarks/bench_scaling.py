"""How offloadrt's host launch and event costs grow with live queues and submitting threads.

    python benchmarks/bench_scaling.py [--quick] [--json FILE]

- launch against live queues: ``olLaunchKernel`` of an empty kernel (one item), round-robin over 1,
  64 and 1024 queues, then one ``olSyncQueue`` per queue; per launch.
- launch against submitting threads: 1, 2 and 8 threads, each with its own queue, launching their
  share of the same number of launches at once, then syncing; wall time per launch (all threads'
  launches together), so a flat figure means that threads add no cost of their own.
- event under the same: ``olCreateEvent`` (records it) + ``olSyncEvent`` + ``olDestroyEvent``,
  round-robin over the same queues, and from the same threads.
- queue creation: ``olCreateQueue`` of 1024 queues, per queue, then their ``olDestroyQueue``.

The configurations take turns round by round (each round makes its queues anew), so that all see
the same load; each figure is the best round's, and is also given as a ratio to the one-queue or
one-thread figure of the same run. Goal: flat or slow growth, at most 2x at 1024 queues (issue 13).
With 1024 queues each queue gets only launches / 1024 launches a round, so the figure includes
waking each idle queue's service again and again: that is the cost of round-robin.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from _report import best_of, build_host_kernels, print_rows, row, write_json

import offloadrt
from offloadrt import Dimensions, KernelLaunchSizeArgs, api

NAME = "scaling"
EMPTY_KERNEL = """
#include <offloadrt/host_kernel.h>
OL_HOST_KERNEL empty(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }
OL_HOST_KERNEL_NO_ARGS(empty);
"""
QUEUE_COUNTS = (1, 64, 1024)
THREAD_COUNTS = (1, 2, 8)
ONE = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(1, 1, 1))


def launch_round(device: api.Device, kernel: api.Symbol, queues: list[api.Queue], launches: int) -> Callable[[], float]:
    """A round of ``launches`` launches round-robin over ``queues``, then a sync of each; s per launch."""
    launch, sync = api.olLaunchKernel, api.olSyncQueue

    def run() -> float:
        start = time.perf_counter()
        for queue in islice(cycle(queues), launches):
            launch(queue, device, kernel, None, ONE)
        for queue in queues:
            sync(queue)
        return (time.perf_counter() - start) / launches
    return run


def event_round(queues: list[api.Queue], events: int) -> Callable[[], float]:
    """A round of ``events`` record+sync+destroy round-robin over ``queues``; s per event."""
    create, sync, destroy = api.olCreateEvent, api.olSyncEvent, api.olDestroyEvent

    def run() -> float:
        start = time.perf_counter()
        for queue in islice(cycle(queues), events):
            event = create(queue)
            sync(event)
            destroy(event)
        return (time.perf_counter() - start) / events
    return run


def threaded_round(threads: int, work: Callable[[api.Queue, int], None], queues: list[api.Queue],
                   total: int) -> Callable[[], float]:
    """A round where ``threads`` threads, released together, each run ``work(own queue, total // threads)``;
    wall seconds per item of all threads together. A failure in a thread fails the round."""
    share = total // threads

    def run() -> float:
        ready = threading.Barrier(threads + 1)
        failures: list[BaseException] = []

        def body(queue: api.Queue) -> None:
            ready.wait()
            try:
                work(queue, share)
            except BaseException as exc:  # noqa: BLE001  # reported by the round below
                failures.append(exc)

        workers = [threading.Thread(target=body, args=(queues[i],)) for i in range(threads)]
        for worker in workers:
            worker.start()
        ready.wait()
        start = time.perf_counter()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - start
        if failures:
            raise RuntimeError(f"a submitting thread failed: {failures[0]!r}") from failures[0]
        return elapsed / (share * threads)
    return run


def collect(quick: bool = False) -> dict[str, Any]:
    """The scaling figures: ``rows`` in the shared format and ``scaling`` (the series run_all.py plots)."""
    launches, events, repeats = (2_000, 1_000, 3) if quick else (20_000, 10_000, 7)
    device = offloadrt.device("host")
    dh = device.handle
    with tempfile.TemporaryDirectory() as workdir:
        program = device.load(build_host_kernels(EMPTY_KERNEL, Path(workdir), "scaling_empty"))
    kernel = program.kernel("empty").handle
    by_queues = {count: [math.inf, math.inf] for count in QUEUE_COUNTS}  # best launch s, best event s
    for _ in range(repeats):  # the configurations take turns, so that each sees the same load on the machine
        for count in QUEUE_COUNTS:
            queues = [api.olCreateQueue(dh) for _ in range(count)]
            try:
                launch, event = launch_round(dh, kernel, queues, launches), event_round(queues, events)
                launch()
                event()  # warm: every queue seen by the workers, launch records, event pools
                best = by_queues[count]
                best[0], best[1] = min(best[0], launch()), min(best[1], event())
            finally:
                for queue in queues:
                    api.olDestroyQueue(queue)

    def launches_on(queue: api.Queue, count: int) -> None:
        launch_round(dh, kernel, [queue], count)()

    def events_on(queue: api.Queue, count: int) -> None:
        event_round([queue], count)()

    by_threads = {threads: [math.inf, math.inf] for threads in THREAD_COUNTS}
    queues = [api.olCreateQueue(dh) for _ in range(max(THREAD_COUNTS))]
    try:
        for round_ in range(repeats + 1):  # the first round warms
            for threads in THREAD_COUNTS:
                launch = threaded_round(threads, launches_on, queues, launches)()
                event = threaded_round(threads, events_on, queues, events)()
                if round_:
                    best = by_threads[threads]
                    best[0], best[1] = min(best[0], launch), min(best[1], event)
    finally:
        for queue in queues:
            api.olDestroyQueue(queue)
    launch_us = [by_queues[count][0] * 1e6 for count in QUEUE_COUNTS]
    event_us = [by_queues[count][1] * 1e6 for count in QUEUE_COUNTS]
    thread_launch_us = [by_threads[threads][0] * 1e6 for threads in THREAD_COUNTS]
    thread_event_us = [by_threads[threads][1] * 1e6 for threads in THREAD_COUNTS]

    create_us, destroy_us = bench_queue_creation(dh, 1024, 1 if quick else 3)
    single = best_of(repeats, _create_destroy_one(dh, 200 if quick else 2_000)) * 1e6
    scaling = {
        "queues": list(QUEUE_COUNTS), "launch_us_by_queues": launch_us, "event_us_by_queues": event_us,
        "threads": list(THREAD_COUNTS), "launch_us_by_threads": thread_launch_us,
        "event_us_by_threads": thread_event_us,
        "queue_create_us_of_1024": create_us, "queue_destroy_us_of_1024": destroy_us,
        "queue_create_destroy_us_one": single,
    }
    return {"rows": _rows(scaling), "scaling": scaling, "growth": growth(scaling), "launches": launches,
            "events": events}


def bench_queue_creation(device: api.Device, count: int, repeats: int) -> tuple[float, float]:
    """us per ``olCreateQueue`` while making ``count`` live queues, and per ``olDestroyQueue`` of them."""
    best_create = best_destroy = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        queues = [api.olCreateQueue(device) for _ in range(count)]
        middle = time.perf_counter()
        for queue in queues:
            api.olDestroyQueue(queue)
        end = time.perf_counter()
        best_create = min(best_create, (middle - start) / count)
        best_destroy = min(best_destroy, (end - middle) / count)
    return best_create * 1e6, best_destroy * 1e6


def _create_destroy_one(device: api.Device, cycles: int) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        for _ in range(cycles):
            api.olDestroyQueue(api.olCreateQueue(device))
        return (time.perf_counter() - start) / cycles
    return run


def growth(scaling: dict[str, Any]) -> dict[str, str]:
    """In words: each series as ratios to its first (1-queue or 1-thread) figure."""
    def say(values: list[float], counts: list[int], unit: str) -> str:
        return ", ".join(f"{ratio:.2f}x at {count} {unit}" for count, ratio in
                         zip(counts[1:], (value / values[0] for value in values[1:])))
    queues, threads = scaling["queues"], scaling["threads"]
    return {
        "launch_by_queues": say(scaling["launch_us_by_queues"], queues, "queues"),
        "event_by_queues": say(scaling["event_us_by_queues"], queues, "queues"),
        "launch_by_threads": say(scaling["launch_us_by_threads"], threads, "threads"),
        "event_by_threads": say(scaling["event_us_by_threads"], threads, "threads"),
    }


def _rows(scaling: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, what in (("launch_us_by_queues", "olLaunchKernel (empty, queued), round-robin over {} queue(s)"),
                      ("event_us_by_queues", "olCreateEvent+olSyncEvent+olDestroyEvent, round-robin over {} queue(s)")):
        values = scaling[key]
        for count, value in zip(scaling["queues"], values):
            if count == 1:
                rows.append(row(NAME, what.format(count), value, "us"))
            else:
                rows.append(row(NAME, what.format(count), value, "us", values[0], "the same over 1 queue",
                                "<= 2x (flat or slow growth)"))
    for key, what in (("launch_us_by_threads", "olLaunchKernel (empty, queued), {} submitting thread(s), wall/launch"),
                      ("event_us_by_threads", "olCreateEvent+olSyncEvent+olDestroyEvent, {} thread(s), wall/event")):
        values = scaling[key]
        for count, value in zip(scaling["threads"], values):
            if count == 1:
                rows.append(row(NAME, what.format(count), value, "us"))
            else:
                rows.append(row(NAME, what.format(count), value, "us", values[0], "the same from 1 thread",
                                "<= 2x (flat or slow growth)"))
    single = scaling["queue_create_destroy_us_one"]
    rows.append(row(NAME, "olCreateQueue+olDestroyQueue of one idle queue", single, "us"))
    rows.append(row(NAME, "olCreateQueue, per queue, making 1024 live queues", scaling["queue_create_us_of_1024"],
                    "us", single, "create+destroy of one queue", "<= 2x"))
    rows.append(row(NAME, "olDestroyQueue, per queue, of 1024 idle queues", scaling["queue_destroy_us_of_1024"], "us"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer launches and repeats")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    results = collect(args.quick)
    print(f"offloadrt {offloadrt.__version__}: {results['launches']} launches and {results['events']} events a round")
    print_rows(results["rows"])
    for key, text in results["growth"].items():
        print(f"{key}: {text}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
