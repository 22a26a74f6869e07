"""Port of offload/unittests/OffloadAPI/memory/olMemFree.cpp (2025 cases and the 2026 parametrized suite)."""

from __future__ import annotations

import pytest

from offloadrt import AllocType, ErrorCode, api

from ..conftest import assert_error

ALLOC_TYPES = [AllocType.DEVICE, AllocType.MANAGED, AllocType.HOST]  # Properties.hpp AllocTypes


def test_success_free_managed(device: api.Device) -> None:
    alloc = api.olMemAlloc(device, AllocType.MANAGED, 1024)
    assert api.olMemFree(alloc) is None


def test_success_free_host(device: api.Device) -> None:
    alloc = api.olMemAlloc(device, AllocType.HOST, 1024)
    assert api.olMemFree(alloc) is None


def test_success_free_device(device: api.Device) -> None:
    alloc = api.olMemAlloc(device, AllocType.DEVICE, 1024)
    assert api.olMemFree(alloc) is None


class TestAllocTypes:
    """2026 ``olMemFreeAllocTypesTest`` (HOST through olMemAlloc: offloadrt has no olMemAllocHost)."""

    @pytest.mark.parametrize("alloc_type", ALLOC_TYPES, ids=lambda t: t.name)
    def test_success(self, device: api.Device, alloc_type: AllocType) -> None:
        alloc = api.olMemAlloc(device, alloc_type, 1024)
        assert api.olMemFree(alloc) is None


@pytest.mark.parametrize("null", [None, 0], ids=["None", "0"])
def test_invalid_null_ptr(device: api.Device, null: int | None) -> None:
    alloc = api.olMemAlloc(device, AllocType.DEVICE, 1024)
    assert_error(ErrorCode.INVALID_NULL_POINTER, api.olMemFree, null)
    assert api.olMemFree(alloc) is None
