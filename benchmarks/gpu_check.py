"""A hardware check of offloadrt that anyone can run on a GPU machine: one command, under 4 minutes.

    python benchmarks/gpu_check.py [--quick] [--budget 230] [--out DIR] [--device cuda:0] [--steps a,b]
    python benchmarks/gpu_check.py --prepare      # beforehand, on a machine with clang 20+ and the network

It prints one line per result, ``PASS <name> <detail>``, ``FAIL <name> <detail>`` or
``SKIP <name> <why>``, and ends with ``N passed, M failed``; the exit status is 1 when anything
failed. Everything it printed, each step's own output and a JSON of every result and figure go to
``benchmarks/results/gpu_check-<UTC date and time>-<device>.{txt,json}`` (or ``--out DIR``).
Without a GPU it says so in SKIP lines and exits 0 at once (writing files only with ``--out``).

Steps, each in a child process of its own with its own time limit (so a hang or a sticky GPU fault
ends that step only), in this order (the quick ones first, so that the long pytest runs cannot
starve them):

1. ``info``: ``python -m offloadrt info --json`` and ``info`` list a GPU platform with a device.
2. ``examples``: ``examples/saxpy.py <device>`` and ``examples/portable_*.py``, each must print its
   ``ok`` line for the GPU. Where this machine's clang is too old for portable kernels (20+), their
   device code comes from the images ``--prepare`` built (``build/gpu_check/``; gpucheck/examples.py).
3. ``elementwise``: ``offloadrt.core._elementwise``'s saxpy and reductions (sum, max, min, dot, an
   int sum) on the GPU for 0 to 1,000,003 elements against NumPy, one line per kernel; their
   generated sources come prebuilt like the portable examples' where clang is too old
   (gpucheck/elementwise.py).
4. ``interop``: CuPy arrays and PyTorch tensors into offloadrt (as they are, DLPack only, CUDA
   Array Interface only) and offloadrt arrays out (``from_dlpack``, CAI), compared by value; a
   cuda.core ``Stream`` made from an offloadrt queue (``__cuda_stream__``). Missing libraries: SKIP.
5. ``percall``: one call's cost side by side in one process, best of ``--rounds`` (5) rounds of
   ``--calls`` (20,000): raw ``cuda.bindings``, ``cuda.core``, CuPy ``RawKernel``, offloadrt's
   ``ol*`` and its Python layer, for a 4-parameter launch, an 8-byte H2D copy from pageable NumPy
   memory and an untimed event's create+record+sync+destroy (gpucheck/percall.py). Goals
   (``queue.launch`` <= 1.15x raw, ``olLaunchKernel`` <= 1.1x, ``Buffer.copy_from`` <= 1.3x, the
   ``ol*`` untimed event <= 1.3x) are reported as met or missed, not as failures.
6. ``gpu-tests``: ``python -m pytest -m cuda`` (``-m amdgpu`` on AMD), one FAIL line per failed test.
7. ``conformance``: ``python -m pytest tests/conformance --platform cuda`` (or ``amdgpu``), likewise.

The whole run keeps to ``--budget`` seconds (230 by default): each step gets at most what is left,
and a step with too little time left is a SKIP saying so. ``--quick`` makes ``percall`` short
(2,000 calls, 3 rounds).

**Preparing a GPU machine.** The GPU machines this was written for have the NVIDIA packages
(cuda-bindings, cuda-core, nvidia-cuda-nvrtc, CuPy, PyTorch), pytest and NumPy preinstalled, but
clang 16, no pyelftools, no network and no ``pip install``. So, beforehand, on a machine with
clang 20+ (``apt-get install clang-22 lld-22``), offloadrt's dependencies and the network, run
``python benchmarks/gpu_check.py --prepare``: it builds the examples' device images (PTX for
sm_80, sm_89, sm_90, and sm_52 for saxpy.c; AMD code objects for gfx90a and gfx942) and downloads
the pyelftools wheel, all into ``build/gpu_check/``. Carry the repository *with* ``build/gpu_check/``
(git ignores ``build/``, so copy it explicitly) and run, from the repository's root, without
installing anything::

    PYTHONPATH=. python benchmarks/gpu_check.py

When pyelftools does not import, the check puts ``build/gpu_check/wheels/pyelftools-*.whl`` on
the children's ``PYTHONPATH`` (a wheel is a zip that Python imports from).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from gpucheck import assets  # noqa: E402
from gpucheck.results import Recorder, Result  # noqa: E402
from gpucheck.runner import Check, run_command, tail  # noqa: E402

DEFAULT_BUDGET = 230.0
STEPS = ("info", "examples", "elementwise", "interop", "percall", "gpu-tests", "conformance")
QUICK_PERCALL = (2_000, 3)
FULL_PERCALL = (20_000, 5)


# ---- the steps --------------------------------------------------------------------------------------

@dataclass
class Gpu:
    """The GPU the check runs on, as ``offloadrt info --json`` lists it."""

    spec: str  # "cuda:0"
    vendor: str  # "cuda" or "amdgpu": the pytest marker and the conformance platform
    name: str  # its product name


def child_environment(assets_folder: Path) -> tuple[dict[str, str], Result]:
    """The children's environment (this checkout first on ``PYTHONPATH``, and the pyelftools wheel
    from ``assets_folder/wheels`` where pyelftools does not import), and a result saying where
    pyelftools comes from."""
    env = dict(os.environ)
    paths = [str(ROOT)]
    try:
        importlib.import_module("elftools")
    except ImportError as exc:
        wheel = assets.find_wheel(assets_folder / "wheels")
        if wheel is None:
            result = Result("FAIL", "setup.pyelftools",
                            f"pyelftools does not import ({exc}) and there is no wheel under "
                            f"{assets_folder / 'wheels'} (run `python benchmarks/gpu_check.py --prepare` on a machine "
                            "with the network, and carry build/gpu_check/ here)")
        else:
            paths.append(str(wheel))
            result = Result("PASS", "setup.pyelftools", f"imported from {wheel}")
    else:
        result = Result("PASS", "setup.pyelftools", f"installed ({_version('pyelftools') or 'version unknown'})")
    env["PYTHONPATH"] = os.pathsep.join(paths + [part for part in env.get("PYTHONPATH", "").split(os.pathsep)
                                                 if part])
    env["PYTHONUNBUFFERED"] = "1"
    return env, result


def step_info(check: Check, wanted: str | None) -> tuple[Gpu | None, dict[str, Any]]:
    """``offloadrt info --json`` and ``info``: the GPU to check (``wanted`` or the first), or None."""
    limit = check.limit("info", "info")
    if limit is None:
        return None, {}
    command = [sys.executable, "-m", "offloadrt", "info", "--json"]
    ran = run_command(command, limit, check.env, ROOT)
    check.record_step("info.json", command, ran, limit)
    try:
        report = json.loads(ran.output[ran.output.index("{"):]) if ran.returncode == 0 else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        check.add("FAIL", "info.json", f"`offloadrt info --json` failed (status {ran.returncode}): {tail(ran.output)}")
        return None, {}
    gpus = gpus_of(report)
    if not gpus:
        reasons = "; ".join(f"{name}: {why}" for name, why in report.get("Unavailable Platforms", {}).items())
        check.add("SKIP", "info", f"no GPU platform with a device ({reasons or 'no reason given'})")
        return None, report
    chosen = next((gpu for gpu in gpus if gpu.spec == wanted), None) if wanted else gpus[0]
    if chosen is None:
        check.add("FAIL", "info.json", f"no device {wanted}: offloadrt lists {', '.join(g.spec for g in gpus)}")
        return None, report
    check.add("PASS", "info.json", f"{len(gpus)} GPU device(s): " + ", ".join(f"{g.spec} {g.name}" for g in gpus),
              devices=[gpu.__dict__ for gpu in gpus])
    limit = check.limit("info", "info.text")
    if limit is not None:
        command = command[:-1]
        ran = run_command(command, limit, check.env, ROOT)
        check.record_step("info.text", command, ran, limit)
        if ran.returncode == 0 and all(gpu.name in ran.output for gpu in gpus):
            check.add("PASS", "info.text", f"lists {', '.join(gpu.name for gpu in gpus)}")
        else:
            check.add("FAIL", "info.text", f"`offloadrt info` (status {ran.returncode}) does not list every GPU: "
                                           f"{tail(ran.output)}")
    return chosen, report


def gpus_of(report: dict[str, Any]) -> list[Gpu]:
    """The GPUs in an ``offloadrt info --json`` report, labelled as ``offloadrt.device`` takes them."""
    gpus: list[Gpu] = []
    for entry in report.get("Devices", []):
        backend = str(entry.get("Platform Backend", "")).upper()
        if backend not in ("CUDA", "AMDGPU"):
            continue
        vendor = backend.lower()
        ordinal = sum(gpu.vendor == vendor for gpu in gpus)
        gpus.append(Gpu(f"{vendor}:{ordinal}", vendor, str(entry.get("Product Name") or entry.get("Name") or vendor)))
    return gpus


def run_steps(check: Check, gpu: Gpu, steps: Sequence[str], percall: tuple[int, int], assets_folder: Path) -> None:
    """Every step after ``info`` that ``steps`` names, in order."""
    if "examples" in steps:
        for example in assets.EXAMPLE_NAMES:
            check.run_child("example", f"examples.{example}",
                            ["example", "--example", example, "--device", gpu.spec, "--assets", str(assets_folder)])
    if "elementwise" in steps:
        check.run_child("elementwise", "elementwise", ["elementwise", "--device", gpu.spec, "--assets",
                                                       str(assets_folder)])
    if "interop" in steps:
        check.run_child("interop", "interop", ["interop", "--device", gpu.spec])
    if "percall" in steps:
        calls, rounds = percall
        check.run_child("percall", "percall", ["percall", "--device", gpu.spec, "--calls", str(calls),
                                               "--rounds", str(rounds)])
    if "gpu-tests" in steps:
        check.run_pytest("gpu-tests", ["-m", gpu.vendor])
    if "conformance" in steps:
        check.run_pytest("conformance", ["tests/conformance", "--platform", gpu.vendor])


# ---- the results ------------------------------------------------------------------------------------

def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions(report: dict[str, Any]) -> dict[str, str | None]:
    """The versions of what the check ran with (CuPy under whichever of its wheel names is installed)."""
    found: dict[str, str | None] = {"offloadrt": report.get("offloadrt Version") or _version("offloadrt")}
    for name in ("cuda-bindings", "cuda-core", "nvidia-cuda-nvrtc", "torch", "numpy", "pytest", "pyelftools",
                 "hip-python"):
        found[name] = _version(name)
    cupy = [dist for dist in importlib.metadata.distributions() if (dist.metadata["Name"] or "").startswith("cupy")]
    found["cupy"] = f"{cupy[0].metadata['Name']} {cupy[0].version}" if cupy else None
    return found


def _git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def write_results(check: Check, out: Path, gpu: Gpu | None, report: dict[str, Any], lines: list[str],
                  options: dict[str, Any]) -> tuple[Path, Path]:
    """``gpu_check-<date>-<device>.txt`` (what was printed, then each step's output) and ``.json``."""
    now = datetime.datetime.now(datetime.timezone.utc)
    device = re.sub(r"[^A-Za-z0-9.]+", "-", gpu.name if gpu else "no-gpu").strip("-") or "gpu"
    stem = f"gpu_check-{now.strftime('%Y-%m-%dT%H%MZ')}-{device}"
    out.mkdir(parents=True, exist_ok=True)
    text = out / f"{stem}.txt"
    appendix = [f"\n---- {name} (status {step['returncode']}, {step['seconds']} s): {' '.join(step['command'])}\n"
                f"{step['output'].rstrip()}" for name, step in check.steps.items()]
    text.write_text("\n".join(lines) + "\n" + "\n".join(appendix) + "\n")
    counts = {status: sum(result.status == status for result in check.results) for status in ("PASS", "FAIL", "SKIP")}
    data = {"date": now.isoformat(timespec="seconds"), "device": gpu.__dict__ if gpu else None,
            "machine": {"python": platform.python_version(), "platform": platform.platform(),
                        "cpus": os.cpu_count(), "commit": _git_commit()},
            "versions": versions(report), "options": options, "elapsed_s": round(time.monotonic() - check.start, 1),
            "passed": counts["PASS"], "failed": counts["FAIL"], "skipped": counts["SKIP"],
            "results": [result.as_dict() for result in check.results], "steps": check.steps}
    figures = out / f"{stem}.json"
    figures.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return text, figures


# ---- the command line -----------------------------------------------------------------------------

def child_main(args: argparse.Namespace) -> int:
    """A child step: run it, its results into ``--results`` (a step that raises is a FAIL of its own)."""
    recorder = Recorder(args.results, out=sys.stdout)
    try:
        if args.child == "example":
            from gpucheck import examples  # noqa: PLC0415

            examples.run(recorder, args.example, args.device, args.assets)
        elif args.child == "elementwise":
            from gpucheck import elementwise  # noqa: PLC0415

            elementwise.run(recorder, args.device, args.assets)
        elif args.child == "interop":
            from gpucheck import interop  # noqa: PLC0415

            interop.run(recorder, args.device)
        else:
            from gpucheck import percall  # noqa: PLC0415

            percall.run(recorder, args.device, args.calls, args.rounds)
    except Exception as exc:  # noqa: BLE001  # the step's own failure: reported as one
        import traceback  # noqa: PLC0415

        traceback.print_exc()
        name = f"examples.{args.example}" if args.child == "example" else args.child
        recorder.add("FAIL", name, f"{type(exc).__name__}: {exc}")
    finally:
        recorder.close()
    return 0


def prepare_main(folder: Path) -> int:
    """``--prepare``: build the examples' images and fetch the pyelftools wheel into ``folder``."""
    failed = 0

    def report(status: str, name: str, detail: str) -> None:
        nonlocal failed
        failed += status == "FAIL"
        print(Result(status, name, detail).line(), flush=True)

    ok = assets.prepare(report, folder)
    print(f"prepared {folder}: carry it to the GPU machine with the repository ({failed} failed)")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="See the module docstring (benchmarks/gpu_check.py) for the steps and "
                                            "how to prepare a GPU machine.")
    parser.add_argument("--prepare", action="store_true",
                        help="build the examples' GPU images and fetch the pyelftools wheel into build/gpu_check/")
    parser.add_argument("--quick", action="store_true", help="a short per-call benchmark (2,000 calls, 3 rounds)")
    parser.add_argument("--calls", type=int, help="per-call benchmark: calls per round (default 20,000)")
    parser.add_argument("--rounds", type=int, help="per-call benchmark: rounds, the best kept (default 5)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="seconds for the whole run (230)")
    parser.add_argument("--out", type=Path, help="folder for the .txt and .json results (benchmarks/results)")
    parser.add_argument("--device", help="the GPU to check, as offloadrt.device takes it (default: the first)")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated steps to run ({','.join(STEPS)})")
    parser.add_argument("--assets", type=Path, default=assets.ASSETS, help="where --prepare puts its images")
    parser.add_argument("--child", choices=("example", "elementwise", "interop", "percall"), help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--example", choices=assets.EXAMPLE_NAMES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args)
    if args.prepare:
        return prepare_main(args.assets)
    steps = [step.strip() for step in args.steps.split(",") if step.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"unknown steps {', '.join(unknown)}: choose from {', '.join(STEPS)}")
    calls, rounds = QUICK_PERCALL if args.quick else FULL_PERCALL
    percall = (args.calls or calls, args.rounds or rounds)

    env, elftools = child_environment(args.assets)
    check = Check(args.budget, env)
    check.take(elftools)
    gpu, report = step_info(check, args.device)
    if gpu is None:
        info_failed = any(result.status == "FAIL" and result.name.startswith("info") for result in check.results)
        for step in STEPS[1:]:
            if step in steps:
                check.add("SKIP", step, "not run: `offloadrt info` failed" if info_failed else "no GPU")
    else:
        run_steps(check, gpu, steps, percall, args.assets)
    passed = sum(result.status == "PASS" for result in check.results)
    failed = sum(result.status == "FAIL" for result in check.results)
    skipped = sum(result.status == "SKIP" for result in check.results)
    final = f"{passed} passed, {failed} failed"
    lines = [result.line() for result in check.results] + [final]
    if gpu is not None or args.out is not None:
        options = {"budget": args.budget, "steps": steps, "calls": percall[0], "rounds": percall[1],
                   "device": args.device, "quick": args.quick}
        text, figures = write_results(check, args.out or HERE / "results", gpu, report, lines, options)
        print(f"[gpu_check] {skipped} skipped; results in {text} and {figures.name}", file=sys.stderr)
    print(final, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
