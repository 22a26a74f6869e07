"""Kernel argument buffers of the driver stand-ins: ``extra`` arrays, ``kernelParams``, and what each
driver makes of a buffer whose size does not match the kernel's parameters.

TEST DOUBLE, not NVIDIA or AMD code. A kernel's parameter layout is a list of (offset, size)
pairs (:data:`~standin_common.controls.Layout`), read from its image (PTX ``.param`` lists, AMDGPU
code object metadata) or given to ``register_kernel``. The size of its parameter buffer is where
the last parameter ends, without tail padding (:func:`~standin_common.controls.layout_size`). The
body of a kernel always receives a blob of exactly that size, built when the launch is made (the
caller may reuse its buffer at once):

- CUDA (measured on an H100, see gpu-hardware-facts.md "Kernel parameters"): ``extra``'s
  ``CU_LAUNCH_PARAM_BUFFER_SIZE`` equal to the parameter size launches; a larger size fails at
  the launch call with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701) and enqueues nothing; a smaller
  one is accepted silently and the kernel reads whatever follows the buffer (:func:`cuda_blob`);
- HIP (ROCm ``clr``, hipamd/src/hip_module.cpp ``ihipLaunchKernelCommand`` and rocclr
  platform/kernel.cpp ``KernelParameters::captureAndSet``): ``extra`` must be exactly
  ``{BUFFER_POINTER, p, BUFFER_SIZE, &size, END}`` in that order (else hipErrorInvalidValue);
  HIP never reads ``size``: it copies each explicit argument from ``p + offset`` as the code
  object's metadata lays them out, so a larger size is ignored and a smaller one makes the
  kernel read whatever follows (:func:`hip_blob`).

What follows a caller's buffer is not read: the stand-in cannot know that memory is mapped. A
kernel sees :data:`GARBAGE` there instead (byte ``i`` of the blob is ``GARBAGE[i % 4]``), so a test
recognises arguments that were never passed. Where the stand-in knows no layout (a cubin or
fatbin without ``param_sizes``, a code object without metadata), the blob is the buffer as given
(the size's bytes), and ``kernelParams`` cannot be packed.
"""

from __future__ import annotations

import ctypes

from .controls import fail, layout_size
from .modules import Function

LAUNCH_PARAM_BUFFER_POINTER = 1  # CU_/HIP_LAUNCH_PARAM_BUFFER_POINTER
LAUNCH_PARAM_BUFFER_SIZE = 2  # CU_/HIP_LAUNCH_PARAM_BUFFER_SIZE
INVALID_VALUE = 1
LAUNCH_OUT_OF_RESOURCES = 701  # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
GARBAGE = b"\xde\xad\xbe\xef"  # what a kernel reads past the end of a too-short parameter buffer


def stale(start: int, end: int) -> bytes:
    """The garbage a kernel reads at blob offsets ``[start, end)``."""
    return bytes(GARBAGE[i % len(GARBAGE)] for i in range(start, end))


def _word(array: int, index: int) -> int:
    return ctypes.c_void_p.from_address(array + 8 * index).value or 0


def _count(size_at: int) -> int:
    if not size_at:
        raise fail(INVALID_VALUE, "extra: the BUFFER_SIZE entry is a null pointer (the stand-in reads the size "
                                  "to know how much of the buffer it may read)")
    return ctypes.c_size_t.from_address(size_at).value


def cuda_extra(array: int, end: int) -> tuple[int, int]:
    """(buffer address, size) of a CUDA ``extra`` array: key/value pairs in any order, up to ``end``."""
    buffer = size_at = None
    for index in range(0, 64, 2):
        key = _word(array, index)
        if key == end:
            break
        value = _word(array, index + 1)
        if key == LAUNCH_PARAM_BUFFER_POINTER:
            buffer = value
        elif key == LAUNCH_PARAM_BUFFER_SIZE:
            size_at = value
        else:
            raise fail(INVALID_VALUE, f"extra: unknown key {key:#x} at entry {index}")
    else:
        raise fail(INVALID_VALUE, f"extra: no end marker ({end}) within 32 entries")
    if buffer is None or size_at is None:
        raise fail(INVALID_VALUE, "extra: needs both a BUFFER_POINTER (1) and a BUFFER_SIZE (2) entry")
    return buffer, _count(size_at)


