"""HIP kernels (``lang="hip"``) through hiprtc (hip-python's ``hip.hiprtc``), compiled to an AMDGPU code object.

hiprtc compiles for the device's ``gcnArchName`` (``--offload-arch=gfx90a:sramecc+:xnack-``)
unless the options name an architecture. It needs ROCm's ``libhiprtc.so`` (hip-python only binds
it). Kernels' symbols come from the code object's kernel descriptors (``NAME.kd``); their
signatures from the source's declarations. hiprtc is reached through :func:`hiprtc_module` only,
which the tests replace with a stand-in. hiprtc does not say which files it read, so for the cache
the source's ``#include`` lines are followed as for NVRTC (:mod:`offloadrt.compile._inputs`).
"""

from __future__ import annotations

import importlib
import io
import struct
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from ..errors import ErrorCode, OffloadError
from . import _nvrtc, _signature
from ._nvrtc import unique_symbol
from ._types import Compiled, Target

INSTALL = "install ROCm's hiprtc (libhiprtc.so, e.g. the hip-runtime-amd package) and hip-python (offloadrt[amd])"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def hiprtc_module() -> ModuleType:
    """hip-python's ``hiprtc`` module: ``rocm.bindings.hiprtc`` (hip-python 10), else ``hip.hiprtc``
    (earlier releases); ``HOST_TOOL_NOT_FOUND`` when hip-python is missing."""
    try:
        return importlib.import_module("rocm.bindings.hiprtc")
    except ImportError:
        pass
    try:
        package = importlib.import_module("hip")
        module = getattr(package, "hiprtc", None)
        return module if isinstance(module, ModuleType) else importlib.import_module("hip.hiprtc")
    except ImportError as exc:
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND,
                           f"HIP kernels from source need hiprtc through hip-python ({exc}): {INSTALL}") from None


def _call(hiprtc: ModuleType, name: str, *args: Any) -> tuple[Any, ...]:
    try:
        result = getattr(hiprtc, name)(*args)
    except RuntimeError as exc:  # hip-python raises this when it cannot dlopen libhiprtc.so
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"hiprtc is not usable ({exc}): {INSTALL}") from None
    return tuple(result) if isinstance(result, tuple) else (result,)


def _name(status: Any) -> str:
    return str(getattr(status, "name", int(status)))


def toolchain_identity(target: Target) -> str:
    hiprtc = hiprtc_module()
    status, major, minor = _call(hiprtc, "hiprtcVersion")
    if int(status) != 0:
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"hiprtcVersion: {_name(status)}: {INSTALL}")
    return f"hiprtc {int(major)}.{int(minor)} ({getattr(hiprtc, '__name__', 'hiprtc')})"


def compile_hip(source: str, options: Sequence[str], target: Target, name: str) -> Compiled:
    """A code object for ``target``; ``COMPILE_FAILURE`` holds hiprtc's whole log."""
    hiprtc = hiprtc_module()
    flags = [str(option) for option in options]
    if not any(flag.startswith(("--offload-arch", "--gpu-architecture")) for flag in flags):
        flags.insert(0, f"--offload-arch={target.arch}")
    status, program = _call(hiprtc, "hiprtcCreateProgram", source.encode(), f"{name}.hip".encode(), 0, [], [])
    if int(status) != 0:
        raise OffloadError(ErrorCode.COMPILE_FAILURE, f"hiprtcCreateProgram: {_name(status)}")
    try:
        encoded = [flag.encode() for flag in flags]
        status, *_ = _call(hiprtc, "hiprtcCompileProgram", program, len(encoded), encoded)
        log = _log(hiprtc, program)
        if int(status) != 0:
            error = ErrorCode.INVALID_ARGUMENT if _name(status) == "HIPRTC_ERROR_INVALID_OPTION" \
                else ErrorCode.COMPILE_FAILURE
            raise OffloadError(error,
                               f"hiprtc could not compile the HIP source ({_name(status)}); compiler log:\n{log}")
        status, size = _call(hiprtc, "hiprtcGetCodeSize", program)
        if int(status) != 0:
            raise OffloadError(ErrorCode.COMPILE_FAILURE, f"hiprtcGetCodeSize: {_name(status)}")
        code = bytearray(int(size))
        status, *_ = _call(hiprtc, "hiprtcGetCode", program, code)
        if int(status) != 0:
            raise OffloadError(ErrorCode.COMPILE_FAILURE, f"hiprtcGetCode: {_name(status)}")
    finally:
        _call(hiprtc, "hiprtcDestroyProgram", program)
    image = bytes(code)
    kernels, symbols = hip_kernels(source, kernel_symbols(image, target.arch))
    return Compiled(image, kernels, symbols, log, _nvrtc.inputs_of(source, flags))


def _log(hiprtc: ModuleType, program: Any) -> str:
    status, size = _call(hiprtc, "hiprtcGetProgramLogSize", program)
    if int(status) != 0 or int(size) <= 1:
        return ""
    text = bytearray(int(size))
    _call(hiprtc, "hiprtcGetProgramLog", program, text)
    return bytes(text).rstrip(b"\0").decode(errors="replace").strip()


def kernel_symbols(image: bytes, arch: str = "") -> list[str]:
    """The kernels of an AMDGPU code object (the names of its ``.kd`` symbols), or of the offload
    bundle entry for ``arch``'s processor; [] for what cannot be read."""
    if image.startswith(BUNDLE_MAGIC):
        image = _bundle_entry(image, arch.split(":")[0])
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        elf = ELFFile(io.BytesIO(image))
        names: list[str] = []
        for section in elf.iter_sections():
            if isinstance(section, SymbolTableSection):
                for symbol in section.iter_symbols():
                    if symbol.name.endswith(".kd") and symbol.name[:-3] not in names:
                        names.append(symbol.name[:-3])
        return names
    except (ELFError, ValueError, struct.error):
        return []


def _bundle_entry(image: bytes, processor: str) -> bytes:
    try:
        count, = struct.unpack_from("<Q", image, len(BUNDLE_MAGIC))
        cursor = len(BUNDLE_MAGIC) + 8
        for _ in range(count):
            offset, size, length = struct.unpack_from("<QQQ", image, cursor)
            triple = image[cursor + 24:cursor + 24 + length].decode(errors="replace")
            cursor += 24 + length
            if "amdgcn" in triple and (not processor or f"-{processor}" in triple):
                return image[offset:offset + size]
    except struct.error:
        pass
    return b""


def hip_kernels(source: str, symbols_found: list[str]) -> tuple[dict[str, tuple[Any, ...] | None], dict[str, str]]:
    """Signatures by source name, and the symbols of C++ kernels, from the source and the code object's kernels."""
    info = _signature.analyse(source, cxx=True)
    kernels: dict[str, tuple[Any, ...] | None] = {}
    symbols: dict[str, str] = {}
    claimed: set[str] = set()
    for decl in info.kernels:
        symbol = unique_symbol(decl.name, decl.cxx_linkage, symbols_found) if symbols_found else decl.name
        if symbol is None or symbol in claimed:
            continue  # not in the code object, or several (overloads, instantiations: use their symbols)
        claimed.add(symbol)
        if symbol != decl.name:
            symbols[decl.name] = symbol
        try:
            kernels[decl.name] = _signature.signature(decl, info)
        except _signature.SignatureError:
            kernels[decl.name] = None
    for symbol in symbols_found:
        if symbol not in claimed:
            kernels[symbol] = None
    return kernels, symbols
