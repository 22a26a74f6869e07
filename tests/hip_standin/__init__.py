"""hip_standin: a TEST DOUBLE for AMD's hip-python ``hip.hip`` module (not AMD code).

The module :mod:`hip_standin.hip` has hip-python 10's function names, parameters (converted as
hip-python converts them) and ``(hipError_t, *outputs)`` results, and simulates the HIP runtime's
documented behaviour on the host with tests/standin_common's engine (stream order, hipErrorNotReady
while work is pending, host functions on a stream thread, events with timestamps, sticky faults
that poison a device), so the AMDGPU plugin's logic can be tested on any Linux machine. Memory is
real host memory: device pointers can be read through ctypes. Host memory registered with
``hipHostRegister`` is tracked (``state().registered``); a device given
``attributes={"CanUseHostPointerForRegisteredMem": 0}`` makes registrations get device addresses
of their own, which :func:`read` and :func:`write` translate. :mod:`hip_standin.images` builds
the AMDGPU code objects and offload bundles ``hipModuleLoadData`` takes.

Use in a test::

    import hip_standin as standin

    @pytest.fixture
    def hip(monkeypatch):
        module = standin.install(monkeypatch, devices=2)   # fresh runtime; `from hip import hip` finds it
        yield module
        standin.shutdown()

Controls:

- :func:`install` / :func:`reset` / :func:`shutdown`: make ``hip.hip`` the stand-in; start a fresh
  runtime (devices, driver version, a failing init, a missing ``libamdhip64.so``); stop its
  stream threads and free its memory.
- :func:`inject`: make the next calls of a function fail with a code, doing nothing.
- :func:`register_kernel`: a Python body for a kernel name; it may raise :class:`KernelFault`.
- :func:`poison`: put a device in a sticky error state at once (it lasts until the next
  :func:`reset`: on a real AMD GPU the runtime aborts the process on a device exception).
- :func:`costs`: what the runtime was asked to do so far (host functions, timed and untimed
  events, launches) and its simulated driver time, at the H100's prices (standin_common.costs).
- :data:`calls` (every call as ``(name, args)``), :data:`diagnostics` (why a call failed),
  :func:`state` (the simulated runtime, for white-box checks; ``state().blocking_call_timeout``
  is how long a copy with pageable memory waits for its stream before failing), :func:`read` /
  :func:`write`.
- :data:`GARBAGE`: what a kernel reads past the end of a too-short ``extra`` argument buffer.
- :func:`replay_against_real`: replay recorded calls against the installed hip-python, to prove
  it accepts every argument the plugin passed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
import types
from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from typing import Any

import pytest
from standin_common import calls as _calls
from standin_common.arguments import GARBAGE
from standin_common.controls import KernelBody, KernelFault
from standin_common.costs import Costs
from standin_common.engine import State, shut_down

from . import _runtime, hip, images
from ._devices import DeviceSpec
from ._runtime import STICKY, calls, diagnostics
from ._types import hipError_t

__all__ = ["GARBAGE", "STICKY", "Costs", "DeviceSpec", "KernelFault", "calls", "costs", "diagnostics", "hip", "images",
           "inject", "install", "poison", "read", "real_module", "register_kernel", "replay_against_real", "reset",
           "shutdown", "state", "write"]


def reset(devices: int | Sequence[DeviceSpec] = 2, *, driver_version: int = 60342134, init_error: Any = None,
          library_missing: bool = False) -> None:
    """Stop the current simulated runtime and start a fresh one.

    ``devices``: how many default GPUs (AMD Instinct MI210, gfx90a:sramecc+:xnack-), or their
    specs. ``driver_version``: what hipDriverGetVersion and hipRuntimeGetVersion return.
    ``init_error``: the hipError_t that hipInit, and every call that would initialise the
    runtime, returns. ``library_missing``: every call raises hip-python's RuntimeError about
    dlopen'ing libamdhip64.so (hipGetErrorName/String return ``(hipSuccess, None)``, as
    hip-python's do). Clears :data:`calls`, :data:`diagnostics`, injections and registered kernels.
    """
    shutdown()
    specs = [DeviceSpec() for _ in range(devices)] if isinstance(devices, int) else list(devices)
    code = None if init_error is None else int(hipError_t(int(init_error)))
    _runtime.FRONT.clear()
    _runtime.STATE = _runtime.new_state(specs, driver_version, code, library_missing)


def shutdown() -> None:
    """Stop every stream thread of the current runtime and free its memory."""
    shut_down(_runtime.STATE)


def install(monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> types.ModuleType:
    """:func:`reset` (with ``reset_args``), then make ``from hip import hip`` and ``import hip.hip``
    return the stand-in for the rest of the test, even where hip-python is installed
    (monkeypatch restores the real modules); returns the stand-in module."""
    reset(**reset_args)
    package = types.ModuleType("hip", "hip_standin's stand-in for hip-python's package (TEST DOUBLE)")
    package.__path__ = []
    package.hip = hip  # type: ignore[attr-defined]
    package.__standin__ = True  # type: ignore[attr-defined]

    def missing(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"hip_standin provides only hip.hip, not hip.{name}")

    package.__getattr__ = missing  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "hip", package)
    monkeypatch.setitem(sys.modules, "hip.hip", hip)
    return hip


def inject(function_name: str, code: Any, times: int | None = 1, skip: int = 0) -> None:
    """Make calls of ``function_name`` return ``code`` (a hipError_t) and do nothing: after
    ``skip`` calls that work normally, the next ``times`` calls (``None``: all of them).
    Injections of one function apply in the order they were made."""
    if not getattr(getattr(hip, function_name, None), "__hip_standin__", False):
        raise ValueError(f"hip_standin has no function {function_name!r}")
    value = int(hipError_t(int(code)))  # hip-python could not return a code outside hipError_t
    _runtime.CONTROLS.inject(function_name, value, times, skip)


def register_kernel(name: str, fn: KernelBody,
                    *, param_sizes: Iterable[int | tuple[int, int]] | None = None,
                    max_threads: int | None = None) -> None:
    """Run ``fn(params, grid, block, shared_mem, device)`` on the stream's thread whenever a kernel
    called ``name`` is launched. ``params`` is the argument blob (bytes) the launch passed;
    ``device`` the ordinal. ``fn`` may raise :class:`KernelFault`. ``param_sizes`` ((size,
    alignment) or size per parameter) gives the kernel its argument layout where its code object
    has no metadata note (``images.code_object`` writes one only when given ``args``);
    ``max_threads`` is its launch bound where the note gives none (default: the device's
    maxThreadsPerBlock). Modules loaded afterwards pick these up."""
    _runtime.CONTROLS.register_kernel(name, fn, param_sizes, max_threads)


def poison(device: int = 0, code: Any = 700) -> None:
    """Put device ``device`` in the sticky error state ``code`` (default hipErrorIllegalAddress),
    as if a kernel had just faulted there."""
    _calls.poison(_runtime.STATE, device, int(hipError_t(int(code))))


def costs() -> Costs:
    """What the running runtime was asked to do since it started, and its simulated driver time."""
    return _runtime.STATE.costs.snapshot()


def state() -> State:
    """The running simulated runtime (devices, streams, events, modules, allocations), for white-box checks."""
    return _runtime.STATE


def read(address: int, size: int) -> bytes:
    """``size`` bytes at a (device) address; a registration's device address reads its host memory."""
    return _calls.read(_runtime.STATE, address, size)


