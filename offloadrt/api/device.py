"""Device iteration and device info queries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ErrorCode, OffloadError
from ..types import DEVICE_INFO_KINDS, DeviceInfo
from ._entry import entry_point
from ._info import unimplemented, value_size
from ._state import Context
from .handles import Device, enum_value, live_device


@entry_point
def olIterateDevices(ctx: Context, callback: Callable[[Device, Any], object], user_data: Any = None) -> None:
    """Call ``callback(device, user_data)`` for every device, host included, until it returns False.

    A callback that returns ``None`` (no return statement) goes on to the next device.
    """
    if callback is None:
        raise OffloadError(ErrorCode.INVALID_NULL_POINTER, "callback is None")
    if not callable(callback):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"callback must be callable, got {type(callback).__name__}")
    for device in list(ctx.devices):
        result = callback(device, user_data)
        if result is not None and not result:
            break


def _device_value(device: object, requested: object) -> tuple[DeviceInfo, Any]:
    gdev = live_device(device)
    prop = enum_value(DeviceInfo, requested, "device info")
    if prop is DeviceInfo.PLATFORM:
        assert isinstance(device, Device)
        return prop, device.platform
    value = gdev.info().get(prop)
    if value is None:
        raise unimplemented(prop)
    return prop, value


@entry_point
def olGetDeviceInfo(ctx: Context, device: Device, prop: DeviceInfo) -> Any:
    """The value of ``prop`` for ``device``; ``UNIMPLEMENTED`` when the backend cannot tell."""
    return _device_value(device, prop)[1]


@entry_point
def olGetDeviceInfoSize(ctx: Context, device: Device, prop: DeviceInfo) -> int:
    """The byte size the C API reports for ``prop``."""
    prop, value = _device_value(device, prop)
    return value_size(DEVICE_INFO_KINDS[prop], value)
