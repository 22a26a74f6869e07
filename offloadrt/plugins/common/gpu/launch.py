"""GPU programs and kernel launches: modules, functions, the ``extra`` argument buffers."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from ....errors import OffloadError
from .. import Dim3
from ..image import DeviceImage, GenericKernel, GlobalVariable
from ..resources import AsyncInfo
from .core import GpuDeviceCore


class GpuImage(DeviceImage):
    """A program loaded as a driver module."""

    def __init__(self, device: GpuDeviceCore, image: bytes, module: Any):
        super().__init__(device, image)
        self.module = module


class GpuKernel(GenericKernel):
    __slots__ = ("function", "shared_limit", "lock")

    def __init__(self, image: GpuImage, name: str, function: Any, shared_limit: int):
        super().__init__(image, name)
        self.function = function
        self.shared_limit = shared_limit  # the dynamic shared memory the driver allows now
        self.lock = threading.Lock()  # guards shared_limit and the attribute it mirrors: it only rises



class LaunchBuffers(threading.local):
    """Per-thread memory for a launch's ``extra`` array and the copied argument blob.

    The array is ``[BUFFER_POINTER, blob, BUFFER_SIZE, &size, END]`` with the vendor's marker
    values (CUDA ends it with 0, HIP with 3).
    """

    def __init__(self, pointer_marker: int, size_marker: int, end_marker: int) -> None:
        self.size = ctypes.c_size_t(0)
        self.capacity = 256
        self.blob = ctypes.create_string_buffer(self.capacity)
        self.extra = (ctypes.c_void_p * 5)(pointer_marker, ctypes.addressof(self.blob),
                                           size_marker, ctypes.addressof(self.size), end_marker)
        self.address = ctypes.addressof(self.extra)

    def pack(self, args: bytes) -> int:
        """The ``extra`` address for ``args`` (the driver copies the blob during the call)."""
        size = len(args)
        if size > self.capacity:
            self.capacity = max(size, 2 * self.capacity)
            self.blob = ctypes.create_string_buffer(self.capacity)
            self.extra[1] = ctypes.addressof(self.blob)
        ctypes.memmove(self.blob, args, size)
        self.size.value = size
        return self.address



class GpuPrograms(GpuDeviceCore):
    """Modules, kernels, globals and launches of a GPU device."""

    # ---- programs --------------------------------------------------------------------------
    def _unload_binary_impl(self, image: DeviceImage) -> None:
        assert isinstance(image, GpuImage)
        if self.sticky is not None:
            return  # the poisoned device takes its modules with it when it is re-initialised
        self.enter()
        self.check(self.drv_module_unload(image.module), self.call_names["module_unload"])

    def _construct_kernel_impl(self, image: DeviceImage, name: str) -> GenericKernel:
        assert isinstance(image, GpuImage)
        self.enter()
        function = self.check(self.drv_module_get_function(image.module, name.encode()),
                              f"{self.call_names['module_get_function']}({name!r})")
        return GpuKernel(image, name, function, self.default_shared_limit)

    def _get_global_impl(self, image: DeviceImage, name: str) -> GlobalVariable:
        assert isinstance(image, GpuImage)
        self.enter(select=True)  # HIP looks globals up on the current device
        address, size = self.check(self.drv_module_get_global(image.module, name.encode()),
                                   f"{self.call_names['module_get_global']}({name!r})")
        return GlobalVariable(image, name, int(address), int(size))

    # ---- kernels ---------------------------------------------------------------------------
    def _launch_impl(self, kernel: GenericKernel, args: bytes | None, num_groups: Dim3, group_size: Dim3,
                     dyn_shared_memory: int, queue: AsyncInfo | None) -> None:
        assert isinstance(kernel, GpuKernel)
        self.enter()
        if dyn_shared_memory > kernel.shared_limit:
            with kernel.lock:
                if dyn_shared_memory > kernel.shared_limit:
                    self._raise_shared_limit(kernel, dyn_shared_memory)
                    kernel.shared_limit = dyn_shared_memory
        extra = self.launch_buffers.pack(args) if args else 0
        gx, gy, gz = num_groups
        bx, by, bz = group_size
        if queue is not None:
            result = self.drv_launch(kernel.function, gx, gy, gz, bx, by, bz, dyn_shared_memory,
                                     queue.stream, None, extra)  # type: ignore[attr-defined]
            if result[0]:
                raise self._launch_failure(int(result[0]), kernel)
            return
        try:
            with self.queue_or_temporary(None) as temporary:
                result = self.drv_launch(kernel.function, gx, gy, gz, bx, by, bz, dyn_shared_memory,
                                         temporary.stream, None, extra)  # type: ignore[attr-defined]
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
