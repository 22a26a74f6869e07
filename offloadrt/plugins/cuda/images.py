"""Recognising CUDA program images (PTX text, cubin, fatbin) without loading them."""

from __future__ import annotations

import re
import struct

EM_CUDA = 190
FATBIN_MAGIC = b"\x50\xed\x55\xba"  # 0xBA55ED50, little-endian
_PTX_TARGET = re.compile(rb"^\s*\.target\s+sm_(\d+)", re.MULTILINE)
_PTX_VERSION = re.compile(rb"^\s*\.version\s+\d+\.\d+", re.MULTILINE)


def image_kind(image: bytes) -> str | None:
    """``"ptx"``, ``"cubin"``, ``"fatbin"``, or ``None`` for anything the driver cannot load."""
    if image[:4] == FATBIN_MAGIC:
        return "fatbin"
    if image[:4] == b"\x7fELF":
        if len(image) >= 20 and image[4] in (1, 2) and image[5] in (1, 2):
            endian = "<" if image[5] == 1 else ">"
            (machine,) = struct.unpack_from(endian + "H", image, 18)
            if machine == EM_CUDA:
                return "cubin"
        return None
    head = image[:65536]
    if _PTX_VERSION.search(head) and b".target" in head:
        return "ptx"
    return None


def cubin_sm(image: bytes) -> int | None:
    """The SM version a cubin was built for (e.g. 90), from its ELF header flags, if readable."""
    if len(image) < 52:
        return None
    endian = "<" if image[5] == 1 else ">"
    offset = 48 if image[4] == 2 else 36  # e_flags
    (flags,) = struct.unpack_from(endian + "I", image, offset)
    # Older cubins keep the SM in the low byte; newer ones (CUDA 12.8+) in bits 8..15.
    for sm in (flags & 0xFF, (flags >> 8) & 0xFF):
        if 20 <= sm <= 200:
            return sm
    return None


def ptx_sm(image: bytes) -> int | None:
    match = _PTX_TARGET.search(image[:65536])
    return int(match.group(1)) if match else None


def compatible(image: bytes, major: int, minor: int) -> tuple[bool, str]:
    """Whether a device of compute capability ``major.minor`` can load ``image``, and why not."""
    kind = image_kind(image)
    if kind is None:
        return False, "not a CUDA image (PTX text, cubin or fatbin)"
    device_sm = major * 10 + minor
    if kind == "cubin":
        sm = cubin_sm(image)
        if sm is not None and (sm // 10 != major or sm % 10 > minor):
            return False, f"cubin built for sm_{sm} cannot run on a compute capability {major}.{minor} device"
    elif kind == "ptx":
        sm = ptx_sm(image)
        if sm is not None and sm > device_sm:
            return False, f"PTX targets sm_{sm}, newer than the device's compute capability {major}.{minor}"
    return True, ""
