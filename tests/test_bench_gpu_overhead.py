"""The null GPU drivers of benchmarks/bench_gpu_overhead.py load through the real bindings.

Each vendor's do-nothing driver library is built with ``cc`` and loaded, in a child process,
through the real ``cuda.bindings`` or hip-python; the CUDA or AMDGPU plugin then makes a launch,
a copy each way and a host function over it, and every side of every measured operation is run a
few times with the null library's counters read around it. No timing is asserted here (benchmarks
are never timed tests), and neither is what offloadrt's own sides count: only that the counters
report what the raw driver calls did.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
BINDINGS = {"cuda": "cuda.bindings.driver", "hip": "hip"}
NOTHING = {"host_functions": 0, "events_timed": 0, "events_untimed": 0, "records_timed": 0, "records_untimed": 0,
           "launches": 0, "copies": 0}


def _load_benchmark() -> Any:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_gpu_overhead", BENCHMARKS / "bench_gpu_overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=["cuda", "hip"])
def smoke(request: pytest.FixtureRequest) -> tuple[str, Any, dict[str, Any]]:
    """One smoke run of a vendor's worker over its null driver: (vendor, the benchmark module, what it said)."""
    vendor = request.param
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler (cc or gcc) to build the null driver libraries")
    if importlib.util.find_spec(BINDINGS[vendor].split(".")[0]) is None:
        pytest.skip(f"{BINDINGS[vendor]} is not installed")
    bench = _load_benchmark()
    outcome = bench.run_vendor(vendor, quick=True, timeout=60, smoke=True)
    assert "error" not in outcome, outcome.get("error")
    return vendor, bench, outcome


def test_plugin_runs_over_the_null_driver(smoke: tuple[str, Any, dict[str, Any]]) -> None:
    vendor, bench, outcome = smoke
    assert outcome["device"].startswith("Null")  # the plugin's device is the null driver's
    assert outcome["ran"] == ["host function"]  # the host function ran, at the sync
    assert outcome["fast_after_restart"]  # after olShutDown + olInit, launches take the fast path again
    folder = bench.nulldriver.build(vendor)  # cached: the same folder the child was pointed at
    assert Path(outcome["library"]) == bench.nulldriver.library_path(vendor, folder)
    assert outcome["errors"] == {}  # every side of every operation ran


def test_counters_report_the_raw_driver_calls(smoke: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, outcome = smoke
    counts = outcome["counts"]
    assert counts["host"]["raw"] == {**NOTHING, "host_functions": 1}  # one host function per op
    assert counts["event"]["raw"] == {**NOTHING, "events_untimed": 1, "records_untimed": 1}  # untimed: 0 timed
    assert counts["launch"]["raw"] == {**NOTHING, "launches": 1}
    assert counts["h2d"]["raw"] == {**NOTHING, "copies": 1}
    assert counts["sync"]["raw"] == NOTHING
    assert counts["launch"]["ours"]["launches"] == 1  # offloadrt's launch reaches the driver once
    assert {"copy_from", "record"} <= set(counts)  # the Python layer's operations were measured


def test_cuda_core_runs_over_the_null_libcuda(smoke: tuple[str, Any, dict[str, Any]]) -> None:
    vendor, _, outcome = smoke
    if vendor != "cuda":
        pytest.skip("cuda.core is CUDA's")
    if importlib.util.find_spec("cuda.core") is None:
        pytest.skip("cuda.core is not installed (the bench extra)")
    counts = outcome["counts"]
    assert counts["launch"]["cuda.core"] == {**NOTHING, "launches": 1}  # cuLaunchKernelEx, counted
    assert counts["event"]["cuda.core"] == {**NOTHING, "events_untimed": 1, "records_untimed": 1}
    assert not [note for note in outcome["notes"] if "cuda.core" in note]


def test_null_libcuda_gives_the_kernel_32_bytes_of_parameters(smoke: tuple[str, Any, dict[str, Any]]) -> None:
    vendor, _, outcome = smoke
    if vendor != "cuda":
        pytest.skip("cuFuncGetParamInfo is CUDA's")
    # (status, offset, size) of parameters 0..4: four u64, then CUDA_ERROR_INVALID_VALUE past the last
    assert outcome["param_info"][:4] == [[0, 0, 8], [0, 8, 8], [0, 16, 8], [0, 24, 8]]
    assert outcome["param_info"][4][0] == 1
    assert outcome["oversized_launch"] == 701  # a 40-byte buffer: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, as on an H100


def test_work_not_asked_for_is_flagged() -> None:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    from _overhead_sides import unasked_work

    assert unasked_work("h2d", {**NOTHING, "host_functions": 1.0, "copies": 1.0}) == ["1.00 host functions"]
    assert unasked_work("host", {**NOTHING, "host_functions": 1.0}) == []  # a host function was asked for
    assert unasked_work("event", {**NOTHING, "records_timed": 1.0}) == ["0.00 timed events created, 1.00 recorded"]
    assert unasked_work("event", {**NOTHING, "events_untimed": 1.0, "records_untimed": 1.0}) == []
