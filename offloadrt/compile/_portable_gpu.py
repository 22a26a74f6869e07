"""Portable kernels for GPUs: PTX for NVIDIA (clang ``--target=nvptx64-nvidia-cuda -march=<sm_XX>``)
and code objects for AMD (clang ``--target=amdgcn-amd-amdhsa -mcpu=<gfxXXX>``, then ``ld.lld -shared``).

Each kernel the analysis found is matched with the symbol the binary exports for it (a C++ kernel's
mangled name); its signature comes from the source, or for PTX from the ``.entry`` parameters where
the source cannot be read or disagrees with them. Kernels only the binary shows (made by macros) are
kept by their symbol.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from . import _clang, _signature
from ._analysis import SOURCE_NAME, Analysis, build_depends
from ._types import Compiled

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*$")


def _gpu_command(clang: _clang.Tool, target: str, arch_flag: str, language: str, options: list[str]) -> list[str]:
    return [clang.path, f"--target={target}", arch_flag, "-nogpulib", "-nostdlibinc", "-O3", "-x", language, *options]


def build_ptx(clang: _clang.Tool, work: Path, source: str, options: list[str], language: str, arch: str,
               analysis: Analysis) -> Compiled:
    path, out = work / SOURCE_NAME[language], work / "kernel.ptx"
    log = _clang.run([*_gpu_command(clang, "nvptx64-nvidia-cuda", f"-march={arch}", language, options), "-S",
                      str(path), "-o", str(out), *build_depends(work)],
                     f"compiling the portable source to PTX for {arch}")
    ptx = out.read_text()
    entries = _signature.ptx_entries(ptx)
    kernels: dict[str, tuple[Any, ...] | None] = {}
    symbols: dict[str, str] = {}
    claimed: set[str] = set()
    for kernel in analysis.info.kernels:
        symbol = _signature.symbol_for(kernel.name, kernel.cxx_linkage, list(entries))
        if symbol not in entries:
            continue  # not in this build (#if'd out for NVPTX)
        claimed.add(symbol)
        if symbol != kernel.name:
            symbols[kernel.name] = symbol
        parsed = analysis.signatures.get(kernel.name)
        if parsed is not None and _signature.matches_ptx(parsed, entries[symbol]):
            kernels[kernel.name] = parsed
        else:
            kernels[kernel.name] = _ptx_signature(entries[symbol])
    for symbol, params in entries.items():  # kernels the analysis could not see (made by macros)
        if symbol not in claimed and _IDENTIFIER.match(symbol):  # not the constructor/destructor kernels
            kernels[symbol] = _ptx_signature(params)
    return Compiled(ptx.encode(), kernels, symbols, log)


def _ptx_signature(params: list[tuple[str, int, int]]) -> tuple[Any, ...] | None:
    try:
        return _signature.ptx_signature(params)
    except _signature.SignatureError:
        return None


def build_amdgpu(clang: _clang.Tool, work: Path, source: str, options: list[str], language: str, arch: str,
                  analysis: Analysis) -> Compiled:
    lld = _clang.lld(clang)
    path, obj, out = work / SOURCE_NAME[language], work / "kernel.o", work / "kernel.hsaco"
    log = _clang.run([*_gpu_command(clang, "amdgcn-amd-amdhsa", f"-mcpu={arch}", language, options), "-c",
                      str(path), "-o", str(obj), *build_depends(work)], f"compiling the portable source for {arch}")
    log += _clang.run([lld.path, "-shared", str(obj), "-o", str(out)], f"linking the {arch} code object")
    image = out.read_bytes()
    names = elf_symbols(image)
    entry_points = [name[:-3] for name in names if name.endswith(".kd")]
    kernels: dict[str, tuple[Any, ...] | None] = {}
    symbols: dict[str, str] = {}
    claimed: set[str] = set()
    for kernel in analysis.info.kernels:
        symbol = _signature.symbol_for(kernel.name, kernel.cxx_linkage, entry_points)
        if symbol not in entry_points:
            continue
        claimed.add(symbol)
        if symbol != kernel.name:
            symbols[kernel.name] = symbol
        kernels[kernel.name] = analysis.signatures.get(kernel.name)
    for symbol in entry_points:
        if symbol not in claimed and _IDENTIFIER.match(symbol):
            kernels[symbol] = None
    return Compiled(image, kernels, symbols, log)


def elf_symbols(image: bytes) -> list[str]:
    """The names in an ELF64 little-endian image's symbol tables (``.symtab`` and ``.dynsym``)."""
    try:
        if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
            return []
        shoff, = struct.unpack_from("<Q", image, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + index * shentsize) for index in range(shnum)]
        names: list[str] = []
        for _, kind, _, _, offset, size, link, _, _, entsize in sections:
            if kind not in (2, 11) or not entsize:  # SHT_SYMTAB, SHT_DYNSYM
                continue
            strings = sections[link]
            base, end = strings[4], strings[4] + strings[5]
            for index in range(1, size // entsize):
                name_offset, = struct.unpack_from("<I", image, offset + index * entsize)
                stop = image.index(b"\0", base + name_offset, end)
                name = image[base + name_offset:stop].decode()
                if name and name not in names:
                    names.append(name)
        return names
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return []
