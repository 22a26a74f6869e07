"""The structural check of a host image's dynamic table and of everything it points to.

What the dynamic loader reads through ``PT_DYNAMIC``, checked the way it reads it: the table is
terminated and names each single-valued tag once; every table it points to (strings, symbols,
hash tables, symbol versions, relocations, init/fini arrays) lies in the file contents of a
loadable segment, with the right entry size and alignment; strings are NUL-terminated inside
``DT_STRSZ``; hash chains stay inside the symbol table and end; version indices stay inside the
version table the loader builds; every relocation has a known type, a symbol index below the
symbol count and a target inside a writable segment (any segment with ``DT_TEXTREL``) that is not
one of those tables; code addresses the loader calls (``DT_INIT``, ``DT_FINI``, IFUNC resolvers)
lie in executable segments; and the section view of the symbol table equals the loader's.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass

from .host_elf import PF_W, PF_X, PT_TLS, SHT_DYNAMIC, SHT_DYNSYM, ElfImage, Segment, invalid

DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_PLTGOT, DT_HASH, DT_STRTAB, DT_SYMTAB = 0, 1, 2, 3, 4, 5, 6
DT_RELA, DT_RELASZ, DT_RELAENT, DT_STRSZ, DT_SYMENT, DT_INIT, DT_FINI = 7, 8, 9, 10, 11, 12, 13
DT_SONAME, DT_RPATH, DT_REL, DT_RELSZ, DT_RELENT, DT_PLTREL, DT_TEXTREL, DT_JMPREL = 14, 15, 17, 18, 19, 20, 22, 23
DT_INIT_ARRAY, DT_FINI_ARRAY, DT_INIT_ARRAYSZ, DT_FINI_ARRAYSZ, DT_RUNPATH, DT_FLAGS = 25, 26, 27, 28, 29, 30
DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ, DT_RELRSZ, DT_RELR, DT_RELRENT = 32, 33, 35, 36, 37
DT_GNU_HASH, DT_TLSDESC_PLT, DT_TLSDESC_GOT = 0x6FFFFEF5, 0x6FFFFEF6, 0x6FFFFEF7
DT_CONFIG, DT_DEPAUDIT, DT_AUDIT = 0x6FFFFEFA, 0x6FFFFEFB, 0x6FFFFEFC
DT_VERSYM, DT_RELACOUNT, DT_RELCOUNT, DT_FLAGS_1 = 0x6FFFFFF0, 0x6FFFFFF9, 0x6FFFFFFA, 0x6FFFFFFB
DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF
DT_AUXILIARY, DT_FILTER = 0x7FFFFFFD, 0x7FFFFFFF
DF_TEXTREL = 0x4
DF_1_NOOPEN, DF_1_PIE = 0x40, 0x08000000

TAG_NAMES = {value: name for name, value in globals().items() if name.startswith("DT_")}
MULTI_VALUED = {DT_NEEDED, DT_AUXILIARY, DT_FILTER}
STRING_TAGS = {DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH, DT_AUXILIARY, DT_FILTER, DT_CONFIG, DT_DEPAUDIT,
               DT_AUDIT}
ARRAYS = ((DT_INIT_ARRAY, DT_INIT_ARRAYSZ), (DT_FINI_ARRAY, DT_FINI_ARRAYSZ), (DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ))

STB_GLOBAL, STB_WEAK = 1, 2
STT_OBJECT, STT_FUNC, STT_TLS, STT_GNU_IFUNC = 1, 2, 6, 10
STV_DEFAULT, STV_PROTECTED = 0, 3
SHN_ABS, SHN_COMMON, SHN_LORESERVE = 0xFFF1, 0xFFF2, 0xFF00
EM_MIPS, EM_PPC64, EM_X86_64, EM_AARCH64 = 8, 21, 62, 183
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


@dataclass(frozen=True)
class ElfSymbol:
    name: str
    kind: str  # "function" or "object"
    size: int


class _Strings:
    """The dynamic string table (``DT_STRTAB``/``DT_STRSZ``)."""

    def __init__(self, image: ElfImage, address: int, size: int):
        if size == 0:
            raise invalid("DT_STRSZ is 0")
        self.offset = image.file_offset(address, size, "the dynamic string table (DT_STRTAB)")
        if image.data[self.offset + size - 1] != 0:
            raise invalid("the dynamic string table (DT_STRTAB) does not end with a NUL byte")
        self.data = image.data
        self.size = size

    def at(self, index: int, what: str) -> bytes:
        if index >= self.size:
            raise invalid(f"{what}: string offset {index:#x} is outside the dynamic string table "
                          f"({self.size:#x} bytes)")
        start = self.offset + index
        return self.data[start:self.data.index(b"\0", start)]


def check_dynamic(image: ElfImage, dynamic: Segment) -> dict[str, ElfSymbol]:
    """Check the dynamic table at ``dynamic`` and all it points to; return the exported symbols."""
    tags, needed = _read_tags(image, dynamic)
    for tag in (DT_STRTAB, DT_STRSZ, DT_SYMTAB):
        if tag not in tags:
            raise invalid(f"the dynamic table has no {TAG_NAMES[tag]}")
    flags_1 = tags.get(DT_FLAGS_1, 0)
    if flags_1 & DF_1_PIE:
        raise invalid("the image is a position-independent executable (DF_1_PIE), not a shared object")
    if flags_1 & DF_1_NOOPEN:
        raise invalid("the image says it must not be loaded with dlopen (DF_1_NOOPEN)")
    strings = _Strings(image, tags[DT_STRTAB], tags[DT_STRSZ])
    needed_names = {strings.at(value, "DT_NEEDED") for value in needed}
    for tag, value in tags.items():
        if tag in STRING_TAGS:
            strings.at(value, TAG_NAMES[tag])
    layout = image.layout
    if tags.get(DT_SYMENT, layout.sym.size) != layout.sym.size:
        raise invalid(f"DT_SYMENT is {tags[DT_SYMENT]}, a symbol of this class has {layout.sym.size} bytes")
    protected = _Ranges()
    protected.add(dynamic.vaddr, dynamic.filesz)
    protected.add(tags[DT_STRTAB], tags[DT_STRSZ])
    hashed = _hashed_symbol_count(image, tags, protected)
    tables = _relocation_tables(image, tags, protected)
    count = _symbol_count(image, tags, hashed, tables)
    symtab = tags[DT_SYMTAB]
    if symtab % layout.word:
        raise invalid(f"the dynamic symbol table (DT_SYMTAB) at {symtab:#x} is misaligned")
    symbols_offset = image.file_offset(symtab, count * layout.sym.size, "the dynamic symbol table (DT_SYMTAB)")
    protected.add(symtab, count * layout.sym.size)
    _check_versions(image, tags, strings, needed_names, count, protected)
    _check_code_and_arrays(image, tags)
    _check_relocations(image, tags, tables, count, symbols_offset, protected)
    _check_sections(image, dynamic, tags, count)
    return _symbols(image, symbols_offset, count, strings)


def _read_tags(image: ElfImage, dynamic: Segment) -> tuple[dict[int, int], list[int]]:
    """The dynamic entries up to DT_NULL: single-valued tags by tag, and the DT_NEEDED values."""
    data = image.data
    tags: dict[int, int] = {}
    needed: list[int] = []
    for tag, value in image.layout.dyn.iter_unpack(data[dynamic.offset:dynamic.offset + dynamic.filesz]):
        if tag == DT_NULL:
            return tags, needed
        if tag == DT_NEEDED:
            needed.append(value)
        elif tag in MULTI_VALUED:
            continue
        elif tag in tags:
            raise invalid(f"the dynamic table has more than one {TAG_NAMES.get(tag, hex(tag))} entry")
        else:
            tags[tag] = value
    raise invalid("the dynamic table has no DT_NULL terminator inside PT_DYNAMIC")


class _Ranges:
    """Address ranges the loader reads as tables: no relocation may write into them."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []
        self._merged: list[tuple[int, int]] | None = None

    def add(self, start: int, size: int) -> None:
        if size:
            self.ranges.append((start, start + size))
            self._merged = None

    def overlaps(self, start: int, end: int) -> bool:
        if self._merged is None:
            merged: list[tuple[int, int]] = []
            for low, high in sorted(self.ranges):
                if merged and low <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], high))
                else:
                    merged.append((low, high))
            self._merged = merged
            self._starts = [low for low, _ in merged]
        index = bisect.bisect_left(self._starts, end) - 1
        return index >= 0 and self._merged[index][1] > start


