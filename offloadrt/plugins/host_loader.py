"""Host programs: ELF checks, the exported symbol table, and loading through memfd + dlopen.

An image is loaded from an anonymous in-memory file, so the caller's buffer is never touched
and the same bytes can be loaded twice as two independent libraries.
"""

from __future__ import annotations

import _ctypes
import ctypes
import io
import os
import struct
import sys
import tempfile
from dataclasses import dataclass

from ..errors import ErrorCode, OffloadError

ELF_MAGIC = b"\x7fELF"
ET_DYN = 3
MACHINE_NAMES = {3: "x86", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "S390", 40: "ARM", 62: "x86-64",
                 183: "AArch64", 190: "CUDA", 224: "AMDGPU", 243: "RISC-V", 258: "LoongArch"}


def _host_elf_header() -> tuple[int, int, int]:
    """(class, data encoding, e_machine) of the running interpreter."""
    with open(sys.executable, "rb") as exe:
        head = exe.read(20)
    endian = "<" if head[5] == 1 else ">"
    (machine,) = struct.unpack_from(endian + "H", head, 18)
    return head[4], head[5], machine


HOST_CLASS, HOST_DATA, HOST_MACHINE = _host_elf_header()


def machine_name(machine: int) -> str:
    return MACHINE_NAMES.get(machine, f"e_machine {machine}")


def check_image(image: bytes) -> None:
    """Raise ``INVALID_BINARY`` unless ``image`` is an ELF shared object for this host."""
    if len(image) < 64 or image[:4] != ELF_MAGIC:
        raise OffloadError(ErrorCode.INVALID_BINARY, "not an ELF image (bad magic or too short)")
    if image[4] != HOST_CLASS or image[5] != HOST_DATA:
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"ELF class/encoding {image[4]}/{image[5]} does not match "
                           f"the host's {HOST_CLASS}/{HOST_DATA}")
    endian = "<" if image[5] == 1 else ">"
    e_type, e_machine = struct.unpack_from(endian + "HH", image, 16)
    if e_machine != HOST_MACHINE:
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"image is built for {machine_name(e_machine)}, the host is {machine_name(HOST_MACHINE)}")
    if e_type != ET_DYN:
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"image is not a shared object (ELF type {e_type}); build it with `cc -shared -fPIC`")
    _check_extents(image, endian)


def _check_extents(image: bytes, endian: str) -> None:
    """Every table and loadable segment the header names must lie inside the image.

    The dynamic loader maps segments straight from the file: one that runs past the end of a
    truncated image would fault (SIGBUS) on first touch instead of failing cleanly.
    """
    size = len(image)
    wide = image[4] == 2
    if wide:
        phoff, shoff = struct.unpack_from(endian + "QQ", image, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(endian + "HHHH", image, 0x36)
        segment = endian + "IIQQQQ"  # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz
    else:
        phoff, shoff = struct.unpack_from(endian + "II", image, 0x1C)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(endian + "HHHH", image, 0x2A)
        segment = endian + "IIIII"  # p_type, p_offset, p_vaddr, p_paddr, p_filesz
    if phnum == 0 or phoff + phnum * phentsize > size or phentsize < struct.calcsize(segment):
        raise OffloadError(ErrorCode.INVALID_BINARY, "truncated or missing program header table")
    if shnum and shoff + shnum * shentsize > size:
        raise OffloadError(ErrorCode.INVALID_BINARY, "truncated section header table")
    for index in range(phnum):
        fields = struct.unpack_from(segment, image, phoff + index * phentsize)
        p_type = fields[0]
        offset, filesz = (fields[2], fields[5]) if wide else (fields[1], fields[4])
        if p_type == 1 and offset + filesz > size:  # PT_LOAD
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"truncated image: loadable segment {index} ends at byte {offset + filesz}, "
                               f"the image has {size}")


@dataclass(frozen=True)
class ElfSymbol:
    name: str
    kind: str  # "function" or "object"
    size: int


def read_symbols(image: bytes) -> dict[str, ElfSymbol]:
    """The defined, exported functions and data objects of a shared object's dynamic symbol table."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        elf = ELFFile(io.BytesIO(image))
        table = elf.get_section_by_name(".dynsym")
        symbols: dict[str, ElfSymbol] = {}
        if not isinstance(table, SymbolTableSection):
            return symbols
        for sym in table.iter_symbols():
            info = sym["st_info"]
            if sym["st_shndx"] == "SHN_UNDEF" or info["bind"] not in ("STB_GLOBAL", "STB_WEAK"):
                continue
            if sym["st_other"]["visibility"] not in ("STV_DEFAULT", "STV_PROTECTED"):
                continue
            if info["type"] in ("STT_FUNC", "STT_GNU_IFUNC"):
                kind = "function"
            elif info["type"] == "STT_OBJECT":
                kind = "object"
            else:
                continue
            symbols[sym.name] = ElfSymbol(sym.name, kind, int(sym["st_size"]))
        return symbols
    except (ELFError, ValueError, struct.error) as exc:
        raise OffloadError(ErrorCode.INVALID_BINARY, f"malformed ELF image: {exc}") from exc


def is_loadable(image: bytes) -> bool:
    """Whether :func:`dlopen_image` would load ``image`` (never loads it into this process)."""
    try:
        check_image(image)
        read_symbols(image)
    except OffloadError:
        return False
    return True


def dlopen_image(image: bytes) -> ctypes.CDLL:
    """Load ``image`` as a new, private library (``RTLD_LOCAL | RTLD_NOW``).

    The memfd stays open until :func:`dlclose`: the loader matches libraries by path, so a
    path that another loaded program could reuse (a closed fd number) would hand back that
    program instead of loading this one.
    """
    mode = os.RTLD_LOCAL | os.RTLD_NOW
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("offloadrt-program", os.MFD_CLOEXEC)
        try:
            _write_all(fd, image)
            lib = _dlopen(f"/proc/self/fd/{fd}", mode)
        except BaseException:
            os.close(fd)
            raise
        _OPEN_FDS[lib._handle] = fd  # type: ignore[attr-defined]
        return lib
    with tempfile.NamedTemporaryFile(prefix="offloadrt-program-", suffix=".so") as tmp:
        tmp.write(image)
        tmp.flush()
        return _dlopen(tmp.name, mode)


_OPEN_FDS: dict[int, int] = {}  # library handle -> the memfd it was loaded from


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _dlopen(path: str, mode: int) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(path, mode=mode)
    except OSError as exc:
        raise OffloadError(ErrorCode.INVALID_BINARY, f"the dynamic loader rejected the image: {exc}") from exc


def dlclose(lib: ctypes.CDLL) -> None:
    """Unload ``lib``; its destructors run now. No function of it may be called afterwards."""
    handle = lib._handle  # type: ignore[attr-defined]
    _ctypes.dlclose(handle)
    fd = _OPEN_FDS.pop(handle, None)
    if fd is not None:
        os.close(fd)
