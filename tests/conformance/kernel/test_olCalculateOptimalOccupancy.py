"""Port of offload/unittests/OffloadAPI/kernel/olCalculateOptimalOccupancy.cpp.

Fixture: ``OffloadKernelTest`` (program "foo", kernel "foo") → conftest's ``kernel``.
``NullOutput`` has no test: the group size is returned, there is no output pointer to pass as NULL
(see tests/conformance/README.md). Upstream skips ``Success``/``SuccessMem`` on ``UNSUPPORTED`` (its
host plugin answers that); offloadrt's host device answers a group size, so there the skip is not
allowed.
"""

from __future__ import annotations

from typing import Any

from offloadrt import DeviceInfo, DeviceType, ErrorCode, api

from ..conftest import assert_error, assert_success_or_unsupported


def _occupancy(device: api.Device, kernel: api.Symbol, shared_memory: int) -> Any:
    if api.olGetDeviceInfo(device, DeviceInfo.TYPE) == DeviceType.HOST:
        return api.olCalculateOptimalOccupancy(device, kernel, shared_memory)  # no UNSUPPORTED to skip on
    return assert_success_or_unsupported(api.olCalculateOptimalOccupancy, device, kernel, shared_memory)


def test_success(device: api.Device, kernel: api.Symbol) -> None:
    size = _occupancy(device, kernel, 0)
    assert size > 0


def test_success_mem(device: api.Device, kernel: api.Symbol) -> None:
    size = _occupancy(device, kernel, 1024)
    assert size > 0


def test_null_kernel(device: api.Device, kernel: api.Symbol) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olCalculateOptimalOccupancy, device, None, 0)


def test_null_device(device: api.Device, kernel: api.Symbol) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olCalculateOptimalOccupancy, None, kernel, 0)
