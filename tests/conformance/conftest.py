"""Fixtures of the conformance suite: the Python form of upstream's OffloadAPI test fixtures.

Upstream (``offload/unittests/OffloadAPI/common``) runs each device test once per device;
here the fixtures are parametrized over every device offloadrt finds, the host included.
``--platform NAME`` or ``OFFLOAD_UNITTEST_PLATFORM=NAME`` (which wins) keeps one platform.
``--standin hip|cuda`` or ``OFFLOAD_CONFORMANCE_STANDIN=hip|cuda`` (which wins) runs the suite on
a driver stand-in (tests/hip_standin or tests/cuda_standin, two simulated GPUs, installed before
the first ``olInit``), whose kernels are the Python test doubles of ``standin_kernels.py``.

Each test runs inside its own ``olInit``/``olShutDown`` (upstream inits once per binary; a
per-test init keeps the rest of the suite, which checks ``UNINITIALIZED``, independent).
Device binaries come from ``device_code/``: C for the host (built with ``cc``), CUDA C for
NVIDIA devices (built with NVRTC when ``cuda-bindings`` has it) and for AMD devices (the same
sources, which HIP accepts, built with hiprtc from ``hip-python``).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import offloadrt
from offloadrt import DeviceInfo, ErrorCode, OffloadError, PlatformBackend, PlatformInfo, SymbolKind, api

from . import standin_kernels

DEVICE_CODE = Path(__file__).parent / "device_code"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--platform", default=None,
                     help="run the conformance suite on this platform only (its PlatformInfo.NAME, e.g. host, cuda)")
    parser.addoption("--standin", default=None, choices=sorted(standin_kernels.BACKENDS),
                     help="run the conformance suite on a driver stand-in (test double) instead of a GPU: hip "
                          "(tests/hip_standin, AMDGPU platform) or cuda (tests/cuda_standin, CUDA platform)")


# The stand-in this session runs on ("hip", "cuda"), if any, and what uninstalls it.
_standin: str | None = None
_standin_session = contextlib.ExitStack()


def pytest_configure(config: pytest.Config) -> None:
    """Install the chosen stand-in for the whole session, before collection's first olInit."""
    global _standin
    name = os.environ.get("OFFLOAD_CONFORMANCE_STANDIN") or config.getoption("--standin", None)
    if not name:
        return
    if name not in standin_kernels.BACKENDS:
        raise pytest.UsageError(f"OFFLOAD_CONFORMANCE_STANDIN must be one of {sorted(standin_kernels.BACKENDS)}, "
                                f"not {name!r}")
    _standin_session.enter_context(standin_kernels.installed(name))
    _standin = name


def pytest_unconfigure(config: pytest.Config) -> None:
    global _standin
    _standin = None
    _standin_session.close()


@dataclass(frozen=True)
class DeviceSpec:
    """A device found at collection time, found again by position after each test's olInit."""

    index: int
    platform: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.platform}_{self.name}".replace(" ", "_")


def _selected_platform(config: pytest.Config) -> str | None:
    return os.environ.get("OFFLOAD_UNITTEST_PLATFORM") or config.getoption("--platform")


def discover_devices(platform: str | None) -> list[DeviceSpec]:
    api.olInit()
    try:
        devices: list[api.Device] = []
        api.olIterateDevices(lambda device, _: devices.append(device))
        specs = []
        for index, device in enumerate(devices):
            plat = api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)
            name = api.olGetPlatformInfo(plat, PlatformInfo.NAME)
            if platform is None or name.lower() == platform.lower():
                specs.append(DeviceSpec(index, name, api.olGetDeviceInfo(device, DeviceInfo.NAME)))
        return specs
    finally:
        api.olShutDown()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device_spec" in metafunc.fixturenames:
        specs = discover_devices(_selected_platform(metafunc.config))
        metafunc.parametrize("device_spec", specs, ids=[s.id for s in specs])


@pytest.fixture
def offload() -> Iterator[None]:
    """An initialised runtime for one test (upstream's OffloadInitWrapper)."""
    api.olInit()
    yield
    api.olShutDown()


def _devices() -> list[api.Device]:
    devices: list[api.Device] = []
    api.olIterateDevices(lambda device, _: devices.append(device))
    return devices


@pytest.fixture
def host(offload: None) -> api.Device:
    """``TestEnvironment::getHostDevice``: the first device of the HOST platform."""
    for device in _devices():
        platform = api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)
        if api.olGetPlatformInfo(platform, PlatformInfo.BACKEND) == PlatformBackend.HOST:
            return device
    raise AssertionError("no host device")


@pytest.fixture
def device(offload: None, device_spec: DeviceSpec) -> api.Device:
    """``OffloadDeviceTest::Device``: the device under test."""
    device = _devices()[device_spec.index]
    assert api.olGetDeviceInfo(device, DeviceInfo.NAME) == device_spec.name
    return device


