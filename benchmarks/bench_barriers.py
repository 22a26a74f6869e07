"""Portable kernels with barriers on the host device against PyOpenCL on PoCL's CPU device.

    python benchmarks/bench_barriers.py [--quick] [--json FILE]

The same two workloads written twice, as portable ``<gpuintrin.h>`` kernels run by offloadrt's host
device and as OpenCL C run by PyOpenCL on PoCL's CPU device, in the same run; each side warmed up
once (compiles not timed), rounds of the sides interleaved, the best round of each counting; every
result is checked against NumPy:

- a tiled transpose of a 2000x3000 float32 matrix (500x600 with ``--quick``): 16x16 groups, each
  reading its tile into work-group memory, one barrier, writing it transposed; and the same
  transpose without the barrier (each item copies one element: no work-group memory), which the
  host runs as a plain loop: what the barrier costs.
- the sum of 10M float32 (1M with ``--quick``): 1024 groups of 256 items each add a strided part
  of the input, then reduce their 256 partial sums as a tree in work-group memory (a barrier
  before each of the 8 levels), item 0 writing the group's sum; one more group adds the 1024 sums
  the same way; the result is read back.

Rows: offloadrt's time with PoCL's as the floor (goal: within 2x). Without PyOpenCL or PoCL those
rows carry no floor, and a note says why.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _report import alternate, pocl_cpus, print_rows, row, timed, write_json

import offloadrt
from offloadrt import OffloadError

NAME = "barriers"
PEER = "PyOpenCL on PoCL"
TILE = 16
GROUP = 256
SUM_GROUPS = 1024

PORTABLE = f"""#include <gpuintrin.h>
#include <stdint.h>
#include <stddef.h>
#define TILE {TILE}
#define GROUP {GROUP}

__gpu_kernel void transpose_tiled(const float *in, float *out, uint32_t rows, uint32_t cols) {{
  static __gpu_local float tile[TILE][TILE + 1];
  uint32_t tx = __gpu_thread_id_x(), ty = __gpu_thread_id_y();
  uint32_t c = __gpu_block_id_x() * TILE + tx, r = __gpu_block_id_y() * TILE + ty;
  if (r < rows && c < cols)
    tile[ty][tx] = in[(size_t)r * cols + c];
  __gpu_sync_threads();
  uint32_t oc = __gpu_block_id_y() * TILE + tx, orow = __gpu_block_id_x() * TILE + ty;
  if (orow < cols && oc < rows)
    out[(size_t)orow * rows + oc] = tile[tx][ty];
}}

__gpu_kernel void transpose_direct(const float *in, float *out, uint32_t rows, uint32_t cols) {{
  uint32_t c = __gpu_block_id_x() * TILE + __gpu_thread_id_x(), r = __gpu_block_id_y() * TILE + __gpu_thread_id_y();
  if (r < rows && c < cols)
    out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
}}

__gpu_kernel void sum_groups(const float *x, uint32_t n, float *sums) {{
  static __gpu_local float part[GROUP];
  uint32_t t = __gpu_thread_id_x(), stride = __gpu_num_blocks_x() * GROUP;
  float acc = 0.0f;
  for (uint32_t i = __gpu_block_id_x() * GROUP + t; i < n; i += stride)
    acc += x[i];
  part[t] = acc;
  for (uint32_t s = GROUP / 2; s > 0; s >>= 1) {{
    __gpu_sync_threads();
    if (t < s)
      part[t] += part[t + s];
  }}
  if (t == 0)
    sums[__gpu_block_id_x()] = part[0];
}}
"""

OPENCL = f"""#define TILE {TILE}
#define GROUP {GROUP}
__kernel void transpose_tiled(__global const float *in, __global float *out, uint rows, uint cols) {{
  __local float tile[TILE][TILE + 1];
  uint tx = get_local_id(0), ty = get_local_id(1);
  uint c = get_group_id(0) * TILE + tx, r = get_group_id(1) * TILE + ty;
  if (r < rows && c < cols)
    tile[ty][tx] = in[(size_t)r * cols + c];
  barrier(CLK_LOCAL_MEM_FENCE);
  uint oc = get_group_id(1) * TILE + tx, orow = get_group_id(0) * TILE + ty;
  if (orow < cols && oc < rows)
    out[(size_t)orow * rows + oc] = tile[tx][ty];
}}

