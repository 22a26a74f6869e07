"""Kernel parameter layouts read from CUDA program images (PTX, cubin, fatbin), without a driver.

Where the driver has ``cuFuncGetParamInfo`` the plugin asks it; these parsers serve drivers
without it. Every function here takes untrusted bytes: it never raises, does work bounded by the
input's size, and leaves out (as unknown) any kernel whose layout it cannot read for certain.

PTX (:func:`ptx_layouts`), following the PTX ISA's kernel parameter declarations::

    .param .type [.ptr [.space] [.align N]] name      .param [.align N] .type name[count]

A parameter is placed at the next multiple of its alignment: the ``.align N`` before ``.ptr``
(or without ``.ptr``), else the size of its type (``.v2``/``.v4`` vectors: the whole vector).
An ``.align`` after ``.ptr`` is the alignment of what the pointer points at, not of the
parameter (clang writes ``.param .u64 .ptr .align 1 p``). Its size is the type's size times the
array count. ``.extern .entry`` declarations (defined in another module) are skipped; a
``.texref``/``.samplerref``/``.surfref`` parameter or anything else not understood makes its
kernel unknown.

Cubin (:func:`cubin_layouts`): an ELF file for ``EM_CUDA`` (190). Kernels are the function
symbols marked ``STO_CUDA_ENTRY`` (0x10 in ``st_other``); each has a section
``.nv.info.<kernel>`` (type ``SHT_CUDA_INFO``, 0x70000000) of attributes, each a format byte, an
attribute byte, and then by format: ``EIFMT_NVAL`` (1, no value) 2 more bytes, ``EIFMT_BVAL``
(2) or ``EIFMT_HVAL`` (3) a 2-byte value, ``EIFMT_SVAL`` (4) a 2-byte length and that many
bytes. What this reads, as the open-source cubin readers (CuAssembler and others) name it and
as checked against cubins NVRTC 13.5 and nvJitLink 13.5 made for sm_75 to sm_100 here:

- ``EIATTR_KPARAM_INFO`` (0x17, SVAL, 12 bytes): a 4-byte index (0), the parameter's 2-byte
  ordinal and 2-byte offset, then a 4-byte word whose top 14 bits (``>> 18``) are its size (the
  low bits hold the pointee's log-alignment, its space and constant bank, and whether it is in
  the constant bank);
- ``EIATTR_KPARAM_INFO_V2`` (0x45, SVAL, 12 bytes), which compilers write instead when a
  parameter is 16 KiB or more (its size would not fit 14 bits): the same index, ordinal and
  offset, then the size in 2 bytes (CUDA's parameters are at most 32764 bytes) and 2 bytes of
  flags (sm_100 cubins set the pointer's space in the last);
- ``EIATTR_CBANK_PARAM_SIZE`` (0x19, HVAL) and ``EIATTR_PARAM_CBANK`` (0x0a, SVAL: a 4-byte
  symbol, then the 2-byte offset and 2-byte size of the parameters in constant bank 0): where
  the last parameter ends, the cross-check. A kernel whose ordinals are not exactly 0..n-1,
  whose attributes run past their section, or whose parameters do not end where these say, is
  unknown; one with none of these attributes has no parameters.

A cubin tells each parameter's offset and size but not its alignment, which :func:`layout`
infers (it may over-estimate: a ``char[8]`` struct alone is taken as 8-aligned where PTX says 1).

Fatbin (:func:`image_layouts`): containers of a 16-byte header (magic 0xBA55ED50 little-endian,
2-byte version, 2-byte header size, 8-byte size of the entries) and entries each with a header
of at least 64 bytes (2-byte kind: 1 PTX, 2 cubin; 2-byte version; 4-byte header size; 8-byte
payload size; the 8-byte flags at byte 40; the 8-byte uncompressed size at byte 56, 0 when not
compressed), as nvFatbin 13.5 writes them here. A compressed entry (flag 0x2000, LZ4 in older
toolkits, or 0x8000, zstd; or an uncompressed size given) is skipped: reading it would need a
decompressor, so its kernels stay unknown.
"""

from __future__ import annotations

import re
import struct

from ..common.params import SHT_SYMTAB, STT_FUNC, ElfSection, ParamLayout, layout, read_elf
from .images import EM_CUDA, FATBIN_MAGIC, image_kind

