"""Port of offload/unittests/OffloadAPI/memory/olMemAlloc.cpp (2025 cases, late-2025 churn cases, 2026 suite)."""

from __future__ import annotations

import pytest

from offloadrt import AllocType, ErrorCode, OffloadError, api

from ..conftest import assert_error, assert_success_or_unsupported, threadify

# Properties.hpp (2026): AllocTypes = {DEVICE, MANAGED, HOST}, DefaultAllocSize = 1024, TestAllocsNum = 1000.
ALLOC_TYPES = [AllocType.DEVICE, AllocType.MANAGED, AllocType.HOST]
DEFAULT_ALLOC_SIZE = 1024
TEST_ALLOCS_NUM = 1000


def _alloc_and_free(device: api.Device, alloc_type: AllocType) -> None:
    alloc = api.olMemAlloc(device, alloc_type, 1024)
    assert alloc, "olMemAlloc returned a null address"
    api.olMemFree(alloc)


def test_success_alloc_managed(device: api.Device) -> None:
    _alloc_and_free(device, AllocType.MANAGED)


def test_success_alloc_host(device: api.Device) -> None:
    _alloc_and_free(device, AllocType.HOST)


def test_success_alloc_device(device: api.Device) -> None:
    _alloc_and_free(device, AllocType.DEVICE)


class TestAllocTypes:
    """2026 ``olMemAllocAllocTypesTest`` (HOST through olMemAlloc: offloadrt has no olMemAllocHost)."""

    @pytest.mark.parametrize("alloc_type", ALLOC_TYPES, ids=lambda t: t.name)
    def test_success(self, device: api.Device, alloc_type: AllocType) -> None:
        alloc = api.olMemAlloc(device, alloc_type, DEFAULT_ALLOC_SIZE)
        assert alloc
        api.olMemFree(alloc)


def test_success_alloc_many(device: api.Device) -> None:
    allocs = []
    try:
        for i in range(1, TEST_ALLOCS_NUM):
            alloc = api.olMemAlloc(device, ALLOC_TYPES[i % 3], DEFAULT_ALLOC_SIZE * i)
            assert alloc
            allocs.append(alloc)
    finally:
        for alloc in allocs:
            api.olMemFree(alloc)


def test_success_alloc_tiny_churn(device: api.Device) -> None:
    for _ in range(20000):
        alloc = assert_success_or_unsupported(api.olMemAlloc, device, AllocType.DEVICE, 8)
        assert alloc
        api.olMemFree(alloc)


def test_success_alloc_tiny_parallel_churn(device: api.Device) -> None:
    probe = assert_success_or_unsupported(api.olMemAlloc, device, AllocType.DEVICE, 8)
    assert probe
    api.olMemFree(probe)

    first_error: list[BaseException] = []

    def churn(_: int) -> None:
        for _ in range(2000):
            if first_error:
                return
            try:
                alloc = api.olMemAlloc(device, AllocType.DEVICE, 8)
                if not alloc:
                    raise AssertionError("olMemAlloc returned a null address")
                api.olMemFree(alloc)
            except (OffloadError, AssertionError) as exc:
                first_error.append(exc)
                return

    threadify(churn)
    assert not first_error, f"first failure: {first_error[0]!r}"


def test_invalid_null_device(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olMemAlloc, None, AllocType.DEVICE, 1024)
