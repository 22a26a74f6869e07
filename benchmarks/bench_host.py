"""Costs of offloadrt's host device, each against its floor in the same run.

    python benchmarks/bench_host.py [--quick] [--json FILE]

- launch: a queued ``olLaunchKernel`` of an empty kernel (one work-group of one item, an 8-byte blob),
  per launch, amortised over one final ``olSyncQueue``, against the bare ctypes call of the same kernel
  function with a NULL argument pointer (the honest floor: what a C caller pays) and against the
  cheapest hand-off (``deque.append`` on this thread, a worker thread popping and making the same
  call). Goal: <= 3x the bare call, or at the hand-off floor. Also shown: a new blob object each
  launch (what the Python API's ``queue.launch`` passes).
- native dispatch: the empty kernel over 2^20 work-groups in one launch, per work-group (goal:
  <= 20 ns), and the same through the Python fallback (an image built without ``host_kernel.h``).
- saxpy: ``out = a * x + y`` over 2^24 float32 in one launch with 256- and 1024-item work-groups,
  against NumPy (``multiply`` then ``add`` into a preallocated ``out``; goal: >= 1.5x faster) and
  PyOpenCL on PoCL's CPU device with the same local sizes (goal: level). Kernels are built with
  ``cc -O3 -march=native``, as PoCL builds for the CPU it runs on.
- group size: the same saxpy with 64- to 4096-item groups: what ``olCalculateOptimalOccupancy``
  answers on the host, and why it matters little with native dispatch.
- queues: launches round-robin over 1, 64 and 1024 live queues, at least 10 launches a queue
  (goal: 1024 within 2x of one; with fewer, the figure measures waking idle queues); 1, 2
  and 8 submitting threads, each with its own queue (wall time per launch of all together); event
  create (record) + sync + destroy under the same; creating 1024 queues.
- memcpy 64 MiB host to host against ``numpy.copyto``; queue and event round trips; program load
  against ``dlopen``.

Sides of a comparison take turns round by round, so that both see the same load; each figure is the
best round's. ``collect(quick)`` returns the figures as rows (for ``run_all.py``); ``--quick`` runs
fewer and shorter rounds (about 10 s).
"""

from __future__ import annotations

import _ctypes
import argparse
import ctypes
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from itertools import cycle, islice
from pathlib import Path
from typing import Any

import numpy as np
from _report import print_table, write_json

import offloadrt
from offloadrt import AllocType, DeviceInfo, DeviceType, Dimensions, KernelLaunchSizeArgs, SymbolKind, api
from offloadrt.plugins.host import loader as host_loader
from offloadrt.plugins.host import probe as host_probe
from offloadrt.plugins.host.dispatch import KERNEL_PROTOTYPE, LaunchStruct

KERNELS = """
#include <offloadrt/host_kernel.h>
OL_HOST_KERNEL empty(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }

struct saxpy_args { const float *x; const float *y; float *out; float a; uint32_t n; };
OL_HOST_KERNEL saxpy(const void *args, const ol_host_launch_t *launch) {
  const struct saxpy_args *p = args;
  uint64_t first = (uint64_t)launch->group_id.x * launch->group_size.x;
  uint64_t count = launch->group_size.x;
  if (first >= p->n) return 0;
  if (p->n - first < count) count = p->n - first;
  const float *x = p->x + first, *y = p->y + first;
  float *out = p->out + first, a = p->a;
  for (uint64_t i = 0; i < count; ++i) out[i] = a * x[i] + y[i];
  return 0;
}
OL_HOST_KERNEL_ARGS(saxpy, struct saxpy_args);
"""
# The same empty kernel without host_kernel.h: an image without the native runners (Python fallback).
NO_RUNNERS = """
typedef struct { unsigned x, y, z; } dim3;
typedef struct { dim3 group_id, num_groups, group_size; void *dyn_shared_memory; } launch_t;
__attribute__((visibility("default"))) int empty(const void *args, const launch_t *launch) {
  (void)args; (void)launch; return 0;
}
"""
OPENCL_KERNELS = """
__kernel void saxpy(__global const float *x, __global const float *y, __global float *out, float a) {
  size_t i = get_global_id(0);
  out[i] = a * x[i] + y[i];
}
"""
CFLAGS = ("-shared", "-fPIC", "-O3", "-march=native")
BENCHMARK = "host"
QUEUE_COUNTS = (1, 64, 1024)
THREAD_COUNTS = (1, 2, 8)
ONE = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(1, 1, 1))


