"""What the GPU plugins (CUDA, AMDGPU) share: driver status handling, streams, events, launches.

The CUDA driver API and HIP's driver-style API are close cousins: both return ``(status,
*outputs)`` tuples from their Python bindings, report pending work with status 600
(``NOT_READY``), order work on streams, pass a packed argument blob through the ``extra``
launch parameter and run host callbacks in stream order. :class:`GpuDevice` holds that logic
once; a vendor device names its driver functions in ``DRIVER_CALLS`` and fills in the few hooks
where the two APIs differ (making a device current, allocation, images, device info, peers).

A kernel fault that leaves a device unusable (a "sticky" error, such as an illegal address) is
remembered: every later call on that device fails at once, saying the device must be
re-initialised (``olShutDown`` then ``olInit``).

Host memory registered with ``olMemRegister`` is page-locked once for every device of the plugin
(portable and mapped), because both drivers pin a host range once per process: the plugin counts
its devices' registrations of a range (:attr:`GpuPlugin.host_pins`) and unpins it with the last.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import operator
import re
import threading
from abc import abstractmethod
from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar

from ..errors import ErrorCode, OffloadError
from ..types import AllocType, DeviceInfo, DeviceType, Dimensions, FpCapabilityFlag
from .image import DeviceImage, GenericKernel, GlobalVariable
from .interface import Dim3, GenericDevice, GenericPlugin, PluginUnavailable
from .registrations import RegistrationMap
from .resources import (
    AsyncInfo,
    GenericEvent,
    QueueFailure,
    ResourcePool,
    report_failure,
    running_host_function,
    set_host_function_queue,
)

SUCCESS = 0
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE and hipErrorNoDevice
NOT_READY = 600  # CUDA_ERROR_NOT_READY and hipErrorNotReady share the number
PEER_ALREADY_ENABLED = 704  # CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, hipErrorPeerAccessAlreadyEnabled
ALREADY_REGISTERED = 712  # CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, hipErrorHostMemoryAlreadyRegistered
NOT_REGISTERED = 713  # CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, hipErrorHostMemoryNotRegistered


class GpuDriver:
    """A loaded driver module, and the naming and mapping of its statuses to errors.

    A vendor subclass names its status enum and the two functions that describe a status, and
    says which statuses mean what.
    """

    #: label used in messages ("CUDA", "HIP")
    vendor: ClassVar[str] = "GPU"
    #: the bindings' status enum and the functions giving a status's name and explanation
    status_enum: ClassVar[str]
    name_function: ClassVar[str]
    explain_function: ClassVar[str]
    #: statuses by what they mean for offloadrt
    out_of_memory: ClassVar[frozenset[int]] = frozenset()
    bad_image: ClassVar[frozenset[int]] = frozenset()
    not_supported: ClassVar[frozenset[int]] = frozenset()
    not_found: ClassVar[frozenset[int]] = frozenset()
    invalid_value: ClassVar[frozenset[int]] = frozenset()
    invalid_size: ClassVar[frozenset[int]] = frozenset()
    #: faults that leave the device unusable until it is re-initialised
    sticky: ClassVar[frozenset[int]] = frozenset()
    unknown_status: ClassVar[int] = 999

    def __init__(self, module: ModuleType):
        self.module = module
        self.names: dict[int, str] = {}  # status -> "NAME (explanation)"; a benign race fills it twice

    @classmethod
    def error_code(cls, status: int) -> ErrorCode:
        for statuses, code in ((cls.out_of_memory, ErrorCode.OUT_OF_RESOURCES),
                               (cls.bad_image, ErrorCode.INVALID_BINARY),
                               (cls.not_supported, ErrorCode.UNSUPPORTED),
                               (cls.not_found, ErrorCode.NOT_FOUND),
                               (cls.invalid_value, ErrorCode.INVALID_ARGUMENT),
                               (cls.invalid_size, ErrorCode.INVALID_SIZE)):
            if status in statuses:
                return code
        if status == cls.unknown_status:
            return ErrorCode.UNKNOWN
        return ErrorCode.BACKEND_FAILURE

    def _lookup_name(self, status: int) -> str:
        """The driver's own name and explanation of ``status``."""
        mod = self.module
        try:
            enum = getattr(mod, self.status_enum)(status)
        except ValueError:
            return f"{self.status_enum} {status}"
        label = getattr(enum, "name", str(status))
        res, name = getattr(mod, self.name_function)(enum)
        if int(res) == SUCCESS and name:
            label = _text(name)
        res, text = getattr(mod, self.explain_function)(enum)
        if int(res) == SUCCESS and text:
            label = f"{label} ({_text(text)})"
        return label

    def name(self, status: int) -> str:
        """The driver's name for a status and its explanation, e.g. ``hipErrorOutOfMemory (out of memory)``."""
        known = self.names.get(status)
        if known is None:
            try:
                known = self._lookup_name(status)
            except Exception:  # noqa: BLE001  # naming an error must never hide it
                known = f"{self.vendor} status {status}"
            self.names[status] = known
        return known

    def error(self, status: int, call: str, extra: str = "") -> OffloadError:
        details = f"{call}: {self.name(status)}"
        if extra:
            details = f"{details}: {extra}"
        err = OffloadError(self.error_code(status), details)
        err.driver_status = status  # type: ignore[attr-defined]
        return err

    def check(self, result: Any, call: str) -> Any:
        """The outputs of a driver call (one value unpacked, several as a tuple); raise on failure."""
        status = int(result[0])
        if status != SUCCESS:
            raise self.error(status, call)
        if len(result) == 2:
            return result[1]
        return result[1:]


