"""Portable kernels: one ``<gpuintrin.h>`` C or C++ source for the host, NVIDIA (PTX) and AMD GPUs.

Every build first preprocesses the source once for the analysis (:mod:`offloadrt.compile._analysis`)
to find the kernels, their parameters, the dynamic work-group arrays and which kernels reach a
barrier or a lane operation. Then :mod:`offloadrt.compile._portable_gpu` builds PTX or an AMDGPU code
object, or :mod:`offloadrt.compile._portable_host` a shared object in the host kernel ABI. This module
picks the build and says what the cache keys on (:func:`toolchain_identity`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, OffloadError
from . import _analysis, _clang, _inputs, _portable_gpu, _portable_host, _types
from ._analysis import GPU_INCLUDE, INCLUDE, SOURCE_NAME, Analysis
from ._portable_gpu import elf_symbols
from ._portable_host import host_source, rewrite_local_memory
from ._types import Compiled, Target

__all__ = ["GENERATOR", "GPU_INCLUDE", "INCLUDE", "LANGS", "SOURCE_NAME", "Analysis", "compile_portable",
           "elf_symbols", "host_source", "kernels_needing_fibers", "rewrite_local_memory", "toolchain_identity"]

LANGS = {"gpu-c": "c", "gpu-c++": "c++"}
GENERATOR = 1  # bump when the generated host wrapper changes (part of the toolchain identity)
_ARCH = {"cuda": re.compile(r"sm_\d+[af]?$"), "amdgpu": re.compile(r"gfx[0-9a-f]+(:[a-z-]+[+-])*$")}
_identities: dict[tuple[Any, ...], tuple[str, tuple[str, ...], tuple[tuple[int, int], ...]]] = {}
_identities_lock = threading.Lock()  # guards _identities


def toolchain_identity(target: Target) -> str:
    """The compiler (and linker) path and version used for ``target``, and for the host the
    digest of offloadrt's host headers and wrapper generator and the CPU the build is for: what the
    cache keys on. Kept per target and environment while the tools are unchanged (a cached compile
    asks for it each time)."""
    _check_target(target)
    key = (target.kind, target.arch, os.environ.get("OFFLOADRT_CLANG"), os.environ.get("OFFLOADRT_LLD"),
           os.environ.get("PATH"), os.environ.get(_portable_host.MARCH_ENV))
    with _identities_lock:
        known = _identities.get(key)
    if known is not None and _stamps(known[1]) == known[2]:
        return known[0]
    clang = _clang.clang()
    parts = [f"{clang.path}: {clang.banner}"]
    files = [clang.path]
    if target.kind == "amdgpu":
        lld = _clang.lld(clang)
        parts.append(f"{lld.path}: {lld.banner}")
        files.append(lld.path)
    if target.kind == "host":
        parts.append(f"host gpuintrin {_headers_digest()} {_portable_host.cpu_identity(clang)}")
    identity = " | ".join(parts)
    with _identities_lock:
        _identities[key] = (identity, tuple(files), _stamps(tuple(files)))
    return identity


# The modules whose code shapes a host image (the wrapper, the work-group regions, the analysis):
# their text is keyed too, so a change to the generator never reuses an image it made before.
GENERATOR_MODULES = ("_portable.py", "_portable_host.py", "_regions.py", "_regions_code.py", "_regions_checks.py",
                     "_analysis.py")


@functools.lru_cache(maxsize=1)
def _headers_digest() -> str:
    """offloadrt's host headers and wrapper generator (read once: they are the package's own files)."""
    digest = hashlib.sha256(str(GENERATOR).encode())
    for header in sorted(GPU_INCLUDE.glob("*.h")) + [INCLUDE / "offloadrt" / "host_kernel.h"]:
        digest.update(header.read_bytes())
    here = Path(__file__).resolve().parent
    for module in GENERATOR_MODULES:
        digest.update(module.encode() + b"\0" + (here / module).read_bytes())
    return digest.hexdigest()[:16]


def _stamps(files: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    stamps = []
    for path in files:
        try:
            status = os.stat(path)
        except OSError:
            return ()
        stamps.append((status.st_mtime_ns, status.st_size))
    return tuple(stamps)


def _check_target(target: Target) -> None:
    if not isinstance(target, Target):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"target must be a Target, not {type(target).__name__}")
    if target.kind not in ("host", "cuda", "amdgpu"):
        raise OffloadError(ErrorCode.UNSUPPORTED, f"portable kernels build for host, cuda or amdgpu, not "
                                                  f"{target.kind!r}")
    if target.kind != "host" and not _ARCH[target.kind].match(target.arch or ""):
        example = "sm_90" if target.kind == "cuda" else "gfx90a"
        raise OffloadError(ErrorCode.UNSUPPORTED, f"a {target.kind} build needs the device's architecture "
                                                  f"(such as {example!r}), not {target.arch!r}")


def compile_portable(source: str, options: Sequence[str], lang: str, target: Target) -> Compiled:
    """Compile a ``<gpuintrin.h>`` source (``lang`` ``"gpu-c"`` or ``"gpu-c++"``) for ``target``.

    ``options`` go to clang as they are (``-DNAME=1``, ``-I<dir>``, ``-std=c++20``...). Raises
    ``COMPILE_FAILURE`` (details: the whole compiler log, or what the host cannot run),
    ``HOST_TOOL_NOT_FOUND`` (clang ≥ 20 or ld.lld missing: what to install) or ``UNSUPPORTED``."""
    if not isinstance(source, str):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"source must be a str, not {type(source).__name__}")
    if lang not in LANGS:
        raise OffloadError(ErrorCode.UNSUPPORTED, f"portable kernels are 'gpu-c' or 'gpu-c++', not {lang!r}")
    if isinstance(options, str) or not all(isinstance(option, str) for option in options):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, "options must be a sequence of str")
    _check_target(target)
    clang = _clang.clang()
    language = LANGS[lang]
    with tempfile.TemporaryDirectory(prefix="offloadrt-portable-") as folder:
        work = Path(folder)
        cpu = _portable_host.march_options(clang, options) if target.kind == "host" else []
        analysis = _analysis.analyse(clang, work, source, [*cpu, *options], language)  # the build's macros
        if target.kind == "host":
            compiled = _portable_host.build_host(clang, work, source, list(options), language, analysis)
        elif target.kind == "cuda":
            compiled = _portable_gpu.build_ptx(clang, work, source, list(options), language, target.arch, analysis)
        else:
            compiled = _portable_gpu.build_amdgpu(clang, work, source, list(options), language, target.arch,
                                                  analysis)
        compiled.inputs = _depends(work, source, options)
        return compiled


def _depends(work: Path, source: str, options: Sequence[str]) -> _types.Inputs | None:
    """What the analysis and the build read besides the source (their ``-MD`` files), for the
    cache; None when that is unknown."""
    try:
        cwd = os.getcwd()
        made = [_inputs.from_make((work / name).read_text(errors="replace"), cwd, str(work))
                for name in ("analysis.d", "build.d")]
    except OSError:
        return None
    return _inputs.reported(_inputs.merge(*made), source, cwd, options)


def kernels_needing_fibers(source: str, lang: str = "gpu-c", options: Sequence[str] = ()) -> dict[str, bool]:
    """Each kernel of a portable source, and whether the host runs its work-items as fibers."""
    clang = _clang.clang()
    with tempfile.TemporaryDirectory(prefix="offloadrt-portable-") as folder:
        analysis = _analysis.analyse(clang, Path(folder), source, list(options), LANGS[lang])
    return {kernel.name: _analysis.needs_fibers(kernel.name, analysis.graph) for kernel in analysis.info.kernels}
