"""Shared fixtures and helpers: a running runtime, the host device, test kernels built with cc,
host memory, gates that hold a queue, calls guarded by a timeout, and a second device."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, final

import pytest
from fake_plugins import TWIN_PLATFORM_NAME, Factory, HostTwinPlugin, registered

import offloadrt
from offloadrt import AllocType, api
from offloadrt.plugins.common.gpu.core import STICKY_FAULTS

KERNELS = Path(__file__).parent / "kernels"
# Longest a test waits for work that should finish at once.
TIMEOUT = 10.0
# A gate left closed by a failed test lets its queue go after this long, so the runtime can still
# shut down.
SAFETY = 30.0
# A hang guard only, for a group of threads (run_threads) that finishes in a few seconds.
JOIN_TIMEOUT = 60.0


@pytest.fixture(autouse=True)
def _each_test_is_a_new_process_for_the_gpu_drivers() -> Iterator[None]:
    """A GPU's sticky fault lasts as long as its process, and offloadrt remembers it for as long
    (``STICKY_FAULTS``); each test starts its driver stand-in afresh, as a new process would, so it
    starts with none. Real GPUs keep them: the GPU-marked tests run one fault per process."""
    STICKY_FAULTS.clear()
    yield
    STICKY_FAULTS.clear()


def compile_kernels(source: Path, out_dir: Path, extra: tuple[str, ...] = ()) -> bytes:
    """Build ``source`` into a shared object with the system ``cc``; return its bytes."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.fail("no C compiler (cc) on PATH: the host tests need one to build their kernels")
    digest = hashlib.sha256(source.read_bytes() + " ".join(extra).encode()).hexdigest()[:16]
    target = out_dir / f"{source.stem}-{digest}.so"
    if not target.exists():
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-I", offloadrt.get_include(), *extra,
                        str(source), "-o", str(target)], check=True, capture_output=True)
    return target.read_bytes()


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture(scope="session")
def build(kernel_dir: Path):
    """``build("basic")`` → the bytes of tests/kernels/basic.c built as a shared object."""

    def _build(name: str, *extra: str) -> bytes:
        return compile_kernels(KERNELS / f"{name}.c", kernel_dir, tuple(extra))

    return _build


@pytest.fixture
def runtime() -> Iterator[None]:
    """A runtime initialised for the test and shut down after it (errors of shutdown fail it)."""
    api.olInit()
    yield
    api.olShutDown()


def all_devices() -> list[api.Device]:
    devices: list[api.Device] = []
    api.olIterateDevices(lambda device, _: devices.append(device))
    return devices


def find_host() -> api.Device:
    """The host device of the running runtime."""
    for device in all_devices():
        if api.olGetDeviceInfo(device, offloadrt.DeviceInfo.TYPE) == offloadrt.DeviceType.HOST:
            return device
    raise AssertionError("no host device")


@pytest.fixture
def host(runtime: None) -> api.Device:
    """The host device of a running runtime."""
    return find_host()


@pytest.fixture
def queue(host: api.Device) -> Iterator[api.Queue]:
    q = api.olCreateQueue(host)
    yield q
    if q._ai is not None:
        api.olDestroyQueue(q)


@pytest.fixture
def basic(host: api.Device, build) -> api.Program:
    """tests/kernels/basic.c loaded on the host device."""
    return api.olCreateProgram(host, build("basic"))


def u32_view(address: int, count: int) -> ctypes.Array:
    """``count`` uint32 values at ``address``, readable and writable."""
    return (ctypes.c_uint32 * count).from_address(address)


def launch_args(groups: int = 1, size: int = 1, dyn: int = 0) -> offloadrt.KernelLaunchSizeArgs:
    return offloadrt.KernelLaunchSizeArgs(1, offloadrt.Dimensions(groups, 1, 1), offloadrt.Dimensions(size, 1, 1), dyn)


