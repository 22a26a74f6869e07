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
32-byte blob, 8-byte H2D and D2H copies, queue create+destroy, event create+record+sync+destroy,
an idle queue sync, and a host function (enqueued, then run at the next sync).

Also measured: what the bindings themselves cost per call over the null driver (argument
conversion and the result tuple), against a ctypes call of the same C entry point; and, for the
copies, a floor: olMemcpy's checks done inline in one Python frame around the same bindings call
(nothing looked up), which is what any copy that keeps those checks costs at the least in CPython.

Goals (issue 13): at most 1 us added per launch, at most 0.5 us per copy or event call.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import nulldriver  # noqa: E402
from _report import alternate, print_rows, row, write_json  # noqa: E402

NAME = "gpu-overhead"
VENDORS = ("cuda", "hip")
LABELS = {"cuda": "CUDA", "hip": "AMDGPU"}
LAUNCH_GOAL = "<= 1 us added"
CALL_GOAL = "<= 0.5 us added"
#: operation -> (what the row says, the raw calls it is compared with, goal of the added us)
OPERATIONS: dict[str, tuple[str, str, str | None]] = {
    "launch": ("queued launch, 32-byte blob", "launch", LAUNCH_GOAL),
    "h2d": ("8-byte copy H2D, queued", "memcpy H2D", CALL_GOAL),
    "d2h": ("8-byte copy D2H, queued", "memcpy D2H", CALL_GOAL),
    "queue": ("queue create+destroy", "stream create+destroy", None),
    "event": ("event create+record+sync+destroy", "event create+record+sync+destroy", CALL_GOAL),
    "sync": ("idle olSyncQueue", "stream sync", None),
    "host": ("host function (enqueue, run at sync)", "host function + ctypes callback", None),
}
RAW_NAMES = {
    "cuda": {"launch": "cuLaunchKernel", "memcpy H2D": "cuMemcpyHtoDAsync", "memcpy D2H": "cuMemcpyDtoHAsync",
             "stream create+destroy": "cuStreamCreate+cuStreamDestroy", "stream sync": "cuStreamSynchronize",
             "event create+record+sync+destroy": "cuEventCreate+Record+Synchronize+Destroy",
             "host function + ctypes callback": "cuLaunchHostFunc + ctypes callback"},
    "hip": {"launch": "hipModuleLaunchKernel", "memcpy H2D": "hipMemcpyHtoDAsync", "memcpy D2H": "hipMemcpyDtoHAsync",
            "stream create+destroy": "hipStreamCreateWithFlags+hipStreamDestroy",
            "stream sync": "hipStreamSynchronize",
            "event create+record+sync+destroy": "hipEventCreateWithFlags+Record+Synchronize+Destroy",
            "host function + ctypes callback": "hipLaunchHostFunc + ctypes callback"},
}


# ---- the child: one vendor over its null driver -------------------------------------------------
class _Raw:
    """The bare driver calls of one vendor, through the same bindings module the plugin uses."""

    def __init__(self, vendor: str, d: Any) -> None:
        self.d = d
        if vendor == "cuda":
            self.launch = d.cuLaunchKernel
            self.htod, self.dtoh = d.cuMemcpyHtoDAsync, d.cuMemcpyDtoHAsync
            flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING
            event_flags = d.CUevent_flags.CU_EVENT_DEFAULT
            self.stream_create = lambda: d.cuStreamCreate(flags)
            self.stream_destroy, self.stream_sync = d.cuStreamDestroy, d.cuStreamSynchronize
            self.event_create = lambda: d.cuEventCreate(event_flags)
            self.event_record, self.event_sync, self.event_destroy = (d.cuEventRecord, d.cuEventSynchronize,
                                                                       d.cuEventDestroy)
            self.host_func = d.cuLaunchHostFunc
            self.host_fn_type: Callable[[int], Any] = d.CUhostFn
            self.markers = (1, 2, 0)
        else:
            self.launch = d.hipModuleLaunchKernel
            self.htod, self.dtoh = d.hipMemcpyHtoDAsync, d.hipMemcpyDtoHAsync
            flags, event_flags = d.hipStreamNonBlocking, d.hipEventDefault
            self.stream_create = lambda: d.hipStreamCreateWithFlags(flags)
            self.stream_destroy, self.stream_sync = d.hipStreamDestroy, d.hipStreamSynchronize
            self.event_create = lambda: d.hipEventCreateWithFlags(event_flags)
            self.event_record, self.event_sync, self.event_destroy = (d.hipEventRecord, d.hipEventSynchronize,
                                                                       d.hipEventDestroy)
            self.host_func = d.hipLaunchHostFunc
            from offloadrt.plugins.amdgpu.driver import host_function  # noqa: PLC0415

            self.host_fn_type = lambda address: host_function(d, address)  # hipHostFn_t, made once
            self.markers = (1, 2, 3)
        self.vendor = vendor

    def prepare(self, extra_address: int) -> tuple[Any, Any]:
        """The cheapest ``extra`` and ``kernelParams`` arguments the bindings take for a launch."""
        if self.vendor == "cuda":
            return extra_address, None
        from offloadrt.plugins.amdgpu.driver import launch_wrappers  # noqa: PLC0415

        wrap, no_params = launch_wrappers(self.d)
        return (extra_address if wrap is None else wrap(extra_address)), no_params


