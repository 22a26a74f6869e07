"""The host plugin: a real, asynchronous CPU backend.

Programs are ELF shared objects loaded with dlopen; kernels follow the ABI in
``offloadrt/include/offloadrt/host_kernel.h``; queues are served by a pool of about one worker
thread per core (:mod:`.pool`); all memory is page-aligned host memory, so host pointers and
"device" pointers are the same.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from collections.abc import Callable
from typing import Any

from ... import __version__
from ...errors import ErrorCode, OffloadError
from ...types import LAUNCH_SIZE_WRITES, AllocType, DeviceInfo, KernelLaunchSizeArgs, PlatformBackend
from ..common import Dim3, GenericDevice, GenericPlugin
from ..common.image import DeviceImage, GenericKernel, GlobalVariable
from ..common.launch import check_launch_shape
from ..common.resources import AsyncInfo, GenericEvent
from . import memory
from .dispatch import KERNEL_PROTOTYPE, LaunchStruct
from .exec import (
    ARGS_OFFSET,
    BATCHED_ITEMS,
    KERNEL,
    LAUNCH,
    HostEvent,
    HostQueue,
    after_queued_work,
    kernel_item,
    pack_call,
    program_gone,
)
from .image import HostImage, HostKernel, declared_args_align, declared_args_size
from .info import compute_units, host_device_info
from .loader import check_image, dlopen_image, is_loadable, read_symbols
from .pool import WorkerPool

_memmove = ctypes.memmove
_DIMENSIONS = (1, 2, 3)
#: what olCalculateOptimalOccupancy answers on the host device (see _optimal_occupancy_impl)
PREFERRED_GROUP_SIZE = 1024

class HostDevice(GenericDevice):
    """The CPU as an offload device."""

    _device_numbers = itertools.count()
    host_allocations_pinned = False  # all its memory is plain host memory: registering is free anyway
    LAUNCH_STRUCT_CACHE = 1024
    FAST_SHAPES_PER_KERNEL = 64  # launch shapes a kernel's fast launcher remembers
    FAST_BLOBS_PER_SHAPE = 64  # argument blobs (by content) it keeps the queue items of, per shape
    FAST_BLOB_KEPT_BYTES = 512  # larger blobs are not kept

    def _init_impl(self) -> None:
        self.pool = WorkerPool(compute_units(), f"host{next(self._device_numbers)}")
        self.queues: set[HostQueue] = set()  # every backend queue that exists
        self._queues_lock = threading.Lock()  # guards queues
        # Read-only launch structs of one-group launches without work-group memory, by group size.
        self._launch_structs: dict[Dim3, tuple[LaunchStruct, int]] = {}

    def _deinit_impl(self) -> None:
        """Stop the worker pool: its threads finish what they hold (the queues are drained) and exit."""
        stuck = self.pool.shutdown(timeout=10.0)
        if stuck:
            raise OffloadError(ErrorCode.BACKEND_FAILURE,
                               f"{stuck} host worker thread(s) did not stop within 10 s "
                               f"(a host function or kernel is still running)")

    def _obtain_info_impl(self) -> dict[DeviceInfo, Any]:
        info, self.details = host_device_info()
        return info

    # memory
    def _alloc_impl(self, size: int, kind: AllocType) -> int:
        return memory.allocate(size)

    def _free_impl(self, ptr: int, kind: AllocType) -> None:
        """Free now, or, while queues hold work that may still use the memory, once they finished it
        (a GPU driver's free waits for the device; this waits without blocking the caller)."""
        with self._queues_lock:
            busy = [queue for queue in self.queues if queue._items]
        if busy:
            after_queued_work(busy, memory.free, ptr)
        else:
            memory.free(ptr)

    def _data_lock_impl(self, ptr: int, size: int) -> int:
        return ptr  # the host device works on host memory in place: nothing to pin or map

    def _data_unlock_impl(self, ptr: int) -> None:
        pass

    def _data_memcpy_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        if queue is None:
            _memmove(dst, src, size)
        else:
            queue.submit(memory.copy_item, (dst, src, size))  # type: ignore[attr-defined]

    _data_submit_impl = _data_memcpy_impl
    _data_retrieve_impl = _data_memcpy_impl

    def _data_fill_impl(self, ptr: int, pattern: bytes, size: int, queue: AsyncInfo | None) -> None:
        if queue is None:
            memory.fill(ptr, pattern, size)
        else:
            queue.submit(memory.fill_item, (ptr, bytes(pattern), size))  # type: ignore[attr-defined]

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
        kernel = HostKernel(image, name, fn, declared_args_size(image, name))
        size, align = kernel.args_size, declared_args_align(image, name)
        if size and align is not None and align > 1:
            # The kernel copies sizeof(struct); a blob of just its parameters (without the struct's
            # tail padding, under one alignment) is zero-extended to it.
            kernel.set_args(size, max(0, size - align + 1), size,
                            f"a {size}-byte argument struct (aligned to {align} bytes)")
        return kernel

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
        if args is not None and type(args) is not bytes:
            args = bytes(args)
        if queue is None:
            image = kernel.image
            assert isinstance(image, HostImage)
            image.hold()  # before the check: an unload that starts now sees the hold and waits for it
            try:
                if image.unloaded:
                    raise program_gone(kernel.name)
                self.pool.run_groups(kernel, args, num_groups, group_size, dyn_shared_memory)
            finally:
                image.release()
            return
        assert isinstance(queue, HostQueue)
        if num_groups == (1, 1, 1) and not dyn_shared_memory:
            prepared = self._launch_structs.get(group_size)
            if prepared is None:
                prepared = self._prepare_launch_struct(group_size)
            if prepared is not None:
                queue.push(kernel_item(kernel, args, prepared[1]))
                return
        queue.push((LAUNCH, kernel, args, (num_groups, group_size, dyn_shared_memory)))

    def _prepare_launch_struct(self, group_size: Dim3) -> tuple[LaunchStruct, int] | None:
        """A shared read-only struct for one-group launches of ``group_size`` (kept forever)."""
        if len(self._launch_structs) >= self.LAUNCH_STRUCT_CACHE:
            return None
        launch = LaunchStruct(0, 0, 0, 1, 1, 1, *(int(v) for v in group_size), None)
        prepared = (launch, ctypes.addressof(launch))
        return self._launch_structs.setdefault(group_size, prepared)

    def launcher(self, kernel: GenericKernel) -> Callable[[AsyncInfo, bytes | None, KernelLaunchSizeArgs], bool]:
        """The fast path of a queued launch of ``kernel`` (see :meth:`GenericDevice.launcher`).

        It takes a launch only when every check ``olLaunchKernel`` makes passes, and then queues
        the item the checked path would: the queue is healthy, the program loaded, the blob of the
        declared size, and the launch shape one this kernel has seen pass (a shape is checked on
        its first launch and remembered). Items are kept per shape and blob *content* (a launch
        copies its blob, so equal blobs make equal launches): a launch with the very same
        ``bytes`` object as the last one, or with an equal one, queues the kept item again,
        allocating nothing. The kept item holds the first of the equal blobs, whose data the
        batch runner reads. A full queue (:attr:`HostQueue.depth` items) is left to the checked
        path, whose :meth:`HostQueue.push` waits for room.
        """
        assert isinstance(kernel, HostKernel)
        image = kernel.image
        args_size = kernel.args_size
        kernel_address = kernel.address
        batched, bytes_offset, pack = BATCHED_ITEMS, ARGS_OFFSET, pack_call
        # shape -> [what its items need, last args, last item, {blob: its item}]
        shapes: dict[tuple[int, ...], list[Any]] = {}
        prepare = self._prepare_fast_shape
        limit = self.FAST_SHAPES_PER_KERNEL
        blobs_kept, largest_kept = self.FAST_BLOBS_PER_SHAPE, self.FAST_BLOB_KEPT_BYTES
        writes = LAUNCH_SIZE_WRITES
        # The launch-size object of the last launch that passed, the write count it was read at, and
        # its shape's entry: while both still hold, the object is unchanged (see GpuPrograms.launcher).
        checked: tuple[Any, int, Any] = (None, -1, None)

        def launch(ai: Any, args: bytes | None, sizes: KernelLaunchSizeArgs) -> bool:
            nonlocal checked
            if ai.failure is not None or image.unloaded or len(ai._items) >= ai.depth:
                return False  # (a full queue: the checked path waits for room, HostQueue.push)
            last = checked
            if last[0] is sizes and last[1] == writes[0]:
                entry = last[2]
            else:
                if type(sizes) is not KernelLaunchSizeArgs:
                    return False
                count = writes[0]
                try:
                    ng = sizes.num_groups
                    gs = sizes.group_size
                    key = (sizes.dimensions, ng.x, ng.y, ng.z, gs.x, gs.y, gs.z, sizes.dyn_shared_memory)
                except AttributeError:
                    return False
                entry = shapes.get(key)
                if entry is None:
                    prepared = prepare(key)
                    if prepared is None:
                        return False
                    entry = [prepared, shapes, None, {}]  # (a fresh object as "last args": no blob is it)
                    if len(shapes) < limit:
                        shapes[key] = entry
                checked = (sizes, count, entry)
            if args is entry[1]:
                item = entry[2]
            else:
                kept = entry[3]
                item = kept.get(args)
                if item is not None:
                    entry[1] = args
                    entry[2] = item
                    ai._items.append(item)
                    if not ai._serving:
                        ai.schedule()
                    return True
                blob = args
                if not args:
                    if args_size:
                        return False
                    args = None
                elif args_size is not None and len(args) != args_size:
                    if not kernel.args_least <= len(args) <= args_size:  # type: ignore[operator]
                        return False
                    args = kernel.fit_args(args)  # a blob without the struct's tail padding, zero-extended
                prepared = entry[0]
                if prepared.__class__ is not int:
                    item = (LAUNCH, kernel, args, prepared)
                elif args is None:
                    item = (KERNEL, pack(kernel_address, 0, prepared), kernel, None, prepared)
                elif batched:  # the record names the blob's data; the item keeps the blob alive
                    item = (KERNEL, pack(kernel_address, id(args) + bytes_offset, prepared), kernel, args,
                            prepared)
                else:
                    item = (KERNEL, None, kernel, args, prepared)
                entry[1] = blob
                entry[2] = item
                if len(kept) < blobs_kept and (blob is None or len(blob) <= largest_kept):
                    kept[blob] = item
            ai._items.append(item)
            if not ai._serving:
                ai.schedule()
            return True

        return launch

    def _prepare_fast_shape(self, key: tuple[int, ...]) -> Any:
        """What the items of a launch shape need (the launch struct's address of a one-group launch
        without work-group memory, the shape of any other), or None when the shape is not valid."""
        dims, gx, gy, gz, bx, by, bz, dyn = key
        if dims not in _DIMENSIONS:
            return None
        num_groups, group_size = (gx, gy, gz), (bx, by, bz)
        try:
            check_launch_shape(self, num_groups, group_size, dyn)
        except OffloadError:
            return None
        if num_groups == (1, 1, 1) and not dyn:
            prepared = self._launch_structs.get(group_size) or self._prepare_launch_struct(group_size)
            if prepared is not None:
                return prepared[1]
        return (num_groups, group_size, dyn)

    def _optimal_occupancy_impl(self, kernel: GenericKernel, shared_memory: int) -> int:
        """The group size that runs best on the host: large enough that a group's items amortise
        its call (a few nanoseconds natively) and vectorise, small enough that a launch of a
        GPU-sized grid still spreads over every core. Work-group memory does not change it: the
        buffer is per thread, not per core."""
        return PREFERRED_GROUP_SIZE

    # queues
    def _create_queue_impl(self) -> AsyncInfo:
        self.pool.start()
        queue = HostQueue(self, self.pool)
        with self._queues_lock:
            self.queues.add(queue)
        return queue

    def _destroy_queue_impl(self, queue: AsyncInfo) -> None:
        """Forget the queue; it has no thread of its own, and whatever it still holds (the skipped
        work of a failed queue) is finished by the pool."""
        assert isinstance(queue, HostQueue)
        with self._queues_lock:
            self.queues.discard(queue)

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
        queue.submit_host_function(callback, user_data)

    # events
    def _create_event_impl(self, timed: bool) -> GenericEvent:
        return HostEvent(self, timed)

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
            queue.submit_wait(event)

    def _sync_event_impl(self, event: GenericEvent) -> None:
        assert isinstance(event, HostEvent)
        event.latch.wait()

    def _is_event_complete_impl(self, event: GenericEvent) -> bool:
        assert isinstance(event, HostEvent)
        return event.latch.is_open

    def _event_elapsed_time_impl(self, start: GenericEvent, end: GenericEvent) -> float:
        assert isinstance(start, HostEvent) and isinstance(end, HostEvent)
        return (end.time_ns - start.time_ns) / 1e6


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
