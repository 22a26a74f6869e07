"""The enums and structs of the ``ol*`` API, and the C type behind each info query.

Enum classes are named after their C type and their members after the enumerator without
its prefix, in C order, so ``int(member)`` is the value liboffload's header gives it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from typing import Any

from .errors import ErrorCode, OffloadError


def _integer(owner: str, name: str, value: Any) -> int:
    """``value`` as an ``int``; anything that is not an integer is ``INVALID_ARGUMENT`` at once."""
    try:
        return operator.index(value)
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{owner}.{name} must be an integer, got {type(value).__name__} {value!r}") from None


class PlatformInfo(IntEnum):
    """What ``olGetPlatformInfo`` can tell about a platform: its ``NAME`` (``"host"``, ``"cuda"``,
    ``"amdgpu"``), ``VENDOR_NAME``, ``VERSION`` (the driver or runtime version) and ``BACKEND``."""

    NAME = 0
    VENDOR_NAME = 1
    VERSION = 2
    BACKEND = 3


class PlatformBackend(IntEnum):
    """Which backend a platform is, with LLVM 22's numbers; ``olInit(platforms=[...])`` takes these.

    offloadrt has plugins for ``CUDA``, ``AMDGPU`` and ``HOST`` (the CPU); ``LEVEL_ZERO`` is in
    the C API but has no plugin here.
    """

    UNKNOWN = 0
    CUDA = 1
    AMDGPU = 2
    LEVEL_ZERO = 3  # in LLVM 22's header; offloadrt has no Level Zero plugin
    HOST = 4


class DeviceType(IntEnum):
    """A device's kind (``olGetDeviceInfo(device, DeviceInfo.TYPE)``): ``GPU`` for CUDA and AMD GPUs,
    ``HOST`` for the host device, which runs kernels on the CPU and also names host memory in
    ``olMemcpy``. ``DEFAULT``, ``ALL`` and ``CPU`` exist in the C API; no offloadrt device has them."""

    DEFAULT = 0
    ALL = 1
    GPU = 2
    CPU = 3
    HOST = 4


class DeviceInfo(IntEnum):
    """The properties ``olGetDeviceInfo`` reports. A backend that cannot tell one raises
    ``UNIMPLEMENTED`` (the host device's ``MEMORY_CLOCK_RATE`` without SMBIOS memory records)."""

    TYPE = 0
    PLATFORM = 1
    NAME = 2
    PRODUCT_NAME = 3
    UID = 4
    VENDOR = 5
    DRIVER_VERSION = 6
    MAX_WORK_GROUP_SIZE = 7
    MAX_WORK_GROUP_SIZE_PER_DIMENSION = 8
    MAX_WORK_SIZE = 9
    MAX_WORK_SIZE_PER_DIMENSION = 10
    VENDOR_ID = 11
    NUM_COMPUTE_UNITS = 12
    MAX_CLOCK_FREQUENCY = 13
    MEMORY_CLOCK_RATE = 14
    ADDRESS_BITS = 15
    MAX_MEM_ALLOC_SIZE = 16
    GLOBAL_MEM_SIZE = 17
    WORK_GROUP_LOCAL_MEM_SIZE = 18
    SINGLE_FP_CONFIG = 19
    DOUBLE_FP_CONFIG = 20
    HALF_FP_CONFIG = 21
    NATIVE_VECTOR_WIDTH_CHAR = 22
    NATIVE_VECTOR_WIDTH_SHORT = 23
    NATIVE_VECTOR_WIDTH_INT = 24
    NATIVE_VECTOR_WIDTH_LONG = 25
    NATIVE_VECTOR_WIDTH_FLOAT = 26
    NATIVE_VECTOR_WIDTH_DOUBLE = 27
    NATIVE_VECTOR_WIDTH_HALF = 28


class FpCapabilityFlag(IntFlag):
    """Floating-point capabilities, combined as flags in ``DeviceInfo.*_FP_CONFIG``."""

    CORRECTLY_ROUNDED_DIVIDE_SQRT = 1 << 0
    ROUND_TO_NEAREST = 1 << 1
    ROUND_TO_ZERO = 1 << 2
    ROUND_TO_INF = 1 << 3
    INF_NAN = 1 << 4
    DENORM = 1 << 5
    FMA = 1 << 6
    SOFT_FLOAT = 1 << 7


class AllocType(IntEnum):
    """The kind of memory ``olMemAlloc`` returns.

    - ``DEVICE``: memory of the device, for kernels' data. On a GPU the host cannot touch it
      (copy with ``olMemcpy``).
    - ``HOST``: page-locked host memory the device can reach, for fast copies and staging.
    - ``MANAGED``: memory both sides can use, migrated by the driver.

    On the host device all three are ordinary host memory that Python can read and write
    directly; use ``DEVICE`` for data that kernels work on, so the same code runs on a GPU.
    """

    HOST = 0
    DEVICE = 1
    MANAGED = 2


class MemInfo(IntEnum):
    """What ``olGetMemInfo`` tells about the allocation an address lies in: its ``DEVICE``,
    ``BASE`` address, ``SIZE`` in bytes and ``TYPE`` (an :class:`AllocType`)."""

    DEVICE = 0
    BASE = 1
    SIZE = 2
    TYPE = 3


class QueueInfo(IntEnum):
    """What ``olGetQueueInfo`` tells: the queue's ``DEVICE``, and whether it is ``EMPTY`` (no work pending)."""

    DEVICE = 0
    EMPTY = 1


class EventInfo(IntEnum):
    """What ``olGetEventInfo`` tells: the ``QUEUE`` the event was created on, and whether it
    ``IS_COMPLETE``."""

    QUEUE = 0
    IS_COMPLETE = 1


class EventFlags(IntFlag):
    """How ``olCreateEvent`` makes an event (``ol_event_flags_t`` of LLVM's main branch, after LLVM 22).

    - ``NONE``: a plain event, for ``olSyncEvent``, ``olWaitEvents`` and ``olGetEventInfo``. It takes
      no timestamp, which is what makes it cheap on a GPU (CUDA: 1.8 us against 7.2 us for a timed
      event's create, record, sync and destroy on an H100).
    - ``ENABLE_PROFILING``: the event also takes a timestamp, for ``olGetEventElapsedTime``, which
      refuses events made without it.

    Upstream names these ``OL_EVENT_FLAGS_NONE`` and ``OL_EVENT_FLAGS_ENABLE_PROFILING``; their numeric
    values (0 and 1 here) were not read from an upstream header.
    """

    NONE = 0
    ENABLE_PROFILING = 1


class SymbolKind(IntEnum):
    """What ``olGetSymbol`` looks for in a program: a ``KERNEL`` or a ``GLOBAL_VARIABLE``."""

    KERNEL = 0
    GLOBAL_VARIABLE = 1


class SymbolInfo(IntEnum):
    """What ``olGetSymbolInfo`` tells: the symbol's ``KIND``, a global variable's address and
    size, and (offloadrt's addition) its ``NAME``."""

    KIND = 0
    GLOBAL_VARIABLE_ADDRESS = 1
    GLOBAL_VARIABLE_SIZE = 2
    NAME = 3


#: How many times a field of any Dimensions or KernelLaunchSizeArgs was set: a launch path that
#: remembers what it checked of a launch-size object, by identity, knows the object is unchanged
#: while this count is (read the count before the fields).
LAUNCH_SIZE_WRITES = [0]


@dataclass
class Dimensions:
    """``ol_dimensions_t``: three extents, each an integer in 0 .. 2**32-1 (checked when set:
    anything else raises ``INVALID_ARGUMENT`` at once). ``olLaunchKernel`` then requires each
    extent to be at least 1 and within the device's limits (``INVALID_SIZE``)."""

    x: int = 1
    y: int = 1
    z: int = 1

    def __setattr__(self, name: str, value: Any) -> None:
        number = _integer("Dimensions", name, value)
        if not 0 <= number <= 0xFFFFFFFF:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"Dimensions.{name} must be in 0 .. 2**32-1 (a C uint32_t), got {number}")
        object.__setattr__(self, name, number)
        LAUNCH_SIZE_WRITES[0] += 1  # after the write: a reader that counted before it sees a change

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        LAUNCH_SIZE_WRITES[0] += 1


