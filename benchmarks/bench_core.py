"""Costs of offloadrt's Python API on the host device, each against its ``ol*`` floor in the same run.

    python benchmarks/bench_core.py [--json FILE] [--launches N] [--cycles N] [--repeats N]

- launch: ``queue.launch(kernel, 1, 1, x, y, a, n)`` with 4 arguments (2 buffers, a Python float
  and a Python int, packed by the kernel's signature) against ``olLaunchKernel`` of the same empty
  kernel with the blob packed once beforehand, per launch (then one sync). Goal: <= 1.3x.
- pool: ``device.allocate(size)`` + ``buffer.close()`` (the pool) against ``olMemAlloc`` +
  ``olMemFree`` of the same size, per pair, for 1 KiB to 1 MiB. Goal: >= 10x faster.

Rounds of the two sides alternate and each side's best round counts, so both see the same load.
The launch row also shows the layer's own cost: the same ``queue.launch`` calls with
``olLaunchKernel`` replaced by a call that does nothing, less that call.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import print_table, write_json

import offloadrt
from offloadrt import AllocType, Dimensions, KernelLaunchSizeArgs, api

FOUR_ARGUMENTS = """
#include <offloadrt/host_kernel.h>
struct four_args { const float *x; float *y; float a; int n; };
OL_HOST_KERNEL four(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }
OL_HOST_KERNEL_ARGS(four, struct four_args);
"""
SIZES = (1 << 10, 4 << 10, 64 << 10, 1 << 20)


def build(workdir: Path) -> Path:
    (workdir / "four.c").write_text(FOUR_ARGUMENTS)
    compiler = shutil.which("cc") or "cc"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-I", offloadrt.get_include(), str(workdir / "four.c"), "-o",
                    str(workdir / "four.so")], check=True)
    return workdir / "four.so"


def alternate(repeats: int, sides: dict[str, object]) -> dict[str, float]:
    """Best seconds of each side's round (each a callable returning its seconds), rounds interleaved."""
    best = {name: float("inf") for name in sides}
    for _ in range(repeats):
        for name, run in sides.items():
            best[name] = min(best[name], run())  # type: ignore[operator]
    return best


def bench_launch(device: offloadrt.Device, image: Path, launches: int, repeats: int) -> dict[str, float]:
    kernel = device.load(image).kernel("four")
    kernel.signature = ("ptr", "ptr", "float32", "int32")
    x, y = device.allocate(256), device.allocate(256)
    queue = device.queue()
    handle, device_handle, symbol = queue.handle, device.handle, kernel.handle
    blob = struct.pack("<QQfi", x.ptr, y.ptr, 2.0, 3)
    sizes = KernelLaunchSizeArgs(1, Dimensions(1), Dimensions(1))
    launch, ol_launch = queue.launch, api.olLaunchKernel
    launch(kernel, 1, 1, x, y, 2.0, 3)  # builds the launcher
    queue.sync()

    def raw() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            ol_launch(handle, device_handle, symbol, blob, sizes)
        queue.sync()
        return (time.perf_counter() - start) / launches

    def ours() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            launch(kernel, 1, 1, x, y, 2.0, 3)
        queue.sync()
        return (time.perf_counter() - start) / launches

    best = alternate(repeats, {"olLaunchKernel": raw, "queue.launch": ours})
    # the layer's own cost: the same launches with olLaunchKernel replaced by a call that does nothing
    cells = dict(zip(kernel._fast.__code__.co_freevars, kernel._fast.__closure__ or ()))
    nothing = lambda *_: None  # noqa: E731
    cells["_launch"].cell_contents = nothing

    def floor() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            nothing(handle, device_handle, symbol, blob, sizes)
        return (time.perf_counter() - start) / launches

    alone = alternate(repeats, {"floor": floor, "layer": ours})
    cells["_launch"].cell_contents = ol_launch
    best["layer alone"] = alone["layer"] - alone["floor"]
    queue.close()
    return best


def bench_pool(device: offloadrt.Device, size: int, cycles: int, repeats: int) -> dict[str, float]:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--launches", type=int, default=5_000)
    parser.add_argument("--cycles", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args(argv)
    device = offloadrt.device("host")
    results: dict[str, object] = {"python": sys.version.split()[0]}
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        launch = bench_launch(device, build(Path(workdir)), args.launches, args.repeats)
    ratio = launch["queue.launch"] / launch["olLaunchKernel"]
    results["launch"] = {**launch, "ratio": ratio, "goal": "<= 1.3"}
    rows.append(["launch, 4 arguments", f"{launch['olLaunchKernel'] * 1e6:.2f} us (pre-packed olLaunchKernel)",
                 f"{launch['queue.launch'] * 1e6:.2f} us (queue.launch)", f"{ratio:.2f}x slower", "<= 1.3x"])
    rows.append(["  of which the layer", "", f"{launch['layer alone'] * 1e6:.2f} us (packing, checks, calls)",
                 f"+{launch['layer alone'] / launch['olLaunchKernel']:.2f}x", ""])
    for size in SIZES:
        pool = bench_pool(device, size, args.cycles, args.repeats)
        speedup = pool["olMemAlloc+olMemFree"] / pool["allocate+close"]
        results[f"pool {size}"] = {**pool, "speedup": speedup, "goal": ">= 10"}
        floor = f"{pool['olMemAlloc+olMemFree'] * 1e6:.2f} us (olMemAlloc+olMemFree)"
        rows.append([f"alloc+free {size // 1024} KiB", floor,
                     f"{pool['allocate+close'] * 1e6:.2f} us (pool)", f"{speedup:.1f}x faster", ">= 10x"])
    print_table(["case", "ol* floor", "Python API", "ratio", "goal"], rows)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
