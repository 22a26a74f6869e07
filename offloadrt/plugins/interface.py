"""The plugin interface: what every backend shares, and the ``*_impl`` hooks it fills in.

As in LLVM's PluginInterface, the generic classes own validation, bookkeeping, pools, locking
and error wrapping; a backend overrides only the ``_*_impl`` methods, each of which talks to
its driver. A hook that receives ``queue=None`` must finish the work before returning.
"""

from __future__ import annotations

import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import AllocType, DeviceInfo, Dimensions, PlatformBackend
from .image import DeviceImage, GenericKernel, GlobalVariable
from .registrations import RegistrationMap
from .resources import AsyncInfo, GenericEvent, ResourcePool

Dim3 = tuple[int, int, int]
_U32 = 0xFFFFFFFF


class PluginUnavailable(Exception):
    """Raised by ``_init_impl`` when the backend's driver package or library is missing."""


def _wrong_blob(kernel: GenericKernel, args: bytes | None) -> OffloadError:
    given = "no argument blob" if not args else f"a {len(args)}-byte argument blob"
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"kernel {kernel.name!r} takes a {kernel.args_size}-byte argument blob, got {given}; "
                        f"pack its parameters with C alignment (a ctypes.Structure of the kernel's struct)")


def _unsupported(what: str) -> OffloadError:
    return OffloadError(ErrorCode.UNSUPPORTED, f"{what} is not supported by this backend")


