"""offloadrt: a pure-Python implementation of LLVM's Offload API (``ol*``).

``offloadrt.api`` holds the entry points; this package re-exports the error type, the enums
and the structs they take.
"""

__version__ = "0.1.0"

from .errors import ErrorCode, OffloadError, OffloadWarning  # noqa: E402
from .types import (  # noqa: E402
    AllocType,
    CodeLocation,
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
    "AllocType", "CodeLocation", "DeviceInfo", "DeviceType", "Dimensions", "ErrorCode", "EventInfo", "FpCapabilityFlag",
    "KernelLaunchSizeArgs", "MemInfo", "OffloadError", "OffloadWarning", "PlatformBackend", "PlatformInfo",
    "QueueInfo", "SymbolInfo", "SymbolKind", "__version__",
]


def get_include() -> str:
    """The folder to pass to ``cc -I`` for ``offloadrt/host_kernel.h``."""
    from pathlib import Path

    return str(Path(__file__).with_name("include"))