__kernel void transpose_direct(__global const float *in, __global float *out, uint rows, uint cols) {{
  uint c = get_group_id(0) * TILE + get_local_id(0), r = get_group_id(1) * TILE + get_local_id(1);
  if (r < rows && c < cols)
    out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
}}

__kernel void sum_groups(__global const float *x, uint n, __global float *sums) {{
  __local float part[GROUP];
  uint t = get_local_id(0), stride = get_num_groups(0) * GROUP;
  float acc = 0.0f;
  for (uint i = get_group_id(0) * GROUP + t; i < n; i += stride)
    acc += x[i];
  part[t] = acc;
  for (uint s = GROUP / 2; s > 0; s >>= 1) {{
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t < s)
      part[t] += part[t + s];
  }}
  if (t == 0)
    sums[get_group_id(0)] = part[0];
}}
"""


def open_peer() -> tuple[Any, str | None]:
    """(pyopencl, context, queue, device, program) on PoCL's CPU device, or None and why it cannot run here."""
    try:
        import pyopencl as cl
    except ImportError as exc:
        return None, f"PyOpenCL cannot be imported ({exc}); pip install pyopencl"
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        return None, f"no OpenCL platform ({exc}); install PoCL (Debian: pocl-opencl-icd)"
    cpus = pocl_cpus(cl, platforms)
    if not cpus:
        return None, "no PoCL CPU device among the OpenCL platforms; install PoCL (Debian: pocl-opencl-icd)"
    context = cl.Context([cpus[0]])
    try:
        program = cl.Program(context, OPENCL).build()
    except cl.Error as exc:
        return None, f"PoCL could not build the OpenCL kernels: {exc}"
    return (cl, context, cl.CommandQueue(context), cpus[0], program), None


