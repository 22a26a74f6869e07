"""offloadrt: a pure-Python implementation of LLVM's Offload API (``ol*``).

``offloadrt.api`` holds the entry points; this package re-exports the error type, the enums
and the structs they take.
"""

__version__ = "0.1.0"

from .errors import ErrorCode, OffloadError, OffloadWarning  # noqa: E402
from .types import (  # noqa: E402
    AllocType,
    DeviceInfo,
    DeviceType,
    Dimensions,
    EventInfo,
    FpCapabilityFlag,
    KernelLaunchSizeArgs,
    MemInfo,
    PlatformBackend,
    PlatformInfo,
    QueueInfo,
    SymbolInfo,
    SymbolKind,
)

__all__ = [
    "AllocType", "DeviceInfo", "DeviceType", "Dimensions", "ErrorCode", "EventInfo", "FpCapabilityFlag",
    "KernelLaunchSizeArgs", "MemInfo", "OffloadError", "OffloadWarning", "PlatformBackend", "PlatformInfo",
    "QueueInfo", "SymbolInfo", "SymbolKind", "__version__",
]
