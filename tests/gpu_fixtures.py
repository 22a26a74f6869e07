"""Helpers for the GPU plugins' tests on a driver stand-in, the same for every vendor.

A runtime on stand-in GPUs with a guaranteed teardown, gates that hold a queue, bounded calls on
a brand-new thread, host buffers, launch sizes, kernel bodies that record or fault, views of the
driver calls the plugin made, and white-box looks at the stand-in. What differs between vendors
(images, status names, driver function names) is in ``cuda_fixtures``/``amdgpu_fixtures`` and in
the vendor table of the shared suite, ``tests/gpu_plugins/vendors.py``.
"""

from __future__ import annotations

import ctypes
import io
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, redirect_stdout
from enum import Enum
from types import ModuleType
from typing import Any

import pytest
from conftest import call_with_timeout
from cuda_standin import KernelFault

from offloadrt import (
    DeviceType,
    Dimensions,
    ErrorCode,
    KernelLaunchSizeArgs,
    OffloadError,
    PlatformBackend,
    SymbolKind,
    api,
)
from offloadrt.__main__ import main as offloadrt_main
from offloadrt.api import _state
from offloadrt.plugins.common.gpu import GpuDevice
from offloadrt.types import DeviceInfo, PlatformInfo

WAIT = 10.0  # the longest a test waits for something that should happen at once
KERNEL, GLOBAL = SymbolKind.KERNEL, SymbolKind.GLOBAL_VARIABLE
COUNTER = 7  # the initial value of the global "counter" (a uint32) of every vendor's test program
TABLE_SIZE = 24  # the size of its zero-initialised global "table"
# The kernels of every vendor's test program; the tests give them Python bodies with
# standin.register_kernel (before loading: modules pick up a kernel's launch bound when loaded).
KERNELS = ("record", "other", "small", "boom")
TAG_SIZE = 8  # "record" (and "record<n>") take one 8-byte parameter


def kernel_params(name: str) -> list[tuple[int, int]]:
    """The parameters, as (size, alignment), that test kernel ``name`` declares in its image: what a
    real GPU driver knows of a kernel, and so the only argument blobs it launches (CUDA refuses a
    parameter buffer longer than the kernel's; a shorter one would be read past).

    ``record``/``record<n>``: one 8-byte parameter (:func:`tag` packs it); ``small``: one 4-byte one;
    ``pair``: 8 bytes then 4 (12 bytes, 16 as a C struct with its tail padding); ``saxpy``:
    ``(float, const float*, float*, uint32)``, 28 bytes (32 as a C struct), the README's kernel;
    ``bytes<n>``: one n-byte array aligned to 1 (a blob of exactly n bytes); anything else: none.
    """
    if name.startswith("record"):
        return [(TAG_SIZE, 8)]
    if name == "small":
        return [(4, 4)]
    if name == "pair":
        return [(8, 8), (4, 4)]
    if name == "saxpy":
        return [(4, 4), (8, 8), (8, 8), (4, 4)]
    if name.startswith("bytes") and name[5:].isdigit():
        return [(int(name[5:]), 1)]
    return []


def tag(data: bytes | int) -> bytes:
    """The argument blob of ``record``: ``data`` (bytes up to 8, or an int) as its 8-byte parameter."""
    raw = data.to_bytes(TAG_SIZE, "little") if isinstance(data, int) else bytes(data)
    assert len(raw) <= TAG_SIZE, raw
    return raw.ljust(TAG_SIZE, b"\0")


def launch_size(groups: tuple[int, int, int] = (1, 1, 1), items: tuple[int, int, int] = (1, 1, 1),
                dyn: int = 0) -> KernelLaunchSizeArgs:
    return KernelLaunchSizeArgs(3, Dimensions(*groups), Dimensions(*items), dyn)


# ---- the driver calls the plugin made ------------------------------------------------------------

class CallLog:
    """A view of a stand-in's record of driver calls (``standin.calls``: ``(name, args)`` pairs)."""

    def __init__(self, standin: ModuleType) -> None:
        self.standin = standin

    def names(self) -> list[str]:
        return [name for name, _ in list(self.standin.calls)]

    def count(self, name: str) -> int:
        return self.names().count(name)

    def of(self, name: str) -> list[tuple[Any, ...]]:
        """The arguments of each call of ``name``, oldest first."""
        return [args for call, args in list(self.standin.calls) if call == name]