STO_CUDA_ENTRY = 0x10
SHT_CUDA_INFO = 0x70000000
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_PARAM_CBANK, EIATTR_KPARAM_INFO, EIATTR_CBANK_PARAM_SIZE, EIATTR_KPARAM_INFO_V2 = 0x0A, 0x17, 0x19, 0x45
FATBIN_KIND_PTX, FATBIN_KIND_CUBIN = 1, 2
FATBIN_COMPRESSED = 0x2000 | 0x8000
MAX_FATBIN_CONTAINERS = 64
MAX_PTX_COUNT = 1 << 31

# ---- PTX ----------------------------------------------------------------------------------------

_PTX_TYPE_SIZES = {
    ".b8": 1, ".u8": 1, ".s8": 1,
    ".b16": 2, ".u16": 2, ".s16": 2, ".f16": 2, ".bf16": 2,
    ".b32": 4, ".u32": 4, ".s32": 4, ".f32": 4, ".f16x2": 4, ".bf16x2": 4, ".tf32": 4,
    ".b64": 8, ".u64": 8, ".s64": 8, ".f64": 8,
    ".b128": 16,
}
_PTX_VECTORS = {".v2": 2, ".v4": 4, ".v8": 8}
_PTX_POINTER_SPACES = frozenset({".global", ".const", ".local", ".shared"})
# Comments and strings (a ``.file`` path may hold "//" or "/*"); an unterminated block comment runs to the end.
_PTX_NOISE = re.compile(r'//[^\n]*|/\*(?:.*?\*/|.*\Z)|"[^"\n]*"?', re.DOTALL)
_PTX_ENTRY = re.compile(r"(?<![\w$%.])\.entry\s+([A-Za-z_$%][\w$]*)", re.ASCII)
_PTX_LINKAGE = re.compile(r"(?:\.(?:visible|weak|extern|common)\s+)+\Z", re.ASCII)  # just before ``.entry``
_PTX_TOKEN = re.compile(r"\.[A-Za-z_][\w]*|[A-Za-z_$%][\w$]*|0[xX][0-9A-Fa-f]+|\d+|\S", re.ASCII)


def _blank(match: re.Match[str]) -> str:
    return '""' if match.group(0).startswith('"') else " "


def _ptx_number(token: str) -> int | None:
    if token.isdigit():
        return int(token)
    if token[:2] in ("0x", "0X"):
        return int(token, 16)
    return None


def _ptx_param(declaration: str) -> tuple[int, int] | None:
    """(size, alignment) of one ``.param`` declaration, None if it is not understood."""
    tokens = _PTX_TOKEN.findall(declaration)
    if not tokens or tokens[0] != ".param":
        return None
    pointer = False
    align: int | None = None
    vector = 1
    element: int | None = None
    name: str | None = None
    count = 1
    index = 1
    while index < len(tokens):
        token = tokens[index]
        if token == ".align":
            value = _ptx_number(tokens[index + 1]) if index + 1 < len(tokens) else None
            if value is None or value < 1 or value & (value - 1):
                return None
            if not pointer:  # after .ptr it is the pointee's alignment, which does not place the parameter
                if align is not None:
                    return None
                align = value
            index += 2
            continue
        if name is not None:  # after the name only array dimensions: [N]
            if token != "[" or index + 2 >= len(tokens) or tokens[index + 2] != "]":
                return None
            dimension = _ptx_number(tokens[index + 1])
            if dimension is None or dimension < 1:
                return None
            count *= dimension
            if count > MAX_PTX_COUNT:
                return None
            index += 3
            continue
        if token == ".ptr" and not pointer:
            pointer = True
        elif token in _PTX_POINTER_SPACES and pointer:
            pass
        elif token in _PTX_VECTORS and vector == 1 and element is None:
            vector = _PTX_VECTORS[token]
        elif token in _PTX_TYPE_SIZES and element is None:
            element = _PTX_TYPE_SIZES[token]
        elif element is not None and not token.startswith(".") and (token[0].isalpha() or token[0] in "_$%"):
            name = token
        else:
            return None  # .texref, .samplerref, .surfref, .pred, a second type, or something else
        index += 1
    if element is None or name is None:
        return None
    natural = element * vector
    return natural * count, align if align is not None else natural


