"""The handle types of the ``ol*`` API and the checks every entry point makes on its arguments."""

from __future__ import annotations

import itertools
import operator
import threading
import weakref
from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING, TypeVar

from ..errors import ErrorCode, OffloadError
from ..plugins.common.resources import running_host_function
from ..types import KernelLaunchSizeArgs, PlatformBackend, SymbolKind

if TYPE_CHECKING:
    from ..plugins.common import GenericDevice, GenericPlugin
    from ..plugins.common.image import DeviceImage, GenericKernel, GlobalVariable
    from ..plugins.common.resources import AsyncInfo, GenericEvent


# Handles are numbered per kind for the life of the process: ``Queue#12`` names the same queue in
# reprs, error messages and OFFLOAD_TRACE lines.
_queue_numbers = itertools.count(1)
_event_numbers = itertools.count(1)
_program_numbers = itertools.count(1)


class Platform:
    """A platform (one backend, such as ``host`` or ``cuda``) and its devices.

    Reach it with ``olGetDeviceInfo(device, DeviceInfo.PLATFORM)``; ask about it with
    ``olGetPlatformInfo``.
    """

    __slots__ = ("_plugin", "devices", "__weakref__")

    def __init__(self, plugin: GenericPlugin):
        self._plugin = plugin
        self.devices: list[Device] = []

    @property
    def backend(self) -> PlatformBackend:
        return self._plugin.backend

    def __repr__(self) -> str:
        return f"<Platform {self._plugin.name}>"

    @property
    def name(self) -> str:
        return self._plugin.name


class Device:
    """A device: the host CPU or a GPU, found with ``olIterateDevices``.

    Pass it to the calls that work on a device (``olCreateQueue``, ``olMemAlloc``,
    ``olCreateProgram``, ``olMemcpy``, ...). Its label (``host:0``, ``cuda:1``) names it in
    messages. A device belongs to one ``olInit``..``olShutDown`` cycle; afterwards calls with it
    fail with ``INVALID_DEVICE``.
    """

    # Besides the generic device it keeps what liboffload keeps per device: the parked (destroyed
    # but still busy) backend queues, and the live queues and programs the last olShutDown drains.
    __slots__ = ("platform", "_gdev", "label", "is_host", "parked", "live_queues", "programs", "lock", "closed",
                 "__weakref__")

    def __init__(self, platform: Platform, gdev: GenericDevice):
        self.platform = platform
        self._gdev: GenericDevice | None = gdev
        self.label = f"{platform._plugin.name}:{gdev.device_id}"
        self.is_host = platform.backend == PlatformBackend.HOST
        self.parked: list[AsyncInfo] = []
        self.live_queues: set[Queue] = set()
        self.programs: set[Program] = set()
        self.lock = threading.Lock()  # guards parked, live_queues, programs and closed
        self.closed = False  # the last olShutDown drained it: queues and programs made later are undone

    def __repr__(self) -> str:
        state = "" if self._gdev is not None else " (shut down)"
        return f"<Device {self.label}{state}>"

    def __str__(self) -> str:
        return self.label


class Queue:
    """An in-order queue of work on one device, made by ``olCreateQueue``.

    Work submitted to it (copies, fills, launches, host functions, event records) runs in
    submission order and asynchronously; ``olSyncQueue`` waits for it. Destroy it with
    ``olDestroyQueue`` (which never waits). It is ``Queue#<n>`` in messages.
    """

    # _ai is the backend queue, None once the queue is destroyed
    __slots__ = ("device", "_ai", "number", "__weakref__")

    def __init__(self, device: Device, ai: AsyncInfo):
        self.device = device
        self._ai: AsyncInfo | None = ai
        self.number = next(_queue_numbers)

    def __repr__(self) -> str:
        state = "" if self._ai is not None else " (destroyed)"
        return f"<Queue#{self.number} on {self.device.label}{state}>"

    def __str__(self) -> str:
        return f"Queue#{self.number} on {self.device.label}"

    @property
    def native_handle(self) -> int:
        """The driver's handle of the queue as an integer: the ``CUstream`` or ``hipStream_t`` of a
        GPU queue (for ``__cuda_stream__`` and array interfaces), 0 on the host device.

        An offloadrt addition (liboffload has no such query). ``INVALID_QUEUE`` once destroyed.
        """
        ai = self._ai
        if ai is None:
            raise OffloadError(ErrorCode.INVALID_QUEUE, f"queue {self!r} has been destroyed")
        return ai.native_handle()


