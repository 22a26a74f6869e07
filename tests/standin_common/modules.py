"""Loaded modules, their kernels and globals, and kernel launches of the driver stand-ins.

TEST DOUBLE, not NVIDIA or AMD code. A front end parses its driver's image format (PTX/cubin,
AMDGPU code objects) into kernel names, parameter layouts and globals; :func:`load` gives the
globals device memory initialised from the image and the kernels the Python bodies registered by
name. A launch's argument blob is built when the launch is made, as the drivers do (see
:mod:`.arguments`), and its body runs on the stream (:func:`launch`).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .controls import Controls, DriverError, KernelImpl, Layout
from .engine import Context, Op, State, Stream, new_handle
from .memory import Allocation

Dim3 = tuple[int, int, int]


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
    params: Layout | None  # (offset, size) of each parameter; None: unknown
    max_threads: int
    max_dynamic_shared: int
    carveout: int = -1


@dataclass
class KernelEntry:
    """A kernel an image declares: its launch bound and parameter layout where the image says."""

    name: str
    max_threads: int | None = None
    params: Layout | None = None  # (offset, size) of each parameter


def load(st: State, ctx: Context, globals: Mapping[str, tuple[int, bytes]],  # noqa: A002
         kernels: Iterable[KernelEntry], controls: Controls, default_max_threads: int, shared: int) -> Module:
    """A module of ``ctx``: each global ``{name: (size, initial bytes)}`` in device memory (out of
    memory undoes the others), each kernel a function whose launch bound is the image's, else the
    registered body's, else ``default_max_threads``; ``shared`` is its dynamic shared memory limit."""
    module = Module(new_handle(), ctx)
    try:
        for name, (size, initial) in globals.items():
            alloc = st.allocate(ctx.device, size, "global")
            ctypes.memmove(alloc.ptr, initial, min(len(initial), size))
            module.globals[name] = alloc
    except DriverError:
        with st.lock:
            for alloc in module.globals.values():
                st.release_locked(alloc)
        raise
    registered = controls.kernel_table()
    with st.lock:
        for kernel in kernels:
            impl = registered.get(kernel.name)
            limit = kernel.max_threads or (impl.max_threads if impl else None) or default_max_threads
            params = kernel.params if kernel.params is not None else (impl.params if impl else None)
            function = Function(new_handle(), module, kernel.name, params, limit, shared)
            module.functions[kernel.name] = function
            st.functions[function.handle] = function
        st.modules[module.handle] = module
    return module


def unload_locked(st: State, module: Module) -> None:
    """Forget ``module``, its functions, and free its globals (lock held)."""
    del st.modules[module.handle]
    module.unloaded = True
    for function in module.functions.values():
        st.functions.pop(function.handle, None)
    for alloc in module.globals.values():
        st.release_locked(alloc)


def within_limits(grid: Dim3, block: Dim3, grid_limits: list[int], block_limits: list[int],
                  max_threads: int) -> bool:
    """Whether every dimension is at least 1 and within the device's limits."""
    return (all(1 <= g <= limit for g, limit in zip(grid, grid_limits))
            and all(1 <= b <= limit for b, limit in zip(block, block_limits))
            and math.prod(block) <= max_threads)


def occupancy(function: Function, dynamic: int, block_limit: int, warp: int, threads_per_unit: int,
              blocks_per_unit: int | None, shared_per_unit: int, units: int) -> tuple[int, int]:
    """(the smallest grid that fills the device, the block size) for ``function`` with ``dynamic``
    bytes of dynamic shared memory and blocks of at most ``block_limit`` threads (0: no limit)."""
    block = min(function.max_threads, block_limit if block_limit > 0 else function.max_threads)
    block = block - block % warp if block >= warp else block
    per_unit = threads_per_unit // block
    if blocks_per_unit is not None:
        per_unit = min(per_unit, blocks_per_unit)
    if dynamic:
        per_unit = min(per_unit, shared_per_unit // dynamic)
    return max(1, per_unit) * units, block


def params_layout(function: Function, impl: KernelImpl | None) -> None:
    """Take the registered body's parameter layout where the image gave none."""
    if function.params is None and impl is not None:
        function.params = impl.params


def launch(st: State, queue: Stream | None, ctx: Context, impl: KernelImpl | None, params: bytes, grid: Dim3,
           block: Dim3, shared: int) -> None:
    """Queue a run of ``impl`` (no body: the kernel does nothing) on ``queue``."""
    ordinal = ctx.device.ordinal

    def run() -> None:
        if impl is not None:
            impl.fn(params, grid, block, shared, ordinal)

    st.costs.launch()
    st.enqueue(queue, ctx, Op("kernel", run))
