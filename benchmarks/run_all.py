"""Run every benchmark, write results.json, summary.md and PNG plots.

    python benchmarks/run_all.py [--quick] [--out DIR] [--only NAME ...] [--timeout S]

Runs each ``benchmarks/bench_*.py`` that exposes ``collect(quick)``, each in a fresh Python process
(imported by path there, so one benchmark's threads, runtime state or crash cannot touch the
next's figures). A module without ``collect``, one that raises, crashes or runs past ``--timeout``
is listed under ``"errors"`` in results.json and in summary.md, and the run goes on; the exit
status is 1 when a module failed (raised, crashed, timed out; not merely lacked ``collect``).

Writes into ``--out`` (default ``benchmarks/results/``):
- ``results.json``: the machine (CPU, cores, Python, NumPy, offloadrt, peer versions, date, git
  commit) and each module's whole result;
- ``summary.md``: every row (what, value, floor, ratio, goal) as a Markdown table, the peer
  comparison side by side, the modules' ``notes`` (what they could not measure) and the errors;
- ``launch_scaling.png``: launch and event latency against live queues and submitting threads
  (bench_host's ``scaling`` series, the one source of these figures; their growth in summary.md);
- ``copy_bandwidth.png``: copy bandwidth against size for offloadrt, the peer, NumPy and memmove;
- ``peer.png``: the three workloads of the peer comparison side by side.

``--quick`` makes every module use small sizes and few repeats (the whole run in about a minute
on 2 cores); ``--only`` runs the named modules (``peer`` or ``bench_peer``; repeat or comma-separate).
Needs the ``bench`` extra for the plots and the peer: ``pip install '.[bench]'``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results"
PLOTS = ("launch_scaling.png", "copy_bandwidth.png", "peer.png")


# ---- running the modules ---------------------------------------------------------------------------

def discover(folder: Path, only: list[str]) -> tuple[list[Path], list[str]]:
    """The ``bench_*.py`` files of ``folder`` (those named by ``only`` if any), and the names in
    ``only`` that match none."""
    found = sorted(folder.glob("bench_*.py"))
    if not only:
        return found, []
    wanted = {name if name.startswith("bench_") else f"bench_{name}" for name in only}
    wanted = {name.removesuffix(".py") for name in wanted}
    chosen = [path for path in found if path.stem in wanted]
    return chosen, sorted(wanted - {path.stem for path in chosen})


def run_child(path: Path, quick: bool, out: Path) -> int:
    """In the child process: import ``path`` by path, call its ``collect(quick)``, write the result
    (or the error) as JSON to ``out``. Returns the exit status."""
    sys.path.insert(0, str(path.parent))  # the modules import their shared helpers (_report)
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        collect = getattr(module, "collect", None)
        if not callable(collect):
            out.write_text(json.dumps({"error": f"{path.name} has no collect(quick): not run", "missing": True}))
            return 0
        result = collect(quick)
        if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
            raise TypeError(f"collect(quick) returned {type(result).__name__} without a 'rows' list")
        out.write_text(json.dumps({"result": result}, default=_plain))
        return 0
    except BaseException as exc:  # noqa: BLE001  # everything a module raises goes into the report
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}))
        return 1


def _plain(value: Any) -> Any:
    """JSON for what ``json`` does not know: NumPy scalars and arrays, paths, anything else as text."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def run_module(path: Path, quick: bool, timeout: float) -> tuple[dict[str, Any] | None, str | None, bool, float]:
    """Run one module in a fresh process: (its result, None) or (None, what went wrong), whether it
    failed (raised, crashed, timed out: not merely without ``collect``), and the seconds."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        out = Path(workdir) / "result.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--child", str(path), "--child-out", str(out)]
        if quick:
            command.append("--quick")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=path.parent)
        except subprocess.TimeoutExpired:
            return None, f"ran past the {timeout:.0f} s limit (--timeout) and was stopped", True, \
                time.perf_counter() - start
        seconds = time.perf_counter() - start
        if not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            return None, f"its process ended with status {done.returncode} and no result: " + " | ".join(tail), True, \
                seconds
        answer = json.loads(out.read_text())
    if "error" in answer:
        return None, answer["error"], not answer.get("missing", False), seconds
    return answer["result"], None, False, seconds


# ---- the machine ---------------------------------------------------------------------------------

def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "system": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "load_average_at_start": _load_average(),
    }
    for package, key in (("numpy", "numpy"), ("offloadrt", "offloadrt"), ("pyopencl", "pyopencl"),
                         ("matplotlib", "matplotlib")):
        try:
            module = __import__(package)
            info[key] = getattr(module, "__version__", None) or getattr(module, "VERSION_TEXT", "unknown")
        except ImportError as exc:
            info[key] = f"not installed ({exc})"
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=HERE, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=HERE, check=True)
        info["git_commit"] = commit.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        info["git_commit"] = None
    return info


def _load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages: other work on the machine makes figures noisy."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---- plots ---------------------------------------------------------------------------------------

SCALING_KEYS = ("queues", "threads", "launch_us_by_queues", "event_us_by_queues", "launch_us_by_threads",
                "event_us_by_threads")


def scaling_source(modules: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The one module whose ``scaling`` series (per-launch and per-event us against live queues and
    submitting threads) the launch plot and the growth lines use: bench_host's, else the first
    other module that has such a series."""
    for name in sorted(modules, key=lambda name: name != "bench_host"):
        scaling = modules[name].get("scaling")
        if isinstance(scaling, dict) and all(key in scaling for key in SCALING_KEYS):
            return name, scaling
    return None


