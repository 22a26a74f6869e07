"""Port of offload/unittests/OffloadAPI/memory/olMemRegister.cpp (early 2026, ``Flags = 0``).

Upstream registers an ``int Arr[50]`` on the stack; here it is a ctypes ``c_int * 50`` array, whose
address and ``sizeof`` (200 bytes) are passed. As upstream, the pointer handed to
``olMemUnregister`` is the one ``olMemRegister`` returned (the pinned pointer).
"""

from __future__ import annotations

import ctypes

import pytest

from offloadrt import ErrorCode, api

from ..conftest import assert_error

FLAGS = 0  # ol_memory_register_flags_t Flags = {}


def _int_array() -> ctypes.Array[ctypes.c_int]:
    """``int Arr[50]``."""
    return (ctypes.c_int * 50)()


def test_success_register(device: api.Device) -> None:
    arr = _int_array()
    pinned = api.olMemRegister(device, ctypes.addressof(arr), ctypes.sizeof(arr), FLAGS)
    assert pinned, "olMemRegister returned a null pinned pointer"
    assert api.olMemUnregister(device, pinned) is None


def test_success_multiple_register(device: api.Device) -> None:
    arr = _int_array()
    pinned = api.olMemRegister(device, ctypes.addressof(arr), ctypes.sizeof(arr), FLAGS)
    assert pinned
    pinned1 = api.olMemRegister(device, ctypes.addressof(arr), ctypes.sizeof(arr), FLAGS)
    assert pinned1
    assert api.olMemUnregister(device, pinned) is None
    assert api.olMemUnregister(device, pinned1) is None


def test_invalid_size_register(device: api.Device) -> None:
    arr = _int_array()
    assert_error(ErrorCode.INVALID_SIZE, api.olMemRegister, device, ctypes.addressof(arr), 0, FLAGS)


@pytest.mark.parametrize("null", [None, 0], ids=["None", "0"])
def test_invalid_ptr_register(device: api.Device, null: int | None) -> None:
    arr = _int_array()
    assert_error(ErrorCode.INVALID_NULL_POINTER, api.olMemRegister, device, null, ctypes.sizeof(arr), FLAGS)


@pytest.mark.parametrize("null", [None, 0], ids=["None", "0"])
def test_invalid_ptr_unregister(device: api.Device, null: int | None) -> None:
    arr = _int_array()
    pinned = api.olMemRegister(device, ctypes.addressof(arr), ctypes.sizeof(arr), FLAGS)
    assert pinned
    assert_error(ErrorCode.INVALID_NULL_POINTER, api.olMemUnregister, device, null)
    assert api.olMemUnregister(device, pinned) is None


def test_unregistered_ptr_unregister(device: api.Device) -> None:
    arr = _int_array()
    arr1 = _int_array()
    pinned = api.olMemRegister(device, ctypes.addressof(arr), ctypes.sizeof(arr), FLAGS)
    assert pinned
    assert_error(ErrorCode.INVALID_ARGUMENT, api.olMemUnregister, device, ctypes.addressof(arr1))
    assert api.olMemUnregister(device, pinned) is None


def test_partial_overlap_ptr_register(device: api.Device) -> None:
    arr = _int_array()
    pinned = api.olMemRegister(device, ctypes.addressof(arr), ctypes.sizeof(arr), FLAGS)
    assert pinned
    arr_plus_2 = ctypes.addressof(arr) + 2 * ctypes.sizeof(ctypes.c_int)  # Arr + 2
    assert_error(ErrorCode.INVALID_ARGUMENT, api.olMemRegister, device, arr_plus_2, ctypes.sizeof(arr), FLAGS)
    assert api.olMemUnregister(device, pinned) is None
