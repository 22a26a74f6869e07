"""What bench_gpu_overhead.py's worker measures over a null driver: each operation's sides, and the
driver work each side makes.

A *side* is one way of doing an operation: ``(body, after)``, where ``body`` is one operation and
``after`` (or None) what is run once after a series of them (a sync, so that queued work is done).
For every operation the worker has the bare driver call through the bindings (``raw``) and
offloadrt's call (``ours``); most also the plugin's hooks called directly (``plugin``), and for
CUDA ``cuda.core``'s call of the same thing, over the same null driver (``cuda.core``).

:func:`count_work` reads the null library's counters around a series of one side, so a report can
say per operation how many host functions and timing events it made where none was asked for.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import nulldriver


class Side(NamedTuple):
    """One way of doing an operation: ``body`` does it once; ``after`` finishes a series of them."""

    body: Callable[[], object]
    after: Callable[[], object] | None = None


Sides = dict[str, dict[str, Side]]

#: what an operation asks the driver for (no operation asks for a timestamp)
HOST_FUNCTION_OPS = frozenset({"host"})


class Raw:
    """The bare driver calls of one vendor, through the same bindings module the plugin uses."""

    def __init__(self, vendor: str, d: Any) -> None:
        self.d = d
        self.vendor = vendor
        if vendor == "cuda":
            self.launch = d.cuLaunchKernel
            self.htod, self.dtoh = d.cuMemcpyHtoDAsync, d.cuMemcpyDtoHAsync
            flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING
            untimed = d.CUevent_flags.CU_EVENT_DISABLE_TIMING
            self.stream_create = lambda: d.cuStreamCreate(flags)
            self.stream_destroy, self.stream_sync = d.cuStreamDestroy, d.cuStreamSynchronize
            self.event_create = lambda: d.cuEventCreate(untimed)
            self.event_record, self.event_sync, self.event_destroy = (d.cuEventRecord, d.cuEventSynchronize,
                                                                       d.cuEventDestroy)
            self.host_func = d.cuLaunchHostFunc
            self.host_fn_type: Callable[[int], Any] = d.CUhostFn
            self.markers = (1, 2, 0)
        else:
            self.launch = d.hipModuleLaunchKernel
            self.htod, self.dtoh = d.hipMemcpyHtoDAsync, d.hipMemcpyDtoHAsync
            flags, untimed = d.hipStreamNonBlocking, d.hipEventDisableTiming
            self.stream_create = lambda: d.hipStreamCreateWithFlags(flags)
            self.stream_destroy, self.stream_sync = d.hipStreamDestroy, d.hipStreamSynchronize
            self.event_create = lambda: d.hipEventCreateWithFlags(untimed)
            self.event_record, self.event_sync, self.event_destroy = (d.hipEventRecord, d.hipEventSynchronize,
                                                                       d.hipEventDestroy)
            self.host_func = d.hipLaunchHostFunc
            from offloadrt.plugins.amdgpu.driver import host_function  # noqa: PLC0415

            self.host_fn_type = lambda address: host_function(d, address)  # hipHostFn_t, made once
            self.markers = (1, 2, 3)

    def prepare(self, extra_address: int) -> tuple[Any, Any]:
        """The cheapest ``extra`` and ``kernelParams`` arguments the bindings take for a launch."""
        if self.vendor == "cuda":
            return extra_address, None
        from offloadrt.plugins.amdgpu.driver import launch_wrappers  # noqa: PLC0415

        wrap, no_params = launch_wrappers(self.d)
        return (extra_address if wrap is None else wrap(extra_address)), no_params


class Setup(NamedTuple):
    """What the worker made before measuring: the ol* handles and the plugin's objects behind them."""

    api: Any
    raw: Raw
    gdev: Any  # the plugin's device
    device: Any  # the ol* device and the host device
    host: Any
    kernel: Any
    queue: Any
    ai: Any  # the queue's backend queue (AsyncInfo)
    sizes: Any  # KernelLaunchSizeArgs of one group of 32
    blob: bytes
    dptr: int  # 64 bytes of device memory
    hptr: int  # 64 bytes of pageable host memory


def noop(_data: object) -> None:
    """A host function that does nothing."""
    return None


