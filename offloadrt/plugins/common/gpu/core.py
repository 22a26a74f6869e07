"""The core of a GPU device: its driver calls, the vendor hooks, and fault tracking.

A vendor device names its driver functions in ``DRIVER_CALLS`` (looked up once, when the device is
created, and called with the same arguments on both vendors) and fills in the hooks where the
two APIs differ (making a device current, allocation flags, images, device info, peers).

A kernel fault that leaves a device unusable (a "sticky" error, such as an illegal address) is
remembered: every later call on that device fails at once, saying that only a new process
recovers it. No driver call clears such a fault (an H100 kept it through a release, a reset and
a retain of the primary context), so after ``olShutDown`` and ``olInit`` the device does not start
again, and its platform's reason says why.
"""

from __future__ import annotations

import functools
import operator
import threading
from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ....errors import ErrorCode, OffloadError
from ....types import AllocType
from .. import GenericDevice, GenericPlugin
from ..resources import AsyncInfo, ResourcePool, running_host_function
from .driver import SUCCESS, GpuDriver
from .hostcalls import IN_HOST_FUNCTION, host_calls

if TYPE_CHECKING:
    from .launch import GpuKernel
    from .threads import ThreadState

#: The sticky faults of this process, by (plugin name, device ordinal): what the first one said.
#: They outlive olShutDown, as the drivers keep them: a platform with one does not start again.
STICKY_FAULTS: dict[tuple[str, int], str] = {}


