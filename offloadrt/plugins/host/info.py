"""Facts about the CPU the host device runs on, read from the operating system."""

from __future__ import annotations

import ctypes
import os
import platform
import socket
import warnings
from pathlib import Path
from typing import Any

from ... import __version__
from ...errors import OffloadWarning
from ...types import Detail, DeviceInfo, DeviceType, Dimensions, FpCapabilityFlag

UINT32_MAX = 0xFFFFFFFF
#: set to 1 to give the host device the limits every current GPU has (read when the host device starts)
GPU_LIMITS_VARIABLE = "OFFLOADRT_HOST_GPU_LIMITS"
GPU_GROUP_SIZE = 1024  # work-items per work-group: CUDA's and HIP's maxThreadsPerBlock
GPU_GROUP_DIMS = Dimensions(1024, 1024, 64)  # per dimension: CUDA's and HIP's maxThreadsDim
GPU_GROUP_MEMORY = 48 * 1024  # work-group memory: CUDA's sharedMemPerBlock without the opt-in
VENDOR_IDS = {"GenuineIntel": 0x8086, "AuthenticAMD": 0x1022}
VENDOR_NAMES = {"GenuineIntel": "Intel Corporation", "AuthenticAMD": "Advanced Micro Devices, Inc."}
# CPU implementer codes on Arm (the "CPU implementer" line of /proc/cpuinfo).
ARM_IMPLEMENTERS = {0x41: "Arm Limited", 0x42: "Broadcom", 0x43: "Cavium", 0x4E: "NVIDIA Corporation",
                    0x51: "Qualcomm", 0x61: "Apple", 0xC0: "Ampere Computing"}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpuinfo() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo as a dict."""
    fields: dict[str, str] = {}
    for line in _read("/proc/cpuinfo").splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _size_text(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else 0


def _clock_mhz(cpu: dict[str, str]) -> int:
    khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if khz.isdigit():
        return int(khz) // 1000
    mhz = cpu.get("cpu MHz", "")
    try:
        return int(float(mhz))
    except ValueError:
        return 0


def _memory_bytes() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _simd_bytes(flags: set[str]) -> int:
    if "avx512f" in flags:
        return 64
    if "avx2" in flags or "avx" in flags:
        return 32
    if flags & {"sse2", "asimd", "neon"} or platform.machine() in ("aarch64", "arm64"):
        return 16
    return 8


def compute_units() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def gpu_limits() -> bool:
    """Whether ``OFFLOADRT_HOST_GPU_LIMITS`` asks for GPU limits on the host device: ``1`` (or
    ``true``/``yes``/``on``) does; unset, empty, ``0`` (``false``/``no``/``off``) does not; any other
    value does not, with an ``OffloadWarning`` saying so."""
    text = os.environ.get(GPU_LIMITS_VARIABLE, "").strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text not in ("", "0", "false", "no", "off"):
        warnings.warn(f"offloadrt: {GPU_LIMITS_VARIABLE}={text!r} is neither 1 nor 0; the host device keeps its "
                      f"own limits", OffloadWarning, stacklevel=2)
    return False


def host_device_info() -> tuple[dict[DeviceInfo, Any], list[Detail]]:
    """The host device's info values, and extra lines for ``offloadrt info``.

    With :func:`gpu_limits` the work-group limits are a GPU's (1024 items, at most 1024, 1024, 64 per
    dimension, 48 KiB of work-group memory); launches are checked against these values.
    """
    cpu = _cpuinfo()
    flags = set(cpu.get("flags", cpu.get("Features", "")).split())
    vendor_tag = cpu.get("vendor_id", "")
    if vendor_tag in VENDOR_NAMES:
        vendor = VENDOR_NAMES[vendor_tag]
    elif "CPU implementer" in cpu:
        vendor = ARM_IMPLEMENTERS.get(int(cpu["CPU implementer"], 16), "Unknown CPU vendor")
    else:
        vendor = vendor_tag or "Unknown CPU vendor"
    model = cpu.get("model name") or cpu.get("Model") or platform.processor() or platform.machine()
    machine_id = _read("/etc/machine-id").strip() or socket.gethostname()
    l2 = _size_text(_read("/sys/devices/system/cpu/cpu0/cache/index2/size")) or (1 << 20)
    memory = _memory_bytes()
    simd = _simd_bytes(flags)
    full_fp = FpCapabilityFlag(0x7F)  # every capability but SOFT_FLOAT
    has_half = bool(flags & {"avx512fp16", "fphp", "asimdhp"})
    info: dict[DeviceInfo, Any] = {
        DeviceInfo.TYPE: DeviceType.HOST,
        DeviceInfo.NAME: model,
        DeviceInfo.PRODUCT_NAME: model,
        DeviceInfo.UID: f"host-{machine_id}",
        DeviceInfo.VENDOR: vendor,
        DeviceInfo.DRIVER_VERSION: f"offloadrt {__version__} (Linux {platform.release()})",
        DeviceInfo.MAX_WORK_GROUP_SIZE: UINT32_MAX,
        DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(UINT32_MAX, UINT32_MAX, UINT32_MAX),
        DeviceInfo.MAX_WORK_SIZE: UINT32_MAX,
        DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(UINT32_MAX, UINT32_MAX, UINT32_MAX),
        DeviceInfo.VENDOR_ID: VENDOR_IDS.get(vendor_tag, 0),
        DeviceInfo.NUM_COMPUTE_UNITS: compute_units(),
        DeviceInfo.MAX_CLOCK_FREQUENCY: _clock_mhz(cpu),
        DeviceInfo.ADDRESS_BITS: 8 * ctypes.sizeof(ctypes.c_void_p),
        DeviceInfo.MAX_MEM_ALLOC_SIZE: memory,
        DeviceInfo.GLOBAL_MEM_SIZE: memory,
        DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: l2,
        DeviceInfo.SINGLE_FP_CONFIG: full_fp,
        DeviceInfo.DOUBLE_FP_CONFIG: full_fp,
        DeviceInfo.HALF_FP_CONFIG: full_fp if has_half else FpCapabilityFlag(0),
        DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR: simd,
        DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT: simd // 2,
        DeviceInfo.NATIVE_VECTOR_WIDTH_INT: simd // 4,
        DeviceInfo.NATIVE_VECTOR_WIDTH_LONG: simd // 8,
        DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT: simd // 4,
        DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE: simd // 8,
        DeviceInfo.NATIVE_VECTOR_WIDTH_HALF: simd // 2 if has_half else 0,
    }
    # MEMORY_CLOCK_RATE is left out: Linux does not expose DRAM speed to unprivileged readers
    # (only SMBIOS type 17 has it), and a made-up value would be worse than UNIMPLEMENTED.
    speed = _dram_mhz()
    if speed:
        info[DeviceInfo.MEMORY_CLOCK_RATE] = speed
    details: list[Detail] = [
        ("Architecture", platform.machine(), ""),
        ("L2 Cache Per Core", l2, "B"),
        ("SIMD Width", simd * 8, "bits"),
        ("Work-group Memory", "per-thread buffer; a work-group runs on one thread", ""),
    ]
    if gpu_limits():
        info[DeviceInfo.MAX_WORK_GROUP_SIZE] = GPU_GROUP_SIZE
        info[DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION] = GPU_GROUP_DIMS
        info[DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE] = GPU_GROUP_MEMORY
        details.append(("GPU Limits", f"on ({GPU_LIMITS_VARIABLE}): work-groups as large as a GPU's", ""))
    return info, details


def _dram_mhz() -> int:
    """Configured DRAM speed from SMBIOS type-17 records, when the kernel lets us read them."""
    entries = Path("/sys/firmware/dmi/entries")
    best = 0
    try:
        records = sorted(entries.glob("17-*"))
    except OSError:
        return 0
    for record in records:
        try:
            raw = (record / "raw").read_bytes()
        except OSError:
            continue
        if len(raw) >= 0x22:
            configured = int.from_bytes(raw[0x20:0x22], "little")
            speed = configured or int.from_bytes(raw[0x15:0x17], "little")
            if speed not in (0, 0xFFFF):
                best = max(best, speed)
    return best // 2  # SMBIOS gives transfers per second; DDR clocks at half that