def offloadrt_sides(s: Setup, raw_stream: Any, keep: list[object]) -> Sides:
    """The raw, plugin and ``ol*`` sides of every operation but the Python layer's (``keep`` holds
    what must outlive the measurement: the raw launch's ``extra`` array, the ctypes callback)."""
    api, raw, gdev, ai = s.api, s.raw, s.gdev, s.ai
    queue, device, host, kernel, sizes, blob, dptr, hptr = (s.queue, s.device, s.host, s.kernel, s.sizes, s.blob,
                                                            s.dptr, s.hptr)
    # The raw launch gets what a careful caller would hand the driver: an ``extra`` array packed once
    # (for hip-python, in its own wrapper type, with its NULL for kernelParams: see Raw.prepare).
    size = ctypes.c_size_t(len(blob))
    blob_buffer = ctypes.create_string_buffer(blob, len(blob))
    extra = (ctypes.c_void_p * 5)(raw.markers[0], ctypes.addressof(blob_buffer), raw.markers[1],
                                  ctypes.addressof(size), raw.markers[2])
    extra_argument, no_params = raw.prepare(ctypes.addressof(extra))
    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(noop)
    callback_arg = raw.host_fn_type(ctypes.cast(callback, ctypes.c_void_p).value or 0)
    keep += [size, blob_buffer, extra, callback, callback_arg]
    function = kernel._target.function
    launch, htod, dtoh, stream_sync = raw.launch, raw.htod, raw.dtoh, raw.stream_sync
    ol_launch, ol_memcpy, ol_sync = api.olLaunchKernel, api.olMemcpy, api.olSyncQueue

    def sync() -> None:
        ol_sync(queue)

    def raw_sync() -> None:
        stream_sync(raw_stream)

    def raw_queue() -> None:
        stream = raw.stream_create()[1]
        raw.stream_destroy(stream)

    # The "plugin" side calls the GPU plugin's hooks directly (its fast path for launches): what
    # the ol* call costs beyond that lies above the plugin (offloadrt.api and plugins/common).
    def plugin_queue() -> None:  # what olCreateQueue + olDestroyQueue ask of the backend queue
        backend_queue = gdev.init_async_info()
        gdev._has_pending_work_impl(backend_queue)
        gdev._synchronize_impl(backend_queue)
        gdev.queue_pool.release(backend_queue)

    create_event_impl = _untimed_event_maker(gdev._create_event_impl)

    def plugin_event() -> None:
        event = create_event_impl()
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
        ng, gs = (1, 1, 1), (32, 1, 1)

        def plugin_launch() -> None:
            gdev._launch_impl(kernel._target, blob, ng, gs, 0, ai)

    return {
        "launch": {
            "ours": Side(lambda: ol_launch(queue, device, kernel, blob, sizes), sync),
            "plugin": Side(plugin_launch, sync),
            "raw": Side(lambda: launch(function, 1, 1, 1, 32, 1, 1, 0, raw_stream, no_params, extra_argument),
                        raw_sync),
        },
        "h2d": {
            "ours": Side(lambda: ol_memcpy(queue, dptr, device, hptr, host, 8), sync),
            "plugin": Side(lambda: gdev._data_submit_impl(dptr, hptr, 8, ai), sync),
            "raw": Side(lambda: htod(dptr, hptr, 8, raw_stream), raw_sync),
            "floor": Side(lambda: floor_copy(queue, dptr, device, hptr, host, 8), sync),
        },
        "d2h": {
            "ours": Side(lambda: ol_memcpy(queue, hptr, host, dptr, device, 8), sync),
            "plugin": Side(lambda: gdev._data_retrieve_impl(hptr, dptr, 8, ai), sync),
            "raw": Side(lambda: dtoh(hptr, dptr, 8, raw_stream), raw_sync),
            "floor": Side(lambda: floor_copy(queue, hptr, host, dptr, device, 8), sync),
        },
        "queue": {
            "ours": Side(lambda: api.olDestroyQueue(api.olCreateQueue(device))),
            "plugin": Side(plugin_queue),
            "raw": Side(raw_queue),
        },
        "event": {
            "ours": Side(ol_event),
            "plugin": Side(plugin_event),
            "raw": Side(lambda: _raw_event(raw, raw_stream)),
        },
        "sync": {
            "ours": Side(sync),
            "plugin": Side(lambda: gdev._synchronize_impl(ai)),
            "raw": Side(raw_sync),
        },
        "host": {
            "ours": Side(lambda: api.olLaunchHostFunction(queue, noop, None), sync),
            "plugin": Side(lambda: gdev._enqueue_host_call_impl(noop, None, ai), sync),
            "raw": Side(lambda: raw.host_func(raw_stream, callback_arg, 1), raw_sync),
        },
    }


def _raw_event(raw: Raw, stream: Any) -> None:
    """An untimed event's create, record, sync and destroy, straight through the bindings."""
    event = raw.event_create()[1]
    raw.event_record(event, stream)
    raw.event_sync(event)
    raw.event_destroy(event)


def _untimed_event_maker(create: Callable[..., Any]) -> Callable[[], Any]:
    """The plugin's ``_create_event_impl`` asked for an event without timing, whether or not this
    version of the hook takes ``timed`` (it was added while the events became untimed)."""
    try:
        takes_timed = "timed" in inspect.signature(create).parameters
    except (TypeError, ValueError):
        takes_timed = False
    if takes_timed:
        return lambda: create(False)
    return create


