"""The structural check of a host program image (an ELF shared object) before the dynamic loader sees it.

The dynamic loader trusts its input: an offset, size or index that points outside the file or
outside a table makes it read or write wild memory, divide by zero or fail an internal assertion,
and that ends the process (SIGSEGV, SIGBUS, SIGFPE, or ``Inconsistency detected by ld.so`` and
exit 127). The checks cover every field the loader (glibc's ``ld.so``) uses, the way it
uses them, so that a malformed image is ``INVALID_BINARY`` with a reason instead. Here:

- the ELF header: identification, version, sizes of itself and of its tables, counts, indices;
- every program header: inside the file, ``p_memsz >= p_filesz``, page-aligned as the loader
  requires, ``PT_LOAD`` segments ascending and disjoint, and every segment the loader reads from
  memory (``PT_DYNAMIC``, ``PT_PHDR``, ``PT_TLS``, notes, ``PT_GNU_RELRO``, ``PT_GNU_EH_FRAME``)
  inside the file-backed part of a ``PT_LOAD`` at the matching file offset;
- every section header: inside the file, links and infos in range, entry sizes of symbol,
  relocation and dynamic sections right, allocated sections where their segment puts them, and
  the section view of the dynamic symbol table equal to the loader's (``elf_dynamic``).

The dynamic table, hash tables, symbols, symbol versions and relocations are checked by
:mod:`.elf_dynamic`. Images of the host's class and byte order only; ELF64 little-endian
is what the supported hosts run and what the tests cover.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from typing import NamedTuple

from ...errors import ErrorCode, OffloadError

ELF_MAGIC = b"\x7fELF"
MACHINE_NAMES = {3: "x86", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "S390", 40: "ARM", 62: "x86-64",
                 183: "AArch64", 190: "CUDA", 224: "AMDGPU", 243: "RISC-V", 258: "LoongArch"}
ET_DYN = 3
EV_CURRENT = 1
ELFOSABI_SYSV, ELFOSABI_GNU = 0, 3
PAGE_SIZE = mmap.PAGESIZE

PT_LOAD, PT_DYNAMIC, PT_INTERP, PT_NOTE, PT_PHDR, PT_TLS = 1, 2, 3, 4, 6, 7
PT_GNU_EH_FRAME, PT_GNU_STACK, PT_GNU_RELRO, PT_GNU_PROPERTY = 0x6474E550, 0x6474E551, 0x6474E552, 0x6474E553
PF_X, PF_W = 1, 2
SEGMENT_NAMES = {PT_LOAD: "PT_LOAD", PT_DYNAMIC: "PT_DYNAMIC", PT_INTERP: "PT_INTERP", PT_NOTE: "PT_NOTE",
                 PT_PHDR: "PT_PHDR", PT_TLS: "PT_TLS", PT_GNU_EH_FRAME: "PT_GNU_EH_FRAME",
                 PT_GNU_STACK: "PT_GNU_STACK", PT_GNU_RELRO: "PT_GNU_RELRO", PT_GNU_PROPERTY: "PT_GNU_PROPERTY"}
# Segments that may appear once only (the loader keeps the last one it sees).
SINGLE_SEGMENTS = (PT_DYNAMIC, PT_INTERP, PT_PHDR, PT_TLS, PT_GNU_EH_FRAME, PT_GNU_RELRO, PT_GNU_PROPERTY)

SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_HASH, SHT_DYNAMIC, SHT_NOBITS, SHT_REL = 0, 2, 3, 4, 5, 6, 8, 9
SHT_DYNSYM, SHT_SYMTAB_SHNDX, SHT_GNU_VERSYM = 11, 18, 0x6FFFFFFF
SHF_ALLOC, SHF_INFO_LINK = 0x2, 0x40
SHN_LORESERVE, SHN_XINDEX = 0xFF00, 0xFFFF

MAX_LOAD_SPAN = 1 << 40  # address space the loader reserves for one image
MAX_LOAD_ALIGN = 1 << 30
MAX_TLS_ALIGN = 1 << 16
MAX_TLS_SIZE = 1 << 30


def invalid(reason: str) -> OffloadError:
    return OffloadError(ErrorCode.INVALID_BINARY, reason)


class Layout:
    """Field layouts of one ELF class and byte order (``struct`` formats, sizes, r_info split)."""

    def __init__(self, wide: bool, endian: str):
        self.wide = wide
        self.endian = endian
        self.word = 8 if wide else 4
        self.address_limit = 1 << (47 if wide else 32)  # no image address or size reaches this
        if wide:
            self.ehdr = struct.Struct(endian + "16sHHIQQQIHHHHHH")
            self.phdr = struct.Struct(endian + "IIQQQQQQ")  # type flags offset vaddr paddr filesz memsz align
            self.shdr = struct.Struct(endian + "IIQQQQIIQQ")
            self.sym = struct.Struct(endian + "IBBHQQ")  # name info other shndx value size
            self.dyn = struct.Struct(endian + "qQ")
            self.rela = struct.Struct(endian + "QQq")
            self.rel = struct.Struct(endian + "QQ")
            self.r_sym_shift, self.r_type_mask = 32, 0xFFFFFFFF
        else:
            self.ehdr = struct.Struct(endian + "16sHHIIIIIHHHHHH")
            self.phdr = struct.Struct(endian + "IIIIIIII")  # type offset vaddr paddr filesz memsz flags align
            self.shdr = struct.Struct(endian + "IIIIIIIIII")
            self.sym = struct.Struct(endian + "IIIBBH")  # name value size info other shndx
            self.dyn = struct.Struct(endian + "iI")
            self.rela = struct.Struct(endian + "IIi")
            self.rel = struct.Struct(endian + "II")
            self.r_sym_shift, self.r_type_mask = 8, 0xFF
        self.u16 = struct.Struct(endian + "H")
        self.u32 = struct.Struct(endian + "I")
        self.addr = struct.Struct(endian + ("Q" if wide else "I"))

    def segment(self, index: int, fields: tuple[int, ...]) -> Segment:
        if self.wide:
            p_type, flags, offset, vaddr, _paddr, filesz, memsz, align = fields
        else:
            p_type, offset, vaddr, _paddr, filesz, memsz, flags, align = fields
        return Segment(index, p_type, flags, offset, vaddr, filesz, memsz, align)

    def symbol(self, fields: tuple[int, ...]) -> tuple[int, int, int, int, int, int]:
        """(name, info, other, shndx, value, size) whatever the class."""
        if self.wide:
            return fields  # type: ignore[return-value]
        name, value, size, info, other, shndx = fields
        return name, info, other, shndx, value, size


class Segment(NamedTuple):
    number: int  # its place in the program header table
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int

    def describe(self) -> str:
        return f"program header {self.number} ({SEGMENT_NAMES.get(self.type, hex(self.type))})"


class Section(NamedTuple):
    number: int  # its section index
    name: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int


class ElfImage:
    """An image whose header and tables were read and checked, with address translation for the rest."""

    def __init__(self, data: bytes, layout: Layout, machine: int, segments: list[Segment],
                 sections: list[Section]):
        self.data = data
        self.layout = layout
        self.machine = machine
        self.segments = segments
        self.sections = sections
        self.loads = [s for s in segments if s.type == PT_LOAD]
        self._starts = [s.vaddr for s in self.loads]

    def span(self) -> int:
        """Bytes of address space the loader reserves for the loadable segments (page-rounded)."""
        first, last = self.loads[0].vaddr & ~(PAGE_SIZE - 1), max(s.vaddr + s.memsz for s in self.loads)
        return -(-(last - first) // PAGE_SIZE) * PAGE_SIZE

    def segment_of(self, vaddr: int, size: int = 0) -> Segment | None:
        """The ``PT_LOAD`` whose memory image holds ``[vaddr, vaddr + size)``, if one does."""
        index = bisect.bisect_right(self._starts, vaddr) - 1
        if index < 0:
            return None
        load = self.loads[index]
        return load if vaddr + size <= load.vaddr + load.memsz else None

    def file_offset(self, vaddr: int, size: int, what: str, flag: int = 0) -> int:
        """The file offset of ``[vaddr, vaddr + size)``, which must lie in the file-backed part of one
        ``PT_LOAD`` (with segment flag ``flag``: ``PF_W``, ``PF_X``), as the loader reads it from there."""
        index = bisect.bisect_right(self._starts, vaddr) - 1
        load = self.loads[index] if index >= 0 else None
        if load is None or vaddr + size > load.vaddr + load.filesz:
            raise invalid(f"{what} at address {vaddr:#x} ({size:#x} bytes) is not inside the file contents "
                          f"of a loadable segment")
        if flag and not load.flags & flag:
            kind = "writable" if flag == PF_W else "executable"
            raise invalid(f"{what} at address {vaddr:#x} is in {load.describe()}, which is not {kind}")
        return load.offset + (vaddr - load.vaddr)


def machine_name(machine: int) -> str:
    return MACHINE_NAMES.get(machine, f"e_machine {machine}")


def check_header(data: bytes, host: tuple[int, int, int]) -> tuple[Layout, tuple[int, ...]]:
    """Check the ELF header against the host's (class, data encoding, machine); return its fields."""
    if len(data) < 16 or data[:4] != ELF_MAGIC:
        raise invalid("not an ELF image (bad magic or too short)")
    host_class, host_data, host_machine = host
    if data[4] != host_class or data[5] != host_data:
        raise invalid(f"ELF class/encoding {data[4]}/{data[5]} does not match the host's {host_class}/{host_data}")
    layout = Layout(data[4] == 2, "<" if data[5] == 1 else ">")
    if len(data) < layout.ehdr.size:
        raise invalid(f"truncated ELF header: the image has {len(data)} bytes, the header needs {layout.ehdr.size}")
    header = layout.ehdr.unpack_from(data, 0)
    ident, e_type, e_machine, e_version = header[:4]
    if e_machine != host_machine:
        raise invalid(f"image is built for {machine_name(e_machine)}, the host is {machine_name(host_machine)}")
    if e_type != ET_DYN:
        raise invalid(f"image is not a shared object (ELF type {e_type}); build it with `cc -shared -fPIC`")
    if ident[6] != EV_CURRENT or e_version != EV_CURRENT:
        raise invalid(f"unknown ELF version {ident[6]}/{e_version} (expected {EV_CURRENT})")
    osabi, abi_version = ident[7], ident[8]
    if osabi not in (ELFOSABI_SYSV, ELFOSABI_GNU) or (abi_version and osabi != ELFOSABI_GNU) or abi_version > 15:
        raise invalid(f"unsupported OS ABI {osabi} version {abi_version} in e_ident")
    if any(ident[9:]):
        raise invalid("nonzero padding in e_ident")
    e_ehsize, e_phentsize = header[8], header[9]
    if e_ehsize != layout.ehdr.size:
        raise invalid(f"e_ehsize is {e_ehsize}, an ELF header of this class has {layout.ehdr.size} bytes")
    if e_phentsize != layout.phdr.size:
        raise invalid(f"e_phentsize is {e_phentsize}, a program header of this class has {layout.phdr.size} bytes")
    return layout, header


