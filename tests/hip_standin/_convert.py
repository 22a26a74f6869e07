"""How hip-python converts each argument before calling HIP, so the stand-in accepts and rejects
the same Python values.

TEST DOUBLE, not AMD code. hip-python is Cython: a parameter typed ``int``, ``unsigned int``,
``size_t``... is converted by Cython (TypeError for a non-number, OverflowError outside the C
type's range: a ``hipMemsetD32Async`` value of 2**31 overflows its C ``int``); pointers and handles
go through ``Pointer.fromPyobj`` (None, ints, ``ctypes.c_void_p``, any contiguous buffer);
C strings through ``CStr.fromPyobj``; enums must be members of hip-python's enum classes.
The annotations of the stand-in's functions name these conversions (:data:`CONVERTERS`).
"""

from __future__ import annotations

import ctypes
import operator
from enum import Enum
from typing import Any, NewType

import numpy as np

from ._types import hipDeviceAttribute_t, hipError_t, hipFunction_attribute

CInt = NewType("CInt", int)  # C int
CUInt = NewType("CUInt", int)  # C unsigned int
CUChar = NewType("CUChar", int)  # C unsigned char
CUShort = NewType("CUShort", int)  # C unsigned short
SizeT = NewType("SizeT", int)  # C size_t
Ptr = NewType("Ptr", int)  # void* or a handle (stream, event, module, function): see pointer()
CString = NewType("CString", bytes)  # const char*: the bytes before the NUL (None for NULL)
HostFn = NewType("HostFn", int)  # hipHostFn_t: a C function address
LaunchExtra = NewType("LaunchExtra", object)  # hipModuleLaunchKernel's extra: see launch_extra()
PointerList = NewType("PointerList", object)  # hipModuleLaunchKernel's kernelParams: see pointer_list()
# Enum parameters: the value must be a member of hip-python's enum class of that name.
ErrorArg = NewType("ErrorArg", int)  # hipError_t
DeviceAttributeArg = NewType("DeviceAttributeArg", int)  # hipDeviceAttribute_t
FunctionAttributeArg = NewType("FunctionAttributeArg", int)  # hipFunction_attribute


class Address(int):
    """A pointer argument as an int that keeps the Python object it was taken from alive (an
    asynchronous copy reads a caller's buffer later, on the stream's thread)."""

    source: Any

    def __new__(cls, value: int, source: Any = None) -> Address:
        address = super().__new__(cls, value)
        address.source = source
        return address


def integer(value: Any) -> int:
    """A Python number as Cython takes it for a C integer: ints, ``__index__``, then ``__int__``
    (floats are truncated, as in the bindings); anything else is a TypeError."""
    if isinstance(value, int):
        return int(value)
    kind = type(value)
    if hasattr(kind, "__index__"):
        return operator.index(value)
    if hasattr(kind, "__int__"):
        return int(value)
    raise TypeError("an integer is required")


def signed(bits: int, name: str) -> Any:
    def convert(value: Any) -> int:
        number = integer(value)
        if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
            raise OverflowError(f"value too large to convert to {name}")
        return number

    return convert


def unsigned(bits: int, name: str) -> Any:
    def convert(value: Any) -> int:
        number = integer(value)
        if number < 0:
            raise OverflowError(f"can't convert negative value to {name}")
        if number >> bits:
            raise OverflowError(f"value too large to convert to {name}" if bits < 64 else
                                "Python int too large to convert to C unsigned long")
        return number

    return convert


def _pointer_int(value: int) -> int:
    if value >= 1 << 64:
        raise OverflowError("Python int too large to convert to C unsigned long")
    if value < -(1 << 63):
        raise OverflowError("Python int too large to convert to C long")
    return value & ((1 << 64) - 1)


def buffer_address(value: Any) -> int:
    """The address of a contiguous buffer's first byte (read-only buffers such as bytes too)."""
    try:
        return int(np.frombuffer(value, dtype=np.uint8).ctypes.data)
    except ValueError as exc:  # numpy cannot view it as bytes: not one contiguous block
        raise BufferError(f"{type(value).__name__} is not a simple, contiguous buffer: {exc}") from None