@pytest.fixture
def platform(device: api.Device) -> api.Platform:
    """``OffloadPlatformTest::Platform``."""
    return api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)


def backend_of(device: api.Device) -> PlatformBackend:
    return api.olGetPlatformInfo(api.olGetDeviceInfo(device, DeviceInfo.PLATFORM), PlatformInfo.BACKEND)


# ---- device binaries --------------------------------------------------------------------------

_BUILD_LOCK = threading.Lock()


def _build_host(name: str, out_dir: Path) -> bytes:
    source = DEVICE_CODE / "host" / f"{name}.c"
    if not source.exists():
        raise FileNotFoundError(source)
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.fail("no C compiler (cc) on PATH: the host device kernels are built with it")
    digest = hashlib.sha256(source.read_bytes() + (DEVICE_CODE / "host" / "common.h").read_bytes()).hexdigest()[:12]
    target = out_dir / f"{name}-{digest}.so"
    with _BUILD_LOCK:
        if not target.exists():
            subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-I", offloadrt.get_include(),
                            "-I", str(DEVICE_CODE / "host"), str(source), "-o", str(target)],
                           check=True, capture_output=True)
    return target.read_bytes()


def _build_cuda(name: str, device: api.Device) -> bytes:
    source = DEVICE_CODE / "cuda" / f"{name}.cu"
    if not source.exists():
        pytest.skip(f"no CUDA version of device binary '{name}' (see tests/conformance/README.md)")
    try:
        from cuda.bindings import nvrtc  # noqa: PLC0415  (optional: only with a CUDA device)
    except ImportError:
        pytest.skip("cuda-bindings with NVRTC is not installed: cannot build CUDA device code")
    err, prog = nvrtc.nvrtcCreateProgram(source.read_bytes(), f"{name}.cu".encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    options = [b"--gpu-architecture=compute_75", b"-default-device"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise AssertionError(f"NVRTC failed to build {name}.cu: {log.decode(errors='replace')}")
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    return ptx


def _build_amdgpu(name: str, device: api.Device) -> bytes:
    """``name``'s CUDA C source (HIP accepts it as is) built for the device with hiprtc: a code object."""
    source = DEVICE_CODE / "cuda" / f"{name}.cu"
    if not source.exists():
        pytest.skip(f"no GPU version of device binary '{name}' (see tests/conformance/README.md)")
    try:
        from hip import hiprtc  # noqa: F401, PLC0415  (optional: only with an AMD device)
    except ImportError:
        pytest.skip("hip-python with hiprtc is not installed: cannot build AMDGPU device code")
    from gpu_devices import compile_hip  # noqa: PLC0415  (tests/: the real-GPU suites build with it too)

    return compile_hip(source.read_bytes(), device._gdev.arch)  # type: ignore[attr-defined]  # gcnArchName


def _build_for_standin(name: str, device: api.Device) -> bytes:
    """``name``'s kernels as an image the session's stand-in loads, with Python bodies in place of code."""
    assert _standin is not None
    if name not in standin_kernels.SOURCES:
        pytest.skip(f"no GPU version of device binary '{name}' (see tests/conformance/README.md)")
    arch = getattr(device._gdev, "arch", "")  # type: ignore[attr-defined]  # AMDGPU: gcnArchName
    return standin_kernels.image(_standin, name, arch)


@pytest.fixture(scope="session")
def device_code_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("device_code")


@pytest.fixture
def load_device_binary(device_code_dir: Path) -> Callable[[str, api.Device], bytes]:
    """``loadDeviceBinary(name, device)``: the named test program built for the device's backend."""

    def load(name: str, device: api.Device) -> bytes:
        backend = backend_of(device)
        if backend == PlatformBackend.HOST:
            return _build_host(name, device_code_dir)
        if _standin is not None and backend == standin_kernels.BACKENDS[_standin]:
            return _build_for_standin(name, device)
        if backend == PlatformBackend.CUDA:
            return _build_cuda(name, device)
        if backend == PlatformBackend.AMDGPU:
            return _build_amdgpu(name, device)
        pytest.skip(f"no device code toolchain for the {backend.name} backend on this machine")

    return load


@pytest.fixture
def program_for(device: api.Device, load_device_binary: Callable[[str, api.Device], bytes]
                ) -> Iterator[Callable[[str], api.Program]]:
    """``OffloadProgramTest::SetUpWith(name)``: a program of ``name`` on the device, destroyed after."""
    made: list[api.Program] = []

    def create(name: str) -> api.Program:
        program = api.olCreateProgram(device, load_device_binary(name, device))
        made.append(program)
        return program

    yield create
    for program in made:
        if program._image is not None:
            api.olDestroyProgram(program)


@pytest.fixture
def program(program_for: Callable[[str], api.Program]) -> api.Program:
    """``OffloadProgramTest``: program "foo"."""
    return program_for("foo")


@pytest.fixture
def kernel(program: api.Program) -> api.Symbol:
    """``OffloadKernelTest``: kernel "foo"."""
    return api.olGetSymbol(program, "foo", SymbolKind.KERNEL)


@pytest.fixture
def global_program(program_for: Callable[[str], api.Program]) -> api.Program:
    """``OffloadGlobalTest``'s program: "global"."""
    return program_for("global")


@pytest.fixture
def global_symbol(global_program: api.Program) -> api.Symbol:
    """``OffloadGlobalTest::Global``: the global variable "global"."""
    return api.olGetSymbol(global_program, "global", SymbolKind.GLOBAL_VARIABLE)


@pytest.fixture
def queue(device: api.Device) -> Iterator[api.Queue]:
    """``OffloadQueueTest::Queue``."""
    q = api.olCreateQueue(device)
    yield q
    if q._ai is not None:
        api.olDestroyQueue(q)


@pytest.fixture
def event(queue: api.Queue) -> Iterator[api.Event]:
    """``OffloadEventTest::Event``: created on the queue, which is then synced."""
    ev = api.olCreateEvent(queue)
    api.olSyncQueue(queue)
    yield ev
    if ev._ev is not None:
        api.olDestroyEvent(ev)


# ---- helpers ----------------------------------------------------------------------------------

class ManuallyTriggeredTask:
    """Upstream's ManuallyTriggeredTask: holds a queue until :meth:`trigger`.

    ``enqueue(queue)`` posts a host function that blocks (at most 1 s, after which the test
    fails) and records a completion event; ``trigger()`` releases it and syncs that event.
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        self.timed_out = False
        self.completion: api.Event | None = None

    def _block(self, _: object) -> None:
        if not self._flag.wait(1.0):
            self.timed_out = True

    def enqueue(self, queue: api.Queue) -> None:
        api.olLaunchHostFunction(queue, self._block)
        self.completion = api.olCreateEvent(queue)

    def trigger(self) -> None:
        self._flag.set()
        assert self.completion is not None
        api.olSyncEvent(self.completion)
        assert not self.timed_out, "the task was never triggered within 1 s"


def threadify(fn: Callable[[int], Any], count: int = 20) -> None:
    """Upstream's threadify: run ``fn(i)`` on ``count`` threads at once; re-raise the first failure."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        try:
            barrier.wait()
            fn(index)
        except BaseException as exc:  # noqa: BLE001  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a threadify thread did not finish within 60 s"
    if errors:
        raise errors[0]


def assert_success_or_unsupported(fn: Callable[..., Any], *args: Any) -> Any:
    """``ASSERT_SUCCESS_OR_UNSUPPORTED``: the result, or skip the test on UNSUPPORTED."""
    try:
        return fn(*args)
    except OffloadError as exc:
        if exc.code == ErrorCode.UNSUPPORTED:
            pytest.skip(f"unsupported on this device: {exc.details}")
        raise


def assert_error(code: ErrorCode, fn: Callable[..., Any], *args: Any) -> OffloadError:
    """``ASSERT_ERROR(code, call)``: the call must fail with exactly ``code``."""
    with pytest.raises(OffloadError) as info:
        fn(*args)
    assert info.value.code == code, f"expected {code.name}, got {info.value!r}"
    return info.value


def u32_array(address: int, count: int) -> ctypes.Array:
    return (ctypes.c_uint32 * count).from_address(address)


FORCE_UINT32 = 0x7FFFFFFF  # upstream's invalid-enumeration input


def _smbios_memory_records() -> bool:
    try:
        return any(Path("/sys/firmware/dmi/entries").glob("17-*/raw"))
    except OSError:
        return False


def device_info_or_skip(query: Callable[[api.Device, DeviceInfo], Any], device: api.Device, prop: DeviceInfo) -> Any:
    """``query(device, prop)``, skipping only where the value cannot be known on this machine.

    The host device reads MEMORY_CLOCK_RATE from SMBIOS memory-device records; where the
    system exposes none (most VMs, unprivileged users) it answers UNIMPLEMENTED rather than
    invent a number, and the test is skipped with that reason. Any other failure fails.
    """
    try:
        return query(device, prop)
    except OffloadError as exc:
        if (exc.code == ErrorCode.UNIMPLEMENTED and prop == DeviceInfo.MEMORY_CLOCK_RATE
                and backend_of(device) == PlatformBackend.HOST and not _smbios_memory_records()):
            pytest.skip("this system exposes no SMBIOS memory-device records, so the host's memory clock is unknown")
        raise
