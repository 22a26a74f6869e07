"""The simulated GPU behind the stand-in drivers: devices, contexts, memory, streams and events.

TEST DOUBLE, not NVIDIA or AMD code. It follows the CUDA driver's documented behaviour on the
host, and the HIP runtime's where the two agree (tests/hip_standin builds on it: a
:class:`State` per stand-in, with its own devices, sticky codes, diagnostics and controls):

- memory is real host memory (``calloc``, 256-byte aligned), so device pointers can be read and
  written through ctypes; each allocation is tracked per device against a memory budget;
- host memory registered with the driver (``cuMemHostRegister``, ``hipHostRegister``) is tracked
  as page-locked ranges that device-side copies and fills accept, as they accept pinned
  allocations. Its device address is the host address, unless a device reports that it cannot
  use host pointers for registered memory: then, as the drivers document, every registration
  gets a device address of its own (an inaccessible reserved mapping, so only the stand-in's
  calls, which translate it, can use it; :func:`cuda_standin.read`/``write`` translate it too);
- each stream has a worker thread (a "driver thread") that runs its operations in submission
  order; the legacy default stream (handle 0) runs them in the calling thread, after the blocking
  streams of the context have drained;
- a kernel fault is reported asynchronously; a sticky one poisons the whole context: its streams
  skip all later work (host functions included) and every later call on it returns the fault;
- an event's timestamp is when the stream reached the record: when the work before it completed,
  or when it was submitted to an idle stream (a record does no work of its own).

Locking: one lock per :class:`State` (``State.lock``, with the condition ``State.cv``) guards
every table of the state and every mutable field of its contexts, streams, events and
allocations. It is held only for bookkeeping: never while an operation copies memory, a host
function runs or a kernel body runs, so a blocked host function blocks neither other streams
nor the API. Waits (stream/event sync, stream-wait-event) are ``cv.wait_for`` calls, which
release the lock and the GIL.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import itertools
import threading
import time
import traceback
import warnings
from bisect import bisect_right, insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import _types as t

SUCCESS = 0
NOT_READY = 600
# Faults the driver documents as leaving the context unusable ("inconsistent state"), plus ASSERT.
STICKY = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 226, 911})
LAUNCH_FAILED = 719
LEGACY_STREAMS = (0, 1, 2)  # NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: all run synchronously here
ALIGNMENT = 256
COUNTED = ("device", "managed", "global")  # kinds that use the device's memory budget

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
_libc.calloc.restype = ctypes.c_void_p
_libc.calloc.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
_libc.free.argtypes = (ctypes.c_void_p,)
_libc.free.restype = None
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.munmap.restype = ctypes.c_int
_PAGE = 4096
_MAP_FAILED = ctypes.c_void_p(-1).value
_PROT_NONE, _MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE = 0, 0x02, 0x20, 0x4000

_handle_ids = itertools.count(1)  # never reset: handles of a reset driver never match new ones


# The CUDA stand-in's (another stand-in keeps its own); cleared in place by reset(). Appending to a
# list is atomic under the GIL.
calls: list[tuple[str, tuple[Any, ...]]] = []  # every driver call: (function name, arguments)
diagnostics: list[str] = []  # why the stand-in failed a call, when the code alone would not say
_cuda_diagnostics = diagnostics  # what a State logs to unless given its own list


in_host_function = threading.local()  # .active: this thread is running a host function now


def new_handle() -> int:
    return 0x7E5700000000 + next(_handle_ids) * 0x40


class DriverError(Exception):
    """A driver call fails with ``code`` (raised inside the stand-in, returned as its status);
    ``why``, when given, is what the stand-in's call wrapper adds to its diagnostics."""

    def __init__(self, code: int, why: str = "") -> None:
        super().__init__(code)
        self.code = int(code)
        self.why = why


class KernelFault(Exception):  # noqa: N818  # the name the tests use
    """Raised by a registered kernel implementation: the launch faults with ``code`` (a CUresult,
    or a hipError_t in the HIP stand-in).

    Reported asynchronously, as on a GPU; a sticky code poisons the context.
    """

    def __init__(self, code: Any, message: str = "") -> None:
        super().__init__(f"{getattr(code, 'name', code)}{': ' + message if message else ''}")
        self.code = int(code)