class GenericDevice(ABC):
    """One device of a plugin. Public methods validate and delegate to ``_*_impl`` hooks."""

    #: ``HOST`` allocations are pinned by the backend already (a GPU's): registering memory inside
    #: one must count a user instead of pinning it again
    host_allocations_pinned: ClassVar[bool] = True

    def __init__(self, plugin: GenericPlugin, device_id: int):
        self.plugin = plugin
        self.device_id = device_id
        self.queue_pool: ResourcePool[AsyncInfo] = ResourcePool(
            "queue", self._create_queue_impl, self._destroy_queue_impl
        )
        self.loaded_images: list[DeviceImage] = []
        self.registrations = RegistrationMap()  # host memory registered with olMemRegister
        self._images_lock = threading.Lock()  # guards loaded_images
        self._info: dict[DeviceInfo, Any] = {}
        self.details: list[tuple[str, str]] = []  # extra (key, value) lines for `offloadrt info`
        self.max_group_size = 0
        self.max_group_dims: Dim3 = (0, 0, 0)
        self.max_grid_dims: Dim3 = (_U32, _U32, _U32)  # work-groups per dimension a launch may have
        self.max_items_per_dim = 1 << 64  # work items (groups x group size) per dimension
        self.max_local_memory = 0
        self._valid_shapes: set[tuple[Dim3, Dim3, int]] = set()  # launch shapes that passed the checks
        self.initialized = False
        self.closing = False  # de-init has begun: nothing new may be loaded

    # ---- lifecycle -------------------------------------------------------------------------
    def init(self) -> None:
        """Start the device; if setup fails after ``_init_impl``, undo it before re-raising."""
        self._init_impl()
        try:
            self._info = self._obtain_info_impl()
            dims: Dimensions = self._info[DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION]
            self.max_group_dims = (dims.x, dims.y, dims.z)
            self.max_group_size = self._info[DeviceInfo.MAX_WORK_GROUP_SIZE]
            self.max_local_memory = self._info[DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE]
        except BaseException:
            try:
                self._deinit_impl()
            except OffloadError as exc:
                warnings.warn(f"offloadrt: undoing a failed {self.plugin.name} device setup failed too: {exc}",
                              OffloadWarning, stacklevel=2)
            raise
        self.initialized = True

    def deinit(self) -> list[OffloadError]:
        """Unload every image, destroy the pools, release the device; return every error."""
        errors: list[OffloadError] = []
        with self._images_lock:
            self.closing = True  # a load racing this de-init unloads its image itself
            images = list(self.loaded_images)
        for image in images:
            try:
                self.unload_binary(image)
            except OffloadError as exc:
                errors.append(exc)
        errors.extend(self.queue_pool.deinit())
        for entry in self.registrations.drain():
            try:
                self._data_unlock_impl(entry.base)
            except OffloadError as exc:
                errors.append(exc)
        try:
            self._deinit_impl()
        except OffloadError as exc:
            errors.append(exc)
        self.initialized = False
        return errors

    # ---- info ------------------------------------------------------------------------------
    def info(self) -> dict[DeviceInfo, Any]:
        """Every device-info value this device reports (a missing key means unimplemented)."""
        return self._info

    # ---- memory ----------------------------------------------------------------------------
    def data_alloc(self, size: int, kind: AllocType) -> int:
        if not 0 < size < 1 << 64:
            raise OffloadError(ErrorCode.INVALID_SIZE, f"allocation size must be in 1 .. 2**64-1, got {size}")
        ptr = self._alloc_impl(size, kind)
        if not ptr:
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES, f"failed to allocate {size} bytes of {kind.name} memory")
        if kind is AllocType.HOST and self.host_allocations_pinned:
            self.registrations.add_owned(ptr, size)  # registering inside it only counts a user
        return ptr

    def data_delete(self, ptr: int, kind: AllocType) -> None:
        self._free_impl(ptr, kind)
        if kind is AllocType.HOST and self.host_allocations_pinned:
            self.registrations.remove_owned(ptr)

    def forget_registrations_in(self, base: int, size: int) -> list[OffloadError]:
        """Unlock every registration made inside ``[base, base + size)``, memory about to be freed
        (so it is not freed while page-locked, nor its range kept registered); return the errors."""
        errors: list[OffloadError] = []
        if not len(self.registrations):
            return errors
        for entry in self.registrations.take_inside(base, size):
            try:
                self._data_unlock_impl(entry.base)
            except OffloadError as exc:
                errors.append(exc)
        return errors

    def data_lock(self, ptr: int, size: int) -> int:
        """Register (page-lock) ``size`` bytes of host memory at ``ptr``; the address the device uses.

        A range inside a registered one counts one more user of it; a partial overlap is
        ``INVALID_ARGUMENT``.
        """
        return self.registrations.register(ptr, size, self._data_lock_impl)

    def data_unlock(self, ptr: int) -> None:
        """One user fewer of the registered range containing ``ptr``; the last one unlocks it."""
        self.registrations.unregister(ptr, self._data_unlock_impl)

    def data_submit(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        """Copy ``size`` bytes from host address ``src`` to this device's ``dst``."""
        if queue is not None and queue.failure is not None:
            raise queue.queue_error()
        self._data_submit_impl(dst, src, size, queue)

    def data_retrieve(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        """Copy ``size`` bytes from this device's ``src`` to host address ``dst``."""
        if queue is not None and queue.failure is not None:
            raise queue.queue_error()
        self._data_retrieve_impl(dst, src, size, queue)

    def data_memcpy(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        """Copy within this device (or host to host on the host device)."""
        if queue is not None and queue.failure is not None:
            raise queue.queue_error()
        self._data_memcpy_impl(dst, src, size, queue)

    def data_exchange(self, src: int, dst_device: GenericDevice, dst: int, size: int,
                      queue: AsyncInfo | None) -> None:
        """Copy from this device's ``src`` to ``dst`` on ``dst_device`` of the same plugin."""
        if queue is not None and queue.failure is not None:
            raise queue.queue_error()
        self._data_exchange_impl(src, dst_device, dst, size, queue)

    def data_fill(self, ptr: int, pattern: bytes, size: int, queue: AsyncInfo | None) -> None:
        """Write ``pattern`` repeatedly over ``size`` bytes; a partial last copy is cut short."""
        if queue is not None and queue.failure is not None:
            raise queue.queue_error()
        self._data_fill_impl(ptr, pattern, size, queue)

    # ---- programs --------------------------------------------------------------------------
    def is_valid_binary(self, image: bytes) -> bool:
        return bool(image) and self._is_valid_binary_impl(image)

    def load_binary(self, image: bytes) -> DeviceImage:
        if not image:
            raise OffloadError(ErrorCode.INVALID_BINARY, "the program image is empty")
        loaded = self._load_binary_impl(bytes(image))
        with self._images_lock:
            closing = self.closing
            if not closing:
                self.loaded_images.append(loaded)
        if closing:
            loaded.unloaded = True
            self._unload_binary_impl(loaded)
            raise OffloadError(ErrorCode.UNINITIALIZED, "the device was de-initialised (olShutDown) while the "
                                                        "program was being loaded")
        return loaded

    def unload_binary(self, image: DeviceImage) -> None:
        with self._images_lock:
            if image.unloaded:
                return
            image.unloaded = True
            self.loaded_images.remove(image)
        self._unload_binary_impl(image)

    # ---- kernels ---------------------------------------------------------------------------
    def launch_kernel(self, kernel: GenericKernel, args: bytes | None, num_groups: Dim3, group_size: Dim3,
                      dyn_shared_memory: int, queue: AsyncInfo | None) -> None:
        """Launch ``kernel`` over ``num_groups`` work-groups of ``group_size`` items.

        ``num_groups``/``group_size`` are (x, y, z) tuples of ints; each must be at least 1,
        the group within the device's limits, the work-group memory within its size.
        """
        if queue is not None and queue.failure is not None:
            raise queue.queue_error()
        shape = (num_groups, group_size, dyn_shared_memory)
        if shape not in self._valid_shapes:
            self._check_launch_shape(num_groups, group_size, dyn_shared_memory)
            if len(self._valid_shapes) < 4096:
                self._valid_shapes.add(shape)
        if kernel.image.unloaded:
            kernel.image.check_loaded()
        if kernel.args_size is not None and len(args or b"") != kernel.args_size:
            raise _wrong_blob(kernel, args)
        self._launch_impl(kernel, args, num_groups, group_size, dyn_shared_memory, queue)

    def _check_launch_shape(self, num_groups: Dim3, group_size: Dim3, dyn: int) -> None:
        gx, gy, gz = num_groups
        bx, by, bz = group_size
        mx, my, mz = self.max_group_dims
        nx, ny, nz = self.max_grid_dims
        items = self.max_items_per_dim
        try:
            valid = (0 < gx <= nx and 0 < gy <= ny and 0 < gz <= nz and 0 < bx <= mx and 0 < by <= my
                     and 0 < bz <= mz and bx * by * bz <= self.max_group_size
                     and gx * bx <= items and gy * by <= items and gz * bz <= items
                     and 0 <= dyn <= self.max_local_memory
                     and (gx | gy | gz | bx | by | bz | dyn) >= 0)  # ints only
        except TypeError:
            valid = False
        if not valid:
            raise self._launch_size_error(num_groups, group_size, dyn)

    def _launch_size_error(self, num_groups: Dim3, group_size: Dim3, dyn: object) -> OffloadError:
        values = (*num_groups, *group_size, dyn)
        if not all(type(v) is int or type(v) is bool for v in values):
            return OffloadError(ErrorCode.INVALID_ARGUMENT,
                                f"launch sizes must be integers: num_groups={num_groups}, group_size={group_size}, "
                                f"dyn_shared_memory={dyn!r}")
        if min(values[:6]) < 1:
            return OffloadError(ErrorCode.INVALID_SIZE,
                                f"launch dimensions must be positive: num_groups={num_groups}, group_size={group_size}")
        if any(g > limit for g, limit in zip(num_groups, self.max_grid_dims)):
            return OffloadError(ErrorCode.INVALID_SIZE,
                                f"num_groups {num_groups} exceeds the device's grid limit {self.max_grid_dims}")
        if any(g * b > self.max_items_per_dim for g, b in zip(num_groups, group_size)):
            return OffloadError(ErrorCode.INVALID_SIZE,
                                f"num_groups {num_groups} x group_size {group_size} exceeds the device's "
                                f"{self.max_items_per_dim} work items per dimension")
        if isinstance(dyn, int) and not 0 <= dyn <= self.max_local_memory:
            return OffloadError(ErrorCode.INVALID_SIZE,
                                f"dynamic shared memory {dyn} is outside 0..{self.max_local_memory}, the device's "
                                f"work-group memory")
        return OffloadError(ErrorCode.INVALID_SIZE,
                            f"group size {group_size} exceeds the device limit {self.max_group_dims} / "
                            f"{self.max_group_size} items")

    def calculate_optimal_occupancy(self, kernel: GenericKernel, shared_memory: int) -> int:
        kernel.image.check_loaded()
        return self._optimal_occupancy_impl(kernel, shared_memory)

    # ---- queues ----------------------------------------------------------------------------
    @contextmanager
    def queue_or_temporary(self, queue: AsyncInfo | None) -> Iterator[AsyncInfo]:
        """The queue an operation runs on: ``queue``, or a pooled one that is synced when the
        block ends, so the operation is complete on return (liboffload's AsyncInfoWrapper).

        For backends whose hooks cannot do ``queue=None`` work inline.
        """
        if queue is not None:
            yield queue
            return
        temporary = self.queue_pool.acquire()
        try:
            yield temporary
            self._synchronize_impl(temporary)
        except BaseException:
            self._drop_queue(temporary)
            raise
        if temporary.failure is not None:
            self._drop_queue(temporary)
            raise temporary.failure.error
        self.queue_pool.release(temporary)

    def _drop_queue(self, queue: AsyncInfo) -> None:
        """Destroy a backend queue that must not be reused; a failure to do so is a warning."""
        try:
            self.queue_pool.discard(queue)
        except OffloadError as exc:
            warnings.warn(f"offloadrt: destroying a failed {self.plugin.name} queue failed too: {exc}",
                          OffloadWarning, stacklevel=3)

    def init_async_info(self) -> AsyncInfo:
        """A backend queue from the pool (a new one when the pool is empty)."""
        return self.queue_pool.acquire()

    def synchronize(self, queue: AsyncInfo, release: bool) -> None:
        """Wait for ``queue`` to drain; with ``release``, hand it back to the pool.

        Raises ``QUEUE_ERROR`` as soon as the queue is known to have failed, without waiting
        for the work behind the failure. A failed queue is destroyed instead of pooled.
        """
        if queue.failure is None:
            try:
                self._synchronize_impl(queue)
            except OffloadError as exc:
                queue.fail(exc)
        failure = queue.failure
        owner = queue.owner
        if release:
            queue.owner = None
            if failure is None:
                self.queue_pool.release(queue)
            else:
                self._drop_queue(queue)
        if failure is not None:
            raise failure.queue_error(owner)

    def query_async(self, queue: AsyncInfo) -> bool:
        """True when all work submitted to ``queue`` is done; raises if it failed."""
        if queue.failure is None:
            try:
                done = self._query_impl(queue)
            except OffloadError as exc:
                queue.fail(exc)
        if queue.failure is not None:
            raise queue.queue_error()
        return done

    def has_pending_work(self, queue: AsyncInfo) -> bool:
        """True while ``queue`` has work that has not finished (or been skipped after a failure)."""
        try:
            return self._has_pending_work_impl(queue)
        except OffloadError as exc:
            queue.fail(exc)
            return False

    def enqueue_host_call(self, callback: Callable[[Any], object], user_data: Any, queue: AsyncInfo) -> None:
        if queue.failure is not None:
            raise queue.queue_error()
        self._enqueue_host_call_impl(callback, user_data, queue)

    # ---- events ----------------------------------------------------------------------------
    def create_event(self, queue: AsyncInfo) -> GenericEvent:
        """An event recorded at the current end of ``queue``."""
        if queue.failure is not None:
            raise queue.queue_error()
        event = self._create_event_impl()
        try:
            self._record_event_impl(event, queue)
        except BaseException:
            self._destroy_event_impl(event)
            raise
        return event

    def wait_event(self, event: GenericEvent, queue: AsyncInfo) -> None:
        """Make later work on ``queue`` wait for ``event``; its queue's failure spreads to ``queue``."""
        if queue.failure is not None:
            raise queue.queue_error()
        if event.failure is not None and not self.has_pending_work(queue):
            queue.adopt(event.failure)  # nothing earlier on the queue can be lost: fail now
            return
        self._wait_event_impl(event, queue)

    def sync_event(self, event: GenericEvent) -> None:
        if event.failure is None:
            self._sync_event_impl(event)
        if event.failure is not None:
            raise event.failure.queue_error()

    def is_event_complete(self, event: GenericEvent) -> bool:
        return event.failure is not None or self._is_event_complete_impl(event)

    def destroy_event(self, event: GenericEvent) -> None:
        self._destroy_event_impl(event)

    def get_event_elapsed_time(self, start: GenericEvent, end: GenericEvent) -> float:
        """Milliseconds between two events of this device; waits for both to complete."""
        self.sync_event(start)
        self.sync_event(end)
        return self._event_elapsed_time_impl(start, end)

    # ---- hooks a backend implements ----------------------------------------------------------
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

    def _data_exchange_impl(self, src: int, dst_device: GenericDevice, dst: int, size: int,
                            queue: AsyncInfo | None) -> None:
        raise _unsupported("device-to-device exchange")

    @abstractmethod
    def _data_fill_impl(self, ptr: int, pattern: bytes, size: int, queue: AsyncInfo | None) -> None:
        ...

    def _data_lock_impl(self, ptr: int, size: int) -> int:
        """Page-lock host memory for this device; return the address the device uses for ``ptr``."""
        raise _unsupported("registering host memory")

    def _data_unlock_impl(self, ptr: int) -> None:
        """Undo :meth:`_data_lock_impl` for the range starting at ``ptr``."""
        raise _unsupported("unregistering host memory")

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
        raise _unsupported("occupancy calculation")

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
    def _create_event_impl(self) -> GenericEvent:
        """A new (or pooled) event, not yet recorded."""
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
