"""Enums, handle classes and the "library missing" error the stand-in driver hands out.

TEST DOUBLE, not NVIDIA code. When ``cuda-bindings`` is installed, the stand-in uses its real
enum and handle classes, so values compare and print exactly as on a GPU machine. Without it,
small look-alikes are defined here: enums carry only the members offloadrt and the stand-in use
(their numbers are the driver ABI's), handles support ``int(h)``, ``getPtr()``, equality and
hashing, and ``CUuuid`` has ``.bytes``.
"""

from __future__ import annotations

import ctypes
import importlib
from enum import IntEnum, IntFlag
from typing import Any

try:  # the real module imports without a GPU driver: libcuda is only loaded on the first call
    real: Any = importlib.import_module("cuda.bindings.driver")
    if getattr(real, "__standin__", False):  # imported while the stand-in is installed
        real = None
except ImportError:
    real = None

try:
    from cuda.pathfinder import DynamicLibNotFoundError  # type: ignore[import-untyped]
except ImportError:
    class DynamicLibNotFoundError(RuntimeError):  # type: ignore[no-redef]
        """Look-alike of cuda.pathfinder's error for a driver library that cannot be found."""


class _Handle:
    """An opaque driver handle: an integer with the bindings' ``int(h)``/``getPtr()`` surface."""

    _label = "handle"

    def __init__(self, init_value: Any = 0) -> None:
        self._value = ctypes.c_uint64(0 if init_value is None else int(init_value))

    def __int__(self) -> int:
        return int(self._value.value)

    __index__ = __int__

    def getPtr(self) -> int:
        return ctypes.addressof(self._value)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and int(other) == int(self)  # type: ignore[call-overload]

    def __hash__(self) -> int:
        return hash((type(self).__name__, int(self)))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {int(self):#x}>"


class _CUuuid:
    """Look-alike of ``CUuuid``: 16 bytes, read through ``.bytes``."""

    def __init__(self) -> None:
        self._raw = (ctypes.c_char * 16)()

    @property
    def bytes(self) -> bytes:
        return bytes(self._raw)

    def getPtr(self) -> int:
        return ctypes.addressof(self._raw)


def _handle(name: str) -> type:
    return type(name, (_Handle,), {"__doc__": f"Look-alike of the bindings' {name} handle."})


class _CUresult(IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_DEINITIALIZED = 4
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
    CUDA_ERROR_ECC_UNCORRECTABLE = 214
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217
    CUDA_ERROR_INVALID_PTX = 218
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
    CUDA_ERROR_JIT_COMPILATION_DISABLED = 223
    CUDA_ERROR_CONTAINED = 226
    CUDA_ERROR_INVALID_SOURCE = 300
    CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = 303
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
    CUDA_ERROR_LAUNCH_TIMEOUT = 702
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709
    CUDA_ERROR_ASSERT = 710
    CUDA_ERROR_TOO_MANY_PEERS = 711
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713
    CUDA_ERROR_HARDWARE_STACK_ERROR = 714
    CUDA_ERROR_ILLEGAL_INSTRUCTION = 715
    CUDA_ERROR_MISALIGNED_ADDRESS = 716
    CUDA_ERROR_INVALID_ADDRESS_SPACE = 717
    CUDA_ERROR_INVALID_PC = 718
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_TENSOR_MEMORY_LEAK = 721
    CUDA_ERROR_NOT_PERMITTED = 800
    CUDA_ERROR_NOT_SUPPORTED = 801
    CUDA_ERROR_EXTERNAL_DEVICE = 911
    CUDA_ERROR_UNKNOWN = 999


_ATTRIBUTES = """MAX_THREADS_PER_BLOCK 1 MAX_BLOCK_DIM_X 2 MAX_BLOCK_DIM_Y 3 MAX_BLOCK_DIM_Z 4 MAX_GRID_DIM_X 5
MAX_GRID_DIM_Y 6 MAX_GRID_DIM_Z 7 MAX_SHARED_MEMORY_PER_BLOCK 8 TOTAL_CONSTANT_MEMORY 9 WARP_SIZE 10 MAX_PITCH 11
MAX_REGISTERS_PER_BLOCK 12 CLOCK_RATE 13 GPU_OVERLAP 15 MULTIPROCESSOR_COUNT 16 KERNEL_EXEC_TIMEOUT 17 INTEGRATED 18
CAN_MAP_HOST_MEMORY 19 COMPUTE_MODE 20 CONCURRENT_KERNELS 31 ECC_ENABLED 32 PCI_BUS_ID 33 PCI_DEVICE_ID 34
TCC_DRIVER 35 MEMORY_CLOCK_RATE 36 GLOBAL_MEMORY_BUS_WIDTH 37 L2_CACHE_SIZE 38 MAX_THREADS_PER_MULTIPROCESSOR 39
ASYNC_ENGINE_COUNT 40 UNIFIED_ADDRESSING 41 PCI_DOMAIN_ID 50 COMPUTE_CAPABILITY_MAJOR 75 COMPUTE_CAPABILITY_MINOR 76
STREAM_PRIORITIES_SUPPORTED 78 MAX_SHARED_MEMORY_PER_MULTIPROCESSOR 81 MAX_REGISTERS_PER_MULTIPROCESSOR 82
MANAGED_MEMORY 83 MULTI_GPU_BOARD 84 PAGEABLE_MEMORY_ACCESS 88 CONCURRENT_MANAGED_ACCESS 89
CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM 91 COOPERATIVE_LAUNCH 95 MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
HOST_REGISTER_SUPPORTED 99 MAX_BLOCKS_PER_MULTIPROCESSOR 106
MEMORY_POOLS_SUPPORTED 115""".split()
_CUdevice_attribute = IntEnum(  # type: ignore[misc]
    "CUdevice_attribute", [(f"CU_DEVICE_ATTRIBUTE_{n}", int(v)) for n, v in zip(_ATTRIBUTES[::2], _ATTRIBUTES[1::2])])

_JIT = ("MAX_REGISTERS THREADS_PER_BLOCK WALL_TIME INFO_LOG_BUFFER INFO_LOG_BUFFER_SIZE_BYTES ERROR_LOG_BUFFER "
        "ERROR_LOG_BUFFER_SIZE_BYTES OPTIMIZATION_LEVEL TARGET_FROM_CUCONTEXT TARGET FALLBACK_STRATEGY "
        "GENERATE_DEBUG_INFO LOG_VERBOSE GENERATE_LINE_INFO CACHE_MODE").split()
_CUjit_option = IntEnum("CUjit_option", [(f"CU_JIT_{n}", i) for i, n in enumerate(_JIT)])  # type: ignore[misc]

_FUNC = ("MAX_THREADS_PER_BLOCK SHARED_SIZE_BYTES CONST_SIZE_BYTES LOCAL_SIZE_BYTES NUM_REGS PTX_VERSION "
         "BINARY_VERSION CACHE_MODE_CA MAX_DYNAMIC_SHARED_SIZE_BYTES PREFERRED_SHARED_MEMORY_CARVEOUT").split()
_CUfunction_attribute = IntEnum(  # type: ignore[misc]
    "CUfunction_attribute", [(f"CU_FUNC_ATTRIBUTE_{n}", i) for i, n in enumerate(_FUNC)])


class _CUstream_flags(IntFlag):  # noqa: N801  # the bindings' name
    CU_STREAM_DEFAULT = 0
    CU_STREAM_NON_BLOCKING = 1


class _CUevent_flags(IntFlag):  # noqa: N801  # the bindings' name
    CU_EVENT_DEFAULT = 0
    CU_EVENT_BLOCKING_SYNC = 1
    CU_EVENT_DISABLE_TIMING = 2
    CU_EVENT_INTERPROCESS = 4


class _CUctx_flags(IntFlag):  # noqa: N801  # the bindings' name
    CU_CTX_SCHED_AUTO = 0
    CU_CTX_SCHED_SPIN = 1
    CU_CTX_SCHED_YIELD = 2
    CU_CTX_SCHED_BLOCKING_SYNC = 4
    CU_CTX_MAP_HOST = 8
    CU_CTX_LMEM_RESIZE_TO_MAX = 16


class _CUmemAttach_flags(IntFlag):  # noqa: N801  # the bindings' name
    CU_MEM_ATTACH_GLOBAL = 1
    CU_MEM_ATTACH_HOST = 2
    CU_MEM_ATTACH_SINGLE = 4


class _CUpointer_attribute(IntEnum):  # noqa: N801  # the bindings' name
    CU_POINTER_ATTRIBUTE_CONTEXT = 1
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


class _CUmemorytype(IntEnum):  # noqa: N801  # the bindings' name
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2
    CU_MEMORYTYPE_ARRAY = 3
    CU_MEMORYTYPE_UNIFIED = 4


_FALLBACKS: dict[str, Any] = {
    "CUresult": _CUresult, "CUdevice_attribute": _CUdevice_attribute, "CUjit_option": _CUjit_option,
    "CUfunction_attribute": _CUfunction_attribute, "CUstream_flags": _CUstream_flags,
    "CUevent_flags": _CUevent_flags, "CUctx_flags": _CUctx_flags, "CUmemAttach_flags": _CUmemAttach_flags,
    "CUpointer_attribute": _CUpointer_attribute, "CUmemorytype": _CUmemorytype, "CUuuid": _CUuuid,
}
for _name in ("CUdevice", "CUcontext", "CUstream", "CUevent", "CUmodule", "CUfunction", "CUdeviceptr", "CUhostFn"):
    _FALLBACKS[_name] = _handle(_name)
for _name, _cls in _FALLBACKS.items():
    _cls.__name__ = _cls.__qualname__ = _name  # print as the bindings' classes do


def pick(name: str) -> Any:
    """The real bindings' class ``name`` when importable, else the look-alike."""
    found = getattr(real, name, None) if real is not None else None
    return found if found is not None else _FALLBACKS[name]


CUresult = pick("CUresult")
CUdevice_attribute = pick("CUdevice_attribute")
CUjit_option = pick("CUjit_option")
CUfunction_attribute = pick("CUfunction_attribute")
CUstream_flags = pick("CUstream_flags")
CUevent_flags = pick("CUevent_flags")
CUctx_flags = pick("CUctx_flags")
CUmemAttach_flags = pick("CUmemAttach_flags")
CUpointer_attribute = pick("CUpointer_attribute")
CUmemorytype = pick("CUmemorytype")
CUdevice = pick("CUdevice")
CUcontext = pick("CUcontext")
CUstream = pick("CUstream")
CUevent = pick("CUevent")
CUmodule = pick("CUmodule")
CUfunction = pick("CUfunction")
CUdeviceptr = pick("CUdeviceptr")
CUhostFn = pick("CUhostFn")
CUuuid = pick("CUuuid")

CU_LAUNCH_PARAM_END = 0
CU_LAUNCH_PARAM_BUFFER_POINTER = 1
CU_LAUNCH_PARAM_BUFFER_SIZE = 2


def make_uuid(raw: bytes) -> Any:
    """A ``CUuuid`` holding ``raw`` (16 bytes), written into the object's own storage."""
    uuid = CUuuid()
    ctypes.memmove(int(uuid.getPtr()), raw[:16].ljust(16, b"\0"), 16)
    return uuid


def result(code: int) -> Any:
    """``code`` as a ``CUresult`` member (an unknown number stays a plain int)."""
    try:
        return CUresult(int(code))
    except ValueError:
        return int(code)