# ---- a runtime on stand-in GPUs -------------------------------------------------------------------

class Runtime:
    """An initialised runtime on a stand-in: its GPUs (all of ``backend``), the host device, gates to open."""

    def __init__(self, backend: PlatformBackend) -> None:
        self.backend = backend
        self.gates: list[Gate] = []
        self.refresh()

    def refresh(self) -> None:
        devices: list[api.Device] = []
        api.olIterateDevices(lambda device, _: devices.append(device))
        self.gpus = [d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.GPU]
        self.host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
        for gpu in self.gpus:
            platform = api.olGetDeviceInfo(gpu, DeviceInfo.PLATFORM)
            assert api.olGetPlatformInfo(platform, PlatformInfo.BACKEND) == self.backend

    def gate(self, queue: api.Queue) -> Gate:
        """A gate launched on ``queue`` (opened at teardown if the test does not)."""
        gate = Gate(queue)
        self.gates.append(gate)
        return gate


@contextmanager
def stand_in_runtime(standin: ModuleType, backend: PlatformBackend, monkeypatch: pytest.MonkeyPatch,
                     **reset_args: Any) -> Iterator[Runtime]:
    """``standin`` installed (``reset_args`` as for its ``install``), then ``olInit`` of ``backend``'s
    platform (and the host); afterwards every gate is opened, the runtime shut down and the
    stand-in stopped."""
    standin.install(monkeypatch, **reset_args)
    runtime: Runtime | None = None
    try:
        api.olInit(platforms=[backend])
        runtime = Runtime(backend)
        yield runtime
    finally:
        if runtime is not None:
            for gate in runtime.gates:
                gate.open()
        try:
            in_new_thread(shut_down_fully, timeout=3 * WAIT)  # drains every queue: bounded too
        finally:
            standin.shutdown()


def shut_down_fully() -> None:
    """``olShutDown`` until the runtime is stopped (a test may have left it initialised)."""
    while True:
        try:
            api.olShutDown()
        except OffloadError as exc:
            if exc.code == ErrorCode.UNINITIALIZED:
                return
            raise


def unavailable() -> dict[str, str]:
    """Why each platform of the running runtime has no devices (what ``info`` lists)."""
    context = _state.STATE.context
    assert context is not None
    return dict(context.unavailable)


def info_output(*argv: str) -> str:
    """What ``python -m offloadrt info`` prints, run in-process."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert offloadrt_main(["info", *argv]) == 0
    return out.getvalue()


class Gate:
    """A host function that holds its queue until opened; ``entered`` once the queue reached it."""

    def __init__(self, queue: api.Queue) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        api.olLaunchHostFunction(queue, self)

    def __call__(self, _user_data: object) -> None:
        self.entered.set()
        if not self.opened.wait(3 * WAIT):
            raise TimeoutError("a test gate was never opened")

    def open(self) -> None:
        self.opened.set()

    def wait_entered(self) -> None:
        assert self.entered.wait(WAIT), "the queue never reached the gate"


def in_new_thread(fn: Callable[..., Any], *args: Any, timeout: float = WAIT) -> Any:
    """``fn(*args)`` on a brand-new Python thread; its result, or its exception re-raised here."""
    return call_with_timeout(fn, *args, timeout=timeout)


def expect(code: ErrorCode, fn: Callable[..., Any], *args: Any) -> OffloadError:
    """``fn(*args)`` (on a helper thread, bounded by a timeout) must raise ``code``."""
    with pytest.raises(OffloadError) as info:
        in_new_thread(fn, *args)
    assert info.value.code == code, f"expected {code.name}, got {info.value!r}"
    return info.value


def error_details(err: OffloadError) -> str:
    """An error's details and those of the errors it wraps (a queue error wraps its cause)."""
    parts = [err.details]
    cause = err.__cause__
    while isinstance(cause, OffloadError):
        parts.append(cause.details)
        cause = cause.__cause__
    return " / ".join(parts)


def host_buffer(data: bytes | int) -> tuple[ctypes.Array, int]:
    """A ctypes buffer (kept alive by the caller) and its address."""
    buffer = ctypes.create_string_buffer(data, data if isinstance(data, int) else len(data))
    return buffer, ctypes.addressof(buffer)


# ---- kernels and the plugin's devices ------------------------------------------------------------

