"""Port of offload/unittests/OffloadAPI/program/olCreateProgram.cpp (fixture: OffloadDeviceTest).

A failing ``olCreateProgram`` raises, so nothing is returned: the Python form of upstream's
``ASSERT_EQ(Program, nullptr)`` after an error.

Not ported (the program is returned, there is no output pointer): ``NullOutputProgram``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from offloadrt import ErrorCode, PlatformBackend, api

from ..conftest import DEVICE_CODE, _build_host, assert_error, backend_of


def test_success(device: api.Device, load_device_binary: Callable[[str, api.Device], bytes]) -> None:
    image = load_device_binary("foo", device)
    program = api.olCreateProgram(device, image)
    assert program is not None
    assert isinstance(program, api.Program)
    assert api.olDestroyProgram(program) is None


def test_null_device_handle(device: api.Device, load_device_binary: Callable[[str, api.Device], bytes]) -> None:
    image = load_device_binary("foo", device)
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olCreateProgram, None, image)


def test_null_prog_data(device: api.Device, load_device_binary: Callable[[str, api.Device], bytes]) -> None:
    load_device_binary("foo", device)
    assert_error(ErrorCode.INVALID_NULL_POINTER, api.olCreateProgram, device, None)


def test_zero_size_binary(device: api.Device, load_device_binary: Callable[[str, api.Device], bytes]) -> None:
    image = load_device_binary("foo", device)
    assert len(image) > 0
    # The real binary's start with size 0.
    assert_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, device, memoryview(image)[:0])


def test_invalid_binary(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, device, b"not an offload binary")


def _load_foreign_binary(name: str, device: api.Device, backend: PlatformBackend, out_dir: Path) -> bytes:
    """``loadDeviceBinary(name, Device, Out, ForeignBackend)``: ``name`` built for ``backend``."""
    if backend == PlatformBackend.CUDA:
        # A real CUDA image that needs no toolchain here: PTX that nvcc generated from
        # device_code/cuda/foo.cu (`nvcc -ptx -arch=compute_75 foo.cu`), checked in.
        return (DEVICE_CODE / "cuda" / "prebuilt" / f"{name}.ptx").read_bytes()
    if backend == PlatformBackend.HOST:
        return _build_host(name, out_dir)
    pytest.skip(f"No foreign-architecture binary available for this build ({backend.name}).")


def test_wrong_architecture(device: api.Device, device_code_dir: Path) -> None:
    # Pick a backend different from the device's own, so the loaded binary is valid but built
    # for the wrong architecture. Upstream picks AMDGPU for CUDA devices; CI has no AMDGPU
    # toolchain, so a CUDA device gets the host's ELF build instead, and an AMD one the PTX.
    backend = backend_of(device)
    foreign = PlatformBackend.HOST if backend == PlatformBackend.CUDA else PlatformBackend.CUDA
    image = _load_foreign_binary("foo", device, foreign, device_code_dir)
    assert len(image) > 0
    assert_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, device, image)
