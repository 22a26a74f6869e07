"""The stream work and queries both stand-in drivers offer, on a :class:`~standin_common.engine.State`.

TEST DOUBLE, not NVIDIA or AMD code. A vendor front end converts and checks its arguments the
way its driver does (its own error codes, handles and messages), then calls these. They raise
:class:`~standin_common.controls.DriverError` with codes both drivers share: NOT_READY (600),
INVALID_HANDLE (400), UNKNOWN (999, a call that waited too long for its stream), and a context's
sticky fault or a stream's asynchronous one. Host functions and events are charged to the
driver's :class:`~standin_common.costs.CostMeter`.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .controls import DriverError, fail
from .engine import NOT_READY, Context, Event, Op, State, Stream, new_handle

INVALID_HANDLE = 400  # CUDA_ERROR_INVALID_HANDLE and hipErrorInvalidHandle alike
NO_TIMING = 2  # CU_EVENT_DISABLE_TIMING and hipEventDisableTiming alike
_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


# ---- streams ---------------------------------------------------------------------------------------

def destroy_stream_locked(st: State, stream: Stream) -> None:
    """Forget ``stream``: its worker finishes the queued work, then exits (lock held)."""
    del st.streams[stream.handle]
    stream.destroyed = True
    if stream.thread.ident is None:
        st.live.discard(stream)
    st.cv.notify_all()


def _watched_locked(st: State, queue: Stream | None, ctx: Context) -> list[Stream]:
    """What a sync or query of ``queue`` waits for: the stream, or for the legacy (null) stream
    the blocking streams of ``ctx``."""
    return [queue] if queue is not None else [s for s in st.streams_of_locked(ctx) if not s.nonblocking]


def _stream_error_locked(queue: Stream | None, ctx: Context) -> int | None:
    """The error a sync or query reports once the stream is drained (clears a non-sticky one)."""
    if ctx.sticky is not None:
        return ctx.sticky
    if queue is None:
        code, ctx.legacy_error = ctx.legacy_error, None
    else:
        code, queue.async_error = queue.async_error, None
    return code


def synchronize_stream(st: State, queue: Stream | None, ctx: Context, run_ctx: Context | None = None) -> None:
    """Wait until ``queue`` (None: the legacy stream of ``ctx``) drained or ``run_ctx`` (the
    context its work runs in; default ``ctx``) is poisoned; raise its error, if any."""
    run_ctx = ctx if run_ctx is None else run_ctx
    with st.cv:
        st.cv.wait_for(lambda: st.idle_locked(_watched_locked(st, queue, ctx)) or run_ctx.sticky is not None)
        code = _stream_error_locked(queue, run_ctx)
    if code:
        raise DriverError(code)


def query_stream(st: State, queue: Stream | None, ctx: Context, run_ctx: Context | None = None) -> None:
    """NOT_READY while ``queue`` has work, else its error (as :func:`synchronize_stream`)."""
    run_ctx = ctx if run_ctx is None else run_ctx
    with st.lock:
        if run_ctx.sticky is None and not st.idle_locked(_watched_locked(st, queue, ctx)):
            raise DriverError(NOT_READY)
        code = _stream_error_locked(queue, run_ctx)
    if code:
        raise DriverError(code)


def synchronize_context(st: State, ctx: Context) -> None:
    """Wait for every stream of ``ctx``; raise (and clear) the first error any of them had."""
    with st.cv:
        st.cv.wait_for(lambda: st.idle_locked(st.streams_of_locked(ctx)) or ctx.sticky is not None)
        streams = st.streams_of_locked(ctx)
        code = ctx.sticky or ctx.legacy_error or next((s.async_error for s in streams if s.async_error), None)
        ctx.legacy_error = None
        for stream in streams:
            stream.async_error = None
    if code:
        raise DriverError(code)


def wait_event(st: State, queue: Stream | None, ctx: Context, event: Event) -> None:
    """Make ``queue`` wait for the newest record of ``event`` (none: nothing to wait for)."""
    with st.lock:
        seq = event.recorded
    if seq:  # an event never recorded stands for no work
        st.enqueue(queue, ctx, Op("wait", event=event, seq=seq))


def launch_host_function(st: State, queue: Stream | None, ctx: Context, function: int, data: int,
                         keep: object) -> None:
    """Queue a call of the C function at ``function`` with ``data`` (``keep`` stays alive till then)."""
    call = _HOST_FN(function)
    st.costs.host_function()

    def run() -> None:
        call(data or None)  # through ctypes: the GIL is released around the C call

    st.enqueue(queue, ctx, Op("host", run, keep=keep))


# ---- memory ----------------------------------------------------------------------------------------

NOT_REGISTERED = 713  # CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED and hipErrorHostMemoryNotRegistered alike


def device_range(st: State, address: int, size: int, what: str, memory: str) -> tuple[int, Any]:
    """What a device-side access of ``[address, +size)`` touches: (host address, the device whose
    memory it is, None for registered host memory); INVALID_VALUE (1) naming ``what`` if it is not
    inside an allocation (``memory`` says whose) or registered host memory. Zero bytes touch nothing."""
    if size == 0:
        return address, None
    with st.lock:
        found = st.resolve_locked(address, size)
    if found is None:
        raise fail(1, f"{what} [{address:#x}, +{size}) is not inside {memory} or registered host memory")
    return int(found[0]), found[1]


def unregister_host(st: State, host: int, call: str) -> None:
    """Make the registration that starts at ``host`` pageable again; NOT_REGISTERED otherwise."""
    with st.lock:
        if st.unregister_host_locked(host) is None:
            raise fail(NOT_REGISTERED, f"{call}: {host:#x} is not the base of registered host memory")


UNKNOWN = 999  # CUDA_ERROR_UNKNOWN and hipErrorUnknown alike


def copy(st: State, queue: Stream | None, ctx: Context, to: int, frm: int, count: int, keep: object,
         stage: bool = False, wait: str = "") -> None:
    """Queue a copy of ``count`` bytes (host addresses, checked by the caller).

    ``stage``: read the source now, as a driver stages pageable memory before the call returns
    (the caller may reuse or free it at once); the write still happens in stream order.
    ``wait``: the call's name if it returns only once the stream ran its earlier work and the copy
    (a copy into pageable memory). A wait past ``st.blocking_call_timeout`` fails with UNKNOWN
    (999) and a diagnostic instead of hanging: on a GPU that is a deadlock (say, the stream is
    held by a host function that waits for this caller); the copy is then dropped, so the stream
    never writes into memory the caller may have freed.
    """
    source = ctypes.string_at(frm, count) if stage and count else None

    def run() -> None:
        if count:
            ctypes.memmove(to, frm if source is None else source, count)

    op = Op("copy", run, keep=keep)  # ``keep``: a caller's buffers stay alive
    st.enqueue(queue, ctx, op)
    if not wait or queue is None:  # the legacy stream ran it in this thread already
        return
    if not st.wait_finished(op, ctx):
        raise fail(UNKNOWN, f"{wait}: waited {st.blocking_call_timeout:g} s for the stream to run its earlier work "
                            f"and this copy with pageable host memory, which returns only then; on a GPU this "
                            f"call would hang (is the stream held by a host function that waits for this "
                            f"thread?). The copy was dropped. Use page-locked memory to return at once.")
    if ctx.sticky is not None:  # the stream skipped the copy
        raise DriverError(ctx.sticky)


def fill(st: State, queue: Stream | None, ctx: Context, target: int, width: int, value: int, count: int,
         pitch: int = 0, height: int = 1) -> None:
    """Queue a fill of ``height`` rows (``pitch`` bytes apart) of ``count`` ``width``-byte
    values at the host address ``target`` (``value`` is taken modulo its width)."""
    row = count * width
    extent = pitch * (height - 1) + row if count and height else 0
    pattern = (value & ((1 << 8 * width) - 1)).to_bytes(width, "little") * count

    def run() -> None:
        if not extent:
            return
        if height == 1:
            ctypes.memmove(target, pattern, row)
            return
        import numpy as np  # a strided fill of many rows, without a Python loop

        base = np.frombuffer(memoryview((ctypes.c_uint8 * extent).from_address(target)), dtype=np.uint8)
        rows = np.lib.stride_tricks.as_strided(base, shape=(height, row), strides=(pitch, 1))
        rows[:] = np.frombuffer(pattern, dtype=np.uint8)

    st.enqueue(queue, ctx, Op("memset", run))


def fill_extent(width: int, count: int, pitch: int = 0, height: int = 1) -> int:
    """How many bytes a fill of :func:`fill`'s shape spans."""
    return pitch * (height - 1) + count * width if count and height else 0


