"""Kernel parameter layouts read from AMDGPU code objects' metadata, without a driver.

A code object (ELF for ``EM_AMDGPU``, code object v3 to v6) describes its kernels in a note of
name ``"AMDGPU"`` and type ``NT_AMDGPU_METADATA`` (32), found in a ``PT_NOTE`` segment or an
``SHT_NOTE`` section; its description is a MessagePack map (LLVM's AMDGPUUsage, "Code Object V3
Metadata" and later). Of it this reads ``amdhsa.kernels``, a list with one map per kernel:

- ``.name`` (the kernel's function name) and ``.symbol`` (its kernel descriptor, the name
  followed by ``.kd``);
- ``.args``: one map per argument in order, with ``.offset`` and ``.size`` in the kernarg
  segment and ``.value_kind``. Arguments whose value kind starts with ``hidden_`` are the ones
  the compiler adds after the explicit ones (grid sizes, printf buffer, ...), which the runtime
  fills in; the layout holds only the explicit arguments, the ones a caller's blob carries.
  The metadata gives no argument's alignment, so :func:`layout` infers it.

``.kernarg_segment_size`` is the size of the whole kernarg segment, hidden arguments included
(and ``.kernarg_segment_align`` its alignment): it is not the size of the explicit arguments'
buffer that ``HIP_LAUNCH_PARAM_BUFFER_SIZE`` describes, so it is not used here.

Every function here takes untrusted bytes: it never raises, does work bounded by the input's
size, and leaves out (as unknown) a kernel whose entry it cannot read for certain.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from ..common.params import PT_NOTE, SHT_NOTE, ParamLayout, layout, read_elf
from .images import (
    EM_AMDGPU,
    bundle_entries,
    bundle_target,
    compatible,
    image_kind,
    parse_target_id,
    runs_on,
)

NT_AMDGPU_METADATA = 32
NOTE_NAME = b"AMDGPU"
MAX_DEPTH = 32  # the metadata nests 4 deep (map, kernels, kernel, args, arg); leave room for extensions


# ---- MessagePack --------------------------------------------------------------------------------

class MsgpackError(ValueError):
    """The bytes are not one well-formed MessagePack value of the kinds :func:`unpack` reads."""


MsgpackValue = None | bool | int | float | str | bytes | list["MsgpackValue"] | dict["MsgpackKey", "MsgpackValue"]
MsgpackKey = None | bool | int | float | str | bytes


class _Reader:
    """A cursor over MessagePack bytes; every read checks that the bytes are there."""

    __slots__ = ("data", "position")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def take(self, count: int) -> bytes:
        if count > len(self.data) - self.position:
            raise MsgpackError(f"{count} bytes wanted at offset {self.position}, "
                               f"{len(self.data) - self.position} left")
        start = self.position
        self.position += count
        return self.data[start:self.position]

    def number(self, form: str) -> int | float:
        size = struct.calcsize(form)
        value: int | float = struct.unpack(form, self.take(size))[0]
        return value

    def length(self, size: int) -> int:
        return int(self.number({1: ">B", 2: ">H", 4: ">I"}[size]))

    def items(self, count: int, per_item: int) -> int:
        """``count`` checked against the bytes left (each item takes at least ``per_item``), so that a
        hostile count cannot make a loop run longer than the input."""
        if count * per_item > len(self.data) - self.position:
            raise MsgpackError(f"{count} items claimed at offset {self.position} with "
                               f"{len(self.data) - self.position} bytes left")
        return count

    def value(self, depth: int) -> MsgpackValue:
        if depth > MAX_DEPTH:
            raise MsgpackError(f"nested deeper than {MAX_DEPTH}")
        lead = self.take(1)[0]
        if lead <= 0x7F:
            return lead
        if lead >= 0xE0:
            return lead - 0x100
        if 0xA0 <= lead <= 0xBF:
            return self.text(lead & 0x1F)
        if 0x90 <= lead <= 0x9F:
            return self.array(lead & 0x0F, depth)
        if 0x80 <= lead <= 0x8F:
            return self.map(lead & 0x0F, depth)
        if lead == 0xC0:
            return None
        if lead in (0xC2, 0xC3):
            return lead == 0xC3
        if 0xC4 <= lead <= 0xC6:
            return self.take(self.length(1 << (lead - 0xC4)))
        if lead == 0xCA:
            return self.number(">f")
        if lead == 0xCB:
            return self.number(">d")
        if 0xCC <= lead <= 0xD3:
            return self.number((">B", ">H", ">I", ">Q", ">b", ">h", ">i", ">q")[lead - 0xCC])
        if 0xD9 <= lead <= 0xDB:
            return self.text(self.length(1 << (lead - 0xD9)))
        if lead in (0xDC, 0xDD):
            return self.array(self.length(2 if lead == 0xDC else 4), depth)
        if lead in (0xDE, 0xDF):
            return self.map(self.length(2 if lead == 0xDE else 4), depth)
        raise MsgpackError(f"type byte {lead:#04x} at offset {self.position - 1} is not read here "
                           "(extension types and 0xc1 are not)")

    def text(self, size: int) -> str:
        raw = self.take(size)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MsgpackError(f"a string at offset {self.position - size} is not UTF-8: {exc}") from None

    def array(self, count: int, depth: int) -> list[MsgpackValue]:
        return [self.value(depth + 1) for _ in range(self.items(count, 1))]

    def map(self, count: int, depth: int) -> dict[MsgpackKey, MsgpackValue]:
        result: dict[MsgpackKey, MsgpackValue] = {}
        for _ in range(self.items(count, 2)):
            at = self.position
            key = self.value(depth + 1)
            if isinstance(key, (list, dict)):
                raise MsgpackError(f"a map key at offset {at} is an array or a map")
            if key in result:
                raise MsgpackError(f"map key {key!r} at offset {at} repeats")
            result[key] = self.value(depth + 1)
        return result


def unpack(data: bytes) -> MsgpackValue:
    """The one MessagePack value ``data`` holds: maps, arrays, strings (UTF-8), binary, integers,
    booleans, nil and floats; extension types are not read. :class:`MsgpackError` when the bytes
    are cut short, hold more than one value, nest deeper than ``MAX_DEPTH``, repeat a map key, or
    use a type outside this subset; nothing else is raised, and the work is bounded by the size."""
    reader = _Reader(bytes(data))
    value = reader.value(0)
    if reader.position != len(reader.data):
        raise MsgpackError(f"{len(reader.data) - reader.position} bytes after the value")
    return value


# ---- code objects -------------------------------------------------------------------------------

def _notes(data: bytes, align: int) -> Iterator[tuple[bytes, int, bytes]]:
    """``(name, type, description)`` of each note in a note section or segment's bytes."""
    position = 0
    while position + 12 <= len(data):
        name_size, desc_size, kind = struct.unpack_from("<III", data, position)
        name_start = position + 12
        desc_start = name_start + -(-name_size // align) * align
        desc_end = desc_start + desc_size
        if desc_end > len(data):
            return
        yield data[name_start:name_start + name_size].rstrip(b"\0"), kind, data[desc_start:desc_end]
        position = desc_start + -(-desc_size // align) * align


def metadata(image: bytes) -> MsgpackValue:
    """The decoded ``NT_AMDGPU_METADATA`` note of a code object; ``None`` when it is not a
    little-endian AMDGPU ELF file or has no such note. :class:`MsgpackError` if the note is malformed."""
    elf = read_elf(image)
    if elf is None or elf.machine != EM_AMDGPU:
        return None
    places = [(segment.offset, segment.size, segment.align) for segment in elf.segments if segment.type == PT_NOTE]
    places += [(section.offset, section.size, section.align) for section in elf.sections if section.type == SHT_NOTE]
    for offset, size, align in places:
        data = elf.data(offset, size)
        if data is None:
            continue
        for name, kind, description in _notes(data, 8 if align == 8 else 4):
            if name == NOTE_NAME and kind == NT_AMDGPU_METADATA:
                return unpack(description)
    return None


def _kernel_layout(kernel: dict[MsgpackKey, MsgpackValue]) -> ParamLayout | None:
    args = kernel.get(".args")
    if not isinstance(args, list):
        return None
    params: list[tuple[int, int]] = []
    for arg in args:
        if not isinstance(arg, dict):
            return None
        kind, offset, size = arg.get(".value_kind"), arg.get(".offset"), arg.get(".size")
        if not isinstance(kind, str) or type(offset) is not int or type(size) is not int:
            return None
        if not kind.startswith("hidden_"):
            params.append((offset, size))
    try:
        return layout(params)
    except ValueError:
        return None


def code_object_layouts(image: bytes) -> dict[str, ParamLayout]:
    """The explicit-argument layout of every kernel of an AMDGPU code object, by kernel name.

    Keyed by the name a program looks a kernel up by: ``.symbol`` without ``.kd``, and ``.name``
    too where it differs. A kernel whose entry is not readable (or that appears twice with other
    arguments) is left out; a file that is not a code object, or whose metadata is malformed,
    gives ``{}``. Never raises."""
    try:
        document = metadata(image)
    except (MsgpackError, ValueError, TypeError, struct.error, RecursionError):
        return {}
    if not isinstance(document, dict):
        return {}
    kernels = document.get("amdhsa.kernels")
    if not isinstance(kernels, list):
        return {}
    found: dict[str, ParamLayout] = {}
    conflicting: set[str] = set()
    for kernel in kernels:
        if not isinstance(kernel, dict):
            continue
        parsed = _kernel_layout(kernel)
        names = set()
        symbol, name = kernel.get(".symbol"), kernel.get(".name")
        if isinstance(symbol, str) and symbol.endswith(".kd") and len(symbol) > 3:
            names.add(symbol[:-3])
        if isinstance(name, str) and name:
            names.add(name)
        for key in names:
            if parsed is None or found.setdefault(key, parsed) != parsed:
                conflicting.add(key)
    for key in conflicting:
        found.pop(key, None)
    return found


def _entry_runs_on(triple: str, entry: bytes, arch: str) -> bool:
    """Whether a bundle entry is the code for a device whose ``gcnArchName`` is ``arch``."""
    target = bundle_target(triple)
    if target is None or image_kind(entry) != "code-object":
        return False
    processor, pinned = parse_target_id(target)
    device_processor, device_features = parse_target_id(arch)
    if not runs_on(processor, device_processor):
        return False
    if any(device_features.get(name, wanted) != wanted for name, wanted in pinned.items()):
        return False
    return compatible(entry, arch)[0]


def image_layouts(image: bytes, arch: str) -> dict[str, ParamLayout]:
    """Kernel layouts of an AMDGPU image for a device whose ``gcnArchName`` is ``arch``
    (``gfx90a:sramecc+:xnack-``): a code object (read whatever its target: the driver decides
    whether it loads), or an uncompressed clang offload bundle, from which the first entry that
    device runs is read (its target ID's processor and pinned features, and the code object's own).

    A compressed bundle gives ``{}``: reading it needs a decompressor (zlib or zstd), and the
    layouts stay unknown. So does anything unreadable. Never raises."""
    try:
        data = bytes(image)
        kind = image_kind(data)
        if kind == "code-object":
            return code_object_layouts(data)
        if kind != "bundle":
            return {}
        for triple, entry in bundle_entries(data):
            if _entry_runs_on(triple, entry, arch):
                return code_object_layouts(entry)
        return {}
    except (ValueError, TypeError, struct.error, IndexError, AttributeError):
        return {}
