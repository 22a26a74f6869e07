"""offloadrt's Python API on real GPUs: saxpy, copies, the pool, DLPack, the CUDA Array Interface and
the CUDA stream protocol on every CUDA and AMD GPU present. Marked ``cuda``/``amdgpu``; skipped where
there is no such GPU, or no clang 22 to build the portable saxpy kernel (examples/saxpy.c)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import offloadrt
from offloadrt import AllocType, PlatformBackend
from offloadrt.core import _runtime

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MARKS = {"cuda": pytest.mark.cuda, "amdgpu": pytest.mark.amdgpu}


@pytest.fixture(scope="module", params=[pytest.param(name, marks=mark) for name, mark in MARKS.items()])
def gpus(request: pytest.FixtureRequest) -> Iterator[list[offloadrt.Device]]:
    _runtime.shutdown()
    found = offloadrt.devices(request.param)
    if not found:
        why = {p.name: p.reason for p in offloadrt.unavailable_platforms()}.get(request.param, "no devices")
        _runtime.shutdown()
        pytest.skip(f"no {request.param} GPU here: {why}")
    yield found
    _runtime.shutdown()


@pytest.fixture(scope="module")
def build() -> object:
    if not (os.environ.get("CLANG") or shutil.which("clang-22")):
        pytest.skip("clang 22 (for <gpuintrin.h> kernels) is not installed")
    sys.path.insert(0, str(EXAMPLES))
    try:
        from kernels import build as build_kernel
    finally:
        sys.path.remove(str(EXAMPLES))
    return build_kernel


def test_saxpy_on_every_gpu(gpus: list[offloadrt.Device], build) -> None:
    for device in gpus:
        kernel = device.load(build("saxpy", device)).kernel("saxpy")
        kernel.signature = ("float32", "ptr", "ptr", "uint32")
        n = 100_003
        x = np.random.default_rng(1).random(n, dtype=np.float32)
        dx, dy = offloadrt.asarray(x, device), offloadrt.asarray(np.ones(n, np.float32), device)
        with device.queue() as queue:
            for _ in range(3):
                queue.launch(kernel, (n + 255) // 256, 256, 0.5, dx, dy, n)
        assert np.allclose(dy.numpy(), 1.5 * x + 1)


@pytest.mark.parametrize("kind", list(AllocType))
def test_memory_interchange_on_every_gpu(gpus: list[offloadrt.Device], kind: AllocType) -> None:
    for ordinal, device in enumerate(gpus):
        cuda = device.backend == PlatformBackend.CUDA
        with device.allocate(4096, kind) as buffer:
            buffer.copy_from(np.arange(1024, dtype=np.float32))
            out = np.empty(1024, np.float32)
            buffer.copy_to(out)
            assert (out == np.arange(1024)).all()
            expected = {AllocType.DEVICE: (2 if cuda else 10, ordinal), AllocType.HOST: (3 if cuda else 11, 0),
                        AllocType.MANAGED: (13, 0) if cuda else (10, ordinal)}[kind]
            assert buffer.__dlpack_device__() == expected
            if kind != AllocType.DEVICE:
                assert (np.asarray(buffer).view(np.float32) == np.arange(1024)).all()  # zero-copy host view


def test_cuda_interfaces(gpus: list[offloadrt.Device]) -> None:
    if gpus[0].backend != PlatformBackend.CUDA:
        pytest.skip("CUDA only")
    from cuda.bindings import driver

    for device in gpus:
        queue = device.queue()
        version, stream = queue.__cuda_stream__()
        assert version == 0 and driver.cuStreamQuery(driver.CUstream(stream))[0] in (
            driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_NOT_READY)
        array = offloadrt.asarray(np.arange(64, dtype=np.int32), device, queue=queue)
        cai = array.__cuda_array_interface__
        assert cai["version"] == 3 and cai["stream"] == stream and cai["data"] == (array.ptr, False)
        err, kind = driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                 cai["data"][0])
        assert err == driver.CUresult.CUDA_SUCCESS and int(kind) == int(driver.CUmemorytype.CU_MEMORYTYPE_DEVICE)
        queue.close()


def test_the_pool_on_every_gpu(gpus: list[offloadrt.Device]) -> None:
    for device in gpus:
        pool = device.memory_pool
        first = device.allocate(1 << 20)
        address = first.ptr
        first.close()
        second = device.allocate(1 << 20)
        assert second.ptr == address
        second.close()
        assert pool.release() >= 1 << 20
