"""Running gpu_check's steps: each command in a process group of its own, stopped at its time limit,
and every step within what is left of the run's budget.

A step past its limit gets SIGINT (pytest then stops and still writes its JUnit report), then
SIGKILL :data:`INTERRUPT_GRACE` seconds later; a step that the budget leaves too little time for is
a SKIP saying so. :class:`Check` holds the run's results and each step's output.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .results import (
    Result,
    count_outcomes,
    describe_counts,
    parse_junit,
    parse_short_summary,
    read_recorded,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
#: step -> (its own time limit, the least time worth starting it with), seconds
LIMITS = {"info": (30.0, 5.0), "example": (40.0, 10.0), "interop": (60.0, 15.0), "percall": (90.0, 20.0),
          "gpu-tests": (120.0, 30.0), "conformance": (90.0, 30.0)}
INTERRUPT_GRACE = 6.0  # seconds a stopped step gets to finish after SIGINT (pytest writes its report then)
RESERVE = 4.0  # seconds kept at the end of the budget for writing the results
PYTEST_TEST_TIMEOUT = 60  # per test, with pytest-timeout, so that one hung test does not end the step
OUTPUT_TAIL = 20_000  # characters of each step's output kept in the results


@dataclass
class Ran:
    """How a command ended: its status (None when killed), seconds, whether it ran past its limit,
    and its output (stdout and stderr together)."""

    returncode: int | None
    seconds: float
    timed_out: bool
    output: str


def run_command(command: Sequence[str], limit: float, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> Ran:
    """Run ``command`` for at most ``limit`` seconds. Past it, its process group gets SIGINT (pytest
    then stops and writes its report), and SIGKILL :data:`INTERRUPT_GRACE` seconds later."""
    start = time.monotonic()
    process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace", env=env, cwd=cwd, start_new_session=True)
    timed_out = False
    try:
        output, _ = process.communicate(timeout=max(limit, 0.1))
    except subprocess.TimeoutExpired:
        timed_out = True
        _signal_group(process, signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=INTERRUPT_GRACE)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            output, _ = process.communicate()
    return Ran(process.returncode, time.monotonic() - start, timed_out, output or "")


def _signal_group(process: subprocess.Popen[str], sig: int) -> None:
    """Signal the process group this check started for ``process`` (its id is the child's pid)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def tail(text: str, lines: int = 3) -> str:
    """The last non-empty ``lines`` of ``text``, joined by ' | '."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


class Check:
    """One run of the check: its results, what each step printed, the time budget."""

    def __init__(self, budget: float, env: dict[str, str], script: Path = SCRIPT, root: Path = ROOT) -> None:
        self.script = script  # the check's script, which runs the child steps (--child)
        self.root = root  # every step runs in the repository's root
        self.start = time.monotonic()
        self.deadline = self.start + budget
        self.budget = budget
        self.env = env
        self.results: list[Result] = []
        self.steps: dict[str, dict[str, Any]] = {}

    def add(self, status: str, name: str, detail: str = "", **figures: Any) -> Result:
        return self.take(Result(status, name, detail, figures))

    def take(self, result: Result) -> Result:
        self.results.append(result)
        print(result.line(), flush=True)
        return result

    def limit(self, step: str, name: str) -> float | None:
        """The seconds ``name`` may run (a ``step`` of :data:`LIMITS`), or None after a SKIP saying
        that the budget has too little left."""
        own, least = LIMITS[step]
        left = self.deadline - time.monotonic() - RESERVE - INTERRUPT_GRACE
        if left < least:
            self.add("SKIP", name, f"not run: {max(left, 0):.0f} s left of the {self.budget:.0f} s budget "
                                   f"(it needs at least {least:.0f} s)")
            return None
        return min(own, left)

    def record_step(self, name: str, command: Sequence[str], ran: Ran, limit: float) -> None:
        self.steps[name] = {"command": list(command), "returncode": ran.returncode, "seconds": round(ran.seconds, 2),
                            "limit": round(limit, 1), "timed_out": ran.timed_out, "output": ran.output[-OUTPUT_TAIL:]}
        print(f"[gpu_check] {name}: {ran.seconds:.1f} s" + (" (stopped at its limit)" if ran.timed_out else ""),
              file=sys.stderr, flush=True)

    def run_child(self, step: str, name: str, child_args: Sequence[str]) -> None:
        """Run a child step of this script (``--child``); its results come back through a file."""
        limit = self.limit(step, name)
        if limit is None:
            return
        with tempfile.TemporaryDirectory(prefix="gpu_check-") as folder:
            results_file = Path(folder) / "results.jsonl"
            command = [sys.executable, str(self.script), "--child", *child_args,
                       "--results", str(results_file)]
            ran = run_command(command, limit, self.env, self.root)
            found = read_recorded(results_file)
        self.record_step(name, command, ran, limit)
        for result in found:
            self.take(result)
        if ran.timed_out:
            self.add("FAIL", name, f"ran past its {limit:.0f} s limit and was stopped (results before that are "
                                   f"above): {tail(ran.output)}")
        elif ran.returncode != 0:
            self.add("FAIL", name, f"exited with status {ran.returncode}: {tail(ran.output)}")
        elif not found:
            self.add("FAIL", name, f"reported nothing: {tail(ran.output)}")

    def run_pytest(self, name: str, pytest_args: Sequence[str]) -> None:
        """Run pytest with ``pytest_args``: one FAIL line per failed test, and one summary line."""
        limit = self.limit(name, name)
        if limit is None:
            return
        with tempfile.TemporaryDirectory(prefix="gpu_check-") as folder:
            report = Path(folder) / "junit.xml"
            command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                       f"--junitxml={report}", *pytest_args]
            if importlib.util.find_spec("pytest_timeout") is not None:
                command.append(f"--timeout={PYTEST_TEST_TIMEOUT}")
            ran = run_command(command, limit, self.env, self.root)
            junit = report.read_text(errors="replace") if report.exists() else ""
        self.record_step(name, command, ran, limit)
        outcomes, source = [], "no report"
        if junit.strip():
            try:
                outcomes, source = parse_junit(junit), "JUnit report"
            except ValueError:
                outcomes = []
        if not outcomes:
            outcomes, source = parse_short_summary(ran.output), "pytest's short summary"
        for outcome in outcomes:
            if outcome.outcome in ("failed", "error"):
                self.add("FAIL", f"{name}::{outcome.test_id}", outcome.message or outcome.outcome)
        counts = count_outcomes(outcomes)
        summary = f"{describe_counts(counts)} in {ran.seconds:.0f} s"
        figures = {"counts": counts, "returncode": ran.returncode, "seconds": round(ran.seconds, 1), "source": source}
        if ran.timed_out:
            self.add("FAIL", name, f"stopped at its {limit:.0f} s limit: {summary} by then", **figures)
        elif ran.returncode == 0:
            self.add("PASS", name, summary, **figures)
        elif ran.returncode == 5:
            self.add("FAIL", name, f"no tests were collected: {tail(ran.output)}", **figures)
        elif ran.returncode == 1 and (counts["failed"] or counts["error"]):
            self.add("FAIL", name, summary, **figures)
        else:
            self.add("FAIL", name, f"pytest exited with status {ran.returncode} ({summary}): {tail(ran.output)}",
                     **figures)
