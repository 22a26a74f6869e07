"""Kernel signatures: ``Kernel.signature`` entries from a source's declarations, from the host ABI's
``OL_HOST_KERNEL_ARGS`` and from PTX, and their JSON form for the cache.

Signatures use the forms ``Kernel.signature`` accepts: NumPy type names (``"float32"``), ``"ptr"``,
and ``ctypes.Structure`` types for structs, laid out from the struct's definition in the source.
The declarations are read by :mod:`offloadrt.compile._declarations`, whose names are importable
from here too.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

from ._declarations import (
    KERNEL_MARK,
    LOCAL_MARK,
    KernelDecl,
    Param,
    SignatureError,
    SourceInfo,
    analyse,
    clean,
    extern_local_arrays,
    parse_param,
    parse_params,
    scalar_dtype,
    type_name,
    types_of,
)

__all__ = ["KERNEL_MARK", "LOCAL_MARK", "KernelDecl", "Param", "SignatureError", "SourceInfo", "analyse", "clean",
           "describe", "extern_local_arrays", "host_abi_kernels", "matches_ptx", "parse_param", "parse_params",
           "ptx_entries", "ptx_signature", "rebuild", "scalar_dtype", "signature", "size_and_alignment", "symbol_for",
           "type_name", "types_of"]

_CTYPES = {"int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16, "uint16": ctypes.c_uint16,
           "int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64, "uint64": ctypes.c_uint64,
           "float32": ctypes.c_float, "float64": ctypes.c_double, "bool": ctypes.c_bool, "float16": ctypes.c_uint16}
_SIZES = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "float16": 2, "int32": 4, "uint32": 4,
          "float32": 4, "int64": 8, "uint64": 8, "float64": 8}


# ---- signatures for Kernel.signature -------------------------------------------------------------

_STRUCT_TYPES: dict[tuple[Any, ...], type] = {}


def _ctype(type_text: str, info: SourceInfo, depth: int = 0) -> Any:
    if depth > 16:
        raise SignatureError("structs nested too deeply")
    count = 1
    array = re.fullmatch(r"(.*)\[(\d+)\]", type_text)
    if array:
        type_text, count = array.group(1), int(array.group(2))
    if type_text == "ptr":
        base: Any = ctypes.c_void_p
    else:
        dtype = scalar_dtype(type_text, info.typedefs)
        if dtype is not None:
            base = _CTYPES[dtype]
        elif re.fullmatch(r"(enum\s+)?\w+", type_text.strip()) and type_text.strip().startswith("enum"):
            base = ctypes.c_int
        else:
            base = _struct_type(type_text, info, depth + 1)
    return base * count if array else base


def _struct_type(type_text: str, info: SourceInfo, depth: int) -> type:
    name = type_name(type_text)
    fields = info.structs.get(name)
    if fields is None:
        raise SignatureError(f"the layout of {type_text!r} is unknown (define it in the source as a plain struct)")
    members = tuple((field_name, _ctype(kind, info, depth)) for field_name, kind in fields)
    key = (name, members)
    made = _STRUCT_TYPES.get(key)
    if made is None:
        made = type(name, (ctypes.Structure,), {"_fields_": list(members), "__module__": "offloadrt.kernels"})
        _STRUCT_TYPES[key] = made
    return made


def signature(kernel: KernelDecl, info: SourceInfo) -> tuple[Any, ...]:
    """``Kernel.signature`` of a kernel; raises :class:`SignatureError` when a type is unknown."""
    if kernel.params is None:
        raise SignatureError(kernel.problem or "unreadable parameters")
    entries: list[Any] = []
    for param in kernel.params:
        if param.pointer:
            entries.append("ptr")
            continue
        dtype = scalar_dtype(param.type_text, info.typedefs)
        if dtype is not None:
            entries.append(dtype)
        elif re.match(r"enum\b", param.type_text):
            entries.append("int32")
        else:
            entries.append(_struct_type(param.type_text, info, 0))
    return tuple(entries)


def describe(entries: tuple[Any, ...]) -> list[Any]:
    """A signature as JSON data (structs as their fields), for the cache."""
    return [_describe(entry) for entry in entries]


def _describe(entry: Any) -> Any:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, type) and issubclass(entry, ctypes.Array):
        return {"array": _describe(entry._type_), "length": entry._length_}
    if entry is ctypes.c_void_p:
        return "ptr"
    if isinstance(entry, type) and issubclass(entry, ctypes.Structure):
        return {"struct": entry.__name__, "fields": [[f[0], _describe(f[1])] for f in entry._fields_]}
    for name, kind in _CTYPES.items():
        if entry is kind:
            return name
    raise TypeError(f"cannot describe {entry!r}")


def rebuild(described: list[Any]) -> tuple[Any, ...]:
    """The signature :func:`describe` wrote."""
    return tuple(_rebuild(entry, top=True) for entry in described)


def _rebuild(entry: Any, top: bool = False) -> Any:
    if isinstance(entry, str):
        if top:
            return entry
        return ctypes.c_void_p if entry == "ptr" else _CTYPES[entry]
    if "array" in entry:
        return _rebuild(entry["array"]) * int(entry["length"])
    members = tuple((name, _rebuild(kind)) for name, kind in entry["fields"])
    key = (entry["struct"], members)
    made = _STRUCT_TYPES.get(key)
    if made is None:
        made = type(entry["struct"], (ctypes.Structure,),
                    {"_fields_": list(members), "__module__": "offloadrt.kernels"})
        _STRUCT_TYPES[key] = made
    return made


def size_and_alignment(entry: Any) -> tuple[int, int]:
    """The bytes and alignment a signature entry takes in the argument blob."""
    if isinstance(entry, str):
        size = 8 if entry == "ptr" else _SIZES[entry]
        return size, size
    return ctypes.sizeof(entry), ctypes.alignment(entry)


# ---- the host kernel ABI ---------------------------------------------------------------------------

def host_abi_kernels(text: str) -> dict[str, tuple[Any, ...] | None]:
    """Signatures of host-ABI kernels from their ``OL_HOST_KERNEL_ARGS(kernel, struct args)``: the
    struct's members are the parameters (``OL_HOST_KERNEL_NO_ARGS``: none)."""
    body = clean(text)
    info = types_of(body)
    found: dict[str, tuple[Any, ...] | None] = {}
    for match in re.finditer(r"\bOL_HOST_KERNEL_NO_ARGS\s*\(\s*(\w+)\s*\)", body):
        found[match.group(1)] = ()
    for match in re.finditer(r"\bOL_HOST_KERNEL_ARGS\s*\(\s*(\w+)\s*,\s*([^)]+)\)", body):
        try:
            layout = _struct_type(match.group(2), info, 0)
            members: Any = getattr(layout, "_fields_")  # noqa: B009  # a ctypes.Structure made at run time
            found[match.group(1)] = tuple(_top_entry(member[1]) for member in members)
        except SignatureError:
            found[match.group(1)] = None
    return found


