"""The hooks a backend's device implements: the ``_*_impl`` methods, each of which talks to its driver.

As in LLVM's PluginInterface, the generic classes own validation, bookkeeping, pools, locking
and error wrapping; a backend overrides only these. A hook that receives ``queue=None`` must
finish the work before returning. Optional hooks default to doing nothing or to ``UNSUPPORTED``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import ErrorCode, OffloadError
from ...types import AllocType, DeviceInfo
from .image import DeviceImage, GenericKernel, GlobalVariable
from .resources import AsyncInfo, GenericEvent

if TYPE_CHECKING:
    from .plugin import GenericPlugin
    from .registrations import RegistrationMap
    from .resources import ResourcePool

Dim3 = tuple[int, int, int]


def unsupported(what: str) -> OffloadError:
    return OffloadError(ErrorCode.UNSUPPORTED, f"{what} is not supported by this backend")


class DeviceHooks(ABC):
    """What a backend's device implements (see the module docstring)."""

    # what the generic device sets up, declared for the hooks' and mixins' type checks
    plugin: GenericPlugin
    device_id: int
    queue_pool: ResourcePool[AsyncInfo]
    registrations: RegistrationMap

    def _init_impl(self) -> None:
        pass

    def _deinit_impl(self) -> None:
        pass

    @abstractmethod
    def _obtain_info_impl(self) -> dict[DeviceInfo, Any]:
        ...

    @abstractmethod
    def _alloc_impl(self, size: int, kind: AllocType) -> int:
        ...

    @abstractmethod
    def _free_impl(self, ptr: int, kind: AllocType) -> None:
        ...

    @abstractmethod
    def _data_submit_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        ...

    @abstractmethod
    def _data_retrieve_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        ...

    @abstractmethod
    def _data_memcpy_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        ...

    def _data_exchange_impl(self, src: int, dst_device: DeviceHooks, dst: int, size: int,
                            queue: AsyncInfo | None) -> None:
        raise unsupported("device-to-device exchange")

    @abstractmethod
    def _data_fill_impl(self, ptr: int, pattern: bytes, size: int, queue: AsyncInfo | None) -> None:
        ...

    def _data_lock_impl(self, ptr: int, size: int) -> int:
        """Page-lock host memory for this device; return the address the device uses for ``ptr``."""
        raise unsupported("registering host memory")

    def _data_unlock_impl(self, ptr: int) -> None:
        """Undo :meth:`_data_lock_impl` for the range starting at ``ptr``."""
        raise unsupported("unregistering host memory")

    @abstractmethod
    def _is_valid_binary_impl(self, image: bytes) -> bool:
        ...

    @abstractmethod
    def _load_binary_impl(self, image: bytes) -> DeviceImage:
        ...

    @abstractmethod
    def _unload_binary_impl(self, image: DeviceImage) -> None:
        ...

    @abstractmethod
    def _construct_kernel_impl(self, image: DeviceImage, name: str) -> GenericKernel:
        ...

    @abstractmethod
    def _get_global_impl(self, image: DeviceImage, name: str) -> GlobalVariable:
        ...

    @abstractmethod
    def _launch_impl(self, kernel: GenericKernel, args: bytes | None, num_groups: Dim3, group_size: Dim3,
                     dyn_shared_memory: int, queue: AsyncInfo | None) -> None:
        ...

    def _optimal_occupancy_impl(self, kernel: GenericKernel, shared_memory: int) -> int:
        raise unsupported("occupancy calculation")

    @abstractmethod
    def _create_queue_impl(self) -> AsyncInfo:
        ...

    @abstractmethod
    def _destroy_queue_impl(self, queue: AsyncInfo) -> None:
        ...

    @abstractmethod
    def _synchronize_impl(self, queue: AsyncInfo) -> None:
        """Block until the queue drained or failed (record a failure with ``queue.fail``)."""
        ...

    @abstractmethod
    def _query_impl(self, queue: AsyncInfo) -> bool:
        ...

    @abstractmethod
    def _has_pending_work_impl(self, queue: AsyncInfo) -> bool:
        ...

    @abstractmethod
    def _enqueue_host_call_impl(self, callback: Callable[[Any], object], user_data: Any,
                                queue: AsyncInfo) -> None:
        ...

    @abstractmethod
    def _create_event_impl(self, timed: bool) -> GenericEvent:
        """A new (or pooled) event, not yet recorded; ``timed``: one that takes a timestamp."""
        ...

    @abstractmethod
    def _record_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        """Place ``event`` at the current end of ``queue``'s work."""
        ...

    @abstractmethod
    def _wait_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        """Order later work on ``queue`` after ``event``; if the event's queue failed (now or
        later), ``queue`` must adopt that failure at this point of its order."""
        ...

    @abstractmethod
    def _sync_event_impl(self, event: GenericEvent) -> None:
        ...

    @abstractmethod
    def _is_event_complete_impl(self, event: GenericEvent) -> bool:
        ...

    def _destroy_event_impl(self, event: GenericEvent) -> None:
        pass

    @abstractmethod
    def _event_elapsed_time_impl(self, start: GenericEvent, end: GenericEvent) -> float:
        ...