def _text(value: object) -> str:
    """A C string from the bindings (``bytes``, or hip-python's ``CStr``) as text."""
    decode = getattr(value, "decode", None)
    return decode(errors="replace") if callable(decode) else str(value)


class _RegisteredElsewhere(Exception):  # noqa: N818  # a finding, not an error
    """Host memory being registered turned out to be page-locked outside offloadrt already (at ``address``)."""

    def __init__(self, address: int) -> None:
        super().__init__(address)
        self.address = address


class GpuStream(AsyncInfo):
    """A stream, and where in its order it failed.

    The driver cannot skip a stream's work, so the failures offloadrt sees on the host side (a
    host function that raised, a wait on an event of a failed queue) are placed in the stream's
    order: host functions and waits are numbered as they are submitted (``submitted``), an event
    remembers how many came before it (:attr:`GpuEvent.position`) and the failure where it
    happened (``failed_at``). An event at or behind ``failed_at`` fails with the queue. ``waits``
    are the (position, event) waits whose outcome is not settled yet.
    """

    __slots__ = ("stream", "waits", "submitted", "failed_at", "lock")

    def __init__(self, device: GpuDevice, stream: Any):
        super().__init__(device)
        self.stream = stream
        self.waits: list[tuple[int, GpuEvent]] = []
        self.submitted = 0
        self.failed_at = 0
        # Guards waits, submitted and failed_at (set together with failure); never held over a
        # driver call, so a host function running on the driver's thread can always take it.
        self.lock = threading.Lock()

    def native_handle(self) -> int:
        return int(self.stream)

    def next_position(self) -> int:
        """The position of a host function or wait being submitted now."""
        with self.lock:
            self.submitted += 1
            return self.submitted

    def fail(self, error: OffloadError, at: int | None = None) -> QueueFailure:
        """Fail at position ``at`` (None: now, behind everything submitted so far), unless failed already."""
        with self.lock:
            if self.failure is None:
                self.failed_at = self._place(at)
                failure = QueueFailure(error, self.owner)
                report_failure(self.owner, failure)  # before it is published, as AsyncInfo does
                self.failure = failure
            return self.failure

    def adopt(self, failure: QueueFailure, at: int | None = None) -> None:
        with self.lock:
            if self.failure is None:
                self.failed_at = self._place(at)
                report_failure(self.owner, failure)
                self.failure = failure

    def _place(self, at: int | None) -> int:
        if at is None:
            self.submitted += 1
            return self.submitted
        return at

    def move_failure_to(self, position: int) -> None:
        """The failure happened at ``position`` at the latest (a host function adopted it)."""
        with self.lock:
            self.failed_at = min(self.failed_at, position)

    def failed_before(self, position: int) -> QueueFailure | None:
        """The failure, if it happened at or before ``position``."""
        failure = self.failure  # set after failed_at: a failure read here has its place
        return failure if failure is not None and self.failed_at <= position else None


class GpuEvent(GenericEvent):
    """A driver event, the queue it was recorded on and its position there (see :class:`GpuStream`)."""

    __slots__ = ("event", "queue", "position")

    def __init__(self, device: GpuDevice, event: Any):
        super().__init__(device)
        self.event = event
        self.queue: GpuStream | None = None
        self.position = 0