def _collect(found: list[Any], item: Any) -> bool:
    """An olIterateDevices callback: keep ``item``, go on."""
    found.append(item)
    return True


def _per_op(count: int, body: Callable[[], None], after: Callable[[], Any] | None = None) -> Callable[[], float]:
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
    """Measure ``vendor``'s plugin over the null driver this process was started with; with
    ``smoke``, only make one launch, one copy each way and one host function, and say how it went."""
    if os.environ.get("OFFLOADRT_NULL_DRIVER") != vendor:
        raise SystemExit(f"the {vendor} worker must run in a child started by collect() (over the null driver)")
    # Only the vendor measured may start: the other's bindings are hidden (a real driver stays unloaded).
    for module in (("hip", "rocm.bindings.hip") if vendor == "cuda" else ("cuda.bindings.driver",)):
        sys.modules[module] = None  # type: ignore[assignment]
    if vendor == "hip":
        nulldriver.set_hip_device_properties(Path(os.environ["ROCM_PATH"]))

    from offloadrt import (  # noqa: PLC0415
        AllocType,
        DeviceInfo,
        Dimensions,
        KernelLaunchSizeArgs,
        PlatformBackend,
        PlatformInfo,
        SymbolKind,
        api,
    )

    backend = PlatformBackend.CUDA if vendor == "cuda" else PlatformBackend.AMDGPU
    api.olInit()
    try:
        devices: list[Any] = []
        api.olIterateDevices(lambda dev, _: _collect(devices, dev))
        by_backend = {api.olGetPlatformInfo(api.olGetDeviceInfo(dev, DeviceInfo.PLATFORM), PlatformInfo.BACKEND): dev
                      for dev in devices}
        device, host = by_backend.get(backend), by_backend[PlatformBackend.HOST]
        if device is None:
            raise SystemExit(f"the {LABELS[vendor]} plugin did not start over the null driver")
        name = api.olGetDeviceInfo(device, DeviceInfo.PRODUCT_NAME)
        if not str(name).startswith("Null"):
            raise SystemExit(f"refusing to measure {name!r}: not the null driver's device")
        gdev = device._gdev
        raw = _Raw(vendor, gdev.d)
        image = nulldriver.CUDA_PTX if vendor == "cuda" else nulldriver.hip_code_object()
        program = api.olCreateProgram(device, image)
        kernel = api.olGetSymbol(program, "empty", SymbolKind.KERNEL)
        queue = api.olCreateQueue(device)
        ai = queue._ai
        sizes = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(32, 1, 1))
        blob = bytes(range(32))
        dptr = api.olMemAlloc(device, AllocType.DEVICE, 64)
        host_buffer = ctypes.create_string_buffer(64)
        hptr = ctypes.addressof(host_buffer)
        if smoke:
            ran: list[object] = []
            api.olLaunchKernel(queue, device, kernel, blob, sizes)
            api.olMemcpy(queue, dptr, device, hptr, host, 8)
            api.olMemcpy(queue, hptr, host, dptr, device, 8)
            api.olLaunchHostFunction(queue, ran.append, "host function")
            api.olSyncQueue(queue)
            api.olDestroyQueue(queue)
            api.olMemFree(dptr)
            return {"device": str(name), "ran": ran, "library": _loaded_driver(vendor),
                    "fast_after_restart": _fast_after_restart(api, backend, image, blob, sizes)}
        results = _measure(vendor, api, raw, gdev, device, host, kernel, queue, ai, sizes, blob, dptr, hptr, quick)
        results["bindings"] = _bindings_costs(vendor, raw, kernel._target.function, dptr, hptr, quick)
        results["device"] = str(name)
        api.olMemFree(dptr)
        api.olDestroyQueue(queue)
        api.olDestroyProgram(program)
    finally:
        api.olShutDown()
    return results


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


