"""Port of offload/unittests/OffloadAPI/device/olGetDeviceInfo.cpp.

Ported from the 2026 version, whose suites (``Properties.hpp``) are instantiated over every
device plus the host, as the ``device`` fixture is; each property suite is a
``pytest.mark.parametrize`` over its properties. The 2025 per-property cases
(``SuccessName``/``HostName``, ``TestDeviceMaxWorkGroupSize``/``TestHostMaxWorkGroupSize``, ...)
are the same checks and map onto these tests (see ``tests/conformance/README.md``).

Upstream passes ``PropSize = sizeof(T)`` for a property of C type ``T``; here the value is
returned, and a value that would not fit ``T`` (or is not of its Python type) fails the check.

Not ported: ``InvalidPropSize``/``InvalidSizePropSize``, ``InvalidPropSizeSmall``/
``InvalidSizePropSizeSmall``, ``InvalidNullPointerPropValue`` (no PropSize or PropValue in
Python); ``SuccessDriverId`` and the 2026-only properties (``SINGLE/DOUBLE/HALF_FP_SUPPORT``,
``NUM_LANES``, ``CONTEXT_GROUP_INDEX``), which offloadrt's ``DeviceInfo`` does not define.
"""

from __future__ import annotations

import pytest

from offloadrt import DeviceInfo, DeviceType, Dimensions, ErrorCode, FpCapabilityFlag, api

from ..conftest import FORCE_UINT32, assert_error, device_info_or_skip

UINT32_MAX = (1 << 32) - 1
UINT64_MAX = (1 << 64) - 1

FP_CONFIGS = {DeviceInfo.SINGLE_FP_CONFIG, DeviceInfo.DOUBLE_FP_CONFIG, DeviceInfo.HALF_FP_CONFIG}
# PropUint32 without the 2026-only NUM_LANES.
UINT32_PROPS = [
    DeviceInfo.MAX_WORK_GROUP_SIZE, DeviceInfo.MAX_WORK_SIZE, DeviceInfo.VENDOR_ID, DeviceInfo.NUM_COMPUTE_UNITS,
    DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR, DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT, DeviceInfo.NATIVE_VECTOR_WIDTH_INT,
    DeviceInfo.NATIVE_VECTOR_WIDTH_LONG, DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT,
    DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE, DeviceInfo.NATIVE_VECTOR_WIDTH_HALF, DeviceInfo.MAX_CLOCK_FREQUENCY,
    DeviceInfo.MEMORY_CLOCK_RATE, DeviceInfo.ADDRESS_BITS,
]
UINT64_PROPS = [DeviceInfo.MAX_MEM_ALLOC_SIZE, DeviceInfo.GLOBAL_MEM_SIZE, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE]
CAPABILITY_PROPS = [DeviceInfo.SINGLE_FP_CONFIG, DeviceInfo.HALF_FP_CONFIG, DeviceInfo.DOUBLE_FP_CONFIG]

# Properties whose value need not be non-zero: "Irrelevant" GT properties.
IRRELEVANT_GT = {DeviceInfo.HALF_FP_CONFIG, DeviceInfo.NATIVE_VECTOR_WIDTH_HALF}
# JustSupportedProperties (BoolProperties are 2026-only, not in offloadrt).
JUST_SUPPORTED_PROPS = [DeviceInfo.HALF_FP_CONFIG, DeviceInfo.NATIVE_VECTOR_WIDTH_HALF]
# NonZeroProperties = RelevantGTCapabilities + RelevantGTUint32 + Uint64.
NON_ZERO_PROPS = ([p for p in CAPABILITY_PROPS if p not in IRRELEVANT_GT]
                  + [p for p in UINT32_PROPS if p not in IRRELEVANT_GT] + UINT64_PROPS)
