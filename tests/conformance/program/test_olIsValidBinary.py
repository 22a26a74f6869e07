"""Port of offload/unittests/OffloadAPI/program/olIsValidBinary.cpp (fixture: OffloadDeviceTest).

Upstream has two versions: ``@915c4ac7`` with one ``Success`` (real binary → true, size 0 →
false, null data → INVALID_NULL_POINTER) and ``@c7b4abd1``, which splits it into ``Success``,
``Invalid`` and ``NullPointer``; this port follows the latter. Upstream's "``IsValid`` stays
false" after the error is the Python form of the call raising and returning nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from offloadrt import ErrorCode, api

from ..conftest import assert_error


def test_success(device: api.Device, load_device_binary: Callable[[str, api.Device], bytes]) -> None:
    image = load_device_binary("foo", device)
    assert api.olIsValidBinary(device, image) is True
    # The real binary's start with size 0.
    assert api.olIsValidBinary(device, memoryview(image)[:0]) is False


def test_invalid(device: api.Device, load_device_binary: Callable[[str, api.Device], bytes]) -> None:
    image = load_device_binary("foo", device)
    assert api.olIsValidBinary(device, memoryview(image)[:0]) is False


def test_null_pointer(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_POINTER, api.olIsValidBinary, device, None)