def gpu_device(device: api.Device) -> GpuDevice:
    """The plugin's device behind a handle (for white-box checks)."""
    gdev = device._gdev
    assert isinstance(gdev, GpuDevice)
    return gdev


def recorder() -> tuple[list[tuple[Any, ...]], Callable[..., None]]:
    """A kernel body that records ``(params, grid, block, shared_mem, device)`` of each launch."""
    seen: list[tuple[Any, ...]] = []
    return seen, lambda *launch: seen.append(launch)


def spin(seconds: float) -> None:
    """Busy for ``seconds``: a measurable gap between two events (not a wait for work)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def faulting_kernel(code: Any, why: str = "memory access fault") -> Callable[..., None]:
    """A kernel body that faults with driver status ``code`` (reported asynchronously, as on a GPU)."""

    def fault(*_: Any) -> None:
        raise KernelFault(code, why)

    return fault


# ---- the stand-in's own state ----------------------------------------------------------------------

def registered(standin: ModuleType) -> dict[int, tuple[int, int]]:
    """The stand-in's registered host memory: {host address: (size, device address)}."""
    state = standin.state()
    with state.lock:
        return {host: (r.size, r.device_ptr) for host, r in state.registered.items()}


def wait_until_faulted(standin: ModuleType, ordinal: int) -> None:
    """Until the stand-in's device ``ordinal`` has hit its sticky fault (a condition wait)."""
    state = standin.state()
    with state.cv:
        assert state.cv.wait_for(lambda: state.devices[ordinal].context.sticky is not None, WAIT)


def wait_until_drained(standin: ModuleType, queue: api.Queue) -> None:
    """Until the stand-in has run everything on ``queue``'s stream (a condition wait; asks the
    stand-in, not the plugin, so no fault is reported to the plugin on the way)."""
    state = standin.state()
    stream = state.streams[int(queue._ai.stream)]  # type: ignore[union-attr]
    with state.cv:
        assert state.cv.wait_for(lambda: not stream.ops, WAIT), "the stream never drained"


# ---- device info -----------------------------------------------------------------------------------

def check_device_info(expected: dict[api.Device, dict[DeviceInfo, Any]], *, vendor: str, vendor_id: int,
                      version: str, platform_vendor: str) -> None:
    """Every device's ``expected`` values, and what all devices of the platform share."""
    for device, values in expected.items():
        for prop, value in values.items():
            assert api.olGetDeviceInfo(device, prop) == value, prop.name
        assert api.olGetDeviceInfo(device, DeviceInfo.TYPE) == DeviceType.GPU
        assert api.olGetDeviceInfo(device, DeviceInfo.VENDOR) == vendor
        assert api.olGetDeviceInfo(device, DeviceInfo.VENDOR_ID) == vendor_id
        assert api.olGetDeviceInfo(device, DeviceInfo.ADDRESS_BITS) == 64
        assert api.olGetDeviceInfo(device, DeviceInfo.DRIVER_VERSION) == version
        uid = api.olGetDeviceInfo(device, DeviceInfo.UID)
        assert api.olGetDeviceInfoSize(device, DeviceInfo.UID) == len(uid) + 1
        platform = api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)
        assert api.olGetPlatformInfo(platform, PlatformInfo.VERSION) == version
        assert api.olGetPlatformInfo(platform, PlatformInfo.VENDOR_NAME) == platform_vendor


def call_key(name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What makes two recorded calls of ``name`` different for the bindings' argument conversion:
    the argument types, bytes' lengths, enum members, and for integers their size and sign."""

    def describe(value: Any) -> Any:
        if isinstance(value, (bytes, bytearray)):
            return (type(value).__name__, len(value))
        if isinstance(value, (list, tuple)):
            return tuple(describe(v) for v in value)
        if isinstance(value, Enum):
            return (type(value).__name__, value.name)
        if isinstance(value, int) and not isinstance(value, bool):
            return (type(value).__qualname__, value.bit_length(), value < 0)
        return (type(value).__qualname__,)

    return (name, describe(args))


def info_gpus(shown: Iterable[str]) -> dict[str, dict[str, Any]]:
    """What ``python -m offloadrt info`` says of the running runtime: each of ``shown`` must be in its
    text; returns the GPUs of its JSON report, by name."""
    text = info_output()
    for line in shown:
        assert line in text, (line, text)
    devices = json.loads(info_output("--json"))["Devices"]
    return {device["Name"]: device for device in devices if device["Type"] == "GPU"}
