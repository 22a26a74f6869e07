"""Port of offload/unittests/OffloadAPI/platform/olGetPlatformInfo.cpp (fixture: OffloadPlatformTest).

``test_success_name`` is the 2026 ``olGetPlatformInfoNamesTest.SuccessName``, parametrized over
``PlatformInfoNames`` (NAME, VENDOR_NAME, VERSION); it folds the 2025 ``SuccessName``,
``SuccessVendorName`` and ``SuccessVersion`` and keeps their ``Size < 0x1000`` bound.

Not ported (outputs are returned, there is no PropSize or PropValue): ``InvalidSizeZero``,
``InvalidSizeSmall``, ``InvalidNullPointerPropValue``.
"""

from __future__ import annotations

import pytest

from offloadrt import ErrorCode, PlatformBackend, PlatformInfo, api

from ..conftest import FORCE_UINT32, assert_error

PLATFORM_INFO_NAMES = [PlatformInfo.NAME, PlatformInfo.VENDOR_NAME, PlatformInfo.VERSION]


@pytest.mark.parametrize("prop", PLATFORM_INFO_NAMES, ids=lambda p: p.name)
def test_success_name(platform: api.Platform, prop: PlatformInfo) -> None:
    size = api.olGetPlatformInfoSize(platform, prop)
    assert size > 0
    assert size < 0x1000
    name = api.olGetPlatformInfo(platform, prop)
    assert isinstance(name, str)
    # strlen(Name) == Size - 1: the whole string up to its NUL, nothing embedded.
    assert "\0" not in name
    assert len(name.encode()) == size - 1


def test_success_backend(platform: api.Platform) -> None:
    backend = api.olGetPlatformInfo(platform, PlatformInfo.BACKEND)
    assert isinstance(backend, PlatformBackend)


def test_invalid_null_handle(platform: api.Platform) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetPlatformInfo, None, PlatformInfo.BACKEND)


def test_invalid_platform_info_enumeration(platform: api.Platform) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetPlatformInfo, platform, FORCE_UINT32)
