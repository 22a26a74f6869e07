"""Modules, kernels and launches of the CUDA stand-in (see driver.py for the rules it follows).

TEST DOUBLE, not NVIDIA code. ``cuModuleLoadDataEx`` reads PTX, cubin and fatbin images (see
``_images``) in the current context; a launch is checked against the device's limits and the
kernel's, then runs the Python body registered under the kernel's name (standin_common.modules).

A kernel's parameter layout comes from its PTX ``.param`` list (C alignment), else from the
``param_sizes`` given to ``register_kernel`` (cubin and fatbin images: the stand-in reads no
``.nv.info`` section). ``cuFuncGetParamInfo`` answers from it: (offset, size) of parameter *i*,
CUDA_ERROR_INVALID_VALUE for the first index past the last parameter (as on the H100), and
CUDA_ERROR_NOT_SUPPORTED, with a diagnostic, where the stand-in knows no layout (a limitation of
the stand-in, not the driver's answer). ``cuLaunchKernel``'s ``extra`` buffer size is checked
against the end of the last parameter as the H100 does (standin_common.arguments).
"""
# ruff: noqa: N803  # parameter names follow cuda.bindings.driver

from __future__ import annotations

import math
from typing import Any

from standin_common import arguments, modules
from standin_common.controls import DriverError, c_layout, fail

from . import _images
from . import _runtime as r
from ._convert import as_int, jit_options, packed_params, unsigned, write_log
from ._types import CU_LAUNCH_PARAM_END, CUdeviceptr, CUfunction, CUjit_option, CUmodule, CUresult


