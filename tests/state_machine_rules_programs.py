"""Rules for programs, symbols and kernels: olCreateProgram, olDestroyProgram, olIsValidBinary,
olGetSymbol, olGetSymbolInfo(Size), olLaunchKernel (with the kernels' effects on the bytes) and
olCalculateOptimalOccupancy."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from state_machine_kernels import (
    GLOBAL_INITIAL,
    GLOBAL_NAMES,
    KERNEL_NAMES,
    Effect,
    Shape,
    fail_effect,
    increment_effect,
    out_elements,
    pointer_effect,
    sequence_effect,
    spin_effect,
    write_effect,
)
from state_machine_model import KNOWN, Buffer, QueueModel
from state_machine_rules_memory import payload_as
from state_machine_world import E, ProgramModel, SymbolModel, World, step

from offloadrt import ErrorCode, SymbolInfo, SymbolKind, api

MAX_PROGRAMS = 3
SYMBOL_SIZES = {SymbolInfo.KIND: 4, SymbolInfo.GLOBAL_VARIABLE_ADDRESS: 8, SymbolInfo.GLOBAL_VARIABLE_SIZE: 8}
MAX_LOCAL_MEMORY = 2097152  # the host device's WORK_GROUP_LOCAL_MEM_SIZE (checked at start)


def has_program(self: World) -> bool:
    return self.host is not None and bool(self.programs)


class ProgramRules(World):
    def bad_images(self) -> list[tuple[Any, ErrorCode]]:
        image = self.IMAGE
        return [(b"", E.INVALID_BINARY), (b"not an ELF image", E.INVALID_BINARY),
                (image[:64], E.INVALID_BINARY), (image[:len(image) // 2], E.INVALID_BINARY),
                (image[:-1], E.INVALID_BINARY), (None, E.INVALID_NULL_POINTER), (42, E.INVALID_ARGUMENT)]

    def symbol(self, program: ProgramModel, name: str, kind: SymbolKind) -> SymbolModel | None:
        """``olGetSymbol`` of a symbol basic.c has; the same handle every time."""
        if program.destroyed:
            self.api.call("olGetSymbol", program.handle, name, kind, ok=False, codes={E.INVALID_ARGUMENT})
            return None
        handle = self.api.call("olGetSymbol", program.handle, name, kind)[1]
        cached = program.symbols.get((name, kind))
        if cached is not None:
            if handle is not cached:
                raise AssertionError(f"olGetSymbol({program.name}, {name!r}) gave a new handle the second time")
            return next(s for s in self.symbols if s.handle is handle)
        if type(handle) is not api.Symbol:
            raise AssertionError(f"olGetSymbol returned {handle!r}")
        program.symbols[(name, kind)] = handle
        model = SymbolModel(name, kind, program, handle, f"{program.name}.{name}")
        self.names.add(handle, model.label)
        self.symbols.append(model)
        return model

    def load_program(self, image: Any, scribble: bool = False) -> ProgramModel:
        handle = self.api.call("olCreateProgram", self.host, image)[1]
        if type(handle) is not api.Program:
            raise AssertionError(f"olCreateProgram returned {handle!r}")
        if scribble:  # the runtime copied the image: the caller may reuse its buffer at once
            image[:] = bytes(len(image))
        program = ProgramModel(next(self.ids), "", handle)
        program.name = f"p{program.ident}"
        self.names.add(handle, program.name)
        self.programs.append(program)
        for name, size in GLOBAL_NAMES.items():
            symbol = self.symbol(program, name, SymbolKind.GLOBAL_VARIABLE)
            assert symbol is not None
            address = self.api.call("olGetSymbolInfo", symbol.handle, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)[1]
            reported = self.api.call("olGetSymbolInfo", symbol.handle, SymbolInfo.GLOBAL_VARIABLE_SIZE)[1]
            if reported != size:
                raise AssertionError(f"{program.name}.{name} has size {reported}, basic.c says {size}")
            buf = Buffer(f"{program.name}.{name}", address, size, "global", keepalive=program)
            buf.data[:] = GLOBAL_INITIAL[name]
            buf.known[:] = bytes([KNOWN]) * size
            program.globals[name] = buf
            self.check_buffer(buf)  # a fresh load has its own, initialised globals
        return program

    # ---- programs ---------------------------------------------------------------------------------------
    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def create_program(self, data: st.DataObject) -> None:
        variant = data.draw(st.sampled_from(["ok"] * 3 + ["reused buffer", "bad image", "null device",
                                                           "wrong device", "stale device"]), label="variant")
        if variant in ("ok", "reused buffer") and len(self.live_programs()) < MAX_PROGRAMS:
            if variant == "reused buffer":
                self.load_program(bytearray(self.IMAGE), scribble=True)
            else:
                self.load_program(payload_as(data, self.IMAGE))
            return
        if variant == "bad image" or variant in ("ok", "reused buffer"):
            image, code = data.draw(st.sampled_from(self.bad_images()), label="image")
            self.api.call("olCreateProgram", self.host, image, ok=False, codes={code})
            return
        device, code = {"null device": (None, E.INVALID_NULL_HANDLE),
                        "wrong device": (self.draw_wrong(data, api.Device), E.INVALID_ARGUMENT),
                        "stale device": (self.stale.get("device", [None])[0], E.INVALID_DEVICE)}[variant]
        self.api.call("olCreateProgram", device, self.IMAGE, ok=False,
                      codes={code if device is not None else E.INVALID_NULL_HANDLE})

    @precondition(has_program)
    @rule(data=st.data())
    @step
    def destroy_program(self, data: st.DataObject) -> None:
        program = data.draw(st.sampled_from(self.programs), label="program")
        variant = data.draw(st.sampled_from(["this"] * 3 + ["null", "wrong", "stale"]), label="variant")
        if variant == "this" and not program.destroyed:
            self.api.call("olDestroyProgram", program.handle)  # queued launches of it still run
            program.destroyed = True
            for buf in program.globals.values():
                buf.live = False  # unloaded: the test may not touch it any more
            return
        handle: Any = None
        if variant == "this":
            handle = program.handle  # destroyed already
        elif variant == "wrong":
            handle = self.draw_wrong(data, api.Program)
        elif variant == "stale":
            handle = (self.stale.get("program") or [None])[0]
        code = E.INVALID_NULL_HANDLE if handle is None else E.INVALID_ARGUMENT
        self.api.call("olDestroyProgram", handle, ok=False, codes={code})

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def is_valid_binary(self, data: st.DataObject) -> None:
        image, code = data.draw(st.sampled_from([(self.IMAGE, None), (bytearray(self.IMAGE), None),
                                                 *self.bad_images()]), label="image")
        if code in (None, E.INVALID_BINARY):
            expected = code is None
            value = self.api.call("olIsValidBinary", self.host, image)[1]
            if value is not expected:
                raise AssertionError(f"olIsValidBinary gave {value!r}, expected {expected}")
        else:
            self.api.call("olIsValidBinary", self.host, image, ok=False, codes={code})

    # ---- symbols ----------------------------------------------------------------------------------------
    @precondition(has_program)
    @rule(data=st.data())
    @step
    def get_symbol(self, data: st.DataObject) -> None:
        program = data.draw(st.sampled_from(self.programs), label="program")
        name = data.draw(st.sampled_from([*KERNEL_NAMES, *GLOBAL_NAMES, "no_such_symbol"]), label="name")
        kind = data.draw(st.sampled_from(list(SymbolKind)), label="kind")
        variant = data.draw(st.sampled_from(["ok"] * 4 + ["bytes name", "odd name", "None name", "int name",
                                                           "bad kind", "null program", "wrong program"]),
                            label="variant")
        handle: Any = program.handle
        if variant in ("null program", "wrong program"):
            bad = None if variant == "null program" else self.draw_wrong(data, api.Program)
            self.api.call("olGetSymbol", bad, name, kind, ok=False,
                          codes={E.INVALID_NULL_HANDLE if bad is None else E.INVALID_ARGUMENT})
            return
        if program.destroyed:
            self.api.call("olGetSymbol", handle, name, kind, ok=False, codes={E.INVALID_ARGUMENT})
            return
        if variant == "odd name":  # no such symbol; a name that is no UTF-8 cannot be one either
            odd = data.draw(st.sampled_from(["foo\x00bar", "f\u00fc\u00f6", "", b"\xff\xfe", bytearray(b"\xc3")]),
                            label="name")
            self.api.call("olGetSymbol", handle, odd, kind, ok=False, codes={E.NOT_FOUND, E.INVALID_ARGUMENT})
            return
        if variant in ("None name", "int name", "bad kind"):
            args, code = {"None name": ((None, kind), E.INVALID_NULL_POINTER), "int name": ((5, kind),
                          E.INVALID_ARGUMENT), "bad kind": ((name, 2), E.INVALID_ENUMERATION)}[variant]
            self.api.call("olGetSymbol", handle, *args, ok=False, codes={code})
            return
        exists = (kind is SymbolKind.KERNEL and name in KERNEL_NAMES) or \
            (kind is SymbolKind.GLOBAL_VARIABLE and name in GLOBAL_NAMES)
        if not exists:
            self.api.call("olGetSymbol", handle, name.encode() if variant == "bytes name" else name, kind,
                          ok=False, codes={E.NOT_FOUND})
            return
        if variant == "bytes name":
            value = self.api.call("olGetSymbol", handle, name.encode(), kind)[1]
            cached = program.symbols.get((name, kind))
            if cached is not None and value is not cached:
                raise AssertionError("olGetSymbol with a bytes name gave another handle than with a str name")
            if cached is None:
                self.symbol(program, name, kind)
            return
        self.symbol(program, name, kind)

    @precondition(lambda self: self.host is not None and bool(self.symbols))
    @rule(data=st.data())
    @step
    def symbol_info(self, data: st.DataObject) -> None:
        symbol = data.draw(st.sampled_from(self.symbols), label="symbol")
        size_query = data.draw(st.booleans(), label="size query")
        name = "olGetSymbolInfoSize" if size_query else "olGetSymbolInfo"
        prop: Any = data.draw(st.sampled_from([*SymbolInfo, 4, -1]), label="prop")
        if data.draw(st.integers(0, 5), label="valid") == 0:
            bad = data.draw(st.sampled_from([None, self.draw_wrong(data, api.Symbol)]), label="bad symbol")
            self.api.call(name, bad, SymbolInfo.KIND, ok=False,
                          codes={E.INVALID_NULL_HANDLE if bad is None else E.INVALID_ARGUMENT})
            return
        if symbol.program.destroyed:
            self.api.call(name, symbol.handle, prop, ok=False, codes={E.INVALID_ARGUMENT})
            return
        if not isinstance(prop, SymbolInfo):
            self.api.call(name, symbol.handle, prop, ok=False, codes={E.INVALID_ENUMERATION})
            return
        if prop in (SymbolInfo.GLOBAL_VARIABLE_ADDRESS, SymbolInfo.GLOBAL_VARIABLE_SIZE) and \
                symbol.kind is SymbolKind.KERNEL:
            self.api.call(name, symbol.handle, prop, ok=False, codes={E.SYMBOL_KIND})
            return
        value = self.api.call(name, symbol.handle, prop)[1]
        if prop is SymbolInfo.NAME:
            expected: Any = len(symbol.name) + 1 if size_query else symbol.name
        elif size_query:
            expected = SYMBOL_SIZES[prop]
        elif prop is SymbolInfo.KIND:
            expected = symbol.kind
        elif prop is SymbolInfo.GLOBAL_VARIABLE_SIZE:
            expected = GLOBAL_NAMES[symbol.name]
        else:
            expected = symbol.program.globals[symbol.name].address
        if value != expected or (prop is SymbolInfo.KIND and not size_query and type(value) is not SymbolKind):
            raise AssertionError(f"{name}({symbol.label}, {prop.name}) is {value!r}, expected {expected!r}")

    # ---- kernels --------------------------------------------------------------------------------------------
    def draw_shape(self, data: st.DataObject, name: str) -> Shape:
        dims = data.draw(st.integers(1, 3), label="dimensions")
        groups = (data.draw(st.integers(1, 3), label="groups x"), *data.draw(st.tuples(st.integers(1, 2),
                                                                                        st.integers(1, 2)),
                                                                              label="groups y z"))
        size = (data.draw(st.integers(1, 8), label="size x"), *data.draw(st.tuples(st.integers(1, 2),
                                                                                    st.integers(1, 2)),
                                                                          label="size y z"))
        if name in ("increment", "sequence", "spin") and data.draw(st.booleans(), label="one group"):
            groups = (1, 1, 1)
        dyn = data.draw(st.sampled_from([0, 0, 64, 1024]), label="dyn")
        if name == "localmem":
            dyn = max(dyn, 4 * size[0])  # the kernel writes group-size uint32 there
        return Shape(groups, size, dyn, dims)  # type: ignore[arg-type]

    def draw_target(self, data: st.DataObject, size: int) -> tuple[Buffer, int] | None:
        """A live buffer with ``size`` bytes room at a 4-aligned offset."""
        fits = [b for b in self.live_buffers() if b.size >= size]
        if not fits:
            return None
        buf = data.draw(st.sampled_from(fits), label="target")
        return buf, 4 * data.draw(st.integers(0, (buf.size - size) // 4), label="target offset / 4")

    def draw_effect(self, data: st.DataObject, symbol: SymbolModel, shape: Shape) -> Effect | None:
        name = symbol.name
        program = symbol.program
        if name in ("foo", "multiargs", "localmem", "localmem_static", "read"):
            target = self.draw_target(data, 4 * out_elements(name, shape))
            if target is None:
                return None
            a, c = (data.draw(st.integers(-128, 127), label="a"), data.draw(st.integers(-32768, 32767), label="c")) \
                if name == "multiargs" else (0, 0)
            return pointer_effect(name, shape, *target, a=a, c=c, global_buffer=program.globals.get("global"))
        if name == "write":
            return write_effect(shape, program.globals["global"])
        if name == "increment":
            target = self.draw_target(data, 4)
            return increment_effect(shape, *target) if target else None
        if name == "sequence":
            target = self.draw_target(data, 8)
            if target is None:
                return None
            buf, offset = target
            index = data.draw(st.integers(0, min(7, (buf.size - offset) // 4 - 1)), label="index")
            return sequence_effect(buf, offset, index)
        if name == "fail_with":
            return fail_effect(data.draw(st.sampled_from([0, 1000 + next(self.ids)]), label="status"))
        if name == "spin":
            target = self.draw_target(data, 4)
            return spin_effect(*target, 1000) if target else None
        blob = data.draw(st.sampled_from([None, b"", b"\x01\x02\x03\x04\x05\x06\x07\x08"]), label="noargs blob")
        return Effect(blob, [], [], lambda _inputs: [])

    @precondition(has_program)
    @rule(data=st.data())
    @step
    def launch_kernel(self, data: st.DataObject) -> None:
        kernels = [s for s in self.symbols if s.kind is SymbolKind.KERNEL]
        live = [p for p in self.live_programs()]
        if live and (not kernels or data.draw(st.integers(0, 3), label="look up") == 0):
            found = self.symbol(data.draw(st.sampled_from(live), label="program"),
                                data.draw(st.sampled_from(KERNEL_NAMES), label="kernel name"), SymbolKind.KERNEL)
            kernels = [found] if found else kernels
        if not kernels:
            return
        symbol = data.draw(st.sampled_from(kernels), label="kernel")
        shape = self.draw_shape(data, symbol.name)
        variant = data.draw(st.sampled_from(
            ["ok"] * 14 + ["null device", "null kernel", "wrong device", "wrong kernel", "global kernel",
                           "stale device", "stale kernel", "null sizes", "tuple sizes", "bad dims", "zero size",
                           "too much dyn", "negative dyn", "int args", "bad queue"]),
            label="variant")
        if variant != "ok":
            self.bad_launch(data, variant, symbol, shape)
            return
        queue = data.draw(st.sampled_from([None, *self.queues[-MAX_PROGRAMS * 2:]]), label="queue")
        effect = None if symbol.program.destroyed else self.draw_effect(data, symbol, shape)
        blob: Any = effect.blob if effect else b"\x00" * 16
        if blob:
            blob = payload_as(data, blob)
        args = (queue.handle if queue else None, self.host, symbol.handle, blob, shape.args())
        if queue is not None and queue.destroyed:
            self.api.call("olLaunchKernel", *args, ok=False, codes={E.INVALID_QUEUE})
            return
        if symbol.program.destroyed:
            ok, codes = self.work_outcome(queue)
            codes = (codes | {E.INVALID_ARGUMENT}) if not queue or not queue.failure_seen else codes
            self.after_work(queue, *self.api.call("olLaunchKernel", *args, ok=False, codes=codes))
            return
        if effect is None:
            return
        if queue is None:
            if effect.fault:
                self.api.call("olLaunchKernel", *args, ok=False, codes={E.BACKEND_FAILURE})
            else:
                self.api.call("olLaunchKernel", *args)
                self.model.run(None, effect.reads, effect.writes, effect.compute, f"{symbol.label} now")
            return
        ok, codes = self.work_outcome(queue)
        accepted, result = self.api.call("olLaunchKernel", *args, ok=ok, codes=codes)
        if not self.after_work(queue, accepted, result):
            return
        if effect.fault:
            self.doom(queue, frozenset({(queue.ident, f"returned {effect.fault}")}), self.model.ordered_clock(queue))
        else:
            self.model.run(queue, effect.reads, effect.writes, effect.compute, f"{symbol.label} on {queue.name}")

    def bad_launch(self, data: st.DataObject, variant: str, symbol: SymbolModel, shape: Shape) -> None:
        """A launch with one bad argument, on no queue or a healthy one: refused, nothing queued."""
        healthy = [q for q in self.live_queues() if q.doom is None]
        queue: QueueModel | None = data.draw(st.sampled_from([None, *healthy]), label="queue")
        args: list[Any] = [queue.handle if queue else None, self.host, symbol.handle, b"\x00" * 16, shape.args()]
        ls = shape.args()
        code = {"null device": E.INVALID_NULL_HANDLE, "null kernel": E.INVALID_NULL_HANDLE,
                "wrong device": E.INVALID_ARGUMENT, "wrong kernel": E.INVALID_ARGUMENT,
                "global kernel": E.SYMBOL_KIND, "stale device": E.INVALID_DEVICE, "stale kernel": E.INVALID_DEVICE,
                "null sizes": E.INVALID_NULL_POINTER, "tuple sizes": E.INVALID_ARGUMENT,
                "bad dims": E.INVALID_VALUE, "zero size": E.INVALID_SIZE, "too much dyn": E.INVALID_SIZE,
                "negative dyn": E.INVALID_SIZE, "int args": E.INVALID_ARGUMENT,
                "bad queue": E.INVALID_ARGUMENT}[variant]
        if variant == "null device":
            args[1] = None
        elif variant == "null kernel":
            args[2] = None
        elif variant == "wrong device":
            args[1] = self.draw_wrong(data, api.Device)
        elif variant == "wrong kernel":
            args[2] = self.draw_wrong(data, api.Symbol)
        elif variant == "global kernel":
            globals_ = [s for s in self.symbols if s.kind is SymbolKind.GLOBAL_VARIABLE]
            if not globals_:
                return
            args[2] = data.draw(st.sampled_from(globals_), label="global").handle
        elif variant in ("stale device", "stale kernel"):
            if not self.stale or (variant == "stale kernel" and not self.stale["symbol"]):
                return
            if variant == "stale device":
                args[1] = self.stale["device"][0]
            else:
                args[2] = self.stale["symbol"][0]
                if args[2].kind is not SymbolKind.KERNEL:
                    code = E.SYMBOL_KIND
        elif variant == "null sizes":
            args[4] = None
        elif variant == "tuple sizes":
            args[4] = (shape.dims, shape.groups, shape.size)
        elif variant == "bad dims":
            ls.dimensions = data.draw(st.sampled_from([0, 4]), label="dimensions")
            args[4] = ls
        elif variant == "zero size":
            field = data.draw(st.sampled_from(["groups", "size"]), label="which")
            axis = data.draw(st.sampled_from("xyz"), label="axis")
            setattr(ls.num_groups if field == "groups" else ls.group_size, axis, 0)
            args[4] = ls
        elif variant in ("too much dyn", "negative dyn"):
            ls.dyn_shared_memory = MAX_LOCAL_MEMORY + 1 if variant == "too much dyn" else -1
            args[4] = ls
        elif variant == "int args":
            args[3] = 5
        elif variant == "bad queue":
            destroyed = [q for q in self.queues if q.destroyed]
            if bool(destroyed) and data.draw(st.booleans(), label="destroyed queue"):
                args[0], code = destroyed[-1].handle, E.INVALID_QUEUE
            else:
                args[0] = self.draw_wrong(data, api.Queue)
                if args[0] is None:
                    return
        self.api.call("olLaunchKernel", *args, ok=False, codes={code})

    @precondition(lambda self: self.host is not None and bool(self.symbols))
    @rule(data=st.data())
    @step
    def occupancy(self, data: st.DataObject) -> None:
        symbol = data.draw(st.sampled_from(self.symbols), label="symbol")
        variant = data.draw(st.sampled_from(["ok"] * 3 + ["shared -1", "shared None", "null device",
                                                           "wrong device", "null kernel", "stale device"]),
                            label="variant")
        args: list[Any] = [self.host, symbol.handle, data.draw(st.sampled_from([0, 256]), label="shared")]
        if variant == "null device":
            args[0], code = None, E.INVALID_NULL_HANDLE
        elif variant == "wrong device":
            args[0], code = self.draw_wrong(data, api.Device), E.INVALID_ARGUMENT
        elif variant == "stale device" and self.stale:
            args[0], code = self.stale["device"][0], E.INVALID_DEVICE
        elif variant == "null kernel":
            args[1], code = None, E.INVALID_NULL_HANDLE
        elif symbol.program.destroyed:
            code = E.INVALID_ARGUMENT
        elif symbol.kind is not SymbolKind.KERNEL:
            code = E.SYMBOL_KIND
        elif variant.startswith("shared"):
            args[2], code = (-1 if variant == "shared -1" else None), E.INVALID_SIZE
        else:
            ok, value = self.api.call("olCalculateOptimalOccupancy", *args, codes={E.UNSUPPORTED})
            if ok and (type(value) is not int or value <= 0):
                raise AssertionError(f"olCalculateOptimalOccupancy returned {value!r}")
            return
        self.api.call("olCalculateOptimalOccupancy", *args, ok=False, codes={code})
