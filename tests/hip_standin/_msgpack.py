"""The MessagePack subset AMDGPU code object metadata uses: the stand-in's own reader and writer.

TEST DOUBLE material, not AMD code, and deliberately not shared with offloadrt (a test double
must not reuse the parser of the code under test). LLVM's AMDGPUUsage documents the
``NT_AMDGPU_METADATA`` note of code object v3+ as one MessagePack map; this module reads and
writes the types such a map holds (the MessagePack specification, msgpack/spec.md): nil, booleans,
integers, floats, strings, binary, arrays and maps. Extension types raise ValueError.
"""

from __future__ import annotations

import struct
from typing import Any


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, count: int) -> bytes:
        if self.at + count > len(self.data):
            raise ValueError(f"msgpack: {count} bytes wanted at offset {self.at}, the data ends at {len(self.data)}")
        chunk = self.data[self.at:self.at + count]
        self.at += count
        return chunk

    def number(self, fmt: str) -> Any:
        return struct.unpack(">" + fmt, self.take(struct.calcsize(fmt)))[0]

    def value(self) -> Any:  # noqa: PLR0911, PLR0912  # one branch per format family
        head = self.take(1)[0]
        if head <= 0x7F:
            return head
        if head >= 0xE0:
            return head - 0x100
        if 0x80 <= head <= 0x8F:
            return self.map(head & 0x0F)
        if 0x90 <= head <= 0x9F:
            return self.array(head & 0x0F)
        if 0xA0 <= head <= 0xBF:
            return self.take(head & 0x1F).decode()
        fixed = {0xC0: None, 0xC2: False, 0xC3: True}
        if head in fixed:
            return fixed[head]
        numbers = {0xCA: "f", 0xCB: "d", 0xCC: "B", 0xCD: "H", 0xCE: "I", 0xCF: "Q",
                   0xD0: "b", 0xD1: "h", 0xD2: "i", 0xD3: "q"}
        if head in numbers:
            return self.number(numbers[head])
        lengths = {0xC4: "B", 0xC5: "H", 0xC6: "I", 0xD9: "B", 0xDA: "H", 0xDB: "I",
                   0xDC: "H", 0xDD: "I", 0xDE: "H", 0xDF: "I"}
        if head not in lengths:
            raise ValueError(f"msgpack: format byte {head:#04x} at offset {self.at - 1} is not supported")
        count = self.number(lengths[head])
        if head in (0xC4, 0xC5, 0xC6):
            return self.take(count)
        if head in (0xD9, 0xDA, 0xDB):
            return self.take(count).decode()
        return self.array(count) if head in (0xDC, 0xDD) else self.map(count)

    def array(self, count: int) -> list[Any]:
        return [self.value() for _ in range(count)]

    def map(self, count: int) -> dict[Any, Any]:
        result = {}
        for _ in range(count):
            key = self.value()
            result[key] = self.value()
        return result


def unpack(data: bytes) -> Any:
    """The one value ``data`` holds (ValueError if it is malformed or has bytes left over)."""
    reader = _Reader(data)
    value = reader.value()
    if reader.at != len(data):
        raise ValueError(f"msgpack: {len(data) - reader.at} bytes after the value")
    return value


def pack(value: Any) -> bytes:  # noqa: PLR0911  # one branch per type
    """``value`` (None, bool, int, float, str, bytes, list/tuple, dict) in MessagePack."""
    if value is None:
        return b"\xc0"
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        if 0 <= value <= 0x7F:
            return bytes([value])
        if -32 <= value < 0:
            return struct.pack(">b", value)
        if value >= 0:
            return b"\xcf" + struct.pack(">Q", value)
        return b"\xd3" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, str):
        encoded = value.encode()
        return (bytes([0xA0 | len(encoded)]) if len(encoded) < 32 else b"\xdb" + struct.pack(">I", len(encoded))) \
            + encoded
    if isinstance(value, bytes):
        return b"\xc6" + struct.pack(">I", len(value)) + value
    if isinstance(value, (list, tuple)):
        return b"\xdd" + struct.pack(">I", len(value)) + b"".join(pack(item) for item in value)
    if isinstance(value, dict):
        return b"\xdf" + struct.pack(">I", len(value)) + b"".join(pack(k) + pack(v) for k, v in value.items())
    raise TypeError(f"msgpack: cannot pack a {type(value).__name__}")
