"""Kernel arguments: parameter types, the packing plan of a signature, launch sizes.

A plan turns the arguments of a launch into the argument blob: each parameter at the next offset
aligned to its alignment (its size for scalars and pointers), as C lays out a struct of the
parameters, ending where the last parameter ends (no tail padding: a GPU's parameter buffer has
none, and CUDA refuses a longer one). Plans are compiled once per (signature, argument types) and
cached on the kernel, so a launch packs with one ``struct.pack`` call.
"""

from __future__ import annotations

import ctypes
import operator
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ErrorCode, OffloadError
from ..types import Dimensions, KernelLaunchSizeArgs

_CODES = {("i", 1): "b", ("u", 1): "B", ("i", 2): "h", ("u", 2): "H", ("i", 4): "i", ("u", 4): "I",
          ("i", 8): "q", ("u", 8): "Q", ("f", 2): "e", ("f", 4): "f", ("f", 8): "d", ("b", 1): "?"}
_C_NAMES = {"char": "int8", "signed char": "int8", "unsigned char": "uint8", "short": "int16",
            "unsigned short": "uint16", "int": "int32", "unsigned": "uint32", "unsigned int": "uint32",
            "long": "int64", "long long": "int64", "unsigned long": "uint64", "unsigned long long": "uint64",
            "size_t": "uint64", "ssize_t": "int64", "ptrdiff_t": "int64", "intptr_t": "int64",
            "uintptr_t": "uint64", "float": "float32", "double": "float64", "half": "float16", "_bool": "bool",
            "bool": "bool"}
