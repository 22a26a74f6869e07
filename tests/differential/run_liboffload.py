"""Runs a neutral case against the real liboffload, through the ctypes binding.

Used inside a child of the fork server: each step's outcome is handed to ``emit`` as soon as the
call returns, so a call that crashes the process leaves the outcomes of the steps before it.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import Any

from . import liboffload as lo
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
    kind_name,
    render,
)

INFO_BUFFER = 4096  # PropSize passed to olGet*Info: larger than any value, as the header allows


class HarnessError(Exception):
    """The case cannot be run as written (a bad token, no host device): not liboffload's answer."""


class CSide:
    def __init__(self, lib: lo.Library, case: Case, resources: dict[str, str]):
        self.lib = lib
        self.case = case
        self.resources = resources
        self.buffers = {name: ctypes.create_string_buffer(init, len(init)) if isinstance(init, bytes)
                        else ctypes.create_string_buffer(init) for name, init in case.buffers.items()}
        self.saved: dict[str, int | None] = {}
        self.names: dict[int, str] = {}  # handle or pointer value -> its symbolic name
        self.host: int | None = None
        self.platform: int | None = None
        self.keep: list[Any] = []  # ctypes objects that must outlive the call (callbacks, arrays)

    # -- the symbolic handles ------------------------------------------------------------------------

    def _find_host(self) -> int:
        if self.host is not None:
            return self.host
        found: list[int] = []

        def collect(device: int, _: int) -> bool:
            found.append(device)
            return True

        callback = lo.ITERATE_CALLBACK(collect)
        code, details = self.lib.call("olIterateDevices", callback, None)
        if code != "SUCCESS":
            raise HarnessError(f"cannot find the host device: olIterateDevices: {code} {details}")
        value = ctypes.c_uint32()
        for device in found:
            code, _ = self.lib.call("olGetDeviceInfo", device, lo.enum_value("DeviceInfo", "TYPE"), 4,
                                    ctypes.byref(value))
            if code == "SUCCESS" and value.value == lo.enum_value("DeviceType", "HOST"):
                self.host = device
                self.names[device] = "HOST"
                return device
        raise HarnessError("liboffload reports no device of type HOST")

    def _find_platform(self) -> int:
        if self.platform is None:
            handle = ctypes.c_void_p()
            code, details = self.lib.call("olGetDeviceInfo", self._find_host(), lo.enum_value("DeviceInfo", "PLATFORM"),
                                          8, ctypes.byref(handle))
            if code != "SUCCESS" or not handle.value:
                raise HarnessError(f"cannot find the host platform: {code} {details}")
            self.platform = handle.value
            self.names[handle.value] = "PLATFORM"
        return self.platform

    # -- arguments -----------------------------------------------------------------------------------

    def address(self, token: Any) -> int | None:
        if token is NULL:
            return None
        if token is HOST:
            return self._find_host()
        if token is PLATFORM:
            return self._find_platform()
        if isinstance(token, Ref):
            saved = self.saved[token.name]
            return saved + token.offset if saved and token.offset else saved
        if isinstance(token, Ptr):
            return ctypes.addressof(self.buffers[token.buffer]) + token.offset
        if isinstance(token, int) and not isinstance(token, bool):
            return token or None
        raise HarnessError(f"{token!r} is not a handle or pointer")

    def payload(self, data: bytes) -> int:
        buffer = ctypes.create_string_buffer(data, max(len(data), 1))
        self.keep.append(buffer)
        return ctypes.addressof(buffer)

    def arguments(self, step: Call) -> tuple[list[Any], Callable[[], Any]]:
        """The C arguments of ``step`` (outputs appended) and a function reading its output."""
        signature = SIGNATURES[step.fn]
        if len(step.args) != len(signature.params):
            raise HarnessError(f"{step.fn} takes {len(signature.params)} neutral arguments, got {len(step.args)}")
        args: list[Any] = []
        for kind, token in zip(signature.params, step.args):
            if kind in ("handle", "pointer"):
                args.append(self.address(token))
            elif kind in ("size", "flags"):
                args.append(token)
            elif kind.startswith("enum:"):
                args.append(lo.enum_value(token.family, token.name) if isinstance(token, E) else token)
            elif kind in ("image", "pattern"):
                if token is NULL:
                    size = 2 if kind == "pattern" else 16  # a NULL pointer with a plausible size
                    args += [size, None] if kind == "pattern" else [None, size]
                    continue
                data = token.data if isinstance(token, Pattern) else self.image_bytes(token)
                args += [len(data), self.payload(data)] if kind == "pattern" else [self.payload(data), len(data)]
            elif kind == "name":
                args.append(None if token is NULL else token.encode())
            elif kind == "iterate":
                args += [None if token is NULL else self.iterate_callback(token), None]  # and UserData
            elif kind == "hostfn":
                if token is NULL:
                    args.append(None)
                else:
                    assert isinstance(token, HostFunction)
                    callback = lo.HOST_FUNCTION(lambda _: None)
                    self.keep.append(callback)
                    args.append(ctypes.cast(callback, ctypes.c_void_p))
                args.append(None)  # UserData
            elif kind == "events":
                if token is NULL:
                    args += [None, 0]
                else:
                    assert isinstance(token, Events)
                    array = (ctypes.c_void_p * max(len(token.items), 1))(*[self.address(t) for t in token.items])
                    self.keep.append(array)
                    args += [ctypes.addressof(array), len(token.items)]
            elif kind == "blob":
                if token is NULL:
                    args += [None, 0]
                else:
                    data = self.blob_bytes(token)
                    args += [self.payload(data), len(data)]
            elif kind == "launch":
                if token is NULL:
                    args.append(None)
                else:
                    assert isinstance(token, Launch)
                    launch = lo.LaunchSizeArgs(token.dimensions, lo.Dimensions(*token.num_groups),
                                               lo.Dimensions(*token.group_size), token.dyn_shared_memory)
                    self.keep.append(launch)
                    args.append(ctypes.addressof(launch))
            else:
                raise HarnessError(f"unknown parameter kind {kind}")
        return self.outputs(step, args)

    def image_bytes(self, token: Image) -> bytes:
        if token.resource is None:
            return token.data
        with open(self.resources[token.resource], "rb") as f:
            return f.read()

    def blob_bytes(self, token: Blob) -> bytes:
        parts = []
        for part in token.parts:
            address = self.address(part) if isinstance(part, Ptr) else None
            parts.append(struct.pack("<Q", address) if isinstance(part, Ptr) else part)
        return b"".join(parts)

    def iterate_callback(self, token: Iterate) -> Any:
        self.visits = 0

        def visit(device: int, _: int) -> bool:
            self.visits += 1
            return token.stop_after is None or self.visits < token.stop_after

        callback = lo.ITERATE_CALLBACK(visit)
        self.keep.append(callback)
        return ctypes.cast(callback, ctypes.c_void_p)

    def outputs(self, step: Call, args: list[Any]) -> tuple[list[Any], Callable[[], Any]]:
        output = SIGNATURES[step.fn].output
        if output is None:
            return args, lambda: None
        if output == "visits":
            return args, lambda: self.visits
        if output.startswith("info:"):
            family = output[5:]
            value = ctypes.create_string_buffer(INFO_BUFFER)
            prop = step.args[1]
            return [*args, INFO_BUFFER, value], lambda: self.decode_info(family, prop, value.raw, step)
        cell: Any = {"handle": ctypes.c_void_p, "pointer": ctypes.c_void_p, "size": ctypes.c_size_t,
                     "bool": ctypes.c_bool}[output]()
        self.keep.append(cell)
        return [*args, ctypes.byref(cell)], lambda: cell.value

    # -- outcomes ------------------------------------------------------------------------------------

    def decode_info(self, family: str, prop: Any, raw: bytes, step: Call) -> Any:
        if not isinstance(prop, E):
            return Name(f"<value of property {prop}>")
        c_type = lo.INFO_TYPES[family][prop.name]
        if step.show == SHOW_KIND:
            return kind_name(c_type)
        if c_type == "string":
            return raw.split(b"\0", 1)[0].decode(errors="replace")
        if c_type in ("u32", "flags"):
            return struct.unpack_from("<I", raw)[0]
        if c_type == "u64":
            return struct.unpack_from("<Q", raw)[0]
        if c_type == "bool":
            return raw[0] != 0
        if c_type == "dims":
            return struct.unpack_from("<III", raw)
        if c_type.startswith("enum:"):
            number = struct.unpack_from("<I", raw)[0]
            names = lo.ENUMS[c_type[5:]]
            return Name(names[number] if number < len(names) else f"<{number}>")
        return Name(self.symbolic(struct.unpack_from("<Q", raw)[0]))  # handles and addresses

    def symbolic(self, value: int | None) -> str:
        if not value:
            return "NULL"
        if value not in self.names and self.host is not None and self.platform is None:
            try:
                self._find_platform()  # a platform handle met before the case named PLATFORM
            except HarnessError:
                pass
        if value in self.names:
            return self.names[value]
        for name, buffer in self.buffers.items():
            base = ctypes.addressof(buffer)
            if base <= value < base + len(buffer):
                return name if value == base else f"{name}+{value - base}"
        return "<new>"

    def run_step(self, step: Any) -> str:
        if isinstance(step, Read):
            return render("SUCCESS", self.buffers[step.buffer].raw)
        args, read_output = self.arguments(step)
        if step.loc:
            function, source, line, column = CODE_LOCATION
            location = lo.CodeLocation(function.encode(), source.encode(), line, column)
            self.keep.append(location)
            args.append(ctypes.addressof(location))
        code, _ = self.lib.call(step.entry_point, *args)
        raw = read_output() if code == "SUCCESS" else None
        value = raw
        if code == "SUCCESS" and SIGNATURES[step.fn].output in ("handle", "pointer"):
            value = Name(self.symbolic(raw))
            if step.save is not None and raw:
                self.names.setdefault(raw, step.save)
        if step.save is not None:
            self.saved[step.save] = raw
        return render(code, value, step.show)


def run_case(lib: lo.Library, case: Case, resources: dict[str, str], emit: Callable[[str], None]) -> None:
    """Run ``case`` in this process, calling ``emit`` with each step's outcome as it completes."""
    side = CSide(lib, case, resources)
    if case.init:
        code, details = lib.call("olInit")
        if code != "SUCCESS":
            raise HarnessError(f"olInit failed: {code} {details}")
    for step in case.steps:
        emit(side.run_step(step))

