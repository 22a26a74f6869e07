"""What offloadrt adds to each GPU driver call, measured over null drivers (no GPU needed).

    python benchmarks/bench_gpu_overhead.py [--quick] [--json FILE]

The CUDA and AMDGPU plugins run over do-nothing driver libraries (``benchmarks/nulldriver``:
a ``libcuda.so.1`` and a ``libamdhip64.so`` built with ``cc``) loaded through the *real*
``cuda.bindings`` and hip-python, each vendor in a child process of its own, so this process never
sees a fake driver. Every driver call returns at once, so what is left is Python (timed as the
measuring thread's CPU time, best of interleaved rounds): per operation,
offloadrt's call against the bare driver call made through the same bindings in the same run, and
how much of the difference lies in the plugin (its hooks, called directly) and how much above it
(the ``ol*`` entry point and the generic device layer). Operations: a queued launch with a
32-byte blob (the null kernel's four 8-byte parameters), 8-byte H2D and D2H copies, queue
create+destroy, an untimed event's create+record+sync+destroy, an idle queue sync, a host function
(enqueued, then run at the next sync), and two of the Python layer's calls: an 8-byte
``Buffer.copy_from(numpy_array, queue=q)`` and ``queue.record()`` + ``Event.sync()`` + ``close()``.

On CUDA the same run measures ``cuda.core`` (when installed) over the same null driver: its
``launch`` with a ``LaunchConfig``, ``Stream.record`` + ``Event.sync``, stream create+close and
``Stream.sync``, each as the us it adds to the raw call, beside offloadrt's.

Driver work per operation: the null libraries count host functions enqueued, events created with
and without timing and the records of each, launches and copies. Each side of each operation is
counted in a steady state (pools filled), and the report flags what an operation made that it did
not ask for: a host function anywhere but the host-function operation, or any timing event (none
of these operations asks for a timestamp).

Also measured: what the bindings themselves cost per call over the null driver (argument
conversion and the result tuple), against a ctypes call of the same C entry point; and, for the
copies, a floor: olMemcpy's checks done inline in one Python frame around the same bindings call
(nothing looked up), which is what any copy that keeps those checks costs at the least in CPython.

Goals (issue 13): at most 1 us added per launch, at most 0.5 us per copy or event call; no driver
work that was not asked for.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import nulldriver  # noqa: E402
from _overhead_sides import (  # noqa: E402
    Raw,
    Setup,
    Side,
    Sides,
    bindings_costs,
    count_work,
    cuda_core_sides,
    offloadrt_sides,
    python_layer_sides,
    unasked_work,
)
from _report import alternate, print_rows, print_table, row, write_json  # noqa: E402

NAME = "gpu-overhead"
VENDORS = ("cuda", "hip")
LABELS = {"cuda": "CUDA", "hip": "AMDGPU"}
LAUNCH_GOAL = "<= 1 us added"
CALL_GOAL = "<= 0.5 us added"
NO_UNASKED_WORK = "0 (none asked for)"
#: operation -> (what the row says, the raw calls it is compared with, goal of the added us)
OPERATIONS: dict[str, tuple[str, str, str | None]] = {
    "launch": ("queued launch, 32-byte blob", "launch", LAUNCH_GOAL),
    "h2d": ("8-byte copy H2D, queued", "memcpy H2D", CALL_GOAL),
    "d2h": ("8-byte copy D2H, queued", "memcpy D2H", CALL_GOAL),
    "queue": ("queue create+destroy", "stream create+destroy", None),
    "event": ("event create+record+sync+destroy", "untimed event create+record+sync+destroy", CALL_GOAL),
    "sync": ("idle olSyncQueue", "stream sync", None),
    "host": ("host function (enqueue, run at sync)", "host function + ctypes callback", None),
    "copy_from": ("Python layer Buffer.copy_from(8-byte NumPy array, queue=q)", "memcpy H2D", None),
    "record": ("Python layer queue.record() + Event.sync() + close()", "untimed event create+record+sync+destroy",
               None),
}
RAW_NAMES = {
    "cuda": {"launch": "cuLaunchKernel", "memcpy H2D": "cuMemcpyHtoDAsync", "memcpy D2H": "cuMemcpyDtoHAsync",
             "stream create+destroy": "cuStreamCreate+cuStreamDestroy", "stream sync": "cuStreamSynchronize",
             "untimed event create+record+sync+destroy": "cuEventCreate(DISABLE_TIMING)+Record+Synchronize+Destroy",
             "host function + ctypes callback": "cuLaunchHostFunc + ctypes callback"},
    "hip": {"launch": "hipModuleLaunchKernel", "memcpy H2D": "hipMemcpyHtoDAsync", "memcpy D2H": "hipMemcpyDtoHAsync",
            "stream create+destroy": "hipStreamCreateWithFlags+hipStreamDestroy",
            "stream sync": "hipStreamSynchronize",
            "untimed event create+record+sync+destroy":
                "hipEventCreateWithFlags(DisableTiming)+Record+Synchronize+Destroy",
            "host function + ctypes callback": "hipLaunchHostFunc + ctypes callback"},
}
#: what the cuda.core side of an operation calls
CUDA_CORE_CALLS = {"launch": "launch(stream, LaunchConfig, kernel, 4 args)",
                   "event": "Stream.record() + Event.sync() + Event.close()",
                   "queue": "Device.create_stream() + Stream.close()", "sync": "Stream.sync()"}
SIDE_LABELS = {"ours": "offloadrt", "plugin": "plugin hooks", "raw": "raw bindings", "floor": "copy floor",
               "cuda.core": "cuda.core"}


# ---- the child: one vendor over its null driver -------------------------------------------------
def _collect(found: list[Any], item: Any) -> bool:
    """An olIterateDevices callback: keep ``item``, go on."""
    found.append(item)
    return True


def _per_op(count: int, body: Callable[[], object], after: Callable[[], object] | None = None) -> Callable[[], float]:
    """A timing of ``count`` runs of ``body`` (then ``after`` once): CPU seconds of this thread per run.

    Nothing waits over a null driver, so the thread's CPU time is the whole cost, and it does not
    count the time the thread spends descheduled on a busy machine.
    """
    clock = time.thread_time

    def timed() -> float:
        start = clock()
        for _ in range(count):
            body()
        if after is not None:
            after()
        return (clock() - start) / count
    return timed


def run_worker(vendor: str, quick: bool, smoke: bool = False) -> dict[str, Any]:
    """Measure ``vendor``'s plugin over the null driver this process was started with.

    With ``smoke``, only make one launch, one copy each way and one host function, count a few
    runs of every side, and say how it went (no timing).
    """
    if os.environ.get("OFFLOADRT_NULL_DRIVER") != vendor:
        raise SystemExit(f"the {vendor} worker must run in a child started by collect() (over the null driver)")
    # Only the vendor measured may start: the other's bindings are hidden (a real driver stays unloaded).
    for module in (("hip", "rocm.bindings.hip") if vendor == "cuda" else ("cuda.bindings.driver",)):
        sys.modules[module] = None  # type: ignore[assignment]
    if vendor == "hip":
        nulldriver.set_hip_device_properties(Path(os.environ["ROCM_PATH"]))

    from offloadrt import PlatformBackend, api  # noqa: PLC0415

    backend = PlatformBackend.CUDA if vendor == "cuda" else PlatformBackend.AMDGPU
    api.olInit()
    try:
        setup, program, name = _open(vendor, api, backend)
        results: dict[str, Any] = {"device": name}
        if smoke:
            queue, device, host, dptr, hptr = setup.queue, setup.device, setup.host, setup.dptr, setup.hptr
            ran: list[object] = []
            api.olLaunchKernel(queue, device, setup.kernel, setup.blob, setup.sizes)
            api.olMemcpy(queue, dptr, device, hptr, host, 8)
            api.olMemcpy(queue, hptr, host, dptr, device, 8)
            api.olLaunchHostFunction(queue, ran.append, "host function")
            api.olSyncQueue(queue)
            results.update(ran=ran, library=_loaded_driver(vendor))
            if vendor == "cuda":
                results.update(_parameter_layout(setup))
            # Before the Python layer holds a reference to the runtime: this restart must be a real one.
            results["fast_after_restart"] = _fast_after_restart(api, backend, program.image, setup.blob, setup.sizes)
            setup, program, _ = _open(vendor, api, backend)
        ok, raw_stream = setup.raw.stream_create()[:2]
        assert int(ok) == 0
        keep: list[object] = []  # what the sides' C calls point into
        sides, notes = _all_sides(vendor, setup, raw_stream, keep)
        sides, errors = _working(sides)
        counts = _count_all(nulldriver.Counters(vendor), sides, 3 if smoke else 20 if quick else 100)
        results.update(counts=counts, errors=errors, notes=notes)
        if not smoke:
            results.update(_measure(sides, quick))
            results["bindings"] = bindings_costs(vendor, setup.raw, setup.kernel._target.function, setup.dptr,
                                                 setup.hptr, _per_op, alternate, quick)
        setup.raw.stream_destroy(raw_stream)
        api.olMemFree(setup.dptr)
        api.olDestroyQueue(setup.queue)
        api.olDestroyProgram(program.handle)
    finally:
        api.olShutDown()
    return results


def _parameter_layout(setup: Setup) -> dict[str, Any]:
    """What the null libcuda says of the kernel's parameters through the real bindings: the
    ``(status, offset, size)`` of ``cuFuncGetParamInfo`` for indices 0 to 4, and the status of a
    raw launch with a 40-byte parameter buffer (longer than the kernel's 32 bytes)."""
    d, function = setup.raw.d, setup.kernel._target.function
    layout = []
    for index in range(5):
        status, *found = d.cuFuncGetParamInfo(function, index)
        layout.append([int(status), *(None if value is None else int(value) for value in found)])
    blob = ctypes.create_string_buffer(40)
    size = ctypes.c_size_t(40)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(blob), 2, ctypes.addressof(size), 0)
    ok, stream = setup.raw.stream_create()[:2]
    (status,) = d.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream, None, ctypes.addressof(extra))
    setup.raw.stream_destroy(stream)
    return {"param_info": layout, "oversized_launch": int(status)}