def expect_error(code: offloadrt.ErrorCode, fn, *args, **kwargs) -> offloadrt.OffloadError:
    """Call ``fn`` and assert it raises OffloadError with ``code``; return the error."""
    with pytest.raises(offloadrt.OffloadError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, f"expected {code.name}, got {info.value!r}"
    assert info.value.details, "an error must say what was wrong"
    return info.value


def kernel(program: api.Program, name: str) -> api.Symbol:
    return api.olGetSymbol(program, name, offloadrt.SymbolKind.KERNEL)


def alloc_u32(device: api.Device, count: int = 1) -> tuple[int, ctypes.Array]:
    """``count`` zeroed uint32 of host memory: (address, view)."""
    address = api.olMemAlloc(device, AllocType.HOST, 4 * count)
    view = u32_view(address, count)
    for i in range(count):
        view[i] = 0
    return address, view


def increment(queue: api.Queue, device: api.Device, program: api.Program, counter: int) -> None:
    """Enqueue basic.c's ``increment`` of the uint32 at ``counter``."""
    api.olLaunchKernel(queue, device, kernel(program, "increment"), struct.pack("<Q", counter), launch_args())


@pytest.fixture
def alloc(host: api.Device) -> Iterator[Callable[..., int]]:
    """``alloc(size, kind=HOST)`` → the address of ``size`` bytes; everything is freed after the test."""
    live: list[int] = []

    def _alloc(size: int, kind: AllocType = AllocType.HOST) -> int:
        address = api.olMemAlloc(host, kind, size)
        live.append(address)
        return address

    yield _alloc
    for address in live:
        api.olMemFree(address)


# ---- holding a queue, bounding a call ----------------------------------------------------------

@final
class Gate:
    """A host function that blocks its queue until the test opens it (upstream's
    ManuallyTriggeredTask); work behind it is really pending. ``entered`` is set once the queue
    reached it.

    ``Gate(queue)`` launches it on ``queue`` at once. As a context manager it waits until the queue
    reached it and always opens on exit, so a failing test cannot leave a queue stuck.
    """

    def __init__(self, queue: api.Queue | None = None) -> None:
        self.opened = threading.Event()
        self.entered = threading.Event()
        if queue is not None:
            api.olLaunchHostFunction(queue, self)

    def __call__(self, _user_data: object) -> None:
        self.entered.set()
        if not self.opened.wait(SAFETY):
            raise TimeoutError("a test gate was never opened")

    def open(self) -> None:
        self.opened.set()

    def __enter__(self) -> Gate:
        assert self.entered.wait(SAFETY), "the queue never reached the gate"
        return self

    def __exit__(self, *exc: object) -> None:
        self.open()


@pytest.fixture
def gate(runtime: None) -> Iterator[Callable[..., Gate]]:
    """``gate()`` makes a Gate, ``gate(queue)`` one launched on ``queue``; every gate is opened
    before the runtime shuts down."""
    made: list[Gate] = []

    def make(queue: api.Queue | None = None) -> Gate:
        g = Gate(queue)
        made.append(g)
        return g

    yield make
    for g in made:
        g.open()


def call_with_timeout(fn: Callable[..., Any], *args: Any, timeout: float = TIMEOUT) -> Any:
    """``fn(*args)`` on a helper thread; fails the test if it does not return within ``timeout``."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001  # re-raised below, in the test's thread
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{getattr(fn, '__name__', fn)} did not return within {timeout} s"
    if "error" in result:
        raise result["error"]
    return result.get("value")


def run_threads(count: int, body: Callable[[int], None], timeout: float = JOIN_TIMEOUT) -> None:
    """Run ``body(index)`` on ``count`` threads that start together; re-raise the first failure.

    Fails if any thread is still running after ``timeout`` (a hang), and reports every exception
    raised in any thread.
    """
    start = threading.Barrier(count)
    failures: list[tuple[int, BaseException]] = []
    lock = threading.Lock()

    def target(index: int) -> None:
        try:
            start.wait(timeout)
            body(index)
        except BaseException as exc:  # noqa: BLE001 - reported below
            with lock:
                failures.append((index, exc))

    threads = [threading.Thread(target=target, args=(i,), name=f"test-worker-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads did not finish within {timeout} s: {stuck}"
    if failures:
        index, first = failures[0]
        raise AssertionError(f"{len(failures)} thread(s) failed; thread {index}: {first!r}") from first


# ---- a second device -----------------------------------------------------------------------------

@pytest.fixture
def two_devices() -> Iterator[tuple[api.Device, api.Device]]:
    """A running runtime's host device and a second device of another platform (a registered twin of
    the host plugin, see :class:`fake_plugins.HostTwinPlugin`); the registry is restored afterwards.

    The machine may have no device but the host; the INVALID_DEVICE rules live in the generic
    ``ol*`` layer, so a second real CPU device from a second plugin exercises them honestly.
    """
    with registered(Factory(HostTwinPlugin, offloadrt.PlatformBackend.UNKNOWN)):
        api.olInit()
        try:
            host = find_host()
            twin = next(d for d in all_devices()
                        if api.olGetPlatformInfo(api.olGetDeviceInfo(d, offloadrt.DeviceInfo.PLATFORM),
                                                 offloadrt.PlatformInfo.NAME) == TWIN_PLATFORM_NAME)
            yield host, twin
        finally:
            api.olShutDown()