def read_segments(data: bytes, layout: Layout, header: tuple[int, ...]) -> list[Segment]:
    """The program headers, each checked on its own and the ``PT_LOAD`` ones against each other."""
    phoff, phnum = header[5], header[10]
    size = len(data)
    if phnum == 0:
        raise invalid("the image has no program headers")
    if phnum >= 0xFFFF:
        raise invalid(f"e_phnum {phnum:#x} (extended program header numbering is not supported)")
    if phoff % layout.word:
        raise invalid(f"the program header table at offset {phoff:#x} is misaligned")
    if phoff + phnum * layout.phdr.size > size:
        raise invalid(f"truncated or missing program header table: {phnum} headers at offset {phoff:#x} run past "
                      f"the end of the image ({size} bytes)")
    table = data[phoff:phoff + phnum * layout.phdr.size]
    segments = [layout.segment(i, fields) for i, fields in enumerate(layout.phdr.iter_unpack(table))]
    limit = layout.address_limit
    seen: set[int] = set()
    previous_end = -1
    for seg in segments:
        what = seg.describe()
        if seg.type in SINGLE_SEGMENTS:
            if seg.type in seen:
                raise invalid(f"{what}: more than one {SEGMENT_NAMES[seg.type]} segment")
            seen.add(seg.type)
        if seg.filesz and seg.offset + seg.filesz > size:
            raise invalid(f"truncated image: {what} ends at byte {seg.offset + seg.filesz}, the image has {size}")
        if seg.type in SEGMENT_NAMES and seg.memsz < seg.filesz:
            raise invalid(f"{what}: p_memsz {seg.memsz:#x} is smaller than p_filesz {seg.filesz:#x}")
        if seg.type in SEGMENT_NAMES and seg.vaddr + seg.memsz > limit:
            raise invalid(f"{what}: address range {seg.vaddr:#x} + {seg.memsz:#x} is out of range")
        if seg.type != PT_LOAD:
            continue
        if seg.memsz == 0:
            raise invalid(f"{what}: empty loadable segment")
        align = seg.align
        if align and (align & (align - 1) or align % PAGE_SIZE or align > MAX_LOAD_ALIGN):
            raise invalid(f"{what}: alignment {align:#x} is not a power of two multiple of the page size "
                          f"({PAGE_SIZE:#x}) up to {MAX_LOAD_ALIGN:#x}")
        if (seg.vaddr - seg.offset) % (align or PAGE_SIZE) or (not align and seg.vaddr != seg.offset):
            raise invalid(f"{what}: address {seg.vaddr:#x} and file offset {seg.offset:#x} are not congruent "
                          f"modulo the alignment")
        if seg.vaddr < previous_end:
            raise invalid(f"{what}: loadable segments must be in ascending address order without overlap "
                          f"(it starts at {seg.vaddr:#x}, the previous one ends at {previous_end:#x})")
        previous_end = seg.vaddr + seg.memsz
    loads = [s for s in segments if s.type == PT_LOAD]
    if not loads:
        raise invalid("the image has no loadable segment")
    span = loads[-1].vaddr + loads[-1].memsz - (loads[0].vaddr & ~(PAGE_SIZE - 1))
    if span > MAX_LOAD_SPAN:
        raise invalid(f"the loadable segments span {span:#x} bytes of address space")
    return segments


