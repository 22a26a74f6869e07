"""What the portable-kernel tests need from the machine: clang 20 or later (and ld.lld for AMDGPU
code objects), each probe saying what is missing, and the skip markers built on them. Computed
once per test session (the probes run the tools)."""

from __future__ import annotations

import functools

import pytest

from offloadrt.compile import _clang
from offloadrt.errors import OffloadError


@functools.cache
def clang_missing() -> str:
    """Why portable kernels cannot be built here ("" when clang 20 or later is found)."""
    try:
        _clang.clang()
    except OffloadError as exc:
        return f"portable kernels need clang >= 20: {exc.details}"
    return ""


@functools.cache
def lld_missing() -> str:
    """Why AMDGPU code objects cannot be linked here ("" when ld.lld is found)."""
    try:
        _clang.lld(_clang.clang())
    except OffloadError as exc:
        return f"AMDGPU code objects need ld.lld: {exc.details}"
    return ""


needs_clang = pytest.mark.skipif(bool(clang_missing()), reason=clang_missing() or "clang found")
needs_lld = pytest.mark.skipif(bool(clang_missing() or lld_missing()),
                               reason=clang_missing() or lld_missing() or "ld.lld found")
