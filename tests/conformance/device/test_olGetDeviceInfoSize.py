"""Port of offload/unittests/OffloadAPI/device/olGetDeviceInfoSize.cpp.

Ported from the 2026 version: ``olGetDeviceInfoSizeEqualTest.Success`` and
``olGetDeviceInfoSizeNonZeroTest.Success`` are parametrized over their properties; the 2025
per-property cases (``SuccessType``, ``SuccessName``, ...) map onto them (see ``tests/conformance/README.md``).

Not ported: ``InvalidNullPointer`` (the size is returned, there is no size pointer);
``olGetDeviceInfoSizeHostTest.SuccessDriverId`` and the ``NUM_LANES`` parameter (2026-only
properties offloadrt's ``DeviceInfo`` does not define).
"""

from __future__ import annotations

import pytest

from offloadrt import DeviceInfo, ErrorCode, api

from ..conftest import FORCE_UINT32, assert_error, device_info_or_skip

SIZEOF_DIMENSIONS = 12  # sizeof(ol_dimensions_t) == 3 * sizeof(uint32_t)

# answerSizeEqualToTypeSizeProperties: Uint32 (without NUM_LANES), Uint64, fp capability
# flags, Platform, DeviceType; each with sizeof its C type.
EQUAL_SIZE_PROPS = (
    [(p, 4) for p in (
        DeviceInfo.MAX_WORK_GROUP_SIZE, DeviceInfo.MAX_WORK_SIZE, DeviceInfo.VENDOR_ID, DeviceInfo.NUM_COMPUTE_UNITS,
        DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR, DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT, DeviceInfo.NATIVE_VECTOR_WIDTH_INT,
        DeviceInfo.NATIVE_VECTOR_WIDTH_LONG, DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT,
        DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE, DeviceInfo.NATIVE_VECTOR_WIDTH_HALF, DeviceInfo.MAX_CLOCK_FREQUENCY,
        DeviceInfo.MEMORY_CLOCK_RATE, DeviceInfo.ADDRESS_BITS)]
    + [(p, 8) for p in (DeviceInfo.MAX_MEM_ALLOC_SIZE, DeviceInfo.GLOBAL_MEM_SIZE,
                        DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE)]
    + [(p, 4) for p in (DeviceInfo.SINGLE_FP_CONFIG, DeviceInfo.HALF_FP_CONFIG, DeviceInfo.DOUBLE_FP_CONFIG)]
    + [(DeviceInfo.PLATFORM, 8), (DeviceInfo.TYPE, 4)]
)
NAME_PROPS = [DeviceInfo.NAME, DeviceInfo.PRODUCT_NAME, DeviceInfo.UID, DeviceInfo.VENDOR, DeviceInfo.DRIVER_VERSION]


@pytest.mark.parametrize(("prop", "size"), EQUAL_SIZE_PROPS, ids=[p.name for p, _ in EQUAL_SIZE_PROPS])
def test_equal_success(device: api.Device, prop: DeviceInfo, size: int) -> None:
    """``olGetDeviceInfoSizeEqualTest.Success``."""
    assert device_info_or_skip(api.olGetDeviceInfoSize, device, prop) == size


@pytest.mark.parametrize("prop", NAME_PROPS, ids=lambda p: p.name)
def test_non_zero_success(device: api.Device, prop: DeviceInfo) -> None:
    """``olGetDeviceInfoSizeNonZeroTest.Success``."""
    assert api.olGetDeviceInfoSize(device, prop) != 0


def test_success_max_work_group_size_per_dimension(device: api.Device) -> None:
    size = api.olGetDeviceInfoSize(device, DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION)
    assert size == SIZEOF_DIMENSIONS


def test_success_max_work_size_per_dimension(device: api.Device) -> None:
    size = api.olGetDeviceInfoSize(device, DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION)
    assert size == SIZEOF_DIMENSIONS


def test_invalid_null_handle(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetDeviceInfoSize, None, DeviceInfo.TYPE)


def test_invalid_device_info_enumeration(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetDeviceInfoSize, device, FORCE_UINT32)
