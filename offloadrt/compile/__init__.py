"""Kernels from source: the compilers behind ``Device.compile`` and ``Program.from_source``.

offloadrt.core calls :func:`build_for` and loads the :class:`Compiled` image it returns; this
package never imports offloadrt.core.

Languages (``lang``):

- ``"c"``: host C with offloadrt's host kernel ABI (``offloadrt/host_kernel.h``), built with the
  system ``cc`` (``$CC`` honoured), for the host device;
- ``"cuda"``: CUDA C++ through NVRTC, to PTX for the device's compute capability;
- ``"hip"``: HIP through hiprtc, to a code object for the device's ``gcnArchName``;
- ``"gpu-c"``/``"gpu-c++"``: portable kernels against clang's ``<gpuintrin.h>``, for any device.

``lang=None`` reads it from the source: ``#include <gpuintrin.h>`` is portable (C++ when the
source uses C++), anything else is the device's own language (host ``c``, CUDA ``cuda``, AMDGPU
``hip``). Compiled images are cached on disk (:mod:`offloadrt.compile._cache`), keyed also on the
files the source includes (:mod:`offloadrt.compile._inputs`). Each kernel of the
program gets ``Kernel.signature`` from the source, and C++ kernels are found by their source name.
"""

from __future__ import annotations

import importlib
import re
import time
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import PlatformBackend
from . import _cache, _inputs
from ._language import NATIVE, detect_lang
from ._types import Compiled, DeviceLike, Target

__all__ = ["LANGS", "Compiled", "DeviceLike", "Target", "build", "build_for", "detect_lang", "target_of"]

LANGS = ("c", "cuda", "hip", "gpu-c", "gpu-c++")
PORTABLE = ("gpu-c", "gpu-c++")
_KINDS = {PlatformBackend.HOST: "host", PlatformBackend.CUDA: "cuda", PlatformBackend.AMDGPU: "amdgpu"}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_PORTABLE_MODULE = "offloadrt.compile._portable"
HOST = Target("host")


def target_of(device: DeviceLike) -> Target:
    """What ``device`` compiles for: the host, a CUDA ``sm_XY`` or an AMDGPU ``gcnArchName``."""
    kind = _KINDS.get(device.backend)
    if kind is None:
        raise OffloadError(ErrorCode.UNSUPPORTED, f"{device} has no compiler: offloadrt compiles for host, CUDA and "
                                                  f"AMDGPU devices")
    if kind == "host":
        return Target("host")
    gdev = getattr(device.handle, "_gdev", None)
    details = {label: value for label, value, _ in getattr(gdev, "details", ())}
    if kind == "cuda":
        match = re.search(r"sm_\d+\w*", str(details.get("Compute Capability", "")))
        arch = match.group(0) if match else ""
    else:
        arch = str(details.get("GCN Architecture", ""))
    if not arch:
        raise OffloadError(ErrorCode.UNSUPPORTED, f"{device} does not report its architecture; compile elsewhere and "
                                                  f"load the image with Device.load")
    return Target(kind, arch)


def _validate(source: Any, options: Any, lang: Any, name: Any, cache: Any) -> tuple[tuple[str, ...], str]:
    if not isinstance(source, str):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"a kernel source is a str, got {type(source).__name__}"
                           + (" (decode it, or load a binary with Device.load)" if isinstance(source, bytes) else ""))
    if not source.strip():
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, "the kernel source is empty")
    if "\0" in source:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, "the kernel source contains a NUL character")
    if isinstance(options, (str, bytes)) or not isinstance(options, Sequence):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"options are a sequence of str (['-O3', '-DN=4']), got {type(options).__name__}")
    for option in options:
        if not isinstance(option, str) or "\0" in option:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"every option is a str without NUL, got {option!r}")
    if lang is not None and lang not in LANGS:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"unknown lang {lang!r}: use one of {', '.join(map(repr, LANGS))} or None (detect)")
    if name is None:
        name = "kernel"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"name is a file stem of letters, digits, '_', '.', '-' (at most 64), got {name!r}")
    if not isinstance(cache, bool):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"cache is True or False, got {cache!r}")
    return tuple(options), name