def hip_extra(array: int, end: int) -> tuple[int, int]:
    """(buffer address, size) of a HIP ``extra`` array, which HIP reads only as
    ``{BUFFER_POINTER, p, BUFFER_SIZE, &size, END}``: anything else is hipErrorInvalidValue."""
    keys = (_word(array, 0), _word(array, 2), _word(array, 4))
    if keys != (LAUNCH_PARAM_BUFFER_POINTER, LAUNCH_PARAM_BUFFER_SIZE, end):
        raise fail(INVALID_VALUE, f"extra: HIP takes exactly {{BUFFER_POINTER (1), p, BUFFER_SIZE (2), &size, "
                                  f"END ({end})}}; keys at entries 0, 2, 4 are {keys}")
    return _word(array, 1), _count(_word(array, 3))


def _read(buffer: int, count: int) -> bytes:
    if count and not buffer:
        raise fail(INVALID_VALUE, "extra: a null argument buffer of non-zero size")
    return ctypes.string_at(buffer, count) if count else b""


def cuda_blob(function: Function, buffer: int, count: int) -> bytes:
    """What the kernel reads from a CUDA parameter buffer of ``count`` bytes at ``buffer``."""
    if function.params is None:
        return _read(buffer, count)
    need = layout_size(function.params)
    if count > need:
        raise fail(LAUNCH_OUT_OF_RESOURCES,
                   f"cuLaunchKernel of {function.name!r}: CU_LAUNCH_PARAM_BUFFER_SIZE is {count} bytes, its "
                   f"parameters end at byte {need} (the H100 refuses a size rounded up to the struct's alignment: "
                   f"pass the end of the last parameter, without tail padding)")
    return _read(buffer, count) + stale(count, need)


def hip_blob(function: Function, data: bytes) -> bytes:
    """What the kernel reads when HIP copies each explicit argument out of ``data`` (the caller's
    buffer, as far as its size says) at the offsets the code object's metadata gives."""
    if function.params is None:
        return data
    blob = bytearray(layout_size(function.params))
    for offset, size in function.params:
        given = max(0, min(size, len(data) - offset))
        blob[offset:offset + given] = data[offset:offset + given]
        blob[offset + given:offset + size] = stale(offset + given, offset + size)
    return bytes(blob)


def hip_buffer(buffer: int, count: int, function: Function) -> bytes:
    """The part of a HIP parameter buffer the stand-in reads: ``count`` bytes, no more than the
    kernel's arguments span (HIP ignores a larger size)."""
    limit = count if function.params is None else min(count, layout_size(function.params))
    return _read(buffer, limit)


def packed_params(pointers_at: int, function: Function) -> bytes:
    """The argument blob from a ``kernelParams`` array of pointers to each argument at
    ``pointers_at``, laid out as the kernel's parameter list says."""
    layout = function.params
    if layout is None:
        raise fail(INVALID_VALUE, f"kernelParams for {function.name!r}: the parameter layout is unknown (give "
                                  f"param_sizes to register_kernel)")
    blob = bytearray(layout_size(layout))
    pointers = (ctypes.c_void_p * max(1, len(layout))).from_address(pointers_at)
    for index, ((offset, size), pointer) in enumerate(zip(layout, pointers)):
        if size and not pointer:
            raise fail(INVALID_VALUE, f"kernelParams[{index}] of {function.name!r} is a null pointer")
        blob[offset:offset + size] = ctypes.string_at(pointer, size) if size else b""
    return bytes(blob)


__all__ = ["GARBAGE", "cuda_blob", "cuda_extra", "hip_blob", "hip_buffer", "hip_extra",
           "packed_params", "stale"]
