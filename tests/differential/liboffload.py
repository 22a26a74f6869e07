"""A small ctypes binding of LLVM 22's ``libLLVMOffload.so`` (the real liboffload).

Only what the differential suite needs: where the library is, LLVM 22's enum values and error
names (from ``OffloadAPI.h``), the C type of every info property, and the C signature of every
entry point. Nothing here calls ``olInit``; the fork server dlopens the library once and each
case's child process initialises it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

DEFAULT_PATH = Path("/usr/lib/llvm-22/lib/libLLVMOffload.so")
MISSING_REASON = "libLLVMOffload.so not found: apt-get install liboffload-22"


def find_library() -> str | None:
    """The library to test against: ``$OFFLOADRT_LIBOFFLOAD``, LLVM 22's default path, then the
    linker's search (``ctypes.util.find_library``); None when none exists."""
    override = os.environ.get("OFFLOADRT_LIBOFFLOAD")
    if override and Path(override).is_file():
        return override
    if DEFAULT_PATH.is_file():
        return str(DEFAULT_PATH)
    return ctypes.util.find_library("LLVMOffload")


# ---- OffloadAPI.h (LLVM 22.1): enums by name, in C order ---------------------------------------

# ol_errc_t: note there is no QUEUE_ERROR (offloadrt's addition), so from UNINITIALIZED on the
# numbers differ from offloadrt's ErrorCode; outcomes are compared by name.
ERRC = ("SUCCESS", "UNKNOWN", "HOST_IO", "INVALID_BINARY", "INVALID_NULL_POINTER", "INVALID_ARGUMENT",
        "NOT_FOUND", "OUT_OF_RESOURCES", "INVALID_SIZE", "INVALID_ENUMERATION", "HOST_TOOL_NOT_FOUND",
        "INVALID_VALUE", "UNIMPLEMENTED", "UNSUPPORTED", "ASSEMBLE_FAILURE", "COMPILE_FAILURE", "LINK_FAILURE",
        "BACKEND_FAILURE", "UNINITIALIZED", "INVALID_NULL_HANDLE", "INVALID_PLATFORM", "INVALID_DEVICE",
        "INVALID_QUEUE", "INVALID_EVENT", "SYMBOL_KIND")

# offloadrt's enum class name -> LLVM 22's enumerators (value = position), without _LAST.
ENUMS: dict[str, tuple[str, ...]] = {
    "PlatformInfo": ("NAME", "VENDOR_NAME", "VERSION", "BACKEND"),
    "PlatformBackend": ("UNKNOWN", "CUDA", "AMDGPU", "LEVEL_ZERO", "HOST"),
    "DeviceType": ("DEFAULT", "ALL", "GPU", "CPU", "HOST"),
    "DeviceInfo": ("TYPE", "PLATFORM", "NAME", "PRODUCT_NAME", "UID", "VENDOR", "DRIVER_VERSION",
                   "MAX_WORK_GROUP_SIZE", "MAX_WORK_GROUP_SIZE_PER_DIMENSION", "MAX_WORK_SIZE",
                   "MAX_WORK_SIZE_PER_DIMENSION", "VENDOR_ID", "NUM_COMPUTE_UNITS", "MAX_CLOCK_FREQUENCY",
                   "MEMORY_CLOCK_RATE", "ADDRESS_BITS", "MAX_MEM_ALLOC_SIZE", "GLOBAL_MEM_SIZE",
                   "WORK_GROUP_LOCAL_MEM_SIZE", "SINGLE_FP_CONFIG", "DOUBLE_FP_CONFIG", "HALF_FP_CONFIG",
                   "NATIVE_VECTOR_WIDTH_CHAR", "NATIVE_VECTOR_WIDTH_SHORT", "NATIVE_VECTOR_WIDTH_INT",
                   "NATIVE_VECTOR_WIDTH_LONG", "NATIVE_VECTOR_WIDTH_FLOAT", "NATIVE_VECTOR_WIDTH_DOUBLE",
                   "NATIVE_VECTOR_WIDTH_HALF"),
    "AllocType": ("HOST", "DEVICE", "MANAGED"),
    "MemInfo": ("DEVICE", "BASE", "SIZE", "TYPE"),
    "QueueInfo": ("DEVICE", "EMPTY"),
    "EventInfo": ("QUEUE", "IS_COMPLETE"),
    "SymbolKind": ("KERNEL", "GLOBAL_VARIABLE"),
    "SymbolInfo": ("KIND", "GLOBAL_VARIABLE_ADDRESS", "GLOBAL_VARIABLE_SIZE"),
}
FORCE_UINT32 = 0x7FFFFFFF  # every enum's _FORCE_UINT32 enumerator: never a valid value


def enum_value(family: str, name: str) -> int:
    return ENUMS[family].index(name)


