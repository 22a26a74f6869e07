"""offloadrt's host device against a peer, PyOpenCL on PoCL's CPU device, in the same run.

    python benchmarks/bench_peer.py [--quick] [--json FILE]

Three workloads, each run by both sides in the same process, rounds of the sides interleaved, the
best round of each side counting:

- empty-kernel launch: one work-group of one item, queued N times, then one wait, per launch.
  offloadrt through ``olLaunchKernel`` and through the Python API's ``Queue.launch``; the peer
  through ``pyopencl.enqueue_nd_range_kernel`` then ``queue.finish()``. Goal: offloadrt ahead.
- saxpy (``y = a * x + y``) over 2^24 float32 on all cores, with 256- and 1024-item work-groups
  and with one work-group per core (PoCL's largest work-group is smaller than 2^24 / cores, so
  there the peer picks its own local size). ``numpy`` (``multiply`` then ``add`` into
  preallocated arrays) runs the same arithmetic. Goal: offloadrt level with the peer. The OpenCL
  kernel has no bounds check (n is a multiple of every local size), as one would stop PoCL from
  vectorizing it. Host kernels are built as the tests build them but with ``-O3 -march=native``, as
  PoCL compiles for the CPU it runs on; one more row shows the saxpy built with the tests' ``-O2``.
- 64 MiB host copy: ``olMemcpy`` host->host and ``Buffer.copy_from`` between two host buffers,
  ``enqueue_copy`` between two PoCL buffers then ``finish()``, ``numpy.copyto`` and ``memmove``
  through ctypes (the floors). Goal: offloadrt level with the peer.

Also copy bandwidth against size (4 KiB to 256 MiB) for all of them, for run_all.py's plot.
Without PyOpenCL or PoCL the peer's figures are absent and ``peer.reason`` says why.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _report import alternate, build_host_kernels, print_rows, row, write_json

import offloadrt
from offloadrt import AllocType, Dimensions, KernelLaunchSizeArgs, api

NAME = "peer"
HOST_KERNELS = """
#include <offloadrt/host_kernel.h>
#include <string.h>

OL_HOST_KERNEL empty(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }
OL_HOST_KERNEL_NO_ARGS(empty);

struct saxpy_args { float a; const float *x; float *y; uint32_t n; };

OL_HOST_KERNEL saxpy(const void *args, const ol_host_launch_t *launch) {
  struct saxpy_args p;
  memcpy(&p, args, sizeof p);
  uint32_t begin = launch->group_id.x * launch->group_size.x;
  uint32_t end = begin + launch->group_size.x < p.n ? begin + launch->group_size.x : p.n;
  for (uint32_t i = begin; i < end; ++i) p.y[i] = p.a * p.x[i] + p.y[i];
  return 0;
}
OL_HOST_KERNEL_ARGS(saxpy, struct saxpy_args);
"""
OPENCL_KERNELS = """
__kernel void empty(void) {}
__kernel void saxpy(float a, __global const float *x, __global float *y) {
  size_t i = get_global_id(0);
  y[i] = a * x[i] + y[i];
}
"""  # no bounds check: every launch's global size is n (a check stops PoCL vectorizing: ~2x slower here)
PEER = "PyOpenCL on PoCL"
OPTIMISE = ("-O3", "-march=native")  # as PoCL compiles kernels: optimised for the CPU it runs on
O2_LABEL = "256-item groups, kernel built with -O2"
SWEEP_SIZES = tuple(4096 << (2 * k) for k in range(9))  # 4 KiB, 16 KiB ... 256 MiB
QUICK_SWEEP_SIZES = SWEEP_SIZES[:6]  # up to 4 MiB


class Peer:
    """PyOpenCL on PoCL's CPU device: a context, an in-order queue and the two kernels."""

    def __init__(self, cl: Any, device: Any) -> None:
        self.cl = cl
        self.device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context)
        program = cl.Program(self.context, OPENCL_KERNELS).build()
        self.empty = cl.Kernel(program, "empty")
        self.saxpy = cl.Kernel(program, "saxpy")
        self.description = (f"{device.name} ({device.platform.version}, PyOpenCL {cl.VERSION_TEXT}, "
                            f"{device.max_compute_units} compute units)")

    def buffer(self, nbytes: int) -> Any:
        return self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, nbytes)


