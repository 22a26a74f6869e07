"""Recognising AMDGPU program images (code objects, clang offload bundles) and their target.

A code object is an ELF file with ``e_machine == EM_AMDGPU``; its ``e_flags`` name the GPU
processor (``EF_AMDGPU_MACH``) and, from code object v4 on, the ``xnack`` and ``sramecc``
settings it was built for. An offload bundle packs code objects for several targets, each named
by a triple ending in a target ID such as ``gfx90a:xnack-``. A device can run a code object when
the processor matches and every feature the code object pins (``+`` or ``-``) matches the
device's ``gcnArchName`` (e.g. ``gfx90a:sramecc+:xnack-``).
"""

from __future__ import annotations

import struct

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_BUNDLE_MAGIC = b"CCOB"

# EF_AMDGPU_MACH values (the low byte of e_flags) of the processors offloadrt knows by name.
MACH_NAMES = {
    0x020: "gfx600", 0x021: "gfx601", 0x022: "gfx700", 0x023: "gfx701", 0x024: "gfx702", 0x025: "gfx703",
    0x026: "gfx704", 0x028: "gfx801", 0x029: "gfx802", 0x02a: "gfx803", 0x02b: "gfx810", 0x02c: "gfx900",
    0x02d: "gfx902", 0x02e: "gfx904", 0x02f: "gfx906", 0x030: "gfx908", 0x031: "gfx909", 0x032: "gfx90c",
    0x033: "gfx1010", 0x034: "gfx1011", 0x035: "gfx1012", 0x036: "gfx1030", 0x037: "gfx1031", 0x038: "gfx1032",
    0x039: "gfx1033", 0x03a: "gfx602", 0x03b: "gfx705", 0x03c: "gfx805", 0x03d: "gfx1035", 0x03e: "gfx1034",
    0x03f: "gfx90a", 0x040: "gfx940", 0x041: "gfx1100", 0x042: "gfx1013", 0x043: "gfx1150", 0x044: "gfx1103",
    0x045: "gfx1036", 0x046: "gfx1101", 0x047: "gfx1102", 0x048: "gfx1200", 0x04a: "gfx1151", 0x04b: "gfx941",
    0x04c: "gfx942", 0x04e: "gfx1201", 0x04f: "gfx950", 0x055: "gfx1152", 0x058: "gfx1153",
}
# Generic processors run on a family of devices (LLVM's AMDGPUUsage lists the members).
GENERIC_FAMILIES: dict[str, frozenset[str]] = {
    "gfx9-generic": frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"}),
    "gfx9-4-generic": frozenset({"gfx940", "gfx941", "gfx942", "gfx950"}),
    "gfx10-1-generic": frozenset({"gfx1010", "gfx1011", "gfx1012", "gfx1013"}),
    "gfx10-3-generic": frozenset({"gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"}),
    "gfx11-generic": frozenset({"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152",
                                "gfx1153"}),
    "gfx12-generic": frozenset({"gfx1200", "gfx1201"}),
}
GENERIC_MACHS = {0x051: "gfx9-generic", 0x052: "gfx10-1-generic", 0x053: "gfx10-3-generic", 0x054: "gfx11-generic",
                 0x059: "gfx12-generic", 0x05f: "gfx9-4-generic"}
FIRST_AMDGCN_MACH = 0x020  # below are R600-era processors, which cannot run HSA code objects

Features = dict[str, bool | None]  # feature -> True (+), False (-), None (any / unspecified)


def image_kind(image: bytes) -> str | None:
    """``"code-object"``, ``"bundle"``, ``"compressed-bundle"``, or ``None`` for anything else."""
    if image[:4] == b"\x7fELF":
        if len(image) >= 20 and image[4] in (1, 2) and image[5] in (1, 2):
            endian = "<" if image[5] == 1 else ">"
            (machine,) = struct.unpack_from(endian + "H", image, 18)
            if machine == EM_AMDGPU:
                return "code-object"
        return None
    if image.startswith(BUNDLE_MAGIC):
        return "bundle"
    if image.startswith(COMPRESSED_BUNDLE_MAGIC):
        return "compressed-bundle"
    return None


def parse_target_id(target: str) -> tuple[str, Features]:
    """``"gfx90a:sramecc+:xnack-"`` -> ``("gfx90a", {"sramecc": True, "xnack": False})``."""
    processor, *settings = target.strip().split(":")
    features: Features = {}
    for setting in settings:
        if setting.endswith(("+", "-")):
            features[setting[:-1]] = setting.endswith("+")
    return processor, features


