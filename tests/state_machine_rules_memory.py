"""Rules for memory: olMemAlloc, olMemFree, olGetMemInfo(Size), olMemcpy, olMemFill,
olMemRegister, olMemUnregister, and the test's own reads and writes of the bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from state_machine_model import Buffer, QueueModel, known, unknown
from state_machine_world import E, World, step

from offloadrt import AllocType, ErrorCode, MemInfo, api

MAX_ALLOCATIONS = 12
MEM_INFO_SIZES = {MemInfo.DEVICE: 8, MemInfo.BASE: 8, MemInfo.SIZE: 8, MemInfo.TYPE: 4}
TOO_BIG = (1 << 64) + 8  # does not fit size_t (would be 8 if cut to 64 bits)


def payload_as(data: st.DataObject, raw: bytes) -> Any:
    """``raw`` as one of the bytes-like types the API accepts."""
    kind = data.draw(st.sampled_from(["bytes", "bytearray", "memoryview"]), label="payload type")
    return raw if kind == "bytes" else bytearray(raw) if kind == "bytearray" else memoryview(raw)


class MemoryRules(World):
    # ---- queue arguments shared by copies and fills ------------------------------------------------
    def draw_queue(self, data: st.DataObject) -> QueueModel | None:
        """A live queue, a destroyed one, or None (a call done when it returns)."""
        options: list[QueueModel | None] = [None, *self.live_queues(), *self.live_queues()]
        destroyed = [q for q in self.queues if q.destroyed]
        if destroyed:
            options.append(destroyed[-1])
        return data.draw(st.sampled_from(options), label="queue")

    def draw_range(self, data: st.DataObject, label: str, allocation: bool = False) -> tuple[Buffer, int]:
        pool = self.allocations if allocation else self.live_buffers()
        buf = data.draw(st.sampled_from(pool), label=label)
        return buf, data.draw(st.integers(0, buf.size - 1), label=f"{label} offset")

    # ---- allocation ------------------------------------------------------------------------------
    @rule(data=st.data())
    @step
    def mem_alloc(self, data: st.DataObject) -> None:
        variant = data.draw(st.sampled_from(["ok"] * 8 + ["size 0", "size -1", "size 2**64+8", "size 2**63",
                                                           "bad kind", "null device", "wrong device",
                                                           "stale device"]), label="variant")
        if variant == "ok" and len(self.allocations) >= MAX_ALLOCATIONS:
            variant = "size 0"
        kind: Any = data.draw(st.sampled_from(list(AllocType)), label="kind")
        size: Any = data.draw(st.integers(1, 4096), label="size")
        device: Any = self.host
        codes: set[ErrorCode] = set()
        if variant.startswith("size"):
            size = {"size 0": 0, "size -1": -1, "size 2**64+8": TOO_BIG, "size 2**63": 1 << 63}[variant]
            codes = {E.OUT_OF_RESOURCES} if size == 1 << 63 else {E.INVALID_SIZE}
        elif variant == "bad kind":
            kind, codes = data.draw(st.sampled_from([3, -1, 0x7FFFFFFF])), {E.INVALID_ENUMERATION}
        elif variant == "null device":
            device, codes = None, {E.INVALID_NULL_HANDLE}
        elif variant == "wrong device":
            device, codes = self.draw_wrong(data, api.Device), {E.INVALID_ARGUMENT}
        elif variant == "stale device":
            if not self.stale:
                return
            device, codes = self.stale["device"][0], {E.INVALID_DEVICE}
        ok, address = self.api.call("olMemAlloc", device, kind, size, ok=not codes, codes=codes)
        if not ok:
            return
        self.add_allocation(address, size, AllocType(kind))
        if data.draw(st.booleans(), label="initialise"):
            buf = self.allocations[-1]
            self.host_write(buf, 0, data.draw(st.binary(min_size=size, max_size=size), label="contents"))

    def add_allocation(self, address: int, size: int, kind: AllocType) -> Buffer:
        if not isinstance(address, int) or address <= 0:
            raise AssertionError(f"olMemAlloc returned {address!r}")
        for other in self.live_buffers():
            if address < other.address + other.size and other.address < address + size:
                raise AssertionError(f"olMemAlloc returned [{address:#x}, +{size}), which overlaps {other.name}")
        buf = Buffer(self.new_name("a"), address, size, kind.name)
        self.allocations.append(buf)
        self.trace.append(f"   # that is {buf.name}")
        return buf

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def mem_free(self, data: st.DataObject) -> None:
        variants = ["interior", "freed", "plain", "None", "0", "str", "-1", "2**64"]
        if self.allocations:
            variants += ["live"] * 4
        variant = data.draw(st.sampled_from(variants), label="variant")
        address: Any
        if variant == "live":
            address = data.draw(st.sampled_from(self.allocations), label="allocation").address
        elif variant == "interior" and any(b.size > 1 for b in self.allocations):
            buf = data.draw(st.sampled_from([b for b in self.allocations if b.size > 1]), label="allocation")
            address = buf.address + data.draw(st.integers(1, buf.size - 1), label="offset")
        elif variant == "freed" and self.freed:
            address = data.draw(st.sampled_from(self.freed), label="freed").address
        elif variant in ("None", "0", "str", "-1", "2**64"):
            address = {"None": None, "0": 0, "str": "0x1000", "-1": -1, "2**64": 1 << 64}[variant]
        else:
            address = data.draw(st.sampled_from(self.plain), label="plain").address
        self.free(address)

    def free(self, address: Any) -> None:
        """``olMemFree(address)`` with the outcome the model predicts."""
        if address is None or address == 0:
            self.api.call("olMemFree", address, ok=False, codes={E.INVALID_NULL_POINTER})
            return
        target = self.allocation_at(address) if isinstance(address, int) else None
        if target is None or target.address != address:
            self.api.call("olMemFree", address, ok=False, codes={E.INVALID_ARGUMENT})
            return
        self.api.call("olMemFree", address)
        target.live = False  # gone for the test at once, whatever queued work still uses it
        self.allocations.remove(target)
        self.freed.append(target)

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def mem_info(self, data: st.DataObject) -> None:
        variants = ["plain", "None", "end"] + (["inside"] * 4 if self.allocations else []) + \
            (["freed"] if self.freed else []) + (["bad prop"] if self.allocations else [])
        variant = data.draw(st.sampled_from(variants), label="variant")
        prop: Any = data.draw(st.sampled_from(list(MemInfo)), label="prop")
        size_query = data.draw(st.booleans(), label="size query")
        name = "olGetMemInfoSize" if size_query else "olGetMemInfo"
        address: Any
        if variant in ("inside", "bad prop"):
            buf = data.draw(st.sampled_from(self.allocations), label="allocation")
            address = buf.address + data.draw(st.integers(0, buf.size - 1), label="offset")
        elif variant == "end" and self.allocations:
            buf = data.draw(st.sampled_from(self.allocations), label="allocation")
            address = buf.address + buf.size
        elif variant == "freed":
            address = data.draw(st.sampled_from(self.freed), label="freed").address
        elif variant == "None":
            self.api.call(name, None, prop, ok=False, codes={E.INVALID_NULL_POINTER})
            return
        else:
            address = self.plain[0].address
        if variant == "bad prop":
            self.api.call(name, address, data.draw(st.sampled_from([4, -1, 0x7FFFFFFF])), ok=False,
                          codes={E.INVALID_ENUMERATION})
            return
        target = self.allocation_at(address)
        if target is None:
            self.api.call(name, address, prop, ok=False, codes={E.NOT_FOUND})
            return
        _, value = self.api.call(name, address, prop)
        expected = {MemInfo.DEVICE: self.host, MemInfo.BASE: target.address, MemInfo.SIZE: target.size,
                    MemInfo.TYPE: AllocType[target.kind]}[prop]
        if size_query:
            expected = MEM_INFO_SIZES[prop]
        if (value is not expected) if prop is MemInfo.DEVICE and not size_query else (value != expected):
            raise AssertionError(f"{name}({target.name}+{address - target.address}, {prop.name}) is {value!r}, "
                                 f"expected {expected!r}")
        if prop is MemInfo.TYPE and not size_query and type(value) is not AllocType:
            raise AssertionError(f"olGetMemInfo TYPE gave {type(value).__name__}, not AllocType")

    # ---- copies and fills ------------------------------------------------------------------------
    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def mem_copy(self, data: st.DataObject) -> None:
        variant = data.draw(st.sampled_from(
            ["ok"] * 12 + ["size 0", "past the end", "size -1", "size 2**64+8", "null dst", "null src",
                           "null dst device", "null src device", "wrong dst device", "wrong src device",
                           "stale dst device", "stale src device", "wrong queue"]), label="variant")
        queue = self.draw_queue(data)
        dst, dst_offset = self.draw_range(data, "dst")
        src, src_offset = self.draw_range(data, "src")
        room = min(dst.size - dst_offset, src.size - src_offset)
        size: Any = data.draw(st.integers(1, room), label="size")
        args: list[Any] = [queue.handle if queue else None, dst.address + dst_offset, self.host,
                           src.address + src_offset, self.host, size]
        code: ErrorCode | None = None
        if variant == "past the end":
            sides = [(s, o) for s, o in ((dst, dst_offset), (src, src_offset)) if s.is_allocation]
            if not sides:
                return
            side, offset = data.draw(st.sampled_from(sides), label="overrun side")
            size = args[5] = side.size - offset + data.draw(st.integers(1, 64), label="overrun")
            code = E.INVALID_SIZE
        elif variant.startswith("size") and variant != "size 0":
            args[5], code = {"size -1": -1, "size 2**64+8": TOO_BIG}[variant], E.INVALID_SIZE
        elif variant.startswith("null d") or variant.startswith("null s"):
            position = 1 if variant == "null dst" else 3 if variant == "null src" else None
            if position is None:
                position = 2 if "dst" in variant else 4
                args[position], code = None, E.INVALID_NULL_HANDLE
            else:
                args[position], code = data.draw(st.sampled_from([None, 0])), E.INVALID_NULL_POINTER
        elif variant.startswith("wrong") and variant != "wrong queue":
            args[2 if "dst" in variant else 4] = self.draw_wrong(data, api.Device)
            code = E.INVALID_ARGUMENT
        elif variant.startswith("stale"):
            if not self.stale:
                return
            args[2 if "dst" in variant else 4], code = self.stale["device"][0], E.INVALID_DEVICE
        elif variant == "wrong queue":
            args[0], code = self.draw_wrong(data, api.Queue), E.INVALID_ARGUMENT
        if variant == "size 0":
            args[5] = size = 0
        self.queued_memory_call("olMemcpy", queue, args, code, variant == "past the end", size == 0 and code is None,
                                reads=[(src, src_offset, size)], writes=[(dst, dst_offset, size)],
                                compute=(lambda inputs: [unknown(size)]) if dst is src and
                                abs(dst_offset - src_offset) < size else (lambda inputs: [inputs[0]]))

    def queued_memory_call(self, name: str, queue: QueueModel | None, args: list[Any], code: ErrorCode | None,
                           checked_after_queue: bool, empty: bool, reads: list[Any], writes: list[Any],
                           compute: Any) -> None:
        """Call a copy or fill with the outcome the model predicts; apply it when it will run.

        ``code`` is the error of the one bad argument (None: all are good); ``checked_after_queue``
        says the API finds it only after it found a destroyed queue."""
        if code is not None:
            if queue is not None and queue.destroyed and checked_after_queue:
                code = E.INVALID_QUEUE
            self.api.call(name, *args, ok=False, codes={code})
            return
        if queue is not None and queue.destroyed:
            self.api.call(name, *args, ok=False, codes={E.INVALID_QUEUE})
            return
        if empty and name == "olMemcpy":
            self.api.call(name, *args)  # nothing to copy: done before the queue's state matters
            return
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call(name, *args, ok=ok, codes=codes)
        if self.after_work(queue, accepted, result):
            if empty:
                reads, writes, compute = [], [], lambda _inputs: []
            self.model.run(queue, reads, writes, compute, f"{name} on {queue.name if queue else 'no queue'}")

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def mem_fill(self, data: st.DataObject) -> None:
        variant = data.draw(st.sampled_from(
            ["ok"] * 10 + ["size 0", "past the end", "not a multiple", "empty pattern", "None pattern",
                          "int pattern", "size -1", "str size", "null ptr", "wrong queue"]), label="variant")
        queue = self.draw_queue(data)
        buf, offset = self.draw_range(data, "ptr", allocation=variant == "past the end" and bool(self.allocations))
        width = data.draw(st.sampled_from([1, 2, 3, 4, 8, 16]), label="pattern size")
        pattern = data.draw(st.binary(min_size=width, max_size=width), label="pattern")
        room = (buf.size - offset) // width
        if room == 0:
            offset, room = 0, buf.size // width
        count = data.draw(st.integers(1, max(1, room)), label="copies") if room else 0
        if room == 0:
            variant = "empty pattern"  # nothing fits this buffer: exercise a refusal instead
        size: Any = width * count
        args: list[Any] = [queue.handle if queue else None, buf.address + offset, payload_as(data, pattern), size]
        code: ErrorCode | None = None
        if variant == "past the end":
            if not buf.is_allocation:
                return
            args[3] = size = width * ((buf.size - offset) // width + data.draw(st.integers(1, 4), label="overrun"))
            code = E.INVALID_SIZE
        elif variant == "not a multiple" and width > 1:
            args[3], code = size - data.draw(st.integers(1, width - 1)), E.INVALID_SIZE
        elif variant == "empty pattern":
            args[2], code = b"", E.INVALID_SIZE
        elif variant == "None pattern":
            args[2], code = None, E.INVALID_NULL_POINTER
        elif variant == "int pattern":
            args[2], code = 7, E.INVALID_ARGUMENT
        elif variant == "size -1":
            args[3], code = -1, E.INVALID_SIZE
        elif variant == "str size":
            args[3], code = "16", E.INVALID_ARGUMENT
        elif variant == "null ptr":
            args[1], code = data.draw(st.sampled_from([None, 0])), E.INVALID_NULL_POINTER
        elif variant == "wrong queue":
            args[0], code = self.draw_wrong(data, api.Queue), E.INVALID_ARGUMENT
        elif variant == "size 0":
            args[3] = size = 0
        filled = (pattern * (size // width + 1))[:size] if isinstance(size, int) and size > 0 else b""
        self.queued_memory_call("olMemFill", queue, args, code, variant in ("null ptr", "past the end"), size == 0,
                                reads=[],
                                writes=[(buf, offset, len(filled))], compute=lambda _inputs: [known(filled)])

    # ---- registration -------------------------------------------------------------------------------
    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def mem_register(self, data: st.DataObject) -> None:
        variant = data.draw(st.sampled_from(["ok"] * 8 + ["size 0", "size -1", "null ptr", "null device",
                                                           "wrong device", "stale device", "flags 2**32",
                                                           "end of address space"]), label="variant")
        buf, offset = self.draw_range(data, "ptr")
        size = data.draw(st.integers(1, buf.size - offset), label="size")
        flags = data.draw(st.sampled_from([0, 0, 1, 0xFFFFFFFF]), label="flags")
        args: list[Any] = [self.host, buf.address + offset, size, flags]
        code = {"size 0": E.INVALID_SIZE, "size -1": E.INVALID_SIZE, "null ptr": E.INVALID_NULL_POINTER,
                "null device": E.INVALID_NULL_HANDLE, "wrong device": E.INVALID_ARGUMENT,
                "stale device": E.INVALID_DEVICE, "flags 2**32": E.INVALID_ARGUMENT,
                "end of address space": E.INVALID_SIZE}.get(variant)
        if variant.startswith("size"):
            args[2] = 0 if variant == "size 0" else -1
        elif variant == "null ptr":
            args[1] = data.draw(st.sampled_from([None, 0]))
        elif variant == "null device":
            args[0] = None
        elif variant == "wrong device":
            args[0] = self.draw_wrong(data, api.Device)
        elif variant == "stale device":
            if not self.stale:
                return
            args[0] = self.stale["device"][0]
        elif variant == "flags 2**32":
            args[3] = 1 << 32
        elif variant == "end of address space":
            args[1], args[2] = (1 << 64) - 16, 32
        if code is not None:
            self.api.call("olMemRegister", *args, ok=False, codes={code})
            return
        expected = self.registrations.register(args[1], size)
        ok, result = self.api.call("olMemRegister", *args, ok=expected, codes=set() if expected else
                                   {E.INVALID_ARGUMENT})
        if ok and result != args[1]:
            raise AssertionError(f"olMemRegister on the host device returned {result:#x}, not {args[1]:#x}")

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def mem_unregister(self, data: st.DataObject) -> None:
        ranges = [r for r in self.registrations.registered_ranges()]
        variants = ["unregistered", "null ptr", "null device", "wrong device"] + (["registered"] * 6 if ranges else [])
        variant = data.draw(st.sampled_from(variants), label="variant")
        if variant == "null device":
            self.api.call("olMemUnregister", None, self.plain[0].address, ok=False, codes={E.INVALID_NULL_HANDLE})
            return
        if variant == "wrong device":
            self.api.call("olMemUnregister", self.draw_wrong(data, api.Device), self.plain[0].address, ok=False,
                          codes={E.INVALID_ARGUMENT})
            return
        if variant == "null ptr":
            self.api.call("olMemUnregister", self.host, data.draw(st.sampled_from([None, 0])), ok=False,
                          codes={E.INVALID_NULL_POINTER})
            return
        if variant == "registered":
            base, size = data.draw(st.sampled_from(ranges), label="range")
            address = base + data.draw(st.integers(0, size - 1), label="offset")
        else:
            buf, offset = self.draw_range(data, "ptr")
            address = buf.address + offset
        expected = self.registrations.unregister(address)
        self.api.call("olMemUnregister", self.host, address, ok=expected,
                      codes=set() if expected else {E.INVALID_ARGUMENT})

    # ---- the test's own access to the bytes --------------------------------------------------------
    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def host_scribble(self, data: st.DataObject) -> None:
        """The test writes bytes itself (never into freed memory: only live buffers are drawn)."""
        buf, offset = self.draw_range(data, "target")
        size = data.draw(st.integers(1, min(64, buf.size - offset)), label="size")
        self.host_write(buf, offset, data.draw(st.binary(min_size=size, max_size=size), label="bytes"))

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def check_data(self, data: st.DataObject) -> None:
        """Compare a buffer with the model (only the bytes no unfinished work may still write)."""
        self.check_buffer(data.draw(st.sampled_from(self.live_buffers()), label="buffer"))
        self.check_host_calls()
