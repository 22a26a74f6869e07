"""Loaded host programs: the shared object, its kernels, and unloading behind the work that uses it."""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Any

from ..common.image import DeviceImage, GenericKernel
from .dispatch import Runners, find_runners
from .exec import HostQueue
from .loader import dlclose

if TYPE_CHECKING:
    from .plugin import HostDevice


class HostImage(DeviceImage):
    """A loaded shared object.

    Unloading waits (without blocking the caller) for work that may still call into it: each
    queue that is busy at unload time gets a marker, and a synchronous launch in progress on
    another thread holds the image; dlclose runs when the last of them lets go, so launches
    queued before ``olDestroyProgram`` still run.

    A launch that races the unload (queued after the unload looked at the queues) must not
    run, and the launch path takes no lock to prevent the race. A queue reaching a launch asks
    :meth:`may_run`: ``unloaded`` is set before the busy queues are looked at, so while it is
    False the unload will find this queue busy (an item stays queued until it has run) and
    close behind the launch. Once it is True, the launch runs only if its queue was marked and
    has not passed its marker yet: the marker is then behind the launch. A synchronous launch
    holds the image first and checks ``unloaded`` second, with the same effect.
    """

    def __init__(self, device: HostDevice, image: bytes, lib: ctypes.CDLL, symbols: dict[str, Any]):
        super().__init__(device, image)
        self.lib = lib
        self.symbols = symbols
        self.runners = find_runners(lib, symbols)  # native work-group dispatch, when built with host_kernel.h
        self._holds = 0
        self._closing = False
        self._hold_lock = threading.Lock()  # guards _holds and _closing
        self.marked: frozenset[HostQueue] | None = None  # the queues that got a marker, once unloading
        self.passed: set[HostQueue] = set()  # marked queues whose marker has run

    def may_run(self, queue: HostQueue) -> bool:
        """Whether a launch of this image that ``queue`` reached now may call into it (see above)."""
        if not self.unloaded:
            return True
        marked = self.marked
        return marked is None or (queue in marked and queue not in self.passed)

    def hold(self) -> None:
        with self._hold_lock:
            self._holds += 1

    def release(self, _arg: object = None, _failure: object = None) -> None:
        with self._hold_lock:
            self._holds -= 1
            close = self._closing and self._holds == 0
        if close:
            dlclose(self.lib)

    def _marker(self, queue: HostQueue, _failure: object = None) -> None:
        self.passed.add(queue)
        self.release()

    def close(self, busy_queues: list[HostQueue]) -> None:
        self.marked = frozenset(busy_queues)
        with self._hold_lock:
            self._closing = True
            self._holds += len(busy_queues)
            close_now = self._holds == 0
        for queue in busy_queues:
            queue.submit(self._marker, queue, self._marker)
        if close_now:
            dlclose(self.lib)


class HostKernel(GenericKernel):
    """A kernel of a host image: its ctypes function, its address, and its image's native runners."""

    __slots__ = ("fn", "address", "runners")
    image: HostImage  # the generic kernel's image, known here to be a host image

    def __init__(self, image: HostImage, name: str, fn: Any, args_size: int | None):
        super().__init__(image, name, args_size)
        self.fn = fn
        self.address: int = ctypes.cast(fn, ctypes.c_void_p).value or 0
        self.runners: Runners | None = image.runners


ARGS_SIZE_PREFIX = "__ol_args_size_"  # OL_HOST_KERNEL_ARGS in host_kernel.h
ARGS_ALIGN_PREFIX = "__ol_args_align_"  # the same, from offloadrt 0.1's header on


def declared_args_size(image: HostImage, name: str) -> int | None:
    """The argument blob size the image declares for kernel ``name`` (OL_HOST_KERNEL_ARGS), if any."""
    return _declared(image, ARGS_SIZE_PREFIX + name)


def declared_args_align(image: HostImage, name: str) -> int | None:
    """The alignment of kernel ``name``'s argument struct (OL_HOST_KERNEL_ARGS), if the image says."""
    align = _declared(image, ARGS_ALIGN_PREFIX + name)
    return align if align is not None and 0 < align <= 4096 and not align & (align - 1) else None


def _declared(image: HostImage, symbol_name: str) -> int | None:
    symbol = image.symbols.get(symbol_name)
    if symbol is None or symbol.kind != "object" or symbol.size != 8:
        return None
    try:
        return int(ctypes.c_uint64.in_dll(image.lib, symbol_name).value)
    except ValueError:
        return None
