"""What every benchmark script shares: best-of timing, the shared row format and the results table.

A benchmark module that ``run_all.py`` runs exposes ``collect(quick: bool) -> dict`` whose
``"rows"`` are made by :func:`row`: one measured figure each, with the floor it is compared with in
the same run. ``ratio`` is always ``value / floor`` in the row's unit, so for a time (us, ms) lower
is better and for a bandwidth (GB/s) higher is better; ``goal`` says which way it should go.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROW_KEYS = ("benchmark", "what", "value", "unit", "floor", "floor_what", "ratio", "goal")


def best_of(repeats: int, fn: Callable[[], float]) -> float:
    """The smallest of ``repeats`` timings returned by ``fn``."""
    return min(fn() for _ in range(repeats))


def alternate(repeats: int, sides: Mapping[str, Callable[[], float]]) -> dict[str, float]:
    """Best seconds of each side (each a callable returning its seconds), rounds interleaved so that
    every side sees the same load on the machine."""
    best = {name: math.inf for name in sides}
    for _ in range(repeats):
        for name, run in sides.items():
            best[name] = min(best[name], run())
    return best


def row(benchmark: str, what: str, value: float, unit: str, floor: float | None = None,
        floor_what: str | None = None, goal: str | None = None) -> dict[str, Any]:
    """One figure in the shared row format; ``ratio`` is ``value / floor`` (None without a floor)."""
    ratio = value / floor if floor else None
    return {"benchmark": benchmark, "what": what, "value": float(value), "unit": unit,
            "floor": None if floor is None else float(floor), "floor_what": floor_what if floor is not None else None,
            "ratio": ratio, "goal": goal}


def format_number(value: float | None) -> str:
    """A figure with 3 significant digits (more before the point), or '-' for None."""
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return str(value)
    magnitude = math.floor(math.log10(abs(value)))
    return f"{value:.{max(0, 2 - magnitude)}f}"


def print_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    """Print rows of the shared format as a table."""
    table = []
    for entry in rows:
        floor = "-" if entry.get("floor") is None else f"{format_number(entry['floor'])} ({entry['floor_what']})"
        ratio = "-" if entry.get("ratio") is None else f"{entry['ratio']:.2f}x"
        table.append((entry["what"], f"{format_number(entry['value'])} {entry['unit']}", floor, ratio,
                      entry.get("goal") or "-"))
    print_table(("what", "value", "floor (same run)", "ratio", "goal"), table)


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(line[i])) for line in [header, *rows]) for i in range(len(header))]
    for line in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)))


def write_json(path: Path | None, results: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(results, indent=2))


def build_host_kernels(source: str, workdir: Path, name: str, optimise: Sequence[str] = ("-O2",)) -> Path:
    """Build C ``source`` into ``workdir/name.so``, a host program, with the system ``cc`` as the tests
    do (``cc -shared -fPIC -O2 -I <offloadrt include>``; ``optimise`` replaces ``-O2``)."""
    import offloadrt

    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) on PATH: the host benchmarks build their kernels with it")
    (workdir / f"{name}.c").write_text(source)
    target = workdir / f"{name}.so"
    subprocess.run([compiler, "-shared", "-fPIC", *optimise, "-I", offloadrt.get_include(),
                    str(workdir / f"{name}.c"), "-o", str(target)], check=True)
    return target


def timed(fn: Callable[[], Any]) -> Callable[[], float]:
    """``fn`` as a function that returns how many seconds one call of it took."""
    def run() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    return run


def pocl_cpus(cl: Any, platforms: Sequence[Any]) -> list[Any]:
    """The CPU devices of PoCL among OpenCL ``platforms`` (``cl`` is the pyopencl module)."""
    return [device for platform in platforms
            if "Portable Computing Language" in platform.name or "PoCL" in platform.version
            for device in platform.get_devices() if device.type & cl.device_type.CPU]
