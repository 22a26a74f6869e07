"""benchmarks/gpu_check.py without a GPU: it says so and passes at once; and its helpers, which read
pytest's reports, pick prebuilt images, find the pyelftools wheel and stop steps that run too long.

The GPU steps themselves need a GPU (or the null driver, by hand); here every GPU is hidden from
the check's children, so the test behaves the same on a GPU machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
NO_GPU = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def gpu_check() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up while it is made
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_it_says_so_and_passes(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, **NO_GPU})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"\d+ passed, 0 failed", lines[-1])
    assert all(re.match(r"(PASS|SKIP) \S+", line) for line in lines[:-1]), lines  # one result a line, no FAIL
    assert any(line.startswith("SKIP info no GPU platform") for line in lines)
    assert {line.split()[1] for line in lines if line.endswith(" no GPU")} == {
        "examples", "elementwise", "interop", "percall", "gpu-tests", "conformance"}
    (text,) = tmp_path.glob("gpu_check-*-no-gpu.txt")
    assert text.read_text().startswith("\n".join(lines))  # what it printed, then the steps' output
    (figures,) = tmp_path.glob("gpu_check-*-no-gpu.json")
    data = json.loads(figures.read_text())
    assert data["failed"] == 0 and data["device"] is None
    recorded = [f"{result['status']} {result['name']}" for result in data["results"]]
    assert recorded == [" ".join(line.split()[:2]) for line in lines[:-1]]


def test_pyelftools_comes_from_the_wheel_when_it_does_not_import(gpu_check: Any, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    elftools = importlib.util.find_spec("elftools")
    if elftools is None or elftools.origin is None:
        pytest.skip("pyelftools is not installed here, so no wheel can be made of it")
    wheel = tmp_path / "wheels" / "pyelftools-0.0-py3-none-any.whl"  # a zip holding the installed package's top
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(elftools.origin, "elftools/__init__.py")
    monkeypatch.setitem(sys.modules, "elftools", None)  # "pyelftools does not import"
    env, result = gpu_check.child_environment(tmp_path)
    assert (result.status, result.detail) == ("PASS", f"imported from {wheel}")
    found = subprocess.run([sys.executable, "-S", "-c", "import elftools; print(elftools.__file__)"],
                           capture_output=True, text=True, timeout=30, env=env, check=True)
    assert found.stdout.strip().startswith(str(wheel))  # the children import it from the wheel
    wheel.unlink()
    _, result = gpu_check.child_environment(tmp_path)
    assert result.status == "FAIL" and "--prepare" in result.detail


def test_a_step_past_its_limit_is_stopped(gpu_check: Any) -> None:
    from gpucheck import runner

    ran = runner.run_command([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                                limit=0.5)
    assert ran.timed_out and ran.returncode != 0
    assert "started" in ran.output  # what it printed before is kept
    assert ran.seconds < 0.5 + runner.INTERRUPT_GRACE


def test_a_step_gets_what_is_left_of_the_budget(gpu_check: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from gpucheck import runner

    roomy = runner.Check(1000.0, {})
    assert roomy.limit("percall", "percall") == runner.LIMITS["percall"][0]
    tight = runner.Check(5.0, {})
    assert tight.limit("gpu-tests", "gpu-tests") is None
    (result,) = tight.results
    assert result.status == "SKIP" and "of the 5 s budget" in result.detail
    assert capsys.readouterr().out.startswith("SKIP gpu-tests not run:")


def test_pytest_steps_report_each_failed_test(gpu_check: Any, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "test_sample.py").write_text(textwrap.dedent("""
        import pytest

        def test_good():
            pass

        def test_bad():
            assert 1 == 2, "one is not two"

        def test_later():
            pytest.skip("not today")
    """))
    from gpucheck import runner

    check = runner.Check(60.0, {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})  # a quicker start
    check.run_pytest("gpu-tests", [str(tmp_path / "test_sample.py"), "--rootdir", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("FAIL gpu-tests::test_sample::test_bad AssertionError: one is not two")
    assert re.fullmatch(r"FAIL gpu-tests 1 failed, 1 passed, 1 skipped in \d+ s", lines[1])
    assert check.results[-1].figures["counts"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 1}


def test_junit_and_short_summary_reports_are_read(gpu_check: Any) -> None:
    from gpucheck import results

    junit = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
      <testcase classname="tests.test_a" name="test_ok" time="0.1"/>
      <testcase classname="tests.test_a" name="test_fails[x y]"><failure message="assert 1 == 2&#10;more">tb</failure>
      </testcase>
      <testcase classname="tests.test_a" name="test_broken"><error message="fixture 'gpu' not found"/></testcase>
      <testcase classname="tests.test_a" name="test_skip"><skipped type="pytest.skip" message="no GPU"/></testcase>
    </testsuite></testsuites>"""
    outcomes = results.parse_junit(junit)
    assert [(o.test_id, o.outcome, o.message) for o in outcomes] == [
        ("tests.test_a::test_ok", "passed", ""), ("tests.test_a::test_fails[x y]", "failed", "assert 1 == 2"),
        ("tests.test_a::test_broken", "error", "fixture 'gpu' not found"),
        ("tests.test_a::test_skip", "skipped", "no GPU")]
    assert results.describe_counts(results.count_outcomes(outcomes)) == "1 failed, 1 errors, 1 passed, 1 skipped"
    with pytest.raises(ValueError):
        results.parse_junit("Traceback (most recent call last):")
    printed = textwrap.dedent("""
        ..F
        =========================== short test summary info ============================
        PASSED tests/test_a.py::test_ok
        FAILED tests/test_a.py::test_fails[1] - AssertionError: assert 1 == 2
        ERROR tests/test_a.py::test_broken - fixture 'gpu' not found
        SKIPPED [1] tests/test_a.py:12: no GPU
        !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!! KeyboardInterrupt !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
        ======================== 1 failed, 1 passed in 61.02s =========================
    """)
    assert [(o.test_id, o.outcome, o.message) for o in results.parse_short_summary(printed)] == [
        ("tests/test_a.py::test_ok", "passed", ""),
        ("tests/test_a.py::test_fails[1]", "failed", "AssertionError: assert 1 == 2"),
        ("tests/test_a.py::test_broken", "error", "fixture 'gpu' not found"),
        ("tests/test_a.py", "skipped", "no GPU")]
    assert results.parse_short_summary("no summary at all") == []


