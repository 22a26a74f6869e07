"""offloadrt: a pure-Python implementation of LLVM's Offload API (``ol*``).

The Python API, imported from ``offloadrt.core`` on first use so that ``import offloadrt`` stays light:

- devices: ``device(spec=None)``, ``devices(backend=None)``, ``Device``
- memory: ``Buffer``, ``MemoryPool``
- arrays: ``Array`` (``ArrayFlags``), ``asarray``, ``empty``, ``zeros``, ``full``, ``empty_like``, ``zeros_like``,
  ``ascontiguousarray``
- queues and events: ``Queue``, ``Event``
- programs and kernels: ``Program``, ``Kernel``, ``elementwise``, ``reduction``

``offloadrt.api`` holds the ``ol*`` entry points; this package re-exports the error type
(``OffloadError``, ``ErrorCode``), the enums and structs they take, ``get_include()``,
``unavailable_platforms()`` and, on first use, ``offloadrt.compile`` (kernels from source).
See docs/python-api.md and docs/api.md.
"""

# `X as X` re-exports, one a line: there is no literal __all__ to tell type checkers (see __getattr__)
from .errors import ErrorCode as ErrorCode
from .errors import OffloadError as OffloadError
from .errors import OffloadWarning as OffloadWarning
from .types import AllocType as AllocType
from .types import CodeLocation as CodeLocation
from .types import DeviceInfo as DeviceInfo
from .types import DeviceType as DeviceType
from .types import Dimensions as Dimensions
from .types import EventFlags as EventFlags
from .types import EventInfo as EventInfo
from .types import FpCapabilityFlag as FpCapabilityFlag
from .types import KernelLaunchSizeArgs as KernelLaunchSizeArgs
from .types import MemInfo as MemInfo
from .types import PlatformBackend as PlatformBackend
from .types import PlatformInfo as PlatformInfo
from .types import QueueInfo as QueueInfo
from .types import SymbolInfo as SymbolInfo
from .types import SymbolKind as SymbolKind
from .types import UnavailablePlatform as UnavailablePlatform

__version__ = "0.1.0"

_EAGER = [
    "AllocType", "CodeLocation", "DeviceInfo", "DeviceType", "Dimensions", "ErrorCode", "EventFlags", "EventInfo",
    "FpCapabilityFlag", "KernelLaunchSizeArgs", "MemInfo", "OffloadError", "OffloadWarning", "PlatformBackend",
    "PlatformInfo", "QueueInfo", "SymbolInfo", "SymbolKind", "UnavailablePlatform", "__version__", "get_include",
    "unavailable_platforms",
]

# The Python API: names of offloadrt.core, imported on first use. Some are still being written
# (zeros, full, empty_like, zeros_like, ascontiguousarray, elementwise, reduction): a name offloadrt.core
# does not have is an AttributeError, and is left out of __all__.
_PYTHON_API = frozenset((
    "Array", "ArrayFlags", "Buffer", "Device", "Event", "Kernel", "MemoryPool", "Program", "Queue", "asarray", "device",
    "devices", "empty", "zeros", "full", "empty_like", "zeros_like", "ascontiguousarray", "elementwise", "reduction",
    "ElementwiseKernel", "ReductionKernel",
))


def __getattr__(name: str) -> object:
    if name in _PYTHON_API:
        from . import core

        try:
            return getattr(core, name)
        except AttributeError:
            raise AttributeError(f"module 'offloadrt' has no attribute {name!r} (this version of offloadrt.core "
                                 f"does not provide it)") from None
    if name == "compile":  # offloadrt.compile (kernels from source), imported on first use
        import importlib

        return importlib.import_module(".compile", __name__)
    if name == "__all__":
        # Computed, not a literal: it lists only the Python API names offloadrt.core has, so that
        # `from offloadrt import *` works while some are still missing. Reading it imports offloadrt.core.
        from . import core

        public = _EAGER + sorted(n for n in _PYTHON_API if hasattr(core, n))
        globals()["__all__"] = public
        return public
    raise AttributeError(f"module 'offloadrt' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and the Python API's, without importing offloadrt.core (for dir(), tab completion)."""
    return sorted(set(globals()) | _PYTHON_API | {"compile"})


def get_include() -> str:
    """The folder to pass to ``cc -I`` for ``offloadrt/host_kernel.h``."""
    from pathlib import Path

    return str(Path(__file__).with_name("include"))


def unavailable_platforms() -> list[UnavailablePlatform]:
    """The platforms of the running runtime that did not start, each with the reason
    (``UNINITIALIZED`` outside ``olInit``/``olShutDown``)."""
    from .api.platform import unavailable_platforms as running

    return running()