class GpuDeviceCore(GenericDevice):
    """One GPU behind a CUDA-like driver API: the driver calls, the vendor hooks, fault tracking.

    ``DRIVER_CALLS`` maps each shared operation to the vendor's driver function; they are looked
    up once, when the device is created, and called with the same arguments on both vendors.
    """

    DRIVER_CALLS: ClassVar[dict[str, str]] = {}
    #: the ops every vendor must name in DRIVER_CALLS
    REQUIRED_CALLS: ClassVar[tuple[str, ...]] = (
        "alloc_device", "alloc_host", "alloc_managed", "free_device", "free_host",
        "memcpy_htod", "memcpy_dtoh", "memcpy_dtod", "memcpy_peer", "memset8", "memset16", "memset32",
        "memset2d8", "memset2d16", "memset2d32", "module_unload", "module_get_function", "module_get_global",
        "launch", "stream_destroy", "stream_sync", "stream_query", "stream_wait_event", "host_func",
        "event_destroy", "event_record", "event_sync", "event_query", "event_elapsed",
        "host_register", "host_unregister", "host_device_pointer")
    #: the bindings' names of the flags that register host memory portable (pinned for every device)
    #: and mapped (with a device address): OR'ed for the host_register call
    HOST_REGISTER_FLAGS: ClassVar[tuple[str, ...]] = ()
    #: what messages call the device ("CUDA device 0")
    label: ClassVar[str] = "GPU"
    #: dynamic shared memory a kernel may use before it must opt in to more (no limit: never)
    default_shared_limit: ClassVar[int] = 1 << 62
    #: statuses with which the launch call itself refuses a launch: nothing ran, nothing is poisoned
    #: (even where the same status reported by a sync is a sticky fault)
    launch_refusals: ClassVar[frozenset[int]] = frozenset()
    #: how a device recovers from a sticky error, for messages
    sticky_recovery: ClassVar[str] = ("for the rest of this process: the driver cannot clear a sticky error (not "
                                      "even olShutDown and olInit), so the process must be restarted")
    sticky_short: ClassVar[str] = "the device is unusable until the process restarts"
    #: per vendor: the thread's current device token (the driver's current context or device) and
    #: its launch buffers
    thread_state: ClassVar[ThreadState]

    def __init__(self, plugin: GenericPlugin, device_id: int, driver: GpuDriver):
        super().__init__(plugin, device_id)
        self.driver = driver
        self.d = driver.module
        self.sticky: OffloadError | None = None
        self.current_token: object = None  # what thread_state.cell.token is while this device is current
        self.peers: dict[int, bool] = {}  # peer device id -> direct access enabled
        self.strided_memset = True  # the driver has the 2-D memsets (cleared at the first that is missing)
        self._peer_lock = threading.Lock()  # guards peers
        self.call_names: dict[str, str] = {}
        self.host_trampoline: Any = None  # _host_function_argument(), made at the first host function
        # What the launch call is given for "no kernelParams" (NULL), and what makes its argument for
        # the extra array from the array's address (None: the address itself). A vendor whose bindings
        # convert an int on every call, for more than a prepared object costs, sets both.
        self.no_kernel_params: Any = None
        self.extra_wrapper: Callable[[int], Any] | None = None
        for op in self.REQUIRED_CALLS:
            name = self.DRIVER_CALLS[op]
            self.call_names[op] = name
            setattr(self, f"drv_{op}", getattr(self.d, name))
        self.host_register_flags = functools.reduce(
            operator.or_, (int(getattr(self.d, flag)) for flag in self.HOST_REGISTER_FLAGS), 0)
        # Bases of this device's registrations that were page-locked outside offloadrt (never
        # unregistered here); guarded by self.registrations.lock, which the hooks run under (and
        # at de-init, which nothing else races).
        self.foreign_pins: set[int] = set()
        # Events the user never destroyed die with the device's context at de-init: no warning.
        # Plain events take no timestamp (a timed one costs the driver several times more), so the
        # two kinds are pooled apart.
        self.event_pool: ResourcePool[Any] = ResourcePool("event", self._new_driver_event, self._destroy_driver_event,
                                                          warn_missing=False)
        self.timed_event_pool: ResourcePool[Any] = ResourcePool(
            "timed event", self._new_timed_driver_event, self._destroy_driver_event, warn_missing=False)
        self.fast_copy = self.copier()  # olMemcpy's hot path (GpuMemory.copier)

    # drv_* attributes, set from DRIVER_CALLS (declared for type checkers)
    drv_alloc_device: Callable[..., Any]
    drv_alloc_host: Callable[..., Any]
    drv_alloc_managed: Callable[..., Any]
    drv_free_device: Callable[..., Any]
    drv_free_host: Callable[..., Any]
    drv_memcpy_htod: Callable[..., Any]
    drv_memcpy_dtoh: Callable[..., Any]
    drv_memcpy_dtod: Callable[..., Any]
    drv_memcpy_peer: Callable[..., Any]
    drv_memset8: Callable[..., Any]
    drv_memset16: Callable[..., Any]
    drv_memset32: Callable[..., Any]
    drv_memset2d8: Callable[..., Any]
    drv_memset2d16: Callable[..., Any]
    drv_memset2d32: Callable[..., Any]
    drv_module_unload: Callable[..., Any]
    drv_module_get_function: Callable[..., Any]
    drv_module_get_global: Callable[..., Any]
    drv_launch: Callable[..., Any]
    drv_stream_destroy: Callable[..., Any]
    drv_stream_sync: Callable[..., Any]
    drv_stream_query: Callable[..., Any]
    drv_stream_wait_event: Callable[..., Any]
    drv_host_func: Callable[..., Any]
    drv_event_destroy: Callable[..., Any]
    drv_event_record: Callable[..., Any]
    drv_event_sync: Callable[..., Any]
    drv_event_query: Callable[..., Any]
    drv_event_elapsed: Callable[..., Any]
    drv_host_register: Callable[..., Any]
    drv_host_unregister: Callable[..., Any]
    drv_host_device_pointer: Callable[..., Any]

    # ---- vendor hooks ----------------------------------------------------------------------
    @abstractmethod
    def _make_current(self) -> None:
        """Make this device the calling thread's current one (``cuCtxSetCurrent``, ``hipSetDevice``)."""

    @abstractmethod
    def _new_stream(self) -> Any:
        """A new non-blocking stream of this device (the device is current)."""

    @abstractmethod
    def _new_event(self, timed: bool) -> Any:
        """A new driver event of this device (the device is current): with timing only if ``timed``."""

    @abstractmethod
    def _host_function_argument(self) -> Any:
        """The trampoline at :data:`HOST_TRAMPOLINE_ADDRESS` as the bindings' host-function type."""

    @abstractmethod
    def _alloc_flags(self, kind: AllocType) -> tuple[Any, ...]:
        """The arguments after the size that the driver's allocation call of ``kind`` takes."""

    @property
    @abstractmethod
    def peer_handle(self) -> Any:
        """What a peer copy names this device by (CUDA: its context; HIP: its ordinal)."""

    def _raise_shared_limit(self, kernel: GpuKernel, size: int) -> None:
        """Let ``kernel`` use ``size`` bytes of dynamic shared memory (for drivers that need an opt-in)."""
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{size} bytes of dynamic shared memory is more than kernel {kernel.name!r} may use")

    def _release_device(self) -> None:
        """Give up the device at de-init (the primary context, for CUDA)."""

    def init(self) -> None:
        """Start the device; a driver still holding a sticky fault of this process refuses, and the
        error says the process must be restarted (no driver call clears such a fault)."""
        try:
            super().init()
        except OffloadError as exc:
            status = getattr(exc, "driver_status", None)
            if status not in self.driver.sticky:
                raise
            err = OffloadError(ErrorCode.BACKEND_FAILURE,
                               f"{self.label} device {self.device_id} cannot start: its driver still holds a sticky "
                               f"error from earlier in this process ({exc.details}). The {self.driver.vendor} driver "
                               f"cannot clear it; restart the process to use this GPU again")
            err.driver_status = status  # type: ignore[attr-defined]
            raise err from None
    # ---- driver access ---------------------------------------------------------------------
    def call_name(self, op: str) -> str:
        return self.call_names[op]

    def check(self, result: Any, call: str) -> Any:
        """Unpack a driver result; a failure raises, and a sticky one poisons the device."""
        status = int(result[0])
        if status == SUCCESS:
            return result[1] if len(result) == 2 else result[1:]
        raise self.failure(status, call)

    def failure(self, status: int, call: str) -> OffloadError:
        err = self.driver.error(status, call)
        if status in self.driver.sticky:
            if self.sticky is None:
                what = f"{self.driver.name(status)} in {call}"
                self.sticky = OffloadError(
                    ErrorCode.BACKEND_FAILURE,
                    f"{self.label} device {self.device_id} hit a sticky error ({what}); "
                    f"it is unusable {self.sticky_recovery}")
                STICKY_FAULTS.setdefault((self.plugin.name, self.device_id), what)
                # A token no thread holds: every hot path's "current on this thread" test now fails,
                # so each call takes its checked path, where enter() raises the sticky error (the hot
                # paths need no test of their own for a poisoned device).
                self.current_token = object()
            err.details += f" (sticky: {self.sticky_short})"
        return err

    def enter(self, select: bool = False) -> Any:
        """Fail fast on a poisoned device, make it current on this thread; return the driver module.

        The current device is cached per thread; ``select`` makes it current regardless, for calls
        that place something on the current device (allocations, modules, streams, events), so
        that other code switching devices on this thread cannot misplace them.
        """
        if self.sticky is not None:
            raise self.sticky
        cell = self.thread_state.cell
        # By identity, as the hot paths check it: a token equal to this device's but left by an
        # earlier start of the driver (the same primary context) is made current once more.
        if select or cell.token is not self.current_token:
            if cell.token is IN_HOST_FUNCTION:
                raise self._refused_in_host_function()
            self._make_current()
            cell.token = self.current_token
            if self.sticky is not None:  # poisoned meanwhile, maybe after this thread took the new token
                cell.token = None
                raise self.sticky
        return self.d

    def _refused_in_host_function(self) -> OffloadError:
        queue = running_host_function()
        owner = getattr(queue, "owner", None) or "a queue"
        return OffloadError(ErrorCode.INVALID_ARGUMENT,
                            f"this call reaches the {self.driver.vendor} driver, which cannot be called from a host "
                            f"function: the driver runs host functions (this one of {owner}) on its own thread and "
                            f"forbids calls into it from there. Enqueue {self.driver.vendor} work after "
                            f"olSyncQueue in the caller instead")

    def on_stream(self, queue: AsyncInfo | None, op: str, *args: Any) -> None:
        """Driver op ``op`` with ``(*args, stream)`` on ``queue``'s stream, or on a temporary one that is synced."""
        fn = getattr(self, f"drv_{op}")
        if queue is not None:
            result = fn(*args, queue.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), self.call_names[op])
            return
        with self.queue_or_temporary(None) as temporary:
            result = fn(*args, temporary.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), self.call_names[op])

    # ---- lifecycle -------------------------------------------------------------------------
    def _deinit_impl(self) -> None:
        errors = self.event_pool.deinit() + self.timed_event_pool.deinit()
        # Host functions the driver will never run (behind a fault) must not keep their data alive.
        for key, entry in list(host_calls.items()):
            if entry[2].device is self:
                host_calls.pop(key, None)
        if self.thread_state.cell.token == self.current_token:
            self.thread_state.cell.token = None
        try:
            self._release_device()
        except OffloadError as exc:
            errors.append(exc)
        if errors:
            raise OffloadError.join(errors, f"releasing {self.label} device {self.device_id}")


    # implemented by GpuQueues: the event pool's hooks
    @abstractmethod
    def _new_driver_event(self) -> Any: ...

    @abstractmethod
    def _new_timed_driver_event(self) -> Any: ...

    @abstractmethod
    def _destroy_driver_event(self, event: Any) -> None: ...
