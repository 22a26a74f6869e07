"""cuda_standin: a TEST DOUBLE for NVIDIA's ``cuda.bindings.driver`` (not NVIDIA code).

The module :mod:`cuda_standin.driver` has the bindings' function names, parameter order and
``(CUresult, *outputs)`` results, and simulates the CUDA driver's documented behaviour on the
host (stream order, CUDA_ERROR_NOT_READY while work is pending, host functions on a driver
thread, events with timestamps, sticky errors), so the CUDA plugin's logic can be tested on any
Linux machine. Memory is real host memory: device pointers can be read through ctypes. Host
memory registered with ``cuMemHostRegister`` is tracked (``state().registered``); give a device
``attributes={"CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 0}`` and registrations get device
addresses of their own, which :func:`read` and :func:`write` translate.

Use in a test::

    import cuda_standin as standin

    @pytest.fixture
    def cuda_driver(monkeypatch):
        driver = standin.install(monkeypatch, devices=2)   # fresh driver, in sys.modules
        yield driver
        standin.shutdown()

Controls:

- :func:`install` / :func:`reset` / :func:`shutdown`: put the stand-in in ``sys.modules``; start
  a fresh driver (devices, driver version, a failing ``cuInit``, a missing driver library);
  stop its stream threads and free its memory.
- :func:`inject`: make the next calls of a driver function fail with a code, doing nothing.
- :func:`register_kernel`: a Python body for a kernel name; it may raise :class:`KernelFault`.
- :func:`set_binary_symbols`: kernel and global names of cubin/fatbin images.
- :func:`poison`: put a device's context in a sticky error state at once (it lasts until the
  next :func:`reset`, as a sticky fault lasts for the process on a GPU).
- :func:`costs`: what the driver was asked to do so far (host functions, timed and untimed
  events, launches) and its simulated driver time at the H100's prices (standin_common.costs).
- :data:`calls` (every call as ``(name, args)``), :data:`diagnostics` (why a call failed),
  :func:`state` (the simulated driver, for white-box checks; ``state().blocking_call_timeout``
  is how long a copy into pageable memory waits for its stream before failing), :func:`read` /
  :func:`write`.
- :data:`GARBAGE`: what a kernel reads past the end of a too-short ``extra`` parameter buffer.

What the stand-in does that the H100 showed (launch buffer sizes, sticky faults, when copies
return, event and host-function prices) is documented where it is simulated: driver.py,
_kernels.py, _memory.py and standin_common.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from standin_common import calls as _calls
from standin_common import engine as _engine
from standin_common.arguments import GARBAGE
from standin_common.controls import KernelBody, KernelFault
from standin_common.costs import Costs

from . import _runtime, driver
from ._devices import DeviceSpec
from ._runtime import STICKY, calls, diagnostics

__all__ = ["GARBAGE", "STICKY", "Costs", "DeviceSpec", "KernelFault", "calls", "costs", "diagnostics", "driver",
           "inject", "install", "poison", "read", "register_kernel", "reset", "set_binary_symbols", "shutdown", "state",
           "write"]


def reset(devices: int | Sequence[DeviceSpec] = 2, *, driver_version: int = 12040, init_error: Any = None,
          library_missing: bool = False) -> None:
    """Stop the current simulated driver and start a fresh one.

    ``devices``: how many default GPUs (compute capability 9.0), or their specs. ``init_error``:
    the code ``cuInit`` returns (e.g. ``CUresult.CUDA_ERROR_NO_DEVICE``). ``library_missing``:
    every call raises ``DynamicLibNotFoundError``, as the bindings do without libcuda. Clears
    :data:`calls`, :data:`diagnostics`, injections and registered kernels.
    """
    shutdown()
    specs = [DeviceSpec() for _ in range(devices)] if isinstance(devices, int) else list(devices)
    _runtime.FRONT.clear()
    _runtime.STATE = _runtime.CudaState(specs, driver_version, None if init_error is None else int(init_error),
                                        library_missing)


def shutdown() -> None:
    """Stop every stream thread of the current driver and free its memory."""
    _engine.shut_down(_runtime.STATE)


def install(monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> types.ModuleType:
    """:func:`reset` (with ``reset_args``), then make ``from cuda.bindings import driver`` return the
    stand-in for the rest of the test (monkeypatch undoes it); returns the stand-in module."""
    reset(**reset_args)

    def package(name: str) -> types.ModuleType:
        try:
            return importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__path__ = []
            monkeypatch.setitem(sys.modules, name, module)
            return module

    cuda, bindings = package("cuda"), package("cuda.bindings")
    monkeypatch.setattr(cuda, "bindings", bindings, raising=False)
    monkeypatch.setattr(bindings, "driver", driver, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    return driver


def inject(function_name: str, code: Any, times: int | None = 1, skip: int = 0) -> None:
    """Make calls of ``function_name`` return ``code`` and do nothing: after ``skip`` calls that
    work normally, the next ``times`` calls (``None``: all of them). Injections of one function
    apply in the order they were made."""
    if not hasattr(driver, function_name) or not function_name.startswith("cu"):
        raise ValueError(f"cuda_standin has no driver function {function_name!r}")
    _runtime.CONTROLS.inject(function_name, int(code), times, skip)


def register_kernel(name: str, fn: KernelBody,
                    *, param_sizes: Iterable[int | tuple[int, int]] | None = None,
                    max_threads: int | None = None) -> None:
    """Run ``fn(params, grid, block, shared_mem, device)`` on the stream's thread whenever a kernel
    called ``name`` is launched. ``params`` is the argument blob (bytes) the launch passed;
    ``device`` the ordinal. ``fn`` may raise :class:`KernelFault`. ``param_sizes`` ((size,
    alignment) or size per parameter) lets launches through ``kernelParams`` pack arguments when
    the image does not describe them (cubin, fatbin); ``max_threads`` is the kernel's limit."""
    _runtime.CONTROLS.register_kernel(name, fn, param_sizes, max_threads)


def set_binary_symbols(kernels: Iterable[str] = (), globals: dict[str, int] | None = None) -> None:  # noqa: A002
    """Kernel names and ``{global name: size}`` that cubin and fatbin images loaded from now on contain
    (in addition to what a cubin's own symbol table lists)."""
    from ._images import KernelInfo

    st = _runtime.STATE
    st.binary_kernels = {name: KernelInfo(name) for name in kernels}
    st.binary_globals = dict(globals or {})


def poison(device: int = 0, code: Any = 700) -> None:
    """Put device ``device``'s context in the sticky error state ``code`` (default ILLEGAL_ADDRESS),
    as if a kernel had just faulted."""
    _calls.poison(_runtime.STATE, device, int(code))


def costs() -> Costs:
    """What the running driver was asked to do since it started, and its simulated driver time."""
    return _runtime.STATE.costs.snapshot()


def state() -> _runtime.CudaState:
    """The running simulated driver (devices, contexts, streams, allocations), for white-box checks."""
    return _runtime.STATE


def read(address: int, size: int) -> bytes:
    """``size`` bytes at a (device) address; a registration's device address reads its host memory."""
    return _calls.read(_runtime.STATE, address, size)


def write(address: int, data: bytes) -> None:
    """Store ``data`` at a (device) address; a registration's device address writes its host memory."""
    _calls.write(_runtime.STATE, address, data)
