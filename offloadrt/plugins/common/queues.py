"""The generic half of queues and events: temporary queues, synchronisation, queries, waits."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ...errors import OffloadError, OffloadWarning
from .hooks import DeviceHooks
from .resources import AsyncInfo, GenericEvent


class QueueOps(DeviceHooks):
    """Queue and event operations of a device: validation and bookkeeping around the hooks."""

    @contextmanager
    def queue_or_temporary(self, queue: AsyncInfo | None) -> Iterator[AsyncInfo]:
        """The queue an operation runs on: ``queue``, or a pooled one that is synced when the
        block ends, so the operation is complete on return (liboffload's AsyncInfoWrapper).

        For backends whose hooks cannot do ``queue=None`` work inline.
        """
        if queue is not None:
            yield queue
            return
        temporary = self.queue_pool.acquire()
        try:
            yield temporary
            self._synchronize_impl(temporary)
        except BaseException:
            self._drop_queue(temporary)
            raise
        if temporary.failure is not None:
            self._drop_queue(temporary)
            raise temporary.failure.error
        self.queue_pool.release(temporary)

    def _drop_queue(self, queue: AsyncInfo) -> None:
        """Destroy a backend queue that must not be reused; a failure to do so is a warning."""
        try:
            self.queue_pool.discard(queue)
        except OffloadError as exc:
            warnings.warn(f"offloadrt: destroying a failed {self.plugin.name} queue failed too: {exc}",
                          OffloadWarning, stacklevel=3)

    def init_async_info(self) -> AsyncInfo:
        """A backend queue from the pool (a new one when the pool is empty)."""
        return self.queue_pool.acquire()

    def synchronize(self, queue: AsyncInfo, release: bool) -> None:
        """Wait for ``queue`` to drain; with ``release``, hand it back to the pool.

        Raises ``QUEUE_ERROR`` as soon as the queue is known to have failed, without waiting
        for the work behind the failure. A failed queue is destroyed instead of pooled.
        """
        if queue.failure is None:
            try:
                self._synchronize_impl(queue)
            except OffloadError as exc:
                queue.fail(exc)
        failure = queue.failure
        owner = queue.owner
        if release:
            queue.owner = None
            if failure is None:
                self.queue_pool.release(queue)
            else:
                self._drop_queue(queue)
        if failure is not None:
            raise failure.queue_error(owner)

    def query_async(self, queue: AsyncInfo) -> bool:
        """True when all work submitted to ``queue`` is done; raises if it failed."""
        if queue.failure is None:
            try:
                done = self._query_impl(queue)
            except OffloadError as exc:
                queue.fail(exc)
        if queue.failure is not None:
            raise queue.queue_error()
        return done

    def has_pending_work(self, queue: AsyncInfo) -> bool:
        """True while ``queue`` has work that has not finished (or been skipped after a failure)."""
        try:
            return self._has_pending_work_impl(queue)
        except OffloadError as exc:
            queue.fail(exc)
            return False

    def enqueue_host_call(self, callback: Callable[[Any], object], user_data: Any, queue: AsyncInfo) -> None:
        if queue.failure is not None:
            raise queue.queue_error()
        self._enqueue_host_call_impl(callback, user_data, queue)

    # ---- events ----------------------------------------------------------------------------
    def create_event(self, queue: AsyncInfo, timed: bool = False) -> GenericEvent:
        """An event recorded at the current end of ``queue``; ``timed``: it takes a timestamp."""
        if queue.failure is not None:
            raise queue.queue_error()
        event = self._create_event_impl(timed)
        try:
            self._record_event_impl(event, queue)
        except BaseException:
            self._destroy_event_impl(event)
            raise
        return event

    def wait_event(self, event: GenericEvent, queue: AsyncInfo) -> None:
        """Make later work on ``queue`` wait for ``event``; its queue's failure spreads to ``queue``."""
        if queue.failure is not None:
            raise queue.queue_error()
        if event.failure is not None and not self.has_pending_work(queue):
            queue.adopt(event.failure)  # nothing earlier on the queue can be lost: fail now
            return
        self._wait_event_impl(event, queue)

    def sync_event(self, event: GenericEvent) -> None:
        if event.failure is None:
            self._sync_event_impl(event)
        if event.failure is not None:
            raise event.failure.queue_error()

    def is_event_complete(self, event: GenericEvent) -> bool:
        return event.failure is not None or self._is_event_complete_impl(event)

    def destroy_event(self, event: GenericEvent) -> None:
        self._destroy_event_impl(event)

    def get_event_elapsed_time(self, start: GenericEvent, end: GenericEvent) -> float:
        """Milliseconds between two timed events of this device; waits for both to complete."""
        self.sync_event(start)
        self.sync_event(end)
        return self._event_elapsed_time_impl(start, end)
