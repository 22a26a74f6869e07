"""The one module that imports NVIDIA's ``cuda.bindings.driver``, and turns its statuses into errors.

Every driver call returns a tuple ``(CUresult, *outputs)``; :func:`check` turns a failing status
into an :class:`OffloadError` whose code follows the status and whose details carry the call,
the driver's error name and its explanation.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ..errors import ErrorCode, OffloadError
from .interface import PluginUnavailable

SUCCESS = 0
NOT_READY = 600
NO_DEVICE = 100

# CUresult values (the driver's ABI) grouped by what they mean for offloadrt.
OUT_OF_MEMORY = {2}  # CUDA_ERROR_OUT_OF_MEMORY
# INVALID_IMAGE, NO_BINARY_FOR_GPU, INVALID_PTX, UNSUPPORTED_PTX_VERSION, JIT_COMPILER_NOT_FOUND,
# INVALID_SOURCE, SHARED_OBJECT_INIT_FAILED, JIT_COMPILATION_DISABLED
BAD_IMAGE = {200, 209, 218, 222, 221, 300, 303, 223}
NOT_SUPPORTED = {801, 217}  # NOT_SUPPORTED, PEER_ACCESS_UNSUPPORTED
NOT_FOUND = {500}
INVALID_VALUE = {1}
# A kernel fault that leaves the context unusable until it is destroyed ("sticky" errors).
# ILLEGAL_ADDRESS, LAUNCH_TIMEOUT, ASSERT, HARDWARE_STACK_ERROR, ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS,
# INVALID_ADDRESS_SPACE, INVALID_PC, LAUNCH_FAILED, TENSOR_MEMORY_LEAK, CONTAINED, EXTERNAL_DEVICE: the
# driver documents each as leaving the context unusable until it is destroyed.
STICKY = {700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 226, 911}

CU_LAUNCH_PARAM_END = 0
CU_LAUNCH_PARAM_BUFFER_POINTER = 1
CU_LAUNCH_PARAM_BUFFER_SIZE = 2


def load_driver() -> ModuleType:
    """Import ``cuda.bindings.driver`` (lazily); a missing package makes the plugin unavailable."""
    try:
        return importlib.import_module("cuda.bindings.driver")
    except ImportError as exc:
        raise PluginUnavailable(
            f"cuda-bindings is not installed ({exc}); install offloadrt[cuda] to use NVIDIA GPUs") from None


def error_code(status: int) -> ErrorCode:
    if status in OUT_OF_MEMORY:
        return ErrorCode.OUT_OF_RESOURCES
    if status in BAD_IMAGE:
        return ErrorCode.INVALID_BINARY
    if status in NOT_SUPPORTED:
        return ErrorCode.UNSUPPORTED
    if status in NOT_FOUND:
        return ErrorCode.NOT_FOUND
    if status in INVALID_VALUE:
        return ErrorCode.INVALID_ARGUMENT
    if status == 999:  # CUDA_ERROR_UNKNOWN
        return ErrorCode.UNKNOWN
    return ErrorCode.BACKEND_FAILURE


class Driver:
    """The loaded driver module plus the status helpers that need it."""

    def __init__(self, module: ModuleType):
        self.module = module
        self.names: dict[int, str] = {}

    def name(self, status: int) -> str:
        """The driver's name for a status (``CUDA_ERROR_OUT_OF_MEMORY``) and its explanation."""
        known = self.names.get(status)
        if known is not None:
            return known
        mod = self.module
        try:
            enum = mod.CUresult(status)
            res, name = mod.cuGetErrorName(enum)
            label = name.decode() if int(res) == SUCCESS and name else getattr(enum, "name", str(status))
            res, text = mod.cuGetErrorString(enum)
            if int(res) == SUCCESS and text:
                label = f"{label} ({text.decode()})"
        except Exception:  # noqa: BLE001  # naming an error must never hide it
            label = f"CUresult {status}"
        self.names[status] = label
        return label

    def error(self, status: int, call: str, extra: str = "") -> OffloadError:
        details = f"{call}: {self.name(status)}"
        if extra:
            details = f"{details}: {extra}"
        err = OffloadError(error_code(status), details)
        err.driver_status = status  # type: ignore[attr-defined]
        return err

    def check(self, result: Any, call: str) -> Any:
        """The outputs of a driver call (one value unpacked, several as a tuple); raise on failure."""
        status = int(result[0])
        if status != SUCCESS:
            raise self.error(status, call)
        if len(result) == 2:
            return result[1]
        return result[1:]
