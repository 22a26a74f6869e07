"""The structural check of a host image's relocations: what the dynamic loader writes, and where.

Every relocation table (``DT_RELA``, ``DT_REL``, ``DT_JMPREL``, ``DT_RELR``) lies in the file
contents of a loadable segment with the right entry size; tables do not overlap (except
``DT_JMPREL`` as the tail of ``DT_RELA``, which the loader expects); every relocation has a type
the loader applies (copy relocations are for executables only), a symbol index below the symbol
count, and a target inside a writable segment (any segment with ``DT_TEXTREL``) that is not a
table the loader reads; relative pointers stay inside the image; IFUNC resolvers and every
init/fini array slot point at code of the image.
"""

from __future__ import annotations

from array import array

from .elf import PF_W, PF_X, ElfImage, invalid
from .elf_tags import (
    ARRAYS,
    DF_TEXTREL,
    DT_FLAGS,
    DT_JMPREL,
    DT_PLTREL,
    DT_PLTRELSZ,
    DT_REL,
    DT_RELA,
    DT_RELACOUNT,
    DT_RELAENT,
    DT_RELASZ,
    DT_RELCOUNT,
    DT_RELENT,
    DT_RELR,
    DT_RELRENT,
    DT_RELRSZ,
    DT_RELSZ,
    DT_TEXTREL,
    TAG_NAMES,
    Ranges,
)

SHN_LORESERVE = 0xFF00
EM_PPC64, EM_X86_64, EM_AARCH64 = 21, 62, 183
# Machines whose loader ignores DT_REL: their images carry DT_RELA only.
RELA_ONLY = {EM_X86_64, EM_AARCH64, EM_PPC64, 22, 243, 258}
# Relocation types glibc applies, with the bytes each writes at r_offset (0: writes nothing).
RELOCATION_WIDTHS = {
    EM_X86_64: {0: 0, 1: 8, 2: 4, 6: 8, 7: 8, 8: 8, 10: 4, 16: 8, 17: 8, 18: 8, 32: 4, 33: 8, 36: 16, 37: 8, 38: 8},
    EM_AARCH64: {0: 0, 257: 8, 1025: 8, 1026: 8, 1027: 8, 1028: 8, 1029: 8, 1030: 8, 1031: 16, 1032: 8},
}
RELATIVE_TYPES = {EM_X86_64: {8, 38}, EM_AARCH64: {1027}}
IRELATIVE_TYPE = {EM_X86_64: 37, EM_AARCH64: 1032}
ABSOLUTE_TYPE = {EM_X86_64: 1, EM_AARCH64: 257}  # a full-width symbol value + addend
COPY_TYPE = {EM_X86_64: 5, EM_AARCH64: 1024}


def relocation_tables(image: ElfImage, tags: dict[int, int],
                       protected: Ranges) -> list[tuple[str, int, int, bool, int]]:
    """The relocation tables the loader applies, each checked in place: (name, address, size, RELA,
    relative count)."""
    layout = image.layout
    machine = image.machine
    tables: list[tuple[str, int, int, bool, int]] = []  # name, address, size, rela, relative count
    for table, size_tag, entry_tag, rela, count_tag in ((DT_RELA, DT_RELASZ, DT_RELAENT, True, DT_RELACOUNT),
                                                        (DT_REL, DT_RELSZ, DT_RELENT, False, DT_RELCOUNT)):
        entry = layout.rela.size if rela else layout.rel.size
        if tags.get(entry_tag, entry) != entry:
            raise invalid(f"{TAG_NAMES[entry_tag]} is {tags[entry_tag]}, a relocation here has {entry} bytes")
        if table not in tags:
            if tags.get(size_tag) or count_tag in tags:
                raise invalid(f"{TAG_NAMES[size_tag]} or {TAG_NAMES[count_tag]} without {TAG_NAMES[table]}")
            continue
        if not rela and machine in RELA_ONLY:
            raise invalid("DT_REL relocations on a machine whose loader applies DT_RELA only")
        if size_tag not in tags or entry_tag not in tags:
            raise invalid(f"{TAG_NAMES[table]} needs {TAG_NAMES[size_tag]} and {TAG_NAMES[entry_tag]}")
        tables.append((TAG_NAMES[table], tags[table], tags[size_tag], rela, tags.get(count_tag, 0)))
    plt = [tag for tag in (DT_JMPREL, DT_PLTREL, DT_PLTRELSZ) if tag in tags]
    if plt:
        if len(plt) != 3:
            raise invalid("DT_JMPREL, DT_PLTREL and DT_PLTRELSZ must come together")
        kind = tags[DT_PLTREL]
        if kind not in (DT_RELA, DT_REL) or (kind == DT_REL and machine in RELA_ONLY):
            raise invalid(f"DT_PLTREL is {kind}, not a relocation kind this machine's loader applies")
        tables.append(("DT_JMPREL", tags[DT_JMPREL], tags[DT_PLTRELSZ], kind == DT_RELA, 0))
    for name, address, size, rela, _ in tables:
        entry = layout.rela.size if rela else layout.rel.size
        if address % layout.word or size % entry:
            raise invalid(f"{name} at {address:#x} of {size} bytes is not an array of {entry}-byte relocations")
        image.file_offset(address, size, f"the relocation table {name}")
        protected.add(address, size)
    _check_table_overlap(tables)
    return tables


