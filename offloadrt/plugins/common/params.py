"""Kernel parameter layouts, and the little ELF reading the CUDA and AMDGPU image parsers share.

A kernel's parameters travel to the GPU as one buffer in which each parameter sits at its offset,
laid out as a C struct of the parameters would be. The buffer ends where the last parameter ends:
``saxpy(float, const float*, float*, int)`` has parameters at (offset, size) (0, 4) (8, 8) (16, 8)
(24, 4), so its buffer is 28 bytes, while ``sizeof`` of the C struct of them is 32 (tail padding
to the struct's alignment, 8). CUDA's driver refuses a launch whose buffer is longer than the
kernel's (``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``), so a runtime that packs C structs trims a blob
that is longer only by tail padding, and refuses one that is too short. :class:`ParamLayout`
holds what it needs for that; the parsers of program images (``cuda/params.py``,
``amdgpu/metadata.py``) build them, with :func:`layout`.

:func:`read_elf` is a bounded reader of little-endian ELF files (cubins and AMDGPU code objects):
it never raises, and its work and memory grow no faster than the image's size.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

MAX_INFERRED_ALIGN = 16  # the largest alignment a C parameter commonly has (long double, float4, alignas(16))


class ParamLayout:
    """The parameter buffer of one kernel: each parameter's (offset, size), in order, and the
    alignment of the C struct of them.

    ``size`` is where the last parameter ends (0 without parameters): the buffer the driver takes.
    ``padded`` is ``size`` rounded up to ``align``: ``sizeof`` of the C struct of the parameters.
    Immutable and compared by value; the constructor checks that offsets and sizes are
    non-negative integers, that parameters come in order without overlapping, and that ``align``
    is a power of two (``ValueError`` otherwise).
    """

    __slots__ = ("params", "align", "size", "padded")

    params: tuple[tuple[int, int], ...]
    align: int
    size: int
    padded: int

    def __init__(self, params: Sequence[tuple[int, int]], align: int = 1) -> None:
        checked: list[tuple[int, int]] = []
        end = 0
        for entry in params:
            offset, size = entry
            if type(offset) is not int or type(size) is not int or offset < 0 or size < 0:
                raise ValueError(f"a parameter's offset and size are non-negative integers, not {entry!r}")
            if offset < end:
                raise ValueError(f"parameter {len(checked)} at offset {offset} overlaps the one before it "
                                 f"(which ends at {end})")
            end = offset + size
            checked.append((offset, size))
        if type(align) is not int or align < 1 or align & (align - 1):
            raise ValueError(f"a struct's alignment is a power of two, not {align!r}")
        object.__setattr__(self, "params", tuple(checked))
        object.__setattr__(self, "align", align)
        object.__setattr__(self, "size", end)
        object.__setattr__(self, "padded", round_up(end, align))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ParamLayout is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ParamLayout is immutable (cannot delete {name!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ParamLayout):
            return NotImplemented
        return self.params == other.params and self.align == other.align

    def __hash__(self) -> int:
        return hash((self.params, self.align))

    def __repr__(self) -> str:
        return f"ParamLayout({list(self.params)!r}, align={self.align})"

    def __reduce__(self) -> tuple[type[ParamLayout], tuple[tuple[tuple[int, int], ...], int]]:
        return ParamLayout, (self.params, self.align)

    def describe(self) -> str:
        """For error messages: ``"4 parameters in 28 bytes (32 with C struct padding)"``."""
        count = len(self.params)
        if count == 0:
            return "no parameters (0 bytes)"
        text = f"{count} parameter{'s' if count != 1 else ''} in {self.size} byte{'s' if self.size != 1 else ''}"
        if self.padded != self.size:
            text += f" ({self.padded} with C struct padding)"
        return text


def round_up(value: int, align: int) -> int:
    """``value`` rounded up to a multiple of ``align`` (≥ 1)."""
    return -(-value // align) * align


def inferred_align(offset: int, size: int) -> int:
    """The alignment a parameter at ``offset`` of ``size`` bytes may have when nothing says it.

    The largest power of two, at most 16, that divides both the size (a C type's size is a multiple
    of its alignment) and the offset (it is placed at a multiple of it). This may over-estimate
    (an ``int[2]`` struct at offset 0 is taken as 8-aligned), which only lets a blob carry more
    trailing padding; it under-estimates only a type aligned to more than 16 (``alignas(32)``),
    whose C struct is then taken as shorter than it is. A parameter of no bytes is taken as
    1-aligned: it asks nothing of the layout.
    """
    if size == 0:
        return 1
    align = min(MAX_INFERRED_ALIGN, size & -size)
    if offset:
        align = min(align, offset & -offset)
    return align


def layout(params: Sequence[tuple[int, int]], aligns: Sequence[int | None] | None = None) -> ParamLayout:
    """A :class:`ParamLayout` from (offset, size) pairs in parameter order.

    ``aligns`` gives each parameter's alignment where known (``None`` or a missing list: infer it
    with :func:`inferred_align`); the struct's alignment is the largest. ``ValueError`` when the
    pairs are not a layout (see :class:`ParamLayout`) or ``aligns`` has another length.
    """
    pairs = [tuple(entry) for entry in params]
    if aligns is not None and len(aligns) != len(pairs):
        raise ValueError(f"{len(aligns)} alignments for {len(pairs)} parameters")
    align = 1
    for index, entry in enumerate(pairs):
        if len(entry) != 2:
            raise ValueError(f"a parameter is an (offset, size) pair, not {entry!r}")
        offset, size = entry
        given = aligns[index] if aligns is not None else None
        if given is None:
            if type(offset) is not int or type(size) is not int or offset < 0 or size < 0:
                raise ValueError(f"a parameter's offset and size are non-negative integers, not {entry!r}")
            given = inferred_align(offset, size)
        elif type(given) is not int or given < 1 or given & (given - 1):
            raise ValueError(f"parameter {index}'s alignment is a power of two, not {given!r}")
        align = max(align, given)
    return ParamLayout([(entry[0], entry[1]) for entry in pairs], align)


# ---- ELF ----------------------------------------------------------------------------------------

SHT_SYMTAB, SHT_NOTE, SHT_NOBITS = 2, 7, 8
PT_NOTE = 4
STT_FUNC = 2
MAX_NAME = 1 << 16  # longer names (C++ templates can be long, not this long) are not read


class ElfSection(NamedTuple):
    """One section header: ``name`` decoded (invalid UTF-8 replaced), the rest as in the file."""

    name: str
    type: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int


class ElfSegment(NamedTuple):
    """One program header's type, file range and alignment."""

    type: int
    offset: int
    size: int
    align: int


