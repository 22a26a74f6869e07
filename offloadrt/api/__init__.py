"""The ``ol*`` entry points of liboffload's Offload API, one Python function each.

Outputs are returned, failures raise :class:`offloadrt.OffloadError`; see docs/api.md in offloadrt's
repository for the mapping from C. Every function but ``olInit`` raises ``UNINITIALIZED``
before ``olInit`` and after the last ``olShutDown``.
"""

from .device import olGetDeviceInfo, olGetDeviceInfoSize, olIterateDevices
from .event import (
    olCreateEvent,
    olDestroyEvent,
    olGetEventElapsedTime,
    olGetEventInfo,
    olGetEventInfoSize,
    olSyncEvent,
)
from .handles import Device, Event, Platform, Program, Queue, Symbol
from .init import olInit, olInitWithCodeLoc, olShutDown
from .kernel import (
    olCalculateOptimalOccupancy,
    olGetSymbol,
    olGetSymbolInfo,
    olGetSymbolInfoSize,
    olLaunchKernel,
)
from .memory import (
    olGetMemInfo,
    olGetMemInfoSize,
    olMemAlloc,
    olMemcpy,
    olMemFill,
    olMemFree,
    olMemRegister,
    olMemUnregister,
)
from .platform import olGetPlatformInfo, olGetPlatformInfoSize
from .program import olCreateProgram, olDestroyProgram, olIsValidBinary
from .queue import (
    olCreateQueue,
    olDestroyQueue,
    olGetQueueError,
    olGetQueueInfo,
    olGetQueueInfoSize,
    olLaunchHostFunction,
    olQueryQueue,
    olSyncQueue,
    olWaitEvents,
)

__all__ = [
    "Device", "Event", "Platform", "Program", "Queue", "Symbol",
    "olCalculateOptimalOccupancy", "olCreateEvent", "olCreateProgram", "olCreateQueue", "olDestroyEvent",
    "olDestroyProgram", "olDestroyQueue", "olGetDeviceInfo", "olGetDeviceInfoSize", "olGetEventElapsedTime",
    "olGetEventInfo", "olGetEventInfoSize", "olGetMemInfo", "olGetMemInfoSize", "olGetPlatformInfo",
    "olGetPlatformInfoSize", "olGetQueueError", "olGetQueueInfo", "olGetQueueInfoSize", "olGetSymbol",
    "olGetSymbolInfo", "olGetSymbolInfoSize", "olInit", "olIsValidBinary", "olIterateDevices",
    "olLaunchHostFunction", "olLaunchKernel", "olMemAlloc", "olMemcpy", "olMemFill", "olMemFree",
    "olMemRegister", "olMemUnregister", "olQueryQueue", "olShutDown", "olSyncEvent", "olSyncQueue", "olWaitEvents",
]

# LLVM 22's ``ol<Name>WithCodeLoc`` variants: the same calls with a trailing ``code_location``.
_ENTRY_POINTS = [name for name in __all__ if name.startswith("ol") and name != "olInit"]
for _name in _ENTRY_POINTS:
    globals()[f"{_name}WithCodeLoc"] = globals()[_name].with_code_location
__all__ += [f"{name}WithCodeLoc" for name in _ENTRY_POINTS] + ["olInitWithCodeLoc"]
del _name
