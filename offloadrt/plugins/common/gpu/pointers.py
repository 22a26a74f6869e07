"""Memory and streams offloadrt did not make: what a GPU's driver says about them.

Another library's array (CuPy, PyTorch, Numba) hands offloadrt a bare address, and maybe a stream
whose work must finish before the data is read. The driver tells where the memory lives
(``cuPointerGetAttribute``, ``hipPointerGetAttributes``: the vendor hook :meth:`GpuPointers._pointer_facts`),
and a driver event recorded on that stream orders offloadrt's work after it.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from ....types import AllocType
from ..resources import AsyncInfo
from .core import GpuDeviceCore
from .memory import GpuMemory


@dataclass(frozen=True)
class PointerFacts:
    """Where a GPU driver places the memory at an address.

    ``kind``: ``DEVICE``, ``HOST`` (page-locked host memory) or ``MANAGED``; None for a kind offloadrt
    cannot use (a CUDA array, say), which ``driver_kind`` names. ``device_id``: the driver's ordinal
    of the device the memory belongs to. ``host_address``: where the host reaches it (0: it cannot).
    """

    kind: AllocType | None
    device_id: int
    host_address: int
    driver_kind: str


class GpuPointers(GpuMemory):
    """A GPU device's answers about foreign memory and streams (see the module's docstring)."""

    def pointer_facts(self, ptr: int) -> PointerFacts | None:
        """Where the memory at ``ptr`` lives, or None when this driver does not know it (pageable host
        memory, another vendor's memory). Any address inside an allocation may be asked about."""
        self.enter()
        return self._pointer_facts(ptr)

    @abstractmethod
    def _pointer_facts(self, ptr: int) -> PointerFacts | None:
        """The vendor's pointer query (the device is current); None for memory the driver does not know."""

    def reaches_directly(self, peer: GpuDeviceCore) -> bool:
        """Whether this device can read ``peer``'s memory itself (peer access), so a copy between
        the two never passes through host memory. A device reaches its own memory."""
        if peer is self:
            return True
        self.enter()
        return self._can_access_peer(peer)

    def wait_for_stream(self, stream: Any, queue: AsyncInfo | None) -> None:
        """Order ``queue`` (None: the calling thread) after the work given so far to ``stream``.

        ``stream`` is a driver stream of this device that offloadrt did not make, or a default
        stream handle the driver takes as it is (CUDA's 1 and 2, HIP's 0 and 2). A pooled plain
        event is recorded on it; the queue waits for the event on the device, the thread in
        ``cuEventSynchronize``/``hipEventSynchronize``. The event goes back to the pool at once:
        a wait holds on to the record it was given, whatever is recorded later.
        """
        if queue is not None and queue.failure is not None:
            raise queue.queue_error()
        self.enter()
        event = self.event_pool.acquire()
        try:
            self.check(self.drv_event_record(event, stream), self.call_names["event_record"])
            if queue is None:
                self.check(self.drv_event_sync(event), self.call_names["event_sync"])
            else:
                waiting = queue.stream  # type: ignore[attr-defined]
                self.check(self.drv_stream_wait_event(waiting, event, 0), self.call_names["stream_wait_event"])
        finally:
            self.event_pool.release(event)