def _top_entry(kind: Any) -> Any:
    if kind is ctypes.c_void_p:
        return "ptr"
    for name, ctype in _CTYPES.items():
        if kind is ctype and name != "float16":
            return name
    return kind


# ---- PTX ----------------------------------------------------------------------------------------------

_PTX_ENTRY = re.compile(r"\.entry\s+([\w$.%]+)\s*\(([^)]*)\)")
_PTX_TYPES = {"u8": "uint8", "s8": "int8", "b8": "uint8", "u16": "uint16", "s16": "int16", "b16": "uint16",
              "f16": "float16", "u32": "uint32", "s32": "int32", "b32": "uint32", "f32": "float32",
              "u64": "ptr", "s64": "int64", "b64": "ptr", "f64": "float64"}


def ptx_entries(ptx: str) -> dict[str, list[tuple[str, int, int]]]:
    """Each ``.entry``'s parameters as (PTX type, size, alignment); a ``.b8 name[N]`` array is ("b8[]", N, align)."""
    entries: dict[str, list[tuple[str, int, int]]] = {}
    for match in _PTX_ENTRY.finditer(ptx):
        params = []
        for declaration in match.group(2).split(","):
            if not declaration.strip():
                continue
            align_match = re.search(r"\.align\s+(\d+)", declaration)
            type_match = re.search(r"\.(u8|s8|b8|u16|s16|b16|f16|u32|s32|b32|f32|u64|s64|b64|f64)\b", declaration)
            array = re.search(r"\[(\d+)\]", declaration)
            kind = type_match.group(1) if type_match else "b8"
            unit = int(kind[1:]) // 8
            if array:
                size = unit * int(array.group(1))
                params.append((f"{kind}[]", size, int(align_match.group(1)) if align_match else unit))
            else:
                params.append((kind, unit, int(align_match.group(1)) if align_match and not array else unit))
        entries[match.group(1)] = params
    return entries


def ptx_signature(params: list[tuple[str, int, int]]) -> tuple[Any, ...]:
    """A signature from PTX parameters alone: 64-bit values as "ptr" (an address or an int), others by
    their PTX type (which carries no signedness for ``.u``/``.b``), arrays as opaque bytes."""
    entries: list[Any] = []
    for kind, size, align in params:
        if kind.endswith("[]"):
            unit = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}.get(align)
            if unit is None or size % align:
                raise SignatureError(f"cannot lay out a {size}-byte parameter aligned to {align}")
            entries.append(_rebuild({"struct": f"bytes{size}_align{align}",
                                     "fields": [["bytes", {"array": _describe(unit), "length": size // align}]]}))
        else:
            entries.append(_PTX_TYPES[kind])
    return tuple(entries)


def matches_ptx(entries: tuple[Any, ...], params: list[tuple[str, int, int]]) -> bool:
    """Whether a source signature agrees with the PTX parameters in number and sizes."""
    return len(entries) == len(params) and all(
        size_and_alignment(entry)[0] == size for entry, (_, size, _) in zip(entries, params))


def symbol_for(name: str, cxx_linkage: bool, symbols: list[str]) -> str:
    """The symbol of kernel ``name`` among a binary's ``symbols``: itself, or (C++ linkage) its mangled name."""
    if name in symbols or not cxx_linkage:
        return name
    prefix = f"_Z{len(name)}{name}"
    for symbol in symbols:
        if symbol.startswith(prefix):
            return symbol
    return name
