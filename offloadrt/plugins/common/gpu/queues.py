"""GPU queues and events: streams and driver events from per-device pools, cross-queue waits,
host functions, and where in a stream's order a failure happened."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....errors import OffloadError
from ..resources import AsyncInfo, GenericEvent, QueueFailure
from .core import GpuDeviceCore
from .driver import NOT_READY, SUCCESS
from .hostcalls import host_calls, host_keys
from .streams import GpuEvent, GpuStream


class GpuQueues(GpuDeviceCore):
    """Streams, events, waits and host functions of a GPU device."""

    # ---- queues ----------------------------------------------------------------------------
    def init_async_info(self) -> AsyncInfo:
        if self.sticky is not None:  # even a pooled stream belongs to the poisoned device
            raise self.sticky
        return self.queue_pool.acquire()

    def has_pending_work(self, queue: AsyncInfo) -> bool:
        # The generic method in one frame for a healthy device current on this thread (olDestroyQueue's
        # hot path); a queue with waits to settle takes the generic method (a drained stream stays so).
        if self.thread_state.cell.token is self.current_token:
            status = int(self.drv_stream_query(queue.stream)[0])  # type: ignore[attr-defined]
            if status == NOT_READY:
                return True
            if status != SUCCESS:
                queue.fail(self.failure(status, self.call_names["stream_query"]))
                return False
            if not queue.waits:  # type: ignore[attr-defined]
                return False
        return super().has_pending_work(queue)

    def _create_queue_impl(self) -> AsyncInfo:
        self.enter(select=True)
        return GpuStream(self, self._new_stream())

    def _destroy_queue_impl(self, queue: AsyncInfo) -> None:
        assert isinstance(queue, GpuStream)
        if self.sticky is not None:
            return  # the device is dead for the rest of the process; so are its streams
        self.enter()
        self.check(self.drv_stream_destroy(queue.stream), self.call_names["stream_destroy"])

    def synchronize(self, queue: AsyncInfo, release: bool) -> None:
        # The generic method in one frame for a healthy queue of a healthy device current on this
        # thread (olSyncQueue's hot path); anything else, and handing the queue back, takes it.
        if (not release and queue.failure is None
                and self.thread_state.cell.token is self.current_token):
            status = self.drv_stream_sync(queue.stream)[0]  # type: ignore[attr-defined]
            if not status and not queue.waits and queue.failure is None:  # type: ignore[attr-defined]
                return  # (a host function that ran meanwhile may have failed the queue)
            if status:
                queue.fail(self.failure(int(status), self.call_names["stream_sync"]))
            elif queue.waits:  # type: ignore[attr-defined]
                try:
                    self._settle_waits(queue)  # type: ignore[arg-type]
                except OffloadError as exc:
                    queue.fail(exc)
            failure = queue.failure
            if failure is not None:
                raise failure.queue_error(queue.owner)
            return
        super().synchronize(queue, release)

    # The hot paths below skip enter() when the device is healthy and current on this thread, and
    # the waits' bookkeeping when the queue has no wait to settle.
    def _synchronize_impl(self, queue: AsyncInfo) -> None:
        if self.thread_state.cell.token is not self.current_token:
            self.enter()
        result = self.drv_stream_sync(queue.stream)  # type: ignore[attr-defined]
        if result[0]:
            raise self.failure(int(result[0]), self.call_names["stream_sync"])
        if queue.waits:  # type: ignore[attr-defined]
            self._settle_waits(queue)  # type: ignore[arg-type]

    def _query_impl(self, queue: AsyncInfo) -> bool:
        if self.thread_state.cell.token is not self.current_token:
            self.enter()
        status = int(self.drv_stream_query(queue.stream)[0])  # type: ignore[attr-defined]
        if status == NOT_READY:
            return False
        if status != SUCCESS:
            raise self.failure(status, self.call_names["stream_query"])
        if queue.waits:  # type: ignore[attr-defined]
            self._settle_waits(queue)  # type: ignore[arg-type]
        return True

    def _settle_waits(self, queue: GpuStream, upto: int | None = None, query: bool = True) -> None:
        """Fail ``queue`` at the first of its waits (up to position ``upto``; None: all, once it
        drained) whose event's queue had failed before reaching the event.

        The driver ends a wait when the event completes, failed queue or not, so the failure
        spreads here: when a host function behind the wait runs, and when the waiting queue is
        next synced or queried. ``query``: ask the event's device about faults there (not
        from a host function, which must not call the driver).
        """
        with queue.lock:
            if upto is None:
                due, queue.waits = queue.waits, []
            else:
                due = [wait for wait in queue.waits if wait[0] <= upto]
                if due:
                    queue.waits = [wait for wait in queue.waits if wait[0] > upto]
        for position, event in sorted(due, key=lambda wait: wait[0]):
            source_device = event.device
            assert isinstance(source_device, GpuQueues)
            failure = source_device._failure_before(event, query)
            if failure is not None:
                queue.adopt(failure, at=position)
                return

    def _failure_before(self, event: GpuEvent, query: bool) -> QueueFailure | None:
        """The failure of the (completed) event's queue at or before the event, if any; sets ``event.failure``."""
        if event.failure is None:
            if query:
                self._is_event_complete_impl(event)  # a fault on the device shows up as an error of the event
            else:
                self._fail_if_behind_failure(event, query=False)
        return event.failure

    def _fail_if_behind_failure(self, event: GpuEvent, query: bool) -> None:
        """A completed event fails if its queue failed at or before it (waits before it included)."""
        source = event.queue
        if source is None:
            return
        if source.waits:
            self._settle_waits(source, upto=event.position, query=query)
        if event.failure is None and source.failure is not None:
            event.failure = source.failed_before(event.position)

    def _has_pending_work_impl(self, queue: AsyncInfo) -> bool:
        return not self._query_impl(queue)

    def _enqueue_host_call_impl(self, callback: Callable[[Any], object], user_data: Any,
                                queue: AsyncInfo) -> None:
        if self.thread_state.cell.token is not self.current_token:
            self.enter()
        key = next(host_keys)
        host_calls[key] = (callback, user_data, queue, queue.next_position())  # type: ignore[attr-defined,assignment]
        trampoline = self.host_trampoline
        if trampoline is None:
            trampoline = self.host_trampoline = self._host_function_argument()
        result = self.drv_host_func(queue.stream, trampoline, key)  # type: ignore[attr-defined]
        if result[0]:
            host_calls.pop(key, None)
            self.check(result, self.call_names["host_func"])

    # ---- events ----------------------------------------------------------------------------
    def _new_driver_event(self) -> Any:
        self.enter(select=True)
        return self._new_event(False)

    def _new_timed_driver_event(self) -> Any:
        self.enter(select=True)
        return self._new_event(True)

    def _destroy_driver_event(self, event: Any) -> None:
        if self.sticky is None:
            self.enter()
            self.check(self.drv_event_destroy(event), self.call_names["event_destroy"])

    # The generic event calls, each with its hot path in one frame (a healthy queue or event of a
    # healthy device already current on this thread); anything else takes the generic method.
    def create_event(self, queue: AsyncInfo, timed: bool = False) -> GenericEvent:
        if not timed and queue.failure is None and self.thread_state.cell.token is self.current_token:
            pool = self.event_pool
            try:  # a pooled driver event, taken as ResourcePool.free says
                handle = pool.free.pop()
            except IndexError:
                handle = pool.acquire()
            else:
                if pool.closed:
                    pool.reject(handle)
            event = GpuEvent(self, handle)
            event.position = queue.submitted  # type: ignore[attr-defined]
            result = self.drv_event_record(event.event, queue.stream)  # type: ignore[attr-defined]
            if result[0]:
                self.event_pool.release(event.event)
                raise self.failure(int(result[0]), self.call_names["event_record"])
            event.queue = queue  # type: ignore[assignment]
            return event
        return super().create_event(queue, timed)

    def sync_event(self, event: GenericEvent) -> None:
        if event.failure is None and self.thread_state.cell.token is self.current_token:
            status = self.drv_event_sync(event.event)[0]  # type: ignore[attr-defined]
            source = event.queue  # type: ignore[attr-defined]
            if not status and (source is None or (not source.waits and source.failure is None)):
                return  # nothing failed before it
            if status:  # as _sync_event_impl, without calling the driver again
                self._event_failed(event, self.failure(int(status), self.call_names["event_sync"]))  # type: ignore[arg-type]
            else:
                self._fail_if_behind_failure(event, query=True)  # type: ignore[arg-type]
            if event.failure is not None:
                raise event.failure.queue_error()
            return
        super().sync_event(event)

    def destroy_event(self, event: GenericEvent) -> None:
        # ResourcePool.release in this frame, as ResourcePool.free says
        pool = self.timed_event_pool if event.timed else self.event_pool
        if not pool.closed:
            pool.free.append(event.event)  # type: ignore[attr-defined]
            if pool.closed:
                pool.reap()
            return
        pool.release(event.event)  # type: ignore[attr-defined]

    def _create_event_impl(self, timed: bool) -> GenericEvent:
        event = GpuEvent(self, (self.timed_event_pool if timed else self.event_pool).acquire())
        event.timed = timed
        return event

    def _record_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        if self.thread_state.cell.token is not self.current_token:
            self.enter()
        event.position = queue.submitted  # type: ignore[attr-defined]
        result = self.drv_event_record(event.event, queue.stream)  # type: ignore[attr-defined]
        if result[0]:
            raise self.failure(int(result[0]), self.call_names["event_record"])
        event.queue = queue  # type: ignore[attr-defined]

    def _wait_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        assert isinstance(event, GpuEvent) and isinstance(queue, GpuStream)
        source = event.queue
        source_device = event.device
        assert isinstance(source_device, GpuQueues)
        if source is not None and event.failure is None:
            if source_device.sticky is not None:  # a poisoned device fails every queue, and so every event
                event.failure = source.fail(source_device.sticky)
            else:
                event.failure = source.failed_before(event.position)
        if event.failure is not None:
            queue.adopt(event.failure)
            return
        self.enter()
        position = queue.next_position()
        self.check(self.drv_stream_wait_event(queue.stream, event.event, 0), self.call_names["stream_wait_event"])
        with queue.lock:
            queue.waits.append((position, event))

    def _sync_event_impl(self, event: GenericEvent) -> None:
        if self.sticky is not None:  # a poisoned device fails every queue, and so every event
            self._event_failed(event, self.sticky)  # type: ignore[arg-type]
            return
        if self.thread_state.cell.token is not self.current_token:
            self.enter()
        status = self.drv_event_sync(event.event)[0]  # type: ignore[attr-defined]
        if status:
            self._event_failed(event, self.failure(int(status), self.call_names["event_sync"]))  # type: ignore[arg-type]
            return
        source = event.queue  # type: ignore[attr-defined]
        if source is not None and (source.waits or source.failure is not None):  # else nothing failed before it
            self._fail_if_behind_failure(event, query=True)  # type: ignore[arg-type]

    def _event_failed(self, event: GpuEvent, error: OffloadError) -> None:
        """The event's queue failed before reaching it: both carry that failure."""
        source = event.queue
        event.failure = source.fail(error) if source is not None else None
        if event.failure is None:
            raise error

    def _is_event_complete_impl(self, event: GenericEvent) -> bool:
        assert isinstance(event, GpuEvent)
        if self.sticky is not None:
            self._event_failed(event, self.sticky)
            return True
        self.enter()
        status = int(self.drv_event_query(event.event)[0])
        if status == NOT_READY:
            return False
        if status != SUCCESS:
            self._event_failed(event, self.failure(status, self.call_names["event_query"]))
        else:
            self._fail_if_behind_failure(event, query=True)
        return True

    def _destroy_event_impl(self, event: GenericEvent) -> None:
        (self.timed_event_pool if event.timed else self.event_pool).release(event.event)  # type: ignore[attr-defined]

    def _event_elapsed_time_impl(self, start: GenericEvent, end: GenericEvent) -> float:
        assert isinstance(start, GpuEvent) and isinstance(end, GpuEvent)
        self.enter()
        return float(self.check(self.drv_event_elapsed(start.event, end.event), self.call_names["event_elapsed"]))