def growth(scaling: dict[str, Any]) -> dict[str, str]:
    """In words: each scaling series as ratios to its first (1-queue or 1-thread) figure."""
    def say(values: list[float], counts: list[int], unit: str) -> str:
        first = f"{values[0]:.2f} us at 1 {unit.rstrip('s')}; "
        return first + ", ".join(f"{value / values[0]:.2f}x at {count} {unit}"
                                 for count, value in zip(counts[1:], values[1:]))
    queues, threads = scaling["queues"], scaling["threads"]
    return {
        "launch against live queues": say(scaling["launch_us_by_queues"], queues, "queues"),
        "event against live queues": say(scaling["event_us_by_queues"], queues, "queues"),
        "launch against submitting threads": say(scaling["launch_us_by_threads"], threads, "threads"),
        "event against submitting threads": say(scaling["event_us_by_threads"], threads, "threads"),
    }


def plot_all(modules: dict[str, Any], out: Path, machine: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Draw the plots the results allow: (files written, {plot: why not drawn})."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return [], {plot: f"matplotlib is not installed ({exc}); pip install '.[bench]'" for plot in PLOTS}
    title = f"offloadrt {machine.get('offloadrt')} on {machine.get('cpu')}, {machine.get('cores')} cores"
    written: list[str] = []
    skipped: dict[str, str] = {}
    source = scaling_source(modules)
    if source is None:
        skipped["launch_scaling.png"] = "no scaling series (bench_host did not run or failed)"
    else:
        _plot_scaling(plt, source[1], out / "launch_scaling.png", title)
        written.append("launch_scaling.png")
    peer = modules.get("bench_peer")
    if not peer or "copy_sweep" not in peer:
        skipped["copy_bandwidth.png"] = skipped["peer.png"] = "bench_peer did not run or failed"
    else:
        _plot_copy(plt, peer, out / "copy_bandwidth.png", title)
        _plot_peer(plt, peer, out / "peer.png", title)
        written += ["copy_bandwidth.png", "peer.png"]
    return written, skipped


def _plot_scaling(plt: Any, scaling: dict[str, Any], path: Path, title: str) -> None:
    figure, (by_queues, by_threads) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for axes, counts, what, unit in ((by_queues, scaling["queues"], "queues", "live queues (round-robin)"),
                                     (by_threads, scaling["threads"], "threads", "submitting threads")):
        axes.plot(counts, scaling[f"launch_us_by_{what}"], "o-", label="olLaunchKernel (empty, queued)")
        axes.plot(counts, scaling[f"event_us_by_{what}"], "s-", label="event create+sync+destroy")
        axes.set_xscale("log", base=2)
        axes.set_xticks(counts, [str(count) for count in counts])
        axes.set_xlabel(unit)
        axes.grid(True, which="both", alpha=0.3)
    tallest = max(max(scaling[f"{kind}_us_by_{what}"])
                  for kind in ("launch", "event") for what in ("queues", "threads"))
    by_queues.set_ylim(0, tallest * 1.1)  # shared by both panels: every point of either stays in view
    by_queues.set_ylabel("us per operation")
    by_threads.set_title("wall time per operation, all threads together", fontsize=9)
    by_queues.set_title("one thread", fontsize=9)
    by_queues.legend(fontsize=8)
    figure.suptitle(f"Host launch latency against live queues and threads\n{title}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


COPY_STYLES = {  # series name -> (label, style); the floors dashed
    "offloadrt olMemcpy": ("offloadrt olMemcpy host->host", "o-"),
    "peer enqueue_copy": ("PyOpenCL on PoCL enqueue_copy + finish", "s-"),
    "numpy.copyto": ("floor: numpy.copyto", "^--"),
    "memmove (ctypes)": ("floor: memmove via ctypes", "v--"),
}


def _plot_copy(plt: Any, peer: dict[str, Any], path: Path, title: str) -> None:
    sweep = peer["copy_sweep"]
    sizes = sweep["sizes"]
    figure, axes = plt.subplots(figsize=(8, 5.2))
    order = [name for name in COPY_STYLES if name in sweep["GBps"]]  # ours, the peer, then the floors
    for name in order + [name for name in sweep["GBps"] if name not in COPY_STYLES]:
        label, style = COPY_STYLES.get(name, (name, "x-"))
        axes.plot(sizes, sweep["GBps"][name], style, label=label)
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [_size_label(size) for size in sizes], rotation=30)
    axes.set_xlabel("bytes per copy (host to host)")
    axes.set_ylabel("GB/s")
    axes.set_ylim(bottom=0)
    axes.grid(True, which="both", alpha=0.3)
    if not peer["peer"]["available"]:
        axes.text(0.01, 0.97, f"peer absent: {peer['peer']['reason']}", transform=axes.transAxes, fontsize=7,
                  va="top", wrap=True)
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)  # below: no data hidden
    axes.set_title(f"Copy bandwidth against size\n{title}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


OURS, PEER, FLOOR, NUMPY = "C0", "C1", "0.55", "C2"  # colours: offloadrt, the peer, a floor, NumPy


def _plot_peer(plt: Any, peer: dict[str, Any], path: Path, title: str) -> None:
    has_peer = peer["peer"]["available"]
    launch, saxpy, copy = peer["launch_us"], peer["saxpy_ms"], peer["copy_GBps"]
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4.4))
    bars = [("offloadrt\nolLaunchKernel", launch["olLaunchKernel"], OURS),
            ("offloadrt\nQueue.launch", launch["Queue.launch"], OURS)]
    if has_peer:
        bars.append(("PoCL\nenqueue", launch["peer"], PEER))
    bars.append(("bare ctypes\ncall (floor)", launch["raw"], FLOOR))
    _bars(left, bars, "us per launch (lower is better)", "empty-kernel launch, queued")
    shapes = [("256", "256-item groups", "256-item groups"), ("1024", "1024-item groups", "1024-item groups"),
              ("1 per core | PoCL's", "one group per core", "local size chosen by PoCL")]
    width = 0.38
    positions = range(len(shapes))
    ours = middle.bar([p - width / 2 for p in positions], [saxpy[f"offloadrt {s[1]}"] for s in shapes], width,
                      label="offloadrt", color=OURS)
    middle.bar_label(ours, [f"{saxpy[f'offloadrt {s[1]}']:.3g}" for s in shapes], fontsize=8)
    if has_peer:
        theirs = middle.bar([p + width / 2 for p in positions], [saxpy[f"peer {s[2]}"] for s in shapes], width,
                            label="PyOpenCL on PoCL", color=PEER)
        middle.bar_label(theirs, [f"{saxpy[f'peer {s[2]}']:.3g}" for s in shapes], fontsize=8)
    middle.axhline(saxpy["numpy"], color=NUMPY, linestyle="--", label=f"NumPy, one core ({saxpy['numpy']:.3g})")
    middle.set_xticks(list(positions), [s[0] for s in shapes], fontsize=8)
    middle.set_xlabel("work-group size")
    middle.set_ylabel("ms (lower is better)")
    middle.set_title(f"saxpy over 2^{int(peer['saxpy_n']).bit_length() - 1} float32, all cores", fontsize=9)
    tallest = max([saxpy["numpy"], *(saxpy[key] for key in saxpy if key.startswith(("offloadrt ", "peer ")))])
    middle.set_ylim(0, tallest * 1.5)  # room for the legend above the bars
    middle.legend(fontsize=8, loc="upper center")
    names = [("olMemcpy", "offloadrt olMemcpy", OURS), ("Buffer.\ncopy_from", "offloadrt Buffer.copy_from", OURS),
             ("PoCL\nenqueue_copy", "peer enqueue_copy", PEER), ("numpy.\ncopyto", "numpy.copyto", NUMPY),
             ("memmove\n(floor)", "memmove (ctypes)", FLOOR)]
    _bars(right, [(label, copy[key], colour) for label, key, colour in names if key in copy],
          "GB/s (higher is better)", f"{int(peer['copy_bytes']) >> 20} MiB host copy")
    if not has_peer:
        figure.text(0.01, 0.01, f"peer absent: {peer['peer']['reason']}", fontsize=7)
    figure.suptitle(f"offloadrt's host device against PyOpenCL on PoCL's CPU device, same run\n{title}",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _bars(axes: Any, bars: list[tuple[str, float, str]], ylabel: str, title: str) -> None:
    labels, values, colours = zip(*bars)
    drawn = axes.bar(range(len(values)), values, color=colours)
    axes.bar_label(drawn, [f"{value:.3g}" for value in values], fontsize=8)
    axes.set_xticks(range(len(values)), labels, fontsize=8)
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=9)


