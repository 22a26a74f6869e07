"""The null GPU drivers of benchmarks/bench_gpu_overhead.py load through the real bindings.

Each vendor's do-nothing driver library is built with ``cc`` and loaded, in a child process,
through the real ``cuda.bindings`` or hip-python; the CUDA or AMDGPU plugin then makes a launch,
a copy each way and a host function over it. No timing is asserted here (benchmarks are never
timed tests).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
BINDINGS = {"cuda": "cuda.bindings.driver", "hip": "hip"}


def _load_benchmark():
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_gpu_overhead", BENCHMARKS / "bench_gpu_overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("vendor", ["cuda", "hip"])
def test_plugin_runs_over_the_null_driver(vendor: str) -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler (cc or gcc) to build the null driver libraries")
    if importlib.util.find_spec(BINDINGS[vendor].split(".")[0]) is None:
        pytest.skip(f"{BINDINGS[vendor]} is not installed")
    bench = _load_benchmark()
    outcome = bench.run_vendor(vendor, quick=True, timeout=60, smoke=True)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["device"].startswith("Null")  # the plugin's device is the null driver's
    assert outcome["ran"] == ["host function"]  # the host function ran, at the sync
    assert outcome["fast_after_restart"]  # after olShutDown + olInit, launches take the fast path again
    folder = bench.nulldriver.build(vendor)  # cached: the same folder the child was pointed at
    assert Path(outcome["library"]) == bench.nulldriver.library_path(vendor, folder)
