"""The host plugin: a real, asynchronous CPU backend.

Programs are ELF shared objects loaded with dlopen; kernels follow the ABI in
``offloadrt/include/offloadrt/host_kernel.h``; each queue runs on its own worker thread; all
memory is page-aligned host memory, so host pointers and "device" pointers are the same.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import threading
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..errors import ErrorCode, OffloadError
from ..types import AllocType, DeviceInfo, PlatformBackend
from .host_exec import (
    KERNEL,
    KERNEL_PROTOTYPE,
    GroupPool,
    HostEvent,
    HostQueue,
    LaunchStruct,
    after_queued_work,
    program_gone,
)
from .host_info import compute_units, host_device_info
from .host_loader import check_image, dlclose, dlopen_image, is_loadable, read_symbols
from .image import DeviceImage, GenericKernel, GlobalVariable
from .interface import Dim3, GenericDevice, GenericPlugin
from .resources import AsyncInfo, GenericEvent

_libc = ctypes.CDLL(None, use_errno=True)
_posix_memalign = _libc.posix_memalign
_posix_memalign.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t)
_posix_memalign.restype = ctypes.c_int
_free = _libc.free
_free.argtypes = (ctypes.c_void_p,)
_free.restype = None
_memmove = ctypes.memmove
_memset = ctypes.memset
PAGE_SIZE = mmap.PAGESIZE
FILL_CHUNK = 1 << 20  # copy the pattern forward in pieces that stay in cache


def _copy(arg: tuple[int, int, int]) -> None:
    _memmove(arg[0], arg[1], arg[2])


def fill(ptr: int, pattern: bytes, size: int) -> None:
    """Write ``pattern`` over ``size`` bytes at ``ptr``; a last partial copy is cut at ``size``."""
    if size <= 0:
        return
    width = len(pattern)
    if width == 1:
        _memset(ptr, pattern[0], size)
        return
    # Copy from a private buffer of whole patterns, never from the destination itself: work on
    # another queue racing the fill's first bytes then cannot spread into the rest of it.
    chunk = pattern * max(1, min(size, FILL_CHUNK) // width)
    step = len(chunk)
    filled = 0
    while filled < size:
        count = min(step, size - filled)
        _memmove(ptr + filled, chunk, count)
        filled += count


def _fill_item(arg: tuple[int, bytes, int]) -> None:
    fill(*arg)


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
    __slots__ = ("fn",)

    def __init__(self, image: HostImage, name: str, fn: Any, args_size: int | None):
        super().__init__(image, name, args_size)
        self.fn = fn


ARGS_SIZE_PREFIX = "__ol_args_size_"  # OL_HOST_KERNEL_ARGS in host_kernel.h


def _declared_args_size(image: HostImage, name: str) -> int | None:
    """The argument blob size the image declares for kernel ``name`` (OL_HOST_KERNEL_ARGS), if any."""
    symbol = image.symbols.get(ARGS_SIZE_PREFIX + name)
    if symbol is None or symbol.kind != "object" or symbol.size != 8:
        return None
    try:
        return int(ctypes.c_uint64.in_dll(image.lib, ARGS_SIZE_PREFIX + name).value)
    except ValueError:
        return None


class HostDevice(GenericDevice):
    """The CPU as an offload device."""

    _queue_numbers = itertools.count()
    host_allocations_pinned = False  # all its memory is plain host memory: registering is free anyway
    LAUNCH_STRUCT_CACHE = 1024

    def _init_impl(self) -> None:
        self.groups = GroupPool(compute_units())
        self.queues: set[HostQueue] = set()  # every backend queue that exists
        self._stopped: list[HostQueue] = []  # destroyed queues whose threads deinit joins
        self._stopped_joined = False  # deinit has joined _stopped: later destroys join their own thread
        self._queues_lock = threading.Lock()  # guards queues, _stopped and _stopped_joined
        # Read-only launch structs of one-group launches without work-group memory, by group size.
        self._launch_structs: dict[Dim3, tuple[LaunchStruct, int]] = {}

    def _deinit_impl(self) -> None:
        """Stop the group pool and wait for the threads of destroyed queues (they are drained)."""
        self.groups.shutdown(wait=True)
        with self._queues_lock:
            stopped, self._stopped = self._stopped, []
            self._stopped_joined = True
        stuck = [queue for queue in stopped if not queue.join(timeout=10.0)]
        if stuck:
            raise OffloadError(ErrorCode.BACKEND_FAILURE,
                               f"{len(stuck)} host queue thread(s) did not stop within 10 s "
                               f"(a host function or kernel is still running)")

    def _obtain_info_impl(self) -> dict[DeviceInfo, Any]:
        info, self.details = host_device_info()
        return info

    # memory
    def _alloc_impl(self, size: int, kind: AllocType) -> int:
        out = ctypes.c_void_p()
        status = _posix_memalign(ctypes.byref(out), PAGE_SIZE, size)
        if status:
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                               f"posix_memalign of {size} bytes failed with errno {status}")
        return out.value or 0

    def _free_impl(self, ptr: int, kind: AllocType) -> None:
        """Free now, or, while queues hold work that may still use the memory, once they finished it
        (a GPU driver's free waits for the device; this waits without blocking the caller)."""
        with self._queues_lock:
            busy = [queue for queue in self.queues if queue._items]
        if busy:
            after_queued_work(busy, _free, ptr)
        else:
            _free(ptr)

    def _data_lock_impl(self, ptr: int, size: int) -> int:
        return ptr  # the host device works on host memory in place: nothing to pin or map

    def _data_unlock_impl(self, ptr: int) -> None:
        pass

    def _data_memcpy_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        if queue is None:
            _memmove(dst, src, size)
        else:
            queue.submit(_copy, (dst, src, size))  # type: ignore[attr-defined]

    _data_submit_impl = _data_memcpy_impl
    _data_retrieve_impl = _data_memcpy_impl

    def _data_fill_impl(self, ptr: int, pattern: bytes, size: int, queue: AsyncInfo | None) -> None:
        if queue is None:
            fill(ptr, pattern, size)
        else:
            queue.submit(_fill_item, (ptr, bytes(pattern), size))  # type: ignore[attr-defined]

    # programs
    def _is_valid_binary_impl(self, image: bytes) -> bool:
        return is_loadable(image)

    def _load_binary_impl(self, image: bytes) -> DeviceImage:
        check_image(image)
        symbols = read_symbols(image)
        return HostImage(self, image, dlopen_image(image), symbols)

    def _unload_binary_impl(self, image: DeviceImage) -> None:
        assert isinstance(image, HostImage)
        with self._queues_lock:
            busy = [queue for queue in self.queues if not queue.is_idle()]
        image.close(busy)

    def _construct_kernel_impl(self, image: DeviceImage, name: str) -> GenericKernel:
        assert isinstance(image, HostImage)
        symbol = image.symbols.get(name)
        if symbol is None or symbol.kind != "function":
            what = "a global variable, not a kernel" if symbol is not None else "not exported by the program"
            raise OffloadError(ErrorCode.NOT_FOUND, f"kernel '{name}': {what}")
        try:
            fn = KERNEL_PROTOTYPE((name, image.lib))
        except AttributeError as exc:
            raise OffloadError(ErrorCode.NOT_FOUND, f"kernel '{name}': the loader cannot resolve it: {exc}") from None
        return HostKernel(image, name, fn, _declared_args_size(image, name))

    def _get_global_impl(self, image: DeviceImage, name: str) -> GlobalVariable:
        assert isinstance(image, HostImage)
        symbol = image.symbols.get(name)
        if symbol is None or symbol.kind != "object":
            what = "a function, not a global variable" if symbol is not None else "not exported by the program"
            raise OffloadError(ErrorCode.NOT_FOUND, f"global variable '{name}': {what}")
        try:
            address = ctypes.addressof(ctypes.c_char.in_dll(image.lib, name))
        except ValueError as exc:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"global variable '{name}': the loader cannot resolve it: {exc}") from None
        return GlobalVariable(image, name, address, symbol.size)

    # kernels
    def _launch_impl(self, kernel: GenericKernel, args: bytes | None, num_groups: Dim3, group_size: Dim3,
                     dyn_shared_memory: int, queue: AsyncInfo | None) -> None:
        assert isinstance(kernel, HostKernel)
        if queue is None:
            image = kernel.image
            assert isinstance(image, HostImage)
            image.hold()  # before the check: an unload that starts now sees the hold and waits for it
            try:
                if image.unloaded:
                    raise program_gone(kernel.name)
                self.groups.run(kernel.fn, args, num_groups, group_size, dyn_shared_memory, kernel.name)
            finally:
                image.release()
            return
        if num_groups == (1, 1, 1) and not dyn_shared_memory:
            prepared = self._launch_structs.get(group_size)
            if prepared is None:
                prepared = self._prepare_launch_struct(group_size)
            if prepared is not None:
                # HostQueue._push, inlined on the hottest path
                queue._items.append((KERNEL, kernel, args, prepared[1]))  # type: ignore[attr-defined]
                if queue._sleeping:  # type: ignore[attr-defined]
                    queue.wake()  # type: ignore[attr-defined]
                return
        queue.submit(_launch_item, (queue, self.groups, kernel, args, num_groups,  # type: ignore[attr-defined]
                                    group_size, dyn_shared_memory))

    def _prepare_launch_struct(self, group_size: Dim3) -> tuple[LaunchStruct, int] | None:
        """A shared read-only struct for one-group launches of ``group_size`` (kept forever)."""
        if len(self._launch_structs) >= self.LAUNCH_STRUCT_CACHE:
            return None
        launch = LaunchStruct(0, 0, 0, 1, 1, 1, *(int(v) for v in group_size), None)
        prepared = (launch, ctypes.addressof(launch))
        return self._launch_structs.setdefault(group_size, prepared)

    # queues
    def _create_queue_impl(self) -> AsyncInfo:
        queue = HostQueue(self, f"offloadrt-host-queue-{next(self._queue_numbers)}")
        with self._queues_lock:
            self.queues.add(queue)
        return queue

    def _destroy_queue_impl(self, queue: AsyncInfo) -> None:
        assert isinstance(queue, HostQueue)
        with self._queues_lock:
            self.queues.discard(queue)
            if len(self._stopped) >= 64:
                self._stopped = [q for q in self._stopped if q.is_alive()]
            joined = self._stopped_joined
            if not joined:
                self._stopped.append(queue)
        queue.stop()
        if joined:  # a queue of a call that raced de-init, destroyed after it joined the others
            queue.join(timeout=10.0)

    def _synchronize_impl(self, queue: AsyncInfo) -> None:
        assert isinstance(queue, HostQueue)
        queue.wait_idle()

    def _query_impl(self, queue: AsyncInfo) -> bool:
        assert isinstance(queue, HostQueue)
        return queue.is_idle()

    def _has_pending_work_impl(self, queue: AsyncInfo) -> bool:
        assert isinstance(queue, HostQueue)
        return not queue.is_idle()

    def _enqueue_host_call_impl(self, callback: Callable[[Any], object], user_data: Any,
                                queue: AsyncInfo) -> None:
        assert isinstance(queue, HostQueue)
        queue.submit(callback, user_data)

    # events
    def _create_event_impl(self) -> GenericEvent:
        return HostEvent(self)

    def _record_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        assert isinstance(queue, HostQueue) and isinstance(event, HostEvent)
        if queue.is_idle():
            # The queue's last item may have failed just now: it sets the failure before it leaves.
            failure = queue.failure
            if failure is None:
                event.reach()
            else:
                event.skip(None, failure)
        else:
            queue.submit(event.reach, None, event.skip)

    def _wait_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        assert isinstance(event, HostEvent) and isinstance(queue, HostQueue)
        # An open latch with no failure is final (skip sets the failure before it opens).
        if not event.latch.is_open or event.failure is not None:
            queue.submit(_wait_item, (queue, event))

    def _sync_event_impl(self, event: GenericEvent) -> None:
        assert isinstance(event, HostEvent)
        event.latch.wait()

    def _is_event_complete_impl(self, event: GenericEvent) -> bool:
        assert isinstance(event, HostEvent)
        return event.latch.is_open

    def _event_elapsed_time_impl(self, start: GenericEvent, end: GenericEvent) -> float:
        assert isinstance(start, HostEvent) and isinstance(end, HostEvent)
        return (end.time_ns - start.time_ns) / 1e6


def _launch_item(job: tuple[HostQueue, GroupPool, HostKernel, bytes | None, Dim3, Dim3, int]) -> None:
    queue, groups, kernel, args, num_groups, group_size, dyn = job
    if not kernel.image.may_run(queue):  # type: ignore[attr-defined]
        raise program_gone(kernel.name)
    groups.run(kernel.fn, args, num_groups, group_size, dyn, kernel.name)


def _wait_item(arg: tuple[HostQueue, HostEvent]) -> None:
    queue, event = arg
    event.latch.wait()
    if event.failure is not None:
        queue.adopt(event.failure)


class HostPlugin(GenericPlugin):
    """One device: the CPU this process runs on."""

    name = "host"
    backend = PlatformBackend.HOST
    vendor_name = "offloadrt"

    def _init_impl(self) -> int:
        return 1

    def _create_device(self, device_id: int) -> GenericDevice:
        return HostDevice(self, device_id)

    def version(self) -> str:
        return __version__