def test_results_are_lines_and_survive_a_killed_child(gpu_check: Any, tmp_path: Path) -> None:
    from gpucheck import results

    assert results.Result("FAIL", "step.a b", "first\n\n  second ").line() == "FAIL step.a_b first | second"
    with pytest.raises(ValueError):
        results.Result("WARN", "x")
    recorder = results.Recorder(tmp_path / "r.jsonl")
    recorder.add("PASS", "percall.launch.raw", "3.90 us/call", us=3.9)
    recorder.close()
    with (tmp_path / "r.jsonl").open("a") as cut_short:
        cut_short.write('{"status": "PASS", "na')  # the child was killed while writing
    (kept,) = results.read_recorded(tmp_path / "r.jsonl")
    assert (kept.status, kept.name, kept.figures) == ("PASS", "percall.launch.raw", {"us": 3.9})


def test_prebuilt_images_are_picked_for_the_device(gpu_check: Any) -> None:
    from gpucheck import assets

    entries = [{"kind": "cuda", "arch": arch} for arch in ("sm_80", "sm_89", "sm_90")] + [
        {"kind": "amdgpu", "arch": "gfx90a"}]
    assert assets.pick_image(entries, "cuda", "sm_90")["arch"] == "sm_90"
    assert assets.pick_image(entries, "cuda", "sm_86")["arch"] == "sm_80"  # PTX runs on later GPUs
    assert assets.pick_image(entries, "cuda", "sm_120")["arch"] == "sm_90"
    assert assets.pick_image(entries, "cuda", "sm_75") is None  # PTX for a later GPU does not run
    assert assets.pick_image(entries, "amdgpu", "gfx90a:sramecc+:xnack-")["arch"] == "gfx90a"
    assert assets.pick_image(entries, "amdgpu", "gfx942") is None  # a code object runs on its processor only


def test_gpus_are_found_in_the_info_report(gpu_check: Any) -> None:
    report = {"Devices": [{"Platform Backend": "CUDA", "Product Name": "NVIDIA H100 80GB HBM3"},
                          {"Platform Backend": "CUDA", "Product Name": "NVIDIA H100 80GB HBM3"},
                          {"Platform Backend": "HOST", "Product Name": "AMD EPYC"}]}
    assert [(g.spec, g.vendor) for g in gpu_check.gpus_of(report)] == [("cuda:0", "cuda"), ("cuda:1", "cuda")]
    assert gpu_check.gpus_of({"Devices": [{"Platform Backend": "HOST"}]}) == []