_POINTER_NAMES = {"ptr", "pointer", "void*", "buffer"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``kind`` is "ptr", "scalar" (a number) or "raw" (bytes of a C object)."""

    name: str
    kind: str
    code: str  # the struct code of its value
    size: int
    align: int
    dtype: Any = None  # the NumPy dtype of a scalar or complex parameter
    ctype: Any = None  # the ctypes type of a raw parameter, if it was given as one


POINTER = Param("ptr", "ptr", "Q", 8, 8)


def parse_param(spec: object) -> Param:
    """The parameter a signature entry names: a type name (``"float32"``, ``"uint32"``, ``"ptr"``, C names
    such as ``"unsigned int"`` or ``"float*"``), a NumPy type or dtype, or a ctypes type."""
    if isinstance(spec, str):
        text = " ".join(spec.strip().lower().replace("const ", "").split())
        if text in _POINTER_NAMES or text.endswith("*"):
            return POINTER
        text = _C_NAMES.get(text, text)
        if text.endswith("_t") and text[:-2] in {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                                 "uint64"}:
            text = text[:-2]
        spec_for_numpy: object = text
    elif isinstance(spec, type) and issubclass(spec, (ctypes.Structure, ctypes.Union, ctypes.Array)):
        return Param(spec.__name__, "raw", f"{ctypes.sizeof(spec)}s", ctypes.sizeof(spec), ctypes.alignment(spec),
                     ctype=spec)
    elif spec is ctypes.c_void_p or (isinstance(spec, type) and issubclass(spec, ctypes._Pointer)):
        return POINTER
    else:
        spec_for_numpy = spec
    try:
        dtype = np.dtype(spec_for_numpy)  # type: ignore[call-overload]
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biufc" or not dtype.isnative:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"unknown kernel parameter type {spec!r}: use 'ptr' for pointers and buffers, or a "
                           f"number type such as 'float32', 'int64', 'uint32' (NumPy names or C names)")
    if dtype.kind == "c":
        return Param(dtype.name, "raw", f"{dtype.itemsize}s", dtype.itemsize, dtype.itemsize // 2, dtype=dtype)
    return Param(dtype.name, "scalar", _CODES[dtype.kind, dtype.itemsize], dtype.itemsize, dtype.itemsize,
                 dtype=dtype)


def parse_signature(signature: Sequence[object] | None) -> tuple[Param, ...] | None:
    if signature is None:
        return None
    if isinstance(signature, (str, bytes)) or not hasattr(signature, "__iter__"):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"a kernel signature is a sequence of parameter types such as ('float32', 'ptr', 'ptr', "
                           f"'uint32'), got {signature!r}")
    return tuple(parse_param(entry) for entry in signature)


def _inferred(value: object, index: int) -> Param:
    """The parameter of an argument when the kernel has no signature."""
    from ._array import Array
    from ._memory import Buffer

    if isinstance(value, (Buffer, Array)):
        return POINTER
    if isinstance(value, np.generic):
        return parse_param(value.dtype)
    if isinstance(value, ctypes._SimpleCData) or isinstance(value, (ctypes.Structure, ctypes.Union, ctypes.Array)):
        kind = type(value)
        return Param(kind.__name__, "raw", f"{ctypes.sizeof(kind)}s", ctypes.sizeof(kind), ctypes.alignment(kind),
                     ctype=kind)
    if isinstance(value, np.ndarray):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, _host_array_message(value, index))
    if isinstance(value, (int, float, complex)):
        raise TypeError(
            f"argument {index + 1} is a plain Python {type(value).__name__} ({value!r}) and the kernel has no "
            f"signature, so its C type is unknown. Set kernel.signature to the C types of the kernel's parameters "
            f"(for example ('float32', 'ptr', 'ptr', 'uint32')), or pass a NumPy scalar such as "
            f"numpy.{'float32' if isinstance(value, float) else 'int32'}({value!r})")
    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                       f"argument {index + 1} ({type(value).__name__}) cannot be a kernel argument: pass a Buffer or "
                       f"Array (its device pointer), a NumPy scalar, a ctypes instance, or a number with a signature")


def _expression(param: Param, value: object, index: int) -> tuple[str, str | None, Any]:
    """(the Python expression that gives argument ``index``'s packed value, the buffer it uses, a helper)."""
    from ._array import Array
    from ._memory import Buffer

    arg = f"a{index}"
    kind = type(value)
    if param.kind == "ptr":
        if kind is Buffer or isinstance(value, Buffer):
            return f"{arg}._ptr", arg, None
        if isinstance(value, Array):
            if value._strides is not None:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"argument {index + 1} is a non-contiguous Array ({value!r}): a kernel gets one "
                                   f"pointer and no strides; pass offloadrt.ascontiguousarray(array) (a C-ordered "
                                   f"copy)")
            return f"{arg}._buf._ptr + {arg}._at", f"{arg}._buf", None
        if value is None:
            return "0", None, None
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return arg, None, None
        if isinstance(value, ctypes.c_void_p):
            return f"({arg}.value or 0)", None, None
    elif param.kind == "scalar":
        if isinstance(value, (Buffer, Array)):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"argument {index + 1} is an offloadrt {kind.__name__}, but the signature says "
                               f"{param.name}; pointer parameters are 'ptr'")
        if isinstance(value, (int, float, np.number, np.bool_)) and not isinstance(value, complex):
            return arg, None, None
        if isinstance(value, ctypes._SimpleCData):
            return f"{arg}.value", None, None
    else:
        if param.dtype is not None and isinstance(value, (complex, float, int, np.number)):
            return f"_raw{index}({arg})", None, lambda v, d=param.dtype: np.asarray(v, dtype=d).tobytes()
        if param.ctype is not None and isinstance(value, param.ctype):
            return f"bytes({arg})", None, None
        if isinstance(value, (bytes, bytearray, memoryview)):
            return f"bytes({arg})", None, None
    if param.kind == "ptr" and isinstance(value, np.ndarray):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, _host_array_message(value, index))
    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                       f"argument {index + 1} ({kind.__name__}) does not fit its parameter {param.name} of the "
                       f"kernel's signature")


def _host_array_message(value: np.ndarray, index: int) -> str:
    return (f"argument {index + 1} is a NumPy array ({value.dtype}{list(value.shape)}), which lives in host memory the "
            f"kernel cannot be given; copy it to the device first: offloadrt.asarray(array, device) (and "
            f"array.get() to read results back)")


