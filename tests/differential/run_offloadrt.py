"""Runs a neutral case against offloadrt, in this process, through ``offloadrt.api``."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from enum import IntEnum, IntFlag
from typing import Any

import offloadrt
from offloadrt import (
    CodeLocation,
    DeviceInfo,
    DeviceType,
    Dimensions,
    ErrorCode,
    KernelLaunchSizeArgs,
    OffloadError,
    api,
)

from .neutral import (
    CODE_LOCATION,
    HOST,
    NULL,
    PLATFORM,
    SHOW_KIND,
    SIGNATURES,
    Blob,
    Call,
    Case,
    E,
    Events,
    HostFunction,
    Image,
    Iterate,
    Launch,
    Name,
    Pattern,
    Ptr,
    Read,
    Ref,
    render,
)

_HANDLE_KINDS = {api.Platform: "handle:platform", api.Device: "handle:device", api.Queue: "handle:queue",
                 api.Event: "handle:event", api.Program: "handle:program", api.Symbol: "handle:symbol"}
_MAX_SHUTDOWNS = 16  # a case leaves at most this many olInit users behind


class HarnessError(Exception):
    """The case cannot be run as written: not offloadrt's answer."""


def kind_of(value: Any) -> str:
    """The kind of an info value as offloadrt returns it, named as ``neutral.kind_name`` names C types."""
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Dimensions):
        return "dims"
    if isinstance(value, IntFlag):
        return "flags"
    if isinstance(value, IntEnum):
        return f"enum:{type(value).__name__}"
    if type(value) in _HANDLE_KINDS:
        return _HANDLE_KINDS[type(value)]
    if isinstance(value, int):
        return "integer"
    return f"<{type(value).__name__}>"


