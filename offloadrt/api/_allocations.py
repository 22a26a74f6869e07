"""Every live ``olMemAlloc`` allocation, found by base or by any address inside it."""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ErrorCode, OffloadError
from ..types import AllocType

if TYPE_CHECKING:
    from .handles import Device

_bisect_right = bisect.bisect_right


@dataclass(frozen=True, slots=True)
class Allocation:
    base: int
    size: int
    device: Device
    kind: AllocType
    end: int = field(init=False)  # base + size: the first address past it

    def __post_init__(self) -> None:
        object.__setattr__(self, "end", self.base + self.size)


class AllocationMap:
    """Every live ``olMemAlloc`` allocation, found by base or by any address inside it.

    Writers hold the lock and bump ``_version`` before and after each change (odd while one is
    under way). Lookups on the hot paths (copies, fills) take no lock: they read the version,
    look up, and trust the answer only if the version is even and unchanged; otherwise they
    look up again under the lock.
    """

    def __init__(self) -> None:
        self._by_base: dict[int, Allocation] = {}
        self._bases: list[int] = []  # sorted
        self._lock = threading.Lock()  # guards both containers, _version and closed
        self._version = 0
        self.closed = False  # drained by the last olShutDown: nothing more is recorded

    def add(self, alloc: Allocation) -> bool:
        """Record ``alloc``; False (nothing recorded) once the map was drained by the last olShutDown."""
        with self._lock:
            if self.closed:
                return False
            self._version += 1
            self._by_base[alloc.base] = alloc
            bisect.insort(self._bases, alloc.base)
            self._version += 1
            return True

    def _containing(self, address: int) -> Allocation | None:
        index = bisect.bisect_right(self._bases, address) - 1
        if index >= 0:
            alloc = self._by_base[self._bases[index]]
            if address < alloc.base + alloc.size:
                return alloc
        return None

    def remove(self, base: int) -> Allocation:
        """Forget the allocation starting at ``base``; ``INVALID_ARGUMENT`` (as LLVM 22) for any other
        address, saying whether it is inside an allocation or unknown (never allocated, or freed)."""
        with self._lock:
            alloc = self._by_base.get(base)
            if alloc is None:
                inner = self._containing(base)
                if inner is not None:
                    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                       f"{base:#x} is inside the allocation at {inner.base:#x} "
                                       f"({inner.size} bytes); free its base address")
                raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{base:#x} is not a live allocation of offloadrt "
                                                               f"(never allocated, or already freed)")
            self._version += 1
            del self._by_base[base]
            del self._bases[bisect.bisect_left(self._bases, base)]
            self._version += 1
            return alloc

    def find(self, address: int) -> Allocation | None:
        """The allocation that contains ``address``, or None."""
        version = self._version
        if not version & 1:
            alloc = self._by_base.get(address)
            if alloc is None:
                bases = self._bases
                index = _bisect_right(bases, address) - 1
                try:
                    if index >= 0:
                        alloc = self._by_base[bases[index]]
                        if address >= alloc.base + alloc.size:
                            alloc = None
                except (IndexError, KeyError):  # a writer moved things meanwhile; the version shows it too
                    alloc = None
            if self._version == version:
                return alloc
        with self._lock:
            alloc = self._by_base.get(address)
            return alloc if alloc is not None else self._containing(address)

    def check_range(self, address: int, size: int, what: str) -> Allocation | None:
        """The allocation ``address`` lies in, if any; ``INVALID_SIZE`` when ``size`` bytes from
        ``address`` run past its end (a copy or fill there would overwrite whatever follows)."""
        alloc = self.find(address)
        if alloc is not None and address + size > alloc.base + alloc.size:
            end = alloc.base + alloc.size
            raise OffloadError(ErrorCode.INVALID_SIZE,
                               f"{what}: {size} bytes at {address:#x} run {address + size - end} bytes past the end "
                               f"of the allocation at {alloc.base:#x} ({alloc.size} bytes, on {alloc.device!r})")
        return alloc

    def copy_fits(self, dst: int, src: int, size: int, to_device: bool) -> bool:
        """Whether a copy of ``size`` bytes from ``src`` to ``dst`` passes the allocation checks of
        olMemcpy: each side that starts inside an allocation ends inside it, and the host side (``src``
        when ``to_device``, else ``dst``) is not a GPU's device memory. False also when a writer
        changed the map meanwhile: the caller then takes :meth:`check_range`, which says what is wrong.

        The hot path of olMemcpy: both lookups in one frame, without the lock.
        """
        version = self._version
        if version & 1:
            return False
        by_base = self._by_base
        bases = self._bases
        try:
            dst_alloc = by_base.get(dst)
            if dst_alloc is None:
                index = _bisect_right(bases, dst)
                if index:
                    dst_alloc = by_base[bases[index - 1]]
                    if dst >= dst_alloc.end:
                        dst_alloc = None
            src_alloc = by_base.get(src)
            if src_alloc is None:
                index = _bisect_right(bases, src)
                if index:
                    src_alloc = by_base[bases[index - 1]]
                    if src >= src_alloc.end:
                        src_alloc = None
        except (IndexError, KeyError):  # a writer moved things meanwhile; the version shows it too
            return False
        if dst_alloc is not None and dst + size > dst_alloc.end:
            return False
        if src_alloc is not None and src + size > src_alloc.end:
            return False
        host_alloc = src_alloc if to_device else dst_alloc
        if host_alloc is not None and host_alloc.kind is AllocType.DEVICE and not host_alloc.device.is_host:
            return False
        return self._version == version

    def drain(self) -> list[Allocation]:
        with self._lock:
            self.closed = True
            self._version += 1
            allocs = list(self._by_base.values())
            self._by_base.clear()
            self._bases.clear()
            self._version += 1
            return allocs

    def __len__(self) -> int:
        return len(self._by_base)