def write(address: int, data: bytes) -> None:
    """Store ``data`` at a (device) address; a registration's device address writes its host memory."""
    _calls.write(_runtime.STATE, address, data)


# ---- the real hip-python ---------------------------------------------------------------------------

def real_module() -> types.ModuleType | None:
    """hip-python's real ``hip.hip`` module (``rocm.bindings.hip`` in hip-python 10), or None."""
    candidates = ["rocm.bindings.hip"]
    if not getattr(sys.modules.get("hip"), "__standin__", False):
        candidates.append("hip.hip")  # hip-python before 10, while the stand-in is not installed
    for name in candidates:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if not getattr(module, "__standin__", False) and hasattr(module, "hipInit"):
            return module
    return None


def _library_missing(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "libamdhip64" in str(exc)


@contextlib.contextmanager
def _dlopen_reports_silenced() -> Iterator[None]:
    """hip-python's hipGetErrorName/String print the dlopen failure's traceback and report it as
    "Exception ignored": silence both, pass anything else on."""
    previous = sys.unraisablehook
    printed = io.StringIO()

    def hook(unraisable: Any) -> None:
        if not _library_missing(unraisable.exc_value):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        with contextlib.redirect_stderr(printed):
            yield
    finally:
        sys.unraisablehook = previous
        if printed.getvalue() and "libamdhip64" not in printed.getvalue():
            sys.stderr.write(printed.getvalue())


def _as_real(value: Any, real: types.ModuleType) -> Any:
    """A stand-in enum member as the real module's member of the same name (lists, tuples inside)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_as_real(v, real) for v in value)
    if isinstance(value, Enum) and type(value).__module__.startswith("hip_standin"):
        return getattr(real, type(value).__name__)[value.name]
    return value


Refusal = tuple[str, tuple[Any, ...], BaseException]


def replay_against_real(calls: Iterable[tuple[str, tuple[Any, ...]]]) -> list[Refusal]:
    """Replay ``calls`` (``(name, args)`` pairs, as recorded in :data:`hip_standin.calls`) against
    the installed hip-python; return ``(name, args, exception)`` for each call whose arguments it
    refused (TypeError, OverflowError...). Without ROCm, hip-python converts every argument before
    it fails to dlopen libamdhip64.so, so that RuntimeError (or a normal return, for
    hipGetErrorName/String) means the arguments were accepted. Skips the test where hip-python is
    not importable, and where libamdhip64.so loads (stand-in handles must never reach a real runtime).
    """
    real = real_module()
    if real is None:
        pytest.skip("hip-python (rocm.bindings.hip) is not importable: nothing to replay against")
    try:
        real.hipRuntimeGetVersion()
    except RuntimeError as exc:
        if not _library_missing(exc):
            raise
    else:
        pytest.skip("libamdhip64.so loads here: replaying stand-in handles against a real HIP runtime is unsafe")
    refused: list[Refusal] = []
    for name, args in calls:
        quiet = _dlopen_reports_silenced() if name in _runtime.QUIET_WHEN_MISSING else contextlib.nullcontext()
        try:
            with quiet:
                getattr(real, name)(*_as_real(args, real))
        except Exception as exc:  # noqa: BLE001  # TypeError, OverflowError, ...: a refused argument
            if not _library_missing(exc):
                refused.append((name, args, exc))
    return refused
