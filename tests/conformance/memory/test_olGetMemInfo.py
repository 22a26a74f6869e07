"""Port of offload/unittests/OffloadAPI/memory/olGetMemInfo.cpp (late 2025; the 2026 file has the same cases).

Upstream instantiates one suite per allocation type (``olGetMemInfoDeviceTest``, ``…ManagedTest``,
``…HostTest``), each with a 1024-byte allocation made in SetUp and freed in TearDown; here that is
the ``alloc`` fixture, parametrized over the three types. The ``…Offset`` cases query an address
123 bytes into the allocation (docs/api.md: any address inside an allocation works).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from offloadrt import AllocType, ErrorCode, MemInfo, api

from ..conftest import assert_error

SIZE = 1024
OFFSET = 123


@dataclass
class Allocation:
    device: api.Device
    kind: AllocType
    ptr: int

    def offset_ptr(self) -> int:
        return self.ptr + OFFSET


def _allocate(device: api.Device, kind: AllocType) -> Iterator[Allocation]:
    ptr = api.olMemAlloc(device, kind, SIZE)
    yield Allocation(device, kind, ptr)
    api.olMemFree(ptr)


@pytest.fixture(params=[AllocType.DEVICE, AllocType.MANAGED, AllocType.HOST], ids=["Device", "Managed", "Host"])
def alloc(request: pytest.FixtureRequest, device: api.Device) -> Iterator[Allocation]:
    """``olGetMemInfo{Device,Managed,Host}Test``: one allocation of each type."""
    yield from _allocate(device, request.param)


@pytest.fixture
def device_alloc(device: api.Device) -> Iterator[Allocation]:
    """``olGetMemInfoDeviceTest``: a DEVICE allocation."""
    yield from _allocate(device, AllocType.DEVICE)


def _success_device(a: Allocation, ptr: int) -> None:
    assert api.olGetMemInfo(ptr, MemInfo.DEVICE) is a.device


def _success_base(a: Allocation, ptr: int) -> None:
    assert api.olGetMemInfo(ptr, MemInfo.BASE) == a.ptr


def _success_size(a: Allocation, ptr: int) -> None:
    assert api.olGetMemInfo(ptr, MemInfo.SIZE) == SIZE


def _success_type(a: Allocation, ptr: int) -> None:
    value = api.olGetMemInfo(ptr, MemInfo.TYPE)
    assert value == a.kind
    assert isinstance(value, AllocType)


def test_success_device(alloc: Allocation) -> None:
    _success_device(alloc, alloc.ptr)


def test_success_device_offset(alloc: Allocation) -> None:
    _success_device(alloc, alloc.offset_ptr())


def test_success_base(alloc: Allocation) -> None:
    _success_base(alloc, alloc.ptr)


def test_success_base_offset(alloc: Allocation) -> None:
    _success_base(alloc, alloc.offset_ptr())


def test_success_size(alloc: Allocation) -> None:
    _success_size(alloc, alloc.ptr)


def test_success_size_offset(alloc: Allocation) -> None:
    _success_size(alloc, alloc.offset_ptr())


def test_success_type(alloc: Allocation) -> None:
    _success_type(alloc, alloc.ptr)


def test_success_type_offset(alloc: Allocation) -> None:
    _success_type(alloc, alloc.offset_ptr())


def test_invalid_not_found(device_alloc: Allocation) -> None:
    # Assuming that 0x1234 is never a real allocation.
    assert_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, 0x1234, MemInfo.BASE)


@pytest.mark.parametrize("null", [None, 0], ids=["None", "0"])
def test_invalid_null_ptr(device_alloc: Allocation, null: int | None) -> None:
    assert_error(ErrorCode.INVALID_NULL_POINTER, api.olGetMemInfo, null, MemInfo.DEVICE)