def build_plan(signature: tuple[Param, ...] | None, args: tuple[Any, ...], kernel_name: str) -> Callable[..., Any]:
    """The packing function ``plan(queue, *args) -> bytes | None`` for arguments of these types; it also
    notes the queue on the buffers it packs. ``plan.params``, ``plan.format`` and ``plan.parts`` (the
    packed expressions and the buffers they use) describe it."""
    if signature is not None and len(signature) != len(args):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"kernel '{kernel_name}' takes {len(signature)} arguments (its signature is "
                           f"({', '.join(p.name for p in signature)})), got {len(args)}")
    params = signature if signature is not None else tuple(_inferred(v, i) for i, v in enumerate(args))
    namespace: dict[str, Any] = {}
    fmt, offset = "<", 0
    values, used = [], []
    for index, (param, value) in enumerate(zip(params, args)):
        pad = -offset % param.align
        fmt += f"{pad}x" if pad else ""
        offset += pad + param.size
        fmt += param.code
        expression, buffer, helper = _expression(param, value, index)
        if helper is not None:
            namespace[f"_raw{index}"] = helper
        if buffer is not None:
            used.append(buffer)
        values.append(expression)
    # No tail padding: the blob ends where the last parameter does, as the kernel's parameter buffer
    # does on a GPU (CUDA refuses a longer one); devices that read a whole C struct extend it.
    namespace["_pack"] = struct.Struct(fmt).pack
    names = "".join(f", a{i}" for i in range(len(args)))
    lines = [f"    if {b}._queues is not q: {b}._use(q)" for b in used]
    body = f"    return _pack({', '.join(values)})" if params else "    return None"
    source = f"def plan(q{names}):\n" + "\n".join([*lines, body]) + "\n"
    exec(compile(source, f"<offloadrt packing plan of {kernel_name}>", "exec"), namespace)
    plan: Callable[..., Any] = namespace["plan"]
    plan.params = params  # type: ignore[attr-defined]
    plan.format = fmt  # type: ignore[attr-defined]
    plan.parts = (values, used, namespace)  # type: ignore[attr-defined]
    plan.typed = signature is not None  # type: ignore[attr-defined]
    return plan


# Types whose values never change: an argument of one of these that is the very object of the
# last launch packs to the same bytes, so the launcher may pass the last blob again.
_IMMUTABLE = frozenset({int, float, bool, *(type(np.dtype(c).type(0)) for c in "?bBhHiIqQefd")})
_NOTHING = object()  # identical to no argument: the launcher's "no blob kept yet"
KEEP_AFTER_MISSES = 8  # after this many launches in a row with other values, a launcher keeps only
KEEP_EVERY = 64  # every this many-th blob (a power of 2)


def _reuse_test(expression: str, arg: str) -> str | None:
    """The test that part ``expression`` of a blob (its value read into ``{value}``) differs from the
    one packed last time (``{last}``): by identity for a buffer's pointer and a plain argument (same
    object, same value), by equality for an array's pointer (a sum, a new int each time); None for
    a part that cannot tell (the bytes of a mutable ctypes object, a helper's conversion)."""
    if expression in (f"{arg}._ptr", arg):
        return "{value} is not {last}"
    if expression == f"{arg}._buf._ptr + {arg}._at":
        return "{value} != {last}"
    return None