def build(source: str, workdir: Path, name: str) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) on PATH: the host benchmarks build their kernels with it")
    (workdir / f"{name}.c").write_text(source)
    target = workdir / f"{name}.so"
    subprocess.run([compiler, *CFLAGS, "-I", offloadrt.get_include(), str(workdir / f"{name}.c"), "-o", str(target)],
                   check=True)
    return target


def row(what: str, value: float, unit: str, floor: float | None = None, floor_what: str | None = None,
        goal: str | None = None) -> dict[str, Any]:
    """One figure in run_all.py's row format; ``ratio`` is ``value / floor`` in the row's unit."""
    return {"benchmark": BENCHMARK, "what": what, "value": float(value), "unit": unit,
            "floor": None if floor is None else float(floor), "floor_what": floor_what if floor is not None else None,
            "ratio": value / floor if floor else None, "goal": goal}


def alternate(repeats: int, sides: Mapping[str, Callable[[], float]]) -> dict[str, float]:
    """Best seconds of each side, the sides taking turns round by round."""
    best = {name: math.inf for name in sides}
    for _ in range(repeats):
        for name, run in sides.items():
            best[name] = min(best[name], run())
    return best


class HandOff:
    """The cheapest hand-off of a call to another thread: ``deque.append`` on the caller's side, a
    worker that pops and calls, sleeping on a lock when it finds the deque empty."""

    def __init__(self) -> None:
        self.items: deque[Any] = deque()
        self.wake = threading.Lock()
        self.wake.acquire()
        self.sleeping = False
        self.thread = threading.Thread(target=self._run, daemon=True, name="bench-hand-off")
        self.thread.start()

    def _run(self) -> None:
        pop = self.items.popleft
        while True:
            try:
                item = pop()
            except IndexError:
                self.sleeping = True
                if self.items:  # appended after the pop failed: do not sleep on it
                    self.sleeping = False
                    continue
                self.wake.acquire()
                continue
            if item is None:
                return
            if item.__class__ is threading.Event:
                item.set()
                continue
            item[0](item[1], item[2])

    def push(self, item: Any) -> None:
        self.items.append(item)
        if self.sleeping:
            self.sleeping = False
            self.wake.release()

    def round(self, item: Any, count: int) -> float:
        """Seconds per call of ``count`` hand-offs of ``item`` and a final wait for the worker."""
        done = threading.Event()
        append, items = self.items.append, self.items
        start = time.perf_counter()
        for _ in range(count):
            append(item)
            if self.sleeping:
                self.sleeping = False
                self.wake.release()
        self.push(done)
        done.wait()
        del items
        return (time.perf_counter() - start) / count

    def close(self) -> None:
        self.push(None)
        self.thread.join()


def host_device() -> api.Device:
    devices: list[api.Device] = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    return next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)


# ---- the launch path ------------------------------------------------------------------------

def bench_launch(device: api.Device, library: Path, launches: int, repeats: int) -> dict[str, float]:
    program = api.olCreateProgram(device, library.read_bytes())
    kernel = api.olGetSymbol(program, "empty", SymbolKind.KERNEL)
    queue = api.olCreateQueue(device)
    args = b"\0" * 8
    blobs = [bytes(8) for _ in range(launches)]
    launch, sync = api.olLaunchKernel, api.olSyncQueue

    def ours() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            launch(queue, device, kernel, args, ONE)
        sync(queue)
        return (time.perf_counter() - start) / launches

    def ours_new_blobs() -> float:
        start = time.perf_counter()
        for blob in blobs:
            launch(queue, device, kernel, blob, ONE)
        sync(queue)
        return (time.perf_counter() - start) / launches

    bare_lib = ctypes.CDLL(str(library))
    bare_fn = KERNEL_PROTOTYPE(("empty", bare_lib))
    struct_ = LaunchStruct(0, 0, 0, 1, 1, 1, 1, 1, 1, None)
    address = ctypes.addressof(struct_)

    def bare() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            bare_fn(None, address)
        return (time.perf_counter() - start) / launches

    def bare_blob() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            bare_fn(args, address)
        return (time.perf_counter() - start) / launches

    hand_off = HandOff()
    try:
        best = alternate(repeats, {"ours": ours, "ours_new_blobs": ours_new_blobs, "bare": bare,
                                   "bare_blob": bare_blob,
                                   "hand_off": lambda: hand_off.round((bare_fn, args, address), launches)})
    finally:
        hand_off.close()
    api.olDestroyQueue(queue)
    api.olDestroyProgram(program)
    return best