def _measure(vendor: str, api: Any, raw: _Raw, gdev: Any, device: Any, host: Any, kernel: Any, queue: Any, ai: Any,
             sizes: Any, blob: bytes, dptr: int, hptr: int, quick: bool) -> dict[str, Any]:
    count, repeats = (2_000, 5) if quick else (20_000, 9)
    target = kernel._target
    function = target.function
    ok, raw_stream = raw.stream_create()[:2]
    assert int(ok) == 0
    # The raw launch gets what a careful caller would hand the driver: an ``extra`` array packed once
    # (for hip-python, in its own wrapper type, with its NULL for kernelParams: see raw.prepare).
    size = ctypes.c_size_t(len(blob))
    blob_buffer = ctypes.create_string_buffer(blob, len(blob))
    extra = (ctypes.c_void_p * 5)(raw.markers[0], ctypes.addressof(blob_buffer), raw.markers[1],
                                  ctypes.addressof(size), raw.markers[2])
    extra_argument, no_params = raw.prepare(ctypes.addressof(extra))
    launch, htod, dtoh = raw.launch, raw.htod, raw.dtoh
    stream_sync = raw.stream_sync
    ol_launch, ol_memcpy, ol_sync = api.olLaunchKernel, api.olMemcpy, api.olSyncQueue

    def noop(_data: object) -> None:
        return None

    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(noop)
    callback_arg = raw.host_fn_type(ctypes.cast(callback, ctypes.c_void_p).value or 0)
    ng, gs = (1, 1, 1), (32, 1, 1)

    def raw_queue() -> None:
        stream = raw.stream_create()[1]
        raw.stream_destroy(stream)

    def raw_event() -> None:
        event = raw.event_create()[1]
        raw.event_record(event, raw_stream)
        raw.event_sync(event)
        raw.event_destroy(event)

    # The "plugin" side calls the GPU plugin's hooks directly (its fast path for launches): what
    # the ol* call costs beyond that lies above the plugin (offloadrt.api and plugins/common).
    def plugin_queue() -> None:  # what olCreateQueue + olDestroyQueue ask of the backend queue
        backend_queue = gdev.init_async_info()
        gdev._has_pending_work_impl(backend_queue)
        gdev._synchronize_impl(backend_queue)
        gdev.queue_pool.release(backend_queue)

    def plugin_event() -> None:
        event = gdev._create_event_impl()
        gdev._record_event_impl(event, ai)
        gdev._sync_event_impl(event)
        gdev._destroy_event_impl(event)

    def ol_event() -> None:
        event = api.olCreateEvent(queue)
        api.olSyncEvent(event)
        api.olDestroyEvent(event)

    floor_copy = _copy_floor(queue, host, dptr, htod, dtoh)
    launcher = kernel._launch
    if launcher is not None:
        def plugin_launch() -> None:
            launcher(ai, blob, sizes)
    else:
        def plugin_launch() -> None:
            gdev._launch_impl(target, blob, ng, gs, 0, ai)

    sides: dict[str, dict[str, Callable[[], float]]] = {
        "launch": {
            "ours": _per_op(count, lambda: ol_launch(queue, device, kernel, blob, sizes), lambda: ol_sync(queue)),
            "plugin": _per_op(count, plugin_launch, lambda: ol_sync(queue)),
            "raw": _per_op(count, lambda: launch(function, 1, 1, 1, 32, 1, 1, 0, raw_stream, no_params, extra_argument),
                           lambda: stream_sync(raw_stream)),
        },
        "h2d": {
            "ours": _per_op(count, lambda: ol_memcpy(queue, dptr, device, hptr, host, 8), lambda: ol_sync(queue)),
            "plugin": _per_op(count, lambda: gdev._data_submit_impl(dptr, hptr, 8, ai), lambda: ol_sync(queue)),
            "raw": _per_op(count, lambda: htod(dptr, hptr, 8, raw_stream), lambda: stream_sync(raw_stream)),
            "floor": _per_op(count, lambda: floor_copy(queue, dptr, device, hptr, host, 8), lambda: ol_sync(queue)),
        },
        "d2h": {
            "ours": _per_op(count, lambda: ol_memcpy(queue, hptr, host, dptr, device, 8), lambda: ol_sync(queue)),
            "plugin": _per_op(count, lambda: gdev._data_retrieve_impl(hptr, dptr, 8, ai), lambda: ol_sync(queue)),
            "raw": _per_op(count, lambda: dtoh(hptr, dptr, 8, raw_stream), lambda: stream_sync(raw_stream)),
            "floor": _per_op(count, lambda: floor_copy(queue, hptr, host, dptr, device, 8), lambda: ol_sync(queue)),
        },
        "queue": {
            "ours": _per_op(count, lambda: api.olDestroyQueue(api.olCreateQueue(device))),
            "plugin": _per_op(count, plugin_queue),
            "raw": _per_op(count, raw_queue),
        },
        "event": {
            "ours": _per_op(count, ol_event),
            "plugin": _per_op(count, plugin_event),
            "raw": _per_op(count, raw_event),
        },
        "sync": {
            "ours": _per_op(count, lambda: ol_sync(queue)),
            "plugin": _per_op(count, lambda: gdev._synchronize_impl(ai)),
            "raw": _per_op(count, lambda: stream_sync(raw_stream)),
        },
        "host": {
            "ours": _per_op(count, lambda: api.olLaunchHostFunction(queue, noop, None), lambda: ol_sync(queue)),
            "plugin": _per_op(count, lambda: gdev._enqueue_host_call_impl(noop, None, ai), lambda: ol_sync(queue)),
            "raw": _per_op(count, lambda: raw.host_func(raw_stream, callback_arg, 1),
                           lambda: stream_sync(raw_stream)),
        },
    }
    # The same Python loop and lambda frame wrap every side, so it cancels in the differences.
    measured: dict[str, Any] = {}
    for op, timings in sides.items():
        for run in timings.values():
            run()  # warm: pools, caches, the driver's lazily bound functions
        best = alternate(repeats, timings)
        measured[op] = {side: seconds * 1e6 for side, seconds in best.items()}
    raw.stream_destroy(raw_stream)
    return {"ops": measured, "count": count, "repeats": repeats}