@dataclass
class KernelLaunchSizeArgs:
    """``ol_kernel_launch_size_args_t``: how many work-groups of which size, and dynamic shared memory.

    ``dimensions`` (1, 2 or 3) says how many of the extents are used; ``num_groups`` and
    ``group_size`` are :class:`Dimensions`; ``dyn_shared_memory`` is the bytes of work-group
    memory each group gets. Values are checked to be integers when set.
    """

    dimensions: int = 1
    num_groups: Dimensions = field(default_factory=Dimensions)
    group_size: Dimensions = field(default_factory=Dimensions)
    dyn_shared_memory: int = 0

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("dimensions", "dyn_shared_memory"):
            value = _integer("KernelLaunchSizeArgs", name, value)
        elif not isinstance(value, Dimensions):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"KernelLaunchSizeArgs.{name} must be a Dimensions, got {type(value).__name__}")
        object.__setattr__(self, name, value)
        LAUNCH_SIZE_WRITES[0] += 1  # after the write (see Dimensions.__setattr__)

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        LAUNCH_SIZE_WRITES[0] += 1


#: an extra line of ``offloadrt info`` a device reports beyond DeviceInfo: (label, value, unit); the value is
#: an int, bool, str or Dimensions, the unit ("B", "bits", "MHz") or "" for none
Detail = tuple[str, Any, str]


