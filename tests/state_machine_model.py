"""The model behind tests/test_api_state_machine.py: what the bytes of every buffer should be,
which queued work may still be running, which queues and events are bound to fail, and which
host memory is registered.

Work is applied to the model in submission order. Vector clocks say which earlier work is
ordered before new work (the same queue, ``olWaitEvents``, or completion the test has seen);
where unordered work touches the same bytes the outcome is a race, and the model marks the
bytes it cannot be sure of unknown rather than guess. Bytes are compared only where the model
knows them and no unfinished work writes them, so a mismatch is always a real one.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable
from dataclasses import dataclass

Clock = dict[int, int]  # model queue id -> sequence number of its last work item covered
KNOWN = 0xFF


def join(a: Clock, b: Clock) -> Clock:
    out = dict(a)
    for key, value in b.items():
        if out.get(key, 0) < value:
            out[key] = value
    return out


class Buffer:
    """Memory the model tracks: an ``olMemAlloc`` allocation, host memory the test owns, a
    program's global variable, or the expected bytes of a snapshot host function (no address).

    ``data`` holds the expected bytes and ``known`` is 0xFF where the model is sure of them.
    """

    def __init__(self, name: str, address: int, size: int, kind: str, keepalive: object = None):
        self.name = name
        self.address = address
        self.size = size
        self.kind = kind  # "HOST"/"DEVICE"/"MANAGED" (olMemAlloc), "plain", "global" or "snapshot"
        self.data = bytearray(size)
        self.known = bytearray(size)
        self.live = True
        self.keepalive = keepalive  # the ctypes buffer of plain memory, the program of a global
        self.registered_users = 0  # olMemRegister users inside it (not HOST allocations' own pin)

    @property
    def is_allocation(self) -> bool:
        return self.kind in ("HOST", "DEVICE", "MANAGED")

    def actual(self, offset: int = 0, size: int | None = None) -> bytes:
        assert self.live and self.address, f"reading {self.name}, which is gone"
        return ctypes.string_at(self.address + offset, self.size - offset if size is None else size)

    def __repr__(self) -> str:
        return self.name


Range = tuple[Buffer, int, int]  # (buffer, offset, length)
Bytes = tuple[bytes, bytes]  # (values, known mask)


def overlap(a: Range, b: Range) -> tuple[int, int] | None:
    if a[0] is not b[0]:
        return None
    low = max(a[1], b[1])
    high = min(a[1] + a[2], b[1] + b[2])
    return (low, high) if low < high else None


class Op:
    """One piece of queued work, as far as data goes: what it reads and writes."""

    __slots__ = ("queue", "seq", "reads", "writes", "label", "done")

    def __init__(self, queue: int, seq: int, reads: list[Range], writes: list[Range], label: str):
        self.queue = queue
        self.seq = seq
        self.reads = reads
        self.writes = writes
        self.label = label
        self.done = False


@dataclass
class Doom:
    """Why a queue will fail: the queues that may be named as the origin, each with a token
    the error's details must contain, and the work known finished once the failure is seen."""

    origins: frozenset[tuple[int, str]]
    finished: Clock


class QueueModel:
    def __init__(self, ident: int, name: str, handle: object):
        self.ident = ident
        self.name = name
        self.handle = handle
        self.seq = 0
        self.clock: Clock = {}
        self.destroyed = False
        self.doom: Doom | None = None  # set when work that fails (or a wait on a failed event) is queued
        self.failure_seen = False  # a call has reported the failure: new work must be refused
        self.drained = -1  # ``seq`` when olSyncQueue last returned: equal to ``seq`` while nothing was added

    def __repr__(self) -> str:
        return self.name


class EventModel:
    def __init__(self, ident: int, name: str, handle: object, queue: QueueModel, clock: Clock, timed: bool = False):
        self.ident = ident
        self.name = name
        self.handle = handle
        self.queue = queue
        self.timed = timed  # created with EventFlags.ENABLE_PROFILING: olGetEventElapsedTime takes it
        self.clock = clock  # covers the event's own place on its queue
        self.doom = queue.doom  # the event is never reached when its queue is bound to fail first
        self.destroyed = False

    def __repr__(self) -> str:
        return self.name


def unknown(size: int) -> Bytes:
    return bytes(size), bytes(size)


def known(values: bytes) -> Bytes:
    return bytes(values), bytes([KNOWN]) * len(values)


