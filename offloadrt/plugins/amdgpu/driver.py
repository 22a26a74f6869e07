"""The one module that imports AMD's hip-python (``from hip import hip``), and turns its statuses into errors.

hip-python returns ``(hipError_t, *outputs)`` from every call and binds ``libamdhip64.so`` only
on the first call, so importing it works without ROCm; :class:`Driver` names statuses with
``hipGetErrorName``/``hipGetErrorString`` and maps them to offloadrt's error codes.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..common import PluginUnavailable
from ..common.gpu.driver import GpuDriver

SUCCESS = 0
NOT_READY = 600  # hipErrorNotReady
NO_DEVICE = 100  # hipErrorNoDevice
INSUFFICIENT_DRIVER = 35  # hipErrorInsufficientDriver
SET_ON_ACTIVE_PROCESS = 708  # hipErrorSetOnActiveProcess
LAUNCH_FAILURE = 719  # hipErrorLaunchFailure

# hipError_t values grouped by what they mean for offloadrt.
OUT_OF_MEMORY = frozenset({2})  # hipErrorOutOfMemory
# hipErrorInvalidImage, hipErrorNoBinaryForGpu, hipErrorInvalidKernelFile, hipErrorInvalidSource,
# hipErrorSharedObjectInitFailed
BAD_IMAGE = frozenset({200, 209, 218, 300, 303})
NOT_SUPPORTED = frozenset({801, 217})  # hipErrorNotSupported, hipErrorPeerAccessUnsupported
NOT_FOUND = frozenset({500})  # hipErrorNotFound
INVALID_VALUE = frozenset({1})  # hipErrorInvalidValue
INVALID_CONFIGURATION = frozenset({9})  # hipErrorInvalidConfiguration: launch dimensions HIP cannot run
# Faults after which the device's work can no longer be trusted: hipErrorIllegalAddress,
# hipErrorLaunchTimeOut, hipErrorAssert, hipErrorLaunchFailure, hipErrorECCNotCorrectable.
STICKY = frozenset({700, 702, 710, 719, 214})

HIP_LAUNCH_PARAM_BUFFER_POINTER = 1
HIP_LAUNCH_PARAM_BUFFER_SIZE = 2
HIP_LAUNCH_PARAM_END = 3  # CUDA ends the same array with 0


def load_driver() -> ModuleType:
    """``hip.hip`` from hip-python (lazily); a missing package makes the plugin unavailable."""
    try:
        package = importlib.import_module("hip")
        module: ModuleType = package.hip  # an attribute alias in hip-python 10, not a submodule
    except (ImportError, AttributeError) as exc:
        raise PluginUnavailable(
            f"hip-python is not installed ({exc}); install offloadrt[amd] to use AMD GPUs") from None
    return module


@functools.cache  # one pair per bindings module: every device passes the same objects
def launch_wrappers(module: ModuleType) -> tuple[Callable[[int], Any] | None, Any]:
    """hip-python's own types for ``hipModuleLaunchKernel``'s ``extra`` array and for "no
    ``kernelParams``": a function making the first from an address, and the second (NULL).

    Prepared once, they spare the bindings a conversion of each on every launch (about half the
    call's cost with hip-python 10). ``(None, None)`` where this hip-python (or a stand-in) has
    no such types: the plugin passes an int and None then, which every version takes.
    """
    package = module.__name__.rpartition(".")[0]
    try:
        wrap = importlib.import_module(f"{package}._hip_helpers").HipModuleLaunchKernel_extra.fromObj
    except (ImportError, AttributeError):
        wrap = None
    no_params = None
    for name in (f"{package}.util.types", f"{package}._util.types"):
        try:
            no_params = importlib.import_module(name).ListOfPointer.fromObj(None)
            break
        except (ImportError, AttributeError):
            continue
    return wrap, no_params


def host_function(module: ModuleType, address: int) -> Any:
    """The C function at ``address`` as hip-python's ``hipHostFn_t`` (made once, it spares
    ``hipLaunchHostFunc`` a conversion on every call), or the address where the bindings lack it."""
    maker = getattr(getattr(module, "hipHostFn_t", None), "fromObj", None)
    return address if maker is None else maker(address)


class Driver(GpuDriver):
    """The loaded ``hip.hip`` module plus the status helpers that need it."""

    vendor = "HIP"
    status_enum = "hipError_t"
    name_function = "hipGetErrorName"
    explain_function = "hipGetErrorString"
    out_of_memory = OUT_OF_MEMORY
    bad_image = BAD_IMAGE
    not_supported = NOT_SUPPORTED
    not_found = NOT_FOUND
    invalid_value = INVALID_VALUE
    invalid_size = INVALID_CONFIGURATION
    sticky = STICKY


error_code = Driver.error_code
