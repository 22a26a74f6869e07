"""Port of offload/unittests/OffloadAPI/queue/olSyncQueue.cpp (fixture: OffloadQueueTest)."""

from __future__ import annotations

from offloadrt import api

from ._helpers import within


def test_success_empty_queue(queue: api.Queue) -> None:
    assert within(api.olSyncQueue, queue) is None