def open_peer() -> tuple[Peer | None, str | None]:
    """The peer, or None and the reason it cannot run here."""
    try:
        import pyopencl as cl
    except ImportError as exc:
        return None, f"PyOpenCL is not installed ({exc}); pip install '.[bench]' brings it and PoCL"
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        return None, f"no OpenCL platform ({exc}); pip install pocl-binary-distribution brings PoCL's"
    pocl = [p for p in platforms if "Portable Computing Language" in p.name or "PoCL" in p.version]
    if not pocl:
        names = ", ".join(p.name for p in platforms) or "none"
        return None, f"no PoCL platform among the OpenCL platforms ({names}); pip install pocl-binary-distribution"
    cpus = [d for p in pocl for d in p.get_devices() if d.type & cl.device_type.CPU]
    if not cpus:
        return None, "PoCL has no CPU device here"
    try:
        return Peer(cl, cpus[0]), None
    except cl.Error as exc:
        return None, f"PoCL's CPU device did not start or build the kernels: {exc}"


class Host:
    """offloadrt's host device with the two kernels loaded and one queue; ``saxpy_o2`` is the same
    saxpy built with the tests' ``-O2`` (no vectorizing of a loop that needs an aliasing check)."""

    def __init__(self, image: Path, image_o2: Path) -> None:
        self.device = offloadrt.device("host")
        program = self.device.load(image)
        self.empty = program.kernel("empty")
        self.saxpy = program.kernel("saxpy")
        self.saxpy.signature = ("float32", "ptr", "ptr", "uint32")
        self.saxpy_o2 = self.device.load(image_o2).kernel("saxpy")
        self.queue = self.device.queue()
        self.cores = int(self.device.info[offloadrt.DeviceInfo.NUM_COMPUTE_UNITS])
        self.image = image

    def close(self) -> None:
        self.queue.close()


def per_call(count: int, body: Callable[[], None], finish: Callable[[], object]) -> Callable[[], float]:
    """A round: ``body`` ``count`` times, then ``finish``; returns seconds per call."""
    def run() -> float:
        start = time.perf_counter()
        for _ in range(count):
            body()
        finish()
        return (time.perf_counter() - start) / count
    return run


def bench_launch(host: Host, peer: Peer | None, launches: int, repeats: int) -> dict[str, float]:
    """Seconds per queued empty-kernel launch, each side amortised over one final wait."""
    queue, qh, dh, kh = host.queue, host.queue.handle, host.device.handle, host.empty.handle
    one = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(1, 1, 1))
    launch, ol_launch, ol_sync, empty = queue.launch, api.olLaunchKernel, api.olSyncQueue, host.empty

    def ol_round() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            ol_launch(qh, dh, kh, None, one)
        ol_sync(qh)
        return (time.perf_counter() - start) / launches

    def api_round() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            launch(empty, 1, 1)
        queue.sync()
        return (time.perf_counter() - start) / launches

    raw_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(("empty", ctypes.CDLL(str(host.image))))

    def raw_round() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            raw_fn(None, None)
        return (time.perf_counter() - start) / launches

    sides: dict[str, Callable[[], float]] = {"olLaunchKernel": ol_round, "Queue.launch": api_round, "raw": raw_round}
    if peer is not None:
        cl, pq, pk = peer.cl, peer.queue, peer.empty
        enqueue = cl.enqueue_nd_range_kernel

        def peer_round() -> float:
            start = time.perf_counter()
            for _ in range(launches):
                enqueue(pq, pk, (1,), (1,))
            pq.finish()
            return (time.perf_counter() - start) / launches

        sides["peer"] = peer_round
    for run in sides.values():  # warm: workers started, launch records and caches built
        run()
    return alternate(repeats, sides)


