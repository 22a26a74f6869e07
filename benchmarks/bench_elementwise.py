"""One-line kernels on the host device (``offloadrt.core._elementwise``) against NumPy and PyOpenCL on PoCL.

    python benchmarks/bench_elementwise.py [--quick] [--json FILE]

Rows, each side warmed up once (the compile is not timed), rounds of the sides interleaved, the
best round of each counting:

- saxpy ``y = a * x + y`` over 2^24 float32 (2^22 with ``--quick``) by ``elementwise`` on a queue
  (launch and ``sync``), against NumPy's best in-place equivalent: ``numpy.multiply(x, a, out=t)``
  then ``numpy.add(y, t, out=y)`` into a preallocated ``t`` (faster than ``y += a * x``, which
  allocates the temporary each time; both are measured and the faster is the floor). Goal: 1.5x
  NumPy's speed (a time ratio <= 0.67).
- the sum of 10M float32 (1M with ``--quick``) by ``reduction("const float *x", "x[i]", "a + b",
  "0", float32)``, its result read back with ``.numpy()``, against ``numpy.sum`` (goal: within 2x),
  PyOpenCL's ``ReductionKernel`` on PoCL's CPU device and ``pyopencl.array.sum`` (result read with
  ``.get()``; goal: no slower). Without PyOpenCL, Mako (which PyOpenCL's reductions need) or PoCL
  those rows are absent and a note says why.
- the same sum through the other form of the generated source on the host, the GPU one (256-item
  groups reducing in work-group memory between barriers, run as fibers), against the serial-chunk
  form that the host uses: why the host uses the latter. Not with ``--quick``.
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
from offloadrt.core._elementwise import GPU_GROUP, elementwise, reduction

NAME = "elementwise"
PEER = "PyOpenCL on PoCL"


def open_peer() -> tuple[Any, str | None]:
    """(pyopencl, a context and queue on PoCL's CPU device), or None and why it cannot run here."""
    try:
        import pyopencl as cl
        import pyopencl.array  # noqa: F401
        import pyopencl.reduction  # noqa: F401
    except ImportError as exc:
        return None, f"PyOpenCL's reductions cannot be imported ({exc}); pip install pyopencl mako"
    try:
        import mako  # noqa: F401
    except ImportError as exc:
        return None, f"PyOpenCL's ReductionKernel needs Mako ({exc}); pip install mako"
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        return None, f"no OpenCL platform ({exc}); pip install pocl-binary-distribution brings PoCL's"
    cpus = pocl_cpus(cl, platforms)
    if not cpus:
        return None, "no PoCL CPU device among the OpenCL platforms; pip install pocl-binary-distribution"
    context = cl.Context([cpus[0]])
    return (cl, context, cl.CommandQueue(context), cpus[0]), None


def saxpy_rows(quick: bool, notes: list[str]) -> list[dict[str, Any]]:
    host = offloadrt.device("host")
    n = 1 << (22 if quick else 24)
    a = np.float32(2.0)
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    y = np.ones(n, np.float32)
    t = np.empty_like(y)
    dx, dy = offloadrt.asarray(x, host), offloadrt.asarray(y, host)
    kernel = elementwise("float a, const float *x, float *y", "y[i] = a * x[i] + y[i]", "saxpy")
    queue = host.queue()
    runs = {"offloadrt": 0}

    def offload() -> None:
        runs["offloadrt"] += 1
        kernel(a, dx, dy, queue=queue)
        queue.sync()

    def numpy_out() -> None:
        np.multiply(x, a, out=t)
        np.add(y, t, out=y)

    def numpy_inplace() -> None:
        nonlocal y
        y += a * x

    kernel(a, dx, dy)  # warm: compiled, pages touched
    runs["offloadrt"] += 1
    numpy_out()
    numpy_inplace()
    best = alternate(3 if quick else 7, {"offloadrt": timed(offload), "numpy out=": timed(numpy_out),
                                         "numpy +=": timed(numpy_inplace)})
    queue.close()
    check = np.ones(n, np.float64) + runs["offloadrt"] * 2.0 * x
    if not np.allclose(dy.numpy(), check, rtol=1e-4):
        notes.append("saxpy: offloadrt's result differs from NumPy's (figures not trusted)")
    floor_name = min(("numpy out=", "numpy +="), key=lambda side: best[side])
    floor_what = ("NumPy multiply(x, a, out=t); add(y, t, out=y)" if floor_name == "numpy out="
                  else "NumPy y += a * x")
    other = "numpy +=" if floor_name == "numpy out=" else "numpy out="
    notes.append(f"saxpy: NumPy's other form took {best[other] * 1e3:.2f} ms")
    return [row(NAME, f"elementwise saxpy on the host, 2^{n.bit_length() - 1} float32", best["offloadrt"] * 1e3,
                "ms", best[floor_name] * 1e3, floor_what, goal="<= 0.67 (>= 1.5x NumPy)")]


def sum_rows(quick: bool, notes: list[str]) -> list[dict[str, Any]]:
    host = offloadrt.device("host")
    n = 1_000_000 if quick else 10_000_000
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    dx = offloadrt.asarray(x, host)
    total = reduction("const float *x", "x[i]", "a + b", "0", np.float32, "sum")
    exact = float(x.astype(np.float64).sum())
    if abs(float(total(dx).numpy()) - exact) > 1e-4 * abs(exact):  # (also the warm-up: compiled here)
        notes.append("sum: offloadrt's result differs from NumPy's (figures not trusted)")
    sides: dict[str, Callable[[], float]] = {
        "offloadrt": timed(lambda: float(total(dx).numpy())),
        "numpy": timed(lambda: float(np.sum(x))),
    }
    peer, reason = open_peer()
    if peer is not None:
        cl, context, queue, device = peer
        from pyopencl import array as cl_array
        from pyopencl.reduction import ReductionKernel

        px = cl_array.to_device(queue, x)
        peer_kernel = ReductionKernel(context, np.float32, neutral="0", reduce_expr="a+b", map_expr="x[i]",
                                      arguments="__global const float *x")
        for check in (float(peer_kernel(px).get()), float(cl_array.sum(px).get())):  # (the warm-up)
            if abs(check - exact) > 1e-4 * abs(exact):
                notes.append(f"sum: {PEER}'s result differs from NumPy's")
        sides["ReductionKernel"] = timed(lambda: float(peer_kernel(px).get()))
        sides["array.sum"] = timed(lambda: float(cl_array.sum(px).get()))
        notes.append(f"peer: {device.name} ({device.platform.version}, PyOpenCL {cl.VERSION_TEXT}, "
                     f"{device.max_compute_units} compute units)")
    else:
        notes.append(f"{PEER} rows not measured: {reason}")
    best = alternate(5 if quick else 9, sides)
    what = f"reduction sum of {n:,} float32 on the host (result read)"
    rows = [row(NAME, what, best["offloadrt"] * 1e3, "ms", best["numpy"] * 1e3, "numpy.sum", goal="<= 2")]
    if peer is not None:
        rows.append(row(NAME, what, best["offloadrt"] * 1e3, "ms", best["ReductionKernel"] * 1e3,
                        f"{PEER}: ReductionKernel(...)(x).get()", goal="<= 1"))
        rows.append(row(NAME, what, best["offloadrt"] * 1e3, "ms", best["array.sum"] * 1e3,
                        f"{PEER}: pyopencl.array.sum(x).get()", goal="<= 1"))
    if not quick:
        rows.append(tree_row(total, dx, n, best["offloadrt"]))
    return rows


def tree_row(total: Any, dx: offloadrt.Array, n: int, serial: float) -> dict[str, Any]:
    """The GPU form of the sum (work-group trees, fibers on the host) run on the host, as ``reduction`` runs it
    on a GPU: up to 1024 groups of 256 items, then one group over the partials."""
    host = dx.device
    first, second = total.program(host).kernel("sum_groups"), total.program(host).kernel("sum_combine_groups")
    groups = min(1024, -(-n // GPU_GROUP))
    partials, out = offloadrt.empty(groups, np.float32, host), offloadrt.empty((), np.float32, host)
    queue = host.queue()

    def tree() -> float:
        queue.launch(first, groups, GPU_GROUP, dx, n, partials)
        queue.launch(second, 1, GPU_GROUP, partials, groups, out)
        queue.sync()
        return float(out.numpy())

    tree()
    best = alternate(3, {"tree": timed(tree)})["tree"]
    queue.close()
    return row(NAME, f"the same sum in the GPU form on the host ({groups} groups of {GPU_GROUP}, barriers as "
                     f"fibers)", best * 1e3, "ms", serial * 1e3, "the serial-chunk form reduction uses on the host")


def collect(quick: bool = False) -> dict[str, Any]:
    """The elementwise and reduction figures: ``rows`` in the shared format, ``notes`` on what could not run."""
    notes: list[str] = []
    try:
        rows = saxpy_rows(quick, notes) + sum_rows(quick, notes)
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
    print(f"offloadrt {offloadrt.__version__}: elementwise and reduction kernels on the host")
    print_rows(results["rows"])
    for note in results["notes"]:
        print(f"note: {note}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