def _copy_floor(queue: Any, host: Any, dptr: int, htod: Any, dtoh: Any) -> Callable[..., None]:
    """What a copy that keeps olMemcpy's checks costs at the least in CPython: one frame with
    olMemcpy's parameters doing them inline around the same bindings call, with nothing to look up
    (the spans of both sides, the queue's device and the host device known beforehand). The checks:
    the runtime is up, the argument types, a positive size, the queue's device on one side and the
    host on the other, both sides within their spans (which also bounds the pointers and the size),
    the queue alive and not failed, the device current on this thread (a ``threading.local``, as the
    plugins keep it), then the driver's status."""
    queue_type = type(queue)
    spans = (dptr, dptr + 64, 1, 1 << 64)  # the device allocation; the host memory around no allocation
    thread = threading.local()
    thread.token = token = object()
    runtime = [queue]  # stands for "initialised and untraced": one attribute read and test

    def floor(q: Any, dst: Any, dst_device: Any, src: Any, src_device: Any, size: Any) -> None:
        up = runtime[0]
        if (up is not None and type(q) is queue_type and type(dst) is int and type(src) is int and type(size) is int
                and size > 0):
            performer = q.device
            if dst_device is performer:
                call, device_at, host_at, host_side = htod, dst, src, src_device
            else:
                call, device_at, host_at = dtoh, src, dst
                host_side = dst_device if src_device is performer else None
            if host_side is host:
                device_low, device_high, host_low, host_high = spans
                if (device_low <= device_at and device_at + size <= device_high and host_low <= host_at
                        and host_at + size <= host_high):
                    backend = q._ai
                    if backend is not None and backend.failure is None and thread.token is token:
                        result = call(dst, src, size, backend.stream)
                        if not result[0]:
                            return
        raise RuntimeError("the copy floor's checks did not pass")

    return floor


