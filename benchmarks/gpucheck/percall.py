"""The per-call step (a child process): what one call costs on a real GPU, side by side in one process.

Each operation is done ``calls`` times in a row and then synced, in ``rounds`` rounds interleaved
across its sides (wall-clock time, best round; the sync is part of the cost: a GPU runs the work
meanwhile). Operations and sides:

- launch of a 4-parameter kernel ``saxpy(float, const float *, float *, int)`` built with NVRTC, on
  32 floats: raw ``cuLaunchKernel`` (an ``extra`` buffer of the parameters' 28 bytes, packed once,
  the size ``cuFuncGetParamInfo`` gives), ``cuda.core.launch`` with a ``LaunchConfig``, a CuPy
  ``RawKernel``, ``olLaunchKernel`` with the same 28-byte blob, and ``queue.launch``;
- an 8-byte host-to-device copy from pageable NumPy memory: raw ``cuMemcpyHtoDAsync``,
  ``olMemcpy`` and ``Buffer.copy_from(array, queue=q)``;
- an event's create, record, sync and destroy: raw without timing (``CU_EVENT_DISABLE_TIMING``) and
  with it, cuda.core's ``Stream.record`` + ``Event.sync`` + ``close``, ``olCreateEvent`` +
  ``olSyncEvent`` + ``olDestroyEvent`` (plain, and with ``EventFlags.ENABLE_PROFILING`` where
  offloadrt has it), ``queue.record()`` + ``sync`` + ``close`` (and ``record(timing=True)`` where
  it exists).

Every figure is reported with its ratio to the raw call; four ratios have goals (:data:`GOALS`),
reported as met or missed, never as failures. A side that raises is a FAIL and the others go on.
"""

from __future__ import annotations

import ctypes
import inspect
import struct
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import offloadrt
from offloadrt.core import asarray
from offloadrt.core import device as find_device

from .interop import SAXPY_CU
from .results import Recorder

#: (operation, side) -> the most it may cost as a multiple of the raw call
GOALS = {("launch", "queue.launch"): 1.15, ("launch", "olLaunchKernel"): 1.1, ("copy", "Buffer.copy_from"): 1.3,
         ("event", "olCreateEvent"): 1.3}
N = 32  # floats the kernel works on: one group of 32


class Side(NamedTuple):
    """One way of doing an operation: ``body`` once; ``after`` (a sync) once after a series."""

    body: Callable[[], object]
    after: Callable[[], object] | None


def timing(count: int, side: Side) -> Callable[[], float]:
    """A run of ``count`` bodies and one ``after``: wall-clock seconds per body."""
    body, after = side.body, side.after

    def run() -> float:
        start = time.perf_counter()
        for _ in range(count):
            body()
        if after is not None:
            after()
        return (time.perf_counter() - start) / count
    return run


def _checked(result: Any, call: str) -> Any:
    """A cuda.bindings call's outputs, or RuntimeError naming the call and its status."""
    status, *outputs = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise RuntimeError(f"{call}: {status!r}")
    return outputs[0] if len(outputs) == 1 else outputs


def run(recorder: Recorder, device_spec: str, calls: int, rounds: int) -> None:
    """Measure every side of every operation on the CUDA device ``device_spec``."""
    device = find_device(device_spec)
    if device.backend != offloadrt.PlatformBackend.CUDA:
        recorder.add("SKIP", "percall", f"{device} is not a CUDA device: the per-call comparison is CUDA's "
                                        "(cuda.bindings, cuda.core, CuPy)")
        return
    ordinal = int(device_spec.partition(":")[2] or 0)
    sides = {"launch": _launch_sides(recorder, device, ordinal), "copy": _copy_sides(device, ordinal),
             "event": _event_sides(device, ordinal)}
    for op, op_sides in sides.items():
        _measure(recorder, op, op_sides, calls, rounds)


