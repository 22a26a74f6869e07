"""Platform info queries."""

from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, OffloadError
from ..types import PLATFORM_INFO_KINDS, PlatformInfo, UnavailablePlatform
from . import _state
from ._entry import entry_point
from ._info import value_size
from ._state import Context
from .handles import Platform, bad_handle, enum_value


def _platform_value(platform: object, requested: object) -> tuple[PlatformInfo, Any]:
    if type(platform) is not Platform:
        raise bad_handle(platform, Platform, "platform")
    prop = enum_value(PlatformInfo, requested, "platform info")
    plugin = platform._plugin
    if not plugin.initialized:
        raise OffloadError(ErrorCode.INVALID_PLATFORM, f"{platform!r} belongs to a runtime that was shut down")
    if prop is PlatformInfo.NAME:
        return prop, plugin.name
    if prop is PlatformInfo.VENDOR_NAME:
        return prop, plugin.vendor_name
    if prop is PlatformInfo.VERSION:
        return prop, plugin.version()
    return prop, plugin.backend


@entry_point
def olGetPlatformInfo(ctx: Context, platform: Platform, prop: PlatformInfo) -> Any:
    """The value of ``prop`` for ``platform`` (``str`` or ``PlatformBackend``)."""
    return _platform_value(platform, prop)[1]


@entry_point
def olGetPlatformInfoSize(ctx: Context, platform: Platform, prop: PlatformInfo) -> int:
    """The byte size the C API reports for ``prop``."""
    prop, value = _platform_value(platform, prop)
    return value_size(PLATFORM_INFO_KINDS[prop], value)


def unavailable_platforms() -> list[UnavailablePlatform]:
    """The platforms of the running runtime that did not start, each with the reason.

    The host platform always starts; a GPU platform is missing when its vendor package or driver
    is missing, its initialisation failed, or it has no device. ``UNINITIALIZED`` outside
    ``olInit``/``olShutDown``.
    """
    ctx = _state.STATE.context
    if ctx is None:
        raise _state.uninitialized()
    return list(ctx.not_started)
