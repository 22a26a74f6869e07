"""Loaded programs and the symbols found in them."""

from __future__ import annotations

import threading
from typing import Protocol

from ...errors import ErrorCode, OffloadError
from .params import ParamLayout


class SymbolSource(Protocol):
    """What an image asks its device for (the device's hooks), without importing the device."""

    def _construct_kernel_impl(self, image: DeviceImage, name: str) -> GenericKernel: ...

    def _get_global_impl(self, image: DeviceImage, name: str) -> GlobalVariable: ...


class GenericKernel:
    """A kernel of a loaded image; backends subclass it to hold their function handle.

    ``args_size`` is the byte size of the argument blob the device reads, where the image or the
    driver says (None: unknown, and a blob is passed on as given). A blob may differ from it only
    by the tail padding of the C struct of the parameters: one of ``args_least`` to ``args_most``
    bytes is trimmed or zero-extended to ``args_size`` (:meth:`fit_args`); any other size is
    refused, as a blob too short would make the kernel read past it and one too long is refused
    by CUDA's driver or hides an argument the kernel does not take.
    """

    __slots__ = ("image", "name", "args_size", "args_least", "args_most", "args_about", "__weakref__")

    def __init__(self, image: DeviceImage, name: str, args_size: int | None = None):
        self.image = image
        self.name = name
        self.set_args(args_size, args_size, args_size, f"a {args_size}-byte argument blob")

    def set_args(self, size: int | None, least: int | None, most: int | None, about: str) -> None:
        """The blob sizes the kernel takes (see the class): the size the device reads, the range of
        sizes accepted, and what messages say about its parameters."""
        self.args_size = size
        self.args_least = least
        self.args_most = most
        self.args_about = about

    def set_layout(self, layout: ParamLayout) -> None:
        """Take the blob sizes from the kernel's parameter layout: the device reads exactly its
        parameters; a blob may carry the C struct's tail padding, which is trimmed."""
        self.set_args(layout.size, layout.size, layout.padded, layout.describe())

    def fit_args(self, args: bytes | None) -> bytes | None:
        """``args`` as the device takes it: trimmed of tail padding or zero-extended to ``args_size``
        (None for an empty blob); ``INVALID_ARGUMENT`` naming both sizes when it is not one of
        ``args_least`` to ``args_most`` bytes."""
        size = self.args_size
        given = len(args) if args else 0
        if size is None or given == size:
            return args or None
        least, most = self.args_least, self.args_most
        if least is None or most is None or not least <= given <= most:
            raise wrong_blob(self, args)
        if given > size:
            return bytes(memoryview(args)[:size]) if size else None  # type: ignore[arg-type]
        return bytes(args or b"") + bytes(size - given)


def wrong_blob(kernel: GenericKernel, args: bytes | None) -> OffloadError:
    """The error of a launch whose argument blob the kernel cannot take (see :class:`GenericKernel`)."""
    given = len(args) if args else 0
    what = "no argument blob" if not given else f"a {given}-byte argument blob"
    least, most = kernel.args_least, kernel.args_most
    if least is not None and given < least:
        why = (f"{what}, which is too short: it needs at least {least} bytes, or the kernel would read "
               f"past its end")
    elif most is not None and most == 0:
        why = f"{what}, but it takes no arguments (pass None)"
    else:
        why = (f"{what}, which is longer than its parameters and their C struct padding (at most {most} "
               f"bytes): it packs more than the kernel takes")
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"kernel {kernel.name!r} takes {kernel.args_about}; got {why}. Pack its parameters in "
                        f"order with C alignment (a ctypes.Structure of them, or offloadrt's queue.launch)")


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
