"""One-line kernels on every device: :func:`elementwise` and :func:`reduction`.

Each object generates one portable ``<gpuintrin.h>`` C source from its parameters and expressions,
compiles it per device through :meth:`Device.compile` (``lang="gpu-c"``, so the disk cache
applies) and keeps the program per device. The source holds two forms of each kernel, and the
launch picks one per device type:

- GPUs: one element per work-item, 256-item groups; a reduction's first pass reduces a strided
  share per item, then the group in work-group memory with barriers, one partial per group, and a
  second pass does the same over the partials in one group.
- the host: a work-group runs on one thread, and a group that may reach a barrier runs its items as
  fibers; so one item per group runs a serial loop over a contiguous chunk (barrier-free: a plain
  loop the compiler vectorizes), a reduction's items keep several accumulators, and the second
  pass is one item over the partials.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ErrorCode, OffloadError
from ..types import DeviceInfo, DeviceType
from . import _array, _queue

if TYPE_CHECKING:
    from ._device import Device
    from ._program import Kernel, Program
    from ._queue import Queue

GPU_GROUP = 256  # work-items per group on GPUs (a power of two: the tree halves it)
GPU_REDUCTION_GROUPS = 1024  # most first-pass groups of a GPU reduction (its second pass is one group)
HOST_CHUNK_MIN = 1 << 14  # fewest elements one host work-item runs (its fixed cost is about 10 ns)
HOST_CHUNKS_PER_CORE = 8  # chunks per core: enough for the pool's workers to even out
ACCUMULATORS = 16  # a host item's independent accumulators: the loop vectorizes and hides add latency

# C element types and the NumPy types of the arrays a pointer to them takes
_C_TYPES: dict[str, tuple[str, ...]] = {
    "float": ("float32",), "double": ("float64",), "_Float16": ("float16",),
    "char": ("int8", "uint8"), "signed char": ("int8",), "unsigned char": ("uint8",),
    "short": ("int16",), "unsigned short": ("uint16",), "int": ("int32",), "unsigned": ("uint32",),
    "unsigned int": ("uint32",), "long": ("int64",), "long long": ("int64",), "unsigned long": ("uint64",),
    "unsigned long long": ("uint64",), "size_t": ("uint64",), "ptrdiff_t": ("int64",), "bool": ("bool",),
    "_Bool": ("bool",),
    **{f"{sign}int{bits}_t": (f"{sign}int{bits}",) for sign in ("", "u") for bits in (8, 16, 32, 64)},
}
_RESULT_C_TYPES = {"float32": "float", "float64": "double", "bool": "bool",
                   **{f"{sign}int{bits}": f"{sign}int{bits}_t" for sign in ("", "u") for bits in (8, 16, 32, 64)}}
_QUALIFIERS = re.compile(r"\b(const|volatile|restrict|__restrict__|__restrict)\b")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*$")
_PARAM = re.compile(r"^(?P<type>.*?)(?P<name>[A-Za-z_]\w*)\s*$", re.DOTALL)
_HEADER = """#include <gpuintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#ifndef INFINITY
#define INFINITY __builtin_inff()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif
"""


@dataclass(frozen=True)
class Param:
    """One parameter of a generated kernel: its name, C declaration, and for pointers the dtypes taken."""

    name: str
    decl: str
    pointer: bool
    dtypes: tuple[str, ...] | None  # the arrays' dtypes a pointer takes (None: any, ``void *``)


def parse_params(params: str) -> tuple[Param, ...]:
    """The parameters of a C parameter list (``"float a, const float *x, float *y"``): scalars and
    pointers to numbers. INVALID_ARGUMENT says what cannot be a parameter here."""
    if not isinstance(params, str):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"params is a C parameter list (a str), got "
                                                       f"{type(params).__name__}")
    parsed: list[Param] = []
    for text in (part.strip() for part in params.split(",")):
        match = _PARAM.match(text)
        if match is None or not match.group("type").strip():
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"cannot read the parameter {text!r} of {params!r}: write 'type name', such as "
                               f"'float a' or 'const float *x'")
        name, kind = match.group("name"), match.group("type")
        stars = kind.count("*")
        base = " ".join(_QUALIFIERS.sub(" ", kind.replace("*", " ")).split())
        if name == "i" or name.startswith("__"):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"parameter name {name!r} is reserved (i is the element index; names starting with "
                               f"__ are the generated code's)")
        if any(p.name == name for p in parsed):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"parameter {name!r} appears twice in {params!r}")
        if stars > 1 or "[" in kind or (base == "void" and not stars) or (base != "void" and base not in _C_TYPES):
            known = ", ".join(sorted(_C_TYPES))
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"parameter {text!r}: a parameter is a number ({known}) or a pointer to one "
                               f"(void * takes an array of any type)")
        parsed.append(Param(name, " ".join(text.split()), stars == 1,
                            None if base == "void" else _C_TYPES[base]))
    return tuple(parsed)


def _kernel_name(name: str | None, default: str) -> str:
    if name is None:
        return default
    if not isinstance(name, str) or not _IDENTIFIER.match(name) or name.startswith("__"):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"a kernel name is a C identifier not starting with __, "
                                                       f"got {name!r}")
    return name


def _expression(text: str, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{what} is C code (a non-empty str), got {text!r}")
    return text.strip().rstrip(";")


# ---- the generated source ------------------------------------------------------------------------------

def elementwise_source(params: Sequence[Param], body: str, name: str, preamble: str = "") -> str:
    """The portable source of an elementwise kernel: ``name(params..., int64_t n, int64_t chunk)``, each
    work-item running ``body`` for ``chunk`` consecutive elements ``i`` (chunk 1 on GPUs)."""
    decls = ", ".join(p.decl for p in params)
    return f"""{_HEADER}{preamble}
