"""What hipModuleLoadData reads from an image: AMDGPU code objects and clang offload bundles.

TEST DOUBLE, not AMD code. It follows the AMDGPU ELF ABI as LLVM documents it (AMDGPUUsage):

- a code object is an ELF64 little-endian shared object (ET_DYN) with ``e_machine`` EM_AMDGPU
  (224), ``EI_OSABI`` ELFOSABI_AMDGPU_HSA (64) and ``EI_ABIVERSION`` 2, 3 or 4 (code object v4,
  v5, v6); the low byte of ``e_flags`` is the processor (EF_AMDGPU_MACH), bits 0x300 its xnack
  setting and 0xc00 its sramecc setting (0: unsupported, 1: any, 2: off, 3: on);
- each kernel ``K`` has a kernel descriptor, the STT_OBJECT symbol ``K.kd``; every other defined
  STT_OBJECT symbol is a global variable of ``st_size`` bytes, initialised from its section's
  bytes (zero in SHT_NOBITS sections such as ``.bss``);
- the ``NT_AMDGPU_METADATA`` note (type 32, owner "AMDGPU", in a SHT_NOTE section) is a
  MessagePack map (read by the stand-in's own ``_msgpack``): each ``amdhsa.kernels`` entry names a
  kernel (``.name``) and lists its kernel arguments (``.args``: ``.offset``, ``.size``,
  ``.value_kind``). The explicit arguments, those whose value kind does not start with
  ``hidden_``, are the kernel's parameter layout, as ROCclr builds a kernel's signature (rocclr
  device/devkernel.cpp: hidden arguments go after the explicit ones and launches never pass
  them); ``.max_flat_workgroup_size`` is the kernel's launch bound. A code object without the
  note (the builders' default) leaves both unknown;
- an offload bundle starts with ``__CLANG_OFFLOAD_BUNDLE__``, a uint64 entry count, then per entry
  uint64 offset, uint64 size, uint64 triple length and the triple (``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-``);
  HIP loads the entry whose target ID the device can run.

A device runs a code object built for its processor whose features are each "any"/unsupported or
equal to the device's (``gfx90a:xnack-`` runs on ``gfx90a:sramecc+:xnack-``, ``gfx90a:xnack+`` does not).
Errors, as HIP returns them: not an ELF or a bundle, hipErrorInvalidImage; an ELF or bundle that
is not a well-formed AMDGPU code object, hipErrorInvalidKernelFile; nothing for this device,
hipErrorNoBinaryForGpu.
"""

from __future__ import annotations

import ctypes
import io
import struct
from dataclasses import dataclass, field
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from . import _msgpack

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ABI_VERSIONS = {2: 4, 3: 5, 4: 6}  # EI_ABIVERSION -> code object version
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
HIP_BUNDLE_KINDS = ("hip", "hipv4")  # offload kinds HIP loads (hip: code object v2/v3 bundles)
AMDHSA_TRIPLE = "amdgcn-amd-amdhsa"

INVALID_IMAGE, NO_BINARY_FOR_GPU, INVALID_KERNEL_FILE = 200, 209, 218
NT_AMDGPU_METADATA = 32
NOTE_OWNER = b"AMDGPU"

# EF_AMDGPU_MACH values of the GFX9+ processors (LLVM's ELF.h).
MACHS = {
    "gfx900": 0x2C, "gfx902": 0x2D, "gfx904": 0x2E, "gfx906": 0x2F, "gfx908": 0x30, "gfx909": 0x31, "gfx90c": 0x32,
    "gfx1010": 0x33, "gfx1011": 0x34, "gfx1012": 0x35, "gfx1030": 0x36, "gfx1031": 0x37, "gfx1032": 0x38,
    "gfx1033": 0x39, "gfx1035": 0x3D, "gfx1034": 0x3E, "gfx90a": 0x3F, "gfx940": 0x40, "gfx1100": 0x41,
    "gfx1013": 0x42, "gfx1150": 0x43, "gfx1103": 0x44, "gfx1036": 0x45, "gfx1101": 0x46, "gfx1102": 0x47,
    "gfx1200": 0x48, "gfx1151": 0x4A, "gfx941": 0x4B, "gfx942": 0x4C, "gfx1201": 0x4E, "gfx950": 0x4F,
}
PROCESSORS = {mach: name for name, mach in MACHS.items()}
FEATURE_BITS = {"xnack": 8, "sramecc": 10}  # shift of each 2-bit field in e_flags
SETTING_CODES = {None: 0, "any": 1, False: 2, True: 3}  # 0: the processor does not support it
SETTINGS = {code: setting for setting, code in SETTING_CODES.items()}


