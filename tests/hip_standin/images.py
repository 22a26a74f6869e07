"""Builders of the images hipModuleLoadData takes, for tests: AMDGPU code objects and clang
offload bundles (``import hip_standin.images``).

TEST DOUBLE material, not AMD code: the files follow the formats LLVM documents (AMDGPUUsage,
ClangOffloadBundler) closely enough for pyelftools, ``llvm-readelf`` and the stand-in to read
them, but hold no machine code a GPU could run (each kernel's body is one ``s_endpgm``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

from standin_common.controls import c_layout, layout_size

from . import _msgpack
from ._code_objects import (
    BUNDLE_MAGIC,
    ELFOSABI_AMDGPU_HSA,
    EM_AMDGPU,
    FEATURE_BITS,
    MACHS,
    NOTE_OWNER,
    NT_AMDGPU_METADATA,
    SETTING_CODES,
    parse_target_id,
)

HOST_TRIPLE = "host-x86_64-unknown-linux-gnu-"
_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_NOTE, _SHT_NOBITS, _SHT_DYNSYM = 1, 2, 3, 7, 8, 11
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 1, 2, 4
_STB_GLOBAL, _STT_OBJECT, _STT_FUNC, _STV_PROTECTED = 1, 1, 2, 3
_S_ENDPGM = struct.pack("<I", 0xBF810000)
_KERNEL_DESCRIPTOR_SIZE = 64


def bundle_triple(target_id: str, kind: str = "hipv4") -> str:
    """The bundle entry name of HIP code for ``target_id``: ``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-``."""
    return f"{kind}-amdgcn-amd-amdhsa--{target_id}"


def code_object(arch: str = "gfx90a", kernels: Iterable[str] = ("foo",),
                globals: Mapping[str, int | bytes] | None = None,  # noqa: A002  # the ELF term
                xnack: bool | str | None = None, sramecc: bool | str | None = None, abi_version: int = 4,
                args: Mapping[str, Sequence[int | tuple[int, int]]] | None = None,
                launch_bounds: Mapping[str, int] | None = None) -> bytes:
    """An AMDGPU code object (ELF shared object) for processor ``arch``.

    ``arch`` may carry target features (``"gfx90a:xnack-"``); ``xnack``/``sramecc`` set them too:
    True (on), False (off), "any", or None (not given: neither feature bit set). ``kernels`` get a
    kernel descriptor ``<name>.kd`` (STT_OBJECT) and a function symbol each; ``globals`` maps a
    name to its size (zero-initialised, in ``.bss``) or its initial bytes (in ``.data``).
    ``abi_version`` is the code object version, 4, 5 or 6 (``EI_ABIVERSION`` 2, 3 or 4).
    ``args`` (kernel name -> its explicit arguments, each a size or a (size, alignment) pair, laid
    out as C lays out a parameter list) and ``launch_bounds`` (kernel name ->
    ``.max_flat_workgroup_size``) add an NT_AMDGPU_METADATA note, as clang writes one: each
    kernel's ``.args`` are its explicit arguments (none for a kernel ``args`` does not list)
    followed by hidden ones (``hidden_block_count_*``, ``hidden_group_size_*``,
    ``hidden_global_offset_x``). Without either, the code object has no metadata note, and the
    HIP stand-in knows neither the arguments nor the launch bound.
    """
    if abi_version not in (4, 5, 6):
        raise ValueError(f"abi_version is the code object version (4, 5 or 6), not {abi_version!r}")
    processor, named = parse_target_id(arch)
    settings: dict[str, bool | str | None] = {"xnack": named.get("xnack"), "sramecc": named.get("sramecc")}
    for feature, given in (("xnack", xnack), ("sramecc", sramecc)):
        if given is not None:
            settings[feature] = given
    flags = MACHS[processor]
    for feature, setting in settings.items():
        if setting not in SETTING_CODES:
            raise ValueError(f"{feature} must be True, False, 'any' or None, not {setting!r}")
        flags |= SETTING_CODES[setting] << FEATURE_BITS[feature]
    names = list(kernels)
    note = _metadata_note(names, args or {}, launch_bounds or {}, f"amdgcn-amd-amdhsa--{arch}") \
        if args or launch_bounds else b""
    return _elf(flags, abi_version - 2, names, dict(globals or {}), note)


_HIDDEN_ARGS = (("hidden_block_count_x", 4), ("hidden_block_count_y", 4), ("hidden_block_count_z", 4),
                ("hidden_group_size_x", 2), ("hidden_group_size_y", 2), ("hidden_group_size_z", 2),
                ("hidden_global_offset_x", 8))


def _metadata_note(kernels: list[str], args: Mapping[str, Sequence[int | tuple[int, int]]],
                   launch_bounds: Mapping[str, int], target: str) -> bytes:
    """The ELF note NT_AMDGPU_METADATA (owner "AMDGPU") describing ``kernels``."""
    entries = []
    for kernel in kernels:
        entry: dict[str, object] = {".name": kernel, ".symbol": f"{kernel}.kd", ".kernarg_segment_align": 8}
        layout = c_layout(args.get(kernel, ()))
        listed: list[dict[str, object]] = [{".offset": offset, ".size": size, ".value_kind": "by_value"}
                                           for offset, size in layout]
        end = layout_size(layout)
        for name, size in _HIDDEN_ARGS:
            end += -end % size
            listed.append({".offset": end, ".size": size, ".value_kind": name})
            end += size
        entry[".args"] = listed
        entry[".kernarg_segment_size"] = end
        if kernel in launch_bounds:
            entry[".max_flat_workgroup_size"] = launch_bounds[kernel]
        entries.append(entry)
    desc = _msgpack.pack({"amdhsa.version": [1, 2], "amdhsa.target": target, "amdhsa.kernels": entries})
    owner = NOTE_OWNER + b"\0"
    return (struct.pack("<III", len(owner), len(desc), NT_AMDGPU_METADATA) + owner + bytes(-len(owner) % 4)
            + desc + bytes(-len(desc) % 4))


def offload_bundle(entries: Mapping[str, bytes]) -> bytes:
    """A clang offload bundle of ``{triple: image}`` (entries page-aligned, in the given order),
    e.g. ``{HOST_TRIPLE: b"", bundle_triple("gfx90a"): code_object("gfx90a")}``."""
    header = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(entries)))
    header_size = len(header) + sum(24 + len(triple.encode()) for triple in entries)
    offset, body = _align(header_size, 4096), bytearray()
    for triple, image in entries.items():
        name = triple.encode()
        header += struct.pack("<QQQ", offset + len(body), len(image), len(name)) + name
        body += image + bytes(_align(len(image), 4096) - len(image))
    return bytes(header) + bytes(offset - len(header)) + bytes(body)


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


class _Strings:
    """An ELF string table being built: ``add`` returns a name's offset."""

    def __init__(self) -> None:
        self.data = bytearray(b"\0")

    def add(self, name: str) -> int:
        offset = len(self.data)
        self.data += name.encode() + b"\0"
        return offset


