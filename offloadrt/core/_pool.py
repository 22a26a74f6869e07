"""The per-device memory pool: :class:`MemoryPool` and the free lists buffers go back to."""

from __future__ import annotations

import operator
import threading
import warnings
from typing import TYPE_CHECKING, Any

from .. import api
from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import AllocType, EventInfo
from . import _queue, _runtime
from ._errors import with_context
from ._memory import Buffer

if TYPE_CHECKING:
    from ._device import Device
    from ._queue import Queue

_SMALLEST = 512  # bytes: the smallest size class
_LARGE = 32 << 20  # above this, size classes are multiples of _LARGE_STEP instead of powers of two
_LARGE_STEP = 2 << 20
_SCAN = 8  # cached blocks of a size class looked at per allocation


def size_class(nbytes: int) -> int:
    """The block size the pool uses for ``nbytes``: a power of two from 512 bytes to 32 MiB, then
    multiples of 2 MiB."""
    if nbytes <= _SMALLEST:
        return _SMALLEST
    if nbytes <= _LARGE:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // _LARGE_STEP) * _LARGE_STEP


class _Home:
    """What the buffers of one pool, kind and size class share: their device, and the free lists their
    blocks go back to. ``ready`` holds blocks nobody may still use; ``pending`` those freed while queues
    may still use them, as (address, the queue they were freed on or None, the events to wait for).
    Appending to and popping from the lists needs no lock (each is one atomic list operation)."""

    __slots__ = ("device", "kind", "pool", "size", "ready", "pending", "owner")

    def __init__(self, device: Device, kind: AllocType, pool: MemoryPool | None, size: int, owner: object = None):
        self.device = device
        self.kind = kind
        self.pool = pool
        self.size = size
        self.ready: list[int] = []
        self.pending: list[tuple[int, Any, tuple[Any, ...]]] = []
        self.owner = owner  # what the memory belongs to when no pool owns it (a Program)