@dataclass(frozen=True)
class UnavailablePlatform:
    """A platform that did not start in the running runtime (``offloadrt.unavailable_platforms()``).

    ``reason`` says why: the vendor package or driver library is missing, its initialisation
    failed, or it found no device. It is what ``python -m offloadrt info`` prints.
    """

    name: str
    backend: PlatformBackend
    reason: str


@dataclass(frozen=True)
class CodeLocation:
    """``ol_code_location_t``: where in the caller's source an ``ol*WithCodeLoc`` call was made."""

    function_name: str = ""
    source_file: str = ""
    line_number: int = 0
    column_number: int = 0

    def __str__(self) -> str:
        place = f"{self.source_file}:{self.line_number}:{self.column_number}"
        return f"{place} ({self.function_name})" if self.function_name else place


class ValueKind(IntEnum):
    """The C type of an info value; it fixes the size ``olGetXInfoSize`` reports."""

    STRING = 0  # char[]: strlen + 1
    HANDLE = 1  # any handle or pointer: 8
    BOOL = 2  # bool: 1
    ENUM = 3  # any enum or flags: 4
    UINT32 = 4
    UINT64 = 5
    DIMENSIONS = 6  # ol_dimensions_t: 12


FIXED_SIZES = {
    ValueKind.HANDLE: 8,
    ValueKind.BOOL: 1,
    ValueKind.ENUM: 4,
    ValueKind.UINT32: 4,
    ValueKind.UINT64: 8,
    ValueKind.DIMENSIONS: 12,
}

PLATFORM_INFO_KINDS = {
    PlatformInfo.NAME: ValueKind.STRING,
    PlatformInfo.VENDOR_NAME: ValueKind.STRING,
    PlatformInfo.VERSION: ValueKind.STRING,
    PlatformInfo.BACKEND: ValueKind.ENUM,
}

_U32 = ValueKind.UINT32
DEVICE_INFO_KINDS = {
    DeviceInfo.TYPE: ValueKind.ENUM,
    DeviceInfo.PLATFORM: ValueKind.HANDLE,
    DeviceInfo.NAME: ValueKind.STRING,
    DeviceInfo.PRODUCT_NAME: ValueKind.STRING,
    DeviceInfo.UID: ValueKind.STRING,
    DeviceInfo.VENDOR: ValueKind.STRING,
    DeviceInfo.DRIVER_VERSION: ValueKind.STRING,
    DeviceInfo.MAX_WORK_GROUP_SIZE: _U32,
    DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: ValueKind.DIMENSIONS,
    DeviceInfo.MAX_WORK_SIZE: _U32,
    DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: ValueKind.DIMENSIONS,
    DeviceInfo.VENDOR_ID: _U32,
    DeviceInfo.NUM_COMPUTE_UNITS: _U32,
    DeviceInfo.MAX_CLOCK_FREQUENCY: _U32,
    DeviceInfo.MEMORY_CLOCK_RATE: _U32,
    DeviceInfo.ADDRESS_BITS: _U32,
    DeviceInfo.MAX_MEM_ALLOC_SIZE: ValueKind.UINT64,
    DeviceInfo.GLOBAL_MEM_SIZE: ValueKind.UINT64,
    DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: ValueKind.UINT64,
    DeviceInfo.SINGLE_FP_CONFIG: ValueKind.ENUM,
    DeviceInfo.DOUBLE_FP_CONFIG: ValueKind.ENUM,
    DeviceInfo.HALF_FP_CONFIG: ValueKind.ENUM,
    DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR: _U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT: _U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_INT: _U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_LONG: _U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT: _U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE: _U32,
    DeviceInfo.NATIVE_VECTOR_WIDTH_HALF: _U32,
}

MEM_INFO_KINDS = {
    MemInfo.DEVICE: ValueKind.HANDLE,
    MemInfo.BASE: ValueKind.HANDLE,
    MemInfo.SIZE: ValueKind.UINT64,
    MemInfo.TYPE: ValueKind.ENUM,
}

QUEUE_INFO_KINDS = {QueueInfo.DEVICE: ValueKind.HANDLE, QueueInfo.EMPTY: ValueKind.BOOL}

EVENT_INFO_KINDS = {EventInfo.QUEUE: ValueKind.HANDLE, EventInfo.IS_COMPLETE: ValueKind.BOOL}

SYMBOL_INFO_KINDS = {
    SymbolInfo.KIND: ValueKind.ENUM,
    SymbolInfo.GLOBAL_VARIABLE_ADDRESS: ValueKind.HANDLE,
    SymbolInfo.GLOBAL_VARIABLE_SIZE: ValueKind.UINT64,
    SymbolInfo.NAME: ValueKind.STRING,
}
