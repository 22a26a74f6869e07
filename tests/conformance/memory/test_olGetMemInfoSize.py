"""Port of offload/unittests/OffloadAPI/memory/olGetMemInfoSize.cpp (late 2025 cases and the 2026 property suite).

Each test owns a DEVICE allocation of 0x1024 bytes (sic, as upstream), freed afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from offloadrt import AllocType, ErrorCode, MemInfo, api

from ..conftest import FORCE_UINT32, assert_error

# Properties.hpp MemInfoSizeProperties: the C size of each value.
MEM_INFO_SIZES = {MemInfo.DEVICE: 8, MemInfo.BASE: 8, MemInfo.SIZE: 8, MemInfo.TYPE: 4}


@pytest.fixture
def ptr(device: api.Device) -> Iterator[int]:
    address = api.olMemAlloc(device, AllocType.DEVICE, 0x1024)
    yield address
    api.olMemFree(address)


def test_success_device(ptr: int) -> None:
    assert api.olGetMemInfoSize(ptr, MemInfo.DEVICE) == 8  # sizeof(ol_device_handle_t)


def test_success_base(ptr: int) -> None:
    assert api.olGetMemInfoSize(ptr, MemInfo.BASE) == 8  # sizeof(void *)


def test_success_size(ptr: int) -> None:
    assert api.olGetMemInfoSize(ptr, MemInfo.SIZE) == 8  # sizeof(size_t)


def test_success_type(ptr: int) -> None:
    assert api.olGetMemInfoSize(ptr, MemInfo.TYPE) == 4  # sizeof(ol_alloc_type_t)


class TestSizeTypes:
    """2026 ``olGetMemInfoSizeTypesTest``: one case per MemInfoSizeProperties entry."""

    @pytest.mark.parametrize("prop", list(MEM_INFO_SIZES), ids=lambda p: p.name)
    def test_success(self, ptr: int, prop: MemInfo) -> None:
        assert api.olGetMemInfoSize(ptr, prop) == MEM_INFO_SIZES[prop]


def test_invalid_symbol_info_enumeration(ptr: int) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetMemInfoSize, ptr, FORCE_UINT32)