def _hashed_symbol_count(image: ElfImage, tags: dict[int, int], protected: _Ranges) -> int:
    """How many symbols the hash tables reach (after checking that every chain ends inside them)."""
    counts = []
    if DT_HASH in tags:
        counts.append(_sysv_hash_count(image, tags[DT_HASH], protected))
    if DT_GNU_HASH in tags:
        counts.append(_gnu_hash_count(image, tags[DT_GNU_HASH], protected))
    if not counts:
        raise invalid("the dynamic table has neither DT_HASH nor DT_GNU_HASH: no symbol can be looked up")
    return max(counts)


def _symbol_count(image: ElfImage, tags: dict[int, int], hashed: int,
                  tables: list[tuple[str, int, int, bool, int]]) -> int:
    """How many dynamic symbols there are. The loader indexes the table without a count: DT_HASH
    counts all symbols, DT_GNU_HASH only those lookups can find (undefined ones may follow them),
    the SHT_DYNSYM section all of them; relocations may use any of them."""
    layout = image.layout
    sections = [s.size // layout.sym.size for s in image.sections if s.type == SHT_DYNSYM]
    count = max(hashed, *sections)
    used = 0
    for _name, address, size, rela, _relative in tables:
        entry = layout.rela if rela else layout.rel
        offset = image.file_offset(address, size, _name)
        for fields in entry.iter_unpack(image.data[offset:offset + size]):
            used = max(used, fields[1] >> layout.r_sym_shift)
    if used >= count:
        if DT_HASH in tags or sections:
            raise invalid(f"a relocation uses dynamic symbol {used}, the symbol table has {count} symbols")
        count = used + 1
    if count == 0:
        raise invalid("the dynamic symbol table is empty (not even the null symbol)")
    return count


def _sysv_hash_count(image: ElfImage, address: int, protected: _Ranges) -> int:
    if address % 4:
        raise invalid(f"DT_HASH at {address:#x} is misaligned")
    u32 = image.layout.u32
    offset = image.file_offset(address, 8, "the DT_HASH header")
    nbucket, nchain = u32.unpack_from(image.data, offset)[0], u32.unpack_from(image.data, offset + 4)[0]
    if nbucket == 0:
        raise invalid("DT_HASH has no buckets")
    size = 4 * (2 + nbucket + nchain)
    offset = image.file_offset(address, size, "the DT_HASH table")
    protected.add(address, size)
    values = array("I", image.data[offset + 8:offset + size])
    buckets, chains = values[:nbucket], values[nbucket:]
    if max(values) >= nchain:
        raise invalid(f"DT_HASH: a bucket or chain entry is not below the symbol count {nchain}")
    seen = bytearray(nchain)
    for start in buckets:
        index = start
        while index:
            if seen[index]:
                raise invalid(f"DT_HASH: the chains loop or share symbol {index}")
            seen[index] = 1
            index = chains[index]
    return nchain


def _gnu_hash_count(image: ElfImage, address: int, protected: _Ranges) -> int:
    word = image.layout.word
    if address % word:
        raise invalid(f"DT_GNU_HASH at {address:#x} is misaligned")
    u32 = image.layout.u32
    offset = image.file_offset(address, 16, "the DT_GNU_HASH header")
    nbuckets, symoffset, bloom_size, bloom_shift = (u32.unpack_from(image.data, offset + 4 * i)[0] for i in range(4))
    if nbuckets == 0 or bloom_size == 0 or bloom_size & (bloom_size - 1) or bloom_shift >= 32:
        raise invalid(f"DT_GNU_HASH: {nbuckets} buckets, bloom filter of {bloom_size} words shifted by "
                      f"{bloom_shift} (need buckets, a power-of-two filter and a shift below 32)")
    buckets_at = 16 + bloom_size * word
    chains_at = buckets_at + 4 * nbuckets
    offset = image.file_offset(address, chains_at, "the DT_GNU_HASH table")
    buckets = array("I", image.data[offset + buckets_at:offset + chains_at])
    top = max(buckets)
    count = symoffset
    if top:
        if min(b for b in buckets if b) < symoffset:
            raise invalid(f"DT_GNU_HASH: a bucket points below the first hashed symbol {symoffset}")
        # Chains run forward from each bucket to an entry with bit 0 set; the last chain ends the table.
        start = image.file_offset(address + chains_at, 0, "the DT_GNU_HASH chains")
        available = _file_bytes_from(image, address + chains_at)
        index = top
        while True:
            position = 4 * (index - symoffset)
            if position + 4 > available:
                raise invalid("DT_GNU_HASH: a hash chain runs past its segment without ending")
            if u32.unpack_from(image.data, start + position)[0] & 1:
                break
            index += 1
        count = index + 1
    protected.add(address, chains_at + 4 * max(0, count - symoffset))
    return count


def _file_bytes_from(image: ElfImage, address: int) -> int:
    load = image.segment_of(address)
    assert load is not None  # the caller checked it with file_offset
    return load.vaddr + load.filesz - address


def _check_versions(image: ElfImage, tags: dict[int, int], strings: _Strings, needed: set[bytes], count: int,
                    protected: _Ranges) -> None:
    """Symbol versions: the chains the loader walks, and version indices inside the table it builds."""
    high = 0
    if DT_VERNEED in tags:
        high = max(high, _walk_versions(image, tags[DT_VERNEED], strings, needed, protected))
    if DT_VERDEF in tags:
        high = max(high, _walk_versions(image, tags[DT_VERDEF], strings, None, protected))
    if DT_VERSYM not in tags:
        return
    address = tags[DT_VERSYM]
    if address % 2:
        raise invalid(f"DT_VERSYM at {address:#x} is misaligned")
    if high == 0:
        raise invalid("DT_VERSYM without DT_VERDEF or DT_VERNEED entries that define version indices")
    offset = image.file_offset(address, 2 * count, "the symbol version table (DT_VERSYM)")
    protected.add(address, 2 * count)
    indices = array("H", image.data[offset:offset + 2 * count])
    worst = max(value & 0x7FFF for value in indices)
    if worst > high:
        raise invalid(f"DT_VERSYM: version index {worst} is not defined (the highest is {high})")


def _walk_versions(image: ElfImage, address: int, strings: _Strings, needed: set[bytes] | None,
                   protected: _Ranges) -> int:
    """Walk the DT_VERNEED (``needed`` given) or DT_VERDEF chain as the loader does; return the
    highest version index. The loader follows the links (``vn_next``, ``vna_next``, ``vd_next``)
    and reads the first auxiliary entry of a definition; the counts it ignores, and so does this."""
    kind = "DT_VERNEED" if needed is not None else "DT_VERDEF"
    entry_size, aux_size = (16, 16) if needed is not None else (20, 8)
    data, u16, u32 = image.data, image.layout.u16, image.layout.u32
    high = 0
    position, end = address, address
    while True:
        if position % 4:
            raise invalid(f"a {kind} entry at {position:#x} is misaligned")
        offset = image.file_offset(position, entry_size, f"a {kind} entry")
        version = u16.unpack_from(data, offset)[0]
        if needed is not None:
            file_at, aux, following = (u32.unpack_from(data, offset + i)[0] for i in (4, 8, 12))
            name = strings.at(file_at, f"{kind} file name")
            if name not in needed:  # the loader asserts that it is loaded: it is a dependency
                raise invalid(f"{kind} names {name!r}, which is not a DT_NEEDED library of the image")
        else:
            high = max(high, u16.unpack_from(data, offset + 4)[0] & 0x7FFF)
            aux, following = u32.unpack_from(data, offset + 12)[0], u32.unpack_from(data, offset + 16)[0]
        if version != 1 or aux < entry_size:
            raise invalid(f"a {kind} entry has version {version} and its auxiliary entry at +{aux}")
        aux_position = position + aux
        while True:
            if aux_position % 4:
                raise invalid(f"a {kind} auxiliary entry at {aux_position:#x} is misaligned")
            aux_offset = image.file_offset(aux_position, aux_size, f"a {kind} auxiliary entry")
            end = max(end, aux_position + aux_size)
            if needed is None:
                strings.at(u32.unpack_from(data, aux_offset)[0], f"{kind} version name")
                break
            high = max(high, u16.unpack_from(data, aux_offset + 6)[0] & 0x7FFF)
            strings.at(u32.unpack_from(data, aux_offset + 8)[0], f"{kind} version name")
            step = u32.unpack_from(data, aux_offset + 12)[0]
            if step == 0:
                break
            if step < aux_size:
                raise invalid(f"a {kind} auxiliary entry links to +{step}, inside itself")
            aux_position += step
        end = max(end, position + entry_size)
        if following == 0:
            break
        if following < entry_size:
            raise invalid(f"a {kind} entry links to +{following}, inside itself")
        position += following
    protected.add(address, end - address)
    return high


def _check_code_and_arrays(image: ElfImage, tags: dict[int, int]) -> None:
    """Addresses the loader calls, and the arrays of them it walks, lie where they must."""
    word = image.layout.word
    for tag in (DT_INIT, DT_FINI):
        if tag in tags:
            image.file_offset(tags[tag], 1, TAG_NAMES[tag], PF_X)
    for array_tag, size_tag in ARRAYS:
        if (array_tag in tags) != (size_tag in tags):
            raise invalid(f"{TAG_NAMES[array_tag]} and {TAG_NAMES[size_tag]} must come together")
        if array_tag in tags:
            address, size = tags[array_tag], tags[size_tag]
            if address % word or size % word:
                raise invalid(f"{TAG_NAMES[array_tag]} at {address:#x} of {size} bytes is not an array of pointers")
            image.file_offset(address, size, TAG_NAMES[array_tag])
    for tag, size in ((DT_PLTGOT, 3 * word), (DT_TLSDESC_PLT, 1), (DT_TLSDESC_GOT, word)):
        if tag in tags and image.segment_of(tags[tag], size) is None:
            raise invalid(f"{TAG_NAMES[tag]} at {tags[tag]:#x} is not inside a loadable segment")


def _relocation_tables(image: ElfImage, tags: dict[int, int],
                       protected: _Ranges) -> list[tuple[str, int, int, bool, int]]:
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


def _check_relocations(image: ElfImage, tags: dict[int, int], tables: list[tuple[str, int, int, bool, int]],
                       count: int, symbols_offset: int, protected: _Ranges) -> None:
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
                 protected: _Ranges):
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


