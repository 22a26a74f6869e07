"""Kernels from source: what a compile costs cold and cached, and a portable kernel's speed on the host.

    python benchmarks/bench_compile.py [--quick] [--json FILE]

Rows (each against a floor measured in the same run):

- a cold host C compile through ``offloadrt.compile.build`` (cache off) against running the same
  ``cc`` command directly;
- a cached compile (``build`` finding the entry on disk; goal < 1 ms) against reading the entry's
  file; and ``Device.compile`` with a cached image (lookup + loading the program) against
  ``Device.load`` of the same image;
- NVRTC, when cuda-bindings and the nvidia-cuda-nvrtc wheel are installed: a cold CUDA compile
  and a cached one;
- once the portable ``<gpuintrin.h>`` path and clang are there: a cached portable compile, and a
  barrier-free portable saxpy on the host device against the same kernel written by hand to the
  host kernel ABI, both built by the same clang at -O3 (goal: the portable kernel at >= 0.9x the
  hand-written one's speed, i.e. a time ratio <= 1.11).

The cache of this run is a temporary folder, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from _report import alternate, best_of, print_rows, row, timed, write_json

import offloadrt
from offloadrt import OffloadError
from offloadrt.compile import Target, _cache, _host, build

NAME = "compile"

HAND_SAXPY = r"""
#include <offloadrt/host_kernel.h>
#include <string.h>
struct saxpy_args { float a; const float *x; float *y; uint32_t n; };
OL_HOST_KERNEL saxpy(const void *args, const ol_host_launch_t *launch) {
  struct saxpy_args p;
  memcpy(&p, args, sizeof p);
  uint32_t size = launch->group_size.x, base = launch->group_id.x * size;
  for (uint32_t item = 0; item < size; ++item) {
    uint32_t i = base + item;
    if (i < p.n) p.y[i] = p.a * p.x[i] + p.y[i];
  }
  return 0;
}
OL_HOST_KERNEL_ARGS(saxpy, struct saxpy_args);
"""

PORTABLE_SAXPY = r"""
#include <gpuintrin.h>
#include <stdint.h>
__gpu_kernel void saxpy(float a, const float *x, float *y, uint32_t n) {
  uint32_t i = __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  if (i < n) y[i] = a * x[i] + y[i];
}
"""

CUDA_SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


@contextmanager
def environment(**values: str) -> Iterator[None]:
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def compile_rows(quick: bool, notes: list[str]) -> list[dict[str, Any]]:
    rows = []
    repeats = 3 if quick else 7
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        notes.append("no cc: the host C compile rows were not measured")
        return rows
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "kernel.c"
        source.write_text(HAND_SAXPY)
        command = [compiler, *_host.BASE_FLAGS, "-I", _host.include_dir(), str(source), "-o", str(Path(work) / "k.so")]
        best = alternate(repeats, {"raw": timed(lambda: subprocess.run(command, check=True, capture_output=True)),
                                   "build": timed(lambda: build(HAND_SAXPY, cache=False))})
    raw, cold = best["raw"], best["build"]
    rows.append(row(NAME, "cold host C compile (build, cache off)", cold * 1e3, "ms", raw * 1e3,
                    "the same cc command run directly"))
    build(HAND_SAXPY)  # the entry
    identity = _host.toolchain_identity(Target("host"))
    entry = _cache.folder() / f"{_cache.key(HAND_SAXPY, (), 'c', Target('host'), identity)}.olrtc"
    lookups = 200 if quick else 2000

    def many_hits() -> float:
        start = time.perf_counter()
        for _ in range(lookups):
            build(HAND_SAXPY)
        return (time.perf_counter() - start) / lookups

    def many_reads() -> float:
        start = time.perf_counter()
        for _ in range(lookups):
            entry.read_bytes()
        return (time.perf_counter() - start) / lookups

    hit, read = best_of(repeats, many_hits), best_of(repeats, many_reads)
    rows.append(row(NAME, "cached compile (build finds the image on disk)", hit * 1e6, "us", read * 1e6,
                    "reading the entry's file", goal="< 1000 us"))
    host = offloadrt.device("host")
    image = build(HAND_SAXPY).image

    def compile_and_close() -> None:
        host.compile(HAND_SAXPY).close()

    def load_and_close() -> None:
        host.load(image).close()

    loaded = best_of(repeats, timed(compile_and_close))
    floor = best_of(repeats, timed(load_and_close))
    rows.append(row(NAME, "Device.compile with a cached image (lookup + load on the host)", loaded * 1e3, "ms",
                    floor * 1e3, "Device.load of the same image"))
    return rows


def nvrtc_rows(quick: bool, notes: list[str]) -> list[dict[str, Any]]:
    target = Target("cuda", "sm_90")
    try:
        cold = best_of(2 if quick else 5, timed(lambda: build(CUDA_SAXPY, (), "cuda", target, cache=False)))
    except OffloadError as exc:
        notes.append(f"NVRTC rows not measured: {exc}")
        return []
    build(CUDA_SAXPY, (), "cuda", target)
    hit = best_of(5, timed(lambda: build(CUDA_SAXPY, (), "cuda", target)))
    return [row(NAME, "cold CUDA compile through NVRTC (saxpy, sm_90)", cold * 1e3, "ms"),
            row(NAME, "cached CUDA compile", hit * 1e6, "us", cold * 1e6, "the cold NVRTC compile", goal="< 1000 us")]


def portable_rows(quick: bool, notes: list[str]) -> list[dict[str, Any]]:
    try:
        from offloadrt.compile import _clang

        clang = _clang.clang().path
    except (ImportError, OffloadError) as exc:
        notes.append(f"portable vs hand-written not measured: no portable host path or clang ({exc})")
        return []
    host = offloadrt.device("host")
    try:
        from offloadrt.compile import _portable_host

        # the hand-written kernel is built for the same CPU as the portable one (-march=native unless
        # OFFLOADRT_HOST_MARCH says otherwise), so the ratio is the portable wrapper's cost alone
        cpu = _portable_host.march_options(_clang.clang(), [])
        portable = host.compile(PORTABLE_SAXPY).kernel("saxpy")
        with environment(CC=str(clang)):
            hand = host.compile(HAND_SAXPY, ["-O3", *cpu]).kernel("saxpy")
    except OffloadError as exc:
        notes.append(f"portable vs hand-written not measured: {exc}")
        return []
    lookups = 100 if quick else 1000

    def many_hits() -> float:
        start = time.perf_counter()
        for _ in range(lookups):
            build(PORTABLE_SAXPY)
        return (time.perf_counter() - start) / lookups

    hit = best_of(3, many_hits)
    rows = [row(NAME, "cached portable compile (gpu-c for the host)", hit * 1e6, "us", goal="< 1000 us")]
    n = 1 << (20 if quick else 23)
    group = 256
    x = offloadrt.asarray(np.random.default_rng(0).random(n, dtype=np.float32), host)
    y = offloadrt.asarray(np.zeros(n, np.float32), host)
    queue = host.queue()
    launches = [0]

    def launch(kernel: offloadrt.Kernel) -> Callable[[], float]:
        def run() -> float:
            launches[0] += 1
            start = time.perf_counter()
            queue.launch(kernel, n // group, group, 0.5, x, y, n)
            queue.sync()
            return time.perf_counter() - start
        return run

    for kernel in (portable, hand):
        launch(kernel)()  # warm: pages touched, the launcher built
    best = {"portable": float("inf"), "hand": float("inf")}
    for _ in range(3 if quick else 5):
        for side, kernel in (("portable", portable), ("hand", hand)):
            best[side] = min(best[side], best_of(2, launch(kernel)))
    queue.close()
    if not np.allclose(y.numpy(), 0.5 * launches[0] * x.numpy(), rtol=1e-4):
        notes.append("portable vs hand-written: the results differ from NumPy (figures not trusted)")
    what = f"portable <gpuintrin.h> saxpy on the host, 2^{n.bit_length() - 1} floats"
    return rows + [row(NAME, what, best["portable"] * 1e3, "ms", best["hand"] * 1e3,
                "the same kernel written to the host ABI by hand (same clang, -O3, same CPU)",
                goal="<= 1.11 (>= 0.9x speed)")]


def collect(quick: bool = False) -> dict[str, Any]:
    """The compile figures: ``rows`` in the shared format, ``notes`` on what could not be measured."""
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="offloadrt-bench-cache-") as folder, \
            environment(OFFLOADRT_CACHE_DIR=folder):
        rows = compile_rows(quick, notes) + nvrtc_rows(quick, notes) + portable_rows(quick, notes)
    return {"rows": rows, "notes": notes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller arrays")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    results = collect(args.quick)
    print(f"offloadrt {offloadrt.__version__}: kernels from source")
    print_rows(results["rows"])
    for note in results["notes"]:
        print(f"note: {note}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