@r.api(1)
def cuModuleLoadDataEx(image: Any, numOptions: int, options: Any, optionValues: Any) -> tuple[Any]:
    st = r.STATE
    jit = jit_options(numOptions, options, optionValues)
    ctx = st.current()
    error_log, error_size = int(CUjit_option.CU_JIT_ERROR_LOG_BUFFER), int(
        CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
    if image is None or (isinstance(image, int) and image == 0):
        raise DriverError(1)
    data = _images.read_at(image) if isinstance(image, int) else bytes(memoryview(image))
    device = ctx.device
    try:
        info = _images.parse(data, st.binary_kernels, st.binary_globals)
        sm = device.arch()
        if info.target_sm is not None and info.target_sm > sm:
            raise _images.ImageError("CUDA_ERROR_INVALID_PTX", f"ptxas fatal : SM version specified by .target "
                                     f"(sm_{info.target_sm}) is higher than the device's (sm_{sm})")
    except _images.ImageError as err:
        write_log(jit, error_log, error_size, err.log)
        raise fail(int(getattr(CUresult, err.code_name)), err.log or err.code_name) from None
    module = modules.load(
        st, ctx, {name: (variable.size, variable.init) for name, variable in info.globals.items()},
        [modules.KernelEntry(name, kernel.max_threads, None if kernel.params is None else c_layout(kernel.params))
         for name, kernel in info.kernels.items()],
        r.CONTROLS, device.attr("MAX_THREADS_PER_BLOCK"), device.attr("MAX_SHARED_MEMORY_PER_BLOCK"))
    return (CUmodule(module.handle),)


@r.api()
def cuModuleUnload(hmod: Any) -> tuple[()]:
    st = r.STATE
    st.current()
    with st.lock:
        modules.unload_locked(st, r.lookup(st.modules, hmod, "module"))
    return ()


def _symbol(hmod: Any, name: Any) -> tuple[modules.Module, str]:
    if not isinstance(name, bytes):
        raise TypeError(f"expected bytes, {type(name).__name__} found")
    st = r.STATE
    st.current()
    with st.lock:
        return r.lookup(st.modules, hmod, "module"), name.decode()


@r.api(1)
def cuModuleGetFunction(hmod: Any, name: bytes) -> tuple[Any]:
    module, text = _symbol(hmod, name)
    function = module.functions.get(text)
    if function is None:
        raise fail(500, f"no kernel {text!r} in the module")
    return (CUfunction(function.handle),)


@r.api(2)
def cuModuleGetGlobal(hmod: Any, name: bytes) -> tuple[Any, int]:
    module, text = _symbol(hmod, name)
    alloc = module.globals.get(text)
    if alloc is None:
        raise fail(500, f"no global {text!r} in the module")
    return (CUdeviceptr(alloc.ptr), alloc.size)


def _function(hfunc: Any) -> modules.Function:
    st = r.STATE
    st.current()
    with st.lock:
        found: modules.Function = r.lookup(st.functions, hfunc, "function")
    return found


@r.api()
def cuFuncSetAttribute(hfunc: Any, attrib: Any, value: int) -> tuple[()]:
    function = _function(hfunc)
    which, value = int(attrib), int(value)
    device = function.module.ctx.device
    if which == 8:  # MAX_DYNAMIC_SHARED_SIZE_BYTES
        if not 0 <= value <= device.attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"):
            raise fail(1, f"dynamic shared memory {value} is above the device's opt-in limit")
        function.max_dynamic_shared = value
    elif which == 9:  # PREFERRED_SHARED_MEMORY_CARVEOUT
        if not -1 <= value <= 100:
            raise DriverError(1)
        function.carveout = value
    elif which < 8:  # read-only attributes
        raise DriverError(1)
    return ()


@r.api(1)
def cuFuncGetAttribute(attrib: Any, hfunc: Any) -> tuple[int]:
    function = _function(hfunc)
    arch = function.module.ctx.device.arch()
    values = {0: function.max_threads, 4: 32, 5: arch, 6: arch, 8: function.max_dynamic_shared, 9: function.carveout}
    return (values.get(int(attrib), 0),)


@r.api()
def cuLaunchKernel(f: Any, gridDimX: int, gridDimY: int, gridDimZ: int, blockDimX: int, blockDimY: int,
                   blockDimZ: int, sharedMemBytes: int, hStream: Any, kernelParams: Any, extra: Any) -> tuple[()]:
    st = r.STATE
    ctx = st.current()
    function = _function(f)
    queue, _ = r.stream(st, hStream, ctx)
    if function.module.ctx is not ctx or (queue is not None and queue.ctx is not ctx):
        raise fail(400, "cuLaunchKernel: the function and the stream must belong to the current context")
    extra_address = int(extra)  # typed void* in the bindings: an int (None is a TypeError there too)
    grid, block = (int(gridDimX), int(gridDimY), int(gridDimZ)), (int(blockDimX), int(blockDimY), int(blockDimZ))
    device = ctx.device
    if not modules.within_limits(grid, block, [device.attr(f"MAX_GRID_DIM_{axis}") for axis in "XYZ"],
                                 [device.attr(f"MAX_BLOCK_DIM_{axis}") for axis in "XYZ"],
                                 device.attr("MAX_THREADS_PER_BLOCK")):
        raise fail(1, f"launch of {function.name!r}: grid {grid} / block {block} outside the device limits")
    threads = math.prod(block)
    if threads > function.max_threads:
        raise fail(701, f"launch of {function.name!r}: {threads} threads > the kernel's {function.max_threads}")
    shared = int(sharedMemBytes)
    if shared > function.max_dynamic_shared:
        raise fail(1, f"launch of {function.name!r}: {shared} B dynamic shared memory > "
                      f"{function.max_dynamic_shared} B (raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)")
    has_params = kernelParams is not None and not (isinstance(kernelParams, int) and kernelParams == 0)
    if has_params and extra_address:
        raise fail(1, "cuLaunchKernel: kernelParams and extra are both given")
    impl = r.CONTROLS.kernel(function.name)
    modules.params_layout(function, impl)
    if extra_address:
        params = arguments.cuda_blob(function, *arguments.cuda_extra(extra_address, CU_LAUNCH_PARAM_END))
    else:
        params = packed_params(kernelParams, function) if has_params else b""
    modules.launch(st, queue, ctx, impl, params, grid, block, shared)
    return ()


@r.api(2)
def cuFuncGetParamInfo(func: Any, paramIndex: int) -> tuple[int, int]:
    function = _function(func)
    index = unsigned(paramIndex)
    modules.params_layout(function, r.CONTROLS.kernel(function.name))
    if function.params is None:
        raise fail(801, f"cuFuncGetParamInfo: the stand-in does not know the parameters of {function.name!r} (a "
                        f"cubin or fatbin: give param_sizes to cuda_standin.register_kernel)")
    if index >= len(function.params):  # how a caller counts the parameters: no diagnostic
        raise DriverError(1)
    return function.params[index]


@r.api(2)
def cuOccupancyMaxPotentialBlockSize(func: Any, blockSizeToDynamicSMemSize: Any, dynamicSMemSize: int,
                                     blockSizeLimit: int) -> tuple[int, int]:
    function = _function(func)  # blockSizeToDynamicSMemSize is not simulated: dynamicSMemSize counts
    device = function.module.ctx.device
    dynamic = as_int(dynamicSMemSize)
    if dynamic > function.max_dynamic_shared:
        return (0, 0)
    return modules.occupancy(function, dynamic, as_int(blockSizeLimit), device.attr("WARP_SIZE") or 1,
                             device.attr("MAX_THREADS_PER_MULTIPROCESSOR"),
                             device.attr("MAX_BLOCKS_PER_MULTIPROCESSOR"),
                             device.attr("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"), device.attr("MULTIPROCESSOR_COUNT"))
