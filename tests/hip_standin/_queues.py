"""Streams, events and host functions of the HIP stand-in (see hip.py for the rules it follows).

TEST DOUBLE, not AMD code. Streams and events belong to the device that was current when they
were made and work from any thread whatever device is current there. A stream runs its work in
order on its own thread; the null stream runs it at once in the caller, after the current
device's blocking streams have drained. Events record when the stream reaches them; an event
never recorded is complete.
"""
# ruff: noqa: N803  # parameter names follow hip-python

from __future__ import annotations

from standin_common import engine as e
from standin_common import operations as ops
from standin_common.controls import fail

from . import _runtime as r
from ._convert import CUInt, HostFn, Ptr

# hipEventBlockingSync | DisableTiming | Interprocess | DisableSystemFence | ReleaseToDevice | ReleaseToSystem
_EVENT_FLAGS = 0x1 | 0x2 | 0x4 | 0x20000000 | 0x40000000 | 0x80000000


@r.api(None)
def hipStreamCreateWithFlags(flags: CUInt) -> tuple[int]:
    st = r.STATE
    if flags & ~1:  # hipStreamDefault or hipStreamNonBlocking
        raise fail(1, f"hipStreamCreateWithFlags: invalid flags {flags:#x}")
    return (st.add_stream(r.current(st), flags).handle,)


@r.api()
def hipStreamDestroy(stream: Ptr) -> tuple[()]:
    st = r.STATE
    if stream == 0:
        raise fail(400, "hipStreamDestroy: the null stream cannot be destroyed")
    queue, _ = r.stream(st, stream)
    assert queue is not None
    with st.cv:
        if queue.handle not in st.streams:
            raise fail(709, f"stream {stream:#x} was destroyed meanwhile")
        ops.destroy_stream_locked(st, queue)
    return ()


@r.api()
def hipStreamSynchronize(stream: Ptr) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    ops.synchronize_stream(st, queue, ctx)
    return ()


@r.api()
def hipStreamQuery(stream: Ptr) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    ops.query_stream(st, queue, ctx)
    return ()


@r.api()
def hipStreamWaitEvent(stream: Ptr, event: Ptr, flags: CUInt) -> tuple[()]:
    st = r.STATE
    if flags != 0:
        raise fail(1, "hipStreamWaitEvent: flags must be 0")
    queue, ctx = r.stream(st, stream)
    waited: e.Event = r.lookup(st.events, event, "event")
    r.usable(waited.ctx)
    ops.wait_event(st, queue, ctx, waited)
    return ()


@r.api()
def hipLaunchHostFunc(stream: Ptr, fn: HostFn, userData: Ptr) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    if not fn:
        raise fail(1, "hipLaunchHostFunc: a null function")
    ops.launch_host_function(st, queue, ctx, fn, userData, keep=userData)
    return ()


@r.api(None)
def hipEventCreateWithFlags(flags: CUInt) -> tuple[int]:
    st = r.STATE
    if flags & ~_EVENT_FLAGS or (flags & 4 and not flags & 2):  # interprocess needs DisableTiming
        raise fail(1, f"hipEventCreateWithFlags: invalid flags {flags:#x}")
    return (ops.add_event(st, r.current(st), flags).handle,)


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
    ops.record_event(st, found, queue, ctx, f"hipEventRecord: the event belongs to device "
                                            f"{found.ctx.device.ordinal}, the stream to device {ctx.device.ordinal}")
    return ()


@r.api()
def hipEventSynchronize(event: Ptr) -> tuple[()]:
    ops.synchronize_event(r.STATE, _event(event))
    return ()


@r.api()
def hipEventQuery(event: Ptr) -> tuple[()]:
    ops.query_event(r.STATE, _event(event))
    return ()


@r.api(0.0)
def hipEventElapsedTime(start: Ptr, stop: Ptr) -> tuple[float]:
    first, last = _event(start), _event(stop)
    return (ops.elapsed_ms(r.STATE, first, last, "hipEventElapsedTime", "hipEventDisableTiming", "devices"),)
