"""Smoke runs of benchmarks/run_all.py: it completes and writes results.json, summary.md and the plots.

Not timed tests: no figure is checked, only that the run works and reports what it could not run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
RUN_ALL = BENCHMARKS / "run_all.py"
ROW_KEYS = {"benchmark", "what", "value", "unit", "floor", "floor_what", "ratio", "goal"}
PNG = b"\x89PNG\r\n\x1a\n"

pytest.importorskip("matplotlib", reason="the plots need matplotlib (the test and bench extras)")


def run_all(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RUN_ALL), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_quick_run_of_every_benchmark_completes(tmp_path: Path) -> None:
    done = run_all("--quick", "--out", str(tmp_path))  # about 15 s on 2 idle cores
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["quick"] is True
    assert {"cpu", "cores", "python", "numpy", "offloadrt", "date"} <= set(results["machine"])
    # every bench_*.py ran, or is listed with the reason: none dropped silently
    assert set(results["modules"]) | set(results["errors"]) == {path.stem for path in BENCHMARKS.glob("bench_*.py")}
    assert results["failed"] == []
    assert {"bench_peer", "bench_host"} <= set(results["modules"])
    assert results["modules"]["bench_peer"]["rows"] and results["modules"]["bench_host"]["rows"]
    for name, result in results["modules"].items():
        assert result["rows"] or result.get("notes"), f"{name}: no rows and no notes saying why"
        for entry in result["rows"]:
            assert set(entry) >= ROW_KEYS, (name, entry)
            assert isinstance(entry["value"], float), (name, entry)
    peer = results["modules"]["bench_peer"]
    if not peer["peer"]["available"]:
        assert peer["peer"]["reason"]  # absent peer columns say why
        assert not any("PoCL" in entry["what"] for entry in peer["rows"])
    assert results["scaling_source"] == "bench_host"
    assert set(results["scaling_growth"]) == {"launch against live queues", "event against live queues",
                                              "launch against submitting threads", "event against submitting threads"}
    for plot in ("launch_scaling.png", "copy_bandwidth.png", "peer.png"):
        assert (tmp_path / plot).read_bytes()[:8] == PNG, plot
        assert plot in results["plots"]
    summary = (tmp_path / "summary.md").read_text()
    assert "| benchmark | what | value | floor | ratio | goal |" in summary
    assert "## offloadrt against PyOpenCL on PoCL" in summary
    assert "How the scaling figures grow" in summary


def test_failing_and_incomplete_modules_are_reported(tmp_path: Path) -> None:
    folder = tmp_path / "benches"
    folder.mkdir()
    (folder / "bench_good.py").write_text(textwrap.dedent("""
        def collect(quick):
            return {"rows": [{"benchmark": "good", "what": "a figure", "value": 1.5, "unit": "us", "floor": 0.5,
                              "floor_what": "its floor", "ratio": 3.0, "goal": "<= 5x"}]}
    """))
    (folder / "bench_raises.py").write_text("def collect(quick):\n    raise ValueError('no luck here')\n")
    (folder / "bench_no_collect.py").write_text("def main():\n    return 0\n")
    (folder / "bench_crashes.py").write_text("import os\n\ndef collect(quick):\n    os._exit(3)\n")
    out = tmp_path / "out"
    done = run_all("--quick", "--out", str(out), "--dir", str(folder), "--only", "good,raises",
                   "--only", "no_collect", "--only", "bench_crashes", "--only", "missing", timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr  # a module failed
    results = json.loads((out / "results.json").read_text())
    assert list(results["modules"]) == ["bench_good"]
    errors = results["errors"]
    assert "ValueError: no luck here" in errors["bench_raises"]
    assert "no collect(quick)" in errors["bench_no_collect"]
    assert "status 3" in errors["bench_crashes"]
    assert "no such benchmark" in errors["bench_missing"]
    assert sorted(results["failed"]) == ["bench_crashes", "bench_missing", "bench_raises"]  # not bench_no_collect
    assert set(results["plots_skipped"]) == {"launch_scaling.png", "copy_bandwidth.png", "peer.png"}
    summary = (out / "summary.md").read_text()
    assert "| good | a figure | 1.50 us | 0.500 (its floor) | 3.00x | <= 5x |" in summary
    assert "## Errors" in summary and "bench_raises" in summary and "bench_no_collect" in summary


def test_without_the_peer_its_figures_are_absent_with_the_reason(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "pyopencl"  # a pyopencl that cannot be imported hides the installed one
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden by the smoke test')\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(RUN_ALL), "--quick", "--out", str(out), "--only", "peer"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(shadow.parent)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    peer = json.loads((out / "results.json").read_text())["modules"]["bench_peer"]
    assert peer["peer"]["available"] is False
    assert "hidden by the smoke test" in peer["peer"]["reason"]
    assert not any("PoCL" in entry["what"] or "PoCL" in (entry["floor_what"] or "") for entry in peer["rows"])
    assert "peer enqueue_copy" not in peer["copy_sweep"]["GBps"]
    assert "Peer absent: PyOpenCL is not installed" in (out / "summary.md").read_text()
    assert (out / "copy_bandwidth.png").read_bytes()[:8] == PNG


def test_the_elementwise_benchmark_reports_its_rows_or_why_not(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_all("--quick", "--out", str(out), "--only", "elementwise", timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())["modules"]["bench_elementwise"]
    notes = " ".join(result["notes"])
    if not result["rows"]:
        assert "clang" in notes  # no portable compiler: said so
        return
    floors = [entry["floor_what"] for entry in result["rows"]]
    assert any("NumPy" in floor for floor in floors) and "numpy.sum" in floors
    assert any("PoCL" in floor for floor in floors) or "PyOpenCL on PoCL rows not measured" in notes
    assert "differs" not in notes  # the results were checked against NumPy


def test_the_barrier_benchmark_reports_its_rows_or_why_not(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_all("--quick", "--out", str(out), "--only", "barriers", timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())["modules"]["bench_barriers"]
    notes = " ".join(result["notes"])
    if not result["rows"]:
        assert "clang" in notes  # no portable compiler: said so
        return
    whats = " ".join(entry["what"] for entry in result["rows"])
    assert "tiled transpose" in whats and "without a barrier" in whats and "tree reduction" in whats
    floors = [entry["floor_what"] or "" for entry in result["rows"]]
    assert any("PoCL" in floor for floor in floors) or "PyOpenCL on PoCL rows not measured" in notes
    assert "differs" not in notes  # every result was checked against NumPy
