"""Null GPU driver libraries for benchmarks: do-nothing ``libcuda.so.1`` and ``libamdhip64.so``.

Each is a test double of a vendor's driver library, built from the C source beside this file with
``cc`` into a cache folder (never committed): every entry point the real bindings resolve and the
plugins call succeeds at once with plausible outputs, so a benchmark that loads one through the
*real* ``cuda.bindings`` or hip-python measures only the Python work around each driver call.

- ``libcuda.so.1``: ``cuda.bindings`` finds the driver with ``cuda.pathfinder``, which dlopens
  ``libcuda.so.1`` by name (so ``LD_LIBRARY_PATH`` picks this one), and resolves every entry point
  through ``cuGetProcAddress_v2``, which the null library answers from its table.
- ``libamdhip64.so``: hip-python looks for ``$ROCM_PATH/lib/libamdhip64.so`` and binds each function
  with ``dlsym`` at its first call. Its ``hipDeviceProp_t`` is laid out by the bindings, so the
  process fills one with :func:`set_hip_device_properties` before the first HIP call.

Both count what they were asked for (:class:`Counters`): host functions enqueued, events created
with and without timing, records of each kind of event, launches and copies, so that a benchmark
can say how much driver work each operation of a runtime makes. The null ``libcuda.so.1`` gives
every kernel the parameters of :data:`CUDA_PTX` (four 8-byte ones) through ``cuFuncGetParamInfo``
and refuses a launch whose parameter buffer is longer, as an H100 does; it also answers the
entry points ``cuda.core`` uses to make streams, load PTX, launch and record events.

Only ever load them in a child process (:func:`environment` gives its variables): a process that
loaded a null driver cannot reach a real GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: vendor -> (C source, the library's path inside its folder)
LIBRARIES = {"cuda": ("nullcuda.c", "libcuda.so.1"), "hip": ("nullhip.c", "lib/libamdhip64.so")}
HIP_ARCH = "gfx90a:sramecc+:xnack-"
#: what the null libraries count (nullcommon.h's null_counter_names, in order)
COUNTERS = ("host_functions", "events_timed", "events_untimed", "records_timed", "records_untimed", "launches",
            "copies")


class NullDriverError(RuntimeError):
    """No C compiler, or the null library did not build."""


def compiler() -> str | None:
    """The C compiler that builds the null libraries (``$CC``, ``cc`` or ``gcc``), if any."""
    wanted = os.environ.get("CC")
    for name in ([wanted] if wanted else []) + ["cc", "gcc"]:
        found = shutil.which(name)
        if found:
            return found
    return None


def build(vendor: str, cache: Path | None = None) -> Path:
    """Build (once per source version) the null library of ``vendor`` ("cuda" or "hip"); its folder.

    The folder is what :func:`environment` points the bindings at. Raises
    :class:`NullDriverError` without a compiler or when the build fails.
    """
    source_name, library = LIBRARIES[vendor]
    source = HERE / source_name
    common = HERE / "nullcommon.h"
    cc = compiler()
    if cc is None:
        raise NullDriverError("no C compiler (cc, gcc or $CC) to build the null driver libraries")
    digest = hashlib.sha256(source.read_bytes() + common.read_bytes() + cc.encode()).hexdigest()[:16]
    root = cache or Path(tempfile.gettempdir()) / f"offloadrt-nulldriver-{os.getuid()}"
    folder = root / f"{vendor}-{digest}"
    target = folder / library
    if target.exists():
        return folder
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    soname = ["-Wl,-soname,libcuda.so.1"] if vendor == "cuda" else []
    command = [cc, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", *soname, "-o", str(partial), str(source),
               "-lpthread"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NullDriverError(f"building the null {vendor} library failed: {result.stderr.strip()}")
    os.replace(partial, target)  # atomic: a concurrent build finds a whole library or none
    return folder


def library_path(vendor: str, folder: Path) -> Path:
    return folder / LIBRARIES[vendor][1]


def environment(vendor: str, folder: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process whose ``vendor`` bindings load the null library in ``folder``."""
    env = dict(os.environ if base is None else base)
    if vendor == "cuda":
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(folder), env.get("LD_LIBRARY_PATH")]))
    else:
        env["ROCM_PATH"] = str(folder)
        env.pop("ROCM_HOME", None)
    env["OFFLOADRT_NULL_DRIVER"] = vendor  # what the child checks before it measures anything
    return env


