"""GPU memory: allocation, host-memory registration, copies and fills."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

from ....errors import ErrorCode, OffloadError
from ....types import AllocType
from .. import DeviceHooks
from ..resources import AsyncInfo
from .core import GpuDeviceCore
from .driver import ALREADY_REGISTERED, NOT_REGISTERED, PEER_ALREADY_ENABLED, SUCCESS

if TYPE_CHECKING:
    from .plugin import GpuPlugin


class _RegisteredElsewhere(Exception):  # noqa: N818  # a finding, not an error
    """Host memory being registered turned out to be page-locked outside offloadrt already (at ``address``)."""

    def __init__(self, address: int) -> None:
        super().__init__(address)
        self.address = address



class GpuMemory(GpuDeviceCore):
    """Allocation, registration of host memory, copies and fills of a GPU device."""

    # ---- memory ----------------------------------------------------------------------------
    _ALLOC_OPS: ClassVar[dict[AllocType, str]] = {AllocType.DEVICE: "alloc_device", AllocType.HOST: "alloc_host",
                                                   AllocType.MANAGED: "alloc_managed"}

    def _alloc_impl(self, size: int, kind: AllocType) -> int:
        self.enter(select=True)
        op = self._ALLOC_OPS[kind]
        ptr = self.check(getattr(self, f"drv_{op}")(size, *self._alloc_flags(kind)), self.call_names[op])
        return 0 if ptr is None else int(ptr)

    def _free_impl(self, ptr: int, kind: AllocType) -> None:
        if self.sticky is not None:
            return  # a poisoned device's memory goes with its context (or the process)
        self.enter()
        op = "free_host" if kind == AllocType.HOST else "free_device"
        self.check(getattr(self, f"drv_{op}")(ptr), self.call_names[op])

    # ---- registered host memory -------------------------------------------------------------
    @property
    def gpu_plugin(self) -> GpuPlugin:
        return cast("GpuPlugin", self.plugin)

    def _data_lock_impl(self, ptr: int, size: int) -> int:
        """Page-lock ``[ptr, ptr + size)`` for every device of the plugin; the address devices use.

        A range inside one that another device of the plugin registered is one more user of that
        registration (its device address holds for every device: unified addressing); a range
        that overlaps one only in part is ``INVALID_ARGUMENT``. Memory someone else registered
        (another library, or a HOST allocation of another device) is page-locked already: the
        driver says so, and it is used as it is, at its device address, and never unregistered
        here, as LLVM's plugins treat externally locked memory.
        """
        self.enter(select=True)
        try:
            return self.gpu_plugin.host_pins.register(ptr, size, self._pin)
        except _RegisteredElsewhere as found:
            self.foreign_pins.add(ptr)
            return found.address
        except OffloadError as exc:
            if exc.code == ErrorCode.INVALID_ARGUMENT and not hasattr(exc, "driver_status"):
                exc.details += (f" (host memory registered with another {self.label} device of this process; the "
                                f"driver page-locks a range once for all of them)")
            raise

    def _data_unlock_impl(self, ptr: int) -> None:
        if ptr in self.foreign_pins:
            self.foreign_pins.discard(ptr)
            return
        self.gpu_plugin.host_pins.unregister(ptr, self._unpin)

    def _pin(self, ptr: int, size: int) -> int:
        """Register a range no device of the plugin registered (under the plugin's pin lock); its device address."""
        status = int(self.drv_host_register(ptr, size, self.host_register_flags)[0])
        if status == ALREADY_REGISTERED:
            raise _RegisteredElsewhere(self._registered_elsewhere(ptr, size))
        if status != SUCCESS:
            raise self.failure(status, self.call_names["host_register"])
        try:
            address = self._device_address(ptr)
        except OffloadError as exc:
            undo = int(self.drv_host_unregister(ptr)[0])
            if undo != SUCCESS:
                exc.details += (f"; undoing the registration failed too ({self.call_names['host_unregister']}: "
                                f"{self.driver.name(undo)}): the range stays page-locked")
            raise
        self.gpu_plugin.pin_owners[ptr] = self
        return address

    def _device_address(self, ptr: int) -> int:
        return int(self.check(self.drv_host_device_pointer(ptr, 0), self.call_names["host_device_pointer"]))

    def _registered_elsewhere(self, ptr: int, size: int) -> int:
        """The device address of host memory registered outside offloadrt, which must hold the whole
        range in one piece (the device address of its last byte follows from its first's)."""
        first = self._device_address(ptr)
        try:
            last = self._device_address(ptr + size - 1) if size > 1 else first
        except OffloadError as exc:
            if exc.code != ErrorCode.INVALID_ARGUMENT:
                raise
            last = None  # the end of the range is not registered
        if last != first + size - 1:
            err = self.driver.error(ALREADY_REGISTERED, self.call_names["host_register"],
                                    f"[{ptr:#x}, {ptr + size:#x}) overlaps host memory registered outside "
                                    f"offloadrt, which does not hold all of it")
            err.code = ErrorCode.INVALID_ARGUMENT  # a partial overlap, as with offloadrt's own registrations
            raise err
        return first

    def _unpin(self, base: int) -> None:
        """Unregister a range no device of the plugin uses any more (under the plugin's pin lock).

        The device that registered it unregisters it. A poisoned one leaves it, as it leaves its
        allocations: the range goes with its context (CUDA) or the process (HIP). One already
        de-initialised (``olShutDown`` releases devices in turn) may have taken the registration
        along with its context: this device unregisters it then, and finds it gone or not.
        """
        plugin = self.gpu_plugin
        owner = plugin.pin_owners[base]
        call = self.call_names["host_unregister"]
        if owner.initialized:
            if owner.sticky is None:
                owner.enter()
                owner.check(owner.drv_host_unregister(base), call)
        elif self.sticky is None:
            self.enter()
            status = int(self.drv_host_unregister(base)[0])
            if status not in (SUCCESS, NOT_REGISTERED):
                raise self.failure(status, call)
        del plugin.pin_owners[base]

    # ---- copies ----------------------------------------------------------------------------
    def _data_exchange_impl(self, src: int, dst_device: DeviceHooks, dst: int, size: int,
                            queue: AsyncInfo | None) -> None:
        assert isinstance(dst_device, type(self))
        self.enter(select=True)  # peer access is enabled for the current device
        self._enable_peer(dst_device)
        # The driver copies directly when access is enabled, through the host otherwise.
        self.on_stream(queue, "memcpy_peer", dst, dst_device.peer_handle, src, self.peer_handle, size)

    # A queued copy on a healthy queue of a healthy device already current on this thread is one
    # driver call in one frame, the generic check that the queue has not failed included (the hot
    # path of olMemcpy); anything else takes the generic method, then the hooks below.
    def data_submit(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        if (queue is not None and queue.failure is None
                and self.thread_state.cell.token is self.current_token):
            result = self.drv_memcpy_htod(dst, src, size, queue.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), self.call_names["memcpy_htod"])
            return
        super().data_submit(dst, src, size, queue)

    def data_retrieve(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        if (queue is not None and queue.failure is None
                and self.thread_state.cell.token is self.current_token):
            result = self.drv_memcpy_dtoh(dst, src, size, queue.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), self.call_names["memcpy_dtoh"])
            return
        super().data_retrieve(dst, src, size, queue)

    # The hooks' own hot path (a queued copy on a healthy current device) is one driver call too;
    # anything else goes through enter() and on_stream().
    def copier(self) -> Callable[[int, int, int, AsyncInfo, bool], bool]:
        """The fast path of a queued copy between host memory and this device (see
        :meth:`GenericDevice.copier`): taken when the queue has not failed, the device is not
        poisoned and is current on this thread; then the same driver call as the checked path."""
        state = self.thread_state
        htod_name = self.call_names["memcpy_htod"]
        dtoh_name = self.call_names["memcpy_dtoh"]

        def copy(dst: int, src: int, size: int, ai: Any, to_device: bool) -> bool:
            if ai.failure is not None or state.cell.token is not self.current_token:
                return False
            if to_device:
                result = self.drv_memcpy_htod(dst, src, size, ai.stream)
                if result[0]:
                    raise self.failure(int(result[0]), htod_name)
            else:
                result = self.drv_memcpy_dtoh(dst, src, size, ai.stream)
                if result[0]:
                    raise self.failure(int(result[0]), dtoh_name)
            return True

        return copy

    def _data_submit_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        if queue is not None and self.thread_state.cell.token is self.current_token:
            result = self.drv_memcpy_htod(dst, src, size, queue.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), self.call_names["memcpy_htod"])
            return
        self.enter()
        self.on_stream(queue, "memcpy_htod", dst, src, size)

    def _data_retrieve_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        if queue is not None and self.thread_state.cell.token is self.current_token:
            result = self.drv_memcpy_dtoh(dst, src, size, queue.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), self.call_names["memcpy_dtoh"])
            return
        self.enter()
        self.on_stream(queue, "memcpy_dtoh", dst, src, size)

    def _data_memcpy_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        if queue is not None and self.thread_state.cell.token is self.current_token:
            result = self.drv_memcpy_dtod(dst, src, size, queue.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), self.call_names["memcpy_dtod"])
            return
        self.enter()
        self.on_stream(queue, "memcpy_dtod", dst, src, size)

    def _enable_peer(self, peer: GpuDeviceCore) -> None:
        """Enable direct access to ``peer`` once; without it the driver copies through the host."""
        with self._peer_lock:
            if peer.device_id in self.peers:
                return
            enabled = False
            if self._can_access_peer(peer):
                status = self._enable_peer_access(peer)
                # Already enabled, or the hardware's peer limit: both leave copies working.
                enabled = status in (SUCCESS, PEER_ALREADY_ENABLED)
                if status not in (SUCCESS, PEER_ALREADY_ENABLED, *self.peer_limit_statuses):
                    raise self.failure(status, self.peer_enable_call)
            self.peers[peer.device_id] = enabled

    peer_limit_statuses: ClassVar[tuple[int, ...]] = ()
    #: the driver call behind _enable_peer_access, for error messages
    peer_enable_call: ClassVar[str] = "enabling peer access"

    @abstractmethod
    def _can_access_peer(self, peer: GpuDeviceCore) -> bool: ...

    @abstractmethod
    def _enable_peer_access(self, peer: GpuDeviceCore) -> int:
        """Ask for direct access to ``peer``; the driver's status."""

    def _data_fill_impl(self, ptr: int, pattern: bytes, size: int, queue: AsyncInfo | None) -> None:
        self.enter()
        width = len(pattern)
        count, tail = divmod(size, width)
        with self.queue_or_temporary(queue) as q:
            stream = q.stream  # type: ignore[attr-defined]
            if count:
                if width in (1, 2, 4) and ptr % width == 0:  # D16/D32 need an aligned start
                    self._memset(width, ptr, int.from_bytes(pattern, "little"), count, stream)
                elif self.strided_memset:
                    try:
                        self._fill_lanes(ptr, pattern, count, stream)
                    except RuntimeError:
                        # The bindings found no 2-D memset in this driver library (HIP before ROCm 7.1);
                        # nothing was enqueued, since the lookup fails before the first call.
                        self.strided_memset = False
                        self._fill_by_doubling(ptr, pattern, count, stream)
                else:
                    self._fill_by_doubling(ptr, pattern, count, stream)
            for index in range(tail):  # only without validation: a last, partial copy
                self._memset(1, ptr + count * width + index, pattern[index], 1, stream)

    def _fill_by_doubling(self, ptr: int, pattern: bytes, count: int, stream: Any) -> None:
        """Any pattern width with 1-byte memsets and device copies: write the pattern once, then copy
        what is written onto the rest, doubling each time (all in stream order, no host buffer)."""
        for index, byte in enumerate(pattern):
            self._memset(1, ptr + index, byte, 1, stream)
        total = len(pattern) * count
        done = len(pattern)
        while done < total:
            size = min(done, total - done)
            self.check(self.drv_memcpy_dtod(ptr + done, ptr, size, stream), self.call_names["memcpy_dtod"])
            done += size

    def _memset(self, width: int, ptr: int, value: int, count: int, stream: Any) -> None:
        op = {1: "memset8", 2: "memset16", 4: "memset32"}[width]
        self.check(getattr(self, f"drv_{op}")(ptr, self._memset_value(width, value), count, stream),
                   self.call_names[op])

    def _memset_value(self, width: int, value: int) -> int:
        """``value`` as the bindings take it for a ``width``-byte memset (unsigned by default)."""
        return value

    def _fill_lanes(self, ptr: int, pattern: bytes, count: int, stream: Any) -> None:
        """Any pattern width: one strided 2-D memset per 4-, 2- or 1-byte lane of the pattern."""
        width = len(pattern)
        lane = next(w for w in (4, 2, 1) if width % w == 0 and ptr % w == 0)
        op = {1: "memset2d8", 2: "memset2d16", 4: "memset2d32"}[lane]
        memset2d = getattr(self, f"drv_{op}")
        for offset in range(0, width, lane):
            value = int.from_bytes(pattern[offset:offset + lane], "little")
            self.check(memset2d(ptr + offset, width, value, 1, count, stream), self.call_names[op])
