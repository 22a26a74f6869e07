"""Rules for the runtime as a whole: nested olInit/olShutDown, a full restart (with the thread and
UNINITIALIZED checks and the old runtime's handles kept as stale ones), olIterateDevices,
olGetPlatformInfo(Size) and olGetDeviceInfo(Size)."""

from __future__ import annotations

import inspect
from enum import IntEnum, IntFlag
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from state_machine_world import ENTRY_POINTS, E, World, step

from offloadrt import AllocType, DeviceInfo, Dimensions, ErrorCode, PlatformBackend, PlatformInfo, api

MAX_REFCOUNT = 4
U64_DEVICE_INFO = {DeviceInfo.MAX_MEM_ALLOC_SIZE, DeviceInfo.GLOBAL_MEM_SIZE, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE}
HANDLES = (api.Platform, api.Device, api.Queue, api.Event, api.Program, api.Symbol)
INIT_ARGUMENTS: list[tuple[Any, ErrorCode | None]] = [
    (None, None), ([PlatformBackend.HOST], None), ((PlatformBackend.HOST, PlatformBackend.CUDA), None),
    ([int(PlatformBackend.HOST)], None), ([PlatformBackend.HOST, 0x7FFFFFFF], E.INVALID_ENUMERATION),
    ([-1], E.INVALID_ENUMERATION), (5, E.INVALID_ARGUMENT), ("host", E.INVALID_ARGUMENT),
]


class CallbackError(Exception):
    """What a raising olIterateDevices callback raises."""


def c_size(value: Any, u64: bool = False) -> int:
    """The byte size the C API reports for an info value."""
    if isinstance(value, str):
        return len(value.encode()) + 1
    if isinstance(value, bool):
        return 1
    if isinstance(value, (IntEnum, IntFlag)):
        return 4
    if isinstance(value, Dimensions):
        return 12
    if isinstance(value, HANDLES):
        return 8
    assert type(value) is int, value
    return 8 if u64 else 4


