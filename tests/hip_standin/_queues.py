"""Streams, events and host functions of the HIP stand-in (see hip.py for the rules it follows).

TEST DOUBLE, not AMD code. Streams and events belong to the device that was current when they
were made and work from any thread whatever device is current there. A stream runs its work in
order on its own thread; the null stream runs it at once in the caller, after the current
device's blocking streams have drained. Events record when the stream reaches them; an event
never recorded is complete.
"""
# ruff: noqa: N803  # parameter names follow hip-python

from __future__ import annotations

import ctypes

from cuda_standin import _engine as e

from . import _runtime as r
from ._convert import CUInt, HostFn, Ptr

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# hipEventBlockingSync | DisableTiming | Interprocess | DisableSystemFence | ReleaseToDevice | ReleaseToSystem
_EVENT_FLAGS = 0x1 | 0x2 | 0x4 | 0x20000000 | 0x40000000 | 0x80000000


@r.api(None)
def hipStreamCreateWithFlags(flags: CUInt) -> tuple[int]:
    st = r.STATE
    if flags & ~1:  # hipStreamDefault or hipStreamNonBlocking
        raise e.fail(1, f"hipStreamCreateWithFlags: invalid flags {flags:#x}")
    ctx = r.current(st)
    stream = e.Stream(st, ctx, flags)
    with st.lock:
        st.streams[stream.handle] = stream
        st.live.add(stream)
    return (stream.handle,)


@r.api()
def hipStreamDestroy(stream: Ptr) -> tuple[()]:
    st = r.STATE
    if stream == 0:
        raise e.fail(400, "hipStreamDestroy: the null stream cannot be destroyed")
    queue, _ = r.stream(st, stream)
    assert queue is not None
    with st.cv:
        if st.streams.pop(queue.handle, None) is None:
            raise e.fail(709, f"stream {stream:#x} was destroyed meanwhile")
        queue.destroyed = True  # its worker finishes the queued work, then exits
        if queue.thread.ident is None:
            st.live.discard(queue)
        st.cv.notify_all()
    return ()


def _watched(st: e.State, queue: e.Stream | None, ctx: e.Context) -> list[e.Stream]:
    """What a sync or query of ``queue`` waits for: the stream, or for the null stream the
    device's blocking streams (call with the lock held)."""
    return [queue] if queue is not None else [s for s in st.streams_of_locked(ctx) if not s.nonblocking]


def _stream_error(queue: e.Stream | None, ctx: e.Context) -> int | None:
    """The error a sync or query reports once the stream is drained (clears a non-sticky one)."""
    if ctx.sticky is not None:
        return ctx.sticky
    if queue is None:
        code, ctx.legacy_error = ctx.legacy_error, None
    else:
        code, queue.async_error = queue.async_error, None
    return code


@r.api()
def hipStreamSynchronize(stream: Ptr) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    with st.cv:
        st.cv.wait_for(lambda: st.idle_locked(_watched(st, queue, ctx)) or ctx.sticky is not None)
        code = _stream_error(queue, ctx)
    if code:
        raise e.DriverError(code)
    return ()


@r.api()
def hipStreamQuery(stream: Ptr) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    with st.lock:
        if ctx.sticky is None and not st.idle_locked(_watched(st, queue, ctx)):
            raise e.DriverError(600)  # hipErrorNotReady
        code = _stream_error(queue, ctx)
    if code:
        raise e.DriverError(code)
    return ()


@r.api()
def hipStreamWaitEvent(stream: Ptr, event: Ptr, flags: CUInt) -> tuple[()]:
    st = r.STATE
    if flags != 0:
        raise e.fail(1, "hipStreamWaitEvent: flags must be 0")
    queue, ctx = r.stream(st, stream)
    waited: e.Event = r.lookup(st.events, event, "event")
    r.usable(waited.ctx)
    with st.lock:
        seq = waited.recorded
    if seq:  # an event never recorded stands for no work: nothing to wait for
        st.enqueue(queue, ctx, e.Op("wait", event=waited, seq=seq))
    return ()


@r.api()
def hipLaunchHostFunc(stream: Ptr, fn: HostFn, userData: Ptr) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    if not fn:
        raise e.fail(1, "hipLaunchHostFunc: a null function")
    call = _HOST_FN(fn)

    def run() -> None:
        call(userData or None)  # through ctypes: the GIL is released around the C call

    st.enqueue(queue, ctx, e.Op("host", run, keep=userData))
    return ()


@r.api(None)
def hipEventCreateWithFlags(flags: CUInt) -> tuple[int]:
    st = r.STATE
    if flags & ~_EVENT_FLAGS or (flags & 4 and not flags & 2):  # interprocess needs DisableTiming
        raise e.fail(1, f"hipEventCreateWithFlags: invalid flags {flags:#x}")
    event = e.Event(e.new_handle(), r.current(st), flags)
    with st.lock:
        st.events[event.handle] = event
    return (event.handle,)


def _event(handle: int) -> e.Event:
    found: e.Event = r.lookup(r.STATE.events, handle, "event")
    r.usable(found.ctx)
    return found


@r.api()
def hipEventDestroy(event: Ptr) -> tuple[()]:
    st = r.STATE
    found = _event(event)
    with st.lock:
        st.events.pop(found.handle, None)  # work that records or waits on it still completes
    return ()


@r.api()
def hipEventRecord(event: Ptr, stream: Ptr) -> tuple[()]:
    st = r.STATE
    found = _event(event)
    queue, ctx = r.stream(st, stream)
    with st.lock:
        if found.ctx is not ctx:
            raise e.fail(400, f"hipEventRecord: the event belongs to device {found.ctx.device.ordinal}, the "
                              f"stream to device {ctx.device.ordinal}")
        found.recorded += 1
        seq = found.recorded
    st.enqueue(queue, ctx, e.Op("record", event=found, seq=seq))
    return ()


@r.api()
def hipEventSynchronize(event: Ptr) -> tuple[()]:
    st = r.STATE
    found = _event(event)
    with st.cv:
        seq = found.recorded
        st.cv.wait_for(lambda: found.done >= seq or found.gone or found.ctx.sticky is not None)
    r.usable(found.ctx)
    return ()


@r.api()
def hipEventQuery(event: Ptr) -> tuple[()]:
    st = r.STATE
    found = _event(event)
    with st.lock:
        if found.done < found.recorded:
            raise e.DriverError(600)  # hipErrorNotReady
    return ()


@r.api(0.0)
def hipEventElapsedTime(start: Ptr, stop: Ptr) -> tuple[float]:
    st = r.STATE
    first, last = _event(start), _event(stop)
    with st.lock:
        if not first.recorded or not last.recorded:
            raise e.fail(400, "hipEventElapsedTime: an event was never recorded")
        if (first.flags | last.flags) & 2:  # hipEventDisableTiming
            raise e.fail(400, "hipEventElapsedTime: an event was created with hipEventDisableTiming")
        if first.ctx is not last.ctx:
            raise e.fail(400, "hipEventElapsedTime: the events belong to different devices")
        if first.done < first.recorded or last.done < last.recorded:
            raise e.DriverError(600)  # hipErrorNotReady
        assert first.time is not None and last.time is not None
        return ((last.time - first.time) * 1000.0,)