class GpuImage(DeviceImage):
    """A program loaded as a driver module."""

    def __init__(self, device: GpuDevice, image: bytes, module: Any):
        super().__init__(device, image)
        self.module = module


class GpuKernel(GenericKernel):
    __slots__ = ("function", "shared_limit", "lock")

    def __init__(self, image: GpuImage, name: str, function: Any, shared_limit: int):
        super().__init__(image, name)
        self.function = function
        self.shared_limit = shared_limit  # the dynamic shared memory the driver allows now
        self.lock = threading.Lock()  # guards shared_limit and the attribute it mirrors: it only rises


# ---- host functions ---------------------------------------------------------------------------
# The driver calls one C trampoline with an integer key; the key finds the Python callback. The
# trampoline holds the GIL only while the callback runs, and the bindings release the GIL in
# their calls, so a thread waiting in a stream synchronise never blocks a host function.

_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
host_calls: dict[int, tuple[Callable[[Any], object], Any, GpuStream, int]] = {}
_host_keys = itertools.count(1)


def _run_host_call(key: int | None) -> None:
    entry = host_calls.pop(key or 0, None)
    if entry is None:
        return
    callback, user_data, queue, position = entry
    device = queue.device
    assert isinstance(device, GpuDevice)
    device._settle_waits(queue, upto=position, query=False)  # no driver call may be made from here
    if queue.failure is not None:
        return  # the queue failed before this point: later host work does not run
    # The driver forbids calls into itself from its callback thread: GpuDevice.enter refuses them
    # while the vendor's token says a host function runs here (the fast path sees a mismatch).
    state = type(device).thread_state
    token = getattr(state, "token", None)
    state.token = _IN_HOST_FUNCTION
    set_host_function_queue(queue)
    try:
        callback(user_data)
    except BaseException as exc:  # noqa: BLE001  # the queue fails; the driver thread goes on
        err = OffloadError(ErrorCode.UNKNOWN, f"host function raised {type(exc).__name__}: {exc}")
        if isinstance(exc, OffloadError):
            err = exc
        else:
            err.__cause__ = exc
        queue.fail(err, at=position)
    else:
        if queue.failure is not None:  # adopted by the callback (a wait on another backend's event)
            queue.move_failure_to(position)
    finally:
        set_host_function_queue(None)
        state.token = token


_IN_HOST_FUNCTION = object()  # a vendor's thread token while a host function of its runs on the thread


_HOST_TRAMPOLINE = _HOST_FN_TYPE(_run_host_call)
HOST_TRAMPOLINE_ADDRESS: int = ctypes.cast(_HOST_TRAMPOLINE, ctypes.c_void_p).value or 0


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


