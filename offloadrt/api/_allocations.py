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
_DEVICE = AllocType.DEVICE  # a module constant: an enum member read from its class costs about 0.2 us
_PAST_THE_END = 1 << 64  # the high end of the gap after the last allocation: no address reaches it
_NO_PAIR = (0, 0, 0, 0)  # AllocationMap.pair when no copy fits it: no address plus a positive size is <= 0


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
        # copy_fits's spans of the last lookup of each side (see _span), valid while the version is theirs;
        # olMemcpy's hot path tries them in its own frame first
        self.dst_span: tuple[int, int, int, bool] = (-1, 0, 0, False)
        self.src_span: tuple[int, int, int, bool] = (-1, 0, 0, False)
        # (device_low, device_high, host_low, host_high): the spans of the last copy that copy_fits
        # passed, by side (the GPU's side, the host's, which may be named as host memory), so that
        # copies each way between the same buffers all hit it; olMemcpy's hot path tries it first.
        # Always true of the current map: set under the lock only while its version is unchanged,
        # and reset by every writer (under the lock) when it changes the map.
        self.pair: tuple[int, int, int, int] = _NO_PAIR

    def add(self, alloc: Allocation) -> bool:
        """Record ``alloc``; False (nothing recorded) once the map was drained by the last olShutDown."""
        with self._lock:
            if self.closed:
                return False
            self._version += 1
            self.pair = _NO_PAIR
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
            self.pair = _NO_PAIR
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

        The hot path of olMemcpy, without the lock: each side is first tried against the span that
        side's previous lookup found (an allocation, or a gap between two), then looked up.
        """
        version = self._version
        dst_span = self.dst_span
        if not (dst_span[0] == version and dst_span[1] <= dst and dst + size <= dst_span[2]):
            found = self._span(dst, version)
            if found is None or dst + size > found[2]:
                return False
            self.dst_span = dst_span = found
        src_span = self.src_span
        if not (src_span[0] == version and src_span[1] <= src and src + size <= src_span[2]):
            found = self._span(src, version)
            if found is None or src + size > found[2]:
                return False
            self.src_span = src_span = found
        device_span, host_span = (dst_span, src_span) if to_device else (src_span, dst_span)
        if not host_span[3]:
            return False
        with self._lock:  # only a pair of the map as it is now may be left for the hot path
            if self._version != version:
                return False
            self.pair = (device_span[1], device_span[2], host_span[1], host_span[2])
        return True

    def _span(self, address: int, version: int) -> tuple[int, int, int, bool] | None:
        """``(version, low, high, host_ok)``: the allocation that contains ``address``, or the gap
        between allocations it lies in (a copy from there is checked by nothing here; ``high`` is the
        next allocation's base), and whether a copy may name it as host memory. Every span lies within
        [1, 2**64). None while a writer is changing the map, or for an address outside [1, 2**64)."""
        if version & 1 or not 0 < address < _PAST_THE_END:
            return None
        by_base = self._by_base
        bases = self._bases
        try:
            index = _bisect_right(bases, address)
            low = 1  # a gap starts at 1 at the lowest: a span holds no null (or negative) address
            if index:
                alloc = by_base[bases[index - 1]]
                if address < alloc.end:
                    host_ok = alloc.kind is not _DEVICE or alloc.device.is_host
                    return version, alloc.base, alloc.end, host_ok
                low = alloc.end
            high = bases[index] if index < len(bases) else _PAST_THE_END
        except (IndexError, KeyError):  # a writer moved things meanwhile; the version shows it too
            return None
        return version, low, high, True

    def drain(self) -> list[Allocation]:
        with self._lock:
            self.closed = True
            self._version += 1
            self.pair = _NO_PAIR
            allocs = list(self._by_base.values())
            self._by_base.clear()
            self._bases.clear()
            self._version += 1
            return allocs

    def __len__(self) -> int:
        return len(self._by_base)