class Event:
    """A point in a queue's work, made by ``olCreateEvent``: complete once the work submitted to
    the queue before it is done.

    Wait for it with ``olSyncEvent``, make another queue wait with ``olWaitEvents``, time
    between two with ``olGetEventElapsedTime``. It is ``Event#<n>`` in messages.
    """

    # _ev is the backend event, None once the event is destroyed
    __slots__ = ("queue", "device", "_ev", "number", "__weakref__")

    def __init__(self, queue: Queue, ev: GenericEvent):
        self.queue = queue
        self.device = queue.device
        self._ev: GenericEvent | None = ev
        self.number = next(_event_numbers)

    def __repr__(self) -> str:
        state = "" if self._ev is not None else " (destroyed)"
        return f"<Event#{self.number} of Queue#{self.queue.number}{state}>"

    def __str__(self) -> str:
        return f"Event#{self.number} of Queue#{self.queue.number}"


class Program:
    """Device code loaded on one device by ``olCreateProgram``; find its kernels and global
    variables with ``olGetSymbol``. ``olDestroyProgram`` unloads it. It is ``Program#<n>`` in messages.
    """

    # _image is the loaded image, None once the program is destroyed
    __slots__ = ("device", "_image", "symbols", "lock", "number", "__weakref__")

    def __init__(self, device: Device, image: DeviceImage):
        self.device = device
        self._image: DeviceImage | None = image
        self.symbols: dict[tuple[str, SymbolKind], Symbol] = {}
        self.lock = threading.Lock()  # guards symbols
        self.number = next(_program_numbers)

    def __repr__(self) -> str:
        state = "" if self._image is not None else " (destroyed)"
        return f"<Program#{self.number} on {self.device.label}{state}>"

    def __str__(self) -> str:
        return f"Program#{self.number} on {self.device.label}"


class Symbol:
    """A kernel or a global variable of a program (``olGetSymbol``): launch a kernel with
    ``olLaunchKernel``, ask a global variable its address and size with ``olGetSymbolInfo``.
    The program owns it; it is valid while the program lives."""

    # _launch is the device's fast path for queued launches of a kernel (GenericDevice.launcher), or None
    __slots__ = ("program", "device", "kind", "name", "_target", "_launch", "__weakref__")

    def __init__(self, program: Program, kind: SymbolKind, name: str, target: GenericKernel | GlobalVariable,
                 launch: Callable[[AsyncInfo, bytes | None, KernelLaunchSizeArgs], bool] | None = None):
        self.program = program
        self.device = program.device
        self.kind = kind
        self.name = name
        self._target = target
        self._launch = launch

    def __repr__(self) -> str:
        return f"<Symbol {self.kind.name.lower()} {self.name!r} of Program#{self.program.number}>"


# ---- argument checks ---------------------------------------------------------------------------

def refuse_in_host_function(call: str) -> None:
    """``INVALID_ARGUMENT`` if a host function is running on this thread: ``call`` waits for queued
    work, and a host function holds up its own queue (and, on a GPU, the driver's callback thread)."""
    queue = running_host_function()
    if queue is not None:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{call} cannot be called from a host function (this one runs in the order of "
                           f"{queue.owner or 'a queue'}): it waits for queued work, which may be behind the "
                           f"host function itself, so it could never return. A host function may enqueue work, "
                           f"allocate, free and query, but not wait; wait after olSyncQueue in the caller instead")


def bad_handle(value: object, cls: type, what: str) -> OffloadError:
    """The error for a handle argument that is ``None`` or of the wrong type."""
    if value is None:
        return OffloadError(ErrorCode.INVALID_NULL_HANDLE, f"{what} is None")
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"{what} must be a {cls.__name__} handle, got {type(value).__name__}")


FORK_ADVICE = ("this process was forked from one whose offloadrt runtime was running, and a forked child cannot "
               "use that runtime or anything made with it (its worker threads and driver state do not carry "
               "over): call olInit in the child to start one of its own, or start child processes with "
               "multiprocessing's 'spawn' or 'forkserver' method")
