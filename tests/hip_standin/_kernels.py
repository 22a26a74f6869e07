"""Modules, kernels and launches of the HIP stand-in (see hip.py for the rules it follows).

TEST DOUBLE, not AMD code. ``hipModuleLoadData`` loads an AMDGPU code object or offload bundle
(see ``_code_objects``) on the current device: its globals get device memory initialised from the
image, its kernels run the Python bodies registered by name. ``hipModuleLaunchKernel`` checks a
launch as HIP's runtime does (codes from HIP's documentation and its launch validation):

- the stream must belong to the current device (hipErrorInvalidResourceHandle), the kernel to the
  stream's device (hipErrorInvalidDevice);
- a zero dimension, a grid or block beyond the device's limits, more than ``maxThreadsPerBlock``
  threads, more dynamic shared memory than ``sharedMemPerBlock``, or both ``kernelParams`` and
  ``extra``: hipErrorInvalidValue; ``gridDim * blockDim`` of 2**32 or more on an axis:
  hipErrorInvalidConfiguration;
- a block larger than the kernel's launch bounds (``register_kernel(max_threads=)``, default
  1024): hipErrorLaunchFailure, returned by the launch itself (it poisons nothing);
- ``extra`` is HIP's ``{HIP_LAUNCH_PARAM_BUFFER_POINTER, buf, HIP_LAUNCH_PARAM_BUFFER_SIZE,
  &size, HIP_LAUNCH_PARAM_END}`` array, in exactly that order (END is 3, not CUDA's 0): anything
  else is hipErrorInvalidValue. HIP does not check the size against the kernel's arguments: it
  copies each explicit argument from ``buf`` at the offset the code object's metadata gives (see
  standin_common.arguments), so a larger size launches and a smaller one makes the kernel read
  what follows the buffer (the stand-in's garbage bytes);
- a kernel with arguments launched with neither ``kernelParams`` nor ``extra``: hipErrorInvalidValue.

A kernel's argument layout is the code object's (its NT_AMDGPU_METADATA note, see
``_code_objects``), else the ``param_sizes`` given to ``register_kernel``; its launch bound the
note's ``.max_flat_workgroup_size``, else ``register_kernel(max_threads=)``, else 1024.
"""
# ruff: noqa: N803  # parameter names follow hip-python

from __future__ import annotations

import ctypes
import math

from standin_common import arguments
from standin_common import engine as e
from standin_common import modules as m
from standin_common.controls import fail

from . import _code_objects as images
from . import _runtime as r
from ._convert import (
    Address,
    CInt,
    CString,
    CUInt,
    FunctionAttributeArg,
    LaunchExtra,
    PackedArgs,
    PointerList,
    Ptr,
    SizeT,
)
from ._types import HIP_LAUNCH_PARAM_END


def _image_bytes(image: int) -> bytes:
    """The image a pointer argument designates: the caller's buffer, or what lies at the address."""
    source = getattr(image, "source", None) if isinstance(image, Address) else None
    if source is not None:
        return ctypes.string_at(image, memoryview(source).nbytes)
    return images.read_at(image)


@r.api(None)
def hipModuleLoadData(image: Ptr) -> tuple[int]:
    st = r.STATE
    ctx = r.current(st)
    if not image:
        raise fail(1, "hipModuleLoadData: a null image")
    device = ctx.device
    try:
        code_object = images.select(_image_bytes(image), device.processor, device.features)
    except images.ImageError as err:
        raise fail(err.code, f"hipModuleLoadData: {err.why}") from None
    kernels = [m.KernelEntry(name, code_object.max_threads.get(name), code_object.params.get(name))
               for name in code_object.kernels]
    module = m.load(st, ctx, code_object.globals, kernels, r.CONTROLS, device.attr("MaxThreadsPerBlock"),
                    device.attr("MaxSharedMemoryPerBlock"))
    return (module.handle,)


def _module(st: e.State, handle: int) -> m.Module:
    if handle == 0:
        raise fail(400, "a null module")
    module: m.Module = r.lookup(st.modules, handle, "module")
    r.usable(module.ctx)
    return module


@r.api()
def hipModuleUnload(module: Ptr) -> tuple[()]:
    st = r.STATE
    found = _module(st, module)
    with st.lock:
        if found.handle not in st.modules:
            raise fail(400, f"module {module:#x} was unloaded meanwhile")
        m.unload_locked(st, found)
    return ()


def _symbol_name(name: bytes | None) -> str:
    if not name:
        raise fail(1, "a null or empty symbol name")
    return name.decode(errors="replace")


@r.api(None)
def hipModuleGetFunction(module: Ptr, kname: CString) -> tuple[int]:
    text = _symbol_name(kname)
    found = _module(r.STATE, module)
    function = found.functions.get(text)
    if function is None:
        raise fail(500, f"no kernel {text!r} in the module (kernels: {sorted(found.functions)})")
    return (function.handle,)


@r.api(None, 0)
def hipModuleGetGlobal(hmod: Ptr, name: CString) -> tuple[int, int]:
    text = _symbol_name(name)
    found = _module(r.STATE, hmod)
    alloc = found.globals.get(text)
    if alloc is None:
        raise fail(500, f"no global {text!r} in the module (globals: {sorted(found.globals)})")
    return (alloc.ptr, alloc.size)


