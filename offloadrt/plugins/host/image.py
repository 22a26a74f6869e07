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
        _share_guard_budget(lib, symbols)
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


GUARD_BUDGET_SYMBOL = "__ol_gpu_guard_budget_v1"  # gpu/host_runtime.h
MAPPINGS_PER_GUARD = 2  # a guard page splits its stack mapping in two
GUARDS_MOST = 8192  # the process never guards more fiber stacks than this, whatever max_map_count allows


class _GuardBudget(ctypes.Structure):
    _fields_ = [("used", ctypes.c_uint32), ("limit", ctypes.c_uint32)]


_guard_budget: Any = None  # the process's budget (allocated once, never freed: see _share_guard_budget)
_guard_budget_lock = threading.Lock()


def guard_limit(max_map_count: int | None = None) -> int:
    """How many fiber stacks the process's portable programs guard at once, over all programs.

    A quarter of the process's mappings (``vm.max_map_count``) at most, and no more than
    :data:`GUARDS_MOST`: whatever the programs do, three quarters stay for the rest of the process.
    """
    if max_map_count is None:
        try:
            with open("/proc/sys/vm/max_map_count") as limit_file:
                max_map_count = int(limit_file.read())
        except (OSError, ValueError):
            max_map_count = 65530  # Linux's default
    return max(0, min(GUARDS_MOST, max_map_count // 4 // MAPPINGS_PER_GUARD))


def guard_budget() -> Any:
    """The process-wide guard page budget that loaded portable programs share (a ``_GuardBudget``)."""
    global _guard_budget
    with _guard_budget_lock:
        if _guard_budget is None:
            # From the C heap, never freed: a program's destructor returns its guards to the budget,
            # and at process exit destructors run after Python has let its own objects go.
            libc = ctypes.CDLL(None)
            libc.calloc.restype = ctypes.c_void_p
            libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
            address = libc.calloc(1, ctypes.sizeof(_GuardBudget))
            if not address:
                raise MemoryError("no memory for the fiber stacks' guard page budget")
            budget = _GuardBudget.from_address(address)
            budget.limit = guard_limit()
            _guard_budget = budget
        return _guard_budget


def _share_guard_budget(lib: ctypes.CDLL, symbols: dict[str, Any]) -> None:
    """Point a portable program's guard page budget at the process's (programs without fibers have none)."""
    symbol = symbols.get(GUARD_BUDGET_SYMBOL)
    if symbol is None or symbol.kind != "object" or symbol.size != ctypes.sizeof(ctypes.c_void_p):
        return
    try:
        pointer = ctypes.c_void_p.in_dll(lib, GUARD_BUDGET_SYMBOL)
    except ValueError:
        return
    pointer.value = ctypes.addressof(guard_budget())


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