@dataclass
class DeviceSpec:
    """One simulated GPU. ``attributes`` overrides defaults by short name ("WARP_SIZE") or number;
    ``peers`` lists the ordinals this device can access directly (None: every other device)."""

    name: str = ""
    total_memory: int = 8 << 30
    memory_budget: int | None = None
    compute_capability: tuple[int, int] = (9, 0)
    attributes: dict[Any, int] = field(default_factory=dict)
    uuid: bytes | None = None
    peers: set[int] | None = None


DEFAULT_ATTRIBUTES = {
    "MAX_THREADS_PER_BLOCK": 1024, "MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64,
    "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535,
    "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 228 * 1024, "TOTAL_CONSTANT_MEMORY": 65536, "WARP_SIZE": 32,
    "MAX_PITCH": 2**31 - 1, "MAX_REGISTERS_PER_BLOCK": 65536, "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
    "CLOCK_RATE": 1980000, "MEMORY_CLOCK_RATE": 2619000, "GPU_OVERLAP": 1, "MULTIPROCESSOR_COUNT": 132,
    "CAN_MAP_HOST_MEMORY": 1, "CONCURRENT_KERNELS": 1, "ECC_ENABLED": 1, "GLOBAL_MEMORY_BUS_WIDTH": 5120,
    "L2_CACHE_SIZE": 50 << 20, "MAX_THREADS_PER_MULTIPROCESSOR": 2048, "ASYNC_ENGINE_COUNT": 3,
    "UNIFIED_ADDRESSING": 1, "STREAM_PRIORITIES_SUPPORTED": 1, "MANAGED_MEMORY": 1,
    "CONCURRENT_MANAGED_ACCESS": 1, "COOPERATIVE_LAUNCH": 1, "HOST_REGISTER_SUPPORTED": 1,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 32, "MEMORY_POOLS_SUPPORTED": 1, "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 1,
}


