"""Streams, host functions and events of the CUDA stand-in (see driver.py for the rules it follows).

TEST DOUBLE, not NVIDIA code. Streams and events belong to the context current when they were
made; the legacy stream handles (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) run their work in the
caller after the context's blocking streams drained. The work itself is standin_common's.
"""
# ruff: noqa: N803  # parameter names follow cuda.bindings.driver (hStream, hEvent, ...)

from __future__ import annotations

from typing import Any

from standin_common import engine as e
from standin_common import operations as ops
from standin_common.controls import DriverError

from . import _runtime as r
from ._convert import address, as_int
from ._types import CUevent, CUstream


@r.api(1)
def cuStreamCreate(Flags: int) -> tuple[Any]:
    st = r.STATE
    if as_int(Flags) & ~1:
        raise DriverError(1)
    return (CUstream(st.add_stream(st.current(), as_int(Flags)).handle),)


@r.api()
def cuStreamDestroy(hStream: Any) -> tuple[()]:
    st = r.STATE
    st.current()
    with st.cv:
        ops.destroy_stream_locked(st, r.lookup(st.streams, hStream, "stream"))
    return ()


@r.api()
def cuStreamSynchronize(hStream: Any) -> tuple[()]:
    st = r.STATE
    ctx = st.current(allow_sticky=True)
    queue, run_ctx = r.stream(st, hStream, ctx)
    ops.synchronize_stream(st, queue, ctx, run_ctx)
    return ()


@r.api()
def cuStreamQuery(hStream: Any) -> tuple[()]:
    st = r.STATE
    ctx = st.current(allow_sticky=True)
    queue, run_ctx = r.stream(st, hStream, ctx)
    ops.query_stream(st, queue, ctx, run_ctx)
    return ()


@r.api()
def cuStreamWaitEvent(hStream: Any, hEvent: Any, Flags: int) -> tuple[()]:
    st = r.STATE
    ctx = st.current()
    if as_int(Flags) != 0:
        raise DriverError(1)
    queue, run_ctx = r.stream(st, hStream, ctx)
    with st.lock:
        event = r.lookup(st.events, hEvent, "event")
    ops.wait_event(st, queue, run_ctx, event)
    return ()


@r.api()
def cuLaunchHostFunc(hStream: Any, fn: Any, userData: Any) -> tuple[()]:
    st = r.STATE
    ctx = st.current()
    queue, run_ctx = r.stream(st, hStream, ctx)
    function = as_int(fn)
    if not function:
        raise DriverError(1)
    ops.launch_host_function(st, queue, run_ctx, function, address(userData), keep=userData)
    return ()


@r.api(1)
def cuEventCreate(Flags: int) -> tuple[Any]:
    st = r.STATE
    if as_int(Flags) & ~7:
        raise DriverError(1)
    return (CUevent(ops.add_event(st, st.current(), as_int(Flags)).handle),)


@r.api()
def cuEventDestroy(hEvent: Any) -> tuple[()]:
    st = r.STATE
    st.current()
    with st.lock:
        event = r.lookup(st.events, hEvent, "event")
        del st.events[event.handle]  # work that records or waits on it still completes
    return ()


@r.api()
def cuEventRecord(hEvent: Any, hStream: Any) -> tuple[()]:
    st = r.STATE
    ctx = st.current()
    queue, run_ctx = r.stream(st, hStream, ctx)
    with st.lock:
        event = r.lookup(st.events, hEvent, "event")
    ops.record_event(st, event, queue, run_ctx, "cuEventRecord: the event and the stream belong to different contexts")
    return ()


def _event(hEvent: Any) -> e.Event:
    st = r.STATE
    st.current(allow_sticky=True)
    with st.lock:
        event: e.Event = r.lookup(st.events, hEvent, "event")
    if event.ctx.sticky is not None:
        raise DriverError(event.ctx.sticky)
    return event


@r.api()
def cuEventSynchronize(hEvent: Any) -> tuple[()]:
    ops.synchronize_event(r.STATE, _event(hEvent))
    return ()


@r.api()
def cuEventQuery(hEvent: Any) -> tuple[()]:
    ops.query_event(r.STATE, _event(hEvent))
    return ()


@r.api(1)
def cuEventElapsedTime(hStart: Any, hEnd: Any) -> tuple[float]:
    start, end = _event(hStart), _event(hEnd)
    return (ops.elapsed_ms(r.STATE, start, end, "cuEventElapsedTime", "CU_EVENT_DISABLE_TIMING", "contexts"),)