def _check_sections(image: ElfImage, dynamic: Segment, tags: dict[int, int], count: int) -> None:
    """Where section headers exist, their dynamic table and symbol table are the loader's."""
    sections = image.sections
    dynamic_sections = [s for s in sections if s.type == SHT_DYNAMIC]
    symbol_sections = [s for s in sections if s.type == SHT_DYNSYM]
    if len(dynamic_sections) > 1 or len(symbol_sections) > 1:
        raise invalid("more than one SHT_DYNAMIC or SHT_DYNSYM section")
    for sec in dynamic_sections:
        if sec.addr != dynamic.vaddr or sec.offset != dynamic.offset or sec.size > dynamic.filesz:
            raise invalid(f"section {sec.number} (SHT_DYNAMIC) is not the PT_DYNAMIC segment")
    for sec in symbol_sections:
        names = sections[sec.link]
        if (sec.addr != tags[DT_SYMTAB] or sec.size // image.layout.sym.size != count
                or names.addr != tags[DT_STRTAB] or names.size != tags[DT_STRSZ]):  # count: >= hashed, used
            raise invalid(f"section {sec.number} (SHT_DYNSYM) or its string table is not the table the dynamic "
                          f"loader uses (DT_SYMTAB, DT_STRTAB, DT_STRSZ, the hash table's symbol count)")


