"""Which language a kernel source is in when none is given, and the sources offloadrt does not compile.

A source that includes ``<gpuintrin.h>`` (itself, or through a header of the user's) is
portable: ``"gpu-c++"`` when it uses C++ (``extern "C"``, templates, namespaces, ``::``... outside
comments and ``[[...]]`` attribute lists), else ``"gpu-c"``.
Any other source is the device's own language (:data:`NATIVE`). OpenCL C (``__kernel void``,
``__global`` pointers, ``get_global_id``) is none of these: it is refused with what to write instead,
rather than handed to ``cc`` or NVRTC to fail on words they do not know.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import ErrorCode, OffloadError
from ._declarations import clean
from ._types import Target

NATIVE = {"host": "c", "cuda": "cuda", "amdgpu": "hip"}  # a target kind's own language
_GPUINTRIN = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]gpuintrin\.h[>"]', re.MULTILINE)
_CXX_HINTS = re.compile(r'\bextern\s+"C"|\btemplate\s*<|\bnamespace\b|\bclass\b|::|\bstatic_cast\b|'
                        r'\breinterpret_cast\b|\busing\s+namespace\b')
_CXX_WORDS = ('extern', "template", "namespace", "class", "::", "_cast", "using")  # a cheap first look
# An OpenCL kernel: `__kernel void` (or `kernel void` beside OpenCL's address spaces or work-item functions).
_OPENCL_KERNEL = re.compile(r"\b__kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\b")
_OPENCL_PLAIN_KERNEL = re.compile(r"\bkernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\b")
_OPENCL_WORDS = re.compile(r"\b(?:__global|__local|__constant|global|local|constant)\s+(?:const\s+)?\w+\s*\*|"
                           r"\bget_(?:global|local|group)_(?:id|size)\s*\(|\bbarrier\s*\(\s*CLK_")
OPENCL_ADVICE = ("offloadrt does not compile OpenCL C (__kernel, __global, get_global_id). Write the kernel as a "
                 "portable <gpuintrin.h> kernel, which compiles for the host and for NVIDIA and AMD GPUs: "
                 "`#include <gpuintrin.h>`, `__gpu_kernel void name(float *x, uint32_t n)` with plain pointers "
                 "(no __global), `__gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x()` for "
                 "get_global_id(0), `__gpu_thread_id_x()` for get_local_id(0), `__gpu_sync_threads()` for "
                 "barrier(...), and `__gpu_local` for __local variables (docs/portable-kernels.md)")


def detect_lang(source: str, target: Target, options: Sequence[str] = ()) -> str:
    """The language of ``source`` for ``target`` when none is given (see the module's docstring);
    ``UNSUPPORTED`` for OpenCL C, saying what to write instead.

    ``<gpuintrin.h>`` counts wherever the preprocessor would reach it: in the source, or in a header
    of the user's that the source includes (``#include "mylib.h"`` found through the include
    options ``-I``..., relative ones from the current directory, followed header by header), as
    libc-style code does."""
    texts: list[str] | None = [source]
    if "gpuintrin.h" not in source or not _GPUINTRIN.search(source):
        texts = _through_includes(source, options)
    if texts is None:
        if "kernel" in source and is_opencl(source):
            raise OffloadError(ErrorCode.UNSUPPORTED, f"this source is OpenCL C: {OPENCL_ADVICE}")
        return NATIVE[target.kind]
    for text in texts:
        if any(word in text for word in _CXX_WORDS):
            code = _without_attribute_lists(clean(text))  # hints in comments and [[...]] do not count
            if _CXX_HINTS.search(code):
                return "gpu-c++"
    return "gpu-c"


_INCLUDE_LINE = re.compile(r'^[ \t]*#[ \t]*include\b', re.MULTILINE)
_HEADERS_READ = 64  # headers of the user's looked into, at most, to find <gpuintrin.h>
_HEADER_BYTES = 4 << 20


def _through_includes(source: str, options: Sequence[str]) -> list[str] | None:
    """The texts of ``source`` and of the user's headers it includes, when one of those headers
    includes ``<gpuintrin.h>``; else None. System headers are not looked into (only the folders
    the include options name, as the compile's cache keys do)."""
    if "include" not in source or not _INCLUDE_LINE.search(source):
        return None
    from . import _inputs

    try:
        read = _inputs.scan(source, os.getcwd(), options, None).files
    except (OSError, ValueError):
        return None
    texts = [source]
    found = False
    for path in read[:_HEADERS_READ]:
        try:
            if os.path.getsize(path) > _HEADER_BYTES:
                continue
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        texts.append(text)
        found = found or ("gpuintrin.h" in text and bool(_GPUINTRIN.search(text)))
    return texts if found else None


def is_opencl(source: str) -> bool:
    """Whether ``source`` defines an OpenCL C kernel (outside comments, literals and preprocessor lines)."""
    code = clean(source)
    return bool(_OPENCL_KERNEL.search(code) or (_OPENCL_PLAIN_KERNEL.search(code) and _OPENCL_WORDS.search(code)))


def _without_attribute_lists(code: str) -> str:
    """``code`` with each ``[[...]]`` (C23 as well as C++) replaced by a space, in linear time: a
    ``[[`` closes at the nearest ``]]`` after it; one that never closes ends the search (a regular
    expression doing the same rescans the rest of the text from every ``[[``: minutes on 1 MB)."""
    parts: list[str] = []
    position = 0
    while True:
        start = code.find("[[", position)
        end = code.find("]]", start + 2) if start >= 0 else -1
        if end < 0:
            parts.append(code[position:])
            return " ".join(parts)
        parts.append(code[position:start])
        position = end + 2
