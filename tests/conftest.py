"""Shared fixtures: a running runtime, the host device, and test kernels built with cc."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import offloadrt
from offloadrt import api

KERNELS = Path(__file__).parent / "kernels"


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


@pytest.fixture
def host(runtime: None) -> api.Device:
    """The host device of a running runtime."""
    for device in all_devices():
        if api.olGetDeviceInfo(device, offloadrt.DeviceInfo.TYPE) == offloadrt.DeviceType.HOST:
            return device
    raise AssertionError("no host device")


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
