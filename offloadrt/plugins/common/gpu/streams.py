"""GPU queues and events as the generic layer sees them: a stream with the place of its failure,
and an event with its place in its stream.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ....errors import OffloadError
from ..resources import AsyncInfo, GenericEvent, QueueFailure, report_failure

if TYPE_CHECKING:
    from .core import GpuDeviceCore

class GpuStream(AsyncInfo):
    """A stream, and where in its order it failed.

    The driver cannot skip a stream's work, so the failures offloadrt sees on the host side (a
    host function that raised, a wait on an event of a failed queue) are placed in the stream's
    order: host functions and waits are numbered as they are submitted (``submitted``), an event
    remembers how many came before it (:attr:`GpuEvent.position`) and the failure where it
    happened (``failed_at``). An event at or behind ``failed_at`` fails with the queue. ``waits``
    are the (position, event) waits whose outcome is not settled yet.
    """

    __slots__ = ("stream", "waits", "submitted", "failed_at", "lock")

    def __init__(self, device: GpuDeviceCore, stream: Any):
        super().__init__(device)
        self.stream = stream
        self.waits: list[tuple[int, GpuEvent]] = []
        self.submitted = 0
        self.failed_at = 0
        # Guards waits, submitted and failed_at (set together with failure); never held over a
        # driver call, so a host function running on the driver's thread can always take it.
        self.lock = threading.Lock()

    def native_handle(self) -> int:
        return int(self.stream)

    def next_position(self) -> int:
        """The position of a host function or wait being submitted now."""
        with self.lock:
            self.submitted += 1
            return self.submitted

    def fail(self, error: OffloadError, at: int | None = None) -> QueueFailure:
        """Fail at position ``at`` (None: now, behind everything submitted so far), unless failed already."""
        with self.lock:
            if self.failure is None:
                self.failed_at = self._place(at)
                failure = QueueFailure(error, self.owner)
                report_failure(self.owner, failure)  # before it is published, as AsyncInfo does
                self.failure = failure
            return self.failure

    def adopt(self, failure: QueueFailure, at: int | None = None) -> None:
        with self.lock:
            if self.failure is None:
                self.failed_at = self._place(at)
                report_failure(self.owner, failure)
                self.failure = failure

    def _place(self, at: int | None) -> int:
        if at is None:
            self.submitted += 1
            return self.submitted
        return at

    def move_failure_to(self, position: int) -> None:
        """The failure happened at ``position`` at the latest (a host function adopted it)."""
        with self.lock:
            self.failed_at = min(self.failed_at, position)

    def failed_before(self, position: int) -> QueueFailure | None:
        """The failure, if it happened at or before ``position``."""
        failure = self.failure  # set after failed_at: a failure read here has its place
        return failure if failure is not None and self.failed_at <= position else None


class GpuEvent(GenericEvent):
    """A driver event, the queue it was recorded on and its position there (see :class:`GpuStream`)."""

    __slots__ = ("event", "queue", "position", "claim")

    def __init__(self, device: GpuDeviceCore, event: Any):
        self.device = device  # GenericEvent's fields, set here: one frame fewer per olCreateEvent
        self.failure = None
        self.timed = False
        self.event = event
        self.queue: GpuStream | None = None
        self.position = 0
        # Whoever destroys the event first pops this (list.pop is atomic): of two racing destroys of
        # one event, exactly one gets the entry and releases the driver event; the other gets IndexError.
        self.claim = [True]