__gpu_kernel void {name}({decls}, int64_t __ol_n, int64_t __ol_chunk) {{
  int64_t __ol_start = ((int64_t)__gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x()) * __ol_chunk;
  int64_t __ol_end = __ol_n - __ol_start < __ol_chunk ? __ol_n : __ol_start + __ol_chunk;
  for (int64_t __ol_j = __ol_start; __ol_j < __ol_end; ++__ol_j) {{
    const int64_t i = __ol_j;
    {body};
  }}
}}
"""


def _serial(name: str, decls: str, map_expr: str) -> str:
    """A barrier-free pass: each item reduces its chunk with ACCUMULATORS accumulators into out[item]."""
    return f"""
__gpu_kernel void {name}({decls}, int64_t __ol_n, int64_t __ol_chunk, __ol_T *__ol_out) {{
  int64_t __ol_item = (int64_t)__gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  int64_t __ol_start = __ol_item * __ol_chunk;
  int64_t __ol_end = __ol_n - __ol_start < __ol_chunk ? __ol_n : __ol_start + __ol_chunk;
  __ol_T __ol_acc[__OL_ACCUMULATORS];
  for (int __ol_k = 0; __ol_k < __OL_ACCUMULATORS; ++__ol_k)
    __ol_acc[__ol_k] = __ol_identity();
  int64_t __ol_j = __ol_start;
  for (; __ol_end - __ol_j >= __OL_ACCUMULATORS; __ol_j += __OL_ACCUMULATORS)
    for (int __ol_k = 0; __ol_k < __OL_ACCUMULATORS; ++__ol_k) {{
      const int64_t i = __ol_j + __ol_k;
      __ol_acc[__ol_k] = __ol_reduce(__ol_acc[__ol_k], (__ol_T)({map_expr}));
    }}
  for (; __ol_j < __ol_end; ++__ol_j) {{
    const int64_t i = __ol_j;
    __ol_acc[0] = __ol_reduce(__ol_acc[0], (__ol_T)({map_expr}));
  }}
  for (int __ol_w = __OL_ACCUMULATORS / 2; __ol_w > 0; __ol_w /= 2)
    for (int __ol_k = 0; __ol_k < __ol_w; ++__ol_k)
      __ol_acc[__ol_k] = __ol_reduce(__ol_acc[__ol_k], __ol_acc[__ol_k + __ol_w]);
  __ol_out[__ol_item] = __ol_acc[0];
}}
"""


def _tree(name: str, decls: str, map_expr: str) -> str:
    """A GPU pass: each item reduces a strided share, then the group halves it in work-group memory
    between barriers (the group size is a power of two up to __OL_GROUP); out[group] is its result."""
    return f"""
