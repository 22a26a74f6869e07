"""A device of a plugin: the generic half of every operation, around the backend's hooks."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import ErrorCode, OffloadError, OffloadWarning
from ...types import AllocType, Detail, DeviceInfo, Dimensions, KernelLaunchSizeArgs
from .hooks import Dim3
from .image import DeviceImage, GenericKernel
from .launch import check_launch_shape
from .queues import QueueOps
from .registrations import RegistrationMap
from .resources import AsyncInfo, ResourcePool

if TYPE_CHECKING:
    from .plugin import GenericPlugin

_U32 = 0xFFFFFFFF


class GenericDevice(QueueOps):
    """One device of a plugin. Public methods validate and delegate to ``_*_impl`` hooks."""

    #: ``HOST`` allocations are pinned by the backend already (a GPU's): registering memory inside
    #: one must count a user instead of pinning it again
    host_allocations_pinned: ClassVar[bool] = True
    #: what :meth:`copier` made, for olMemcpy's hot path (a backend with one sets it once it can make it)
    fast_copy: Callable[[int, int, int, AsyncInfo, bool], bool] | None = None

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
        self.details: list[Detail] = []  # extra lines for `offloadrt info`
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
            check_launch_shape(self, num_groups, group_size, dyn_shared_memory)
            if len(self._valid_shapes) < 4096:
                self._valid_shapes.add(shape)
        if kernel.image.unloaded:
            kernel.image.check_loaded()
        if kernel.args_size is not None and len(args or b"") != kernel.args_size:
            args = kernel.fit_args(args)
        self._launch_impl(kernel, args, num_groups, group_size, dyn_shared_memory, queue)

    def copier(self) -> Callable[[int, int, int, AsyncInfo, bool], bool] | None:
        """A fast path for queued copies between host memory and this device, or None (every copy
        takes :meth:`data_submit` / :meth:`data_retrieve`).

        ``copy(dst, src, size, queue, to_device)`` is called with plain int arguments that passed
        ``olMemcpy``'s checks and a queue of this device. It either does exactly what
        :meth:`data_submit` (``to_device``) or :meth:`data_retrieve` would do and returns True, or
        does nothing and returns False: then the checked path runs and says what is wrong. The only
        error it raises is the driver's, as the checked path would raise it for the same copy.
        """
        return None

    def launcher(self, kernel: GenericKernel) -> Callable[[AsyncInfo, bytes | None, KernelLaunchSizeArgs], bool] | None:
        """A fast path for queued launches of ``kernel``, or None (every launch takes :meth:`launch_kernel`).

        ``launch(queue, args, sizes)`` is called with a queue of this device, ``args`` as ``bytes``
        or None and ``sizes`` as given to ``olLaunchKernel`` (it checks that it is a
        ``KernelLaunchSizeArgs``, unless it is the very object of a launch that passed and no
        launch size was written since: ``types.LAUNCH_SIZE_WRITES``). It either does exactly what the checked path
        (``olLaunchKernel``'s checks, then :meth:`launch_kernel`) would do with them and returns
        True, or does nothing and returns False: then the checked path runs and says what is
        wrong. It never raises; a backend keeps in it only what it can check without a doubt.
        """
        return None

    def calculate_optimal_occupancy(self, kernel: GenericKernel, shared_memory: int) -> int:
        kernel.image.check_loaded()
        return self._optimal_occupancy_impl(kernel, shared_memory)