class _Program(NamedTuple):
    """A loaded program: its ol* handle and the image it was loaded from."""

    handle: Any
    image: bytes


def _open(vendor: str, api: Any, backend: Any) -> tuple[Setup, _Program, str]:
    """Find the null driver's device, load the null kernel, make a queue and 64 bytes on each side."""
    from offloadrt import AllocType, DeviceInfo, Dimensions, KernelLaunchSizeArgs, PlatformInfo, SymbolKind  # noqa: PLC0415

    devices: list[Any] = []
    api.olIterateDevices(lambda dev, _: _collect(devices, dev))
    by_backend = {api.olGetPlatformInfo(api.olGetDeviceInfo(dev, DeviceInfo.PLATFORM), PlatformInfo.BACKEND): dev
                  for dev in devices}
    device, host = by_backend.get(backend), by_backend[type(backend).HOST]
    if device is None:
        raise SystemExit(f"the {LABELS[vendor]} plugin did not start over the null driver")
    name = str(api.olGetDeviceInfo(device, DeviceInfo.PRODUCT_NAME))
    if not name.startswith("Null"):
        raise SystemExit(f"refusing to measure {name!r}: not the null driver's device")
    gdev = device._gdev
    image = nulldriver.CUDA_PTX if vendor == "cuda" else nulldriver.hip_code_object()
    program = api.olCreateProgram(device, image)
    kernel = api.olGetSymbol(program, "empty", SymbolKind.KERNEL)
    queue = api.olCreateQueue(device)
    sizes = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(32, 1, 1))
    dptr = api.olMemAlloc(device, AllocType.DEVICE, 64)
    host_buffer = ctypes.create_string_buffer(64)
    _HOST_BUFFERS.append(host_buffer)  # pageable memory the copies use until the process ends
    setup = Setup(api, Raw(vendor, gdev.d), gdev, device, host, kernel, queue, queue._ai, sizes, bytes(range(32)),
                  dptr, ctypes.addressof(host_buffer))
    return setup, _Program(program, image), name