def check_memory_segments(image: ElfImage, header: tuple[int, ...]) -> Segment:
    """Check the segments the loader reads through their load address; return ``PT_DYNAMIC``."""
    layout = image.layout
    dynamic = None
    for seg in image.segments:
        what = seg.describe()
        if seg.type == PT_DYNAMIC:
            if seg.filesz == 0 or seg.filesz % layout.dyn.size or seg.vaddr % layout.word:
                raise invalid(f"{what}: size {seg.filesz:#x} or address {seg.vaddr:#x} does not fit "
                              f"{layout.dyn.size}-byte dynamic entries")
            _check_mapped(image, seg, what, PF_W if image.machine != 8 else 0)  # MIPS keeps .dynamic read-only
            dynamic = seg
        elif seg.type == PT_PHDR:
            table_size = header[10] * layout.phdr.size
            if seg.filesz < table_size or seg.offset != header[5]:
                raise invalid(f"{what} does not describe the program header table at offset {header[5]:#x}")
            _check_mapped(image, seg, what)
        elif seg.type == PT_TLS:
            if seg.align and (seg.align & (seg.align - 1) or seg.align > MAX_TLS_ALIGN):
                raise invalid(f"{what}: alignment {seg.align:#x} is not a power of two up to {MAX_TLS_ALIGN:#x}")
            if seg.memsz > MAX_TLS_SIZE:
                raise invalid(f"{what}: {seg.memsz:#x} bytes of thread-local storage")
            if seg.filesz:
                _check_mapped(image, seg, what)
        elif seg.type in (PT_NOTE, PT_GNU_PROPERTY):
            _check_mapped(image, seg, what)
            _check_notes(image, seg, what)
        elif seg.type == PT_GNU_EH_FRAME:
            _check_mapped(image, seg, what)
        elif seg.type == PT_GNU_RELRO:
            if seg.memsz and image.segment_of(seg.vaddr, seg.memsz) is None:
                raise invalid(f"{what}: range {seg.vaddr:#x} + {seg.memsz:#x} is not inside one loadable segment")
        elif seg.type == PT_INTERP:
            text = image.data[seg.offset:seg.offset + seg.filesz]
            if not text or text[-1] != 0:
                raise invalid(f"{what}: the interpreter name is not a NUL-terminated string")
    if dynamic is None:
        raise invalid("the image has no PT_DYNAMIC segment (no dynamic section)")
    return dynamic