def _check_lang(lang: str, target: Target) -> None:
    if lang in PORTABLE or lang == NATIVE[target.kind]:
        return
    owner = next(kind for kind, native in NATIVE.items() if native == lang)
    raise OffloadError(ErrorCode.UNSUPPORTED,
                       f"lang {lang!r} compiles for {owner} devices, not {target.kind} ones; for a {target.kind} "
                       f"device use {NATIVE[target.kind]!r}, or 'gpu-c'/'gpu-c++' (portable <gpuintrin.h> kernels)")


def _portable_compiler() -> ModuleType:
    try:
        module = importlib.import_module(_PORTABLE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != _PORTABLE_MODULE:
            raise
        module = None
    if module is None or not hasattr(module, "compile_portable") or not hasattr(module, "toolchain_identity"):
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           "portable kernels need offloadrt's <gpuintrin.h> compiler (offloadrt.compile._portable), "
                           "which this installation does not have")
    return module


def _identity(lang: str, target: Target) -> str:
    if lang == "c":
        from . import _host

        return _host.toolchain_identity(target)
    if lang == "cuda":
        from . import _nvrtc

        return _nvrtc.toolchain_identity(target)
    if lang == "hip":
        from . import _hiprtc

        return _hiprtc.toolchain_identity(target)
    return str(_portable_compiler().toolchain_identity(target))


def _compile(source: str, options: tuple[str, ...], lang: str, target: Target, name: str) -> Compiled:
    if lang == "c":
        from . import _host

        return _host.compile_host_c(source, options, name)
    if lang == "cuda":
        from . import _nvrtc

        return _nvrtc.compile_cuda(source, options, target, name)
    if lang == "hip":
        from . import _hiprtc

        return _hiprtc.compile_hip(source, options, target, name)
    compiled = _portable_compiler().compile_portable(source, options, lang, target)
    if not isinstance(compiled, Compiled):
        raise OffloadError(ErrorCode.UNKNOWN, f"the portable compiler returned {type(compiled).__name__}, not Compiled")
    return compiled


def build(source: str, options: Sequence[str] = (), lang: str | None = None, target: Target = HOST, *,
          name: str | None = None, cache: bool = True) -> Compiled:
    """Compile ``source`` for ``target`` (no device needed): the image and its kernels' signatures.

    With ``cache`` the image is looked up first in the on-disk cache and stored there after a
    compile; an entry is used only while every file the compile read (besides system headers)
    has the same contents and relative include options name the same folders.
    ``COMPILE_FAILURE`` holds the compiler's whole log; ``HOST_TOOL_NOT_FOUND`` says what
    to install; ``UNSUPPORTED`` a language the target cannot run.
    """
    flags, stem = _validate(source, options, lang, name, cache)
    if not isinstance(target, Target) or target.kind not in NATIVE:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"target is a Target of kind host, cuda or amdgpu, got {target!r}")
    chosen = detect_lang(source, target, flags) if lang is None else lang
    _check_lang(chosen, target)
    context = _inputs.context(flags, in_process=chosen in ("cuda", "hip")) if cache else None
    if context is None:  # no cache, or no current directory to resolve relative include options against
        return _compile(source, flags, chosen, target, stem)
    where, search = context
    base = _cache.key(source, flags, chosen, target, _identity(chosen, target), where)
    found = _cache.lookup(base)
    if found is not None:
        return found
    started = time.time()
    compiled = _compile(source, flags, chosen, target, stem)
    if compiled.inputs is not None:  # else what it read is unknown: not cached
        try:
            _cache.remember(base, compiled, _inputs.keyed(compiled.inputs, search), started, chosen, target)
        except OffloadError as exc:
            warnings.warn(f"offloadrt: the compiled kernels were not cached: {exc}", OffloadWarning, stacklevel=2)
    return compiled


def build_for(device: DeviceLike, source: str, options: Sequence[str] = (), lang: str | None = None, *,
              name: str | None = None, cache: bool = True) -> Compiled:
    """Compile ``source`` for what ``device`` runs (:func:`target_of`), without loading it: what
    ``Device.compile`` and ``Program.from_source`` load (see :func:`build` for the arguments and errors)."""
    _validate(source, options, lang, name, cache)
    return build(source, options, lang, target_of(device), name=name, cache=cache)
