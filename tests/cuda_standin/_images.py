"""What the stand-in driver reads from a module image: its kind, kernels, parameters and globals.

TEST DOUBLE, not NVIDIA code. ``cuModuleLoadDataEx`` accepts the forms the driver documents:
NUL-terminated PTX text, a cubin (ELF with ``e_machine`` 190, EM_CUDA) or a fatbin (magic
0xBA55ED50, little-endian). From PTX the stand-in reads every ``.entry NAME(params)`` (with its
parameter layout and ``.maxntid``) and every module-scope ``.global``/``.const`` variable (size
and initializer). From a cubin it reads the ELF symbol table when there is one; names for
fatbins (and extra ones for cubins) come from :func:`cuda_standin.set_binary_symbols`.
"""

from __future__ import annotations

import ctypes
import io
import math
import re
import struct
from dataclasses import dataclass, field

EM_CUDA = 190
FATBIN_MAGIC = b"\x50\xed\x55\xba"
INVALID_MARKER = b"standin-invalid"

# PTX fundamental types and their sizes in bytes.
_TYPE_SIZES = {"pred": 1, "b8": 1, "s8": 1, "u8": 1, "b16": 2, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
               "b32": 4, "s32": 4, "u32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
               "b64": 8, "s64": 8, "u64": 8, "f64": 8, "b128": 16}
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%.]*)\s*(?:\(([^)]*)\))?")
_MAXNTID = re.compile(r"\.maxntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
_VARIABLE = re.compile(r"^[ \t]*((?:\.(?:visible|weak|extern|common)\s+)*)\.(global|const)\s+([^;=\n]*?)\s*"
                       r"(?:=\s*([^;]*))?;", re.MULTILINE)
_NUMBER = re.compile(r"0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|[-+]?0[xX][0-9a-fA-F]+"
                     r"|[-+]?\d+\.\d*(?:[eE][-+]?\d+)?|[-+]?\d+")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_TARGET = re.compile(r"^\s*\.target\s+sm_(\d+)", re.MULTILINE)


@dataclass
class KernelInfo:
    """A kernel in an image: its parameters as (size, alignment) pairs (None: unknown) and .maxntid."""

    name: str
    params: list[tuple[int, int]] | None = None
    max_threads: int | None = None


@dataclass
class GlobalInfo:
    """A module-scope variable: size in bytes and the bytes it starts with."""

    name: str
    size: int
    init: bytes = b""


@dataclass
class ImageInfo:
    kind: str  # "ptx", "cubin" or "fatbin"
    kernels: dict[str, KernelInfo] = field(default_factory=dict)
    globals: dict[str, GlobalInfo] = field(default_factory=dict)
    target_sm: int | None = None


class ImageError(Exception):
    """The driver rejects the image: ``code`` is the CUresult, ``log`` the JIT error log text."""

    def __init__(self, code_name: str, log: str = "") -> None:
        super().__init__(code_name)
        self.code_name = code_name
        self.log = log


def read_at(address: int) -> bytes:
    """The image at a raw address: sized from its ELF or fatbin header, else a C string (PTX)."""
    head = ctypes.string_at(address, 4)
    if head == b"\x7fELF":
        ident = ctypes.string_at(address, 64)
        if ident[4] == 2:  # ELFCLASS64
            fmt = "<" if ident[5] == 1 else ">"
            phoff, shoff = struct.unpack_from(fmt + "QQ", ident, 32)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(fmt + "HHHH", ident, 54)
            return ctypes.string_at(address, max(64, phoff + phentsize * phnum, shoff + shentsize * shnum))
        return ident
    if head == FATBIN_MAGIC:
        header_size, body_size = struct.unpack_from("<HQ", ctypes.string_at(address, 16), 6)
        return ctypes.string_at(address, header_size + body_size)
    return ctypes.string_at(address) + b"\0"


def parse(data: bytes, binary_kernels: dict[str, KernelInfo], binary_globals: dict[str, int]) -> ImageInfo:
    """Everything the driver would learn from ``data`` while loading it; raise :class:`ImageError`."""
    if data[:4] == FATBIN_MAGIC:
        info = ImageInfo("fatbin")
    elif data[:4] == b"\x7fELF":
        if len(data) < 20 or data[4] not in (1, 2) or data[5] not in (1, 2):
            raise ImageError("CUDA_ERROR_INVALID_IMAGE")
        (machine,) = struct.unpack_from("<H" if data[5] == 1 else ">H", data, 18)
        if machine != EM_CUDA:
            raise ImageError("CUDA_ERROR_INVALID_IMAGE")
        info = ImageInfo("cubin")
        _read_elf_symbols(data, info)
    else:
        return _parse_ptx(data)
    for name, kernel in binary_kernels.items():
        info.kernels.setdefault(name, kernel)
    for name, size in binary_globals.items():
        info.globals.setdefault(name, GlobalInfo(name, size))
    return info


def _parse_ptx(data: bytes) -> ImageInfo:
    head = data[:1 << 20]
    if not (re.search(rb"^\s*\.version\s+\d+\.\d+", head, re.MULTILINE) and b".target" in head):
        raise ImageError("CUDA_ERROR_INVALID_IMAGE")
    if b"\0" not in data:
        raise ImageError("CUDA_ERROR_INVALID_PTX", "ptxas fatal : standin: PTX text is not NUL-terminated")
    text = data.split(b"\0", 1)[0].decode("utf-8", errors="replace")
    if INVALID_MARKER.decode() in text:
        raise ImageError("CUDA_ERROR_INVALID_PTX", "ptxas fatal : standin: invalid PTX")
    text = _COMMENTS.sub(" ", text)
    target = _TARGET.search(text)
    info = ImageInfo("ptx", target_sm=int(target.group(1)) if target else None)
    for match in _ENTRY.finditer(text):
        params = [_param_layout(p) for p in match.group(2).split(",") if p.strip()] if match.group(2) else []
        body_start = text.find("{", match.end())
        directives = text[match.end():body_start if body_start >= 0 else len(text)]
        ntid = _MAXNTID.search(directives)
        max_threads = math.prod(int(x) for x in ntid.groups() if x) if ntid else None
        info.kernels[match.group(1)] = KernelInfo(match.group(1), params, max_threads)
    for match in _VARIABLE.finditer(text):
        if "extern" in match.group(1):
            continue
        variable = _variable(match.group(3), match.group(4))
        if variable is not None:
            info.globals[variable.name] = variable
    return info


def _param_layout(declaration: str) -> tuple[int, int]:
    """(size, alignment) of one ``.param`` declaration; ``.align`` counts only before the type."""
    tokens = declaration.replace("[", " [").split()
    size = align = 0
    explicit_align = 0
    for i, token in enumerate(tokens):
        if token == ".align" and not size and i + 1 < len(tokens):
            explicit_align = int(tokens[i + 1])
        elif token.startswith(".") and token[1:] in _TYPE_SIZES and not size:
            size = align = _TYPE_SIZES[token[1:]]
        elif token.startswith("[") and size:
            size *= int(token.strip("[]") or 1)
    return size, explicit_align or align or 1


def _variable(declaration: str, initializer: str | None) -> GlobalInfo | None:
    tokens = declaration.split()
    if not tokens:
        return None
    element, vector = 0, 1
    kind = ""
    for token in tokens[:-1]:
        if token in (".v2", ".v4", ".v8"):
            vector = int(token[2:])
        elif token.startswith(".") and token[1:] in _TYPE_SIZES:
            element, kind = _TYPE_SIZES[token[1:]], token[1:]
    name, _, dims = tokens[-1].partition("[")
    values = _NUMBER.findall(initializer or "")
    count = 1
    for dim in re.findall(r"\[(\d*)\]", "[" + dims if dims else ""):
        count *= int(dim) if dim else max(1, len(values))
    size = element * vector * count
    if not name or not size:
        return None
    init = b"".join(_encode(v, kind, element) for v in values)[:size]
    return GlobalInfo(name, size, init)


def _encode(literal: str, kind: str, size: int) -> bytes:
    if literal[:2] in ("0f", "0F"):
        return int(literal[2:], 16).to_bytes(4, "little")[:size].ljust(size, b"\0")
    if literal[:2] in ("0d", "0D"):
        return int(literal[2:], 16).to_bytes(8, "little")[:size].ljust(size, b"\0")
    if "." in literal or (kind.startswith("f") and not literal.lower().startswith(("0x", "-0x", "+0x"))):
        return struct.pack({2: "<e", 4: "<f", 8: "<d"}.get(size, "<d"), float(literal))[:size]
    return (int(literal, 0) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def _read_elf_symbols(data: bytes, info: ImageInfo) -> None:
    """Kernels (global functions) and variables (global objects) from a cubin's symbol table."""
    try:
        from elftools.elf.elffile import ELFFile

        symtab = ELFFile(io.BytesIO(data)).get_section_by_name(".symtab")
        symbols = list(symtab.iter_symbols()) if symtab is not None else []  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001  # a header-only test image: the names come from the control
        return
    for symbol in symbols:
        if symbol["st_info"]["bind"] not in ("STB_GLOBAL", "STB_WEAK") or not symbol.name:
            continue
        if symbol["st_info"]["type"] == "STT_FUNC":
            info.kernels[symbol.name] = KernelInfo(symbol.name)
        elif symbol["st_info"]["type"] == "STT_OBJECT" and symbol["st_size"]:
            info.globals[symbol.name] = GlobalInfo(symbol.name, int(symbol["st_size"]))