class ElfSymbol(NamedTuple):
    """One symbol table entry."""

    name: str
    info: int
    other: int
    shndx: int
    value: int
    size: int

    @property
    def kind(self) -> int:
        """``STT_*``: the low four bits of ``st_info``."""
        return self.info & 0xF


class ElfImage:
    """A little-endian ELF file's header fields, section headers and program headers.

    Made by :func:`read_elf`, which has checked that the tables lie inside the file; what a
    header points at is checked when it is read (:meth:`data` gives ``None`` when it is outside).
    """

    __slots__ = ("image", "machine", "flags", "abi_version", "elf64", "sections", "segments")

    def __init__(self, image: bytes, machine: int, flags: int, abi_version: int, elf64: bool,
                 sections: list[ElfSection], segments: list[ElfSegment]) -> None:
        self.image = image
        self.machine = machine
        self.flags = flags
        self.abi_version = abi_version
        self.elf64 = elf64
        self.sections = sections
        self.segments = segments

    def data(self, offset: int, size: int) -> bytes | None:
        """The file's bytes ``[offset, offset + size)``, or ``None`` when they are not all in it."""
        if offset < 0 or size < 0 or offset + size > len(self.image):
            return None
        return self.image[offset:offset + size]

    def section_data(self, section: ElfSection) -> bytes | None:
        """A section's contents (``b""`` for ``SHT_NOBITS``), or ``None`` when outside the file."""
        if section.type == SHT_NOBITS:
            return b""
        return self.data(section.offset, section.size)

    def section(self, name: str) -> ElfSection | None:
        """The first section named ``name``."""
        for section in self.sections:
            if section.name == name:
                return section
        return None

    def symbols(self, table: ElfSection) -> Iterator[ElfSymbol]:
        """The symbols of a symbol table section (its string table is the section ``sh_link`` names);
        nothing when the table or its strings are unreadable."""
        entry = 24 if self.elf64 else 16
        data = self.section_data(table)
        if data is None or table.entsize not in (0, entry) or not 0 < table.link < len(self.sections):
            return
        table_data = self.section_data(self.sections[table.link])
        if table_data is None:
            return
        strings = StringTable(table_data)
        for position in range(0, len(data) - entry + 1, entry):
            if self.elf64:
                name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, position)
            else:
                name, value, size, info, other, shndx = struct.unpack_from("<IIIBBH", data, position)
            yield ElfSymbol(strings.name(name), info, other, shndx, value, size)