# ---- work-groups ----------------------------------------------------------------------------

def bench_groups(device: api.Device, library: Path, fallback: Path, groups: int, repeats: int) -> dict[str, float]:
    """Seconds per work-group of one launch of the empty kernel over many groups (native and fallback)."""
    queue = api.olCreateQueue(device)
    results = {}
    for name, path, count in (("native", library, groups), ("python", fallback, max(1, groups // 64))):
        program = api.olCreateProgram(device, path.read_bytes())
        kernel = api.olGetSymbol(program, "empty", SymbolKind.KERNEL)
        sizes = KernelLaunchSizeArgs(1, Dimensions(count, 1, 1), Dimensions(1, 1, 1))

        def run(kernel: api.Symbol = kernel, sizes: KernelLaunchSizeArgs = sizes, count: int = count) -> float:
            start = time.perf_counter()
            api.olLaunchKernel(queue, device, kernel, None, sizes)
            api.olSyncQueue(queue)
            return (time.perf_counter() - start) / count

        run()
        results[name] = min(run() for _ in range(repeats))
        api.olDestroyProgram(program)
    api.olDestroyQueue(queue)
    return results


class Saxpy:
    """``out = a * x + y`` over ``n`` float32 in host memory, for offloadrt, NumPy and the peer."""

    def __init__(self, device: api.Device, library: Path, n: int):
        self.device, self.n = device, n
        self.program = api.olCreateProgram(device, library.read_bytes())
        self.kernel = api.olGetSymbol(self.program, "saxpy", SymbolKind.KERNEL)
        self.queue = api.olCreateQueue(device)
        self.pointers = [api.olMemAlloc(device, AllocType.HOST, 4 * n) for _ in range(3)]
        self.x, self.y, self.out = (np.ctypeslib.as_array((ctypes.c_float * n).from_address(p))
                                    for p in self.pointers)
        rng = np.random.default_rng(13)
        self.x[:] = rng.random(n, dtype=np.float32)
        self.y[:] = rng.random(n, dtype=np.float32)
        self.out[:] = 0
        self.a = 2.0
        self.blob = struct.pack("@PPPfI", *self.pointers, self.a, n)

    def ours(self, group: int) -> Callable[[], float]:
        sizes = KernelLaunchSizeArgs(1, Dimensions(-(-self.n // group), 1, 1), Dimensions(group, 1, 1))

        def run() -> float:
            start = time.perf_counter()
            api.olLaunchKernel(self.queue, self.device, self.kernel, self.blob, sizes)
            api.olSyncQueue(self.queue)
            return time.perf_counter() - start
        return run

    def numpy(self) -> float:
        start = time.perf_counter()
        np.multiply(self.x, np.float32(self.a), out=self.out)
        np.add(self.out, self.y, out=self.out)
        return time.perf_counter() - start

    def check(self) -> None:
        expected = np.float32(self.a) * self.x + self.y
        if not np.allclose(self.out, expected):
            raise AssertionError("saxpy: offloadrt's result differs from NumPy's")

    def close(self) -> None:
        api.olDestroyQueue(self.queue)
        for pointer in self.pointers:
            api.olMemFree(pointer)
        api.olDestroyProgram(self.program)


class PoclSaxpy:
    """The same saxpy through PyOpenCL on PoCL's CPU device (buffers in PoCL's memory)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, a: float):
        import pyopencl as cl

        devices = [d for p in cl.get_platforms() if "Portable" in p.name
                   for d in p.get_devices(device_type=cl.device_type.CPU)]
        if not devices:
            raise RuntimeError("PyOpenCL finds no PoCL CPU device")
        self.cl, self.n, self.a = cl, x.size, np.float32(a)
        self.device_name = devices[0].name
        self.context = cl.Context(devices[:1])
        self.queue = cl.CommandQueue(self.context)
        flags = cl.mem_flags
        self.x = cl.Buffer(self.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
        self.y = cl.Buffer(self.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=y)
        self.out = cl.Buffer(self.context, flags.WRITE_ONLY, x.nbytes)
        self.kernel = cl.Program(self.context, OPENCL_KERNELS).build().saxpy
        self.expected = self.a * x + y

    def run(self, group: int) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            self.kernel(self.queue, (self.n,), (group,), self.x, self.y, self.out, self.a)
            self.queue.finish()
            return time.perf_counter() - start
        return run

    def check(self) -> None:
        out = np.empty_like(self.expected)
        self.cl.enqueue_copy(self.queue, out, self.out)
        if not np.allclose(out, self.expected):
            raise AssertionError("saxpy: PoCL's result differs from NumPy's")


def bench_saxpy(device: api.Device, library: Path, n: int, repeats: int, sweep: tuple[int, ...]
                ) -> dict[str, Any]:
    saxpy = Saxpy(device, library, n)
    sides: dict[str, Callable[[], float]] = {"numpy": saxpy.numpy}
    for group in sorted({256, 1024, *sweep}):
        sides[f"ours_{group}"] = saxpy.ours(group)
    peer: PoclSaxpy | None = None
    peer_note = ""
    try:
        peer = PoclSaxpy(saxpy.x, saxpy.y, saxpy.a)
    except Exception as exc:  # noqa: BLE001  # the peer is optional: its absence is reported, not fatal
        peer_note = f"{type(exc).__name__}: {exc}"
    if peer is not None:
        for group in (256, 1024):
            sides[f"pocl_{group}"] = peer.run(group)
    for run in sides.values():
        run()  # warm: first touches, PoCL's kernel build
    best: dict[str, Any] = dict(alternate(repeats, sides))
    saxpy.check()
    if peer is not None:
        peer.check()
        best["peer_device"] = peer.device_name
    best["peer_note"] = peer_note
    saxpy.close()
    return best


# ---- queues and threads ---------------------------------------------------------------------

def bench_scaling(device: api.Device, library: Path, launches: int, events: int, repeats: int) -> dict[str, Any]:
    program = api.olCreateProgram(device, library.read_bytes())
    kernel = api.olGetSymbol(program, "empty", SymbolKind.KERNEL)
    launch, sync = api.olLaunchKernel, api.olSyncQueue
    create_event, sync_event, destroy_event = api.olCreateEvent, api.olSyncEvent, api.olDestroyEvent

    def launch_round(queues: list[api.Queue]) -> float:
        start = time.perf_counter()
        for queue in islice(cycle(queues), launches):
            launch(queue, device, kernel, None, ONE)
        for queue in queues:
            sync(queue)
        return (time.perf_counter() - start) / launches

    def event_round(queues: list[api.Queue]) -> float:
        start = time.perf_counter()
        for queue in islice(cycle(queues), events):
            event = create_event(queue)
            sync_event(event)
            destroy_event(event)
        return (time.perf_counter() - start) / events

    def launch_work(queue: api.Queue, count: int) -> None:
        for _ in range(count):
            launch(queue, device, kernel, None, ONE)
        sync(queue)

    def event_work(queue: api.Queue, count: int) -> None:
        for _ in range(count):
            event = create_event(queue)
            sync_event(event)
            destroy_event(event)

    def threaded(threads: int, work: Callable[[api.Queue, int], None], total: int) -> float:
        queues = [api.olCreateQueue(device) for _ in range(threads)]
        share = total // threads
        ready = threading.Barrier(threads + 1)
        failures: list[BaseException] = []

        def body(queue: api.Queue) -> None:
            ready.wait()
            try:
                work(queue, share)
            except BaseException as exc:  # noqa: BLE001  # re-raised below
                failures.append(exc)

        workers = [threading.Thread(target=body, args=(queue,)) for queue in queues]
        for worker in workers:
            worker.start()
        ready.wait()
        start = time.perf_counter()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - start
        for queue in queues:
            api.olDestroyQueue(queue)
        if failures:
            raise RuntimeError(f"a submitting thread failed: {failures[0]!r}") from failures[0]
        return elapsed / (share * threads)

    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, math.inf), seconds)

    for _ in range(repeats):  # the configurations take turns, so that all see the same load
        for count in QUEUE_COUNTS:
            start = time.perf_counter()
            queues = [api.olCreateQueue(device) for _ in range(count)]
            keep(f"create_{count}", (time.perf_counter() - start) / count)
            keep(f"launch_q{count}", launch_round(queues))
            keep(f"event_q{count}", event_round(queues))
            for queue in queues:
                api.olDestroyQueue(queue)
        for threads in THREAD_COUNTS:
            keep(f"launch_t{threads}", threaded(threads, launch_work, launches))
            keep(f"event_t{threads}", threaded(threads, event_work, events))
    api.olDestroyProgram(program)
    return best


# ---- the rest: copies, round trips, program loads -------------------------------------------

def bench_memcpy(device: api.Device, size: int, repeats: int) -> dict[str, float]:
    src = api.olMemAlloc(device, AllocType.HOST, size)
    dst = api.olMemAlloc(device, AllocType.HOST, size)
    src_view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(src))
    dst_view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(dst))
    src_view[:] = np.arange(size, dtype=np.uint64).astype(np.uint8)
    dst_view[:] = 0  # touch every page before timing

    def ours() -> float:
        start = time.perf_counter()
        api.olMemcpy(None, dst, device, src, device, size)
        return time.perf_counter() - start

    def numpy_copy() -> float:
        start = time.perf_counter()
        np.copyto(dst_view, src_view)
        return time.perf_counter() - start

    best = alternate(repeats, {"ours": ours, "numpy": numpy_copy})
    assert np.array_equal(dst_view[:4096], src_view[:4096])
    api.olMemFree(src)
    api.olMemFree(dst)
    return {name: size / seconds / 1e9 for name, seconds in best.items()}


def bench_round_trips(device: api.Device, count: int, repeats: int) -> dict[str, float]:
    queue = api.olCreateQueue(device)

    def queues() -> float:
        start = time.perf_counter()
        for _ in range(count):
            api.olDestroyQueue(api.olCreateQueue(device))
        return (time.perf_counter() - start) / count

    def events() -> float:
        start = time.perf_counter()
        for _ in range(count):
            event = api.olCreateEvent(queue)
            api.olSyncEvent(event)
            api.olDestroyEvent(event)
        return (time.perf_counter() - start) / count

    best = alternate(repeats, {"queue": queues, "event": events})
    api.olDestroyQueue(queue)
    return best


def bench_program_load(device: api.Device, library: Path, loads: int) -> dict[str, float]:
    image = library.read_bytes()
    fresh = (image + struct.pack("<Q", n) for n in range(1, 1 << 62))  # new content, the same program

    host_probe.stop_helper()  # measure the helper's start once, as the first load of a process pays it
    start = time.perf_counter()
    api.olDestroyProgram(api.olCreateProgram(device, next(fresh)))
    first_in_process = time.perf_counter() - start

    def new_bytes() -> float:
        images = [next(fresh) for _ in range(loads)]
        start = time.perf_counter()
        for data in images:
            api.olDestroyProgram(api.olCreateProgram(device, data))
        return (time.perf_counter() - start) / loads

    def verified_bytes() -> float:
        start = time.perf_counter()
        for _ in range(loads):
            api.olDestroyProgram(api.olCreateProgram(device, image))
        return (time.perf_counter() - start) / loads

    def structure_only() -> float:
        images = [next(fresh) for _ in range(loads)]
        start = time.perf_counter()
        for data in images:
            host_loader.check_image(data)
        return (time.perf_counter() - start) / loads

    path = str(library.with_name("bare-" + library.name))  # a path nothing else holds loaded
    shutil.copyfile(library, path)
    mode = os.RTLD_NOW | os.RTLD_LOCAL

    def bare() -> float:
        start = time.perf_counter()
        for _ in range(loads):
            _ctypes.dlclose(_ctypes.dlopen(path, mode))
        return (time.perf_counter() - start) / loads

    verified_bytes()  # the first of these verifies the image; the rest are repeats
    best = alternate(3, {"new": new_bytes, "verified": verified_bytes, "structure": structure_only, "bare": bare})
    best["first_in_process"] = first_in_process
    return best


# ---- all of it --------------------------------------------------------------------------------

def collect(quick: bool = False) -> dict[str, Any]:
    """Every figure: ``rows`` (run_all.py's format), ``scaling`` (per-launch and per-event us against
    live queues and submitting threads) and the raw measurements under ``details``."""
    if quick:
        launches, repeats, groups, n, sweep, events = 5_000, 3, 1 << 18, 1 << 24, (), 1_000
    else:
        launches, repeats, groups, n, sweep, events = 20_000, 7, 1 << 20, 1 << 24, (64, 4096), 5_000
    api.olInit(platforms=[offloadrt.PlatformBackend.HOST])
    try:
        device = host_device()
        with tempfile.TemporaryDirectory() as workdir:
            library = build(KERNELS, Path(workdir), "bench_host")
            fallback = build(NO_RUNNERS, Path(workdir), "bench_host_no_runners")
            program = api.olCreateProgram(device, library.read_bytes())
            occupancy = api.olCalculateOptimalOccupancy(
                device, api.olGetSymbol(program, "saxpy", SymbolKind.KERNEL), 0)
            api.olDestroyProgram(program)
            launch = bench_launch(device, library, launches, repeats)
            groups_ = bench_groups(device, library, fallback, groups, repeats)
            saxpy = bench_saxpy(device, library, n, max(3, repeats // 2), tuple(sorted({*sweep, occupancy})))
            # at least 10 launches a queue at 1024 queues: fewer measure waking idle queues, not launching
            scaling = bench_scaling(device, library, max(launches // 2, 10 * QUEUE_COUNTS[-1]), events,
                                    max(2, repeats // 2))
            memcpy = bench_memcpy(device, 64 << 20, repeats)
            trips = bench_round_trips(device, 2_000 if quick else 20_000, repeats)
            load = None if quick else bench_program_load(device, library, 200)
        name = api.olGetDeviceInfo(device, DeviceInfo.NAME)
    finally:
        api.olShutDown()
    return report(name, launch, groups_, saxpy, scaling, memcpy, trips, load, occupancy, n, groups, quick)


def report(device: str, launch: dict[str, float], groups: dict[str, float], saxpy: dict[str, Any],
           scaling: dict[str, float], memcpy: dict[str, float], trips: dict[str, float], load: dict[str, float] | None,
           occupancy: int, n: int, group_count: int, quick: bool) -> dict[str, Any]:
    us, ms, ns = 1e6, 1e3, 1e9
    bare = launch["bare"] * us
    rows = [
        row("olLaunchKernel queued, empty kernel, 1 group", launch["ours"] * us, "us", bare,
            "bare ctypes call, NULL args", "<= 3x"),
        row("olLaunchKernel queued, against the hand-off floor", launch["ours"] * us, "us", launch["hand_off"] * us,
            "deque.append + worker call", "near 1x"),
        row("olLaunchKernel queued, a new blob each launch", launch["ours_new_blobs"] * us, "us", bare,
            "bare ctypes call, NULL args", None),
        row("bare ctypes call with the 8-byte blob", launch["bare_blob"] * us, "us", bare,
            "bare ctypes call, NULL args", None),
        row(f"native dispatch, empty kernel, {group_count} groups", groups["native"] * ns, "ns/group", None, None,
            "<= 20 ns"),
        row("Python fallback dispatch (image without runners)", groups["python"] * ns, "ns/group",
            groups["native"] * ns, "native dispatch", None),
    ]
    sz = f"2^{n.bit_length() - 1}"
    for group in (256, 1024):
        ours = saxpy[f"ours_{group}"] * ms
        rows.append(row(f"saxpy {sz} float32, {group}-item groups", ours, "ms", saxpy["numpy"] * ms,
                        "NumPy a*x+y into out", "<= 0.67x (1.5x faster)"))
        if f"pocl_{group}" in saxpy:
            rows.append(row(f"saxpy {sz} float32, {group}-item groups, against PoCL", ours, "ms",
                            saxpy[f"pocl_{group}"] * ms, f"PyOpenCL on PoCL, local size {group}", "<= 1x (level)"))
    for key in sorted((k for k in saxpy if k.startswith("ours_")), key=lambda k: int(k[5:])):
        group = int(key[5:])
        if group not in (256, 1024) or group == occupancy:
            label = " (olCalculateOptimalOccupancy)" if group == occupancy else ""
            rows.append(row(f"saxpy {sz} float32, {group}-item groups{label}", saxpy[key] * ms, "ms",
                            saxpy["numpy"] * ms, "NumPy a*x+y into out", None))
    one_q, one_t = scaling["launch_q1"] * us, scaling["launch_t1"] * us
    for count in QUEUE_COUNTS[1:]:
        rows.append(row(f"launch round-robin over {count} queues", scaling[f"launch_q{count}"] * us, "us", one_q,
                        "the same over 1 queue", "<= 2x" if count == 1024 else None))
    for threads in THREAD_COUNTS[1:]:
        rows.append(row(f"launch from {threads} threads (wall per launch)", scaling[f"launch_t{threads}"] * us,
                        "us", one_t, "the same from 1 thread", "flat or slow growth"))
    rows += [
        row("olCreateQueue, 1024 live queues (per queue)", scaling["create_1024"] * us, "us", None, None, None),
        row("event create+sync+destroy, 1024 queues", scaling["event_q1024"] * us, "us", scaling["event_q1"] * us,
            "the same on 1 queue", "flat or slow growth"),
        row("event create+sync+destroy, 8 threads", scaling["event_t8"] * us, "us", scaling["event_t1"] * us,
            "the same from 1 thread", "flat or slow growth"),
        row("olMemcpy host to host, 64 MiB", memcpy["ours"], "GB/s", memcpy["numpy"], "numpy.copyto", ">= 0.9x"),
        row("olCreateQueue + olDestroyQueue", trips["queue"] * us, "us", None, None, None),
        row("olCreateEvent + olSyncEvent + olDestroyEvent, idle queue", trips["event"] * us, "us", None, None, None),
    ]
    if load is not None:
        rows += [
            row("olCreateProgram + olDestroyProgram, new bytes", load["new"] * us, "us", load["bare"] * us,
                "dlopen + dlclose", None),
            row("olCreateProgram + olDestroyProgram, verified bytes", load["verified"] * us, "us", load["bare"] * us,
                "dlopen + dlclose", None),
            row("  of new bytes: the structural check", load["structure"] * us, "us", None, None, None),
            row("  first load of a process (helper start)", load["first_in_process"] * ms, "ms", None, None, None),
        ]
    series = {
        "queues": list(QUEUE_COUNTS), "threads": list(THREAD_COUNTS),
        "launch_us_by_queues": [scaling[f"launch_q{c}"] * us for c in QUEUE_COUNTS],
        "launch_us_by_threads": [scaling[f"launch_t{t}"] * us for t in THREAD_COUNTS],
        "event_us_by_queues": [scaling[f"event_q{c}"] * us for c in QUEUE_COUNTS],
        "event_us_by_threads": [scaling[f"event_t{t}"] * us for t in THREAD_COUNTS],
        "create_queue_us_by_queues": [scaling[f"create_{c}"] * us for c in QUEUE_COUNTS],
    }
    return {"device": device, "python": sys.version.split()[0], "quick": quick, "cflags": " ".join(CFLAGS),
            "occupancy": occupancy, "peer": saxpy.get("peer_device") or saxpy["peer_note"],
            "rows": rows, "scaling": series,
            "details": {"launch_s": launch, "groups_s": groups,
                        "saxpy_s": {k: v for k, v in saxpy.items() if isinstance(v, float)},
                        "scaling_s": scaling, "memcpy_GBps": memcpy, "round_trips_s": trips, "program_load_s": load}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds (about 10 s)")
    args = parser.parse_args(argv)
    results = collect(args.quick)
    print(f"offloadrt {offloadrt.__version__} on {results['device']} (host device), Python {results['python']}, "
          f"kernels built with cc {results['cflags']}; peer: {results['peer'] or 'none'}")
    table = []
    for entry in results["rows"]:
        floor = "-" if entry["floor"] is None else f"{entry['floor']:.3g} {entry['unit']} ({entry['floor_what']})"
        ratio = "-" if entry["ratio"] is None else f"{entry['ratio']:.2f}x"
        table.append((entry["what"], f"{entry['value']:.3g} {entry['unit']}", floor, ratio, entry["goal"] or "-"))
    print_table(("what", "offloadrt", "floor (same run)", "ratio", "goal"), table)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