def attribute_number(name: Any) -> int:
    if isinstance(name, str):
        return int(getattr(t.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"))
    return int(name)


class SimulatedDevice:
    """What the engine needs of a GPU: its memory budget and its (primary) context.

    ``spec`` needs ``total_memory``, ``memory_budget`` (None: the total) and ``peers`` (the
    ordinals it can access directly; None: every other device). Subclasses describe the rest.
    """

    def __init__(self, ordinal: int, spec: Any) -> None:
        self.ordinal = ordinal
        self.spec = spec
        self.budget: int = spec.total_memory if spec.memory_budget is None else spec.memory_budget
        self.used = 0
        self.context = Context(self)

    def can_access(self, peer: SimulatedDevice) -> bool:
        if peer is self:
            return False
        return self.spec.peers is None or peer.ordinal in self.spec.peers

    def uses_host_pointers_for_registered_memory(self) -> bool:
        """Whether the device reaches registered host memory at its host address (a subclass reads
        its attribute for it)."""
        return True


class Device(SimulatedDevice):
    """A CUDA GPU: name, UUID and CUdevice_attribute values."""

    def __init__(self, ordinal: int, spec: DeviceSpec) -> None:
        super().__init__(ordinal, spec)
        self.name = spec.name or f"Stand-in CUDA GPU {ordinal} (test double)"
        self.uuid = spec.uuid or hashlib.md5(f"cuda-standin-{ordinal}".encode()).digest()
        major, minor = spec.compute_capability
        values = dict(DEFAULT_ATTRIBUTES, COMPUTE_CAPABILITY_MAJOR=major, COMPUTE_CAPABILITY_MINOR=minor,
                      PCI_BUS_ID=0x18 + 0x10 * ordinal)
        self.attributes = {attribute_number(k): v for k, v in values.items()}
        self.attributes.update({attribute_number(k): v for k, v in spec.attributes.items()})

    def attr(self, name: str) -> int:
        return self.attributes.get(attribute_number(name), 0)

    def uses_host_pointers_for_registered_memory(self) -> bool:
        return bool(self.attr("CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"))


class Context:
    """A device's primary context: one handle for the life of the driver, active while retained."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.handle = new_handle()
        self.refcount = 0
        self.flags = 0
        self.active = False
        self.sticky: int | None = None
        self.legacy_error: int | None = None  # a non-sticky fault of work on the legacy stream
        self.peers: set[int] = set()


@dataclass(eq=False)
class Allocation:
    raw: int
    ptr: int
    size: int
    kind: str  # "device", "host", "managed" or "global"
    device: Any  # the SimulatedDevice it belongs to


@dataclass(eq=False)
class HostRegistration:
    """Host memory registered with the driver: page-locked and mapped for the devices."""

    host: int
    size: int
    flags: int  # as the registering call was given them
    ctx: Any  # the Context that registered it (HIP: the current device's)
    device_ptr: int  # the address devices use: ``host``, or inside ``window``
    window: int = 0  # the reserved, inaccessible mapping that gives ``device_ptr`` (0: none)
    window_size: int = 0

    def translate(self, device_address: int) -> int:
        """The host address behind a device address inside this registration."""
        return self.host + (device_address - self.device_ptr)


@dataclass(eq=False)
class Event:
    handle: int
    ctx: Context
    flags: int
    recorded: int = 0  # how many times it was recorded (the sequence number of the newest record)
    done: int = 0  # the newest record the stream has reached
    time: float | None = None  # perf_counter() when the newest completed record was reached
    gone: bool = False  # its context was destroyed: nothing will ever complete it


@dataclass(eq=False)
class Op:
    """One stream operation: ``run`` (None for a record or a wait), or a wait for ``event``."""

    kind: str
    run: Callable[[], None] | None = None
    event: Event | None = None
    seq: int = 0
    keep: Any = None  # objects the operation reads later (a caller's buffer)
    enqueued: float = field(default_factory=time.perf_counter)  # when the caller submitted it


class Stream:
    def __init__(self, state: State, ctx: Context, flags: int) -> None:
        self.handle = new_handle()
        self.ctx = ctx
        self.flags = flags
        self.nonblocking = bool(flags & 1)
        self.ops: deque[Op] = deque()
        self.destroyed = False
        self.stop = False
        self.async_error: int | None = None
        self.last_done = 0.0  # perf_counter() when its latest operation completed
        self.thread = threading.Thread(target=_worker, args=(state, self), daemon=True,
                                       name=f"{state.label}-stream-{self.handle:#x}")


class State:
    """One simulated driver instance (a fresh one per :func:`cuda_standin.reset`).

    The defaults describe the CUDA driver; another stand-in passes its own device class
    (``make_device(ordinal, spec)``), the fault codes that poison a context (``sticky``), the
    list its diagnostics go to and a ``label`` for thread names and warnings.
    """

    def __init__(self, devices: list[Any], driver_version: int, init_error: int | None,
                 library_missing: bool, *, make_device: Callable[[int, Any], Any] = Device,
                 sticky: frozenset[int] = STICKY, diagnostics: list[str] | None = None,
                 label: str = "cuda-standin") -> None:
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.devices: list[Any] = [make_device(i, spec) for i, spec in enumerate(devices)]
        self.sticky = sticky
        self.diagnostics = _cuda_diagnostics if diagnostics is None else diagnostics
        self.label = label
        self.driver_version = driver_version
        self.init_error = init_error
        self.library_missing = library_missing
        self.initialized = False
        self.tls = threading.local()  # .ctx: the calling thread's current Context
        self.contexts = {d.context.handle: d.context for d in self.devices}
        self.streams: dict[int, Stream] = {}
        self.live: set[Stream] = set()  # streams whose worker may still run (destroyed ones drain)
        self.events: dict[int, Event] = {}
        self.modules: dict[int, Any] = {}
        self.functions: dict[int, Any] = {}
        self.allocations: dict[int, Allocation] = {}
        self.starts: list[int] = []  # sorted allocation addresses, for range lookups
        self.graveyard: list[int] = []  # freed raw blocks, released once no stream can touch them
        self.registered: dict[int, HostRegistration] = {}  # registered host memory by host address
        self.registered_starts: list[int] = []  # sorted host addresses of ``registered``
        self.aliases: dict[int, HostRegistration] = {}  # the same, by device address where that differs
        self.alias_starts: list[int] = []  # sorted device addresses of ``aliases``
        self.inline = 0  # legacy-stream operations running in callers' threads
        self.binary_kernels: dict[str, Any] = {}  # names for cubin/fatbin images (set_binary_symbols)
        self.binary_globals: dict[str, int] = {}

    # ---- contexts ------------------------------------------------------------------------------
    def current(self, allow_sticky: bool = False) -> Context:
        """The calling thread's current, active context (INVALID_CONTEXT otherwise)."""
        ctx = getattr(self.tls, "ctx", None)
        if ctx is None or not ctx.active:
            raise DriverError(201)
        if ctx.sticky is not None and not allow_sticky:
            raise DriverError(ctx.sticky)
        return ctx

    def deactivate_locked(self, ctx: Context) -> None:
        """The last release of a primary context: everything created in it goes away."""
        ctx.active = False
        ctx.sticky = ctx.legacy_error = None
        ctx.peers.clear()
        for stream in self.streams_of_locked(ctx):
            stream.stop = True
            self.streams.pop(stream.handle, None)
            if stream.thread.ident is None:  # never ran anything: no worker to wind down
                self.live.discard(stream)
        for handle in [h for h, e in self.events.items() if e.ctx is ctx]:
            self.events.pop(handle).gone = True
        for handle in [h for h, m in self.modules.items() if m.ctx is ctx]:
            self.modules.pop(handle).unloaded = True
        for handle in [h for h, f in self.functions.items() if f.module.ctx is ctx]:
            del self.functions[handle]
        for alloc in [a for a in self.allocations.values() if a.device is ctx.device]:
            self.release_locked(alloc)
        for registration in [r for r in self.registered.values() if r.ctx is ctx]:
            self.unregister_host_locked(registration.host)
        self.cv.notify_all()

    # ---- memory --------------------------------------------------------------------------------
    def allocate(self, device: SimulatedDevice, size: int, kind: str) -> Allocation:
        with self.lock:
            if kind in COUNTED:
                if device.used + size > device.budget:
                    raise DriverError(2)
                device.used += size
        raw = _libc.calloc(1, size + ALIGNMENT) if size < (1 << 48) else None
        with self.lock:
            if not raw:
                if kind in COUNTED:
                    device.used -= size
                raise DriverError(2)
            ptr = (raw + ALIGNMENT - 1) & ~(ALIGNMENT - 1)
            alloc = Allocation(raw, ptr, size, kind, device)
            self.allocations[ptr] = alloc
            insort(self.starts, ptr)
            return alloc

    def release_locked(self, alloc: Allocation) -> None:
        del self.allocations[alloc.ptr]
        self.starts.remove(alloc.ptr)
        if alloc.kind in COUNTED:
            alloc.device.used -= alloc.size
        self.graveyard.append(alloc.raw)
        self.flush_graveyard_locked()

    def flush_graveyard_locked(self) -> None:
        if self.graveyard and not self.inline and not any(s.ops for s in self.live):
            for raw in self.graveyard:
                _libc.free(raw)
            self.graveyard.clear()

    def find_locked(self, ptr: int, size: int) -> Allocation | None:
        """The allocation holding ``[ptr, ptr + size)``, or None."""
        index = bisect_right(self.starts, ptr) - 1
        if index < 0:
            return None
        alloc = self.allocations[self.starts[index]]
        return alloc if ptr + max(size, 1) <= alloc.ptr + alloc.size else None

    # ---- registered host memory ----------------------------------------------------------------
    def registered_at_host_addresses(self) -> bool:
        """Whether registered memory keeps its host address on the devices: the drivers document
        that it does only if every device can use host pointers for registered memory."""
        return all(device.uses_host_pointers_for_registered_memory() for device in self.devices)

    def register_host(self, host: int, size: int, flags: int, ctx: Any) -> HostRegistration:
        """Page-lock ``[host, host + size)``: already registered (712) if it overlaps a registered
        range or a pinned host allocation."""
        window = window_size = 0
        device_ptr = host
        if not self.registered_at_host_addresses():
            offset = host % _PAGE
            window_size = (offset + size + _PAGE - 1) // _PAGE * _PAGE
            window = _libc.mmap(None, window_size, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
            if window in (None, _MAP_FAILED):
                raise DriverError(2, f"no address space left for a device mapping of {size} bytes")
            device_ptr = window + offset
        registration = HostRegistration(host, size, flags, ctx, device_ptr, window or 0, window_size)
        with self.lock:
            clash = self._overlapping_locked(host, size)
            if clash is None:
                self.registered[host] = registration
                insort(self.registered_starts, host)
                if device_ptr != host:
                    self.aliases[device_ptr] = registration
                    insort(self.alias_starts, device_ptr)
                return registration
        if window:
            _libc.munmap(window, window_size)
        raise DriverError(712, f"[{host:#x}, +{size}) overlaps {clash}, which is page-locked already")

    def _overlapping_locked(self, host: int, size: int) -> str | None:
        end = host + size
        index = bisect_right(self.registered_starts, end - 1) - 1
        if index >= 0:
            other = self.registered[self.registered_starts[index]]
            if other.host + other.size > host:
                return f"registered host memory [{other.host:#x}, +{other.size})"
        index = bisect_right(self.starts, end - 1) - 1
        while index >= 0:  # pinned host allocations; other kinds are no host memory to register
            alloc = self.allocations[self.starts[index]]
            if alloc.ptr + alloc.size <= host:
                break
            if alloc.kind == "host":
                return f"the pinned host allocation [{alloc.ptr:#x}, +{alloc.size})"
            index -= 1
        return None

    def unregister_host_locked(self, host: int) -> HostRegistration | None:
        """Make the registration that starts at ``host`` pageable again; None if there is none."""
        registration = self.registered.pop(host, None)
        if registration is None:
            return None
        self.registered_starts.remove(host)
        if registration.window:
            del self.aliases[registration.device_ptr]
            self.alias_starts.remove(registration.device_ptr)
            _libc.munmap(registration.window, registration.window_size)
        return registration

    def registration_locked(self, address: int, size: int = 1) -> HostRegistration | None:
        """The registration whose host range holds ``[address, address + size)``, or None."""
        index = bisect_right(self.registered_starts, address) - 1
        if index < 0:
            return None
        registration = self.registered[self.registered_starts[index]]
        return registration if address + max(size, 1) <= registration.host + registration.size else None

    def _alias_locked(self, address: int, size: int) -> HostRegistration | None:
        index = bisect_right(self.alias_starts, address) - 1
        if index < 0:
            return None
        registration = self.aliases[self.alias_starts[index]]
        return registration if address + max(size, 1) <= registration.device_ptr + registration.size else None

    def resolve_locked(self, address: int, size: int) -> tuple[int, Any] | None:
        """What a device-side access of ``[address, address + size)`` touches: (host address, the
        device whose memory it is; None for registered host memory), or None if it is no memory
        a device may use (an allocation, registered host memory, or its device address)."""
        alloc = self.find_locked(address, size)
        if alloc is not None:
            return address, alloc.device
        if self.registration_locked(address, size) is not None:
            return address, None
        registration = self._alias_locked(address, size)
        if registration is not None:
            return registration.translate(address), None
        return None

    def host_address(self, address: int) -> int:
        """``address``, or the host address behind it if it is a registration's device address."""
        with self.lock:
            registration = self._alias_locked(address, 1)
        return address if registration is None else registration.translate(address)

    # ---- streams -------------------------------------------------------------------------------
    def enqueue(self, stream: Stream | None, ctx: Context, op: Op) -> None:
        """Queue ``op`` on ``stream`` (returns at once), or run it now on the legacy stream."""
        if stream is not None:
            with self.lock:
                stream.ops.append(op)
                if not stream.thread.is_alive() and stream.thread.ident is None:
                    stream.thread.start()
                self.cv.notify_all()
            return
        with self.cv:
            self.cv.wait_for(lambda: self.idle_locked(s for s in self.streams_of_locked(ctx) if not s.nonblocking))
            skip = ctx.sticky is not None
            self.inline += 1
        code = None
        try:
            if op.kind == "wait" and not skip:
                with self.cv:
                    self.cv.wait_for(lambda: _reached(op) or ctx.sticky is not None)
            elif op.run is not None and not skip:
                code = self.run_op(op)
        finally:
            with self.cv:
                self.inline -= 1
                self.finish_locked(None, ctx, op, code)
                self.cv.notify_all()

    def run_op(self, op: Op) -> int | None:
        in_host_function.active = op.kind == "host"
        try:
            assert op.run is not None
            op.run()
        except KernelFault as fault:
            return fault.code
        except Exception:  # noqa: BLE001  # a broken kernel implementation: a launch failure
            self.diagnostics.append(f"kernel implementation raised:\n{traceback.format_exc()}")
            return LAUNCH_FAILED
        finally:
            in_host_function.active = False
        return None

    def finish_locked(self, stream: Stream | None, ctx: Context, op: Op, code: int | None) -> None:
        if op.kind == "record" and op.event is not None:
            event = op.event
            # A record does no work: a GPU reaches it as soon as the work before it completed, or
            # when it is submitted to an idle stream, so back-to-back records share a timestamp
            # (never the worker thread's own scheduling delay).
            reached = time.perf_counter() if stream is None else max(op.enqueued, stream.last_done)
            if stream is not None:
                stream.last_done = reached
            if op.seq >= event.done:
                event.done = op.seq
                event.time = reached
        if code is not None:
            if code in self.sticky:
                ctx.sticky = ctx.sticky or code
            elif stream is not None:
                stream.async_error = stream.async_error or code
            else:
                ctx.legacy_error = ctx.legacy_error or code

    def idle_locked(self, streams: Any) -> bool:
        return not any(s.ops for s in streams)

    def streams_of_locked(self, ctx: Context) -> list[Stream]:
        """The context's streams that may still run work, destroyed ones still draining included."""
        return [s for s in self.live if s.ctx is ctx]


def _reached(op: Op) -> bool:
    assert op.event is not None
    return op.event.done >= op.seq or op.event.gone


def _worker(state: State, stream: Stream) -> None:
    """A stream's driver thread: runs its operations in order; exits once destroyed and drained."""
    cv = state.cv
    while True:
        with cv:
            cv.wait_for(lambda: stream.ops or stream.stop or stream.destroyed)
            if stream.stop or not stream.ops:
                for op in stream.ops:  # the context is gone: mark events so no waiter hangs
                    state.finish_locked(stream, stream.ctx, op, None)
                stream.ops.clear()
                state.live.discard(stream)
                state.flush_graveyard_locked()
                cv.notify_all()
                return
            op = stream.ops[0]
            ctx = stream.ctx
            skip = ctx.sticky is not None or not ctx.active
        code = None
        if op.kind == "wait" and not skip:
            with cv:
                cv.wait_for(lambda: _reached(op) or stream.stop or ctx.sticky is not None)  # noqa: B023
        elif op.run is not None and not skip:
            code = state.run_op(op)
        finished = time.perf_counter()
        with cv:
            if op.kind != "record":
                stream.last_done = finished
            state.finish_locked(stream, ctx, op, code)
            stream.ops.popleft()
            state.flush_graveyard_locked()
            cv.notify_all()


def shut_down(state: State, timeout: float = 5.0) -> None:
    """Stop every worker of ``state`` and free its memory (leaked, with a warning, if one hangs)."""
    with state.cv:
        state.initialized = False
        for stream in state.live:
            stream.stop = True
        workers = [s.thread for s in state.live if s.thread.ident is not None]
        state.cv.notify_all()
    deadline = time.monotonic() + timeout
    for thread in workers:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for thread in workers if thread.is_alive()]
    if stuck:
        warnings.warn(f"{state.label}: stream workers still busy at reset (a host function or kernel "
                      f"blocks?): {stuck}; their memory is leaked", RuntimeWarning, stacklevel=3)
        return
    with state.lock:
        for alloc in list(state.allocations.values()):
            state.release_locked(alloc)
        for host in list(state.registered):
            state.unregister_host_locked(host)
        state.inline = 0
        state.live.clear()
        state.flush_graveyard_locked()


def fail(code: int, why: str) -> DriverError:
    """A :class:`DriverError` with its reason, which the stand-in's call wrapper keeps in its
    diagnostics for the test to read."""
    return DriverError(code, why)


# ---- test controls (see the package docstring) --------------------------------------------------

@dataclass
class KernelImpl:
    """A Python body for the kernel of that name: ``fn(params, grid, block, shared_mem, device)``."""

    fn: Callable[[bytes, tuple[int, int, int], tuple[int, int, int], int, int], object]
    params: list[tuple[int, int]] | None = None  # (size, alignment) per parameter, for kernelParams
    max_threads: int | None = None


@dataclass
class Injection:
    code: int
    times: int | None  # None: every call from now on
    skip: int


class Controls:
    """What a test sets for one stand-in: injected failures and kernel bodies by name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards injections and kernels (set by tests, read by any thread)
        self.injections: dict[str, deque[Injection]] = {}
        self.kernels: dict[str, KernelImpl] = {}

    def clear(self) -> None:
        with self.lock:
            self.injections.clear()
            self.kernels.clear()

    def take_injection(self, name: str) -> int | None:
        """The code an injected failure makes this call of ``name`` return, if any."""
        with self.lock:
            pending = self.injections.get(name)
            if not pending:
                return None
            entry = pending[0]
            if entry.skip > 0:
                entry.skip -= 1
                return None
            if entry.times is not None:
                entry.times -= 1
                if entry.times <= 0:
                    pending.popleft()
            return entry.code


CONTROLS = Controls()  # the CUDA stand-in's; the names below are its tables
control_lock = CONTROLS.lock
injections = CONTROLS.injections
kernels = CONTROLS.kernels
take_injection = CONTROLS.take_injection
STATE = State([DeviceSpec(), DeviceSpec()], 12040, None, False)