class GpuDevice(GenericDevice):
    """One GPU behind a CUDA-like driver API; the vendor fills in the hooks marked abstract.

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
    #: the thread's current device token, per vendor (the driver's current context or device)
    thread_state: ClassVar[threading.local]
    launch_buffers: ClassVar[LaunchBuffers]

    def __init__(self, plugin: GenericPlugin, device_id: int, driver: GpuDriver):
        super().__init__(plugin, device_id)
        self.driver = driver
        self.d = driver.module
        self.sticky: OffloadError | None = None
        self.current_token: object = None  # what thread_state.token is while this device is current
        self.peers: dict[int, bool] = {}  # peer device id -> direct access enabled
        self.strided_memset = True  # the driver has the 2-D memsets (cleared at the first that is missing)
        self._peer_lock = threading.Lock()  # guards peers
        self.call_names: dict[str, str] = {}
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
        self.event_pool: ResourcePool[Any] = ResourcePool("event", self._new_driver_event, self._destroy_driver_event,
                                                          warn_missing=False)

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
    def _new_event(self) -> Any:
        """A new timed event of this device (the device is current)."""

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
                self.sticky = OffloadError(
                    ErrorCode.BACKEND_FAILURE,
                    f"{self.label} device {self.device_id} hit a sticky error ({self.driver.name(status)} in {call}); "
                    f"it is unusable {self.sticky_recovery}")
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
        if select or getattr(self.thread_state, "token", None) != self.current_token:
            if getattr(self.thread_state, "token", None) is _IN_HOST_FUNCTION:
                raise self._refused_in_host_function()
            self._make_current()
            self.thread_state.token = self.current_token
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
        errors = self.event_pool.deinit()
        # Host functions the driver will never run (behind a fault) must not keep their data alive.
        for key, entry in list(host_calls.items()):
            if entry[2].device is self:
                host_calls.pop(key, None)
        if getattr(self.thread_state, "token", None) == self.current_token:
            self.thread_state.token = None
        try:
            self._release_device()
        except OffloadError as exc:
            errors.append(exc)
        if errors:
            raise OffloadError.join(errors, f"releasing {self.label} device {self.device_id}")

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
        assert isinstance(self.plugin, GpuPlugin)
        return self.plugin

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
    def _data_exchange_impl(self, src: int, dst_device: GenericDevice, dst: int, size: int,
                            queue: AsyncInfo | None) -> None:
        assert isinstance(dst_device, type(self))
        self.enter(select=True)  # peer access is enabled for the current device
        self._enable_peer(dst_device)
        # The driver copies directly when access is enabled, through the host otherwise.
        self.on_stream(queue, "memcpy_peer", dst, dst_device.peer_handle, src, self.peer_handle, size)

    def _data_submit_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        self.enter()
        self.on_stream(queue, "memcpy_htod", dst, src, size)

    def _data_retrieve_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        self.enter()
        self.on_stream(queue, "memcpy_dtoh", dst, src, size)

    def _data_memcpy_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        self.enter()
        self.on_stream(queue, "memcpy_dtod", dst, src, size)

    def _enable_peer(self, peer: GpuDevice) -> None:
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
    #: how a device recovers from a sticky error, for messages
    sticky_recovery: ClassVar[str] = "until the device is re-initialised (olShutDown, then olInit)"
    sticky_short: ClassVar[str] = "the device must be re-initialised"
    #: the driver call behind _enable_peer_access, for error messages
    peer_enable_call: ClassVar[str] = "enabling peer access"

    @abstractmethod
    def _can_access_peer(self, peer: GpuDevice) -> bool: ...

    @abstractmethod
    def _enable_peer_access(self, peer: GpuDevice) -> int:
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

    # ---- queues ----------------------------------------------------------------------------
    def init_async_info(self) -> AsyncInfo:
        if self.sticky is not None:  # even a pooled stream belongs to the poisoned device
            raise self.sticky
        return super().init_async_info()

    def _create_queue_impl(self) -> AsyncInfo:
        self.enter(select=True)
        return GpuStream(self, self._new_stream())

    def _destroy_queue_impl(self, queue: AsyncInfo) -> None:
        assert isinstance(queue, GpuStream)
        if self.sticky is not None:
            return  # the device is dead; its streams go with it at re-initialisation
        self.enter()
        self.check(self.drv_stream_destroy(queue.stream), self.call_names["stream_destroy"])

    def _synchronize_impl(self, queue: AsyncInfo) -> None:
        assert isinstance(queue, GpuStream)
        self.enter()
        self.check(self.drv_stream_sync(queue.stream), self.call_names["stream_sync"])
        self._settle_waits(queue)

    def _query_impl(self, queue: AsyncInfo) -> bool:
        assert isinstance(queue, GpuStream)
        self.enter()
        status = int(self.drv_stream_query(queue.stream)[0])
        if status == NOT_READY:
            return False
        if status != SUCCESS:
            raise self.failure(status, self.call_names["stream_query"])
        self._settle_waits(queue)
        return True

    def _settle_waits(self, queue: GpuStream, upto: int | None = None, query: bool = True) -> None:
        """Fail ``queue`` at the first of its waits (up to position ``upto``; None: all, once it
        drained) whose event's queue had failed before reaching the event.

        The driver ends a wait when the event completes, failed queue or not, so the failure
        spreads here: when a host function behind the wait runs, and when the waiting queue is
        next synced or queried. ``query``: ask the event's device about faults there (not
        from a host function, which must not call the driver).
        """
        with queue.lock:
            if upto is None:
                due, queue.waits = queue.waits, []
            else:
                due = [wait for wait in queue.waits if wait[0] <= upto]
                if due:
                    queue.waits = [wait for wait in queue.waits if wait[0] > upto]
        for position, event in sorted(due, key=lambda wait: wait[0]):
            source_device = event.device
            assert isinstance(source_device, GpuDevice)
            failure = source_device._failure_before(event, query)
            if failure is not None:
                queue.adopt(failure, at=position)
                return

    def _failure_before(self, event: GpuEvent, query: bool) -> QueueFailure | None:
        """The failure of the (completed) event's queue at or before the event, if any; sets ``event.failure``."""
        if event.failure is None:
            if query:
                self._is_event_complete_impl(event)  # a fault on the device shows up as an error of the event
            else:
                self._fail_if_behind_failure(event, query=False)
        return event.failure

    def _fail_if_behind_failure(self, event: GpuEvent, query: bool) -> None:
        """A completed event fails if its queue failed at or before it (waits before it included)."""
        source = event.queue
        if source is None:
            return
        self._settle_waits(source, upto=event.position, query=query)
        if event.failure is None:
            event.failure = source.failed_before(event.position)

    def _has_pending_work_impl(self, queue: AsyncInfo) -> bool:
        return not self._query_impl(queue)

    def _enqueue_host_call_impl(self, callback: Callable[[Any], object], user_data: Any,
                                queue: AsyncInfo) -> None:
        assert isinstance(queue, GpuStream)
        self.enter()
        key = next(_host_keys)
        host_calls[key] = (callback, user_data, queue, queue.next_position())
        result = self.drv_host_func(queue.stream, self._host_function_argument(), key)
        if int(result[0]) != SUCCESS:
            host_calls.pop(key, None)
            self.check(result, self.call_names["host_func"])

    # ---- events ----------------------------------------------------------------------------
    def _new_driver_event(self) -> Any:
        self.enter(select=True)
        return self._new_event()

    def _destroy_driver_event(self, event: Any) -> None:
        if self.sticky is None:
            self.enter()
            self.check(self.drv_event_destroy(event), self.call_names["event_destroy"])

    def _create_event_impl(self) -> GenericEvent:
        return GpuEvent(self, self.event_pool.acquire())

    def _record_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        assert isinstance(event, GpuEvent) and isinstance(queue, GpuStream)
        self.enter()
        event.position = queue.submitted
        self.check(self.drv_event_record(event.event, queue.stream), self.call_names["event_record"])
        event.queue = queue

    def _wait_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        assert isinstance(event, GpuEvent) and isinstance(queue, GpuStream)
        source = event.queue
        source_device = event.device
        assert isinstance(source_device, GpuDevice)
        if source is not None and event.failure is None:
            if source_device.sticky is not None:  # a poisoned device fails every queue, and so every event
                event.failure = source.fail(source_device.sticky)
            else:
                event.failure = source.failed_before(event.position)
        if event.failure is not None:
            queue.adopt(event.failure)
            return
        self.enter()
        position = queue.next_position()
        self.check(self.drv_stream_wait_event(queue.stream, event.event, 0), self.call_names["stream_wait_event"])
        with queue.lock:
            queue.waits.append((position, event))

    def _sync_event_impl(self, event: GenericEvent) -> None:
        assert isinstance(event, GpuEvent)
        if self.sticky is not None:  # a poisoned device fails every queue, and so every event
            self._event_failed(event, self.sticky)
            return
        self.enter()
        status = int(self.drv_event_sync(event.event)[0])
        if status != SUCCESS:
            self._event_failed(event, self.failure(status, self.call_names["event_sync"]))
        else:
            self._fail_if_behind_failure(event, query=True)

    def _event_failed(self, event: GpuEvent, error: OffloadError) -> None:
        """The event's queue failed before reaching it: both carry that failure."""
        source = event.queue
        event.failure = source.fail(error) if source is not None else None
        if event.failure is None:
            raise error

    def _is_event_complete_impl(self, event: GenericEvent) -> bool:
        assert isinstance(event, GpuEvent)
        if self.sticky is not None:
            self._event_failed(event, self.sticky)
            return True
        self.enter()
        status = int(self.drv_event_query(event.event)[0])
        if status == NOT_READY:
            return False
        if status != SUCCESS:
            self._event_failed(event, self.failure(status, self.call_names["event_query"]))
        else:
            self._fail_if_behind_failure(event, query=True)
        return True

    def _destroy_event_impl(self, event: GenericEvent) -> None:
        assert isinstance(event, GpuEvent)
        self.event_pool.release(event.event)

    def _event_elapsed_time_impl(self, start: GenericEvent, end: GenericEvent) -> float:
        assert isinstance(start, GpuEvent) and isinstance(end, GpuEvent)
        self.enter()
        return float(self.check(self.drv_event_elapsed(start.event, end.event), self.call_names["event_elapsed"]))


