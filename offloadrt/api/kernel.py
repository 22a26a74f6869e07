"""Symbols (kernels and global variables), kernel launch and occupancy."""

from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, OffloadError
from ..plugins.common.image import GenericKernel, GlobalVariable
from ..types import SYMBOL_INFO_KINDS, KernelLaunchSizeArgs, SymbolInfo, SymbolKind
from ._entry import entry_point
from ._info import value_size
from ._state import STATE as _STATE
from ._state import Context
from .handles import (
    Device,
    Program,
    Queue,
    Symbol,
    bad_handle,
    enum_value,
    live_device,
    live_program,
    live_queue,
    live_symbol,
)

_KERNEL = SymbolKind.KERNEL


@entry_point
def olGetSymbol(ctx: Context, program: Program, name: str, kind: SymbolKind) -> Symbol:
    """The kernel or global variable ``name`` of ``program``; the same handle every time."""
    image = live_program(program)
    if name is None:
        raise OffloadError(ErrorCode.INVALID_NULL_POINTER, "name is None")
    if isinstance(name, (bytes, bytearray)):
        try:
            name = bytes(name).decode()
        except UnicodeDecodeError:
            raise OffloadError(ErrorCode.NOT_FOUND, f"the program has no symbol named {bytes(name)!r} "
                                                    f"(symbol names are UTF-8)") from None
    if not isinstance(name, str):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"name must be a str, got {type(name).__name__}")
    if "\0" in name:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"name {name!r} contains a NUL character")
    kind = enum_value(SymbolKind, kind, "symbol kind")
    assert isinstance(program, Program)
    key = (name, kind)
    with program.lock:
        symbol = program.symbols.get(key)
        if symbol is None:
            target: GenericKernel | GlobalVariable
            launch = None
            if kind is _KERNEL:
                target = image.get_kernel(name)
                gdev = program.device._gdev
                launch = gdev.launcher(target) if gdev is not None else None
            else:
                target = image.get_global(name)
            symbol = program.symbols[key] = Symbol(program, kind, name, target, launch)
    return symbol


def _symbol_value(symbol: object, requested: object) -> tuple[SymbolInfo, Any]:
    sym = live_symbol(symbol)
    prop = enum_value(SymbolInfo, requested, "symbol info")
    if prop is SymbolInfo.KIND:
        return prop, sym.kind
    if prop is SymbolInfo.NAME:
        return prop, sym.name
    target = sym._target
    if not isinstance(target, GlobalVariable):
        raise OffloadError(ErrorCode.SYMBOL_KIND,
                           f"{prop.name}: expected a symbol of kind GLOBAL_VARIABLE "
                           f"but {sym.name!r} is a {sym.kind.name}")
    return prop, target.address if prop is SymbolInfo.GLOBAL_VARIABLE_ADDRESS else target.size


@entry_point
def olGetSymbolInfo(ctx: Context, symbol: Symbol, prop: SymbolInfo) -> Any:
    """``KIND``, ``NAME``; address and size for global variables (``SYMBOL_KIND`` for kernels)."""
    return _symbol_value(symbol, prop)[1]


@entry_point
def olGetSymbolInfoSize(ctx: Context, symbol: Symbol, prop: SymbolInfo) -> int:
    """The byte size the C API reports for ``prop`` (``NAME`` counts its NUL); ``SYMBOL_KIND``
    where ``olGetSymbolInfo`` would raise it."""
    prop, value = _symbol_value(symbol, prop)
    return value_size(SYMBOL_INFO_KINDS[prop], value)


def _bad_launch_args(value: object) -> OffloadError:
    if value is None:
        return OffloadError(ErrorCode.INVALID_NULL_POINTER, "launch_size_args is None")
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"launch_size_args must be a KernelLaunchSizeArgs, got {type(value).__name__}")


def _launch_handle_error(queue: object, device: object, kernel: object, launch_size_args: object) -> OffloadError:
    """The specific error for arguments that failed olLaunchKernel's combined fast check, found in
    the order of LLVM 22's header: the handles, the launch sizes, then the queue and the kernel's kind."""
    try:
        if device is None:
            return bad_handle(device, Device, "device")
        if kernel is None:
            return bad_handle(kernel, Symbol, "kernel")
        live_device(device)
        if type(kernel) is not Symbol:
            return bad_handle(kernel, Symbol, "kernel")
        if launch_size_args is None:
            return _bad_launch_args(launch_size_args)
        if kernel.kind is not _KERNEL:
            return OffloadError(ErrorCode.SYMBOL_KIND, f"{kernel.name!r} is a {kernel.kind.name}, not a kernel")
        if queue is not None:
            live_queue(queue)
            assert isinstance(queue, Queue)
            if queue.device is not device:
                return OffloadError(ErrorCode.INVALID_DEVICE, f"the queue belongs to {queue.device!r}, not {device!r}")
        if kernel.device is not device:
            return OffloadError(ErrorCode.INVALID_DEVICE,
                                f"kernel {kernel.name!r} was loaded on {kernel.device!r}, not {device!r}")
    except OffloadError as exc:
        return exc
    return OffloadError(ErrorCode.UNKNOWN, "olLaunchKernel: inconsistent handle check")


