"""Port of offload/unittests/OffloadAPI/memory/olMemFillHost.cpp (2026).

Upstream's ``olMemFillHostRemainderTest`` skips the implicit olInit so that it can set
``OFFLOAD_DISABLE_VALIDATION`` before ``olInit({HOST})``: with validation off, a fill size that is
not a multiple of the pattern size reaches the host plugin's fill, which must stop at the fill size.
The local fixture below does the same and restores the variable after ``olShutDown``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from offloadrt import AllocType, DeviceInfo, ErrorCode, OffloadError, PlatformBackend, PlatformInfo, api

CANARY = 0xAA
PATTERN = bytes([1, 2, 3, 4])
ALLOC_SIZE = 16


@dataclass
class RemainderSetup:
    device: api.Device
    queue: api.Queue


@pytest.fixture
def remainder_setup() -> Iterator[RemainderSetup]:
    """``olMemFillHostRemainderTest::SetUp``/``TearDown``: validation off, host platform only, one queue."""
    with pytest.raises(OffloadError) as info:  # validation is read at the first olInit: none may be active
        api.olIterateDevices(lambda device, _: False)
    assert info.value.code == ErrorCode.UNINITIALIZED, "the runtime is already initialised"

    saved = os.environ.get("OFFLOAD_DISABLE_VALIDATION")
    os.environ["OFFLOAD_DISABLE_VALIDATION"] = "1"
    queue = None
    try:
        api.olInit(platforms=[PlatformBackend.HOST])
        try:
            devices: list[api.Device] = []
            api.olIterateDevices(lambda device, _: devices.append(device))
            hosts = [d for d in devices if api.olGetPlatformInfo(api.olGetDeviceInfo(d, DeviceInfo.PLATFORM),
                                                                   PlatformInfo.BACKEND) == PlatformBackend.HOST]
            if not hosts:
                pytest.skip("No host device.")
            queue = api.olCreateQueue(hosts[0])
            yield RemainderSetup(hosts[0], queue)
        finally:
            if queue is not None:
                api.olDestroyQueue(queue)
            api.olShutDown()
    finally:
        if saved is None:
            del os.environ["OFFLOAD_DISABLE_VALIDATION"]
        else:
            os.environ["OFFLOAD_DISABLE_VALIDATION"] = saved


def _fill_with_remainder(setup: RemainderSetup, fill_size: int) -> bytes:
    alloc = api.olMemAlloc(setup.device, AllocType.MANAGED, ALLOC_SIZE)
    api.olMemFill(setup.queue, alloc, bytes([CANARY]), ALLOC_SIZE)
    api.olMemFill(setup.queue, alloc, PATTERN, fill_size)
    api.olSyncQueue(setup.queue)
    data = ctypes.string_at(alloc, ALLOC_SIZE)
    api.olMemFree(alloc)
    return data


def test_remainder_does_not_write_past_fill_size(remainder_setup: RemainderSetup) -> None:
    fill_size = 5
    data = _fill_with_remainder(remainder_setup, fill_size)
    for i in range(fill_size):
        assert data[i] == PATTERN[i % len(PATTERN)], f"byte {i}"
    for i in range(fill_size, ALLOC_SIZE):
        assert data[i] == CANARY, f"wrote past FillSize at byte {i}"


def test_pattern_larger_than_fill_size(remainder_setup: RemainderSetup) -> None:
    fill_size = 3
    data = _fill_with_remainder(remainder_setup, fill_size)
    for i in range(fill_size):
        assert data[i] == PATTERN[i], f"byte {i}"
    for i in range(fill_size, ALLOC_SIZE):
        assert data[i] == CANARY, f"wrote past FillSize at byte {i}"