_HOST_BUFFERS: list[ctypes.Array[ctypes.c_char]] = []


def _all_sides(vendor: str, setup: Setup, raw_stream: Any, keep: list[object]) -> tuple[Sides, list[str]]:
    """Every operation's sides: offloadrt's, the Python layer's and, on CUDA, cuda.core's; and
    notes saying which could not be made (an error there leaves the rest measured)."""
    sides = offloadrt_sides(setup, raw_stream, keep)
    notes: list[str] = []
    try:
        sides.update(python_layer_sides(vendor, setup.raw, raw_stream, keep))
    except Exception as exc:  # noqa: BLE001  # the rest is still worth measuring
        notes.append(f"{LABELS[vendor]}: the Python layer's operations could not be set up: "
                     f"{type(exc).__name__}: {exc}")
    if vendor == "cuda":
        try:
            core = cuda_core_sides(keep)
        except Exception as exc:  # noqa: BLE001
            core = f"cuda.core did not start over the null driver: {type(exc).__name__}: {exc}"
        if isinstance(core, str):
            notes.append(f"CUDA: no cuda.core rows: {core}")
        else:
            for op, side in core.items():
                sides[op]["cuda.core"] = side
    return sides, notes


def _working(sides: Sides) -> tuple[Sides, dict[str, str]]:
    """The sides that run once without raising, and ``{"op/side": error}`` for those that do not;
    an operation that loses its offloadrt or raw side is dropped whole."""
    errors: dict[str, str] = {}
    working: Sides = {}
    for op, op_sides in sides.items():
        kept: dict[str, Side] = {}
        for name, side in op_sides.items():
            try:
                side.body()
                if side.after is not None:
                    side.after()
            except Exception as exc:  # noqa: BLE001  # reported, and the other sides measured
                errors[f"{op}/{name}"] = f"{type(exc).__name__}: {exc}"
                continue
            kept[name] = side
        if "ours" in kept and "raw" in kept:
            working[op] = kept
    return working, errors