def _size_label(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


# ---- summary.md ----------------------------------------------------------------------------------

def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return str(value)
    return f"{value:.{max(0, 2 - math.floor(math.log10(abs(value))))}f}"


def _loads(values: list[float] | None) -> str:
    return "unknown" if not values else "/".join(f"{value:.2f}" for value in values)


def _rate(us: float) -> str:
    """Microseconds per launch, with the launch rate."""
    return f"{_number(us)} ({_number(1 / us)} M/s)"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summary_markdown(results: dict[str, Any]) -> str:
    machine = results["machine"]
    lines = [
        "# offloadrt benchmark results",
        "",
        f"{machine['date']}, {machine['cpu']} ({machine['cores']} cores), Python {machine['python']}, "
        f"NumPy {machine['numpy']}, offloadrt {machine['offloadrt']}, PyOpenCL {machine['pyopencl']}"
        + (", quick run (small sizes, few repeats)" if results["quick"] else "") + ".",
        f"Load average (1/5/15 min) {_loads(machine.get('load_average_at_start'))} at the start, "
        f"{_loads(machine.get('load_average_at_end'))} at the end (other work on the machine makes figures noisy).",
        f"Commit {machine['git_commit']}. Reproduce: `python benchmarks/run_all.py"
        + (" --quick" if results["quick"] else "") + "`.",
        "",
        "`ratio` is value / floor, both measured in the same run: for a time lower is better, for GB/s higher.",
        "",
    ]
    peer = results["modules"].get("bench_peer")
    if peer:
        lines += _peer_table(peer)
    lines += ["| benchmark | what | value | floor | ratio | goal |", "|---|---|---|---|---|---|"]
    for name, result in results["modules"].items():
        for entry in result["rows"]:
            floor = "-" if entry.get("floor") is None else f"{_number(entry['floor'])} ({entry['floor_what']})"
            ratio = "-" if entry.get("ratio") is None else f"{entry['ratio']:.2f}x"
            lines.append(f"| {_cell(entry.get('benchmark', name))} | {_cell(entry['what'])} | "
                         f"{_number(entry['value'])} {_cell(entry['unit'])} | {_cell(floor)} | {ratio} | "
                         f"{_cell(entry.get('goal') or '-')} |")
    notes = [(name, note) for name, result in results["modules"].items() for note in _notes(result)]
    if notes:
        lines += ["", "Notes from the benchmarks:", ""]
        lines += [f"- `{name}`: {_cell(note)}" for name, note in notes]
    if results.get("scaling_growth"):
        lines += ["", f"How the scaling figures grow (from `{results['scaling_source']}`; each against its 1-queue "
                  "or 1-thread figure):", ""]
        lines += [f"- {what}: {text}" for what, text in results["scaling_growth"].items()]
    if results["plots"]:
        lines += ["", "Plots: " + ", ".join(f"[{plot}]({plot})" for plot in results["plots"]) + "."]
    if results["plots_skipped"]:
        lines += ["", "Plots not drawn:", ""]
        lines += [f"- {plot}: {why}" for plot, why in results["plots_skipped"].items()]
    if results["errors"]:
        lines += ["", "## Errors", ""]
        lines += [f"- `{name}`: {_cell(error)}" for name, error in results["errors"].items()]
    return "\n".join(lines) + "\n"


def _notes(result: dict[str, Any]) -> list[str]:
    """A module's ``notes`` (a string or a list of them): what it could not measure and why."""
    notes = result.get("notes") or []
    notes = [notes] if isinstance(notes, str) else [str(note) for note in notes]
    if not result["rows"] and not notes:
        notes = ["returned no rows, and no note saying why"]
    return notes


def _peer_table(peer: dict[str, Any]) -> list[str]:
    """The peer comparison side by side: the README's table."""
    launch, saxpy, copy = peer["launch_us"], peer["saxpy_ms"], peer["copy_GBps"]
    has_peer = peer["peer"]["available"]
    gone = "absent"
    items = f"2^{int(peer['saxpy_n']).bit_length() - 1}"
    mib = f"{int(peer['copy_bytes']) >> 20} MiB"

    def ms(key: str) -> str:
        return f"{_number(saxpy[key])} ms" if key in saxpy else gone

    rows = [
        ("empty-kernel launch, queued (us per launch, lower is better)",
         f"olLaunchKernel {_rate(launch['olLaunchKernel'])}; Queue.launch {_rate(launch['Queue.launch'])}",
         _rate(launch["peer"]) if has_peer else gone, "-", f"{_number(launch['raw'])} (bare ctypes call)"),
        (f"saxpy {items} float32, 256-item groups", ms("offloadrt 256-item groups"), ms("peer 256-item groups"),
         ms("numpy"), "-"),
        (f"saxpy {items} float32, 1024-item groups", ms("offloadrt 1024-item groups"), ms("peer 1024-item groups"),
         ms("numpy"), "-"),
        (f"saxpy {items} float32, one group per core (PoCL: its own local size)", ms("offloadrt one group per core"),
         ms("peer local size chosen by PoCL"), ms("numpy"), "-"),
        (f"{mib} host copy (GB/s, higher is better)",
         f"olMemcpy {_number(copy['offloadrt olMemcpy'])}; Buffer.copy_from "
         f"{_number(copy['offloadrt Buffer.copy_from'])}", _number(copy["peer enqueue_copy"]) if has_peer else gone,
         _number(copy["numpy.copyto"]), f"{_number(copy['memmove (ctypes)'])} (memmove via ctypes)"),
    ]
    lines = ["## offloadrt against PyOpenCL on PoCL (same run)", ""]
    if has_peer:
        lines.append(f"Peer: {peer['peer']['description']}.")
    else:
        lines.append(f"Peer absent: {peer['peer']['reason']}.")
    lines += ["", "| workload | offloadrt | PyOpenCL on PoCL | NumPy | floor |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(cell) for cell in line) + " |" for line in rows]
    flags = peer.get("host", {}).get("kernel_flags")
    o2 = next((value for key, value in saxpy.items() if key.startswith("offloadrt ") and "-O2" in key), None)
    if flags and o2 is not None:
        lines += ["", f"offloadrt's host kernels are built with `cc {flags}` (PoCL compiles its kernels for the "
                  f"CPU it runs on); the 256-item saxpy built with `-O2` takes {_number(o2)} ms."]
    lines += ["", "## Every figure", ""]
    return lines


# ---- main ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (about a minute)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where to write (default {DEFAULT_OUT})")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this module (peer or bench_peer); repeat or comma-separate")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds one module may run (default 900, 300 with --quick)")
    parser.add_argument("--dir", type=Path, default=HERE, help=argparse.SUPPRESS)  # where to find bench_*.py
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # internal: run one module here
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return run_child(args.child, args.quick, args.child_out)

    only = [name.strip() for item in args.only for name in item.split(",") if name.strip()]
    paths, unknown = discover(args.dir, only)
    timeout = args.timeout or (300.0 if args.quick else 900.0)
    args.out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    modules: dict[str, Any] = {}
    errors: dict[str, str] = {name: "no such benchmark (--only)" for name in unknown}
    failed = list(unknown)
    seconds: dict[str, float] = {}
    for path in paths:
        print(f"{path.stem} ...", end=" ", flush=True)
        result, error, broke, took = run_module(path, args.quick, timeout)
        seconds[path.stem] = round(took, 2)
        if error is not None:
            errors[path.stem] = error
            if broke:
                failed.append(path.stem)
            print(f"not run or failed ({took:.1f} s): {error}", flush=True)
        else:
            modules[path.stem] = result
            print(f"{len(result['rows'])} rows ({took:.1f} s)", flush=True)
    plots, skipped = plot_all(modules, args.out, machine)
    machine["load_average_at_end"] = _load_average()
    source = scaling_source(modules)
    results = {"machine": machine, "quick": args.quick, "modules": modules, "errors": errors, "failed": failed,
               "seconds": seconds, "plots": plots, "plots_skipped": skipped,
               "scaling_source": source[0] if source else None,
               "scaling_growth": growth(source[1]) if source else None}
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=_plain) + "\n")
    summary = summary_markdown(results)
    (args.out / "summary.md").write_text(summary)
    print(summary)
    print(f"wrote {args.out / 'results.json'}, {args.out / 'summary.md'}"
          + "".join(f", {args.out / plot}" for plot in plots))
    if failed:
        print(f"failed: {', '.join(failed)} (see errors)")
    return 1 if failed or not modules else 0


if __name__ == "__main__":
    sys.exit(main())