# ---- events ----------------------------------------------------------------------------------------

def add_event(st: State, ctx: Context, flags: int) -> Event:
    """A new event of ``ctx`` (never recorded: complete); charged as timed unless ``flags`` has
    the no-timing bit (2 in both drivers)."""
    event = Event(new_handle(), ctx, flags)
    with st.lock:
        st.events[event.handle] = event
    st.costs.event(timed=not flags & NO_TIMING)
    return event


def record_event(st: State, event: Event, queue: Stream | None, ctx: Context, mismatch: str) -> None:
    """Record ``event`` on ``queue`` (work runs in ``ctx``); INVALID_HANDLE with ``mismatch`` as
    the reason if the event belongs to another context."""
    with st.lock:
        if event.ctx is not ctx:
            raise fail(INVALID_HANDLE, mismatch)
        event.recorded += 1
        seq = event.recorded
    st.enqueue(queue, ctx, Op("record", event=event, seq=seq))


def synchronize_event(st: State, event: Event) -> None:
    """Wait until the stream reached the newest record of ``event``; its context's sticky fault
    if it was poisoned."""
    with st.cv:
        seq = event.recorded
        st.cv.wait_for(lambda: event.done >= seq or event.gone or event.ctx.sticky is not None)
        if event.ctx.sticky is not None:
            raise DriverError(event.ctx.sticky)


def query_event(st: State, event: Event) -> None:
    """NOT_READY until the stream reached the newest record of ``event``."""
    with st.lock:
        if event.done < event.recorded:
            raise DriverError(NOT_READY)


def elapsed_ms(st: State, start: Event, end: Event, call: str, no_timing: str, owners: str) -> float:
    """Milliseconds between the newest records of two events: INVALID_HANDLE if one was never
    recorded, was made with the driver's no-timing flag (``no_timing``, value 2 in both drivers),
    or they belong to different ``owners`` (contexts, devices); NOT_READY until both completed."""
    with st.lock:
        if not start.recorded or not end.recorded:
            raise fail(INVALID_HANDLE, f"{call}: an event was never recorded")
        if (start.flags | end.flags) & NO_TIMING:
            raise fail(INVALID_HANDLE, f"{call}: an event was created with {no_timing}")
        if start.ctx is not end.ctx:
            raise fail(INVALID_HANDLE, f"{call}: the events belong to different {owners}")
        if start.done < start.recorded or end.done < end.recorded:
            raise DriverError(NOT_READY)
        assert start.time is not None and end.time is not None
        return (end.time - start.time) * 1000.0
