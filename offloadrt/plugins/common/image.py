"""Loaded programs and the symbols found in them."""

from __future__ import annotations

import threading
from typing import Protocol

from ...errors import ErrorCode, OffloadError


class SymbolSource(Protocol):
    """What an image asks its device for (the device's hooks), without importing the device."""

    def _construct_kernel_impl(self, image: DeviceImage, name: str) -> GenericKernel: ...

    def _get_global_impl(self, image: DeviceImage, name: str) -> GlobalVariable: ...


class GenericKernel:
    """A kernel of a loaded image; backends subclass it to hold their function handle.

    ``args_size`` is the byte size of the argument blob the kernel reads, where the image says
    (None: unknown); a launch with a blob of another size is refused.
    """

    __slots__ = ("image", "name", "args_size", "__weakref__")

    def __init__(self, image: DeviceImage, name: str, args_size: int | None = None):
        self.image = image
        self.name = name
        self.args_size = args_size


class GlobalVariable:
    """A global variable of a loaded image: its device address and size in bytes."""

    __slots__ = ("image", "name", "address", "size")

    def __init__(self, image: DeviceImage, name: str, address: int, size: int):
        self.image = image
        self.name = name
        self.address = address
        self.size = size


class DeviceImage:
    """A program loaded on a device: a private copy of the image plus backend state.

    Kernels and globals are looked up once and cached, so two lookups of one name give the
    same object. After :meth:`GenericDevice.unload_binary` the image is ``unloaded`` and every
    lookup fails.
    """

    def __init__(self, device: SymbolSource, image: bytes):
        self.device = device
        self.image = image
        self.unloaded = False
        self._kernels: dict[str, GenericKernel] = {}
        self._globals: dict[str, GlobalVariable] = {}
        self._lock = threading.Lock()  # guards the two symbol caches

    def check_loaded(self) -> None:
        if self.unloaded:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, "the program has been destroyed")

    def get_kernel(self, name: str) -> GenericKernel:
        self.check_loaded()
        with self._lock:
            kernel = self._kernels.get(name)
            if kernel is None:
                kernel = self._kernels[name] = self.device._construct_kernel_impl(self, name)
            return kernel

    def get_global(self, name: str) -> GlobalVariable:
        self.check_loaded()
        with self._lock:
            var = self._globals.get(name)
            if var is None:
                var = self._globals[name] = self.device._get_global_impl(self, name)
            return var