def _count_all(counters: nulldriver.Counters, sides: Sides, runs: int) -> dict[str, dict[str, dict[str, float]]]:
    """The driver work per run of every side of every operation (see :func:`count_work`)."""
    return {op: {name: count_work(counters, side, runs) for name, side in op_sides.items()}
            for op, op_sides in sides.items()}


def _fast_after_restart(api: Any, backend: Any, image: bytes, blob: bytes, sizes: Any) -> bool:
    """Whether, after olShutDown and olInit, a queued launch takes the plugin's fast path again once
    a first launch has made the device current on this thread."""
    from offloadrt import DeviceInfo, PlatformInfo, SymbolKind  # noqa: PLC0415

    api.olShutDown()
    api.olInit()  # the caller's finally shuts this one down
    devices: list[Any] = []
    api.olIterateDevices(lambda dev, _: _collect(devices, dev))
    device = next(dev for dev in devices if backend
                  == api.olGetPlatformInfo(api.olGetDeviceInfo(dev, DeviceInfo.PLATFORM), PlatformInfo.BACKEND))
    kernel = api.olGetSymbol(api.olCreateProgram(device, image), "empty", SymbolKind.KERNEL)
    queue = api.olCreateQueue(device)
    api.olLaunchKernel(queue, device, kernel, blob, sizes)
    fast = kernel._launch is not None and bool(kernel._launch(queue._ai, blob, sizes))
    api.olSyncQueue(queue)
    api.olDestroyQueue(queue)
    return fast


def _measure(sides: Sides, quick: bool) -> dict[str, Any]:
    """Best us per call of every side of every operation, the sides of one operation interleaved."""
    count, repeats = (2_000, 5) if quick else (20_000, 9)
    # The same Python loop and lambda frame wrap every side, so it cancels in the differences.
    measured: dict[str, Any] = {}
    for op, op_sides in sides.items():
        timings = {name: _per_op(count, side.body, side.after) for name, side in op_sides.items()}
        for run in timings.values():
            run()  # warm: pools, caches, the driver's lazily bound functions
        best = alternate(repeats, timings)
        measured[op] = {name: seconds * 1e6 for name, seconds in best.items()}
    return {"ops": measured, "count": count, "repeats": repeats}


def _loaded_driver(vendor: str) -> str:
    """The file of the vendor's driver library mapped into this process (from /proc/self/maps)."""
    wanted = "libcuda.so.1" if vendor == "cuda" else "libamdhip64.so"
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(wanted):
                return line.split()[-1]
    return ""


# ---- the parent: a child per vendor, and the rows ------------------------------------------------
def run_vendor(vendor: str, quick: bool, timeout: float = 300, smoke: bool = False) -> dict[str, Any]:
    """Build ``vendor``'s null driver and measure it in a child process; ``{"error": why}`` when it cannot.

    With ``smoke``, the child only checks that the plugin works over the null driver and counts
    the driver work of every side (see :func:`run_worker`).
    """
    try:
        folder = nulldriver.build(vendor)
    except nulldriver.NullDriverError as exc:
        return {"error": str(exc)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", vendor, *(["--quick"] if quick else []),
               *(["--smoke"] if smoke else [])]
    try:
        result = subprocess.run(command, env=nulldriver.environment(vendor, folder), capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"the {vendor} worker ran past {timeout:.0f} s"}
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        return {"error": f"the {vendor} worker failed (exit {result.returncode}): " + " | ".join(tail)}
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def unasked(vendor: str, measured: dict[str, Any]) -> list[str]:
    """One line per side (not the raw bindings) of each operation that made driver work it did not ask for."""
    found = []
    for op, op_counts in measured.get("counts", {}).items():
        for side, counts in op_counts.items():
            work = unasked_work(op, counts)
            if work and side != "raw":
                found.append(f"{LABELS[vendor]} {OPERATIONS[op][0]}: {SIDE_LABELS.get(side, side)} makes "
                             f"{' and '.join(work)} per op, none asked for")
    return found