def measure(quick: bool, notes: list[str]) -> list[dict[str, Any]]:
    host = offloadrt.device("host")
    program = host.compile(PORTABLE, lang="gpu-c")
    rows_n, cols_n = (500, 600) if quick else (2000, 3000)
    n = 1_000_000 if quick else 10_000_000
    rng = np.random.default_rng(0)
    matrix = rng.random((rows_n, cols_n), dtype=np.float32)
    x = rng.random(n, dtype=np.float32)
    exact = float(x.astype(np.float64).sum())
    grid = (-(-cols_n // TILE), -(-rows_n // TILE))
    din, dout = offloadrt.asarray(matrix, host), offloadrt.empty((cols_n, rows_n), np.float32, host)
    dx = offloadrt.asarray(x, host)
    sums, total = offloadrt.empty(SUM_GROUPS, np.float32, host), offloadrt.empty(1, np.float32, host)
    queue = host.queue()
    tiled, direct, groups = program.kernel("transpose_tiled"), program.kernel("transpose_direct"), \
        program.kernel("sum_groups")
    r32, c32, n32 = np.uint32(rows_n), np.uint32(cols_n), np.uint32(n)

    def transpose(kernel: offloadrt.Kernel) -> Callable[[], None]:
        def run() -> None:
            queue.launch(kernel, grid, (TILE, TILE), din, dout, r32, c32)
            queue.sync()
        return run

    def offload_sum() -> float:
        queue.launch(groups, SUM_GROUPS, GROUP, dx, n32, sums)
        queue.launch(groups, 1, GROUP, sums, np.uint32(SUM_GROUPS), total)
        queue.sync()
        return float(total.numpy()[0])

    sides: dict[str, Callable[[], float]] = {}
    for label, kernel in (("tiled", tiled), ("direct", direct)):
        dout.numpy()[...] = 0
        transpose(kernel)()
        if not np.array_equal(dout.numpy(), matrix.T):
            notes.append(f"transpose ({label}): offloadrt's result differs from NumPy's (figures not trusted)")
        sides[f"offloadrt {label}"] = timed(transpose(kernel))
    if abs(offload_sum() - exact) > 1e-4 * abs(exact):
        notes.append("sum: offloadrt's result differs from NumPy's (figures not trusted)")
    sides["offloadrt sum"] = timed(offload_sum)

    peer, reason = open_peer()
    if peer is not None:
        cl, context, cl_queue, device, cl_program = peer
        flags = cl.mem_flags
        pin = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=matrix)
        pout = cl.Buffer(context, flags.WRITE_ONLY, matrix.nbytes)
        px = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
        psums = cl.Buffer(context, flags.READ_WRITE, SUM_GROUPS * 4)
        ptotal = cl.Buffer(context, flags.READ_WRITE, 4)
        peer_tiled, peer_direct = cl_program.transpose_tiled, cl_program.transpose_direct
        peer_groups = cl_program.sum_groups
        global_size = (grid[0] * TILE, grid[1] * TILE)

        def peer_transpose(kernel: Any) -> Callable[[], None]:
            def run() -> None:
                kernel(cl_queue, global_size, (TILE, TILE), pin, pout, r32, c32)
                cl_queue.finish()
            return run

        def peer_sum() -> float:
            peer_groups(cl_queue, (SUM_GROUPS * GROUP,), (GROUP,), px, n32, psums)
            peer_groups(cl_queue, (GROUP,), (GROUP,), psums, np.uint32(SUM_GROUPS), ptotal)
            result = np.empty(1, np.float32)
            cl.enqueue_copy(cl_queue, result, ptotal)
            return float(result[0])

        for label, kernel in (("tiled", peer_tiled), ("direct", peer_direct)):
            peer_transpose(kernel)()
            check = np.empty((cols_n, rows_n), np.float32)
            cl.enqueue_copy(cl_queue, check, pout)
            if not np.array_equal(check, matrix.T):
                notes.append(f"transpose ({label}): {PEER}'s result differs from NumPy's")
            sides[f"pocl {label}"] = timed(peer_transpose(kernel))
        if abs(peer_sum() - exact) > 1e-4 * abs(exact):
            notes.append(f"sum: {PEER}'s result differs from NumPy's")
        sides["pocl sum"] = timed(peer_sum)
        notes.append(f"peer: {device.name} ({device.platform.version}, PyOpenCL {cl.VERSION_TEXT}, "
                     f"{device.max_compute_units} compute units)")
    else:
        notes.append(f"{PEER} rows not measured: {reason}")
    best = alternate(3 if quick else 7, sides)
    queue.close()

    def figure(side: str, what: str, goal: str) -> dict[str, Any]:
        peer_side = side.replace("offloadrt", "pocl")
        floor = best[peer_side] * 1e3 if peer is not None else None
        return row(NAME, what, best[side] * 1e3, "ms", floor, f"{PEER}, the same kernel" if floor else None,
                   goal=goal if floor else None)

    shape = f"{rows_n}x{cols_n} float32, {TILE}x{TILE} groups"
    rows = [figure("offloadrt tiled", f"tiled transpose {shape}, work-group memory and a barrier", "<= 2"),
            figure("offloadrt direct", f"transpose {shape} without a barrier (a loop on the host)", "<= 2"),
            figure("offloadrt sum", f"sum of {n:,} float32: {SUM_GROUPS} groups of {GROUP}, tree reduction "
                                    f"in work-group memory (8 barriers), then one group; result read", "<= 2")]
    rows.append(row(NAME, f"tiled transpose {shape}: the barrier's cost on the host", best["offloadrt tiled"] * 1e3,
                    "ms", best["offloadrt direct"] * 1e3, "the same transpose without a barrier"))
    return rows


def collect(quick: bool = False) -> dict[str, Any]:
    """The barrier figures: ``rows`` in the shared format, ``notes`` on what could not run."""
    notes: list[str] = []
    try:
        rows = measure(quick, notes)
    except OffloadError as exc:
        if exc.code != offloadrt.ErrorCode.HOST_TOOL_NOT_FOUND:
            raise
        return {"rows": [], "notes": [f"not measured: the kernels need clang 20 or later ({exc.details})"]}
    return {"rows": rows, "notes": notes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller arrays and fewer rounds")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    results = collect(args.quick)
    print(f"offloadrt {offloadrt.__version__}: portable kernels with barriers on the host")
    print_rows(results["rows"])
    for note in results["notes"]:
        print(f"note: {note}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
