"""Host memory registered with a device (``olMemRegister``): ranges, their users and pinned addresses.

LLVM keeps the same bookkeeping per device (``PinnedAllocationMapTy``): a range that lies inside
a registered one is one more user of it and gets the matching address inside its pinned
mapping; a range that overlaps one only in part is refused; the backend unlocks a range when its
last user unregisters it. Ranges the device pinned itself (its ``HOST`` allocations) are entered
as externally locked: users may register inside them, but the backend never unlocks them.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import ErrorCode, OffloadError


@dataclass
class Registration:
    base: int
    size: int
    pinned: int  # the address the device uses for ``base``
    users: int
    external: bool  # pinned by someone else (the device's own HOST allocation): never unlocked here

    @property
    def end(self) -> int:
        return self.base + self.size


class RegistrationMap:
    """The registered host ranges of one device, sorted by base address."""

    def __init__(self) -> None:
        self._by_base: dict[int, Registration] = {}
        self._bases: list[int] = []  # sorted
        self.lock = threading.Lock()  # guards both containers and every entry's users

    def _containing(self, address: int) -> Registration | None:
        index = bisect.bisect_right(self._bases, address) - 1
        if index >= 0:
            entry = self._by_base[self._bases[index]]
            if address < entry.end:
                return entry
        return None

    def _next_after(self, address: int) -> Registration | None:
        index = bisect.bisect_right(self._bases, address)
        return self._by_base[self._bases[index]] if index < len(self._bases) else None

    def _insert(self, entry: Registration) -> None:
        self._by_base[entry.base] = entry
        bisect.insort(self._bases, entry.base)

    def _erase(self, entry: Registration) -> None:
        del self._by_base[entry.base]
        del self._bases[bisect.bisect_left(self._bases, entry.base)]

    def register(self, ptr: int, size: int, lock: Callable[[int, int], int]) -> int:
        """One more user of ``[ptr, ptr + size)``; ``lock(ptr, size)`` pins a range not yet registered.

        Returns the address the device uses for ``ptr``.
        """
        with self.lock:
            entry = self._containing(ptr)
            if entry is not None:
                if ptr + size > entry.end:
                    raise _partial_overlap(ptr, size, entry)
                entry.users += 1
                return entry.pinned + (ptr - entry.base)
            following = self._next_after(ptr)
            if following is not None and following.base < ptr + size:
                raise _partial_overlap(ptr, size, following)
            pinned = lock(ptr, size)
            self._insert(Registration(ptr, size, pinned, 1, external=False))
            return pinned

    def _containing_pinned(self, address: int) -> Registration | None:
        """The user registration whose device address range contains ``address`` (where it differs
        from the host address: the ranges are few, a scan will do)."""
        for entry in self._by_base.values():
            if not entry.external and entry.pinned <= address < entry.pinned + entry.size:
                return entry
        return None

    def unregister(self, ptr: int, unlock: Callable[[int], None]) -> None:
        """One user fewer of the range containing ``ptr`` (its host address, or the device address
        ``register`` returned for it, as LLVM's tests pass); the last one unlocks it with ``unlock(base)``."""
        with self.lock:
            entry = self._containing(ptr)
            if entry is None:
                entry = self._containing_pinned(ptr)
            if entry is None or (entry.external and entry.users == 1):
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"{ptr:#x} is not in host memory registered with this device "
                                   f"(never registered, or unregistered as often as it was registered)")
            entry.users -= 1
            if entry.users:
                return
            self._erase(entry)
            try:
                unlock(entry.base)
            except BaseException:
                entry.users = 1
                self._insert(entry)
                raise

    def add_owned(self, ptr: int, size: int) -> None:
        """Enter memory the device pinned itself (a HOST allocation) as an externally locked range."""
        with self.lock:
            self._insert(Registration(ptr, size, ptr, 1, external=True))

    def remove_owned(self, ptr: int) -> None:
        """Forget a HOST allocation being freed, with any registrations users made inside it."""
        with self.lock:
            entry = self._by_base.get(ptr)
            if entry is not None and entry.external:
                self._erase(entry)

    def take_inside(self, base: int, size: int) -> list[Registration]:
        """Forget the user registrations that lie in ``[base, base + size)`` (memory being freed);
        return them, to be unlocked."""
        with self.lock:
            index = bisect.bisect_left(self._bases, base)
            inside = []
            while index < len(self._bases) and self._bases[index] < base + size:
                entry = self._by_base[self._bases[index]]
                index += 1
                if not entry.external and entry.end <= base + size:
                    inside.append(entry)
            for entry in inside:
                self._erase(entry)
            return inside

    def drain(self) -> list[Registration]:
        """Forget every range; return those the backend pinned for users (to unlock them)."""
        with self.lock:
            entries = [entry for entry in self._by_base.values() if not entry.external]
            self._by_base.clear()
            self._bases.clear()
            return entries

    def __len__(self) -> int:
        return len(self._by_base)


def _partial_overlap(ptr: int, size: int, entry: Registration) -> OffloadError:
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"[{ptr:#x}, {ptr + size:#x}) overlaps the registered range [{entry.base:#x}, "
                        f"{entry.end:#x}) only in part; a range must lie inside a registered one or "
                        f"apart from every one")
