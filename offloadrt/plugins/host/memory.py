"""Host memory: page-aligned allocation, frees, copies and fills (plain libc calls, no driver)."""

from __future__ import annotations

import ctypes
import mmap

from ...errors import ErrorCode, OffloadError

_libc = ctypes.CDLL(None, use_errno=True)
_posix_memalign = _libc.posix_memalign
_posix_memalign.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t)
_posix_memalign.restype = ctypes.c_int
free = _libc.free
free.argtypes = (ctypes.c_void_p,)
free.restype = None
_memmove = ctypes.memmove
_memset = ctypes.memset
PAGE_SIZE = mmap.PAGESIZE
FILL_CHUNK = 1 << 20  # copy the pattern forward in pieces that stay in cache


def allocate(size: int) -> int:
    """``size`` bytes of page-aligned memory; ``OUT_OF_RESOURCES`` when the system has none."""
    out = ctypes.c_void_p()
    status = _posix_memalign(ctypes.byref(out), PAGE_SIZE, size)
    if status:
        raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                           f"posix_memalign of {size} bytes failed with errno {status}")
    return out.value or 0


def copy_item(arg: tuple[int, int, int]) -> None:
    """A queued copy: ``(dst, src, size)``."""
    _memmove(arg[0], arg[1], arg[2])


def fill(ptr: int, pattern: bytes, size: int) -> None:
    """Write ``pattern`` over ``size`` bytes at ``ptr``; a last partial copy is cut at ``size``."""
    if size <= 0:
        return
    width = len(pattern)
    if width == 1:
        _memset(ptr, pattern[0], size)
        return
    # Copy from a private buffer of whole patterns, never from the destination itself: work on
    # another queue racing the fill's first bytes then cannot spread into the rest of it.
    chunk = pattern * max(1, min(size, FILL_CHUNK) // width)
    step = len(chunk)
    filled = 0
    while filled < size:
        count = min(step, size - filled)
        _memmove(ptr + filled, chunk, count)
        filled += count


def fill_item(arg: tuple[int, bytes, int]) -> None:
    """A queued fill: ``(ptr, pattern, size)``."""
    fill(*arg)