def _measure(recorder: Recorder, op: str, sides: dict[str, Side | str], calls: int, rounds: int) -> None:
    """Time the sides of ``op`` (a str side is a reason it cannot run: SKIP) and record each."""
    runs: dict[str, Callable[[], float]] = {}
    for name, side in sides.items():
        if isinstance(side, str):
            recorder.add("SKIP", f"percall.{op}.{name}", side)
            continue
        try:
            timing(max(1, calls // 10), side)()  # warm: the driver's lazy loading, pools, caches
        except Exception as exc:  # noqa: BLE001  # this side fails; the others are still measured
            recorder.add("FAIL", f"percall.{op}.{name}", f"{type(exc).__name__}: {exc}")
            continue
        runs[name] = timing(calls, side)
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run_side in runs.items():
            best[name] = min(best[name], run_side())
    raw = best.get("raw")
    for name, seconds in best.items():
        us = seconds * 1e6
        figures: dict[str, Any] = {"us": us, "calls": calls, "rounds": rounds}
        detail = f"{us:.2f} us/call"
        if raw is not None and name != "raw":
            ratio = seconds / raw
            figures["ratio"] = ratio
            detail += f", {ratio:.2f}x raw"
            goal = GOALS.get((op, name))
            if goal is not None:
                figures.update(goal=goal, goal_met=ratio <= goal)
                detail += f" (goal <= {goal}x: {'met' if ratio <= goal else 'missed'})"
        elif name == "raw":
            detail += " (the floor)"
        recorder.add("PASS", f"percall.{op}.{name}", detail, **figures)


def _raw_context(ordinal: int) -> Any:
    """Make the device's primary context (the one offloadrt, cuda.core and CuPy use) current here."""
    from cuda.bindings import driver as cu  # type: ignore[import-untyped]  # noqa: PLC0415

    device = _checked(cu.cuDeviceGet(ordinal), "cuDeviceGet")
    context = _checked(cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
    _checked(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    return cu


def _launch_sides(recorder: Recorder, device: Any, ordinal: int) -> dict[str, Side | str]:
    from offloadrt import Dimensions, KernelLaunchSizeArgs, api  # noqa: PLC0415
    from offloadrt.compile import build, target_of  # noqa: PLC0415

    compiled = build(SAXPY_CU, lang="cuda", target=target_of(device))
    ptx = compiled.image
    x = asarray(np.ones(N, np.float32), device)
    y = asarray(np.ones(N, np.float32), device)
    a, n = np.float32(2.0), np.int32(N)
    sides: dict[str, Side | str] = {}
    _keep.extend([x, y])

    cu = _raw_context(ordinal)
    module = _checked(cu.cuModuleLoadData(ptx), "cuModuleLoadData")
    function = _checked(cu.cuModuleGetFunction(module, b"saxpy"), "cuModuleGetFunction")
    _record_layout(recorder, cu, function)
    blob = struct.pack("<f4xQQi", 2.0, x.ptr, y.ptr, N)  # 28 bytes: up to the last parameter's end
    blob_buffer = ctypes.create_string_buffer(blob, len(blob))
    size = ctypes.c_size_t(len(blob))
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(blob_buffer), 2, ctypes.addressof(size), 0)
    _keep.extend([blob_buffer, size, extra])
    extra_address = ctypes.addressof(extra)
    stream = _checked(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    launch, sync = cu.cuLaunchKernel, cu.cuStreamSynchronize
    _checked(launch(function, 1, 1, 1, N, 1, 1, 0, stream, None, extra_address), "cuLaunchKernel")  # the blob works
    _checked(sync(stream), "cuStreamSynchronize")
    sides["raw"] = Side(lambda: launch(function, 1, 1, 1, N, 1, 1, 0, stream, None, extra_address),
                        lambda: _checked(sync(stream), "cuStreamSynchronize"))

    sides["cuda.core"] = _cuda_core_launch(ordinal, ptx, a, x.ptr, y.ptr, n)
    sides["cupy"] = _cupy_launch(ordinal, a, n)

    ol_queue = device.queue()
    _keep.append(ol_queue)
    sizes = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(N, 1, 1))
    queue_handle, device_handle, kernel_handle = ol_queue.handle, device.handle, device.load(ptx).kernel("saxpy").handle
    ol_launch = api.olLaunchKernel
    sides["olLaunchKernel"] = Side(lambda: ol_launch(queue_handle, device_handle, kernel_handle, blob, sizes),
                                   lambda: api.olSyncQueue(queue_handle))

    queue = device.queue()
    kernel = device.load(ptx).kernel("saxpy")
    kernel.signature = compiled.kernels["saxpy"] or ("float32", "ptr", "ptr", "int32")
    _keep.extend([queue, kernel])
    sides["queue.launch"] = Side(lambda: queue.launch(kernel, 1, N, 2.0, x, y, N), queue.sync)
    return sides


def _record_layout(recorder: Recorder, cu: Any, function: Any) -> None:
    """What ``cuFuncGetParamInfo`` says of saxpy's parameters, against what an H100 answered."""
    if not hasattr(cu, "cuFuncGetParamInfo"):
        recorder.add("SKIP", "percall.param-info", "this cuda.bindings has no cuFuncGetParamInfo")
        return
    layout = []
    for index in range(8):
        status, offset, size = cu.cuFuncGetParamInfo(function, index)
        if int(status) != 0:
            break
        layout.append((int(offset), int(size)))
    shown = " ".join(f"({offset},{size})" for offset, size in layout)
    recorder.add("PASS" if layout == [(0, 4), (8, 8), (16, 8), (24, 4)] else "FAIL", "percall.param-info",
                 f"cuFuncGetParamInfo of saxpy(float, const float*, float*, int): {shown} "
                 "(expected (0,4) (8,8) (16,8) (24,4))", layout=layout)


def _cuda_core_launch(ordinal: int, ptx: bytes, a: Any, x: int, y: int, n: Any) -> Side | str:
    try:
        from cuda.core import Device, LaunchConfig, ObjectCode, launch  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError as exc:
        return f"cuda.core is not installed: {exc}"
    core = Device(ordinal)
    core.set_current()
    stream = core.create_stream()
    kernel = ObjectCode.from_ptx(ptx).get_kernel("saxpy")
    config = LaunchConfig(grid=1, block=N)
    _keep.extend([stream, kernel, config])
    return Side(lambda: launch(stream, config, kernel, a, x, y, n), stream.sync)


def _cupy_launch(ordinal: int, a: Any, n: Any) -> Side | str:
    try:
        import cupy  # type: ignore[import-not-found]  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001  # ImportError, or a CuPy that cannot find its CUDA
        return f"CuPy is not usable here: {type(exc).__name__}: {exc}"
    cupy.cuda.Device(ordinal).use()
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.use()  # RawKernel launches on the current stream
    kernel = cupy.RawKernel(SAXPY_CU, "saxpy")
    x, y = cupy.ones(N, dtype=cupy.float32), cupy.ones(N, dtype=cupy.float32)
    _keep.extend([stream, kernel, x, y])
    grid, block, args = (1,), (N,), (a, x, y, n)
    return Side(lambda: kernel(grid, block, args), stream.synchronize)


def _copy_sides(device: Any, ordinal: int) -> dict[str, Side | str]:
    from offloadrt import api  # noqa: PLC0415

    cu = _raw_context(ordinal)
    source = np.zeros(1, np.float64)  # 8 bytes of pageable NumPy memory
    buffer = device.allocate(8)
    host = find_device("host")
    stream = _checked(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    ol_queue, queue = device.queue(), device.queue()
    _keep.extend([source, buffer, ol_queue, queue])
    dptr, hptr, htod, sync = buffer.ptr, source.ctypes.data, cu.cuMemcpyHtoDAsync, cu.cuStreamSynchronize
    queue_handle, device_handle, host_handle, ol_memcpy = ol_queue.handle, device.handle, host.handle, api.olMemcpy
    return {
        "raw": Side(lambda: htod(dptr, hptr, 8, stream), lambda: _checked(sync(stream), "cuStreamSynchronize")),
        "olMemcpy": Side(lambda: ol_memcpy(queue_handle, dptr, device_handle, hptr, host_handle, 8),
                         lambda: api.olSyncQueue(queue_handle)),
        "Buffer.copy_from": Side(lambda: buffer.copy_from(source, queue=queue), queue.sync),
    }


def _event_sides(device: Any, ordinal: int) -> dict[str, Side | str]:
    from offloadrt import api  # noqa: PLC0415

    cu = _raw_context(ordinal)
    stream = _checked(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    untimed, timed = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING, cu.CUevent_flags.CU_EVENT_DEFAULT

    def raw_event(flags: Any) -> Callable[[], None]:
        create, record, sync, destroy = cu.cuEventCreate, cu.cuEventRecord, cu.cuEventSynchronize, cu.cuEventDestroy

        def cycle() -> None:
            event = create(flags)[1]
            record(event, stream)
            sync(event)
            destroy(event)
        return cycle

    sides: dict[str, Side | str] = {"raw": Side(raw_event(untimed), None), "raw-timed": Side(raw_event(timed), None)}
    sides["cuda.core"] = _cuda_core_event(ordinal)
    ol_queue, queue = device.queue(), device.queue()
    _keep.extend([ol_queue, queue])
    queue_handle = ol_queue.handle
    create, sync, destroy = api.olCreateEvent, api.olSyncEvent, api.olDestroyEvent

    def ol_event(*flags: Any) -> Callable[[], None]:
        def cycle() -> None:
            event = create(queue_handle, *flags)
            sync(event)
            destroy(event)
        return cycle

    sides["olCreateEvent"] = Side(ol_event(), None)
    profiling = getattr(getattr(offloadrt, "EventFlags", None), "ENABLE_PROFILING", None)
    sides["olCreateEvent-profiling"] = (Side(ol_event(profiling), None) if profiling is not None else
                                        "offloadrt has no EventFlags.ENABLE_PROFILING (olCreateEvent takes no flags)")

    def record(**options: Any) -> Callable[[], None]:
        def cycle() -> None:
            event = queue.record(**options)
            event.sync()
            event.close()
        return cycle

    sides["queue.record"] = Side(record(), None)
    takes_timing = "timing" in inspect.signature(queue.record).parameters
    sides["queue.record-timing"] = (Side(record(timing=True), None) if takes_timing else
                                    "Queue.record takes no timing argument in this offloadrt")
    return sides


def _cuda_core_event(ordinal: int) -> Side | str:
    try:
        from cuda.core import Device  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError as exc:
        return f"cuda.core is not installed: {exc}"
    core = Device(ordinal)
    core.set_current()
    stream = core.create_stream()
    _keep.append(stream)

    def cycle() -> None:
        event = stream.record()  # cuda.core's events take no timestamp unless asked (EventOptions)
        event.sync()
        event.close()
    return Side(cycle, None)


_keep: list[object] = []  # what the sides' driver calls point into, alive until the process ends
