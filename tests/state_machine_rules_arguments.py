"""A rule that passes one argument of a kind no entry point can accept (floats, strings, lists,
plain objects, non-UTF-8 names, out-of-range integers...) with every other argument valid: the
call must fail with an ``OffloadError``, whatever its code, and change nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from state_machine_world import World, step

from offloadrt import (
    AllocType,
    DeviceInfo,
    Dimensions,
    ErrorCode,
    EventInfo,
    KernelLaunchSizeArgs,
    MemInfo,
    PlatformInfo,
    QueueInfo,
    SymbolInfo,
    SymbolKind,
)

WEIRD: dict[str, list[Any]] = {
    "handle": [1.5, "queue", [1], object(), b"\x00"],
    "pointer": [1.5, "0x1000", [1], object(), 1 << 70, -5, float("nan")],
    "size": [1.5, float("nan"), "16", [16], object()],
    "enum": [1.5, "1", object(), [0]],
    "payload": [5, 1.5, object(), "text", [1, 2]],
    "callback": [5, "callback", [print]],
    "events": [5, 1.5, object(), "ab", [1.5], [[]]],
    "name": [5, 1.5, object(), b"\xff\xfe", ["foo"]],
    "launch": [(1, (1, 1, 1), (1, 1, 1)), {"dimensions": 1}, object(), 5],
    "platforms": [5, 1.5, object(), "HOST", [1.5], [object()]],
}
ANY_ERROR = set(ErrorCode) - {ErrorCode.SUCCESS}


def noop(_user_data: object) -> None:
    pass


class ArgumentRules(World):
    def weird_calls(self) -> list[tuple[str, list[Any], dict[int, str]]]:
        """(entry point, valid arguments, {position: kind of argument})."""
        host, plain = self.host, self.plain[0]
        calls: list[tuple[str, list[Any], dict[int, str]]] = [
            ("olInit", [None], {0: "platforms"}),
            ("olGetPlatformInfo", [self.platform, PlatformInfo.NAME], {0: "handle", 1: "enum"}),
            ("olGetPlatformInfoSize", [self.platform, PlatformInfo.NAME], {0: "handle", 1: "enum"}),
            ("olGetDeviceInfo", [host, DeviceInfo.NAME], {0: "handle", 1: "enum"}),
            ("olGetDeviceInfoSize", [host, DeviceInfo.NAME], {0: "handle", 1: "enum"}),
            ("olIterateDevices", [noop, None], {0: "callback"}),
            ("olMemAlloc", [host, AllocType.HOST, 64], {0: "handle", 1: "enum", 2: "size"}),
            ("olMemFree", [plain.address], {0: "pointer"}),
            ("olMemcpy", [None, plain.address, host, plain.address + plain.size // 2, host, 16],
             {0: "handle", 1: "pointer", 2: "handle", 3: "pointer", 4: "handle", 5: "size"}),
            ("olMemFill", [None, plain.address, b"\x01", 16], {0: "handle", 1: "pointer", 2: "payload", 3: "size"}),
            ("olMemRegister", [host, plain.address, 16, 0], {0: "handle", 1: "pointer", 2: "size", 3: "size"}),
            ("olMemUnregister", [host, plain.address], {0: "handle", 1: "pointer"}),
            ("olCreateQueue", [host], {0: "handle"}),
            ("olCreateProgram", [host, self.IMAGE], {0: "handle", 1: "payload"}),
            ("olIsValidBinary", [host, self.IMAGE], {0: "handle", 1: "payload"}),
        ]
        if self.allocations:
            base = self.allocations[0].address
            calls += [("olGetMemInfo", [base, MemInfo.SIZE], {0: "pointer", 1: "enum"}),
                      ("olGetMemInfoSize", [base, MemInfo.SIZE], {0: "pointer", 1: "enum"})]
        queues = self.live_queues()
        if queues:
            q = queues[0].handle
            events = [e.handle for e in self.live_events()][:1]
            calls += [(name, [q], {0: "handle"}) for name in ("olSyncQueue", "olQueryQueue", "olGetQueueError",
                                                                "olCreateEvent", "olDestroyQueue")]
            calls += [("olWaitEvents", [q, events], {0: "handle", 1: "events"}),
                      ("olGetQueueInfo", [q, QueueInfo.DEVICE], {0: "handle", 1: "enum"}),
                      ("olGetQueueInfoSize", [q, QueueInfo.DEVICE], {0: "handle", 1: "enum"}),
                      ("olLaunchHostFunction", [q, noop, None], {0: "handle", 1: "callback"})]
        for event in self.live_events()[:1]:
            e = event.handle
            calls += [(name, [e], {0: "handle"}) for name in ("olSyncEvent", "olDestroyEvent")]
            calls += [("olGetEventInfo", [e, EventInfo.QUEUE], {0: "handle", 1: "enum"}),
                      ("olGetEventInfoSize", [e, EventInfo.QUEUE], {0: "handle", 1: "enum"}),
                      ("olGetEventElapsedTime", [e, e], {0: "handle", 1: "handle"})]
        programs = self.live_programs()
        if programs:
            calls += [("olGetSymbol", [programs[0].handle, "foo", SymbolKind.KERNEL],
                       {0: "handle", 1: "name", 2: "enum"}),
                      ("olDestroyProgram", [programs[0].handle], {0: "handle"})]
        live_symbols = [s for s in self.symbols if not s.program.destroyed]
        for symbol in live_symbols[:1]:
            calls += [("olGetSymbolInfo", [symbol.handle, SymbolInfo.KIND], {0: "handle", 1: "enum"}),
                      ("olGetSymbolInfoSize", [symbol.handle, SymbolInfo.KIND], {0: "handle", 1: "enum"})]
        kernels = [s for s in live_symbols if s.kind is SymbolKind.KERNEL]
        for kernel in kernels[:1]:
            calls.append(("olCalculateOptimalOccupancy", [host, kernel.handle, 0],
                          {0: "handle", 1: "handle", 2: "size"}))
        for kernel in [s for s in kernels if s.name == "noargs"][:1]:  # harmless, should a launch run
            sizes = KernelLaunchSizeArgs(1, Dimensions(1), Dimensions(1))
            calls.append(("olLaunchKernel", [None, host, kernel.handle, None, sizes],
                          {0: "handle", 1: "handle", 2: "handle", 3: "payload", 4: "launch"}))
        return calls

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def weird_argument(self, data: st.DataObject) -> None:
        name, args, positions = data.draw(st.sampled_from(self.weird_calls()), label="entry point")
        position = data.draw(st.sampled_from(sorted(positions)), label="position")
        args[position] = data.draw(st.sampled_from(WEIRD[positions[position]]), label="weird value")
        self.api.call(name, *args, ok=False, codes=ANY_ERROR)