def python_layer_sides(vendor: str, raw: Raw, raw_stream: Any, keep: list[object]) -> Sides:
    """The Python layer's 8-byte ``Buffer.copy_from`` of a NumPy array on a queue, and its
    ``queue.record()`` + ``Event.sync()`` + ``close()``, beside the raw copy and untimed event."""
    import numpy as np  # noqa: PLC0415

    from offloadrt.core import device as find_device  # noqa: PLC0415

    device = find_device("cuda:0" if vendor == "cuda" else "amdgpu:0")
    queue = device.queue()
    buffer = device.allocate(8)
    source = np.zeros(1, np.float64)
    keep += [queue, buffer, source]
    raw_ptr, device_ptr, htod = source.ctypes.data, buffer.ptr, raw.htod  # the same pageable NumPy memory

    def record() -> None:
        event = queue.record()
        event.sync()
        event.close()

    return {
        "copy_from": {
            "ours": Side(lambda: buffer.copy_from(source, queue=queue), queue.sync),
            "raw": Side(lambda: htod(device_ptr, raw_ptr, 8, raw_stream), lambda: raw.stream_sync(raw_stream)),
        },
        "record": {"ours": Side(record), "raw": Side(lambda: _raw_event(raw, raw_stream))},
    }


def cuda_core_sides(keep: list[object]) -> dict[str, Side] | str:
    """``cuda.core``'s launch (a LaunchConfig of one group of 32, four 8-byte arguments: the
    null kernel's 32 bytes), untimed event (``Stream.record``, ``Event.sync``, ``close``), stream
    create+close and stream sync; or why it cannot run here."""
    try:
        from cuda.core import Device, LaunchConfig, ObjectCode, launch  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        try:  # cuda.core before 0.4 kept its API here
            from cuda.core.experimental import (  # type: ignore[import-untyped]  # noqa: PLC0415
                Device,
                LaunchConfig,
                ObjectCode,
                launch,
            )
        except ImportError as exc:
            return f"cuda.core is not installed ({exc})"
    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    kernel = ObjectCode.from_ptx(nulldriver.CUDA_PTX).get_kernel("empty")
    config = LaunchConfig(grid=1, block=32)
    keep += [device, stream, kernel, config]

    def event() -> None:
        recorded = stream.record()
        recorded.sync()
        recorded.close()

    def stream_cycle() -> None:
        device.create_stream().close()

    return {
        "launch": Side(lambda: launch(stream, config, kernel, 1, 2, 3, 4), stream.sync),
        "event": Side(event),
        "queue": Side(stream_cycle),
        "sync": Side(stream.sync),
    }


def count_work(counters: nulldriver.Counters, side: Side, runs: int) -> dict[str, float]:
    """The null library's counts per run of ``side.body`` (``side.after`` once at the end), after
    one warm run: steady state, with the runtime's pools filled."""
    for _ in range(2):
        side.body()
        if side.after is not None:
            side.after()
        counters.reset()
    for _ in range(runs):
        side.body()
    if side.after is not None:
        side.after()
    return {name: value / runs for name, value in counters.read().items()}


def unasked_work(op: str, counts: dict[str, float]) -> list[str]:
    """What ``counts`` (one side of ``op``) did that the operation did not ask for: host functions
    (except for the host-function operation) and anything with timing (no operation asks for it)."""
    found = []
    if op not in HOST_FUNCTION_OPS and counts["host_functions"]:
        found.append(f"{counts['host_functions']:.2f} host functions")
    timed = counts["events_timed"] + counts["records_timed"]
    if timed:
        found.append(f"{counts['events_timed']:.2f} timed events created, {counts['records_timed']:.2f} recorded")
    return found


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


def bindings_costs(vendor: str, raw: Raw, function: Any, dptr: int, hptr: int, per_op: Callable[..., Any],
                   alternate: Callable[..., dict[str, float]], quick: bool) -> dict[str, Any]:
    """The bindings' own cost per call over the null driver, against ctypes calls of the same C
    entry points (``per_op`` and ``alternate`` time them, as the worker times everything)."""
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
    extra_size = ctypes.c_size_t(8)  # a local until the end: the driver reads it at every launch
    extra = (ctypes.c_void_p * 5)(raw.markers[0], hptr, raw.markers[1], ctypes.addressof(extra_size), raw.markers[2])
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
        timings = {"bindings": per_op(count, binding), "reference": per_op(count, reference)}
        for run in timings.values():
            run()
        best = alternate(repeats, timings)
        costs[call] = {**{side: seconds * 1e6 for side, seconds in best.items()}, "reference_what": reference_what}
    raw.stream_destroy(stream)
    return costs
