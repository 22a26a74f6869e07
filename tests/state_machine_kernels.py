"""The kernels of tests/kernels/basic.c as the state machine uses them: how to pack their
arguments, which bytes they read and write, and what they write (see basic.c for the code)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from state_machine_model import KNOWN, Buffer, Bytes, Range, known, unknown

from offloadrt import Dimensions, KernelLaunchSizeArgs

# Kernels a launch may use, and the global variables of the program.
KERNEL_NAMES = ("foo", "noargs", "multiargs", "localmem", "localmem_static", "fail_with", "increment",
                "sequence", "write", "read", "spin")
GLOBAL_NAMES = {"global": 256, "scalar_global": 4}
GLOBAL_INITIAL = {"global": bytes(256), "scalar_global": struct.pack("<i", 7)}


@dataclass(frozen=True)
class Shape:
    """A launch's work-groups and group size (what the kernels use of them)."""

    groups: tuple[int, int, int]
    size: tuple[int, int, int]
    dyn: int = 0
    dims: int = 3

    @property
    def total_groups(self) -> int:
        return self.groups[0] * self.groups[1] * self.groups[2]

    def args(self) -> KernelLaunchSizeArgs:
        return KernelLaunchSizeArgs(self.dims, Dimensions(*self.groups), Dimensions(*self.size), self.dyn)


@dataclass
class Effect:
    """What a launch does: its argument blob, the bytes it reads and writes, and how."""

    blob: bytes | None
    reads: list[Range]
    writes: list[Range]
    compute: Callable[[list[Bytes]], list[Bytes]]
    fault: int = 0  # the non-zero status the launch returns (a kernel fault), or 0


def u32s(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}I", *(v & 0xFFFFFFFF for v in values))


def constant(values: bytes) -> Callable[[list[Bytes]], list[Bytes]]:
    return lambda _inputs: [known(values)]


def out_elements(name: str, shape: Shape) -> int:
    """How many uint32 a kernel that writes ``out`` writes there for ``shape``."""
    gx = shape.groups[0]
    if name == "foo":
        return shape.total_groups * shape.size[0]
    if name in ("multiargs", "localmem"):
        return gx * shape.size[0]
    if name == "localmem_static":
        return gx
    if name == "read":
        return min(shape.size[0], 64)
    raise AssertionError(name)


def pointer_effect(name: str, shape: Shape, out: Buffer, offset: int, a: int = 0, c: int = 0,
                   global_buffer: Buffer | None = None) -> Effect:
    """A kernel that writes uint32s from ``out + offset``."""
    count = out_elements(name, shape)
    address = out.address + offset
    target: list[Range] = [(out, offset, 4 * count)]
    size_x = shape.size[0]
    if name == "foo":
        return Effect(struct.pack("<Q", address), [], target, constant(u32s(list(range(count)))))
    if name == "multiargs":
        blob = struct.pack("<b7xQh6x", a, address, c)
        return Effect(blob, [], target, constant(u32s([a + c + k for k in range(count)])))
    if name == "localmem":
        values = [2 * (k % size_x) for k in range(count)]
        return Effect(struct.pack("<Q", address), [], target, constant(u32s(values)))
    if name == "localmem_static":
        return Effect(struct.pack("<Q", address), [], target, constant(u32s([2 * size_x] * count)))
    if name == "read":
        assert global_buffer is not None
        return Effect(struct.pack("<Q", address), [(global_buffer, 0, 4 * count)], target, lambda inputs: [inputs[0]])
    raise AssertionError(name)


def write_effect(shape: Shape, global_buffer: Buffer) -> Effect:
    count = min(shape.size[0], 64)
    return Effect(None, [], [(global_buffer, 0, 4 * count)], constant(u32s([2 * i for i in range(count)])))


def increment_effect(shape: Shape, counter: Buffer, offset: int) -> Effect:
    racy = shape.total_groups > 1  # every work-group adds one, unsynchronised

    def compute(inputs: list[Bytes]) -> list[Bytes]:
        values, mask = inputs[0]
        if racy or mask != bytes([KNOWN]) * 4:
            return [unknown(4)]
        (value,) = struct.unpack("<I", values)
        return [known(u32s([value + 1]))]

    span: Range = (counter, offset, 4)
    return Effect(struct.pack("<Q", counter.address + offset), [span], [span], compute)


def sequence_effect(buf: Buffer, offset: int, index: int) -> Effect:
    """data[index] = index < 2 ? index : data[index - 1] + data[index - 2], data at buf + offset."""
    blob = struct.pack("<I4xQ", index, buf.address + offset)
    target: Range = (buf, offset + 4 * index, 4)
    if index < 2:
        return Effect(blob, [], [target], constant(u32s([index])))

    def compute(inputs: list[Bytes]) -> list[Bytes]:
        values, mask = inputs[0]
        if mask != bytes([KNOWN]) * 8:
            return [unknown(4)]
        first, second = struct.unpack("<II", values)
        return [known(u32s([first + second]))]

    return Effect(blob, [(buf, offset + 4 * (index - 2), 8)], [target], compute)


def fail_effect(code: int) -> Effect:
    return Effect(struct.pack("<i", code), [], [], lambda _inputs: [], fault=code)


def spin_effect(flag: Buffer, offset: int, iterations: int) -> Effect:
    blob = struct.pack("<QQ", iterations, flag.address + offset)
    return Effect(blob, [], [(flag, offset, 4)], constant(u32s([1])))