class MemoryPool:
    """A device's cache of freed blocks, one free list per memory kind and size class.

    :meth:`Device.allocate` takes a cached block of the right size class, or allocates one with
    ``olMemAlloc``; :meth:`Buffer.close` gives it back. Reuse is ordered by queues: a block freed
    while queues may still use it carries an event recorded on each of them at the free; the queue
    it was freed on may reuse it at once (its order protects it), any other use waits until the
    events have completed. When the device is out of memory the pool gives its cache back and
    retries once before raising ``OUT_OF_RESOURCES``. Size classes are powers of two from 512 bytes
    to 32 MiB, then multiples of 2 MiB.
    """

    def __init__(self, device: Device) -> None:
        self._device = device
        self._handle = device.handle
        self._lock = threading.Lock()  # guards _homes, _by_nbytes's growth, _allocated and _dead
        self._homes: dict[tuple[int, int], _Home] = {}
        self._by_nbytes: list[dict[int, _Home]] = [{} for _ in AllocType]  # per kind: nbytes -> home
        self._allocated = 0  # bytes of live olMemAlloc blocks
        self._dead = False

    @property
    def device(self) -> Device:
        """The device whose memory this pool holds."""
        return self._device

    @property
    def cached_bytes(self) -> int:
        """Bytes in freed blocks the pool keeps for reuse."""
        return sum(home.size * (len(home.ready) + len(home.pending)) for home in list(self._homes.values()))

    @property
    def used_bytes(self) -> int:
        """Bytes of the pool's blocks that are in use (handed out and not closed), in size classes."""
        return self._allocated - self.cached_bytes

    def release(self) -> int:
        """Give every cached block back to the device (``olMemFree``); returns the bytes released.

        Memory in use is untouched. A block that queued work may still use is safe to free: the
        runtime releases it once that work is done.
        """
        released, errors = 0, []
        for home in list(self._homes.values()):
            blocks: list[tuple[int, tuple[Any, ...]]] = []
            while True:
                try:
                    blocks.append((home.ready.pop(), ()))
                except IndexError:
                    break
            while True:
                try:
                    ptr, _, events = home.pending.pop()
                except IndexError:
                    break
                blocks.append((ptr, events))
            for ptr, events in blocks:
                _destroy_events(events)
                try:
                    api.olMemFree(ptr)
                except OffloadError as exc:
                    errors.append(exc)
                released += home.size
        with self._lock:
            self._allocated -= released
        if errors:
            raise OffloadError.join(errors, f"MemoryPool.release on {self._device}: freeing cached blocks failed")
        return released

    def allocate(self, nbytes: int, kind: AllocType = AllocType.DEVICE, queue: Queue | None = None) -> Buffer:
        """The same as :meth:`Device.allocate` on the pool's device."""
        if queue is None and type(nbytes) is int:
            try:
                home = self._by_nbytes[kind].get(nbytes)
            except (TypeError, IndexError):
                home = None
            if home is not None and home.ready:
                try:
                    return Buffer(home.ready.pop(), nbytes, home)
                except IndexError:
                    pass
        return self._allocate(nbytes, kind, queue)

    def _allocate(self, nbytes: object, kind: object, queue: Queue | None) -> Buffer:
        count = _byte_count(nbytes)
        kind = _alloc_type(kind)
        if queue is not None:
            _queue.check(queue, self._device, "allocate with")
        if self._device._runtime.closed:
            raise _runtime.stale()
        if count == 0:
            return Buffer(0, 0, self._home(kind, 0, remember=False))
        size = size_class(count)
        home = self._home(kind, size)
        with self._lock:
            if len(self._by_nbytes[kind]) < 4096:
                self._by_nbytes[kind][count] = home
        ptr = self._reuse(home, queue)
        if ptr is None:
            ptr = self._new_block(kind, size, count)
        buffer = Buffer(ptr, count, home)
        if queue is not None:
            buffer._queues = queue
        return buffer

    def _home(self, kind: AllocType, size: int, remember: bool = True) -> _Home:
        with self._lock:
            if self._dead:
                raise _runtime.stale()
            home = self._homes.get((kind, size))
            if home is None:
                home = _Home(self._device, kind, self, size)
                if remember:
                    self._homes[kind, size] = home
            return home

    def _reuse(self, home: _Home, queue: Queue | None) -> int | None:
        """A cached block of ``home`` that ``queue`` (None: the host) may use now, or None."""
        try:
            return home.ready.pop()
        except IndexError:
            pass
        pending = home.pending
        for _ in range(min(_SCAN, len(pending))):
            try:
                entry = pending.pop(0)
            except IndexError:
                return None
            ptr, owner, events = entry
            usable = owner is queue and queue is not None and queue._handle is not None
            if not usable:
                try:
                    usable = all(api.olGetEventInfo(event._handle, EventInfo.IS_COMPLETE) for event in events)
                except OffloadError:
                    usable = False
            if usable:
                return ptr
            pending.append(entry)
        return None

    def _new_block(self, kind: AllocType, size: int, nbytes: int) -> int:
        try:
            ptr = int(api.olMemAlloc(self._handle, kind, size))
        except OffloadError as exc:
            if exc.code != ErrorCode.OUT_OF_RESOURCES:
                raise with_context(exc, f"allocating {nbytes} bytes of {kind.name} memory on {self._device}") from exc
            released = self.release()
            try:
                ptr = int(api.olMemAlloc(self._handle, kind, size))
            except OffloadError as again:
                raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                                   f"{self._device} could not allocate {nbytes} bytes of {kind.name} memory (a "
                                   f"{size}-byte block), even after the pool gave back its cache ({released} bytes): "
                                   f"{again.details}. Close buffers you no longer need, or allocate less") from exc
        with self._lock:
            self._allocated += size
        return ptr

    def _free_used(self, ptr: int, home: _Home, queues: Any) -> None:
        """Take back the block of a closed buffer that was used on ``queues`` (a Queue or a set)."""
        many = tuple(queues) if type(queues) is set else (queues,)
        marks = [queue._mark() for queue in many]
        if any(mark is False for mark in marks):  # a failed queue: its work may never be known to be done
            warnings.warn(f"offloadrt: a {home.size}-byte block of {self._device} was used on a queue that failed; "
                          f"it is not reused (the runtime frees it at shutdown)", OffloadWarning, stacklevel=4)
            return
        events = tuple(mark for mark in marks if mark is not None)
        if not events:
            home.ready.append(ptr)
            return
        owner = many[0] if len(many) == 1 and many[0]._handle is not None else None
        home.pending.append((ptr, owner, events))

    def _abandon(self) -> None:
        """The runtime was shut down: it freed every block; forget them."""
        with self._lock:
            self._dead = True
            for home in self._homes.values():
                home.ready.clear()
                home.pending.clear()
            self._homes.clear()
            self._by_nbytes = [{} for _ in AllocType]
            self._allocated = 0

    def _abandon_after_fork(self) -> None:
        """In a forked child: the parent's runtime (and its memory) is not this process's; forget it
        (the lock is new: another thread of the parent may have held it at the fork)."""
        self._lock = threading.Lock()
        self._abandon()

    def __repr__(self) -> str:
        return f"<MemoryPool of {self._device}: {self.used_bytes} bytes used, {self.cached_bytes} bytes cached>"


def _destroy_events(events: tuple[Any, ...]) -> None:
    for event in events:
        try:
            api.olDestroyEvent(event)
        except OffloadError:
            pass  # the runtime was shut down meanwhile: the event is gone with it


def _byte_count(nbytes: object) -> int:
    try:
        count = operator.index(nbytes)  # type: ignore[arg-type]
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"nbytes must be an integer number of bytes, got {type(nbytes).__name__}") from None
    if count < 0:
        raise OffloadError(ErrorCode.INVALID_SIZE, f"nbytes must not be negative, got {count}")
    return count


def _alloc_type(kind: object) -> AllocType:
    try:
        return AllocType(operator.index(kind))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise OffloadError(ErrorCode.INVALID_ENUMERATION,
                           f"kind must be an AllocType (DEVICE, HOST or MANAGED), got {kind!r}") from None


