"""Costs of offloadrt's Python API on the host device, each against its ``ol*`` floor in the same run.

    python benchmarks/bench_core.py [--quick] [--json FILE]

- launch: ``queue.launch(kernel, 1, 1, x, y, a, n)`` with 4 arguments (2 buffers, a Python float
  and a Python int, packed by the kernel's signature) against ``olLaunchKernel`` of the same empty
  kernel with the blob packed once beforehand, per launch (then one sync). Goal: <= 1.3x.
  Three floors in the same rounds say what any Python layer pays: a Python method with
  ``queue.launch``'s parameters that only calls the pre-packed ``olLaunchKernel`` (one frame); the
  same method first checking, in that frame, the least that reusing a kept blob needs (the same
  queue, shape and argument objects, nothing closed since); and the method handing over to a
  per-kernel function that does the same as the first (``queue.launch``'s two frames: the queue's
  method, the kernel's launcher). Also: ``n`` new each launch, against
  ``olLaunchKernel`` with a blob per launch packed beforehand; and the layer's own cost (the same
  ``queue.launch`` calls with ``olLaunchKernel`` replaced by a call that does nothing, less that call).
- pool: ``device.allocate(size)`` + ``buffer.close()`` (the pool) against ``olMemAlloc`` +
  ``olMemFree`` of the same size, per pair, for 1 KiB to 1 MiB. Goal: >= 10x faster.
- copies: 8 bytes with ``buffer.copy_from``, from a NumPy array at once and from another buffer on a
  queue, against ``olMemcpy`` of the same addresses.

Rounds of the sides of a row alternate and each side's best round counts, so all see the same load.
``collect(quick)`` returns the rows for ``run_all.py``.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _report import alternate, build_host_kernels, print_rows, write_json
from _report import row as report_row

from offloadrt import AllocType, Dimensions, KernelLaunchSizeArgs, api
from offloadrt.core import Device
from offloadrt.core import device as find_device

FOUR_ARGUMENTS = """
#include <offloadrt/host_kernel.h>
struct four_args { const float *x; float *y; float a; int n; };
OL_HOST_KERNEL four(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }
OL_HOST_KERNEL_ARGS(four, struct four_args);
"""
SIZES = (1 << 10, 4 << 10, 64 << 10, 1 << 20)


def row(what: str, value: float, unit: str, floor: float | None = None, floor_what: str | None = None,
        goal: str | None = None) -> dict[str, Any]:
    return report_row("core", what, value, unit, floor, floor_what, goal)


def build(workdir: Path) -> Path:
    return build_host_kernels(FOUR_ARGUMENTS, workdir, "four")


def bench_launch(device: Device, image: Path, launches: int, repeats: int) -> dict[str, float]:
    kernel = device.load(image).kernel("four")
    kernel.signature = ("ptr", "ptr", "float32", "int32")
    x, y = device.allocate(256), device.allocate(256)
    queue = device.queue()
    handle, device_handle, symbol = queue.handle, device.handle, kernel.handle
    blob = struct.pack("<QQfi", x.ptr, y.ptr, 2.0, 3)
    counts = list(range(launches))
    blobs = [struct.pack("<QQfi", x.ptr, y.ptr, 2.0, n) for n in counts]
    sizes = KernelLaunchSizeArgs(1, Dimensions(1), Dimensions(1))
    launch, ol_launch = queue.launch, api.olLaunchKernel
    launch(kernel, 1, 1, x, y, 2.0, 3)  # builds the launcher
    queue.sync()

    class Floor:
        """What any Python layer over olLaunchKernel pays: queue.launch's parameters and frames,
        around a call of the pre-packed olLaunchKernel."""

        def method(self, kernel: Any, grid: Any, block: Any, *args: Any, shared_mem: int = 0) -> None:
            ol_launch(handle, device_handle, symbol, blob, sizes)

        def kept(self, kernel: Any, grid: Any, block: Any, *args: Any, shared_mem: int = 0) -> None:
            # The least a launch that reuses a kept blob must check, in queue.launch's one frame: the
            # same queue, launch shape and argument objects (== is identity for buffers, but equal
            # numbers may differ in type or sign, so those are tested by identity), and nothing
            # closed since (one generation number standing for every buffer and queue); less than
            # queue.launch does (no marking of the buffers as in use by the queue).
            queue_, grid_, block_, shared_, args_, generation_ = kernel
            if (queue_ is self and grid == grid_ and block == block_ and shared_mem == shared_
                    and args == args_ and args[2] is args_[2] and args[3] is args_[3]
                    and generation_ == generation[0]):
                ol_launch(handle, device_handle, symbol, blob, sizes)
                return
            raise RuntimeError("the kept-blob floor's checks did not pass")

        def dispatch(self, kernel: Any, grid: Any, block: Any, *args: Any, shared_mem: int = 0) -> None:
            try:
                if kernel(self, grid, block, shared_mem, args):
                    return
            except (TypeError, ValueError, AttributeError):
                pass

    def launcher(queue: Any, grid: Any, block: Any, shared: Any, args: Any) -> bool:
        ol_launch(handle, device_handle, symbol, blob, sizes)
        return True

    floor = Floor()
    two, three = 2.0, 3
    generation = [0]
    record = (floor, 1, 1, 0, (x, y, two, three), 0)  # what the kept-blob floor compares with

    def timed(body: Any) -> Any:
        def run() -> float:
            start = time.perf_counter()
            body()
            queue.sync()
            return (time.perf_counter() - start) / launches
        return run

    def raw() -> None:
        for _ in counts:
            ol_launch(handle, device_handle, symbol, blob, sizes)

    def raw_new() -> None:
        for each in blobs:
            ol_launch(handle, device_handle, symbol, each, sizes)

    def method() -> None:
        call = floor.method
        for _ in counts:
            call(kernel, 1, 1, x, y, 2.0, 3)

    def kept() -> None:
        call = floor.kept
        for _ in counts:
            call(record, 1, 1, x, y, two, three)

    def dispatch() -> None:
        call = floor.dispatch
        for _ in counts:
            call(launcher, 1, 1, x, y, 2.0, 3)

    def ours() -> None:
        for _ in counts:
            launch(kernel, 1, 1, x, y, 2.0, 3)

    def ours_new() -> None:
        for n in counts:
            launch(kernel, 1, 1, x, y, 2.0, n)

    best = alternate(repeats, {name: timed(body) for name, body in (
        ("olLaunchKernel", raw), ("method floor", method), ("kept-blob floor", kept), ("dispatch floor", dispatch),
        ("queue.launch", ours),
        ("olLaunchKernel, new blobs", raw_new), ("queue.launch, new n", ours_new))})
    # the layer's own cost: the same launches with olLaunchKernel replaced by a call that does nothing
    cells = dict(zip(kernel._fast.__code__.co_freevars, kernel._fast.__closure__ or ()))
    nothing = lambda *_: None  # noqa: E731

    def nothing_alone() -> float:
        start = time.perf_counter()
        for _ in counts:
            nothing(handle, device_handle, symbol, blob, sizes)
        return (time.perf_counter() - start) / launches

    cells["_launch"].cell_contents = nothing
    try:
        alone = alternate(repeats, {"floor": nothing_alone, "layer": timed(ours)})
    finally:
        cells["_launch"].cell_contents = ol_launch
    best["layer alone"] = alone["layer"] - alone["floor"]
    queue.close()
    return best


def bench_pool(device: Device, size: int, cycles: int, repeats: int) -> dict[str, float]:
    allocate, handle = device.allocate, device.handle
    ol_alloc, ol_free = api.olMemAlloc, api.olMemFree
    allocate(size).close()  # one cached block

    def raw() -> float:
        start = time.perf_counter()
        for _ in range(cycles):
            ol_free(ol_alloc(handle, AllocType.DEVICE, size))
        return (time.perf_counter() - start) / cycles

    def pooled() -> float:
        start = time.perf_counter()
        for _ in range(cycles):
            allocate(size).close()
        return (time.perf_counter() - start) / cycles

    return alternate(repeats, {"olMemAlloc+olMemFree": raw, "allocate+close": pooled})


def bench_copies(device: Device, copies: int, repeats: int) -> dict[str, float]:
    """8-byte copies: a NumPy array into a buffer at once, a buffer into a buffer on a queue."""
    dst, src = device.allocate(8), device.allocate(8)
    host = np.arange(2, dtype=np.float32)
    host_address = host.ctypes.data
    device_handle, memcpy = device.handle, api.olMemcpy
    queue = device.queue()
    queue_handle = queue.handle
    dst_ptr, src_ptr = dst.ptr, src.ptr

    def timed(body: Any) -> Any:
        def run() -> float:
            start = time.perf_counter()
            for _ in range(copies):
                body()
            queue.sync()
            return (time.perf_counter() - start) / copies
        return run

    best = alternate(repeats, {
        "olMemcpy h2d": timed(lambda: memcpy(None, dst_ptr, device_handle, host_address, device_handle, 8)),
        "copy_from h2d": timed(lambda: dst.copy_from(host)),
        "olMemcpy queued": timed(lambda: memcpy(queue_handle, dst_ptr, device_handle, src_ptr, device_handle, 8)),
        "copy_from queued": timed(lambda: dst.copy_from(src, queue)),
    })
    queue.close()
    return best


def collect(quick: bool = False) -> dict[str, Any]:
    """Every figure: ``rows`` (run_all.py's format) and the raw seconds under ``details``."""
    launches, cycles, copies, repeats = (2_000, 500, 500, 5) if quick else (5_000, 2_000, 2_000, 21)
    device = find_device("host")
    with tempfile.TemporaryDirectory() as workdir:
        launch = bench_launch(device, build(Path(workdir)), launches, repeats)
    pools = {size: bench_pool(device, size, cycles, repeats) for size in SIZES}
    copy = bench_copies(device, copies, repeats)
    us = 1e6
    raw = launch["olLaunchKernel"] * us
    pre_packed = "olLaunchKernel, blob packed beforehand"
    rows = [
        row("queue.launch, 4 arguments (2 buffers, float, int), the same each launch", launch["queue.launch"] * us,
            "us", raw, pre_packed, "<= 1.3x"),
        row("floor: a method with queue.launch's parameters calling the pre-packed olLaunchKernel",
            launch["method floor"] * us, "us", raw, pre_packed, None),
        row("floor: that method checking what reusing a kept blob needs, in its one frame",
            launch["kept-blob floor"] * us, "us", raw, pre_packed, None),
        row("floor: that method handing over to a per-kernel function (queue.launch's two frames)",
            launch["dispatch floor"] * us, "us", raw, pre_packed, None),
        row("queue.launch, 4 arguments, the int new each launch", launch["queue.launch, new n"] * us, "us",
            launch["olLaunchKernel, new blobs"] * us, "olLaunchKernel, a blob per launch packed beforehand", None),
        row("queue.launch's own cost (olLaunchKernel replaced by a no-op)", launch["layer alone"] * us, "us"),
    ]
    for size, pool in pools.items():
        rows.append(row(f"allocate+close {size // 1024} KiB (the pool)", pool["allocate+close"] * us, "us",
                        pool["olMemAlloc+olMemFree"] * us, "olMemAlloc+olMemFree", "<= 0.1x (10x faster)"))
    rows.append(row("buffer.copy_from(8-byte NumPy array), at once", copy["copy_from h2d"] * us, "us",
                    copy["olMemcpy h2d"] * us, "olMemcpy of the same addresses, at once", None))
    rows.append(row("buffer.copy_from(8-byte buffer, queue), queued", copy["copy_from queued"] * us, "us",
                    copy["olMemcpy queued"] * us, "olMemcpy of the same addresses, queued", None))
    details = {"python": sys.version.split()[0], "launch": launch, "copy": copy,
               "pool": {str(size): pool for size, pool in pools.items()}}
    return {"rows": rows, "details": details}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a few seconds)")
    args = parser.parse_args(argv)
    results = collect(args.quick)
    print_rows(results["rows"])
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