class ImageError(Exception):
    """HIP refuses the image with ``code``; ``why`` goes to the stand-in's diagnostics."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code
        self.why = why


def parse_target_id(target_id: str) -> tuple[str, dict[str, bool]]:
    """``"gfx90a:sramecc+:xnack-"`` -> ``("gfx90a", {"sramecc": True, "xnack": False})``;
    a feature not named is "any"."""
    processor, *features = target_id.split(":")
    if processor not in MACHS:
        raise ValueError(f"hip_standin knows no AMDGPU processor {processor!r} (known: {sorted(MACHS)})")
    settings: dict[str, bool] = {}
    for feature in features:
        name, sign = feature[:-1], feature[-1:]
        if name not in FEATURE_BITS or sign not in "+-" or not sign:
            raise ValueError(f"bad target feature {feature!r} in {target_id!r} (xnack+/- or sramecc+/-)")
        settings[name] = sign == "+"
    return processor, settings


def runs_on(processor: str, features: dict[str, object], device_processor: str,
            device_features: dict[str, bool]) -> bool:
    """Whether code for ``processor`` with ``features`` (True/False, or "any"/None) runs on the device."""
    if processor != device_processor:
        return False
    return all(setting in ("any", None) or device_features.get(name) == setting for name, setting in features.items())


@dataclass
class CodeObject:
    """What a loaded code object offers: kernels and globals (name -> (size, initial bytes))."""

    processor: str
    features: dict[str, object]
    version: int
    kernels: list[str] = field(default_factory=list)
    globals: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    params: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # kernel -> explicit (offset, size)s
    max_threads: dict[str, int] = field(default_factory=dict)  # kernel -> .max_flat_workgroup_size


def read_at(address: int) -> bytes:
    """The image at a raw address, sized from its ELF section headers or its bundle entries."""
    head = ctypes.string_at(address, 24)
    if head[:4] == b"\x7fELF" and head[4] == 2:
        e_shoff, = struct.unpack_from("<Q", ctypes.string_at(address + 40, 8))
        e_shentsize, e_shnum = struct.unpack_from("<HH", ctypes.string_at(address + 58, 4))
        end = e_shoff + e_shentsize * e_shnum
        for index in range(e_shnum):
            header = ctypes.string_at(address + e_shoff + index * e_shentsize, 64)
            kind, offset, size = struct.unpack_from("<I", header, 4)[0], *struct.unpack_from("<QQ", header, 24)
            if kind != 8:  # SHT_NOBITS takes no room in the file
                end = max(end, offset + size)
        return ctypes.string_at(address, end)
    if head == BUNDLE_MAGIC:
        count, = struct.unpack("<Q", ctypes.string_at(address + 24, 8))
        cursor, end = address + 32, 32
        for _ in range(count):
            offset, size, triple_size = struct.unpack("<QQQ", ctypes.string_at(cursor, 24))
            cursor += 24 + triple_size
            end = max(end, offset + size, cursor - address)
        return ctypes.string_at(address, end)
    return head  # neither: too short to be anything HIP loads


def select(image: bytes, processor: str, features: dict[str, bool]) -> CodeObject:
    """The code object HIP would load from ``image`` for a device (raises :class:`ImageError`)."""
    if image[:4] == b"\x7fELF":
        code_object = parse_code_object(image)
        if not runs_on(code_object.processor, code_object.features, processor, features):
            raise ImageError(NO_BINARY_FOR_GPU, f"code object for {describe(code_object)} cannot run on "
                                                f"{processor} {features}")
        return code_object
    if image[:len(BUNDLE_MAGIC)] == BUNDLE_MAGIC:
        entries = bundle_entries(image)
        targets = []
        for triple, content in entries:
            target = hip_target(triple)
            if target is None:
                continue
            targets.append(triple)
            try:
                want, want_features = parse_target_id(target)
            except ValueError:  # a processor the stand-in does not know cannot be this device's
                continue
            if runs_on(want, dict(want_features), processor, features):
                return select(content, processor, features)
        raise ImageError(NO_BINARY_FOR_GPU, f"offload bundle has no code object for {processor} {features} "
                                            f"(HIP entries: {targets})")
    raise ImageError(INVALID_IMAGE, f"image is neither an AMDGPU code object nor an offload bundle "
                                    f"(starts {image[:16]!r})")


def hip_target(triple: str) -> str | None:
    """The target ID of a HIP bundle entry (``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` ->
    ``gfx90a:xnack-``); None for host and other offload kinds."""
    kind, _, rest = triple.partition("-")
    if kind not in HIP_BUNDLE_KINDS or not rest.startswith(AMDHSA_TRIPLE + "-"):
        return None
    target = rest[len(AMDHSA_TRIPLE) + 1:]
    return target[1:] if target.startswith("-") else target  # the empty environment field


def bundle_entries(image: bytes) -> list[tuple[str, bytes]]:
    try:
        count, = struct.unpack_from("<Q", image, len(BUNDLE_MAGIC))
        cursor, entries = len(BUNDLE_MAGIC) + 8, []
        for _ in range(count):
            offset, size, triple_size = struct.unpack_from("<QQQ", image, cursor)
            triple = image[cursor + 24:cursor + 24 + triple_size].decode()
            cursor += 24 + triple_size
            if offset + size > len(image) or len(triple) != triple_size:
                raise ValueError(f"entry {triple!r} runs past the end of the bundle")
            entries.append((triple, image[offset:offset + size]))
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise ImageError(INVALID_KERNEL_FILE, f"malformed offload bundle: {exc}") from None
    return entries


def describe(code_object: CodeObject) -> str:
    features = "".join(f":{name}{'+' if setting else '-'}" for name, setting in sorted(code_object.features.items())
                       if setting in (True, False))
    return code_object.processor + features


def parse_code_object(image: bytes) -> CodeObject:
    """Kernels and globals of an AMDGPU code object (raises :class:`ImageError`)."""
    ident = image[:16]
    if len(image) < 64 or ident[4] != 2 or ident[5] != 1:
        raise ImageError(INVALID_KERNEL_FILE, "not an ELF64 little-endian object")
    e_type, e_machine = struct.unpack_from("<HH", image, 16)
    e_flags, = struct.unpack_from("<I", image, 48)
    if e_machine != EM_AMDGPU:
        raise ImageError(INVALID_KERNEL_FILE, f"ELF for machine {e_machine}, not EM_AMDGPU ({EM_AMDGPU})")
    if ident[7] != ELFOSABI_AMDGPU_HSA or ident[8] not in ABI_VERSIONS:
        raise ImageError(INVALID_KERNEL_FILE, f"EI_OSABI {ident[7]} / EI_ABIVERSION {ident[8]}: not an AMDHSA "
                                              f"code object v4-v6 (OSABI {ELFOSABI_AMDGPU_HSA}, ABI version 2-4)")
    if e_type != 3:
        raise ImageError(INVALID_KERNEL_FILE, f"ELF type {e_type}, not a shared object (ET_DYN): a relocatable "
                                              f"object must be linked (ld.lld -shared) first")
    processor = PROCESSORS.get(e_flags & 0xFF)
    if processor is None:
        raise ImageError(INVALID_KERNEL_FILE, f"unknown EF_AMDGPU_MACH {e_flags & 0xFF:#x}")
    features: dict[str, object] = {name: SETTINGS[(e_flags >> shift) & 3] for name, shift in FEATURE_BITS.items()}
    code_object = CodeObject(processor, features, ABI_VERSIONS[ident[8]])
    try:
        elf = ELFFile(io.BytesIO(image))
        sections = list(elf.iter_sections())
        for section in sections:
            if section["sh_type"] == "SHT_NOTE":
                _read_metadata(section.data(), code_object)
        for table in sections:
            if not isinstance(table, SymbolTableSection):
                continue
            for symbol in table.iter_symbols():
                entry = symbol.entry
                if (entry.st_info.type != "STT_OBJECT" or entry.st_info.bind == "STB_LOCAL"
                        or not isinstance(entry.st_shndx, int)):
                    continue
                if symbol.name.endswith(".kd"):
                    if symbol.name[:-3] not in code_object.kernels:
                        code_object.kernels.append(symbol.name[:-3])
                elif symbol.name not in code_object.globals:
                    code_object.globals[symbol.name] = (entry.st_size, _initial_bytes(elf, entry))
    except (ELFError, struct.error, ValueError, IndexError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ImageError(INVALID_KERNEL_FILE, f"malformed AMDGPU code object: {exc}") from None
    return code_object


def _notes(data: bytes) -> list[tuple[bytes, int, bytes]]:
    """(owner, type, description) of each ELF note in a SHT_NOTE section's bytes (4-byte aligned)."""
    notes, at = [], 0
    while at + 12 <= len(data):
        name_size, desc_size, kind = struct.unpack_from("<III", data, at)
        at += 12
        name = data[at:at + name_size].rstrip(b"\0")
        at += -(-name_size // 4) * 4
        desc = data[at:at + desc_size]
        at += -(-desc_size // 4) * 4
        if len(desc) != desc_size:
            raise ValueError("a note runs past the end of its section")
        notes.append((name, kind, desc))
    return notes


def _read_metadata(data: bytes, code_object: CodeObject) -> None:
    """Each kernel's explicit argument layout and launch bound from an NT_AMDGPU_METADATA note."""
    for owner, kind, desc in _notes(data):
        if owner != NOTE_OWNER or kind != NT_AMDGPU_METADATA:
            continue
        metadata = _msgpack.unpack(desc)
        for kernel in metadata.get("amdhsa.kernels", []):
            name = kernel[".name"]
            code_object.params[name] = [(int(arg[".offset"]), int(arg[".size"])) for arg in kernel.get(".args", [])
                                        if not str(arg.get(".value_kind", "")).startswith("hidden_")]
            if ".max_flat_workgroup_size" in kernel:
                code_object.max_threads[name] = int(kernel[".max_flat_workgroup_size"])


def _initial_bytes(elf: ELFFile, entry: Any) -> bytes:
    """A global's initial bytes: from its section (by address), or none from SHT_NOBITS."""
    section = elf.get_section(entry.st_shndx)
    if section["sh_type"] == "SHT_NOBITS":
        return b""
    start = entry.st_value - section["sh_addr"]
    data = section.data()
    if not 0 <= start <= len(data):
        raise ValueError(f"symbol value {entry.st_value:#x} outside its section")
    return bytes(data[start:start + entry.st_size])