def _launch_kernel(ctx: Context, queue: Queue | None, device: Device, kernel: Symbol, args: bytes | None,
                   launch_size_args: KernelLaunchSizeArgs) -> None:
    """Launch ``kernel`` on ``device``: in order on ``queue``, or to completion without one.

    ``args`` is the kernel's parameters packed with C alignment (or ``None``); it is copied,
    so the caller may reuse its buffer at once.
    """
    # One combined check on the hot path; _launch_handle_error names the culprit.
    if (type(device) is not Device or type(kernel) is not Symbol or kernel.kind is not _KERNEL
            or kernel.device is not device or device._gdev is None):
        raise _launch_handle_error(queue, device, kernel, launch_size_args)
    if queue is None:
        ai = None
    elif type(queue) is not Queue or queue.device is not device or queue._ai is None:
        raise _launch_handle_error(queue, device, kernel, launch_size_args)
    else:
        ai = queue._ai
    if type(launch_size_args) is not KernelLaunchSizeArgs:
        raise _bad_launch_args(launch_size_args)
    if type(args) is not bytes and args is not None:
        try:
            args = memoryview(args).tobytes()
        except TypeError:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"args must be a bytes-like object or None, got {type(args).__name__}") from None
    ls = launch_size_args
    if ls.dimensions not in (1, 2, 3):
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"launch_size_args.dimensions must be 1, 2 or 3, got {ls.dimensions}")
    ng = ls.num_groups
    gs = ls.group_size
    try:
        num_groups = (ng.x, ng.y, ng.z)
        group_size = (gs.x, gs.y, gs.z)
    except AttributeError as exc:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"launch_size_args is malformed: {exc}") from None
    device._gdev.launch_kernel(kernel._target, args or None, num_groups, group_size,  # type: ignore[union-attr,arg-type]
                               ls.dyn_shared_memory, ai)


_launch_kernel.__name__ = _launch_kernel.__qualname__ = "olLaunchKernel"
_checked_launch = entry_point(_launch_kernel)


def olLaunchKernel(queue: Queue | None, device: Device, kernel: Symbol, args: bytes | None,
                   launch_size_args: KernelLaunchSizeArgs) -> None:
    # The hot path in one frame: a queued launch whose handles are plainly right goes to the
    # device's launcher (GenericDevice.launcher), which takes it only if every later check passes
    # too. Anything else (no queue, a wrong handle or argument, a cold launch shape, tracing on,
    # no runtime) takes the checked entry point, which finds and reports what is wrong.
    # (The launcher checks that launch_size_args is a KernelLaunchSizeArgs, unless it is the very
    # object of a launch that passed.)
    ctx = _STATE.untraced
    if (ctx is not None and type(kernel) is Symbol and type(queue) is Queue
            and (type(args) is bytes or args is None) and kernel.device is device and queue.device is device):
        launch = kernel._launch
        ai = queue._ai
        if launch is not None and ai is not None and launch(ai, args, launch_size_args):
            return
    _checked_launch(queue, device, kernel, args, launch_size_args)


for _attribute in ("__doc__", "__signature__", "__offloadrt_impl__", "with_code_location"):
    setattr(olLaunchKernel, _attribute, getattr(_checked_launch, _attribute))


@entry_point
def olCalculateOptimalOccupancy(ctx: Context, device: Device, kernel: Symbol, shared_memory: int) -> int:
    """A work-group size giving the best occupancy for ``kernel`` (``UNSUPPORTED`` on some backends)."""
    gdev = live_device(device)
    sym = live_symbol(kernel, "kernel")
    if sym.kind is not _KERNEL:
        raise OffloadError(ErrorCode.SYMBOL_KIND, f"{sym.name!r} is a {sym.kind.name}, not a kernel")
    if sym.device is not device:
        raise OffloadError(ErrorCode.INVALID_DEVICE, f"kernel {sym.name!r} was loaded on {sym.device!r}")
    if shared_memory is None or not isinstance(shared_memory, int) or shared_memory < 0:
        raise OffloadError(ErrorCode.INVALID_SIZE, f"shared_memory must be a non-negative int, got {shared_memory!r}")
    target = sym._target
    assert isinstance(target, GenericKernel)
    return gdev.calculate_optimal_occupancy(target, shared_memory)