def _check_mapped(image: ElfImage, seg: Segment, what: str, flag: int = 0) -> None:
    """``seg`` lies in the file-backed part of a ``PT_LOAD`` at its own file offset."""
    if image.file_offset(seg.vaddr, seg.filesz, what, flag) != seg.offset:
        raise invalid(f"{what}: file offset {seg.offset:#x} does not match where its loadable segment puts "
                      f"address {seg.vaddr:#x}")


def _check_notes(image: ElfImage, seg: Segment, what: str) -> None:
    """A GNU property note lies inside its segment: the loader walks an 8-aligned note segment to find
    one and reads its descriptor (other notes it skips by their sizes, and so does this)."""
    if seg.align != 8:
        return
    u32 = image.layout.u32
    position, end = seg.offset, seg.offset + seg.filesz
    while position + 12 <= end:
        namesz, descsz, kind = (u32.unpack_from(image.data, position + i)[0] for i in (0, 4, 8))
        desc = position + (12 + namesz + 7) // 8 * 8
        if namesz == 4 and kind == 5:  # NT_GNU_PROPERTY_TYPE_0: the loader compares the name first
            if position + 16 > end:
                raise invalid(f"{what}: a note's name runs past the end of the segment")
            if image.data[position + 12:position + 16] == b"GNU\0" and desc + descsz > end:
                raise invalid(f"{what}: a GNU property note of {descsz} bytes runs past the end of the segment")
        position = position + ((desc - position) + descsz + 7) // 8 * 8


