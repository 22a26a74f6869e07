"""A GPU backend: driver start-up, the device-info table, and host pins shared by its devices."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ....types import DeviceInfo, DeviceType, Dimensions, FpCapabilityFlag
from .. import GenericDevice, GenericPlugin, PluginUnavailable
from ..registrations import RegistrationMap
from .core import STICKY_FAULTS
from .driver import NO_DEVICE, SUCCESS, GpuDriver, _plain

if TYPE_CHECKING:
    from .core import GpuDeviceCore
    from .device import GpuDevice

_UINT32_MAX = 0xFFFFFFFF
_STARTED: set[str] = set()  # the GPU plugins (by class name) whose driver started in this process
_STARTED_BEFORE_FORK: set[str] = set()  # in a forked child: those that had started in its parent


def _after_fork_in_child() -> None:
    _STARTED_BEFORE_FORK.update(_STARTED)
    _STARTED.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)

_FULL_FP = FpCapabilityFlag(0x7F)  # IEEE 754 with FMA: everything but SOFT_FLOAT
_HALF_FP = FpCapabilityFlag(0x5E)


def gpu_info(*, name: str, product_name: str, uid: str, vendor: str, vendor_id: int, driver_version: str,
             max_threads: int, block: Dimensions, grid: Dimensions, compute_units: int, clock_khz: int,
             memory_clock_khz: int, memory: int, local_memory: int, half: bool) -> dict[DeviceInfo, Any]:
    """The device-info table of a GPU, from what its driver reports (clocks in kHz, as both drivers give them)."""

    def work(groups: int, size: int) -> int:
        return min(_UINT32_MAX, groups * size)

    return {
        DeviceInfo.TYPE: DeviceType.GPU,
        DeviceInfo.NAME: name,
        DeviceInfo.PRODUCT_NAME: product_name,
        DeviceInfo.UID: uid,
        DeviceInfo.VENDOR: vendor,
        DeviceInfo.DRIVER_VERSION: driver_version,
        DeviceInfo.MAX_WORK_GROUP_SIZE: max_threads,
        DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: block,
        DeviceInfo.MAX_WORK_SIZE: work(grid.x, max_threads),
        DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(work(grid.x, block.x), work(grid.y, block.y),
                                                           work(grid.z, block.z)),
        DeviceInfo.VENDOR_ID: vendor_id,
        DeviceInfo.NUM_COMPUTE_UNITS: compute_units,
        DeviceInfo.MAX_CLOCK_FREQUENCY: clock_khz // 1000,
        DeviceInfo.MEMORY_CLOCK_RATE: memory_clock_khz // 1000,
        DeviceInfo.ADDRESS_BITS: 64,
        DeviceInfo.MAX_MEM_ALLOC_SIZE: memory,
        DeviceInfo.GLOBAL_MEM_SIZE: memory,
        DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: local_memory,
        DeviceInfo.SINGLE_FP_CONFIG: _FULL_FP,
        DeviceInfo.DOUBLE_FP_CONFIG: _FULL_FP,
        DeviceInfo.HALF_FP_CONFIG: _HALF_FP if half else FpCapabilityFlag(0),
        DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_INT: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_LONG: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_HALF: 1 if half else 0,
    }



class GpuPlugin(GenericPlugin):
    """A GPU backend: starts its driver, and lets its own devices exchange data directly."""

    device_class: ClassVar[type[GpuDevice]]
    no_device_message: ClassVar[str] = "no device is present"
    #: what to do when the driver library is missing, for the unavailable reason
    install_hint: ClassVar[str] = "install the vendor's driver"

    def __init__(self) -> None:
        super().__init__()
        self.driver: GpuDriver
        self._version = "unknown"
        # Host ranges page-locked for olMemRegister, across the devices: a device's registration
        # of a range is one user here (its lock is held over the driver calls that pin and unpin).
        self.host_pins = RegistrationMap()
        # base -> the device that registered it (guarded by host_pins.lock)
        self.pin_owners: dict[int, GpuDeviceCore] = {}

    def start_driver(self, driver: GpuDriver, init: Callable[[], Any], init_call: str, library: str) -> None:
        """Call the driver's init; a missing library, no device or a failure make the plugin unavailable."""
        self.driver = driver
        try:
            result = init()
        except (RuntimeError, OSError) as exc:  # the bindings load the driver library on the first call
            raise PluginUnavailable(f"{library} was not found or could not be loaded ({_plain(exc)}); "
                                    f"{self.install_hint}") from None
        status = int(result[0])
        if status == NO_DEVICE:
            raise PluginUnavailable(f"{init_call}: {self.no_device_message}")
        if status != SUCCESS:
            after_fork = ""
            if type(self).__name__ in _STARTED_BEFORE_FORK:
                after_fork = (f"; this process was forked after its parent had started the {driver.vendor} driver, "
                              f"which {driver.vendor} does not support in the child: start child processes with "
                              f"multiprocessing's 'spawn' or 'forkserver' method to use GPUs there")
            raise PluginUnavailable(f"{init_call} failed: {driver.name(status)}{after_fork}")
        _STARTED.add(type(self).__name__)
        faults = sorted((ordinal, what) for (name, ordinal), what in STICKY_FAULTS.items() if name == self.name)
        if faults:
            which = "; ".join(f"device {ordinal}: {what}" for ordinal, what in faults)
            raise PluginUnavailable(f"a sticky fault earlier in this process ({which}) left the {driver.vendor} "
                                    f"driver unusable, and no driver call clears it: restart the process to use "
                                    f"these GPUs again")

    def is_data_exchangeable(self, src: GenericDevice, dst: GenericDevice) -> bool:
        return isinstance(src, self.device_class) and isinstance(dst, self.device_class)

    def version(self) -> str:
        return self._version