__gpu_kernel void {name}({decls}, int64_t __ol_n, __ol_T *__ol_out) {{
  uint32_t __ol_t = __gpu_thread_id_x(), __ol_nt = __gpu_num_threads_x();
  int64_t __ol_stride = (int64_t)__ol_nt * __gpu_num_blocks_x();
  __ol_T __ol_acc = __ol_identity();
  for (int64_t __ol_j = (int64_t)__gpu_block_id_x() * __ol_nt + __ol_t; __ol_j < __ol_n; __ol_j += __ol_stride) {{
    const int64_t i = __ol_j;
    __ol_acc = __ol_reduce(__ol_acc, (__ol_T)({map_expr}));
  }}
  __ol_tile[__ol_t] = __ol_acc;
  __gpu_sync_threads();
  for (uint32_t __ol_w = __ol_nt / 2; __ol_w > 0; __ol_w /= 2) {{
    if (__ol_t < __ol_w)
      __ol_tile[__ol_t] = __ol_reduce(__ol_tile[__ol_t], __ol_tile[__ol_t + __ol_w]);
    __gpu_sync_threads();
  }}
  if (__ol_t == 0)
    __ol_out[__gpu_block_id_x()] = __ol_tile[0];
}}
"""


def reduction_source(params: Sequence[Param], map_expr: str, reduce_expr: str, identity: str, c_type: str,
                     name: str, preamble: str = "") -> str:
    """The portable source of a reduction: ``<name>_chunks`` and ``<name>_combine`` (serial, the host),
    ``<name>_groups`` and ``<name>_combine_groups`` (work-group trees, GPUs)."""
    decls = ", ".join(p.decl for p in params)
    partials = "const __ol_T *__ol_in"
    return (f"""{_HEADER}{preamble}
