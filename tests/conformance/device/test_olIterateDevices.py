"""Port of offload/unittests/OffloadAPI/device/olIterateDevices.cpp (fixture: OffloadTest, not per device).

``user_data`` is a list the callbacks write into, where upstream passes a pointer.
"""

from __future__ import annotations

import pytest

from offloadrt import api


def test_success_empty_callback(offload: None) -> None:
    assert api.olIterateDevices(lambda device, data: False, None) is None


def test_success_get_device(offload: None) -> None:
    count = [0]

    def counting(device: api.Device, data: list[int]) -> bool:
        data[0] += 1
        return False

    assert api.olIterateDevices(counting, count) is None
    if count[0] == 0:
        pytest.skip("No available devices.")

    found: list[api.Device | None] = [None]

    def grab(device: api.Device, data: list[api.Device | None]) -> bool:
        data[0] = device
        return True

    assert api.olIterateDevices(grab, found) is None
    assert found[0] is not None
    assert isinstance(found[0], api.Device)