forked_away: weakref.WeakSet[Device] = weakref.WeakSet()  # the parent's devices, in a forked child


def _gone(device: Device, otherwise: str) -> str:
    """Why an object of ``device`` is unusable: ``otherwise``, or the fork that left it behind."""
    return f"it belongs to the runtime of the process this one was forked from: {FORK_ADVICE}" \
        if device in forked_away else otherwise


def live_device(device: object, what: str = "device") -> GenericDevice:
    """The generic device behind a device handle; raises for a wrong or stale handle."""
    if type(device) is not Device:
        raise bad_handle(device, Device, what)
    gdev = device._gdev
    if gdev is None:
        raise OffloadError(ErrorCode.INVALID_DEVICE,
                           f"{what} {device!r}: {_gone(device, 'it belongs to a runtime that was shut down')}")
    return gdev


def live_queue(queue: object, what: str = "queue") -> AsyncInfo:
    if type(queue) is not Queue:
        raise bad_handle(queue, Queue, what)
    ai = queue._ai
    if ai is None:
        raise OffloadError(ErrorCode.INVALID_QUEUE, f"{what} {queue!r}: {_gone(queue.device, 'it has been destroyed')}")
    return ai


def live_event(event: object, what: str = "event") -> GenericEvent:
    if type(event) is not Event:
        raise bad_handle(event, Event, what)
    ev = event._ev
    if ev is None:
        raise OffloadError(ErrorCode.INVALID_EVENT, f"{what} {event!r} has been destroyed")
    if event.device._gdev is None:
        raise OffloadError(ErrorCode.INVALID_EVENT,
                           f"{what} {event!r}: {_gone(event.device, 'it belongs to a runtime that was shut down')}")
    return ev


def live_program(program: object, what: str = "program") -> DeviceImage:
    if type(program) is not Program:
        raise bad_handle(program, Program, what)
    image = program._image
    if image is None:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what} {program!r}: {_gone(program.device, 'it has been destroyed')}")
    return image


def live_symbol(symbol: object, what: str = "symbol") -> Symbol:
    if type(symbol) is not Symbol:
        raise bad_handle(symbol, Symbol, what)
    if symbol.program._image is None:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{what} {symbol!r} belongs to a destroyed program")
    return symbol


E = TypeVar("E", bound=IntEnum)


def enum_value(cls: type[E], value: object, what: str) -> E:
    """``value`` as a member of ``cls``; anything else (a float too) is ``INVALID_ENUMERATION``."""
    try:
        return cls(operator.index(value))  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise OffloadError(ErrorCode.INVALID_ENUMERATION, f"{what} {value!r} is not a valid {cls.__name__}") from None


def pointer(value: object, what: str) -> int:
    """An address argument as an ``int``; ``None``/0 is ``INVALID_NULL_POINTER``."""
    if value is None:
        raise OffloadError(ErrorCode.INVALID_NULL_POINTER, f"{what} is None")
    try:
        address = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what} must be an integer address, got {type(value).__name__}") from None
    if address == 0:
        raise OffloadError(ErrorCode.INVALID_NULL_POINTER, f"{what} is a null pointer")
    if address < 0 or address >= 1 << 64:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{what} {address:#x} is not a 64-bit address")
    return address


def size_value(value: object, what: str) -> int:
    """A byte count argument: a non-negative ``int``."""
    try:
        size = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what} must be an integer, got {type(value).__name__}") from None
    if size < 0 or size >= 1 << 64:
        raise OffloadError(ErrorCode.INVALID_SIZE, f"{what} must be in 0 .. 2**64-1, got {size}")
    return size


def payload(value: object, what: str) -> bytes:
    """A bytes-like argument as immutable ``bytes`` (a private copy unless it already is)."""
    if type(value) is bytes:
        return value
    if value is None:
        raise OffloadError(ErrorCode.INVALID_NULL_POINTER, f"{what} is None")
    try:
        return memoryview(value).tobytes()  # type: ignore[arg-type]
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what} must be a bytes-like object, got {type(value).__name__}") from None