def build_fast_launch(plan: Callable[..., Any], args: tuple[Any, ...], device: Any, symbol: Any,
                      key: tuple[Any, Any, Any], sizes: KernelLaunchSizeArgs, launch: Callable[..., Any],
                      kernel_name: str) -> Callable[..., Any]:
    """A launcher for arguments of these types: ``fast(queue, grid, block, shared_mem, args)`` launches and
    returns True, or returns False (nothing done) when anything differs from what it was built for.
    ``device`` is the kernel's ``ol*`` device: a queue of another device is refused by ``olLaunchKernel``.

    When every value packed is a buffer's or array's pointer or an argument of an immutable type
    (int, float, bool, a NumPy scalar), the launcher keeps the last blob with the values it was
    packed from, and a launch with those values again (the same objects; equal array pointers)
    passes that same ``bytes`` object instead of packing a new one: no packing, and the host
    plugin's launcher recognises the very same blob fastest. Values and blob are kept as one tuple,
    so launches of the kernel from several threads never pair a blob with another launch's values.
    ``fast.source`` is the launcher's Python source.
    """
    values, used, packing = plan.parts  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {name: value for name, value in packing.items() if name.startswith("_")
                                 and name != "__builtins__"}
    namespace.update({"_launch": launch, "_device": device, "_symbol": symbol, "_sizes": sizes, "_grid": key[0],
                      "_block": key[1], "_shared": key[2], "_cached_sizes": _SIZES.get,
                      "_errors": (struct.error, TypeError, AttributeError, OverflowError, ValueError)})
    names = [f"a{i}" for i in range(len(args))]
    checks = []
    typed = getattr(plan, "typed", False)
    for index, (param, value) in enumerate(zip(plan.params, args)):  # type: ignore[attr-defined]
        # With a signature, the packed expression itself refuses another type: ``a._ptr`` exists on a
        # Buffer only, ``a._buf`` on an Array only, and struct refuses what is no number; so only
        # types whose expression would take anything (a NULL pointer, raw bytes, a type that chose
        # the parameter) need a check.
        if typed and param.kind != "raw" and value is not None:
            continue
        namespace[f"_T{index}"] = type(value)
        checks.append(f"type(a{index}) is not _T{index}")
    # the parts of the blob that vary (a NULL pointer's "0" never does), each with the test that it
    # changed since the blob kept; no blob is kept when a part cannot tell
    varying = [(i, expression) for i, expression in enumerate(values) if expression != "0"]
    tests = [_reuse_test(expression, f"a{i}") for i, expression in varying]
    plain = [f"a{i}" for i, expression in varying if expression == f"a{i}"]
    if not typed and any(type(args[int(a[1:])]) not in _IMMUTABLE for a in plain):
        tests.append(None)  # without a signature the types are checked per launch: decided here
    if varying and None not in tests:
        namespace["_last"] = namespace["_unkept"] = (*(_NOTHING for _ in varying), None)
        namespace["_misses"] = 0
        kept = [f"k{i}" for i, _ in varying]
        read = {i: (expression if expression == f"a{i}" else f"v{i}") for i, expression in varying}
        parts = [read.get(i, expression) for i, expression in enumerate(values)]
        # with a signature any number type may come: keep only values of the types the launcher was
        # built for, and those only if immutable
        storable = []
        if typed:  # (without one, the types are checked on entry)
            storable = [f"type({a}) is _T{a[1:]}" for a in plain if type(args[int(a[1:])]) in _IMMUTABLE]
            if len(storable) < len(plain):
                storable = ["False"]
            for a in plain:
                namespace[f"_T{a[1:]}"] = type(args[int(a[1:])])
        differs = " or ".join(test.format(value=read[i], last=k)  # type: ignore[union-attr]
                              for (i, _), test, k in zip(varying, tests, kept))
        # Each value is read once: the blob kept is paired with the very values it was packed from.
        # After KEEP_AFTER_MISSES launches in a row that found other values, the launcher keeps only
        # every KEEP_EVERY-th new blob and forgets it at the next new values (values that change
        # every launch would only pay for keeping them, and the test then fails at its first
        # value); a launch that finds the kept values again keeps every blob again.
        pack = (
            ("        try:\n"
             + "".join(f"            v{i} = {expression}\n" for i, expression in varying if read[i] != expression)
             + "        except _errors:\n"
             "            return False\n" if any(read[i] != expression for i, expression in varying) else "")
            + f"        {', '.join(kept)}, blob = _last\n"
            f"        if {differs}:\n"
            "            try:\n"
            f"                blob = _pack({', '.join(parts)})\n"
            "            except _errors:\n"
            "                return False\n"
            "            _misses += 1\n"
            f"            if _misses <= {KEEP_AFTER_MISSES} or not _misses & {KEEP_EVERY - 1}:\n"
            + (f"                if {' and '.join(storable)}:\n    " if storable else "")
            + f"                _last = ({', '.join(read[i] for i, _ in varying)}, blob)\n"
            "            else:\n"
            "                _last = _unkept\n"  # the next launch's test fails at its first value
            "        elif _misses:\n"
            "            _misses = 0\n"
        )
        nonlocal_ = "        nonlocal _last, _misses\n"
    else:
        pack = (
            "        try:\n"
            f"            blob = {f'_pack({chr(44).join(values)})' if values else 'None'}\n"
            "        except _errors:\n"
            "            return False\n"
        )
        nonlocal_ = ""
    # everything the launcher reads is a variable of the enclosing factory: a closure cell, read as fast
    # as a local (keyword defaults would cost a dictionary look-up per call)
    namespace["type"] = type
    # The launch sizes it was built for, matched by value only where the type is the same too: 4.0 ==
    # 4 and (2.0, 1) == (2, 1), but a float extent is an error (the checked path says so).
    namespace["_exact"] = exact_sizes
    same = " and ".join(
        f"({name} is {cell} or ({name} == {cell} and type({name}) is int))" if type(value) is int
        else f"{name} is {cell}"
        for name, cell, value in zip(("grid", "block", "shared"), ("_grid", "_block", "_shared"), key))
    cells = sorted(namespace)
    unpack = f"        {', '.join(names)}{',' if len(names) == 1 else ''} = args\n" if names else \
        "        if args:\n            return False\n"
    source = (
        f"def factory({', '.join(cells)}):\n"
        "    def fast(q, grid, block, shared, args):\n"
        + nonlocal_
        + unpack
        + (f"        if {' or '.join(checks)}:\n            return False\n" if checks else "")
        + f"        if {same}:\n"
        "            sizes = _sizes\n"
        "        else:\n"
        "            sizes = _cached_sizes((grid, block, shared))\n"
        "            if sizes is None or not _exact(grid, block, shared):\n"
        "                return False\n"
        "        handle = q._handle\n"
        "        if handle is None:\n"
        "            return False\n"
        + pack
        + "".join(f"        if {b}._queues is not q:\n            {b}._use(q)\n" for b in used)
        + "        _launch(handle, _device, _symbol, blob, sizes)\n"
        "        return True\n"
        "    return fast\n"
    )
    scope: dict[str, Any] = {}
    exec(compile(source, f"<offloadrt launcher of {kernel_name}>", "exec"), scope)
    fast: Callable[..., Any] = scope["factory"](**namespace)
    fast.source = source  # type: ignore[attr-defined]
    return fast