def _function(handle: int) -> m.Function:
    if handle == 0:
        raise fail(400, "a null function")
    function: m.Function = r.lookup(r.STATE.functions, handle, "function")
    r.usable(function.module.ctx)
    return function


@r.api(0)
def hipFuncGetAttribute(attrib: FunctionAttributeArg, hfunc: Ptr) -> tuple[int]:
    function = _function(hfunc)
    device = function.module.ctx.device
    values = {0: function.max_threads, 1: 0, 2: 0, 3: 0, 4: 0, 5: device.major * 10 + device.minor,
              6: device.major * 10 + device.minor, 7: 0, 8: function.max_dynamic_shared, 9: 0}
    value = values.get(int(attrib))
    if value is None:
        raise fail(1, f"hipFuncGetAttribute: {attrib!r} is not supported")
    return (value,)


@r.api(0, 0)
def hipModuleOccupancyMaxPotentialBlockSize(f: Ptr, dynSharedMemPerBlk: SizeT, blockSizeLimit: CInt) -> tuple[int, int]:
    function = _function(f)
    device = function.module.ctx.device
    if dynSharedMemPerBlk > function.max_dynamic_shared:
        raise fail(1, f"{dynSharedMemPerBlk} B of dynamic shared memory > {function.max_dynamic_shared} B")
    return m.occupancy(function, dynSharedMemPerBlk, blockSizeLimit, device.attr("WarpSize"),
                       device.attr("MaxThreadsPerMultiProcessor"), None,
                       device.attr("MaxSharedMemoryPerMultiprocessor"), device.attr("MultiprocessorCount"))


def _arguments(function: m.Function, kernelParams: list[int] | int | None,
               extra: int | PackedArgs | None) -> bytes:
    """The argument blob, copied at launch time as HIP does."""
    if kernelParams is not None and extra is not None:
        raise fail(1, "hipModuleLaunchKernel: kernelParams and extra are both given")
    if isinstance(extra, PackedArgs):
        return arguments.hip_blob(function, bytes(extra))
    if extra is not None:
        buffer, count = arguments.hip_extra(extra, end=HIP_LAUNCH_PARAM_END)
        return arguments.hip_blob(function, arguments.hip_buffer(buffer, count, function))
    if kernelParams is None:
        if function.params:  # HIP: a kernel with parameters needs kernelParams or extra
            raise fail(1, f"hipModuleLaunchKernel: {function.name!r} takes {len(function.params)} arguments, "
                          f"neither kernelParams nor extra gives them")
        return b""
    if isinstance(kernelParams, list):
        array = (ctypes.c_void_p * max(1, len(kernelParams)))(*kernelParams)
        return arguments.packed_params(ctypes.addressof(array), function)
    return arguments.packed_params(kernelParams, function)


@r.api()
def hipModuleLaunchKernel(f: Ptr, gridDimX: CUInt, gridDimY: CUInt, gridDimZ: CUInt, blockDimX: CUInt,
                          blockDimY: CUInt, blockDimZ: CUInt, sharedMemBytes: CUInt, stream: Ptr,
                          kernelParams: PointerList, extra: LaunchExtra) -> tuple[()]:
    st = r.STATE
    queue, ctx = r.stream(st, stream)
    device = ctx.device
    if device.ordinal != r.current_ordinal(st):
        raise fail(400, f"hipModuleLaunchKernel: the stream is device {device.ordinal}'s, the current device "
                          f"is {r.current_ordinal(st)} (HIP launches only on the current device)")
    grid, block = (gridDimX, gridDimY, gridDimZ), (blockDimX, blockDimY, blockDimZ)
    threads = math.prod(block)
    if not m.within_limits(grid, block, [device.attr(f"MaxGridDim{axis}") for axis in "XYZ"],
                           [device.attr(f"MaxBlockDim{axis}") for axis in "XYZ"], device.attr("MaxThreadsPerBlock")):
        raise fail(1, f"hipModuleLaunchKernel: grid {grid} / block {block} outside the device's limits")
    if sharedMemBytes > device.attr("MaxSharedMemoryPerBlock"):
        raise fail(1, f"hipModuleLaunchKernel: {sharedMemBytes} B of dynamic shared memory > the device's "
                        f"{device.attr('MaxSharedMemoryPerBlock')} B per block")
    if any(g * b >= 1 << 32 for g, b in zip(grid, block)):
        raise fail(9, f"hipModuleLaunchKernel: grid {grid} x block {block} has 2**32 or more work-items on an axis")
    function = _function(f)
    if function.module.ctx is not ctx:
        raise fail(101, f"hipModuleLaunchKernel: {function.name!r} was loaded on device "
                          f"{function.module.ctx.device.ordinal}, the stream is device {device.ordinal}'s")
    if threads > function.max_threads:
        raise fail(719, f"Launch params {block} are larger than launch bounds ({function.max_threads}) for "
                          f"kernel {function.name}")
    impl = r.CONTROLS.kernel(function.name)
    m.params_layout(function, impl)
    params = _arguments(function, kernelParams, extra)  # type: ignore[arg-type]
    m.launch(st, queue, ctx, impl, params, grid, block, sharedMemBytes)
    return ()