def check_relocations(image: ElfImage, tags: dict[int, int], tables: list[tuple[str, int, int, bool, int]],
                       count: int, symbols_offset: int, protected: Ranges) -> None:
    check = _Relocations(image, tags, count, symbols_offset, protected)
    if DT_RELR in tags or DT_RELRSZ in tags:
        check.relr()
    for name, address, size, rela, relative in tables:
        check.table(name, address, size, rela, relative)
    check.arrays()


def _check_table_overlap(tables: list[tuple[str, int, int, bool, int]]) -> None:
    """Relocation tables are disjoint, except DT_JMPREL as the tail of DT_RELA (the loader subtracts it)."""
    spans = [(address, address + size, name) for name, address, size, _, _ in tables if size]
    for i, (start, end, name) in enumerate(spans):
        for other_start, other_end, other in spans[i + 1:]:
            if start < other_end and other_start < end:
                tail = {name, other} == {"DT_RELA", "DT_JMPREL"} and end == other_end
                if not tail:
                    raise invalid(f"the relocation tables {name} and {other} overlap")


class _Relocations:
    """Checks each relocation, and what the loader will call through the init/fini arrays.

    A pointer a relocation makes from the load address (a relative relocation) must point into the
    image: outside it, what it reaches depends on the address-space layout, so a test load in
    another process proves nothing about it. Each init/fini array slot must be relocated to code of
    the image (or to a symbol the loader resolves), since the loader calls every slot.
    """

    def __init__(self, image: ElfImage, tags: dict[int, int], count: int, symbols_offset: int,
                 protected: Ranges):
        self.image = image
        self.tags = tags
        self.count = count
        self.symbols_offset = symbols_offset
        self.protected = protected
        self.textrel = DT_TEXTREL in tags or bool(tags.get(DT_FLAGS, 0) & DF_TEXTREL)
        self.low = image.loads[0].vaddr
        self.high = max(load.vaddr + load.memsz for load in image.loads)
        machine = image.machine
        self.widths = RELOCATION_WIDTHS.get(machine)
        self.relatives = RELATIVE_TYPES.get(machine, set())
        self.absolute = ABSOLUTE_TYPE.get(machine)
        self.irelative = IRELATIVE_TYPE.get(machine)
        # init/fini array slot address -> (what writes it, the value or symbol index)
        self.slots: dict[int, tuple[str, int] | None] = {}
        if self.widths is not None:
            for array_tag, size_tag in ARRAYS:
                if array_tag in tags:
                    base = tags[array_tag]
                    for slot in range(base, base + tags[size_tag], image.layout.word):
                        self.slots[slot] = None

    def table(self, name: str, address: int, size: int, rela: bool, relative: int) -> None:
        layout = self.image.layout
        entry = layout.rela if rela else layout.rel
        if relative > size // entry.size:
            raise invalid(f"{name}: {relative} relative relocations counted, the table has {size // entry.size}")
        shift, mask = layout.r_sym_shift, layout.r_type_mask
        offset = self.image.file_offset(address, size, name)
        for index, fields in enumerate(entry.iter_unpack(self.image.data[offset:offset + size])):
            r_offset, r_info = fields[0], fields[1]
            addend = fields[2] if rela else None
            r_type, r_sym = r_info & mask, r_info >> shift
            what = f"{name} entry {index}"
            if r_sym >= self.count:
                raise invalid(f"{what}: symbol index {r_sym} is not below the symbol count {self.count}")
            if self.widths is None:
                self._target(r_offset, layout.word, what)
                continue
            width = self.widths.get(r_type, -1)
            if width < 0:
                said = "a copy relocation (only executables may have them)" if r_type == COPY_TYPE.get(
                    self.image.machine) else f"unknown relocation type {r_type}"
                raise invalid(f"{what}: {said}")
            relative_type = r_type in self.relatives or (r_type == self.absolute and r_sym == 0)
            if index < relative and r_type not in self.relatives:
                raise invalid(f"{what}: counted as relative, but of type {r_type}")
            if width:
                self._target(r_offset, width, what)
            if addend is not None and relative_type and not self.low <= addend <= self.high:
                raise invalid(f"{what}: relative relocation to {addend:#x}, outside the image "
                              f"({self.low:#x}..{self.high:#x})")
            if addend is not None and r_type == self.irelative:
                self.image.file_offset(addend, 1, f"{what}: the IFUNC resolver", PF_X)
            if width and r_offset in self.slots:  # (a NONE relocation writes nothing)
                if self.slots[r_offset] is not None:
                    raise invalid(f"{what}: a second relocation of init/fini array slot {r_offset:#x}")
                if relative_type and addend is not None:
                    self.slots[r_offset] = ("address", addend)
                elif r_type == self.absolute or r_type in self.relatives:
                    self.slots[r_offset] = ("symbol", r_sym) if r_sym else ("stored", r_offset)
                else:
                    raise invalid(f"{what}: relocation type {r_type} in an init/fini array slot")

    def relr(self) -> None:
        """DT_RELR: packed relative relocations (an address, then bitmaps of the words after it)."""
        image, tags = self.image, self.tags
        word = image.layout.word
        if DT_RELR not in tags or DT_RELRSZ not in tags or tags.get(DT_RELRENT) != word:
            raise invalid(f"DT_RELR needs DT_RELRSZ and DT_RELRENT of {word}")
        address, size = tags[DT_RELR], tags[DT_RELRSZ]
        if address % word or size % word:
            raise invalid(f"DT_RELR at {address:#x} of {size} bytes is not an array of words")
        offset = image.file_offset(address, size, "the relocation table DT_RELR")
        self.protected.add(address, size)
        where: int | None = None
        for index, value in enumerate(array("Q" if word == 8 else "I", image.data[offset:offset + size])):
            what = f"DT_RELR entry {index}"
            if not value & 1:
                if value % word:
                    raise invalid(f"{what}: address {value:#x} is misaligned")
                self._relr_slot(value, what)
                where = value + word
                continue
            if where is None:
                raise invalid(f"{what}: a bitmap before any address")
            bits, slot = value >> 1, 0
            while bits:
                if bits & 1:
                    self._relr_slot(where + slot * word, what)
                bits >>= 1
                slot += 1
            where += (8 * word - 1) * word

    def _relr_slot(self, address: int, what: str) -> None:
        word = self.image.layout.word
        self._target(address, word, what)
        stored = self.image.layout.addr.unpack_from(self.image.data,
                                                    self.image.file_offset(address, word, what))[0]
        if not self.low <= stored <= self.high:
            raise invalid(f"{what}: relative relocation at {address:#x} to {stored:#x}, outside the image")
        if address in self.slots:
            self.slots[address] = ("address", stored)

    def _target(self, address: int, width: int, what: str) -> None:
        load = self.image.segment_of(address, width)
        if load is None:
            raise invalid(f"{what} writes {width} bytes at {address:#x}, outside every loadable segment")
        if not self.textrel and not load.flags & PF_W:
            raise invalid(f"{what} writes at {address:#x} in {load.describe()}, which is not writable "
                          f"(no DT_TEXTREL)")
        if self.protected.overlaps(address, address + width):
            raise invalid(f"{what} writes at {address:#x} into a table the dynamic loader reads")

    def arrays(self) -> None:
        """Every init/fini array slot is relocated to code the loader may call."""
        layout = self.image.layout
        for slot, written in self.slots.items():
            what = f"the init/fini array slot at {slot:#x}"
            if written is None:
                raise invalid(f"{what} is not relocated: the loader would call an address that depends on "
                              f"where it maps the image")
            how, value = written
            if how == "address":
                self.image.file_offset(value, 1, f"{what} (its function)", PF_X)
            elif how == "symbol":
                fields = layout.symbol(layout.sym.unpack_from(
                    self.image.data, self.symbols_offset + value * layout.sym.size))
                if fields[3] != 0 and fields[3] < SHN_LORESERVE:  # defined here: it must be code here
                    self.image.file_offset(fields[4], 1, f"{what} (function symbol {value})", PF_X)
            else:
                raise invalid(f"{what} holds an absolute address")
