"""The one module that imports NVIDIA's ``cuda.bindings.driver``, and turns its statuses into errors.

Every driver call returns a tuple ``(CUresult, *outputs)``; :meth:`Driver.check` turns a failing
status into an :class:`OffloadError` whose code follows the status and whose details carry the
call, the driver's error name and its explanation.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..common import PluginUnavailable
from ..common.gpu.driver import GpuDriver

SUCCESS = 0
NOT_READY = 600
NO_DEVICE = 100

# CUresult values (the driver's ABI) grouped by what they mean for offloadrt.
OUT_OF_MEMORY = frozenset({2})  # CUDA_ERROR_OUT_OF_MEMORY
# INVALID_IMAGE, NO_BINARY_FOR_GPU, INVALID_PTX, UNSUPPORTED_PTX_VERSION, JIT_COMPILER_NOT_FOUND,
# INVALID_SOURCE, SHARED_OBJECT_INIT_FAILED, JIT_COMPILATION_DISABLED
BAD_IMAGE = frozenset({200, 209, 218, 222, 221, 300, 303, 223})
NOT_SUPPORTED = frozenset({801, 217})  # NOT_SUPPORTED, PEER_ACCESS_UNSUPPORTED
NOT_FOUND = frozenset({500})
INVALID_VALUE_STATUS = 1  # CUDA_ERROR_INVALID_VALUE
INVALID_VALUE = frozenset({INVALID_VALUE_STATUS})
# A kernel fault that leaves the context unusable until it is destroyed ("sticky" errors).
# ILLEGAL_ADDRESS, LAUNCH_TIMEOUT, ASSERT, HARDWARE_STACK_ERROR, ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS,
# INVALID_ADDRESS_SPACE, INVALID_PC, LAUNCH_FAILED, TENSOR_MEMORY_LEAK, CONTAINED, EXTERNAL_DEVICE: the
# driver documents each as leaving the context unusable until it is destroyed.
STICKY = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 226, 911})

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


class Driver(GpuDriver):
    """The loaded ``cuda.bindings.driver`` module plus the status helpers that need it."""

    vendor = "CUDA"
    status_enum = "CUresult"
    name_function = "cuGetErrorName"
    explain_function = "cuGetErrorString"
    out_of_memory = OUT_OF_MEMORY
    bad_image = BAD_IMAGE
    not_supported = NOT_SUPPORTED
    not_found = NOT_FOUND
    invalid_value = INVALID_VALUE
    sticky = STICKY


error_code = Driver.error_code
