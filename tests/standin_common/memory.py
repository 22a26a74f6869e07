"""Device memory and registered host memory of the simulated GPUs.

TEST DOUBLE, not NVIDIA or AMD code:

- memory is real host memory (``calloc``, 256-byte aligned), so device pointers can be read and
  written through ctypes; each allocation is tracked per device against a memory budget; freed
  blocks go back to the system only once no stream has work left (late work on a freed pointer
  cannot crash the test process);
- :meth:`MemoryTables.describe_locked` answers what the drivers' pointer queries ask (whose memory
  a byte is, where host and devices reach it); host memory it does not know is pageable;
- host memory registered with the driver (``cuMemHostRegister``, ``hipHostRegister``) is tracked
  as page-locked ranges that device-side copies and fills accept, as they accept pinned
  allocations. Its device address is the host address, unless a device reports that it cannot
  use host pointers for registered memory: then, as the drivers document, every registration
  gets a device address of its own (an inaccessible reserved mapping, so only the stand-in's
  calls, which translate it, can use it; the stand-ins' ``read``/``write`` translate it too).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from bisect import bisect_right, insort
from dataclasses import dataclass
from typing import Any

from .controls import DriverError

ALIGNMENT = 256
COUNTED = ("device", "managed", "global")  # kinds that use the device's memory budget
OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY and hipErrorOutOfMemory alike
ALREADY_REGISTERED = 712  # CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, hipErrorHostMemoryAlreadyRegistered

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


@dataclass(eq=False)
class Allocation:
    raw: int
    ptr: int
    size: int
    kind: str  # "device", "host", "managed" or "global"
    device: Any  # the SimulatedDevice it belongs to
    flags: int = 0  # as the allocating call was given them (hipHostMalloc's, cuMemAllocManaged's)


@dataclass(frozen=True)
class PointerInfo:
    """What the driver knows about one byte of memory (see :meth:`MemoryTables.describe_locked`)."""

    kind: str  # "device", "host" (a pinned allocation), "managed", "global" or "registered"
    device: Any  # the SimulatedDevice whose memory it is (registered: the registering context's)
    host: int  # the address the host reaches the byte at; 0 where it cannot (device memory)
    device_address: int  # the address devices reach the byte at
    allocation: Allocation | None = None
    registration: HostRegistration | None = None


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


class MemoryTables:
    """The memory half of a stand-in's :class:`~standin_common.engine.State`.

    Its tables are guarded by ``lock`` (the state's lock); ``*_locked`` methods expect it held.
    """

    lock: threading.Lock
    devices: list[Any]

    def __init__(self) -> None:
        self.allocations: dict[int, Allocation] = {}
        self.starts: list[int] = []  # sorted allocation addresses, for range lookups
        self.graveyard: list[int] = []  # freed raw blocks, released once no stream can touch them
        self.registered: dict[int, HostRegistration] = {}  # registered host memory by host address
        self.registered_starts: list[int] = []  # sorted host addresses of ``registered``
        self.aliases: dict[int, HostRegistration] = {}  # the same, by device address where that differs
        self.alias_starts: list[int] = []  # sorted device addresses of ``aliases``

    def quiet_locked(self) -> bool:
        """Whether no stream work can still touch freed memory (the engine says)."""
        raise NotImplementedError

    # ---- allocations ---------------------------------------------------------------------------
    def allocate(self, device: Any, size: int, kind: str, flags: int = 0) -> Allocation:
        """``size`` zeroed bytes of ``kind`` on ``device`` (out of memory, 2, past its budget)."""
        with self.lock:
            if kind in COUNTED:
                if device.used + size > device.budget:
                    raise DriverError(OUT_OF_MEMORY)
                device.used += size
        raw = _libc.calloc(1, size + ALIGNMENT) if size < (1 << 48) else None
        with self.lock:
            if not raw:
                if kind in COUNTED:
                    device.used -= size
                raise DriverError(OUT_OF_MEMORY)
            ptr = (raw + ALIGNMENT - 1) & ~(ALIGNMENT - 1)
            alloc = Allocation(raw, ptr, size, kind, device, flags)
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
        if self.graveyard and self.quiet_locked():
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
                raise DriverError(OUT_OF_MEMORY, f"no address space left for a device mapping of {size} bytes")
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
        raise DriverError(ALREADY_REGISTERED, f"[{host:#x}, +{size}) overlaps {clash}, which is page-locked already")

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

    def mapped_locked(self, host: int) -> tuple[int, HostRegistration | None] | None:
        """Where devices reach the page-locked host byte at ``host``: (its device address, the
        registration holding it, or None for a pinned allocation, which unified addressing maps
        at its host address), or None if ``host`` is not page-locked."""
        registration = self.registration_locked(host)
        if registration is not None:
            return registration.device_ptr + (host - registration.host), registration
        alloc = self.find_locked(host, 1)
        return (host, None) if alloc is not None and alloc.kind == "host" else None

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

    def describe_locked(self, address: int) -> PointerInfo | None:
        """What the byte at ``address`` is: an allocation, registered host memory (at its host or its
        device address), or None for memory the driver does not know (pageable host memory)."""
        alloc = self.find_locked(address, 1)
        if alloc is not None:
            host = address if alloc.kind in ("host", "managed") else 0
            return PointerInfo(alloc.kind, alloc.device, host, address, allocation=alloc)
        registration = self.registration_locked(address)
        if registration is None:
            registration = self._alias_locked(address, 1)
            if registration is None:
                return None
            host = registration.translate(address)
        else:
            host = address
        return PointerInfo("registered", registration.ctx.device, host,
                           registration.device_ptr + (host - registration.host), registration=registration)

    def pageable_locked(self, address: int) -> bool:
        """Whether host memory at ``address`` is pageable: neither a driver allocation nor registered."""
        return self.describe_locked(address) is None

    def host_address(self, address: int) -> int:
        """``address``, or the host address behind it if it is a registration's device address."""
        with self.lock:
            registration = self._alias_locked(address, 1)
        return address if registration is None else registration.translate(address)

    def free_all_locked(self) -> None:
        """Release every allocation and registration (the stand-in is being reset)."""
        for alloc in list(self.allocations.values()):
            self.release_locked(alloc)
        for host in list(self.registered):
            self.unregister_host_locked(host)
