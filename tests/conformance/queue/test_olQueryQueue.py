"""Port of offload/unittests/OffloadAPI/queue/olQueryQueue.cpp (fixture: OffloadQueueTest)."""

from __future__ import annotations

from offloadrt import api


def test_success_empty_async_queue(queue: api.Queue) -> None:
    # Upstream passes a null output pointer; the Python form of that is ignoring the result.
    api.olQueryQueue(queue)


def test_success_empty_async_queue_check_result(queue: api.Queue) -> None:
    assert api.olQueryQueue(queue) is True