def _bindings_costs(vendor: str, raw: _Raw, function: Any, dptr: int, hptr: int, quick: bool) -> dict[str, Any]:
    """The bindings' own cost per call over the null driver, against ctypes calls of the same C entry points."""
    count, repeats = (5_000, 5) if quick else (50_000, 9)
    stream = raw.stream_create()[1]
    if vendor == "cuda":
        library = ctypes.CDLL("libcuda.so.1")
        library.null_entry_point.restype = ctypes.c_void_p

        def entry(name: str, *argtypes: Any) -> Any:
            address = library.null_entry_point(name.encode())
            return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(address)
        names = ("cuLaunchKernel", "cuMemcpyHtoDAsync", "cuStreamSynchronize")
    else:
        library = ctypes.CDLL(str(nulldriver.library_path("hip", Path(os.environ["ROCM_PATH"]))))

        def entry(name: str, *argtypes: Any) -> Any:
            fn = getattr(library, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes
            return fn
        names = ("hipModuleLaunchKernel", "hipMemcpyHtoDAsync", "hipStreamSynchronize")
    vp, u32, sz = ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t
    c_launch = entry(names[0], vp, u32, u32, u32, u32, u32, u32, u32, vp, vp, vp)
    c_copy = entry(names[1], ctypes.c_uint64, vp, sz, vp)
    c_sync = entry(names[2], vp)
    function_address, stream_address = int(function), int(stream)
    launch, htod, sync = raw.launch, raw.htod, raw.stream_sync
    bare = "ctypes call of the same C entry point"
    objects = f"{names[0]} given the bindings' handle objects"
    extra = (ctypes.c_void_p * 5)(raw.markers[0], hptr, raw.markers[1], ctypes.addressof(ctypes.c_size_t(8)),
                                  raw.markers[2])
    extra_address = ctypes.addressof(extra)
    extra_argument, no_params = raw.prepare(extra_address)
    pairs = {
        names[0]: (lambda: launch(function, 1, 1, 1, 32, 1, 1, 0, stream, None, 0),
                   lambda: c_launch(function_address, 1, 1, 1, 32, 1, 1, 0, stream_address, None, None), bare),
        f"{names[0]} given int handles": (
            lambda: launch(function_address, 1, 1, 1, 32, 1, 1, 0, stream_address, None, 0),
            lambda: launch(function, 1, 1, 1, 32, 1, 1, 0, stream, None, 0), objects),
        names[1]: (lambda: htod(dptr, hptr, 8, stream), lambda: c_copy(dptr, hptr, 8, stream_address), bare),
        names[2]: (lambda: sync(stream), lambda: c_sync(stream_address), bare),
    }
    if vendor == "hip":  # hip-python converts an int extra on every call; a prepared wrapper costs less
        pairs[f"{names[0]} given an int extra address"] = (
            lambda: launch(function, 1, 1, 1, 32, 1, 1, 0, stream, None, extra_address),
            lambda: launch(function, 1, 1, 1, 32, 1, 1, 0, stream, no_params, extra_argument),
            "the same given hip-python's own extra and kernelParams types, prepared once")
    costs: dict[str, Any] = {}
    for call, (binding, reference, reference_what) in pairs.items():
        timings = {"bindings": _per_op(count, binding), "reference": _per_op(count, reference)}
        for run in timings.values():
            run()
        best = alternate(repeats, timings)
        costs[call] = {**{side: seconds * 1e6 for side, seconds in best.items()}, "reference_what": reference_what}
    raw.stream_destroy(stream)
    return costs


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

    With ``smoke``, the child only checks that the plugin works over the null driver (see :func:`run_worker`).
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


def make_rows(vendor: str, measured: dict[str, Any]) -> list[dict[str, Any]]:
    label = LABELS[vendor]
    rows: list[dict[str, Any]] = []
    for op, (what, raw_what, goal) in OPERATIONS.items():
        figures = measured["ops"][op]
        ours, plugin, raw = figures["ours"], figures["plugin"], figures["raw"]
        raw_name = RAW_NAMES[vendor][raw_what]
        rows.append(row(NAME, f"{label} {what}: offloadrt", ours, "us", raw, f"{raw_name} via the bindings, same run"))
        rows.append(row(NAME, f"{label} {what}: added by offloadrt", ours - raw, "us", goal=goal))
        rows.append(row(NAME, f"{label} {what}: added above the plugin (api + common)", ours - plugin, "us"))
        if "floor" in figures:
            rows.append(row(NAME, f"{label} {what}: floor, olMemcpy's checks inline in one frame: added",
                            figures["floor"] - raw, "us"))
    for call, figures in measured["bindings"].items():
        rows.append(row(NAME, f"{label} bindings: {call} over the null driver", figures["bindings"], "us",
                        figures["reference"], figures["reference_what"]))
    return rows


def collect(quick: bool = False) -> dict[str, Any]:
    """Both vendors over their null drivers: ``rows`` in the shared format, the raw figures per vendor."""
    rows: list[dict[str, Any]] = []
    vendors: dict[str, Any] = {}
    notes: list[str] = []
    for vendor in VENDORS:
        measured = run_vendor(vendor, quick)
        vendors[vendor] = measured
        if "error" in measured:
            notes.append(f"{LABELS[vendor]}: {measured['error']}")
            continue
        rows.extend(make_rows(vendor, measured))
    return {"rows": rows, "vendors": vendors, "notes": notes}


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
    for note in results["notes"]:
        print(f"not measured: {note}")
    write_json(args.json, results)
    return 1 if results["notes"] and not results["rows"] else 0


if __name__ == "__main__":
    sys.exit(main())