def pointer(value: Any) -> int:
    """A ``void*`` or handle argument, converted in hip-python's order: None, ``c_void_p``,
    a buffer (its address), ``__cuda_array_interface__``, an int, ``as_c_void_p()``."""
    if value is None:
        return 0
    if isinstance(value, ctypes.c_void_p):
        return value.value or 0
    try:
        memoryview(value)
    except TypeError:
        pass  # not a buffer: try the next conversion, as hip-python does
    else:
        return Address(buffer_address(value), value)
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is not None:
        if "data" not in interface:
            raise ValueError("input object has '__cuda_array_interface__' attribute but the dict has no 'data' key")
        return Address(_pointer_int(int(interface["data"][0])), value)
    if isinstance(value, int):
        return _pointer_int(value)
    as_c_void_p = getattr(value, "as_c_void_p", None)
    if as_c_void_p is not None:
        return as_c_void_p().value or 0
    raise TypeError(f"unsupported input type: '{type(value)}'")


def c_string(value: Any) -> bytes | None:
    """A ``const char*`` argument as the bytes the C side reads (None for NULL)."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value).split(b"\0", 1)[0]
    address = pointer(value)
    return ctypes.string_at(address) if address else None


def host_function(value: Any) -> int:
    """A ``hipHostFn_t``: the function's address (an int or ``c_void_p``).

    hip-python would also take any buffer, a ctypes function object included, and pass the
    address of that object's storage as the function: the stand-in refuses it loudly instead
    of jumping there."""
    if value is None or isinstance(value, (int, ctypes.c_void_p)):
        return pointer(value)
    raise TypeError(f"hip_standin: pass a host function as its address (an int: ctypes.cast(fn, c_void_p).value), "
                    f"not a {type(value).__name__}: hip-python would call the address of the object's storage")


_CTYPES_SCALARS = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union)


class PackedArgs(bytes):
    """An argument blob hip-python packed from a list or tuple given as ``extra``."""


def launch_extra(value: Any) -> int | PackedArgs | None:
    """hipModuleLaunchKernel's ``extra``: None/0 (none), the address of a
    ``{BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}`` array, or a list/tuple that hip-python
    packs itself (ctypes values by value, anything else as a pointer, each aligned to its size
    up to 8 bytes)."""
    if isinstance(value, (list, tuple)):
        blob = bytearray()
        for entry in value:
            data = bytes(entry) if isinstance(entry, _CTYPES_SCALARS) else pointer(entry).to_bytes(8, "little")
            align = min(len(data), 8) or 1
            blob += bytes(-len(blob) % align) + data
        return PackedArgs(blob)
    return pointer(value) or None


def pointer_list(value: Any) -> list[int] | int | None:
    """hipModuleLaunchKernel's ``kernelParams``: None/0, a list of pointers to each argument, or
    the address of such an array."""
    if isinstance(value, (list, tuple)):
        return [pointer(entry) for entry in value]
    return pointer(value) or None


def enum_member(enum: Any, parameter: str) -> Any:
    """A converter that takes members of ``enum`` (or of hip-python's class of the same name)."""

    def convert(value: Any) -> Any:
        if isinstance(value, enum) or (isinstance(value, Enum) and type(value).__name__ == enum.__name__):
            return value
        raise TypeError(f"argument '{parameter}' must be of type '_{enum.__name__}__Base'")

    return convert


ENUM_PARAMETERS: dict[Any, Any] = {
    ErrorArg: hipError_t, DeviceAttributeArg: hipDeviceAttribute_t, FunctionAttributeArg: hipFunction_attribute}

CONVERTERS: dict[Any, Any] = {
    CInt: signed(32, "int"), CUInt: unsigned(32, "unsigned int"), CUChar: unsigned(8, "unsigned char"),
    CUShort: unsigned(16, "unsigned short"), SizeT: unsigned(64, "size_t"), Ptr: pointer, CString: c_string,
    HostFn: host_function, LaunchExtra: launch_extra, PointerList: pointer_list,
}