class RuntimeRules(World):
    @initialize()
    def start(self) -> None:
        self.begin("start")
        self.start_runtime()
        self.populate()
        self.end_step()

    def populate(self) -> None:
        """A few of everything, so that the rules have something to work on from the first step."""
        for _ in range(2):
            self.new_queue()
        if not self.plain:
            self.new_plain(512, bytes(range(256)) * 2)
        for kind, size in ((AllocType.HOST, 1024), (AllocType.DEVICE, 256)):
            address = self.api.call("olMemAlloc", self.host, kind, size)[1]
            buf = self.add_allocation(address, size, kind)  # type: ignore[attr-defined]
            self.host_write(buf, 0, bytes((7 * i) & 0xFF for i in range(size)))
        self.load_program(self.IMAGE)  # type: ignore[attr-defined]

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def init_nested(self, data: st.DataObject) -> None:
        platforms, code = data.draw(st.sampled_from(INIT_ARGUMENTS), label="platforms")
        if code is not None:
            self.api.call("olInit", platforms, ok=False, codes={code})
        elif self.refcount < MAX_REFCOUNT:
            self.api.call("olInit", platforms)  # counts one more user; the running runtime is kept
            self.refcount += 1
        self.check_still_running()

    @precondition(lambda self: self.refcount > 1)
    @rule()
    @step
    def shutdown_nested(self) -> None:
        self.api.call("olShutDown")  # not the last: nothing stops
        self.refcount -= 1
        self.check_still_running()

    def check_still_running(self) -> None:
        devices: list[api.Device] = []
        self.api.call("olIterateDevices", lambda device, _: devices.append(device), None)
        if self.host not in devices:
            raise AssertionError(f"after a nested olInit/olShutDown the host device is gone: {devices}")

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def restart(self, data: st.DataObject) -> None:
        """The last olShutDown (everything drained and checked), then a fresh olInit."""
        self.end_runtime()
        platforms = data.draw(st.sampled_from([None, [PlatformBackend.HOST]]), label="platforms")
        self.start_runtime(platforms)
        self.populate()
        self.stats.checks["restarts"] += 1

    # ---- devices and platforms ----------------------------------------------------------------------
    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def iterate_devices(self, data: st.DataObject) -> None:
        variant = data.draw(st.sampled_from(["all", "all", "stop", "none returned", "raises", "None", "int"]),
                            label="variant")
        if variant in ("None", "int"):
            self.api.call("olIterateDevices", None if variant == "None" else 42, ok=False,
                          codes={E.INVALID_NULL_POINTER if variant == "None" else E.INVALID_ARGUMENT})
            return
        seen: list[tuple[Any, Any]] = []
        token = object()
        raised = CallbackError("from the callback")

        def callback(device: Any, user_data: Any) -> Any:
            seen.append((device, user_data))
            if variant == "raises":
                raise raised
            return False if variant == "stop" else None if variant == "none returned" else True

        ok, error = self.api.call("olIterateDevices", callback, token, ok=variant != "raises", passthrough=raised)
        if any(user_data is not token for _, user_data in seen):
            raise AssertionError("olIterateDevices passed another user_data to the callback")
        if variant in ("stop", "raises") and len(seen) != 1:
            raise AssertionError(f"olIterateDevices went on after the callback {variant}: {len(seen)} calls")
        if variant in ("all", "none returned") and self.host not in [d for d, _ in seen]:
            raise AssertionError("olIterateDevices did not give the host device")
        if variant == "raises":
            self.stats.checks["callback exceptions propagated unchanged"] += 1

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def platform_info(self, data: st.DataObject) -> None:
        size_query = data.draw(st.booleans(), label="size query")
        name = "olGetPlatformInfoSize" if size_query else "olGetPlatformInfo"
        variant = data.draw(st.sampled_from(["ok"] * 4 + ["bad prop", "null", "wrong", "stale"]), label="variant")
        prop = data.draw(st.sampled_from(list(PlatformInfo)), label="prop")
        if variant == "bad prop":
            self.api.call(name, self.platform, data.draw(st.sampled_from([4, -1, 0x7FFFFFFF])), ok=False,
                          codes={E.INVALID_ENUMERATION})
            return
        if variant != "ok":
            handle: Any = {"null": None, "wrong": self.draw_wrong(data, api.Platform),
                           "stale": self.stale.get("platform", [None])[0]}[variant]
            code = E.INVALID_NULL_HANDLE if handle is None else \
                E.INVALID_PLATFORM if type(handle) is api.Platform else E.INVALID_ARGUMENT
            self.api.call(name, handle, prop, ok=False, codes={code})
            return
        value = self.api.call("olGetPlatformInfo", self.platform, prop)[1]
        expected_type: Any = PlatformBackend if prop is PlatformInfo.BACKEND else str
        if type(value) is not expected_type or (isinstance(value, str) and not value):
            raise AssertionError(f"olGetPlatformInfo({prop.name}) is {value!r}")
        if size_query:
            size = self.api.call(name, self.platform, prop)[1]
            if size != c_size(value):
                raise AssertionError(f"olGetPlatformInfoSize({prop.name}) is {size}, the value is {value!r}")

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def device_info(self, data: st.DataObject) -> None:
        size_query = data.draw(st.booleans(), label="size query")
        name = "olGetDeviceInfoSize" if size_query else "olGetDeviceInfo"
        variant = data.draw(st.sampled_from(["ok"] * 4 + ["bad prop", "null", "wrong", "stale"]), label="variant")
        prop = data.draw(st.sampled_from(list(DeviceInfo)), label="prop")
        if variant == "bad prop":
            self.api.call(name, self.host, data.draw(st.sampled_from([len(DeviceInfo), -1, 0x7FFFFFFF])), ok=False,
                          codes={E.INVALID_ENUMERATION})
            return
        if variant != "ok":
            handle: Any = {"null": None, "wrong": self.draw_wrong(data, api.Device),
                           "stale": self.stale.get("device", [None])[0]}[variant]
            code = E.INVALID_NULL_HANDLE if handle is None else \
                E.INVALID_DEVICE if type(handle) is api.Device else E.INVALID_ARGUMENT
            self.api.call(name, handle, prop, ok=False, codes={code})
            return
        codes = {E.UNIMPLEMENTED} if prop is DeviceInfo.MEMORY_CLOCK_RATE else set()
        ok, value = self.api.call("olGetDeviceInfo", self.host, prop, codes=codes)
        if not ok:
            return
        if prop is DeviceInfo.PLATFORM and value is not self.platform:
            raise AssertionError("olGetDeviceInfo(PLATFORM) gave another handle than before")
        if isinstance(value, str) and not value.strip():
            raise AssertionError(f"olGetDeviceInfo({prop.name}) is blank")
        if size_query:
            size = self.api.call(name, self.host, prop)[1]
            if size != c_size(value, prop in U64_DEVICE_INFO):
                raise AssertionError(f"olGetDeviceInfoSize({prop.name}) is {size}, the value is {value!r}")

    @precondition(lambda self: self.host is not None)
    @rule(data=st.data())
    @step
    def bad_code_location(self, data: st.DataObject) -> None:
        """A ``...WithCodeLoc`` call whose code location is no CodeLocation: refused before anything."""
        variants = [name for name in ENTRY_POINTS if name.endswith("WithCodeLoc")]
        if not variants:
            return
        name = data.draw(st.sampled_from(variants), label="entry point")
        bad = data.draw(st.sampled_from(["file.c:3", 42, ("f", "file.c", 1, 2)]), label="code location")
        params = [p for p in inspect.signature(getattr(api, name)).parameters.values()
                  if p.name != "code_location" and p.kind is p.POSITIONAL_OR_KEYWORD]
        self.api.call(name, *[None] * len(params), bad, ok=False, codes={E.INVALID_ARGUMENT})