class PySide:
    def __init__(self, case: Case, resources: dict[str, str]):
        self.case = case
        self.resources = resources
        self.buffers = {name: ctypes.create_string_buffer(init, len(init)) if isinstance(init, bytes)
                        else ctypes.create_string_buffer(init) for name, init in case.buffers.items()}
        self.saved: dict[str, Any] = {}
        self.named: list[tuple[Any, str]] = []  # (handle object or address, its symbolic name)
        self.host: api.Device | None = None
        self.platform: api.Platform | None = None
        self.visits = 0

    def _find_host(self) -> api.Device:
        if self.host is None:
            devices: list[api.Device] = []
            try:
                api.olIterateDevices(lambda device, _: devices.append(device))
                hosts = [d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST]
            except OffloadError as exc:
                raise HarnessError(f"cannot find the host device: {exc!r}") from None
            if not hosts:
                raise HarnessError("offloadrt reports no device of type HOST")
            self.host = hosts[0]
            self.named.append((self.host, "HOST"))
        return self.host

    def _find_platform(self) -> api.Platform:
        if self.platform is None:
            try:
                self.platform = api.olGetDeviceInfo(self._find_host(), DeviceInfo.PLATFORM)
            except OffloadError as exc:
                raise HarnessError(f"cannot find the host platform: {exc!r}") from None
            self.named.append((self.platform, "PLATFORM"))
        return self.platform

    def value_of(self, token: Any) -> Any:
        if token is NULL:
            return None
        if token is HOST:
            return self._find_host()
        if token is PLATFORM:
            return self._find_platform()
        if isinstance(token, Ref):
            saved = self.saved[token.name]
            return saved + token.offset if token.offset and type(saved) is int else saved
        if isinstance(token, Ptr):
            return ctypes.addressof(self.buffers[token.buffer]) + token.offset
        if isinstance(token, E):
            return getattr(offloadrt, token.family)[token.name]
        if isinstance(token, Pattern):
            return token.data
        if isinstance(token, Image):
            if token.resource is None:
                return token.data
            with open(self.resources[token.resource], "rb") as f:
                return f.read()
        if isinstance(token, Blob):
            return b"".join(struct.pack("<Q", self.value_of(p)) if isinstance(p, Ptr) else p for p in token.parts)
        if isinstance(token, Launch):
            return KernelLaunchSizeArgs(token.dimensions, Dimensions(*token.num_groups), Dimensions(*token.group_size),
                                        token.dyn_shared_memory)
        if isinstance(token, Iterate):
            self.visits = 0

            def visit(device: api.Device, _: Any) -> bool:
                self.visits += 1
                return token.stop_after is None or self.visits < token.stop_after

            return visit
        if isinstance(token, HostFunction):
            return lambda _: None
        if isinstance(token, Events):
            return [self.value_of(t) for t in token.items]
        if isinstance(token, (int, str, bytes)):
            return token
        raise HarnessError(f"no Python form for {token!r}")

    def symbolic(self, value: Any) -> str:
        if value is None or value == 0:
            return "NULL"
        if isinstance(value, api.Platform) and self.host is not None and self.platform is None:
            try:
                self._find_platform()  # a platform handle met before the case named PLATFORM
            except HarnessError:
                pass
        for obj, name in self.named:
            if obj is value or (type(value) is int and type(obj) is int and obj == value):
                return name
        if type(value) is int:
            for name, buffer in self.buffers.items():
                base = ctypes.addressof(buffer)
                if base <= value < base + len(buffer):
                    return name if value == base else f"{name}+{value - base}"
        return "<new>"

    def neutral(self, value: Any, step: Call) -> Any:
        """offloadrt's return value in the neutral form ``render`` shows."""
        output = SIGNATURES[step.fn].output
        if output == "visits":
            return self.visits
        if output in ("handle", "pointer"):
            return Name(self.symbolic(value))
        if output is None or not output.startswith("info:"):
            return value
        if step.show == SHOW_KIND:
            return kind_of(value)
        if isinstance(value, Dimensions):
            return (value.x, value.y, value.z)
        if isinstance(value, IntFlag):
            return int(value)
        if isinstance(value, IntEnum):
            return Name(value.name)
        if type(value) in _HANDLE_KINDS:
            return Name(self.symbolic(value))
        if _is_address_info(step):
            return Name(self.symbolic(value))
        return value

    def run_step(self, step: Any) -> str:
        if isinstance(step, Read):
            return render("SUCCESS", self.buffers[step.buffer].raw)
        args = [self.value_of(token) for token in step.args]
        function: Callable[..., Any] = getattr(api, step.entry_point)
        kwargs = {"code_location": CodeLocation(*CODE_LOCATION)} if step.loc else {}
        try:
            value = function(*args, **kwargs)
        except OffloadError as exc:
            if step.save is not None:
                self.saved[step.save] = None
            return render(exc.code.name)
        shown = self.neutral(value, step)
        if step.save is not None:
            self.saved[step.save] = value
            if value is not None and value != 0:
                self.named.append((value, step.save))
        return render("SUCCESS", shown, step.show)


def _is_address_info(step: Call) -> bool:
    """Info properties whose value is an address (shown symbolically, like handles)."""
    prop = step.args[1] if len(step.args) > 1 else None
    return isinstance(prop, E) and (prop.family, prop.name) in {("MemInfo", "BASE"),
                                                                 ("SymbolInfo", "GLOBAL_VARIABLE_ADDRESS")}


def drain() -> None:
    """Shut offloadrt down to zero users, whatever the case left behind."""
    for _ in range(_MAX_SHUTDOWNS):
        try:
            api.olShutDown()
        except OffloadError as exc:
            if exc.code == ErrorCode.UNINITIALIZED:
                return
    raise HarnessError(f"offloadrt still initialised after {_MAX_SHUTDOWNS} olShutDown calls")


def run_case(case: Case, resources: dict[str, str]) -> list[str]:
    """Run ``case`` against offloadrt from an uninitialised runtime; leave it uninitialised."""
    side = PySide(case, resources)
    outcomes: list[str] = []
    try:
        if case.init:
            api.olInit()
        for step in case.steps:
            outcomes.append(side.run_step(step))
    finally:
        drain()
    return outcomes