class Model:
    """Expected bytes, unfinished work and what the test has seen finish (``finished``)."""

    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        self.finished: Clock = {}
        self.pending: list[Op] = []
        self.log = log  # where to note each piece of work applied (the trace of a run)

    def tick(self, queue: QueueModel) -> Clock:
        """An item without data (an event, a wait, a host function) takes its place on ``queue``."""
        queue.seq += 1
        clock = self.ordered_clock(queue)
        clock[queue.ident] = queue.seq
        return clock

    def ordered_clock(self, queue: QueueModel | None) -> Clock:
        """What work submitted now on ``queue`` (None: the calling thread) is ordered after."""
        if queue is None:
            return self.finished
        queue.clock = join(queue.clock, self.finished)
        return queue.clock

    def run(self, queue: QueueModel | None, reads: list[Range], writes: list[Range],
            compute: Callable[[list[Bytes]], list[Bytes]], label: str) -> Op:
        """Apply work that reads ``reads`` and writes ``compute(inputs)`` to ``writes``: queued on
        ``queue``, or done by the time the call returns (``None``)."""
        if queue is not None:
            queue.seq += 1
            clock = self.ordered_clock(queue)
            clock[queue.ident] = queue.seq
            op = Op(queue.ident, queue.seq, reads, writes, label)
        else:
            clock = self.finished
            op = Op(0, 0, reads, writes, label)
        unordered = [a for a in self.pending if clock.get(a.queue, 0) < a.seq]
        if self.log is not None:
            spans = ", ".join(f"{b.name}[{o}:{o + n}]" for b, o, n in writes)
            racing = ", ".join(f"{a.label}#{a.seq}" for a in unordered
                               if any(overlap(w, x) or overlap(w, r) for w in a.writes + a.reads
                                      for x in writes for r in reads))
            self.log(f"   # model: {label}#{op.seq} writes {spans or 'nothing'}"
                     + (f"; unordered with {racing}" if racing else ""))
        inputs: list[Bytes] = []
        for read in reads:
            buf, offset, size = read
            values = bytes(buf.data[offset:offset + size])
            mask = bytearray(buf.known[offset:offset + size])
            for other in unordered:  # it may read before or after unordered writes
                for write in other.writes:
                    span = overlap(write, read)
                    if span:
                        mask[span[0] - offset:span[1] - offset] = bytes(span[1] - span[0])
            inputs.append((values, bytes(mask)))
        outputs = compute(inputs)
        assert len(outputs) == len(writes)
        for (buf, offset, size), (values, sure) in zip(writes, outputs):
            assert len(values) == size and len(sure) == size, (label, size, len(values), len(sure))
            buf.data[offset:offset + size] = values
            buf.known[offset:offset + size] = sure
        for other in unordered:
            both_write = any(overlap(write, mine) for write in other.writes for mine in writes)
            if both_write or any(overlap(read, mine) for read in other.reads for mine in writes):
                # It may read what this writes; and where both write, either may land last, and
                # not only where they meet: a fill doubles its pattern by copying from its own
                # start, so a write racing one part of it spreads to all of it. Forget both.
                self._taint(other)
            if both_write:
                for buf, offset, size in writes:
                    buf.known[offset:offset + size] = bytes(size)
        if queue is not None:
            self.pending.append(op)
        else:
            op.done = True
        return op

    def _taint(self, op: Op) -> None:
        """``op``'s inputs are uncertain: forget what it and pending work reading its output wrote."""
        tainted = list(op.writes)
        start = self.pending.index(op)
        for later in self.pending[start + 1:]:
            if any(overlap(read, bad) for read in later.reads for bad in tainted):
                tainted.extend(later.writes)
        for buf, offset, size in tainted:
            buf.known[offset:offset + size] = bytes(size)

    def learn(self, clock: Clock) -> None:
        """The test has seen everything ``clock`` covers finish."""
        self.finished = join(self.finished, clock)
        if self.log is not None:
            self.log(f"   # model: finished {sorted(self.finished.items())}")
        keep = []
        for op in self.pending:
            if self.finished.get(op.queue, 0) >= op.seq:
                op.done = True
            else:
                keep.append(op)
        self.pending = keep

    def learn_everything(self) -> None:
        """Every queue has been drained (the last olShutDown)."""
        for op in self.pending:
            op.done = True
        self.pending = []

    def visible(self, buf: Buffer) -> bytearray:
        """The known mask of ``buf`` without the bytes unfinished work may still write."""
        mask = bytearray(buf.known)
        for op in self.pending:
            for wbuf, offset, size in op.writes:
                if wbuf is buf:
                    mask[offset:offset + size] = bytes(size)
        return mask

    def mismatches(self, buf: Buffer, actual: bytes) -> tuple[int, list[str]]:
        """(bytes compared, descriptions of the first differing bytes)."""
        mask = self.visible(buf)
        compared = sum(1 for b in mask if b)
        m = int.from_bytes(mask, "little")
        if int.from_bytes(actual, "little") & m == int.from_bytes(buf.data, "little") & m:
            return compared, []
        wrong = [f"{buf.name}+{i}: expected {buf.data[i]:#04x}, got {actual[i]:#04x}"
                 for i in range(buf.size) if mask[i] and actual[i] != buf.data[i]]
        return compared, wrong[:8] + ([f"... {len(wrong) - 8} more"] if len(wrong) > 8 else [])


# ---- registered host memory ----------------------------------------------------------------------

class Registrations:
    """The host device's registered ranges as ``olMemRegister`` documents them: a range inside a
    registered one adds a user, a partial overlap is refused, the last user's unregister forgets
    it. On the host device every allocation is plain host memory, so none is registered until a
    user registers it, and freeing memory leaves the registrations made inside it.
    """

    def __init__(self) -> None:
        self.entries: dict[int, list[int]] = {}  # base -> [size, users]

    def _containing(self, address: int) -> tuple[int, list[int]] | None:
        for base, entry in self.entries.items():
            if base <= address < base + entry[0]:
                return base, entry
        return None

    def register(self, ptr: int, size: int) -> bool:
        found = self._containing(ptr)
        if found is not None:
            base, entry = found
            if ptr + size > base + entry[0]:
                return False
            entry[1] += 1
            return True
        if any(ptr < base < ptr + size for base in self.entries):
            return False
        self.entries[ptr] = [size, 1]
        return True

    def unregister(self, ptr: int) -> bool:
        found = self._containing(ptr)
        if found is None:
            return False
        base, entry = found
        entry[1] -= 1
        if entry[1] == 0:
            del self.entries[base]
        return True

    def registered_ranges(self) -> Iterable[tuple[int, int]]:
        return [(base, entry[0]) for base, entry in self.entries.items()]