def read_sections(data: bytes, layout: Layout, header: tuple[int, ...]) -> list[Section]:
    """The section headers (none is fine: the loader does not use them), each checked on its own."""
    shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
    size = len(data)
    if shnum == 0:
        if shoff or shstrndx:
            raise invalid("extended section numbering (e_shnum 0 with a section table) is not supported")
        return []
    if shentsize != layout.shdr.size:
        raise invalid(f"e_shentsize is {shentsize}, a section header of this class has {layout.shdr.size} bytes")
    if shoff % layout.word or shoff + shnum * shentsize > size:
        raise invalid(f"truncated or misaligned section header table: {shnum} headers at offset {shoff:#x}, "
                      f"the image has {size} bytes")
    if shstrndx >= shnum:
        raise invalid(f"e_shstrndx {shstrndx} is not a section index (there are {shnum})")
    table = data[shoff:shoff + shnum * shentsize]
    sections = [Section(i, *fields) for i, fields in enumerate(layout.shdr.iter_unpack(table))]
    if sections[0].type != SHT_NULL:
        raise invalid("section 0 is not SHT_NULL")
    entry_sizes = {SHT_SYMTAB: layout.sym.size, SHT_DYNSYM: layout.sym.size, SHT_RELA: layout.rela.size,
                   SHT_REL: layout.rel.size, SHT_DYNAMIC: layout.dyn.size, SHT_GNU_VERSYM: 2, SHT_SYMTAB_SHNDX: 4}
    for sec in sections[1:]:
        what = f"section {sec.number}"
        if sec.type != SHT_NOBITS and sec.size and sec.offset + sec.size > size:
            raise invalid(f"truncated image: {what} ends at byte {sec.offset + sec.size}, the image has {size}")
        if sec.link >= shnum or ((sec.type in (SHT_REL, SHT_RELA) or sec.flags & SHF_INFO_LINK)
                                 and sec.info >= shnum):
            raise invalid(f"{what}: sh_link {sec.link} or sh_info {sec.info} is not a section index")
        if sec.align & (sec.align - 1):
            raise invalid(f"{what}: alignment {sec.align:#x} is not a power of two")
        expected = entry_sizes.get(sec.type)
        if expected is not None and (sec.entsize != expected or sec.size % expected):
            raise invalid(f"{what}: entry size {sec.entsize} or size {sec.size:#x} does not fit {expected}-byte "
                          f"entries")
        if sec.type in (SHT_SYMTAB, SHT_DYNSYM) and sections[sec.link].type != SHT_STRTAB:
            raise invalid(f"{what}: its string table (section {sec.link}) is not SHT_STRTAB")
    if shstrndx:
        names = sections[shstrndx]
        if names.type != SHT_STRTAB or not names.size or data[names.offset + names.size - 1] != 0:
            raise invalid(f"the section name table (section {shstrndx}) is not a NUL-terminated string table")
        if any(sec.name >= names.size for sec in sections):
            raise invalid("a section name lies outside the section name table")
    return sections


def check_section_placement(image: ElfImage) -> None:
    """Allocated sections lie where their loadable segment maps them; symbol names lie in their string table."""
    data = image.data
    for sec in image.sections[1:]:
        what = f"section {sec.number}"
        if sec.flags & SHF_ALLOC and sec.type != SHT_NOBITS and sec.size:
            if image.file_offset(sec.addr, sec.size, what) != sec.offset:
                raise invalid(f"{what}: file offset {sec.offset:#x} does not match where its loadable segment "
                              f"puts address {sec.addr:#x}")
        if sec.type in (SHT_SYMTAB, SHT_DYNSYM) and sec.size:
            strings = image.sections[sec.link]
            if strings.type == SHT_NOBITS or not strings.size or data[strings.offset + strings.size - 1] != 0:
                raise invalid(f"{what}: its string table is empty or not NUL-terminated")
            if max(symbol_names(image.layout, data, sec.offset, sec.size // image.layout.sym.size)) >= strings.size:
                raise invalid(f"{what}: a symbol name lies outside its string table")


def symbol_names(layout: Layout, data: bytes, offset: int, count: int) -> memoryview | list[int]:
    """The st_name field of ``count`` symbols at ``offset`` (the first field in both classes).

    The image has the host's byte order (checked first), so native 32-bit words read it."""
    if not count:
        return [0]
    step = layout.sym.size
    return memoryview(data)[offset:offset + count * step].cast("I")[::step // 4]