class StringTable:
    """Names from an ELF string table, at a bounded cost: each name is read up to ``MAX_NAME``
    bytes, and all names together up to a few times the table's size (a hostile file whose
    entries all point into one long unterminated run gets empty names once that is spent)."""

    __slots__ = ("table", "budget")

    def __init__(self, table: bytes) -> None:
        self.table = table
        self.budget = 4 * len(table) + MAX_NAME

    def name(self, offset: int) -> str:
        """The NUL-terminated name at ``offset`` (``""`` when out of range, unterminated, or over budget)."""
        if not 0 <= offset < len(self.table) or self.budget <= 0:
            return ""
        end = self.table.find(b"\0", offset, offset + MAX_NAME)
        self.budget -= (end if end >= 0 else offset + MAX_NAME) - offset
        if end < 0:
            return ""
        return self.table[offset:end].decode("utf-8", errors="replace")


def read_elf(image: bytes) -> ElfImage | None:
    """The section and program headers of a little-endian ELF file (ELF32 or ELF64), or ``None``
    when it is not one or its header tables do not lie inside it. Never raises."""
    try:
        return _read_elf(bytes(image))
    except (struct.error, ValueError, TypeError, IndexError):
        return None


def _read_elf(image: bytes) -> ElfImage | None:
    if len(image) < 52 or image[:4] != b"\x7fELF" or image[5] != 1 or image[4] not in (1, 2):
        return None
    elf64 = image[4] == 2
    if elf64:
        if len(image) < 64:
            return None
        (_, machine, _, _, phoff, shoff, flags, _, phentsize, phnum, shentsize, shnum,
         shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", image, 16)
        section_format, segment_format = "<IIQQQQIIQQ", "<IIQQQQQQ"
    else:
        (_, machine, _, _, phoff, shoff, flags, _, phentsize, phnum, shentsize, shnum,
         shstrndx) = struct.unpack_from("<HHIIIIIHHHHHH", image, 16)
        section_format, segment_format = "<IIIIIIIIII", "<IIIIIIII"
    section_size, segment_size = struct.calcsize(section_format), struct.calcsize(segment_format)

    raw_sections: list[tuple[int, ...]] = []
    if shoff:
        if shentsize < section_size:
            return None
        if shnum == 0 or shstrndx == 0xFFFF:  # extended numbering: the real values are in section 0
            if shoff + section_size > len(image):
                return None
            first = struct.unpack_from(section_format, image, shoff)
            shnum = shnum or first[5]  # sh_size
            shstrndx = first[6] if shstrndx == 0xFFFF else shstrndx  # sh_link
        if shnum * shentsize > len(image) - shoff:
            return None
        for index in range(shnum):
            raw_sections.append(struct.unpack_from(section_format, image, shoff + index * shentsize))
    # Both classes order a section header's fields alike: name, type, flags, addr, offset, size, link,
    # info, addralign, entsize.
    names = StringTable(b"")
    if 0 < shstrndx < len(raw_sections):
        offset, size = raw_sections[shstrndx][4:6]
        if offset + size <= len(image):
            names = StringTable(image[offset:offset + size])
    sections = []
    for name, kind, _, _, offset, size, link, info, align, entsize in raw_sections:
        sections.append(ElfSection(names.name(name), kind, offset, size, link, info, align, entsize))

    segments = []
    if phoff and phnum:
        if phentsize < segment_size or phnum * phentsize > len(image) - phoff:
            return None
        for index in range(phnum):
            fields = struct.unpack_from(segment_format, image, phoff + index * phentsize)
            if elf64:
                kind, _, offset, _, _, filesz, _, align = fields
            else:
                kind, offset, _, _, filesz, _, _, align = fields
            segments.append(ElfSegment(kind, offset, filesz, align))
    return ElfImage(image, machine, flags, image[8], elf64, sections, segments)