# HostNotMeaningfulGT: on the host these only have to succeed.
HOST_NOT_MEANINGFUL_GT = {DeviceInfo.VENDOR_ID, DeviceInfo.MAX_MEM_ALLOC_SIZE, DeviceInfo.GLOBAL_MEM_SIZE,
                          DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE}
NAME_PROPS = [DeviceInfo.NAME, DeviceInfo.PRODUCT_NAME, DeviceInfo.UID, DeviceInfo.VENDOR, DeviceInfo.DRIVER_VERSION]
DIMENSION_PROPS = [DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION, DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION]


def _ids(prop: DeviceInfo) -> str:
    return prop.name


def _check_type(prop: DeviceInfo, value: object) -> None:
    """The value is what a ``PropSize = sizeof(T)`` query of its C type ``T`` can return."""
    if prop in FP_CONFIGS:
        assert isinstance(value, FpCapabilityFlag), f"{prop.name}: {value!r} is not an FpCapabilityFlag"
        assert 0 <= int(value) <= UINT32_MAX
    elif prop in UINT64_PROPS:
        assert isinstance(value, int) and not isinstance(value, bool), f"{prop.name}: {value!r} is not an int"
        assert 0 <= value <= UINT64_MAX, f"{prop.name}: {value} does not fit uint64_t"
    else:
        assert isinstance(value, int) and not isinstance(value, bool), f"{prop.name}: {value!r} is not an int"
        assert 0 <= value <= UINT32_MAX, f"{prop.name}: {value} does not fit uint32_t"


@pytest.mark.parametrize("prop", JUST_SUPPORTED_PROPS, ids=_ids)
def test_property_support_success(device: api.Device, prop: DeviceInfo) -> None:
    """``olGetHostDeviceInfoPropertySupportTest.Success``."""
    _check_type(prop, api.olGetDeviceInfo(device, prop))


@pytest.mark.parametrize("prop", NON_ZERO_PROPS, ids=_ids)
def test_property_non_zero_value(device: api.Device, host: api.Device, prop: DeviceInfo) -> None:
    """``olGetHostDeviceInfoPropertyNonZeroTest.Value``."""
    value = device_info_or_skip(api.olGetDeviceInfo, device, prop)
    _check_type(prop, value)
    if device != host or prop not in HOST_NOT_MEANINGFUL_GT:
        assert int(value) != 0, f"{prop.name} is 0"


@pytest.mark.parametrize("prop", NAME_PROPS, ids=_ids)
def test_success_names(device: api.Device, prop: DeviceInfo) -> None:
    """``olGetDeviceHostInfoNamesTest.SuccessNames``."""
    size = api.olGetDeviceInfoSize(device, prop)
    assert size > 0
    name = api.olGetDeviceInfo(device, prop)
    assert isinstance(name, str)
    # strlen(Name) == Size - 1: the whole string up to its NUL, nothing embedded.
    assert "\0" not in name
    assert len(name.encode()) == size - 1


@pytest.mark.parametrize("prop", DIMENSION_PROPS, ids=_ids)
def test_dimensions_success(device: api.Device, prop: DeviceInfo) -> None:
    """``olGetHostDeviceInfoDimensionsTest.Success``."""
    value = api.olGetDeviceInfo(device, prop)
    assert isinstance(value, Dimensions)
    for extent in (value.x, value.y, value.z):
        assert 0 < extent <= UINT32_MAX


def test_host_success_type(device: api.Device, host: api.Device) -> None:
    device_type = api.olGetDeviceInfo(device, DeviceInfo.TYPE)
    assert isinstance(device_type, DeviceType)
    if device == host:
        assert device_type == DeviceType.HOST


def test_success_platform(device: api.Device) -> None:
    platform = api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)
    assert platform is not None
    assert isinstance(platform, api.Platform)


def test_invalid_null_handle_device(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetDeviceInfo, None, DeviceInfo.TYPE)


def test_invalid_enumeration_info_type(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetDeviceInfo, device, FORCE_UINT32)
