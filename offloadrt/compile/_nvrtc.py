"""CUDA C++ kernels (``lang="cuda"``) through NVRTC (``cuda.bindings.nvrtc``), compiled to PTX.

NVRTC compiles for the device's compute capability (``--gpu-architecture=compute_XY``) unless the
options name an architecture; for a device newer than this NVRTC knows, for the newest it knows
(the driver compiles PTX forward). The image is PTX, or a cubin (machine code, which needs no
JIT in the driver, so also runs on a driver older than this NVRTC) when the options name a real
architecture (``-arch=sm_90``). It needs no GPU: the ``nvidia-cuda-nvrtc`` wheel brings
``libnvrtc``. Kernels' symbols and parameters come from the PTX ``.entry`` directives; their
signatures from the source's declarations where those agree with the PTX, else from the PTX alone.
NVRTC does not say which files it read, so for the cache the source's ``#include`` lines are
followed (:mod:`offloadrt.compile._inputs`).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from ..errors import ErrorCode, OffloadError
from . import _inputs, _signature
from ._types import Compiled, Inputs, Target

INSTALL = "pip install cuda-bindings nvidia-cuda-nvrtc (or offloadrt[cuda])"
_ARCH_OPTION = re.compile(r"^(?:-arch|--gpu-architecture)(?:=|$)")
_REAL_ARCH = re.compile(r"^(?:-arch|--gpu-architecture)=sm_\d+")


def nvrtc_module() -> ModuleType:
    """``cuda.bindings.nvrtc`` (``HOST_TOOL_NOT_FOUND`` when cuda-bindings or libnvrtc is missing)."""
    try:
        module = importlib.import_module("cuda.bindings.nvrtc")
    except ImportError as exc:
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND,
                           f"CUDA kernels from source need NVRTC through cuda-bindings ({exc}): {INSTALL}") from None
    return module


def _call(nvrtc: ModuleType, name: str, *args: Any) -> tuple[Any, ...]:
    """Call an NVRTC function; a missing ``libnvrtc`` is ``HOST_TOOL_NOT_FOUND``."""
    try:
        result = getattr(nvrtc, name)(*args)
    except RuntimeError as exc:  # cuda-bindings raises this when it cannot load libnvrtc
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"NVRTC is not usable ({exc}): {INSTALL}") from None
    return tuple(result)


def version() -> tuple[int, int]:
    nvrtc = nvrtc_module()
    status, major, minor = _call(nvrtc, "nvrtcVersion")
    _check(nvrtc, status, "nvrtcVersion")
    return int(major), int(minor)


def toolchain_identity(target: Target) -> str:
    major, minor = version()
    return f"NVRTC {major}.{minor}"


def _check(nvrtc: ModuleType, status: Any, call: str, log: str = "") -> None:
    if int(status) == 0:
        return
    name = getattr(status, "name", str(int(status)))
    if name == "NVRTC_ERROR_COMPILATION":
        raise OffloadError(ErrorCode.COMPILE_FAILURE, f"NVRTC could not compile the CUDA source; compiler log:\n{log}")
    if name == "NVRTC_ERROR_INVALID_OPTION":
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"NVRTC refused an option ({name}); log:\n{log}")
    raise OffloadError(ErrorCode.COMPILE_FAILURE, f"{call}: {name}" + (f"; log:\n{log}" if log else ""))


def architecture(arch: str) -> str:
    """The ``compute_XY`` NVRTC compiles for on a device of ``arch`` (``"sm_90"``)."""
    match = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    if match is None:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"not a CUDA architecture: {arch!r} (sm_XY)")
    wanted = int(match.group(1))
    nvrtc = nvrtc_module()
    status, supported = _call(nvrtc, "nvrtcGetSupportedArchs")
    _check(nvrtc, status, "nvrtcGetSupportedArchs")
    usable = [int(sm) for sm in supported if int(sm) <= wanted]
    if not usable:
        major, minor = version()
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"NVRTC {major}.{minor} compiles for sm_{min(supported)} and newer; the device is "
                           f"{arch}: use an older CUDA toolkit's NVRTC, or load PTX built elsewhere")
    return f"compute_{max(usable)}"


def compile_cuda(source: str, options: Sequence[str], target: Target, name: str) -> Compiled:
    """PTX for ``target``; ``COMPILE_FAILURE`` holds NVRTC's whole log."""
    nvrtc = nvrtc_module()
    flags = [str(option) for option in options]
    if not any(_ARCH_OPTION.match(flag) for flag in flags):
        flags.insert(0, f"--gpu-architecture={architecture(target.arch)}")
    status, program = _call(nvrtc, "nvrtcCreateProgram", source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check(nvrtc, status, "nvrtcCreateProgram")
    try:
        encoded = [flag.encode() for flag in flags]
        status, = _call(nvrtc, "nvrtcCompileProgram", program, len(encoded), encoded)
        log = _log(nvrtc, program)
        _check(nvrtc, status, "nvrtcCompileProgram", log)
        ptx = _output(nvrtc, program, "PTX")
        image = _output(nvrtc, program, "CUBIN") if any(_REAL_ARCH.match(flag) for flag in flags) else ptx
    finally:
        _call(nvrtc, "nvrtcDestroyProgram", program)
    kernels, symbols = ptx_kernels(source, ptx.rstrip(b"\0").decode(errors="replace"))
    return Compiled(image, kernels, symbols, log, inputs_of(source, flags))


def inputs_of(source: str, flags: Sequence[str]) -> Inputs:
    """What NVRTC read besides the source, for the cache: NVRTC cannot tell, so the source's includes
    are followed (:func:`offloadrt.compile._inputs.scan`) from the current directory, where NVRTC
    looks for the source's ``"..."`` includes."""
    try:
        cwd = os.getcwd()
    except OSError:
        return Inputs(complete=False)
    return _inputs.scan(source, cwd, flags, cwd)


def _output(nvrtc: ModuleType, program: Any, kind: str) -> bytes:
    """The program's PTX or CUBIN."""
    status, size = _call(nvrtc, f"nvrtcGet{kind}Size", program)
    _check(nvrtc, status, f"nvrtcGet{kind}Size")
    data = b" " * int(size)
    status, = _call(nvrtc, f"nvrtcGet{kind}", program, data)
    _check(nvrtc, status, f"nvrtcGet{kind}")
    return data


def _log(nvrtc: ModuleType, program: Any) -> str:
    status, size = _call(nvrtc, "nvrtcGetProgramLogSize", program)
    if int(status) != 0 or int(size) <= 1:
        return ""
    text = b" " * int(size)
    _call(nvrtc, "nvrtcGetProgramLog", program, text)
    return text.rstrip(b"\0").decode(errors="replace").strip()


def ptx_kernels(source: str, ptx: str) -> tuple[dict[str, tuple[Any, ...] | None], dict[str, str]]:
    """Signatures by source name and the symbols of C++ kernels, from the source and its PTX."""
    entries = _signature.ptx_entries(ptx)
    info = _signature.analyse(source, cxx=True)
    kernels: dict[str, tuple[Any, ...] | None] = {}
    symbols: dict[str, str] = {}
    claimed: set[str] = set()
    for decl in info.kernels:
        symbol = unique_symbol(decl.name, decl.cxx_linkage, list(entries))
        if symbol is None or symbol in claimed:
            continue  # not in the PTX (uninstantiated, compiled out) or several (overloads, instantiations)
        claimed.add(symbol)
        if symbol != decl.name:
            symbols[decl.name] = symbol
        kernels[decl.name] = _best_signature(decl, info, entries[symbol])
    for symbol, params in entries.items():
        if symbol not in claimed:
            kernels[symbol] = _ptx_only(params)
    return kernels, symbols


def unique_symbol(name: str, cxx_linkage: bool, symbols: list[str]) -> str | None:
    """The one symbol kernel ``name`` has among ``symbols`` (its mangled name for C++ linkage), or
    None when it has none or several (overloads, template instantiations: use their symbols)."""
    if name in symbols:
        return name
    if not cxx_linkage:
        return None
    prefix = f"_Z{len(name)}{name}"
    found = [symbol for symbol in symbols if symbol.startswith(prefix)]
    return found[0] if len(found) == 1 else None


def _best_signature(decl: _signature.KernelDecl, info: _signature.SourceInfo,
                    params: list[tuple[str, int, int]]) -> tuple[Any, ...] | None:
    try:
        declared = _signature.signature(decl, info)
    except _signature.SignatureError:
        return _ptx_only(params)
    return declared if _signature.matches_ptx(declared, params) else _ptx_only(params)


def _ptx_only(params: list[tuple[str, int, int]]) -> tuple[Any, ...] | None:
    try:
        return _signature.ptx_signature(params)
    except _signature.SignatureError:
        return None