def _symbols(image: ElfImage, offset: int, count: int, strings: _Strings) -> dict[str, ElfSymbol]:
    """Check every dynamic symbol; return the defined, exported functions and data objects by name."""
    layout = image.layout
    shnum = len(image.sections)
    tls = next((s for s in image.segments if s.type == PT_TLS), None)
    code_checked = image.machine != EM_PPC64  # ELFv1 function symbols point at descriptors in data
    exported: dict[str, ElfSymbol] = {}
    for index, fields in enumerate(layout.sym.iter_unpack(image.data[offset:offset + count * layout.sym.size])):
        name, info, other, shndx, value, size = layout.symbol(fields)
        if name >= strings.size:
            raise invalid(f"dynamic symbol {index}: its name lies outside the dynamic string table")
        if shndx == 0:
            continue
        if (shndx >= SHN_LORESERVE and shndx not in (SHN_ABS, SHN_COMMON)) or (shnum and shndx < SHN_LORESERVE
                                                                                and shndx >= shnum):
            raise invalid(f"dynamic symbol {index}: section index {shndx:#x} is not a section")
        kind, bind = info & 0xF, info >> 4
        if shndx < SHN_LORESERVE:
            what = f"dynamic symbol {index}"
            if kind in (STT_FUNC, STT_GNU_IFUNC) and code_checked:
                image.file_offset(value, 1, f"{what} (a function)", PF_X)
            elif kind == STT_OBJECT and image.segment_of(value, size) is None:
                raise invalid(f"{what} (a data object of {size} bytes at {value:#x}) is not inside a loadable segment")
            elif kind == STT_TLS and (tls is None or value + size > tls.memsz):
                raise invalid(f"{what} (thread-local) lies outside the PT_TLS block")
        if bind not in (STB_GLOBAL, STB_WEAK) or other & 3 not in (STV_DEFAULT, STV_PROTECTED):
            continue
        if kind in (STT_FUNC, STT_GNU_IFUNC):
            symbol_kind = "function"
        elif kind == STT_OBJECT:
            symbol_kind = "object"
        else:
            continue
        try:
            text = strings.at(name, "symbol name").decode()
        except UnicodeDecodeError:
            continue  # no olGetSymbol name (UTF-8) can reach it
        exported[text] = ElfSymbol(text, symbol_kind, size)
    return exported