_UINT32_MAX = 0xFFFFFFFF
_FULL_FP = FpCapabilityFlag(0x7F)  # IEEE 754 with FMA: everything but SOFT_FLOAT
_HALF_FP = FpCapabilityFlag(0x5E)


def gpu_info(*, name: str, product_name: str, uid: str, vendor: str, vendor_id: int, driver_version: str,
             max_threads: int, block: Dimensions, grid: Dimensions, compute_units: int, clock_khz: int,
             memory_clock_khz: int, memory: int, local_memory: int, half: bool) -> dict[DeviceInfo, Any]:
    """The device-info table of a GPU, from what its driver reports (clocks in kHz, as both drivers give them)."""

    def work(groups: int, size: int) -> int:
        return min(_UINT32_MAX, groups * size)

    return {
        DeviceInfo.TYPE: DeviceType.GPU,
        DeviceInfo.NAME: name,
        DeviceInfo.PRODUCT_NAME: product_name,
        DeviceInfo.UID: uid,
        DeviceInfo.VENDOR: vendor,
        DeviceInfo.DRIVER_VERSION: driver_version,
        DeviceInfo.MAX_WORK_GROUP_SIZE: max_threads,
        DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: block,
        DeviceInfo.MAX_WORK_SIZE: work(grid.x, max_threads),
        DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(work(grid.x, block.x), work(grid.y, block.y),
                                                           work(grid.z, block.z)),
        DeviceInfo.VENDOR_ID: vendor_id,
        DeviceInfo.NUM_COMPUTE_UNITS: compute_units,
        DeviceInfo.MAX_CLOCK_FREQUENCY: clock_khz // 1000,
        DeviceInfo.MEMORY_CLOCK_RATE: memory_clock_khz // 1000,
        DeviceInfo.ADDRESS_BITS: 64,
        DeviceInfo.MAX_MEM_ALLOC_SIZE: memory,
        DeviceInfo.GLOBAL_MEM_SIZE: memory,
        DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: local_memory,
        DeviceInfo.SINGLE_FP_CONFIG: _FULL_FP,
        DeviceInfo.DOUBLE_FP_CONFIG: _FULL_FP,
        DeviceInfo.HALF_FP_CONFIG: _HALF_FP if half else FpCapabilityFlag(0),
        DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_INT: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_LONG: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE: 1,
        DeviceInfo.NATIVE_VECTOR_WIDTH_HALF: 1 if half else 0,
    }


