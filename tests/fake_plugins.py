"""Test doubles for the plugin registry: STAND-INS, not real backends.

Nothing here talks to a GPU. Each class pretends to be a CUDA or AMDGPU plugin so that the
registry, ``olInit``'s platform selection and ``olShutDown``'s error collection can be tested on
any Linux machine:

- :class:`MissingDriverPlugin` is a stand-in for a backend whose vendor package is not installed:
  its ``_init_impl`` raises :class:`PluginUnavailable`.
- :class:`FakeGpuPlugin` is a stand-in for a working GPU backend: it reuses the host plugin (so
  its device really runs kernels on the CPU) but reports itself as another platform and its
  device as a ``GPU``.
- :class:`BrokenDriverPlugin` is a stand-in for a backend whose driver is installed but fails to
  start (``_init_impl`` raises :class:`OffloadError`); :class:`MissingDriverFailingDeinitPlugin`
  has no driver and also fails to de-initialise.
- :class:`FailingDeinitPlugin` is a :class:`FakeGpuPlugin` stand-in whose backend de-initialisation
  fails with an :class:`OffloadError`.
- :class:`HostTwinPlugin` is no GPU stand-in but a second real CPU platform: the host plugin's code
  under another backend (``UNKNOWN`` in the ``two_devices`` fixture), its device typed ``CPU``,
  for the tests that need two devices on a machine that has only the host.

:func:`registered` registers stand-ins for the duration of a ``with`` block and always restores
the registry (with the factory each registration replaced) on the way out.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from offloadrt import DeviceInfo, DeviceType, ErrorCode, OffloadError, PlatformBackend
from offloadrt.plugins import GenericDevice, GenericPlugin, PluginUnavailable, register_plugin, unregister_plugin
from offloadrt.plugins.host.plugin import HostDevice, HostPlugin

MISSING_DRIVER_MODULE = "offloadrt_test_no_such_vendor_package"


class MissingDriverPlugin(GenericPlugin):
    """Stand-in for a GPU backend whose driver package is missing (import fails in ``_init_impl``)."""

    name = "fake-missing-driver"
    vendor_name = "Stand-in vendor"

    def __init__(self, backend: PlatformBackend = PlatformBackend.CUDA) -> None:
        super().__init__()
        self.backend = backend  # type: ignore[misc]
        self.deinit_calls = 0

    def _init_impl(self) -> int:
        try:
            __import__(MISSING_DRIVER_MODULE)
        except ImportError as exc:
            raise PluginUnavailable(f"the vendor package is not installed ({exc})") from exc
        raise AssertionError(f"{MISSING_DRIVER_MODULE} must not exist")  # pragma: no cover

    def _deinit_impl(self) -> None:
        self.deinit_calls += 1

    def _create_device(self, device_id: int) -> GenericDevice:  # pragma: no cover - never has devices
        raise AssertionError("a plugin without a driver has no devices")


class MissingDriverFailingDeinitPlugin(MissingDriverPlugin):
    """Stand-in for a backend without its driver whose de-initialisation also fails."""

    name = "fake-missing-driver-failing-deinit"

    def _deinit_impl(self) -> None:
        super()._deinit_impl()
        raise OffloadError(ErrorCode.BACKEND_FAILURE, f"{self.name}: stand-in driver refused to shut down")


class BrokenDriverPlugin(MissingDriverPlugin):
    """Stand-in for a backend whose driver is installed but fails to initialise."""

    name = "fake-broken-driver"

    def _init_impl(self) -> int:
        raise OffloadError(ErrorCode.BACKEND_FAILURE, "cuInit: CUDA_ERROR_NO_DEVICE (stand-in driver)")


class FakeGpuDevice(HostDevice):
    """Stand-in GPU device: a host device that reports type ``GPU`` and its own name."""

    def _obtain_info_impl(self) -> dict[DeviceInfo, Any]:
        info = super()._obtain_info_impl()
        info[DeviceInfo.TYPE] = DeviceType.GPU
        info[DeviceInfo.NAME] = f"stand-in GPU of {self.plugin.name}"
        return info

    def _free_impl(self, ptr: int, kind: Any) -> None:
        plugin = self.plugin
        assert isinstance(plugin, FakeGpuPlugin)
        with plugin.record_lock:
            plugin.freed.append(ptr)
        super()._free_impl(ptr, kind)


class FakeGpuPlugin(HostPlugin):
    """Stand-in for a working GPU backend: the host plugin under another backend and name.

    Records what the runtime does to it: ``deinit_calls`` (backend de-initialisations) and
    ``freed`` (addresses its device freed).
    """

    def __init__(self, backend: PlatformBackend = PlatformBackend.CUDA) -> None:
        super().__init__()
        self.backend = backend  # type: ignore[misc]
        self.name = f"fake-{backend.name.lower()}"  # type: ignore[misc]
        self.vendor_name = "Stand-in vendor"  # type: ignore[misc]
        self.deinit_calls = 0
        self.freed: list[int] = []
        self.record_lock = threading.Lock()  # guards freed

    def _create_device(self, device_id: int) -> GenericDevice:
        return FakeGpuDevice(self, device_id)

    def _deinit_impl(self) -> None:
        self.deinit_calls += 1
        super()._deinit_impl()


class FailingDeinitPlugin(FakeGpuPlugin):
    """Stand-in GPU backend whose de-initialisation fails (after releasing its devices)."""

    def _deinit_impl(self) -> None:
        super()._deinit_impl()
        raise OffloadError(ErrorCode.BACKEND_FAILURE, f"{self.name}: stand-in driver refused to shut down")


TWIN_PLATFORM_NAME = "host-twin"


class HostTwinDevice(HostDevice):
    """A second CPU device: the host backend's code behind a second platform, typed CPU."""

    def _obtain_info_impl(self) -> dict[DeviceInfo, Any]:
        info = dict(super()._obtain_info_impl())
        info[DeviceInfo.TYPE] = DeviceType.CPU
        return info


class HostTwinPlugin(HostPlugin):
    """The host plugin under another backend and the platform name ``host-twin``."""

    name = TWIN_PLATFORM_NAME

    def __init__(self, backend: PlatformBackend = PlatformBackend.UNKNOWN) -> None:
        super().__init__()
        self.backend = backend  # type: ignore[misc]

    def _create_device(self, device_id: int) -> GenericDevice:
        return HostTwinDevice(self, device_id)


class Factory:
    """A plugin factory that remembers every instance it made."""

    def __init__(self, cls: type[GenericPlugin], backend: PlatformBackend):
        self.cls = cls
        self.backend = backend
        self.instances: list[Any] = []

    def __call__(self) -> GenericPlugin:
        plugin = self.cls(self.backend)  # type: ignore[call-arg]
        self.instances.append(plugin)
        return plugin

    @property
    def last(self) -> Any:
        assert self.instances, f"the {self.cls.__name__} factory was never called"
        return self.instances[-1]


@contextlib.contextmanager
def registered(*factories: Factory) -> Iterator[tuple[Factory, ...]]:
    """Register each stand-in factory under its backend; restore the registry afterwards."""
    previous: list[tuple[PlatformBackend, Any]] = []
    try:
        for factory in factories:
            previous.append((factory.backend, register_plugin(factory.backend, factory)))
        yield factories
    finally:
        for backend, old in reversed(previous):
            if old is None:
                unregister_plugin(backend)
            else:
                register_plugin(backend, old)
