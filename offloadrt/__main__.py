"""offloadrt's command line: ``offloadrt info [--json]`` and ``offloadrt cache [list|clear]`` (also
``python -m offloadrt ...``).

``cache`` lists the compile cache's entries (size, language, target, kernels) or empties it.
``info`` shows what offloadrt finds on this machine, as LLVM's ``llvm-offload-device-info`` does:
offloadrt's version with the LLVM release whose API it implements, the liboffload API's own version
number (``OL_VERSION``, 0.0.1 in LLVM 22.1, under LLVM's label "Liboffload Version"), the number of
devices, each device's platform and device info (the same labels, in the same order), the platforms
that did not start with the reason, and with ``--json`` the same data as one JSON object described
by ``offloadrt/info.schema.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from enum import IntEnum
from typing import Any

from . import __version__, unavailable_platforms
from .api import olGetDeviceInfo, olGetPlatformInfo, olInit, olIterateDevices, olShutDown
from .api.handles import Device
from .errors import OffloadError
from .types import DeviceInfo, Dimensions, FpCapabilityFlag, PlatformInfo

# The liboffload API's own version number, OL_VERSION_MAJOR.MINOR.PATCH of its headers: LLVM 22.1 still
# says 0.0.1, and llvm-offload-device-info-22 prints it as "Liboffload Version"; --json keeps that field
# as is, the text names what it is.
API_VERSION = "0.0.1"
LLVM_API = "LLVM 22.1's liboffload API"
VERSION_LINE = f"offloadrt {__version__} ({LLVM_API}, OL_VERSION {API_VERSION})"

PLATFORM_LINES = [
    ("Platform Name", PlatformInfo.NAME),
    ("Platform Vendor Name", PlatformInfo.VENDOR_NAME),
    ("Platform Version", PlatformInfo.VERSION),
    ("Platform Backend", PlatformInfo.BACKEND),
]
DEVICE_LINES = [
    ("Name", DeviceInfo.NAME, ""),
    ("Product Name", DeviceInfo.PRODUCT_NAME, ""),
    ("UID", DeviceInfo.UID, ""),
    ("Type", DeviceInfo.TYPE, ""),
    ("Vendor", DeviceInfo.VENDOR, ""),
    ("Driver Version", DeviceInfo.DRIVER_VERSION, ""),
    ("Max Work Group Size", DeviceInfo.MAX_WORK_GROUP_SIZE, ""),
    ("Max Work Group Size Per Dimension", DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION, ""),
    ("Max Work Size", DeviceInfo.MAX_WORK_SIZE, ""),
    ("Max Work Size Per Dimension", DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION, ""),
    ("Vendor ID", DeviceInfo.VENDOR_ID, ""),
    ("Num Compute Units", DeviceInfo.NUM_COMPUTE_UNITS, ""),
    ("Max Clock Frequency", DeviceInfo.MAX_CLOCK_FREQUENCY, "MHz"),
    ("Memory Clock Rate", DeviceInfo.MEMORY_CLOCK_RATE, "MHz"),
    ("Address Bits", DeviceInfo.ADDRESS_BITS, ""),
    ("Max Mem Allocation Size", DeviceInfo.MAX_MEM_ALLOC_SIZE, "B"),
    ("Global Mem Size", DeviceInfo.GLOBAL_MEM_SIZE, "B"),
    ("Work Group Shared Mem Size", DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE, "B"),
    ("Single Precision Floating Point Capability", DeviceInfo.SINGLE_FP_CONFIG, ""),
    ("Double Precision Floating Point Capability", DeviceInfo.DOUBLE_FP_CONFIG, ""),
    ("Half Precision Floating Point Capability", DeviceInfo.HALF_FP_CONFIG, ""),
    ("Native Vector Width For Char", DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR, ""),
    ("Native Vector Width For Short", DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT, ""),
    ("Native Vector Width For Int", DeviceInfo.NATIVE_VECTOR_WIDTH_INT, ""),
    ("Native Vector Width For Long", DeviceInfo.NATIVE_VECTOR_WIDTH_LONG, ""),
    ("Native Vector Width For Float", DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT, ""),
    ("Native Vector Width For Double", DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE, ""),
    ("Native Vector Width For Half", DeviceInfo.NATIVE_VECTOR_WIDTH_HALF, ""),
]


def _flags(value: FpCapabilityFlag) -> list[str]:
    return [flag.name for flag in FpCapabilityFlag if flag in value and flag.name]


def _as_json(value: Any) -> Any:
    if isinstance(value, Dimensions):
        return {"x": value.x, "y": value.y, "z": value.z}
    if isinstance(value, FpCapabilityFlag):
        return _flags(value)
    if isinstance(value, IntEnum):
        return value.name
    return value


def _as_text(value: Any, unit: str) -> str:
    if isinstance(value, Dimensions):
        return f"{{x: {value.x}, y: {value.y}, z: {value.z}}}"
    if isinstance(value, FpCapabilityFlag):
        return f"{int(value)} {{ {' '.join(_flags(value))} }}" if value else "0 { }"
    if isinstance(value, IntEnum):
        return value.name
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value} {unit}".rstrip()


def collect() -> dict[str, Any]:
    """Everything ``info`` shows, as plain data (the runtime must be initialised).

    Device values are ``(value, unit)`` pairs; a value the backend cannot tell is the
    ``OffloadError`` that says why.
    """
    devices: list[Device] = []
    olIterateDevices(lambda device, _: devices.append(device))
    report: dict[str, Any] = {"offloadrt Version": __version__, "Liboffload Version": API_VERSION,
                              "Num Devices": len(devices), "Devices": []}
    for index, device in enumerate(devices):
        entry: dict[str, Any] = {"Device ID": index}
        platform = olGetDeviceInfo(device, DeviceInfo.PLATFORM)
        for label, pprop in PLATFORM_LINES:
            entry[label] = olGetPlatformInfo(platform, pprop)
        for label, dprop, unit in DEVICE_LINES:
            try:
                entry[label] = (olGetDeviceInfo(device, dprop), unit)
            except OffloadError as exc:
                entry[label] = (exc, unit)
        gdev = device._gdev
        entry["Details"] = list(gdev.details) if gdev is not None else []
        report["Devices"].append(entry)
    report["Unavailable Platforms"] = {p.name: p.reason for p in unavailable_platforms()}
    return report


def print_text(report: dict[str, Any]) -> None:
    print(f"offloadrt Version: {report['offloadrt Version']} (implements {LLVM_API})")
    print(f"Liboffload Version: {report['Liboffload Version']} (OL_VERSION of the ol* API headers, as LLVM 22.1 "
          f"defines it; not an LLVM version)")
    print(f"Num Devices: {report['Num Devices']}")
    for entry in report["Devices"]:
        name = entry["Product Name"][0]
        print(f"\n[{name if not isinstance(name, OffloadError) else 'device ' + str(entry['Device ID'])}]")
        for label, _ in PLATFORM_LINES:
            print(f"    {label}: {_as_text(entry[label], '')}")
        for label, _, _ in DEVICE_LINES:
            value, unit = entry[label]
            shown = f"(not available: {value.details})" if isinstance(value, OffloadError) else _as_text(value, unit)
            print(f"    {label}: {shown}")
        for label, value, unit in entry["Details"]:
            print(f"    {label}: {_as_text(value, unit)}")
    unavailable = report["Unavailable Platforms"]
    if unavailable:
        print("\nPlatforms without devices:")
        for name, reason in unavailable.items():
            print(f"    {name}: {reason}")


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    """The report as JSON data: plain numbers (their units in ``Units``), and for each device the
    values it cannot tell as ``null`` with the reason under ``Unavailable``."""
    out = {key: value for key, value in report.items() if key != "Devices"}
    units: dict[str, str] = {}
    devices = []
    for entry in report["Devices"]:
        item: dict[str, Any] = {}
        missing: dict[str, str] = {}
        for key, value in entry.items():
            if key == "Details":
                details = {}
                for label, detail, unit in value:
                    details[label] = _as_json(detail)
                    if unit:
                        units[f"Details.{label}"] = unit
                item[key] = details
            elif isinstance(value, tuple):
                shown, unit = value
                if unit:
                    units[key] = unit
                if isinstance(shown, OffloadError):
                    item[key] = None
                    missing[key] = shown.details
                else:
                    item[key] = _as_json(shown)
            else:
                item[key] = _as_json(value)
        item["Unavailable"] = missing
        devices.append(item)
    out["Devices"] = devices
    out["Units"] = dict(sorted(units.items()))
    return out


def _size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    return f"{nbytes / 1024:.1f} KiB" if nbytes < 1024 * 1024 else f"{nbytes / (1024 * 1024):.1f} MiB"


def cache_command(action: str) -> int:
    """``cache list`` / ``cache clear``."""
    from .compile import _cache

    try:
        where = _cache.folder()
        if action == "clear":
            removed, freed = _cache.clear()
            print(f"Removed {removed} entries ({_size(freed)}) from {where}")
            return 0
        found = _cache.entries()
    except OffloadError as exc:
        print(f"[offloadrt error {exc.code.name}]: {exc.details}", file=sys.stderr)
        return 1
    total = sum(entry.size for entry in found)
    print(f"Cache folder: {where}")
    print(f"Entries: {len(found)} ({_size(total)})")
    if found:
        print(f"\n{'Entry':<16}  {'Size':>10}  {'Lang':<7}  {'Target':<30}  Kernels")
        for entry in found:
            kernels = ", ".join(entry.kernels) if entry.lang != "?" else "(damaged: recompiled on next use)"
            print(f"{entry.name[:16]:<16}  {_size(entry.size):>10}  {entry.lang:<7}  {entry.target:<30}  {kernels}")
    return 0


def _program_name() -> str:
    """``offloadrt`` for the console script, ``python -m offloadrt`` for the module."""
    return "python -m offloadrt" if os.path.basename(sys.argv[0] or "") == "__main__.py" else "offloadrt"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=_program_name(),
        description="offloadrt, a pure-Python implementation of LLVM's Offload API (ol*): show what it finds, "
                    "and show or empty its cache of compiled kernels.",
        epilog="The same command is installed as `offloadrt` and runs as `python -m offloadrt`.")
    parser.add_argument("--version", action="version", version=VERSION_LINE)
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    info = commands.add_parser(
        "info", help="show the platforms and devices offloadrt finds",
        description="Show offloadrt's version, every device with its platform and device info, and the "
                    "platforms that did not start with the reason.")
    info.add_argument("--json", action="store_true",
                      help="print the same data as one JSON object (see offloadrt/info.schema.json)")
    cache = commands.add_parser(
        "cache", help="show or empty the cache of kernels compiled from source",
        description="Show the cache of kernels compiled from source (Device.compile): its folder, and each "
                    "entry's size, language, target and kernels; or remove every entry. The folder is "
                    "$OFFLOADRT_CACHE_DIR, else $XDG_CACHE_HOME/offloadrt, else ~/.cache/offloadrt.")
    cache.add_argument("action", nargs="?", choices=("list", "clear"), default="list",
                       help="list (the default) or clear")
    args = parser.parse_args(argv)
    if args.command == "cache":
        return cache_command(args.action)
    try:
        olInit()
    except OffloadError as exc:
        print(f"[offloadrt error {exc.code.name}]: {exc.details}", file=sys.stderr)
        return 1
    try:
        report = collect()
    finally:
        olShutDown()
    try:
        if args.json:
            json.dump(to_json(report), sys.stdout, indent=2)
            print()
        else:
            print_text(report)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
