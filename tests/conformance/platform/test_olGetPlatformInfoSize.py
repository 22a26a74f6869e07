"""Port of offload/unittests/OffloadAPI/platform/olGetPlatformInfoSize.cpp (fixture: OffloadPlatformTest).

Not ported (the size is returned, there is no size pointer): ``InvalidNullPointer``.
"""

from __future__ import annotations

from offloadrt import ErrorCode, PlatformInfo, api

from ..conftest import FORCE_UINT32, assert_error

SIZEOF_PLATFORM_BACKEND = 4  # sizeof(ol_platform_backend_t)


def test_success_name(platform: api.Platform) -> None:
    assert api.olGetPlatformInfoSize(platform, PlatformInfo.NAME) != 0


def test_success_vendor_name(platform: api.Platform) -> None:
    assert api.olGetPlatformInfoSize(platform, PlatformInfo.VENDOR_NAME) != 0


def test_success_version(platform: api.Platform) -> None:
    assert api.olGetPlatformInfoSize(platform, PlatformInfo.VERSION) != 0


def test_success_backend(platform: api.Platform) -> None:
    assert api.olGetPlatformInfoSize(platform, PlatformInfo.BACKEND) == SIZEOF_PLATFORM_BACKEND


def test_invalid_null_handle(platform: api.Platform) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetPlatformInfoSize, None, PlatformInfo.BACKEND)


def test_invalid_platform_info_enumeration(platform: api.Platform) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetPlatformInfoSize, platform, FORCE_UINT32)
