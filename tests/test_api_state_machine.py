"""A model-based random test of the whole ``ol*`` API on the host device.

A hypothesis ``RuleBasedStateMachine`` calls every entry point of ``offloadrt.api.__all__`` (each
``olXWithCodeLoc`` twin too: every third call goes through it) with valid and invalid arguments:
None handles, wrong types, destroyed handles and handles of a runtime that was shut down, bad
enums, sizes 0/huge/past the end of an allocation, interior, unknown and freed pointers, and
values no entry point can take. It frees memory under queued work, destroys busy queues and
programs with queued launches, makes kernels fault and host functions raise (or call the API),
holds queues with gates, nests olInit/olShutDown and restarts the runtime.

A model of the data (state_machine_model.py) says what every buffer must hold, in queue order,
with vector clocks for what is ordered (the same queue, olWaitEvents, completion the test saw)
and "unknown" for what races. The invariants: nothing crashes or hangs; every error is an
``OffloadError`` with the code docs/api.md gives; the bytes read back match the model; queues and
events fail exactly where the model says and name the queue that failed first; after the last
``olShutDown`` no thread is left over and every entry point is UNINITIALIZED.

The machine runs in a child process (``python tests/test_api_state_machine.py --image ...``), so
that a crash or a hang fails the test with the seed and the calls that led to it instead of
ending the run; a watchdog in the child reports any call that does not return within 30 s. The
CI budget is fixed and derandomized (about 20 s on 2 cores); these environment variables raise it:
``OFFLOADRT_STATE_MACHINE_EXAMPLES``, ``OFFLOADRT_STATE_MACHINE_STEPS`` (steps per example; the
choice budget of one hypothesis example stops most before 300), ``OFFLOADRT_STATE_MACHINE_SEEDS``
(comma-separated seeds, one child each), ``OFFLOADRT_STATE_MACHINE_SHRINK=1`` (shrink a failure;
slow) and ``OFFLOADRT_STATE_MACHINE_TIMEOUT`` (seconds per child). ``pytest -rP`` shows the summary:
steps, calls per entry point, errors per code, bytes compared. Runtime bugs that are reported but
not fixed yet are listed in ``KNOWN_BUGS`` (state_machine_support.py): the run counts them and
shows a ``KnownBugWarning`` instead of failing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import invariant, run_state_machine_as_test
from state_machine_rules_arguments import ArgumentRules
from state_machine_rules_memory import MemoryRules
from state_machine_rules_programs import ProgramRules
from state_machine_rules_queues import QueueRules
from state_machine_rules_runtime import RuntimeRules
from state_machine_rules_scenarios import ScenarioRules
from state_machine_support import HANG_EXIT, KNOWN_BUGS, Violation, Watchdog
from state_machine_world import ENTRY_POINTS, World

CI_EXAMPLES = 60
CI_STEPS = 100
CI_TIMEOUT = 150.0  # seconds for the child; the budget takes about 20 s on 2 cores
THREAD_SLACK = 160  # backend queues (live, pooled, parked) and group-pool threads a run may hold
SUMMARY = "STATE_MACHINE_SUMMARY "
FAILURE = "STATE_MACHINE_FAILURE "
TRACE_SHOWN = 300  # lines of the failing example's trace a failure shows


class ApiMachine(RuntimeRules, ArgumentRules, ScenarioRules):
    """Every rule of the state_machine_rules_* mixins over one World (ScenarioRules brings the
    memory, queue and program rules)."""

    # hypothesis picks among the enabled rules evenly: the rules that move data and order queues
    # are listed again under a second name to run more often
    mem_copy_again = MemoryRules.mem_copy
    mem_fill_again = MemoryRules.mem_fill
    launch_kernel_again = ProgramRules.launch_kernel
    launch_kernel_once_more = ProgramRules.launch_kernel
    host_function_again = QueueRules.host_function
    wait_events_again = QueueRules.wait_events
    create_event_again = QueueRules.create_event
    weird_argument_again = ArgumentRules.weird_argument

    @invariant()
    def threads_are_bounded(self) -> None:
        alive = threading.active_count()
        if alive > len(self.baseline) + THREAD_SLACK + (os.cpu_count() or 1):
            names = sorted({re.sub(r"\d+", "N", t.name) for t in threading.enumerate()})
            raise Violation("thread-leak", f"{alive} threads are alive (kinds: {names})")


# ---- the child process ---------------------------------------------------------------------------

def failure_category(exc: BaseException) -> str:
    found: list[str] = []

    def walk(error: BaseException) -> None:
        if isinstance(error, Violation):
            found.append(error.category)
        elif isinstance(error, AssertionError):
            found.append("wrong-outcome")
        for inner in getattr(error, "exceptions", ()):
            walk(inner)
        if error.__cause__ is not None and not found:
            walk(error.__cause__)

    walk(exc)
    return found[0] if found else type(exc).__name__


def count_warnings() -> None:
    def show(message: Warning | str, category: type[Warning], *_args: Any, **_kwargs: Any) -> None:
        text = re.sub(r"0x[0-9a-f]+|\d+", "N", str(message))[:90]
        World.stats.warnings[f"{category.__name__}: {text}"] += 1
        World.trace.append(f"   # warning {category.__name__}: {message}")

    warnings.showwarning = show  # type: ignore[assignment]
    warnings.simplefilter("always")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="tests/kernels/basic.c built as a shared object")
    parser.add_argument("--examples", type=int, default=CI_EXAMPLES)
    parser.add_argument("--steps", type=int, default=CI_STEPS)
    parser.add_argument("--seed", type=int, default=None, help="default: derandomized (the same run every time)")
    parser.add_argument("--shrink", action="store_true")
    parser.add_argument("--call-timeout", type=float, default=30.0, help="a call taking longer is a hang")
    args = parser.parse_args(argv)
    World.IMAGE = Path(args.image).read_bytes()
    count_warnings()
    machine: Any = type("ApiMachine", (ApiMachine,), {})
    if args.seed is not None:
        machine = seed(args.seed)(machine)
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if args.shrink else [])
    config = settings(max_examples=args.examples, stateful_step_count=args.steps, deadline=None, database=None,
                      derandomize=args.seed is None, suppress_health_check=list(HealthCheck), phases=phases,
                      print_blob=False, report_multiple_bugs=False)
    World.watchdog = Watchdog(args.call_timeout, World.trace)
    started = time.perf_counter()
    status = 0
    try:
        run_state_machine_as_test(machine, settings=config)
    except BaseException as exc:  # noqa: BLE001  # reported below, with the run's last calls
        status = 1
        trace = World.first_failure or list(World.trace)
        print(f"{FAILURE}{failure_category(exc)}: {trace[-1] if World.first_failure else exc}", flush=True)
        traceback.print_exc(file=sys.stdout)
        print(f"---- the last calls before the first violation (of {len(trace)} in its example) ----")
        print("\n".join(trace[-TRACE_SHOWN:]))
    summary = World.stats.summary()
    summary.update(seconds=round(time.perf_counter() - started, 2), seed=args.seed, max_examples=args.examples,
                   max_steps=args.steps, status=status)
    print(SUMMARY + json.dumps(summary), flush=True)
    return status


# ---- the pytest side -----------------------------------------------------------------------------

def budget() -> tuple[int, int, list[int | None]]:
    examples = int(os.environ.get("OFFLOADRT_STATE_MACHINE_EXAMPLES", CI_EXAMPLES))
    steps = int(os.environ.get("OFFLOADRT_STATE_MACHINE_STEPS", CI_STEPS))
    seeds_text = os.environ.get("OFFLOADRT_STATE_MACHINE_SEEDS", "")
    seeds: list[int | None] = [int(s) for s in seeds_text.split(",") if s.strip()] or [None]
    return examples, steps, seeds


def run_child(image: Path, examples: int, steps: int, seed_value: int | None, timeout: float) -> dict[str, Any]:
    """Run the machine in a child process; fail with its output on a crash, a hang or a violation."""
    command = [sys.executable, "-X", "faulthandler", str(Path(__file__)), "--image", str(image),
               "--examples", str(examples), "--steps", str(steps)]
    if seed_value is not None:
        command += ["--seed", str(seed_value)]
    if os.environ.get("OFFLOADRT_STATE_MACHINE_SHRINK"):
        command.append("--shrink")
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_TRACE", "OFFLOAD_DISABLE_VALIDATION")}
    what = f"the state machine ({examples} examples x {steps} steps, seed {seed_value or 'derandomized'})"
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"[hang] {what} did not finish within {timeout:.0f} s\nstdout:\n{out[-20000:]}\n"
                    f"stderr:\n{err[-20000:]}")
    summary_lines = [line for line in result.stdout.splitlines() if line.startswith(SUMMARY)]
    if result.returncode != 0:
        out = "\n".join(line for line in result.stdout.splitlines() if not line.startswith(SUMMARY))
        if result.returncode < 0:
            kind = f"[crash] {what} was killed by signal {-result.returncode}"
        elif result.returncode == HANG_EXIT:
            kind = f"[hang] {what}: a call never returned (the watchdog's report is in stderr)"
        elif FAILURE in out:
            report = out[out.index(FAILURE):]
            kind = f"{what} failed: {report.splitlines()[0][len(FAILURE):]}"
            out = report + "\n---- hypothesis' report of the steps ----\n" + out[:out.index(FAILURE)][-20000:]
        else:
            kind = f"{what} failed"
        pytest.fail(f"{kind}\n\nstdout:\n{out[-60000:]}\n\nstderr:\n{result.stderr[-30000:]}")
    assert summary_lines, f"{what} printed no summary\n{result.stdout[-5000:]}\n{result.stderr[-5000:]}"
    return json.loads(summary_lines[-1][len(SUMMARY):])


def describe(summary: dict[str, Any]) -> str:
    lines = [f"{summary['examples']} examples, {summary['steps']} steps in {summary['seconds']} s "
             f"(seed {summary['seed'] or 'derandomized'})",
             "known runtime bugs met: " + (", ".join(f"{k} x{v}" for k, v in summary["known_bugs"].items())
                                            or "none"),
             "calls: " + ", ".join(f"{k} {v}" for k, v in summary["calls"].items()),
             "errors: " + ", ".join(f"{k} {v}" for k, v in summary["errors"].items()),
             "checks: " + ", ".join(f"{k} {v}" for k, v in summary["checks"].items()),
             "warnings: " + (", ".join(f"{k} x{v}" for k, v in summary["warnings"].items()) or "none")]
    return "\n".join(lines)


def test_the_whole_api_against_a_model_of_its_data(build, tmp_path: Path, record_property) -> None:
    image = tmp_path / "basic.so"
    image.write_bytes(build("basic"))
    examples, steps, seeds = budget()
    long_run = (examples, steps, seeds) != (CI_EXAMPLES, CI_STEPS, [None])
    timeout = float(os.environ.get("OFFLOADRT_STATE_MACHINE_TIMEOUT", 0)) or \
        (CI_TIMEOUT if not long_run else 120.0 + examples * steps * 0.05)
    for seed_value in seeds:
        summary = run_child(image, examples, steps, seed_value, timeout)
        print(describe(summary))
        record_property(f"state_machine_summary_seed_{seed_value}", json.dumps(summary))
        missing = [name for name in ENTRY_POINTS if not summary["calls"].get(name)]
        assert not missing, f"entry points the run never called: {missing}"
        assert summary["checks"].get("bytes compared", 0) > 0, "the run compared no bytes with the model"
        for bug, count in summary["known_bugs"].items():
            warnings.warn(f"the state machine met a known offloadrt bug {count} time(s) and did not fail for it "
                          f"(KNOWN_BUGS in tests/state_machine_support.py): {KNOWN_BUGS.get(bug, bug)}",
                          KnownBugWarning, stacklevel=1)


class KnownBugWarning(UserWarning):
    """A runtime bug the state machine counts instead of failing on, until it is fixed."""


if __name__ == "__main__":
    sys.exit(main())