def _plain(exc: BaseException) -> str:
    """An exception's text without Python's bytes reprs (``b'libamdhip64.so'`` → ``libamdhip64.so``)."""
    text = str(exc)
    text = re.sub(r"""'?b(['"])(.*?)\1'?""", r"\2", text)
    return text.strip().rstrip(".")


class GpuPlugin(GenericPlugin):
    """A GPU backend: starts its driver, and lets its own devices exchange data directly."""

    device_class: ClassVar[type[GpuDevice]]
    no_device_message: ClassVar[str] = "no device is present"
    #: what to do when the driver library is missing, for the unavailable reason
    install_hint: ClassVar[str] = "install the vendor's driver"

    def __init__(self) -> None:
        super().__init__()
        self.driver: GpuDriver
        self._version = "unknown"
        # Host ranges page-locked for olMemRegister, across the devices: a device's registration
        # of a range is one user here (its lock is held over the driver calls that pin and unpin).
        self.host_pins = RegistrationMap()
        self.pin_owners: dict[int, GpuDevice] = {}  # base -> the device that registered it (guarded by host_pins.lock)

    def start_driver(self, driver: GpuDriver, init: Callable[[], Any], init_call: str, library: str) -> None:
        """Call the driver's init; a missing library, no device or a failure make the plugin unavailable."""
        self.driver = driver
        try:
            result = init()
        except (RuntimeError, OSError) as exc:  # the bindings load the driver library on the first call
            raise PluginUnavailable(f"{library} was not found or could not be loaded ({_plain(exc)}); "
                                    f"{self.install_hint}") from None
        status = int(result[0])
        if status == NO_DEVICE:
            raise PluginUnavailable(f"{init_call}: {self.no_device_message}")
        if status != SUCCESS:
            raise PluginUnavailable(f"{init_call} failed: {driver.name(status)}")

    def is_data_exchangeable(self, src: GenericDevice, dst: GenericDevice) -> bool:
        return isinstance(src, self.device_class) and isinstance(dst, self.device_class)

    def version(self) -> str:
        return self._version