def code_object_target(image: bytes) -> tuple[str | None, Features]:
    """The processor (``None`` if unknown or generic) and pinned features of a code object."""
    if len(image) < 52:
        return None, {}
    endian = "<" if image[5] == 1 else ">"
    offset = 48 if image[4] == 2 else 36  # e_flags
    (flags,) = struct.unpack_from(endian + "I", image, offset)
    abi_version = image[8]
    features: Features = {}
    if abi_version >= 2:  # code object v4 and later: two bits per feature
        for name, shift in (("xnack", 8), ("sramecc", 10)):
            setting = (flags >> shift) & 3
            if setting in (2, 3):  # OFF, ON; 0 is unsupported and 1 any
                features[name] = setting == 3
    mach = flags & 0xFF
    return MACH_NAMES.get(mach), features


def bundle_entries(image: bytes) -> list[tuple[str, bytes]]:
    """``(triple, image)`` of each entry of an uncompressed offload bundle; ``ValueError`` if malformed."""
    pos = len(BUNDLE_MAGIC)
    try:
        (count,) = struct.unpack_from("<Q", image, pos)
        pos += 8
        entries = []
        for _ in range(count):
            offset, size, triple_size = struct.unpack_from("<QQQ", image, pos)
            pos += 24
            triple = image[pos:pos + triple_size].decode()
            pos += triple_size
            if offset + size > len(image) or pos > len(image):
                raise ValueError("an entry runs past the end of the bundle")
            entries.append((triple, image[offset:offset + size]))
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed offload bundle: {exc}") from None
    return entries


def runs_on(target: str, processor: str) -> bool:
    """Whether code built for ``target`` (a processor or a generic one) runs on ``processor``."""
    return target == processor or processor in GENERIC_FAMILIES.get(target, ())


def _features_match(required: Features, device: Features) -> str:
    for name, wanted in required.items():
        have = device.get(name)
        if have is not None and have != wanted:
            return f"{name}{'+' if wanted else '-'} but the device runs with {name}{'+' if have else '-'}"
    return ""


def compatible(image: bytes, device_arch: str) -> tuple[bool, str]:
    """Whether a device whose ``gcnArchName`` is ``device_arch`` can load ``image``, and why not."""
    processor, device_features = parse_target_id(device_arch)
    kind = image_kind(image)
    if kind is None:
        return False, "not an AMDGPU image (an ELF code object for EM_AMDGPU or a clang offload bundle)"
    if kind == "compressed-bundle":
        return True, ""  # the driver picks the entry after decompressing
    if kind == "code-object":
        if len(image) < 52:
            return False, "truncated ELF header"
        if image[5] != 1:
            return False, "big-endian AMDGPU code object"
        mach = image[48 if image[4] == 2 else 36]
        target, features = code_object_target(image)
        if target is None:
            target = GENERIC_MACHS.get(mach)
        if target is None:
            if mach < FIRST_AMDGCN_MACH:
                return False, f"code object for an R600-era or unspecified processor (EF_AMDGPU_MACH {mach:#x})"
            return True, ""  # a processor newer than this table: the driver decides
        if not runs_on(target, processor):
            return False, f"code object built for {target} cannot run on a {device_arch} device"
        mismatch = _features_match(features, device_features)
        if mismatch:
            return False, f"code object built for {target} with {mismatch}"
        return True, ""
    try:
        entries = bundle_entries(image)
    except ValueError as exc:
        return False, str(exc)
    targets = []
    for triple, _entry in entries:
        target_id = bundle_target(triple)
        if target_id is None:
            continue
        targets.append(target_id)
        entry_processor, entry_features = parse_target_id(target_id)
        if runs_on(entry_processor, processor) and not _features_match(entry_features, device_features):
            return True, ""
    listed = ", ".join(targets) or "none"
    return False, f"offload bundle has no code object for {device_arch} (targets: {listed})"


def bundle_target(triple: str) -> str | None:
    """The target ID of a bundle entry for AMD GPUs (``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-``
    gives ``gfx90a:xnack-``), ``None`` for other entries (the host's)."""
    parts = triple.split("-", 4)
    if len(parts) < 5 or parts[1:4] != ["amdgcn", "amd", "amdhsa"]:
        return None
    # After the OS comes an environment field (empty in hipv4-amdgcn-amd-amdhsa--gfx90a), then the target
    # ID, whose processor (gfx9-generic) and features (xnack-) may hold "-" too; old triples have no
    # environment field (hip-amdgcn-amd-amdhsa-gfx906:xnack-).
    environment, dash, target_id = parts[4].partition("-")
    if dash and not environment.startswith("gfx") and ":" not in environment:
        return target_id
    return parts[4]