# The C type of each info property, as the header's "[type]" comment gives it. Kinds: "string"
# (char[]), "u32", "u64" (uint64_t, size_t), "pointer" (void *), "bool", "dims" (ol_dimensions_t),
# "flags" (ol_device_fp_capability_flags_t), "enum:<family>", "handle:<what>".
INFO_TYPES: dict[str, dict[str, str]] = {
    "PlatformInfo": {"NAME": "string", "VENDOR_NAME": "string", "VERSION": "string",
                     "BACKEND": "enum:PlatformBackend"},
    "DeviceInfo": {
        "TYPE": "enum:DeviceType", "PLATFORM": "handle:platform", "NAME": "string", "PRODUCT_NAME": "string",
        "UID": "string", "VENDOR": "string", "DRIVER_VERSION": "string", "MAX_WORK_GROUP_SIZE": "u32",
        "MAX_WORK_GROUP_SIZE_PER_DIMENSION": "dims", "MAX_WORK_SIZE": "u32", "MAX_WORK_SIZE_PER_DIMENSION": "dims",
        "VENDOR_ID": "u32", "NUM_COMPUTE_UNITS": "u32", "MAX_CLOCK_FREQUENCY": "u32", "MEMORY_CLOCK_RATE": "u32",
        "ADDRESS_BITS": "u32", "MAX_MEM_ALLOC_SIZE": "u64", "GLOBAL_MEM_SIZE": "u64",
        "WORK_GROUP_LOCAL_MEM_SIZE": "u64", "SINGLE_FP_CONFIG": "flags", "DOUBLE_FP_CONFIG": "flags",
        "HALF_FP_CONFIG": "flags", **{f"NATIVE_VECTOR_WIDTH_{t}": "u32"
                                      for t in ("CHAR", "SHORT", "INT", "LONG", "FLOAT", "DOUBLE", "HALF")},
    },
    "MemInfo": {"DEVICE": "handle:device", "BASE": "pointer", "SIZE": "u64", "TYPE": "enum:AllocType"},
    "QueueInfo": {"DEVICE": "handle:device", "EMPTY": "bool"},
    "EventInfo": {"QUEUE": "handle:queue", "IS_COMPLETE": "bool"},
    "SymbolInfo": {"KIND": "enum:SymbolKind", "GLOBAL_VARIABLE_ADDRESS": "pointer", "GLOBAL_VARIABLE_SIZE": "u64"},
}


# ---- structs and signatures ---------------------------------------------------------------------

class ErrorStruct(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint32), ("details", ctypes.c_char_p)]


class Dimensions(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint32), ("y", ctypes.c_uint32), ("z", ctypes.c_uint32)]


class LaunchSizeArgs(ctypes.Structure):
    _fields_ = [("Dimensions", ctypes.c_size_t), ("NumGroups", Dimensions), ("GroupSize", Dimensions),
                ("DynSharedMemory", ctypes.c_size_t)]


class CodeLocation(ctypes.Structure):
    _fields_ = [("FunctionName", ctypes.c_char_p), ("SourceFile", ctypes.c_char_p),
                ("LineNumber", ctypes.c_uint32), ("ColumnNumber", ctypes.c_uint32)]


ITERATE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p)
HOST_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_P, _S, _U = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32
# Every entry point of LLVM 22's OffloadAPI.h (35; each also has <name>WithCodeLoc with a trailing
# ol_code_location_t *), with its C parameter types.
SIGNATURES: dict[str, list[type]] = {
    "olCalculateOptimalOccupancy": [_P, _P, _S, _P],
    "olCreateEvent": [_P, _P],
    "olCreateProgram": [_P, _P, _S, _P],
    "olCreateQueue": [_P, _P],
    "olDestroyEvent": [_P],
    "olDestroyProgram": [_P],
    "olDestroyQueue": [_P],
    "olGetDeviceInfo": [_P, _U, _S, _P],
    "olGetDeviceInfoSize": [_P, _U, _P],
    "olGetEventInfo": [_P, _U, _S, _P],
    "olGetEventInfoSize": [_P, _U, _P],
    "olGetMemInfo": [_P, _U, _S, _P],
    "olGetMemInfoSize": [_P, _U, _P],
    "olGetPlatformInfo": [_P, _U, _S, _P],
    "olGetPlatformInfoSize": [_P, _U, _P],
    "olGetQueueInfo": [_P, _U, _S, _P],
    "olGetQueueInfoSize": [_P, _U, _P],
    "olGetSymbol": [_P, ctypes.c_char_p, _U, _P],
    "olGetSymbolInfo": [_P, _U, _S, _P],
    "olGetSymbolInfoSize": [_P, _U, _P],
    "olInit": [],
    "olIsValidBinary": [_P, _P, _S, _P],
    "olIterateDevices": [_P, _P],
    "olLaunchHostFunction": [_P, _P, _P],
    "olLaunchKernel": [_P, _P, _P, _P, _S, _P],
    "olMemAlloc": [_P, _U, _S, _P],
    "olMemFill": [_P, _P, _S, _P, _S],
    "olMemFree": [_P],
    "olMemRegister": [_P, _P, _S, _U, _P],
    "olMemUnregister": [_P, _P],
    "olMemcpy": [_P, _P, _P, _P, _P, _S],
    "olShutDown": [],
    "olSyncEvent": [_P],
    "olSyncQueue": [_P],
    "olWaitEvents": [_P, _P, _S],
}


class Library:
    """The dlopened library with every entry point (and its WithCodeLoc variant) typed."""

    def __init__(self, path: str):
        self.path = path
        self.dll = ctypes.CDLL(path)
        result = ctypes.POINTER(ErrorStruct)
        for name, params in SIGNATURES.items():
            for symbol, extra in ((name, []), (f"{name}WithCodeLoc", [ctypes.c_void_p])):
                function = getattr(self.dll, symbol)
                function.restype = result
                function.argtypes = [*params, *extra]

    def call(self, name: str, *args: object) -> tuple[str, str]:
        """Call ``name``; (error name, details), ``("SUCCESS", "")`` for OL_SUCCESS."""
        result = getattr(self.dll, name)(*args)
        if not result:
            return "SUCCESS", ""
        code = result.contents.code
        details = result.contents.details
        name_of = ERRC[code] if code < len(ERRC) else f"errc({code})"
        return name_of, details.decode(errors="replace") if details else ""