typedef {c_type} __ol_T;
#define __OL_ACCUMULATORS {ACCUMULATORS}
#define __OL_GROUP {GPU_GROUP}
static inline __ol_T __ol_identity(void) {{ return (__ol_T)({identity}); }}
static inline __ol_T __ol_reduce(__ol_T a, __ol_T b) {{ return (__ol_T)({reduce_expr}); }}
/* loader_uninitialized: GPU work-group memory has no initial value (AMDGPU insists on it) */
__gpu_local __ol_T __ol_tile[__OL_GROUP] __attribute__((loader_uninitialized));
""" + _serial(f"{name}_chunks", decls, map_expr) + _serial(f"{name}_combine", partials, "__ol_in[i]")
            + _tree(f"{name}_groups", decls, map_expr) + _tree(f"{name}_combine_groups", partials, "__ol_in[i]"))


# ---- calling -------------------------------------------------------------------------------------------

def _contiguous(array: _array.Array) -> bool:
    """Whether an Array is C-contiguous (Arrays may be strided views: read what they tell, if anything)."""
    if getattr(array, "_strides", None) is None:  # C order, as Array keeps it (and Arrays without strides)
        return True
    flags = getattr(array, "flags", None)
    told = getattr(flags, "c_contiguous", None) if flags is not None else None
    if isinstance(told, bool):
        return told
    strides = getattr(array, "strides", None)
    if strides is None:
        return True
    expected, step = [], array.dtype.itemsize
    for extent in reversed(array.shape):
        expected.append(step)
        step *= extent
    return all(extent <= 1 or int(have) == want
               for extent, have, want in zip(array.shape, strides, reversed(expected)))


class _Generated:
    """What elementwise and reduction kernels share: parameters, the source, programs per device."""

    _kind = "kernel"

    def __init__(self, params: str, name: str, source: str, options: Sequence[str]) -> None:
        self.params = parse_params(params)
        if not any(p.pointer for p in self.params):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"a {self._kind} needs an array parameter (a pointer) to size its launch; got "
                               f"{params!r}")
        self.name = name
        self.source = source
        if isinstance(options, str) or not all(isinstance(option, str) for option in options):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, "options must be a sequence of str")
        self.options = tuple(options)
        # per parameter: None for a scalar, else the dtypes its arrays may have (empty: any)
        self._takes = tuple(None if not p.pointer else frozenset(np.dtype(d) for d in p.dtypes or ())
                            for p in self.params)
        self._programs: weakref.WeakKeyDictionary[Device, Program] = weakref.WeakKeyDictionary()
        self._cores: weakref.WeakKeyDictionary[Device, int] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # guards _programs (two threads compiling for one device keep one program)

    def program(self, device: Device) -> Program:
        """The generated source compiled for ``device`` (once per device; the disk cache keeps the image)."""
        program = self._programs.get(device)
        if program is None or program._handle is None:
            made = device.compile(self.source, self.options, lang="gpu-c")
            with self._lock:
                program = self._programs.get(device)
                if program is None or program._handle is None:
                    self._programs[device] = program = made
        return program

    def _kernel(self, device: Device, suffix: str = "") -> Kernel:
        return self.program(device).kernel(self.name + suffix)

    def _check(self, args: tuple[Any, ...], queue: Queue | None) -> tuple[Device, int]:
        """The device and element count of a call's arguments, each checked against its parameter."""
        if len(args) != len(self.params):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{self._label()} takes {len(self.params)} arguments "
                               f"({', '.join(p.decl for p in self.params)}), got {len(args)}")
        device: Device | None = None
        sizes: list[tuple[str, int]] = []
        first = ""
        for param, takes, value in zip(self.params, self._takes, args):
            if takes is not None:
                if not isinstance(value, _array.Array):
                    hint = " (copy it with offloadrt.asarray first)" if isinstance(value, np.ndarray) else ""
                    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                       f"{self._label()}: parameter '{param.decl}' takes an offloadrt Array, got "
                                       f"{type(value).__name__}{hint}")
                if takes and value.dtype not in takes:
                    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                       f"{self._label()}: parameter '{param.decl}' takes an array of "
                                       f"{' or '.join(param.dtypes or ())}, got {value.dtype}")
                if not _contiguous(value):
                    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                       f"{self._label()}: parameter '{param.name}' is a non-contiguous array; "
                                       f"kernels index arrays as contiguous, so make a contiguous copy first")
                if device is None:
                    device, first = value.device, param.name
                elif value.device is not device:
                    raise OffloadError(ErrorCode.INVALID_DEVICE,
                                       f"{self._label()}: array '{param.name}' is on {value.device} but "
                                       f"'{first}' is on {device}; all arrays must be on one device")
                sizes.append((param.name, value.size))
            elif not isinstance(value, (int, float, np.number, np.bool_)):
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"{self._label()}: parameter '{param.decl}' takes a number, got "
                                   f"{type(value).__name__}")
        assert device is not None  # the constructor insists on a pointer parameter
        if len({size for _, size in sizes}) > 1:
            listed = ", ".join(f"{name} has {size}" for name, size in sizes)
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{self._label()}: the arrays must have the same number of elements: {listed}")
        if queue is not None:
            if not isinstance(queue, _queue.Queue):
                raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"queue must be an offloadrt Queue, got "
                                                               f"{type(queue).__name__}")
            if queue.device is not device:
                raise OffloadError(ErrorCode.INVALID_DEVICE,
                                   f"{self._label()}: the arrays are on {device} but {queue!r} runs on "
                                   f"{queue.device}; use a queue of {device}")
        return device, sizes[0][1]

    def _label(self) -> str:
        return f"{self._kind} '{self.name}'"