def make_rows(vendor: str, measured: dict[str, Any]) -> list[dict[str, Any]]:
    """The shared-format rows of one vendor's results."""
    label = LABELS[vendor]
    rows: list[dict[str, Any]] = []
    for op, (what, raw_what, goal) in OPERATIONS.items():
        figures = measured["ops"].get(op)
        if figures is None:
            continue
        ours, raw = figures["ours"], figures["raw"]
        raw_name = RAW_NAMES[vendor][raw_what]
        rows.append(row(NAME, f"{label} {what}: offloadrt", ours, "us", raw, f"{raw_name} via the bindings, same run"))
        rows.append(row(NAME, f"{label} {what}: added by offloadrt", ours - raw, "us", goal=goal))
        if "plugin" in figures:
            rows.append(row(NAME, f"{label} {what}: added above the plugin (api + common)", ours - figures["plugin"],
                            "us"))
        if "floor" in figures:
            rows.append(row(NAME, f"{label} {what}: floor, olMemcpy's checks inline in one frame: added",
                            figures["floor"] - raw, "us"))
        if "cuda.core" in figures:
            core = figures["cuda.core"]
            rows.append(row(NAME, f"{label} {what}: cuda.core {CUDA_CORE_CALLS[op]}", core, "us", raw,
                            f"{raw_name} via the bindings, same run"))
            rows.append(row(NAME, f"{label} {what}: added by cuda.core", core - raw, "us"))
        counts = measured.get("counts", {}).get(op, {}).get("ours")
        if counts is not None:
            work = counts["events_timed"] + counts["records_timed"]
            if op != "host":
                work += counts["host_functions"]
            rows.append(row(NAME, f"{label} {what}: offloadrt's host functions + timing events per op, "
                                  "none asked for", work, "per op", goal=NO_UNASKED_WORK))
    for call, figures in measured["bindings"].items():
        rows.append(row(NAME, f"{label} bindings: {call} over the null driver", figures["bindings"], "us",
                        figures["reference"], figures["reference_what"]))
    return rows


def print_counts(vendor: str, counts: dict[str, dict[str, dict[str, float]]]) -> None:
    """The driver work per operation of every side, as a table."""
    print(f"\n{LABELS[vendor]}: driver work per operation (null-driver counts, steady state)")
    table = []
    for op, op_counts in counts.items():
        for side, c in op_counts.items():
            work = unasked_work(op, c)
            table.append((op, SIDE_LABELS.get(side, side), f"{c['host_functions']:.2f}",
                          f"{c['events_timed']:.2f}/{c['events_untimed']:.2f}",
                          f"{c['records_timed']:.2f}/{c['records_untimed']:.2f}", f"{c['launches']:.2f}",
                          f"{c['copies']:.2f}", "FLAG: " + ", ".join(work) if work and side != "raw" else ""))
    print_table(("op", "side", "host fns", "events made timed/untimed", "records timed/untimed", "launches",
                 "copies", "not asked for"), table)


def collect(quick: bool = False) -> dict[str, Any]:
    """Both vendors over their null drivers: ``rows`` in the shared format, the raw figures per vendor
    (with ``counts``: the driver work per operation), ``flags`` (work not asked for) and ``notes``."""
    rows: list[dict[str, Any]] = []
    vendors: dict[str, Any] = {}
    notes: list[str] = []
    flags: list[str] = []
    for vendor in VENDORS:
        measured = run_vendor(vendor, quick)
        vendors[vendor] = measured
        if "error" in measured:
            notes.append(f"{LABELS[vendor]}: {measured['error']}")
            continue
        rows.extend(make_rows(vendor, measured))
        notes.extend(measured.get("notes", []))
        notes.extend(f"{LABELS[vendor]}: {side} failed, not measured: {error}"
                     for side, error in measured.get("errors", {}).items())
        flags.extend(unasked(vendor, measured))
    return {"rows": rows, "vendors": vendors, "flags": flags, "notes": notes + [f"flag: {flag}" for flag in flags]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and repeats (about 10 s)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", choices=VENDORS, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.quick, args.smoke)))
        return 0
    results = collect(args.quick)
    print("offloadrt over null GPU drivers (real bindings; every driver call returns at once), us per operation")
    print_rows(results["rows"])
    for vendor, measured in results["vendors"].items():
        if "counts" in measured:
            print_counts(vendor, measured["counts"])
    print()
    for note in results["notes"]:
        print(note if note.startswith("flag: ") else f"not measured: {note}")
    write_json(args.json, results)
    return 1 if results["notes"] and not results["rows"] else 0


if __name__ == "__main__":
    sys.exit(main())