def _elf(flags: int, abi_version: int, kernels: list[str], variables: dict[str, int | bytes], note: bytes) -> bytes:
    contents: dict[str, bytes] = {
        ".note": note,
        ".rodata": bytes(_KERNEL_DESCRIPTOR_SIZE * len(kernels)),
        ".text": b"".join(_S_ENDPGM.ljust(256, b"\0") for _ in kernels),
    }
    # Symbols as (name, info, other, section, offset in the section, size); values come with the layout.
    symbols: list[tuple[str, int, int, str, int, int]] = []
    for i, kernel in enumerate(kernels):
        symbols.append((kernel, _STB_GLOBAL << 4 | _STT_FUNC, _STV_PROTECTED, ".text", 256 * i, len(_S_ENDPGM)))
        symbols.append((f"{kernel}.kd", _STB_GLOBAL << 4 | _STT_OBJECT, 0, ".rodata", _KERNEL_DESCRIPTOR_SIZE * i,
                        _KERNEL_DESCRIPTOR_SIZE))
    data, bss_size = bytearray(), 0
    for name, value in variables.items():
        if isinstance(value, int):  # zero-initialised: room in .bss only
            bss_size = _align(bss_size, 8)
            symbols.append((name, _STB_GLOBAL << 4 | _STT_OBJECT, 0, ".bss", bss_size, value))
            bss_size += value
        else:
            data += bytes(_align(len(data), 8) - len(data))
            symbols.append((name, _STB_GLOBAL << 4 | _STT_OBJECT, 0, ".data", len(data), len(value)))
            data += value
    contents[".data"] = bytes(data)

    dynstr, strtab, shstrtab = _Strings(), _Strings(), _Strings()
    dynsym_names = [dynstr.add(name) for name, *_ in symbols]
    symtab_names = [strtab.add(name) for name, *_ in symbols]
    contents[".dynstr"] = bytes(dynstr.data)
    symbol_table_size = 24 * (len(symbols) + 1)
    # (name, type, flags, alignment, file size, entry size); alloc sections are mapped at their offsets.
    sections = [(".note", _SHT_NOTE, _SHF_ALLOC, 4, len(note), 0),
                (".dynsym", _SHT_DYNSYM, _SHF_ALLOC, 8, symbol_table_size, 24),
                (".dynstr", _SHT_STRTAB, _SHF_ALLOC, 1, len(contents[".dynstr"]), 0),
                (".rodata", _SHT_PROGBITS, _SHF_ALLOC, 64, len(contents[".rodata"]), 0),
                (".text", _SHT_PROGBITS, _SHF_ALLOC | _SHF_EXECINSTR, 256, len(contents[".text"]), 0),
                (".data", _SHT_PROGBITS, _SHF_ALLOC | _SHF_WRITE, 8, len(contents[".data"]), 0),
                (".bss", _SHT_NOBITS, _SHF_ALLOC | _SHF_WRITE, 8, 0, 0),
                (".symtab", _SHT_SYMTAB, 0, 8, symbol_table_size, 24),
                (".strtab", _SHT_STRTAB, 0, 1, len(strtab.data), 0),
                (".shstrtab", _SHT_STRTAB, 0, 1, 0, 0)]
    index = {name: i + 1 for i, (name, *_) in enumerate(sections)}
    section_names = {name: shstrtab.add(name) for name, *_ in sections}
    contents[".shstrtab"] = bytes(shstrtab.data)
    offsets, cursor = {}, 64
    for name, _, _, align, size, _ in sections:
        cursor = _align(cursor, align)
        offsets[name] = cursor
        cursor += len(contents[".shstrtab"]) if name == ".shstrtab" else size

    def symbol_table(names: list[int]) -> bytes:
        table = bytearray(24)  # the null symbol
        for name, (_, info, other, section, offset, size) in zip(names, symbols):
            table += struct.pack("<IBBHQQ", name, info, other, index[section], offsets[section] + offset, size)
        return bytes(table)

    contents[".dynsym"], contents[".symtab"], contents[".strtab"] = (
        symbol_table(dynsym_names), symbol_table(symtab_names), bytes(strtab.data))
    headers = _align(cursor, 8)
    out = bytearray(headers + 64 * (len(sections) + 1))
    ident = b"\x7fELF" + bytes([2, 1, 1, ELFOSABI_AMDGPU_HSA, abi_version]) + bytes(7)
    out[:64] = ident + struct.pack("<HHIQQQIHHHHHH", 3, EM_AMDGPU, 1, 0, 0, headers, flags, 64, 56, 0, 64,
                                   len(sections) + 1, index[".shstrtab"])
    links = {".dynsym": (index[".dynstr"], 1), ".symtab": (index[".strtab"], 1)}  # (string table, first global)
    for name, kind, section_flags, align, _, entsize in sections:
        offset, content = offsets[name], contents.get(name, b"")
        out[offset:offset + len(content)] = content
        size = bss_size if name == ".bss" else len(content)
        link, info = links.get(name, (0, 0))
        struct.pack_into("<IIQQQQIIQQ", out, headers + 64 * index[name], section_names[name], kind, section_flags,
                         offset if section_flags & _SHF_ALLOC else 0, offset, size, link, info, align, entsize)
    return bytes(out)
