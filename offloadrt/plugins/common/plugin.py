"""A backend: finds its devices at ``init`` and releases them at ``deinit``."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ...errors import OffloadError
from ...types import PlatformBackend
from .device import GenericDevice


class PluginUnavailable(Exception):
    """Raised by ``_init_impl`` when the backend's driver package or library is missing."""



class GenericPlugin(ABC):
    """A backend: finds its devices at ``init`` and releases them at ``deinit``.

    ``unavailable_reason`` says why a plugin has no devices (driver package or library
    missing, no device present); it is ``None`` for a working plugin.
    """

    name = "generic"
    backend = PlatformBackend.UNKNOWN
    vendor_name = "Unknown platform vendor"

    def __init__(self) -> None:
        self.devices: list[GenericDevice] = []
        self.unavailable_reason: str | None = None
        self.initialized = False

    def init(self) -> None:
        """Start the backend and every device; a missing driver leaves zero devices and a reason."""
        try:
            count = self._init_impl()
        except PluginUnavailable as exc:
            self.unavailable_reason = str(exc)
            count = 0
        if count == 0 and self.unavailable_reason is None:
            self.unavailable_reason = "no devices found"
        self.initialized = True
        for device_id in range(count):
            device = self._create_device(device_id)
            device.init()
            self.devices.append(device)

    def deinit(self) -> list[OffloadError]:
        """De-initialise every device and the backend; return every error, dropping none."""
        errors: list[OffloadError] = []
        for device in self.devices:
            errors.extend(device.deinit())
        self.devices = []
        if self.initialized:
            try:
                self._deinit_impl()
            except OffloadError as exc:
                errors.append(exc)
        self.initialized = False
        return errors

    def is_data_exchangeable(self, src: GenericDevice, dst: GenericDevice) -> bool:
        """Whether ``src.data_exchange`` can copy straight to ``dst`` (same plugin)."""
        return False

    def version(self) -> str:
        """The backend's own version (driver or runtime) for platform info."""
        return "unknown"

    # hooks
    @abstractmethod
    def _init_impl(self) -> int:
        ...

    def _deinit_impl(self) -> None:
        pass

    @abstractmethod
    def _create_device(self, device_id: int) -> GenericDevice:
        ...