def _scalar(value: Any) -> Any:
    """A NumPy scalar as the Python number the kernel's signature converts to its parameter's C type."""
    return value.item() if isinstance(value, np.generic) else value


def _run(device: Device, queue: Queue | None, args: tuple[Any, ...], work: Any) -> None:
    """Run ``work(queue)`` on ``queue``, or without one on a queue of its own after the work given so
    far to the arrays' queues, waiting for it (as ``Array.numpy()`` orders itself)."""
    if queue is not None:
        work(queue)
        return
    with device.queue() as own:
        seen: list[Queue] = []
        for value in args:
            ordered = getattr(value, "queue", None) if isinstance(value, _array.Array) else None
            if ordered is not None and ordered._handle is not None and not any(ordered is q for q in seen):
                seen.append(ordered)
                own.wait(ordered.record())
        work(own)


def _host_chunks(device: Device, n: int) -> tuple[int, int]:
    """(chunks, elements per chunk) for a host launch: a few chunks per core, none tiny."""
    cores = max(1, int(device.info.get(DeviceInfo.NUM_COMPUTE_UNITS) or 1))
    chunk = max(HOST_CHUNK_MIN, -(-n // (cores * HOST_CHUNKS_PER_CORE)))
    chunk = -(-chunk // 64) * 64  # whole cache lines of every element size
    return max(1, -(-n // chunk)), chunk


class ElementwiseKernel(_Generated):
    """``body`` run for every element index ``i`` of the arrays passed; see :func:`elementwise`."""

    _kind = "elementwise kernel"

    def __init__(self, params: str, body: str, name: str | None = None, preamble: str = "",
                 options: Sequence[str] = ()) -> None:
        kernel_name = _kernel_name(name, "elementwise")
        self.body = _expression(body, "body")
        parsed = parse_params(params)
        super().__init__(params, kernel_name, elementwise_source(parsed, self.body, kernel_name, preamble), options)

    def __call__(self, *args: Any, queue: Queue | None = None) -> None:
        device, n = self._check(args, queue)
        if n == 0:
            return
        kernel = self._kernel(device)
        values = tuple(_scalar(a) for a in args)
        if device.type == DeviceType.HOST:
            groups, chunk = _host_chunks(device, n)
            grid, block = groups, 1
        else:
            grid, block, chunk = -(-n // GPU_GROUP), GPU_GROUP, 1
        _run(device, queue, args, lambda q: q.launch(kernel, grid, block, *values, n, chunk))

    def __repr__(self) -> str:
        return f"<ElementwiseKernel {self.name}({', '.join(p.decl for p in self.params)}): {self.body}>"


class ReductionKernel(_Generated):
    """``reduce_expr`` over ``map_expr`` of every element index; see :func:`reduction`."""

    _kind = "reduction"

    def __init__(self, params: str, map_expr: str, reduce_expr: str, identity: str, dtype: Any,
                 name: str | None = None, preamble: str = "", options: Sequence[str] = ()) -> None:
        kernel_name = _kernel_name(name, "reduction")
        self.map_expr = _expression(map_expr, "map_expr")
        self.reduce_expr = _expression(reduce_expr, "reduce_expr")
        self.identity = _expression(str(identity) if isinstance(identity, (int, float)) else identity, "identity")
        self.dtype = _array._dtype(dtype)
        c_type = _RESULT_C_TYPES.get(self.dtype.name)
        if c_type is None:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"a reduction's dtype is one of {', '.join(_RESULT_C_TYPES)}, not {self.dtype}")
        parsed = parse_params(params)
        source = reduction_source(parsed, self.map_expr, self.reduce_expr, self.identity, c_type, kernel_name,
                                  preamble)
        super().__init__(params, kernel_name, source, options)

    def __call__(self, *args: Any, queue: Queue | None = None) -> _array.Array:
        device, n = self._check(args, queue)
        values = tuple(_scalar(a) for a in args)
        out = _array.empty((), self.dtype, device, queue)
        host = device.type == DeviceType.HOST
        first = self._kernel(device, "_chunks" if host else "_groups")
        second = self._kernel(device, "_combine" if host else "_combine_groups")
        if host:
            groups, chunk = _host_chunks(device, n) if n else (0, 0)
        else:
            groups = min(GPU_REDUCTION_GROUPS, -(-n // GPU_GROUP))
        if groups <= 1:  # one pass: the partial is the result
            partials = out
        else:
            partials = _array.empty(groups, self.dtype, device, queue)

        def work(q: Queue) -> None:
            if n:
                if host:
                    q.launch(first, groups, 1, *values, n, chunk, partials)
                else:
                    q.launch(first, groups, GPU_GROUP, *values, n, partials)
            if partials is not out or not n:
                count = groups if n else 0
                if host:
                    q.launch(second, 1, 1, partials, count, max(count, 1), out)
                else:
                    q.launch(second, 1, GPU_GROUP, partials, count, out)

        try:
            _run(device, queue, args, work)
        finally:
            if partials is not out:
                partials.buffer.close()  # the pool reuses it only after the queue's work on it
        return out

    def __repr__(self) -> str:
        return (f"<ReductionKernel {self.name}({', '.join(p.decl for p in self.params)}) -> {self.dtype}: "
                f"reduce {self.reduce_expr} of {self.map_expr} from {self.identity}>")


def elementwise(params: str, body: str, name: str | None = None, *, preamble: str = "",
                options: Sequence[str] = ()) -> ElementwiseKernel:
    """An elementwise kernel that runs on every device: ``body`` for each element index ``i``.

    ``params`` is a C parameter list of numbers and pointers to numbers (``"float a, const float
    *x, float *y"``); ``body`` is C using ``i`` (an ``int64_t``) and the parameters
    (``"y[i] = a * x[i] + y[i]"``; several statements are separated by ``;``). ``preamble`` is C
    put before the kernel (helper functions, macros); ``options`` go to the compiler.

    Call it with one argument per parameter: Arrays for pointers (C-contiguous, of the pointer's
    element type, all on one device and with the same number of elements, which sizes the launch;
    ``INVALID_ARGUMENT`` or ``INVALID_DEVICE`` otherwise) and numbers for scalars (converted to the
    parameter's C type). With ``queue`` (a queue of the arrays' device) it runs in the queue's
    order; without one it runs on a queue of its own after the work given so far to the arrays'
    queues, and returns when it is done. It returns None. The source is compiled the first time
    it runs on a device (cached on disk; ``COMPILE_FAILURE`` holds the compiler's log).
    """
    return ElementwiseKernel(params, body, name, preamble, options)


def reduction(params: str, map_expr: str, reduce_expr: str, identity: str, dtype: Any, name: str | None = None, *,
              preamble: str = "", options: Sequence[str] = ()) -> ReductionKernel:
    """A reduction that runs on every device: ``reduce_expr`` over ``map_expr`` of every index ``i``.

    ``map_expr`` is the value of element ``i`` (``"x[i] * y[i]"``), ``reduce_expr`` combines two
    values ``a`` and ``b`` (``"a + b"``, ``"a > b ? a : b"``) and must be associative and
    commutative (the order of the combinations differs between devices), ``identity`` is a C
    expression for the neutral value (``"0"``, ``"-INFINITY"``), ``dtype`` the result's type (bool,
    an integer type, float32 or float64: the C type of ``a``, ``b`` and the partial results).
    ``params``, the arguments, ``preamble``, ``options`` and ``queue`` are as for
    :func:`elementwise`. A call returns a new 0-d Array of ``dtype`` on the arrays' device (read it
    with ``.numpy()``; with ``queue``, it is the array's queue, so ``numpy()`` waits for the
    result). No elements give the identity.
    """
    return ReductionKernel(params, map_expr, reduce_expr, identity, dtype, name, preamble, options)


__all__ = ["ElementwiseKernel", "ReductionKernel", "elementwise", "reduction"]