def bench_saxpy(host: Host, peer: Peer | None, n: int, repeats: int) -> dict[str, Any]:
    """Seconds per saxpy over ``n`` float32 (one launch, then the wait), per side and shape; each side's
    result is checked against NumPy's first."""
    a = np.float32(0.5)
    rng = np.random.default_rng(13)
    x_host = rng.random(n, dtype=np.float32)
    y_start = rng.random(n, dtype=np.float32)
    expected = a * x_host + y_start
    device, queue = host.device, host.queue
    x, y = device.allocate(4 * n), device.allocate(4 * n)
    x.copy_from(x_host)
    qh, dh, kh = queue.handle, device.handle, host.saxpy.handle
    blob = struct.pack("<f4xQQI4x", a, x.ptr, y.ptr, n)  # struct saxpy_args, with C's padding
    shapes = [("256-item groups", 256, kh), ("1024-item groups", 1024, kh),
              ("one group per core", -(-n // host.cores), kh), (O2_LABEL, 256, host.saxpy_o2.handle)]
    sides: dict[str, Callable[[], float]] = {}
    checks: dict[str, Callable[[], np.ndarray]] = {}
    for label, size, kernel in shapes:
        sizes = KernelLaunchSizeArgs(1, Dimensions(-(-n // size), 1, 1), Dimensions(size, 1, 1))

        def ol_round(sizes: KernelLaunchSizeArgs = sizes, kernel: api.Symbol = kernel) -> float:
            start = time.perf_counter()
            api.olLaunchKernel(qh, dh, kernel, blob, sizes)
            api.olSyncQueue(qh)
            return time.perf_counter() - start

        def ol_check(round_: Callable[[], float] = ol_round) -> np.ndarray:
            y.copy_from(y_start)
            round_()
            result = np.empty(n, dtype=np.float32)
            y.copy_to(result)
            return result

        sides[f"offloadrt {label}"] = ol_round
        checks[f"offloadrt {label}"] = ol_check
    scratch, y_numpy = np.empty(n, dtype=np.float32), y_start.copy()

    def numpy_round() -> float:
        start = time.perf_counter()
        np.multiply(x_host, a, out=scratch)
        np.add(scratch, y_numpy, out=y_numpy)
        return time.perf_counter() - start

    def numpy_check() -> np.ndarray:
        np.copyto(y_numpy, y_start)
        numpy_round()
        return y_numpy.copy()

    sides["numpy"], checks["numpy"] = numpy_round, numpy_check
    if peer is not None:
        cl, pq, pk = peer.cl, peer.queue, peer.saxpy
        px, py = peer.buffer(4 * n), peer.buffer(4 * n)
        cl.enqueue_copy(pq, px, x_host)
        pk.set_args(a, px, py)
        for label, local in (("256-item groups", (256,)), ("1024-item groups", (1024,)),
                             ("local size chosen by PoCL", None)):
            if local is not None and n % local[0]:
                raise ValueError(f"saxpy: n = {n} is not a multiple of the local size {local[0]}")
            global_size = (n,)

            def peer_round(global_size: tuple[int] = global_size, local: tuple[int] | None = local) -> float:
                start = time.perf_counter()
                cl.enqueue_nd_range_kernel(pq, pk, global_size, local)
                pq.finish()
                return time.perf_counter() - start

            def peer_check(round_: Callable[[], float] = peer_round) -> np.ndarray:
                cl.enqueue_copy(pq, py, y_start)
                round_()
                result = np.empty(n, dtype=np.float32)
                cl.enqueue_copy(pq, result, py)
                return result

            sides[f"peer {label}"], checks[f"peer {label}"] = peer_round, peer_check
    for name, check in checks.items():
        result = check()
        if not np.allclose(result, expected, rtol=1e-6, atol=1e-6):
            raise AssertionError(f"saxpy by {name} differs from a * x + y")
    best = alternate(repeats, sides)
    x.close()
    y.close()
    return best


class Copies:
    """Two buffers of ``capacity`` bytes per side, pages touched, and a copy of a prefix per side."""

    def __init__(self, host: Host, peer: Peer | None, capacity: int) -> None:
        self.capacity = capacity
        device = host.device
        self.src = device.allocate(capacity, AllocType.HOST)
        self.dst = device.allocate(capacity, AllocType.HOST)
        self.src_view = np.ctypeslib.as_array((ctypes.c_uint8 * capacity).from_address(self.src.ptr))
        self.dst_view = np.ctypeslib.as_array((ctypes.c_uint8 * capacity).from_address(self.dst.ptr))
        self.src_view[:] = np.arange(capacity, dtype=np.uint32).astype(np.uint8)
        self.dst_view[:] = 0
        self.hdev = device.handle
        self.peer = peer
        if peer is not None:
            self.peer_src, self.peer_dst = peer.buffer(capacity), peer.buffer(capacity)
            peer.cl.enqueue_copy(peer.queue, self.peer_src, self.src_view)
            peer.cl.enqueue_copy(peer.queue, self.peer_dst, self.dst_view)
            peer.queue.finish()

    def sides(self, size: int, count: int, with_buffer_api: bool) -> dict[str, Callable[[], float]]:
        """Per side, a round of ``count`` copies of ``size`` bytes returning seconds per copy."""
        src, dst, hdev = self.src.ptr, self.dst.ptr, self.hdev
        ol_memcpy, memmove = api.olMemcpy, ctypes.memmove
        src_view, dst_view = self.src_view[:size], self.dst_view[:size]
        copyto = np.copyto
        nothing = lambda: None  # noqa: E731
        sides = {
            "offloadrt olMemcpy": per_call(count, lambda: ol_memcpy(None, dst, hdev, src, hdev, size), nothing),
            "numpy.copyto": per_call(count, lambda: copyto(dst_view, src_view), nothing),
            "memmove (ctypes)": per_call(count, lambda: memmove(dst, src, size), nothing),
        }
        if with_buffer_api:
            whole_src, whole_dst = self.src, self.dst
            assert size == self.capacity, "Buffer.copy_from copies whole buffers"
            sides["offloadrt Buffer.copy_from"] = per_call(count, lambda: whole_dst.copy_from(whole_src), nothing)
        if self.peer is not None:
            cl, pq, psrc, pdst = self.peer.cl, self.peer.queue, self.peer_src, self.peer_dst
            enqueue_copy = cl.enqueue_copy
            sides["peer enqueue_copy"] = per_call(
                count, lambda: enqueue_copy(pq, pdst, psrc, byte_count=size), pq.finish)
        return sides

    def check(self, size: int) -> None:
        """The prefix copied by the sides is right (the peer's read back)."""
        if not np.array_equal(self.dst_view[:size], self.src_view[:size]):
            raise AssertionError(f"the {size}-byte host copy is wrong")
        if self.peer is not None:
            back = np.empty(size, dtype=np.uint8)
            self.peer.cl.enqueue_copy(self.peer.queue, back, self.peer_dst)  # reads len(back) bytes
            if not np.array_equal(back, self.src_view[:size]):
                raise AssertionError(f"the peer's {size}-byte copy is wrong")

    def close(self) -> None:
        self.src.close()
        self.dst.close()


def copies_per_round(size: int, quick: bool) -> int:
    """Enough copies per round to move a few tens of MiB (timer resolution), at most 4096."""
    target = (8 if quick else 64) << 20
    return max(1, min(4096, target // size))


def bench_copy_64mib(host: Host, peer: Peer | None, size: int, repeats: int) -> dict[str, float]:
    copies = Copies(host, peer, size)
    try:
        sides = copies.sides(size, 1, with_buffer_api=True)
        for run in sides.values():
            run()
        copies.check(size)
        return {name: size / seconds / 1e9 for name, seconds in alternate(repeats, sides).items()}
    finally:
        copies.close()


def bench_copy_sweep(host: Host, peer: Peer | None, sizes: tuple[int, ...], repeats: int,
                     quick: bool) -> dict[str, Any]:
    """GB/s of each side against the copy's size."""
    copies = Copies(host, peer, max(sizes))
    series: dict[str, list[float]] = {}
    try:
        for size in sizes:
            sides = copies.sides(size, copies_per_round(size, quick), with_buffer_api=False)
            for run in sides.values():
                run()
            copies.check(size)
            for name, seconds in alternate(repeats, sides).items():
                series.setdefault(name, []).append(size / seconds / 1e9)
    finally:
        copies.close()
    return {"sizes": list(sizes), "GBps": series}


def collect(quick: bool = False) -> dict[str, Any]:
    """Run the three workloads and the copy sweep; ``rows`` in the shared format, ``copy_sweep`` for the plot."""
    peer, reason = open_peer()
    n = 1 << (20 if quick else 24)
    launches, repeats = (2_000, 3) if quick else (20_000, 7)
    copy_size = (4 if quick else 64) << 20
    with tempfile.TemporaryDirectory() as workdir:
        host = Host(build_host_kernels(HOST_KERNELS, Path(workdir), "peer_kernels", OPTIMISE),
                    build_host_kernels(HOST_KERNELS, Path(workdir), "peer_kernels_o2"))
        try:
            launch = bench_launch(host, peer, launches, repeats)
            saxpy = bench_saxpy(host, peer, n, repeats)
            copy = bench_copy_64mib(host, peer, copy_size, repeats)
            sweep = bench_copy_sweep(host, peer, QUICK_SWEEP_SIZES if quick else SWEEP_SIZES, 2 if quick else 5, quick)
        finally:
            host.close()
    rows = _rows(launch, saxpy, copy, n, copy_size, peer is not None)
    return {
        "rows": rows,
        "peer": {"available": peer is not None, "reason": reason,
                 "description": peer.description if peer is not None else None},
        "host": {"device": host.device.name, "cores": host.cores, "kernel_flags": " ".join(OPTIMISE)},
        "launch_us": {name: seconds * 1e6 for name, seconds in launch.items()},
        "saxpy_ms": {name: seconds * 1e3 for name, seconds in saxpy.items()},
        "saxpy_n": n,
        "copy_GBps": copy,
        "copy_bytes": copy_size,
        "copy_sweep": sweep,
    }


def _rows(launch: dict[str, float], saxpy: dict[str, float], copy: dict[str, float], n: int, copy_size: int,
          has_peer: bool) -> list[dict[str, Any]]:
    rows = []
    peer_launch = launch.get("peer")
    for side, how in (("olLaunchKernel", "olLaunchKernel"), ("Queue.launch", "Queue.launch")):
        if has_peer:
            rows.append(row(NAME, f"empty-kernel launch, queued: offloadrt {how}", launch[side] * 1e6, "us",
                            peer_launch * 1e6, f"{PEER} enqueue_nd_range_kernel", "< 1x (ahead of the peer)"))
        else:
            rows.append(row(NAME, f"empty-kernel launch, queued: offloadrt {how}", launch[side] * 1e6, "us",
                            launch["raw"] * 1e6, "bare ctypes call of the kernel"))
    if has_peer:
        rows.append(row(NAME, f"empty-kernel launch, queued: {PEER} enqueue_nd_range_kernel", peer_launch * 1e6, "us",
                        launch["raw"] * 1e6, "bare ctypes call of the kernel"))
    rows.append(row(NAME, "empty-kernel call: bare ctypes call (the floor)", launch["raw"] * 1e6, "us"))
    items = f"2^{n.bit_length() - 1}"
    for label, peer_label in (("256-item groups", "256-item groups"), ("1024-item groups", "1024-item groups"),
                              ("one group per core", "local size chosen by PoCL")):
        ours = saxpy[f"offloadrt {label}"] * 1e3
        if has_peer:
            rows.append(row(NAME, f"saxpy {items} float32: offloadrt, {label}", ours, "ms",
                            saxpy[f"peer {peer_label}"] * 1e3, f"{PEER}, {peer_label}", "<= 1x (level with the peer)"))
        else:
            rows.append(row(NAME, f"saxpy {items} float32: offloadrt, {label}", ours, "ms", saxpy["numpy"] * 1e3,
                            "numpy multiply+add"))
    rows.append(row(NAME, f"saxpy {items} float32: offloadrt, {O2_LABEL} (the tests' flags)",
                    saxpy[f"offloadrt {O2_LABEL}"] * 1e3, "ms", saxpy["offloadrt 256-item groups"] * 1e3,
                    f"the same built with {' '.join(OPTIMISE)}"))
    rows.append(row(NAME, f"saxpy {items} float32: offloadrt, 256-item groups, against NumPy",
                    saxpy["offloadrt 256-item groups"] * 1e3, "ms", saxpy["numpy"] * 1e3, "numpy multiply+add",
                    "<= 0.67x (1.5x NumPy's speed)"))
    if has_peer:
        for peer_label in ("256-item groups", "1024-item groups", "local size chosen by PoCL"):
            rows.append(row(NAME, f"saxpy {items} float32: {PEER}, {peer_label}", saxpy[f"peer {peer_label}"] * 1e3,
                            "ms", saxpy["numpy"] * 1e3, "numpy multiply+add"))
    rows.append(row(NAME, f"saxpy {items} float32: numpy multiply+add (one core)", saxpy["numpy"] * 1e3, "ms"))
    mib = f"{copy_size >> 20} MiB"
    for side in ("offloadrt olMemcpy", "offloadrt Buffer.copy_from"):
        what = f"{mib} host copy: {side}" + (" host->host" if side.endswith("olMemcpy") else "")
        if has_peer:
            rows.append(row(NAME, what, copy[side], "GB/s", copy["peer enqueue_copy"], f"{PEER} enqueue_copy",
                            ">= 1x (level with the peer)"))
        rows.append(row(NAME, what, copy[side], "GB/s", copy["memmove (ctypes)"], "memmove via ctypes", ">= 0.9x"))
    if has_peer:
        rows.append(row(NAME, f"{mib} host copy: {PEER} enqueue_copy buffer->buffer", copy["peer enqueue_copy"],
                        "GB/s", copy["memmove (ctypes)"], "memmove via ctypes"))
    rows.append(row(NAME, f"{mib} host copy: numpy.copyto", copy["numpy.copyto"], "GB/s", copy["memmove (ctypes)"],
                    "memmove via ctypes"))
    rows.append(row(NAME, f"{mib} host copy: memmove via ctypes (the floor)", copy["memmove (ctypes)"], "GB/s"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    results = collect(args.quick)
    peer = results["peer"]
    print(f"offloadrt {offloadrt.__version__} on {results['host']['device']} ({results['host']['cores']} cores, "
          f"{os.cpu_count()} CPUs); peer: {peer['description'] or 'absent: ' + peer['reason']}")
    print_rows(results["rows"])
    sweep = results["copy_sweep"]
    print("\ncopy bandwidth (GB/s) against size")
    names = list(sweep["GBps"])
    print("size".ljust(10) + "".join(name.ljust(22) for name in names))
    for index, size in enumerate(sweep["sizes"]):
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(label.ljust(10) + "".join(f"{sweep['GBps'][name][index]:.2f}".ljust(22) for name in names))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
