"""Arguments as the CUDA bindings pass them, for the stand-in driver.

TEST DOUBLE, not NVIDIA code: it reads arguments the way ``cuda.bindings.driver`` takes them
(ints, handles, buffers, None), the JIT options of ``cuModuleLoadDataEx`` (the error log is
written into the caller's buffer, as the driver does through the bindings), and ``kernelParams``
in both forms the bindings accept.
"""
# ruff: noqa: N803  # parameter names follow cuda.bindings.driver

from __future__ import annotations

import ctypes
from typing import Any

from standin_common import arguments, modules

from ._types import CUjit_option


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


def packed_params(kernelParams: Any, function: modules.Function) -> bytes:
    """The argument blob from ``kernelParams``: a ((values), (ctypes types)) pair, or the address
    of an array of pointers to each argument (laid out as the kernel's parameter list says)."""
    if isinstance(kernelParams, tuple) and len(kernelParams) == 2 and isinstance(kernelParams[0], (tuple, list)):
        blob = bytearray()
        for value, kind in zip(*kernelParams):
            data = int(value).to_bytes(8, "little") if kind is None else bytes(
                value if isinstance(value, kind) else kind(value))
            align = 8 if kind is None else ctypes.alignment(kind)
            blob += bytes(-len(blob) % align) + data
        return bytes(blob)
    return arguments.packed_params(address(kernelParams), function)
