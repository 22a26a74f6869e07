"""The structural check of a host image's dynamic table and of everything it points to.

What the dynamic loader reads through ``PT_DYNAMIC``, checked the way it reads it: the table is
terminated and names each single-valued tag once; every table it points to (strings, symbols,
hash tables, symbol versions, init/fini arrays) lies in the file contents of a loadable segment,
with the right entry size and alignment; strings are NUL-terminated inside ``DT_STRSZ``; hash
chains stay inside the symbol table and end; version indices stay inside the version table the
loader builds; code addresses the loader calls (``DT_INIT``, ``DT_FINI``, IFUNC symbols) lie in
executable segments, data symbols inside a segment; and the section view of the symbol table
equals the loader's. Relocations are checked by :mod:`.elf_relocations`.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from .elf import PF_X, PT_TLS, SHT_DYNAMIC, SHT_DYNSYM, ElfImage, Segment, invalid
from .elf_relocations import check_relocations, relocation_tables
from .elf_tags import (
    ARRAYS,
    DF_1_NOOPEN,
    DF_1_PIE,
    DT_FINI,
    DT_FLAGS_1,
    DT_GNU_HASH,
    DT_HASH,
    DT_INIT,
    DT_NEEDED,
    DT_NULL,
    DT_PLTGOT,
    DT_STRSZ,
    DT_STRTAB,
    DT_SYMENT,
    DT_SYMTAB,
    DT_TLSDESC_GOT,
    DT_TLSDESC_PLT,
    DT_VERDEF,
    DT_VERNEED,
    DT_VERSYM,
    MULTI_VALUED,
    STRING_TAGS,
    TAG_NAMES,
    Ranges,
)

STB_GLOBAL, STB_WEAK = 1, 2
STT_OBJECT, STT_FUNC, STT_TLS, STT_GNU_IFUNC = 1, 2, 6, 10
STV_DEFAULT, STV_PROTECTED = 0, 3
SHN_ABS, SHN_COMMON, SHN_LORESERVE = 0xFFF1, 0xFFF2, 0xFF00
EM_PPC64 = 21


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
    protected = Ranges()
    protected.add(dynamic.vaddr, dynamic.filesz)
    protected.add(tags[DT_STRTAB], tags[DT_STRSZ])
    hashed = _hashed_symbol_count(image, tags, protected)
    tables = relocation_tables(image, tags, protected)
    count = _symbol_count(image, tags, hashed, tables)
    symtab = tags[DT_SYMTAB]
    if symtab % layout.word:
        raise invalid(f"the dynamic symbol table (DT_SYMTAB) at {symtab:#x} is misaligned")
    symbols_offset = image.file_offset(symtab, count * layout.sym.size, "the dynamic symbol table (DT_SYMTAB)")
    protected.add(symtab, count * layout.sym.size)
    _check_versions(image, tags, strings, needed_names, count, protected)
    _check_code_and_arrays(image, tags)
    check_relocations(image, tags, tables, count, symbols_offset, protected)
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


def _hashed_symbol_count(image: ElfImage, tags: dict[int, int], protected: Ranges) -> int:
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


def _sysv_hash_count(image: ElfImage, address: int, protected: Ranges) -> int:
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


def _gnu_hash_count(image: ElfImage, address: int, protected: Ranges) -> int:
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
                    protected: Ranges) -> None:
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
                   protected: Ranges) -> int:
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
