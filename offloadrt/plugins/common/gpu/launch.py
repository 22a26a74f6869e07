"""GPU programs and kernel launches: modules, functions, the ``extra`` argument buffers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

from ....errors import OffloadError
from ....types import LAUNCH_SIZE_WRITES, KernelLaunchSizeArgs
from .. import Dim3
from ..image import DeviceImage, GenericKernel, GlobalVariable
from ..launch import check_launch_shape
from ..params import ParamLayout
from ..resources import AsyncInfo
from .core import GpuDeviceCore


class GpuImage(DeviceImage):
    """A program loaded as a driver module; ``layouts``: its kernels' parameter layouts as the image
    describes them, read once, when a kernel first needs it (None until then)."""

    def __init__(self, device: GpuDeviceCore, image: bytes, module: Any):
        super().__init__(device, image)
        self.module = module
        self.layouts: dict[str, ParamLayout] | None = None


class GpuKernel(GenericKernel):
    __slots__ = ("function", "shared_limit", "lock")

    def __init__(self, image: GpuImage, name: str, function: Any, shared_limit: int):
        super().__init__(image, name)
        self.function = function
        self.shared_limit = shared_limit  # the dynamic shared memory the driver allows now
        self.lock = threading.Lock()  # guards shared_limit and the attribute it mirrors: it only rises



class GpuPrograms(GpuDeviceCore):
    """Modules, kernels, globals and launches of a GPU device."""

    # ---- programs --------------------------------------------------------------------------
    def _unload_binary_impl(self, image: DeviceImage) -> None:
        assert isinstance(image, GpuImage)
        if self.sticky is not None:
            return  # the poisoned device's modules are lost with it: the driver refuses every call
        self.enter()
        self.check(self.drv_module_unload(image.module), self.call_names["module_unload"])

    def _construct_kernel_impl(self, image: DeviceImage, name: str) -> GenericKernel:
        assert isinstance(image, GpuImage)
        self.enter()
        function = self.check(self.drv_module_get_function(image.module, name.encode()),
                              f"{self.call_names['module_get_function']}({name!r})")
        kernel = GpuKernel(image, name, function, self.default_shared_limit)
        layout = self._param_layout(image, name, function)
        if layout is not None:
            kernel.set_layout(layout)
        return kernel

    def _param_layout(self, image: GpuImage, name: str, function: Any) -> ParamLayout | None:
        """The parameter layout of kernel ``name`` (its ``function`` handle), from the driver where it
        tells, else from the image; None when neither does (blobs are then passed on as given)."""
        layout = self._driver_param_layout(function)
        if layout is not None:
            return layout
        if image.layouts is None:
            image.layouts = self._image_layouts(image.image)
        return image.layouts.get(name)

    def _driver_param_layout(self, function: Any) -> ParamLayout | None:
        """The kernel's parameter layout as the driver tells it, if it can."""
        return None

    def _image_layouts(self, image: bytes) -> dict[str, ParamLayout]:
        """The parameter layouts of an image's kernels, as far as the image describes them (never raises)."""
        return {}

    def _get_global_impl(self, image: DeviceImage, name: str) -> GlobalVariable:
        assert isinstance(image, GpuImage)
        self.enter(select=True)  # HIP looks globals up on the current device
        address, size = self.check(self.drv_module_get_global(image.module, name.encode()),
                                   f"{self.call_names['module_get_global']}({name!r})")
        return GlobalVariable(image, name, int(address), int(size))

    # ---- kernels ---------------------------------------------------------------------------
    #: launch shapes a kernel's fast path remembers (others take the checked path each time)
    FAST_SHAPES_PER_KERNEL: ClassVar[int] = 64

    def launcher(self, kernel: GenericKernel) -> Callable[[AsyncInfo, bytes | None, KernelLaunchSizeArgs], bool]:
        """The fast path of a queued launch of ``kernel`` (see :meth:`GenericDevice.launcher`).

        It takes a launch only when every check of the checked path passes (the queue healthy,
        the device not poisoned and current on this thread, the program loaded, the blob of the
        declared size, the dynamic shared memory within what the kernel may use now, and a launch
        shape that passed the device's checks, remembered per kernel), and then makes the same
        driver call. Anything else returns False, for the checked path to do or to explain. The
        only error it raises is the one the checked path would raise for the same launch: the
        driver's refusal of the launch call itself.
        """
        assert isinstance(kernel, GpuKernel)
        image = kernel.image
        args_size = kernel.args_size
        args_most = kernel.args_most
        function = kernel.function
        state = self.thread_state
        wrapper = self.extra_wrapper
        drv_launch = self.drv_launch
        no_params = self.no_kernel_params
        writes = LAUNCH_SIZE_WRITES
        shapes: set[tuple[Any, ...]] = set()  # (gx, gy, gz, bx, by, bz, dyn, dimensions) that passed
        limit = self.FAST_SHAPES_PER_KERNEL
        # The launch-size object of the last launch that passed, the write count it was read at, and
        # its extents: while both still hold, the object is unchanged and its shape passed already.
        checked: tuple[Any, int, tuple[int, ...]] = (None, -1, ())

        def launch(ai: Any, args: bytes | None, sizes: KernelLaunchSizeArgs) -> bool:
            nonlocal checked
            cell = state.cell
            if ai.failure is not None or image.unloaded or cell.token is not self.current_token:
                return False
            last = checked
            if last[0] is sizes and last[1] == writes[0]:
                gx, gy, gz, bx, by, bz, dyn = last[2]
            else:
                if type(sizes) is not KernelLaunchSizeArgs:
                    return False
                count = writes[0]
                try:
                    ng = sizes.num_groups
                    gs = sizes.group_size
                    gx, gy, gz, bx, by, bz, dyn = ng.x, ng.y, ng.z, gs.x, gs.y, gs.z, sizes.dyn_shared_memory
                    key = (gx, gy, gz, bx, by, bz, dyn, sizes.dimensions)
                except AttributeError:
                    return False
                if key not in shapes:
                    # The kernel's shared-memory limit only rises: a shape within it stays within it.
                    if not self._fast_shape_ok(key) or dyn > kernel.shared_limit:
                        return False
                    if len(shapes) < limit:
                        shapes.add(key)
                checked = (sizes, count, key[:7])
            if args:
                size = len(args)
                if size != args_size and args_size is not None:
                    if not args_size < size <= args_most:  # type: ignore[operator]  # (a shorter blob is refused)
                        return False
                    size = args_size  # the C struct's tail padding is not the kernel's
                if args is not cell.last or size != cell.size:  # extra_for(), inline
                    cell.copy(args, size)
                extra = cell.argument if cell.wrapper is wrapper else cell.wrap(wrapper)
            elif args_size:
                return False
            else:
                extra = 0
            result = drv_launch(function, gx, gy, gz, bx, by, bz, dyn, ai.stream, no_params, extra)
            if result[0]:
                raise self._launch_failure(int(result[0]), kernel)
            return True

        return launch

    def extra_for(self, args: bytes) -> Any:
        """The launch call's ``extra`` argument for ``args`` (non-empty, as the kernel takes it), packed
        in this thread's buffers."""
        buffers = self.thread_state.cell
        if args is not buffers.last or len(args) != buffers.size:
            buffers.copy(args, len(args))
        wrapper = self.extra_wrapper
        return buffers.argument if buffers.wrapper is wrapper else buffers.wrap(wrapper)

    def _fast_shape_ok(self, key: tuple[Any, ...]) -> bool:
        """Whether a fast-path key ``(gx, gy, gz, bx, by, bz, dyn, dimensions)`` is a launch shape the
        device runs, given as plain ints (anything else is for the checked path to take or explain)."""
        if key[7] not in (1, 2, 3) or not all(type(v) is int for v in key):
            return False
        try:
            check_launch_shape(self, key[:3], key[3:6], key[6])
        except OffloadError:
            return False
        return True

    def _launch_impl(self, kernel: GenericKernel, args: bytes | None, num_groups: Dim3, group_size: Dim3,
                     dyn_shared_memory: int, queue: AsyncInfo | None) -> None:
        assert isinstance(kernel, GpuKernel)
        self.enter()
        if dyn_shared_memory > kernel.shared_limit:
            with kernel.lock:
                if dyn_shared_memory > kernel.shared_limit:
                    self._raise_shared_limit(kernel, dyn_shared_memory)
                    kernel.shared_limit = dyn_shared_memory
        extra = self.extra_for(args) if args else 0
        no_params = self.no_kernel_params
        gx, gy, gz = num_groups
        bx, by, bz = group_size
        if queue is not None:
            result = self.drv_launch(kernel.function, gx, gy, gz, bx, by, bz, dyn_shared_memory,
                                     queue.stream, no_params, extra)  # type: ignore[attr-defined]
            if result[0]:
                raise self._launch_failure(int(result[0]), kernel)
            return
        try:
            with self.queue_or_temporary(None) as temporary:
                result = self.drv_launch(kernel.function, gx, gy, gz, bx, by, bz, dyn_shared_memory,
                                         temporary.stream, no_params, extra)  # type: ignore[attr-defined]
                if result[0]:
                    raise self._launch_failure(int(result[0]), kernel)
        except OffloadError as exc:
            if self.call_names["launch"] not in exc.details:
                exc.details += f" (running kernel {kernel.name!r})"
            raise

    def _launch_failure(self, status: int, kernel: GpuKernel) -> OffloadError:
        """The error of a launch call that failed; a refusal (:attr:`launch_refusals`) poisons nothing."""
        call = f"{self.call_names['launch']}({kernel.name!r})"
        if status in self.launch_refusals:
            return self.driver.error(status, call)
        return self.failure(status, call)