def not_built(*_: Any) -> bool:
    """The launcher of a kernel before its first launch: always a miss."""
    return False


def explain_failure(plan: Callable[..., Any], args: tuple[Any, ...], kernel_name: str,
                    error: Exception) -> OffloadError:
    """Which argument made ``plan`` fail, and why, in words."""
    from ._array import Array
    from ._memory import Buffer

    for index, (param, value) in enumerate(zip(plan.params, args)):  # type: ignore[attr-defined]
        buffer = value._buf if isinstance(value, Array) else value
        if isinstance(buffer, Buffer):
            if buffer._ptr is None:
                return OffloadError(ErrorCode.INVALID_ARGUMENT,
                                    f"argument {index + 1} of kernel '{kernel_name}' is a closed buffer ({buffer!r})")
            continue
        try:
            build_plan((param,), (value,), kernel_name)(None, value)
        except (struct.error, TypeError, OverflowError, ValueError) as exc:
            return OffloadError(ErrorCode.INVALID_ARGUMENT,
                                f"argument {index + 1} of kernel '{kernel_name}' ({value!r}) does not fit its "
                                f"parameter {param.name}: {exc}")
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"the arguments of kernel '{kernel_name}' cannot be packed: {error}")


# ---- launch sizes ------------------------------------------------------------------------------

_SIZES: dict[tuple[Any, Any, Any], KernelLaunchSizeArgs] = {}
_SIZES_KEPT = 1024


def exact_sizes(grid: Any, block: Any, shared: Any) -> bool:
    """Whether a launch's sizes are ints or tuples of ints (not floats or bools that equal them)."""
    for value in (grid, block):
        if type(value) is tuple:
            if any(type(item) is not int for item in value):
                return False
        elif type(value) is not int:
            return False
    return type(shared) is int


def launch_sizes(grid: Any, block: Any, shared_mem: Any) -> KernelLaunchSizeArgs:
    """The ``KernelLaunchSizeArgs`` of a launch over ``grid`` groups of ``block`` items each (an int or a
    tuple of up to 3), with ``shared_mem`` bytes of work-group memory; cached (never mutated)."""
    groups, group_dims = _extent(grid, "grid")
    items, item_dims = _extent(block, "block")
    try:
        if isinstance(shared_mem, (bool, np.bool_)):
            raise TypeError
        shared = operator.index(shared_mem)
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"shared_mem must be an integer number of bytes, got {type(shared_mem).__name__}") from None
    if shared < 0:
        raise OffloadError(ErrorCode.INVALID_SIZE, f"shared_mem must not be negative, got {shared}")
    sizes = KernelLaunchSizeArgs(max(group_dims, item_dims), Dimensions(*groups), Dimensions(*items), shared)
    try:
        if len(_SIZES) < _SIZES_KEPT:
            _SIZES[grid, block, shared_mem] = sizes
    except TypeError:
        pass  # a list: not cached
    return sizes


def _extent(value: Any, what: str) -> tuple[tuple[int, int, int], int]:
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(items) <= 3:
        raise OffloadError(ErrorCode.INVALID_SIZE, f"{what} has 1 to 3 extents, got {len(items)}")
    extents = []
    for item in items:
        try:
            if isinstance(item, (bool, np.bool_)):
                raise TypeError
            extent = operator.index(item)
        except TypeError:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{what} is an int or a tuple of up to 3 ints, got {value!r}") from None
        if not 1 <= extent < 1 << 32:
            raise OffloadError(ErrorCode.INVALID_SIZE, f"every extent of {what} must be in 1 .. 2**32-1, got {value!r}")
        extents.append(extent)
    return (*extents, *(1,) * (3 - len(extents))), len(extents)  # type: ignore[return-value]
