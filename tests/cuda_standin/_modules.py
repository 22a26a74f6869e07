"""Argument conversion, modules and kernel arguments for the stand-in driver.

TEST DOUBLE, not NVIDIA code: it reads arguments the way the CUDA bindings pass them (ints,
handles, buffers), the JIT options of ``cuModuleLoadDataEx`` (the error log is written into the
caller's buffer, as the driver does through the bindings), and the kernel argument blob of a
launch (the ``extra`` array or ``kernelParams``), copied at launch time as the driver does.
"""
# ruff: noqa: N803  # parameter names follow cuda.bindings.driver

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from ._engine import Allocation, Context, fail
from ._types import CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE, CU_LAUNCH_PARAM_END, CUjit_option


def as_int(value: Any) -> int:
    return 0 if value is None else int(value)


def unsigned(value: Any, bits: int = 64, what: str = "size_t") -> int:
    """An unsigned C integer argument: out of range raises OverflowError, as in the bindings."""
    number = int(value)
    if number < 0:
        raise OverflowError(f"can't convert negative value to {what}")
    if number >> bits:
        raise OverflowError(f"value too large to convert to {what}")
    return number


def address(value: Any) -> int:
    """A pointer argument: an int, a handle, or an object exposing a buffer (its address)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, bytes):
        return ctypes.cast(ctypes.c_char_p(value), ctypes.c_void_p).value or 0
    try:
        view = memoryview(value)
    except TypeError:
        return int(value)
    if view.nbytes == 0:
        return 0
    if view.readonly:
        raise TypeError(f"cuda_standin: cannot take the address of a read-only {type(value).__name__}")
    return ctypes.addressof(ctypes.c_char.from_buffer(value))


@dataclass(eq=False)
class Module:
    handle: int
    ctx: Context
    functions: dict[str, Function] = field(default_factory=dict)
    globals: dict[str, Allocation] = field(default_factory=dict)
    unloaded: bool = False


@dataclass(eq=False)
class Function:
    handle: int
    module: Module
    name: str
    params: list[tuple[int, int]] | None
    max_threads: int
    max_dynamic_shared: int
    carveout: int = -1


def jit_options(numOptions: Any, options: Any, optionValues: Any) -> dict[int, Any]:
    count = as_int(numOptions)
    options, values = list(options or ()), list(optionValues or ())
    if count > len(options) or count > len(values):
        raise RuntimeError(f"List is too small: {len(options)}/{len(values)} < {count}")
    if not all(isinstance(option, CUjit_option) for option in options):
        raise TypeError("Argument 'options' is not instance of type (expected tuple[CUjit_option] or "
                        "list[CUjit_option]")
    return {int(options[i]): values[i] for i in range(count)}


def write_log(options: dict[int, Any], buffer_option: int, size_option: int, text: str) -> None:
    buffer, capacity = options.get(buffer_option), as_int(options.get(size_option, 0))
    if buffer is None or capacity <= 0 or (isinstance(buffer, (bytes, bytearray)) and len(buffer) < 2):
        return
    if isinstance(buffer, (bytes, bytearray)):
        capacity = min(capacity, len(buffer))
    data = text.encode()[:capacity - 1] + b"\0"
    ctypes.memmove(address(buffer), data, len(data))  # the driver writes into the caller's buffer


def extra_blob(array: int, end: int = CU_LAUNCH_PARAM_END) -> bytes:
    """The argument blob an ``extra`` array points to, copied now (the caller may free it after).

    ``end`` is the value that ends the array: CU_LAUNCH_PARAM_END (0) for CUDA,
    HIP_LAUNCH_PARAM_END (3) for HIP; the buffer keys are 1 and 2 in both.
    """
    buffer = size = None
    for index in range(0, 64, 2):
        key = ctypes.c_void_p.from_address(array + 8 * index).value or 0
        if key == end:
            break
        value = ctypes.c_void_p.from_address(array + 8 * (index + 1)).value or 0
        if key == CU_LAUNCH_PARAM_BUFFER_POINTER:
            buffer = value
        elif key == CU_LAUNCH_PARAM_BUFFER_SIZE:
            size = value
        else:
            raise fail(1, f"extra: unknown key {key:#x} at entry {index}")
    else:
        raise fail(1, f"extra: no end marker ({end}) within 32 entries")
    if buffer is None or size is None:
        raise fail(1, "extra: needs both a BUFFER_POINTER (1) and a BUFFER_SIZE (2) entry")
    count = ctypes.c_size_t.from_address(size).value
    if count and not buffer:
        raise fail(1, "extra: a null argument buffer of non-zero size")
    return ctypes.string_at(buffer, count) if count else b""


def packed_params(kernelParams: Any, function: Function) -> bytes:
    """The argument blob from ``kernelParams``: a ((values), (ctypes types)) pair, or the address
    of an array of pointers to each argument (laid out as the kernel's parameter list says)."""
    blob = bytearray()
    if isinstance(kernelParams, tuple) and len(kernelParams) == 2 and isinstance(kernelParams[0], (tuple, list)):
        for value, kind in zip(*kernelParams):
            data = int(value).to_bytes(8, "little") if kind is None else bytes(
                value if isinstance(value, kind) else kind(value))
            align = 8 if kind is None else ctypes.alignment(kind)
            blob += bytes(-len(blob) % align) + data
        return bytes(blob)
    layout = function.params
    if layout is None:
        raise fail(1, f"kernelParams for {function.name!r}: the parameter layout is unknown (give param_sizes "
                     f"to register_kernel)")
    pointers = (ctypes.c_void_p * max(1, len(layout))).from_address(address(kernelParams))
    for (size, align), pointer in zip(layout, pointers):
        blob += bytes(-len(blob) % align) + ctypes.string_at(pointer or 0, size)
    return bytes(blob)
