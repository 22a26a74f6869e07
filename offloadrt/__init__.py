"""offloadrt: a pure-Python implementation of LLVM's Offload API (``ol*``).

``offloadrt.api`` holds the entry points; this package re-exports the error type, the enums
and the structs they take, and the Python API (``offloadrt.device()``, ``Buffer``, ``Array``,
``Queue``, ...), which is imported on first use so that ``import offloadrt`` stays light.
"""

__version__ = "0.1.0"

from .errors import ErrorCode, OffloadError, OffloadWarning  # noqa: E402
from .types import (  # noqa: E402
    AllocType,
    CodeLocation,
    DeviceInfo,
    DeviceType,
    Dimensions,
    EventFlags,
    EventInfo,
    FpCapabilityFlag,
    KernelLaunchSizeArgs,
    MemInfo,
    PlatformBackend,
    PlatformInfo,
    QueueInfo,
    SymbolInfo,
    SymbolKind,
    UnavailablePlatform,
)

__all__ = [
    "AllocType", "CodeLocation", "DeviceInfo", "DeviceType", "Dimensions", "ErrorCode", "EventFlags", "EventInfo",
    "FpCapabilityFlag", "KernelLaunchSizeArgs", "MemInfo", "OffloadError", "OffloadWarning", "PlatformBackend",
    "PlatformInfo", "QueueInfo", "SymbolInfo", "SymbolKind", "UnavailablePlatform", "__version__", "get_include",
    "unavailable_platforms",
    # the Python API (offloadrt.core), imported on first use
    "Array", "Buffer", "Device", "Event", "Kernel", "MemoryPool", "Program", "Queue", "asarray", "device", "devices",
    "empty",
]

_PYTHON_API = frozenset(("Array", "Buffer", "Device", "Event", "Kernel", "MemoryPool", "Program", "Queue", "asarray",
                         "device", "devices", "empty"))


def __getattr__(name: str) -> object:
    if name in _PYTHON_API:
        from . import core

        return getattr(core, name)
    if name == "compile":  # offloadrt.compile (kernels from source), imported on first use
        import importlib

        return importlib.import_module(".compile", __name__)
    raise AttributeError(f"module 'offloadrt' has no attribute {name!r}")


def get_include() -> str:
    """The folder to pass to ``cc -I`` for ``offloadrt/host_kernel.h``."""
    from pathlib import Path

    return str(Path(__file__).with_name("include"))


def unavailable_platforms() -> list[UnavailablePlatform]:
    """The platforms of the running runtime that did not start, each with the reason
    (``UNINITIALIZED`` outside ``olInit``/``olShutDown``)."""
    from .api.platform import unavailable_platforms as running

    return running()