def _field_offset(props: Any, size: int, field: str, width: int) -> int:
    """Where the bindings keep ``field`` (a char or int array, which they cannot set) in ``props``."""
    address = props.as_c_void_p().value
    for offset in range(0, size - width + 1, 4 if width == 4 else 1):
        ctypes.memset(address, 0, size)
        ctypes.memmove(address + offset, (b"\x7b\x01\x00\x00" if width == 4 else b"Z"), width)
        value = getattr(props, field)
        if (width == 4 and int(list(value)[0]) == 0x17B) or (width == 1 and str(value) == "Z"):
            ctypes.memset(address, 0, size)
            return offset
    raise NullDriverError(f"cannot find hipDeviceProp_t.{field} in the bindings' layout")


def set_hip_device_properties(folder: Path) -> None:
    """Give the null HIP library the device properties it reports (a gfx90a with 104 CUs).

    Call in the child process before the first HIP call; the struct comes from hip-python, so its
    layout is the one the bindings read back.
    """
    from hip import hip  # noqa: PLC0415  # hip-python, only in the child

    props = hip.hipDeviceProp_t()
    size = int(props.c_sizeof())
    name_at = _field_offset(props, size, "name", 1)
    arch_at = _field_offset(props, size, "gcnArchName", 1)
    threads_at = _field_offset(props, size, "maxThreadsDim", 4)
    grid_at = _field_offset(props, size, "maxGridSize", 4)
    for field, value in (("maxThreadsPerBlock", 1024), ("multiProcessorCount", 104), ("clockRate", 1700000),
                         ("memoryClockRate", 1600000), ("sharedMemPerBlock", 65536), ("warpSize", 64),
                         ("maxThreadsPerMultiProcessor", 2048), ("l2CacheSize", 8 << 20), ("memoryBusWidth", 4096),
                         ("managedMemory", 1), ("major", 9), ("minor", 0)):
        setattr(props, field, value)
    address = props.as_c_void_p().value
    ctypes.memmove(address + name_at, b"Null AMD GPU\0", 13)
    ctypes.memmove(address + arch_at, HIP_ARCH.encode() + b"\0", len(HIP_ARCH) + 1)
    ctypes.memmove(address + threads_at, (ctypes.c_int * 3)(1024, 1024, 1024), 12)
    ctypes.memmove(address + grid_at, (ctypes.c_int * 3)(0x7FFFFFFF, 65536, 65536), 12)
    library = ctypes.CDLL(str(library_path("hip", folder)))
    library.null_set_device_properties(ctypes.c_void_p(address), ctypes.c_size_t(size))


def hip_code_object() -> bytes:
    """The smallest image the AMDGPU plugin takes for ``HIP_ARCH``: an ELF header for EM_AMDGPU,
    code object v5, gfx90a with xnack off and sramecc on (the null driver loads anything)."""
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5], header[6], header[7], header[8] = 2, 1, 1, 64, 3  # 64-bit, LE, HSA, ABI v5
    header[16:18] = (3).to_bytes(2, "little")  # ET_DYN
    header[18:20] = (224).to_bytes(2, "little")  # EM_AMDGPU
    flags = 0x03F | (2 << 8) | (3 << 10)  # gfx90a, xnack off, sramecc on
    header[48:52] = flags.to_bytes(4, "little")
    return bytes(header)


class Counters:
    """The counts of a null library loaded in this process, read through ``null_count`` (ctypes).

    Load it only where :func:`environment` pointed the bindings at the null library: for CUDA the
    library is found by its soname (the copy the bindings loaded), for HIP by its path under
    ``$ROCM_PATH``.
    """

    def __init__(self, vendor: str) -> None:
        name = "libcuda.so.1" if vendor == "cuda" else str(library_path("hip", Path(os.environ["ROCM_PATH"])))
        self._library = ctypes.CDLL(name)
        self._library.null_count.restype = ctypes.c_uint64
        self._library.null_count.argtypes = (ctypes.c_char_p,)
        self._library.null_reset_counts.restype = None

    def reset(self) -> None:
        """Set every count to zero."""
        self._library.null_reset_counts()

    def read(self) -> dict[str, int]:
        """Every count since the last reset, by the names of :data:`COUNTERS`."""
        return {name: int(self._library.null_count(name.encode())) for name in COUNTERS}


#: The benchmarks' CUDA kernel: it does nothing with its four 8-byte parameters (32 bytes, the size
#: of the blob they launch it with; the null libcuda gives every kernel this layout).
CUDA_PTX = (b".version 8.0\n.target sm_90\n.address_size 64\n"
            b".visible .entry empty(.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 d)\n{\n\tret;\n}\n")