def _ptx_entry_layout(param_list: str) -> ParamLayout | None:
    sizes: list[tuple[int, int]] = []
    if param_list.strip():
        for declaration in param_list.split(","):
            parsed = _ptx_param(declaration)
            if parsed is None:
                return None
            sizes.append(parsed)
    params: list[tuple[int, int]] = []
    end = 0
    for size, align in sizes:
        offset = -(-end // align) * align
        params.append((offset, size))
        end = offset + size
    try:
        return layout(params, [align for _, align in sizes])
    except ValueError:
        return None


def ptx_layouts(ptx: bytes) -> dict[str, ParamLayout]:
    """The layout of every kernel (``.entry``, also ``.visible``/``.weak``) PTX text defines, by name.

    Takes the text NUL-terminated or not; a kernel whose parameters are not understood, or that
    is declared twice with different parameters, is left out. Never raises."""
    try:
        return _ptx_layouts(ptx)
    except (ValueError, TypeError, UnicodeError, IndexError, RecursionError):
        return {}


def _ptx_layouts(ptx: bytes) -> dict[str, ParamLayout]:
    raw = ptx.encode("latin-1", errors="replace") if isinstance(ptx, str) else bytes(ptx)
    text = _PTX_NOISE.sub(_blank, raw.split(b"\0", 1)[0].decode("latin-1"))
    found: dict[str, ParamLayout] = {}
    conflicting: set[str] = set()
    entries = list(_PTX_ENTRY.finditer(text))
    for number, match in enumerate(entries):
        name = match.group(1)
        linkage = _PTX_LINKAGE.search(text, max(0, match.start() - 64), match.start())
        if linkage is not None and ".extern" in linkage.group(0).split():
            continue  # declared here, defined in another module
        position = match.end()
        while position < len(text) and text[position].isspace():
            position += 1
        if position < len(text) and text[position] == "(":
            # The list ends before the next entry starts, so no text is read twice.
            limit = entries[number + 1].start() if number + 1 < len(entries) else len(text)
            close = text.find(")", position, limit)
            parsed = _ptx_entry_layout(text[position + 1:close]) if close >= 0 else None
        else:
            parsed = layout([])  # ``.entry name { ... }``: no parameters
        if parsed is None or found.get(name, parsed) != parsed:
            conflicting.add(name)
        else:
            found[name] = parsed
    for name in conflicting:
        found.pop(name, None)
    return found


# ---- cubin --------------------------------------------------------------------------------------

def _nv_info_layout(info: bytes) -> ParamLayout | None:
    """The layout the attributes of one ``.nv.info.<kernel>`` section give, or None if unreadable."""
    params: dict[int, tuple[int, int]] = {}
    ends: list[int] = []  # where the parameters end, by EIATTR_CBANK_PARAM_SIZE and EIATTR_PARAM_CBANK
    position = 0
    while position < len(info):
        if position + 4 > len(info):
            return None
        form, attribute = info[position], info[position + 1]
        if form in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            if attribute == EIATTR_CBANK_PARAM_SIZE and form == EIFMT_HVAL:
                ends.append(struct.unpack_from("<H", info, position + 2)[0])
            position += 4
            continue
        if form != EIFMT_SVAL:
            return None
        (length,) = struct.unpack_from("<H", info, position + 2)
        value = info[position + 4:position + 4 + length]
        if len(value) != length:
            return None
        position += 4 + length
        if attribute in (EIATTR_KPARAM_INFO, EIATTR_KPARAM_INFO_V2):
            if length != 12:
                return None
            _index, ordinal, offset, word = struct.unpack_from("<IHHI", value)
            size = word >> 18 if attribute == EIATTR_KPARAM_INFO else word & 0xFFFF
            if ordinal in params:
                return None
            params[ordinal] = (offset, size)
        elif attribute == EIATTR_PARAM_CBANK:
            if length != 8:
                return None
            ends.append(struct.unpack_from("<H", value, 6)[0])
    if sorted(params) != list(range(len(params))):
        return None
    try:
        found = layout([params[ordinal] for ordinal in range(len(params))])
    except ValueError:
        return None
    if any(end != found.size for end in ends):
        return None
    return found


def cubin_layouts(cubin: bytes) -> dict[str, ParamLayout]:
    """The layout of every kernel of a cubin, by symbol name, from its ``.nv.info.<kernel>``
    attributes (see the module's docstring). Never raises; unreadable kernels are left out."""
    try:
        return _cubin_layouts(cubin)
    except (ValueError, TypeError, struct.error, IndexError):
        return {}


def _cubin_layouts(cubin: bytes) -> dict[str, ParamLayout]:
    elf = read_elf(cubin)
    if elf is None or elf.machine != EM_CUDA:
        return {}
    infos: dict[str, ElfSection] = {}
    for section in elf.sections:
        if section.type == SHT_CUDA_INFO and section.name.startswith(".nv.info.") and section.name not in infos:
            infos[section.name] = section
    found: dict[str, ParamLayout] = {}
    for table in elf.sections:
        if table.type != SHT_SYMTAB:
            continue
        for symbol in elf.symbols(table):
            if symbol.kind != STT_FUNC or not symbol.other & STO_CUDA_ENTRY or not symbol.name:
                continue
            info = infos.get(".nv.info." + symbol.name)
            data = elf.section_data(info) if info is not None else None
            parsed = _nv_info_layout(data) if data is not None else None
            if parsed is not None:
                found.setdefault(symbol.name, parsed)
    return found


# ---- fatbin -------------------------------------------------------------------------------------

def fatbin_entries(image: bytes) -> list[tuple[int, bool, bytes]]:
    """``(kind, compressed, payload)`` of each entry of the fatbin containers ``image`` starts with
    (kind 1 is PTX, 2 a cubin); stops at the first header that does not fit. Never raises."""
    entries: list[tuple[int, bool, bytes]] = []
    position = 0
    for _ in range(MAX_FATBIN_CONTAINERS):
        if image[position:position + 4] != FATBIN_MAGIC or position + 16 > len(image):
            break
        _version, header_size, fat_size = struct.unpack_from("<HHQ", image, position + 4)
        if header_size < 16:
            break
        entry = position + header_size
        end = min(entry + fat_size, len(image))
        while entry + 64 <= end:
            kind, _entry_version, entry_header, payload_size = struct.unpack_from("<HHIQ", image, entry)
            if entry_header < 64 or entry + entry_header + payload_size > end:
                break
            (flags,) = struct.unpack_from("<Q", image, entry + 40)
            (uncompressed_size,) = struct.unpack_from("<Q", image, entry + 56)
            compressed = bool(flags & FATBIN_COMPRESSED) or uncompressed_size != 0
            start = entry + entry_header
            entries.append((kind, compressed, image[start:start + payload_size]))
            entry = start + payload_size
        position += header_size + fat_size
    return entries


def image_layouts(image: bytes) -> dict[str, ParamLayout]:
    """Kernel layouts of any CUDA image: PTX text, a cubin, or a fatbin.

    From a fatbin, the uncompressed cubin entries give the layouts (a kernel on which two of them
    disagree is left out), and the uncompressed PTX entries give those of kernels no cubin
    entry has; compressed entries are skipped. Anything unreadable gives ``{}`` or leaves its
    kernel out. Never raises."""
    try:
        data = bytes(image)
        kind = image_kind(data)
        if kind == "ptx":
            return ptx_layouts(data)
        if kind == "cubin":
            return cubin_layouts(data)
        if kind != "fatbin":
            return {}
        found: dict[str, ParamLayout] = {}
        conflicting: set[str] = set()
        entries = fatbin_entries(data)
        for entry_kind, compressed, payload in entries:
            if entry_kind != FATBIN_KIND_CUBIN or compressed:
                continue
            for name, parsed in cubin_layouts(payload).items():
                if found.setdefault(name, parsed) != parsed:
                    conflicting.add(name)
        for name in conflicting:
            del found[name]
        from_cubins = set(found) | conflicting
        for entry_kind, compressed, payload in entries:
            if entry_kind != FATBIN_KIND_PTX or compressed:
                continue
            for name, parsed in ptx_layouts(payload).items():
                if name not in from_cubins:
                    found.setdefault(name, parsed)
        return found
    except (ValueError, TypeError, struct.error, IndexError):
        return {}
