"""The CUDA plugin on real NVIDIA GPUs: what only the CUDA plugin has, on every CUDA device present.

Marked ``cuda``; skipped where cuda-bindings, NVRTC or a GPU is missing. What both GPU plugins
offer alike runs on NVIDIA GPUs from tests/test_gpus.py; here: program formats (PTX, cubin, bad
images), one registration shared by two GPUs, and the sticky fault, which runs in a subprocess
because a trapped kernel poisons the GPU context for the rest of the process. Kernels are CUDA C
(``gpu_devices.CUDA_KERNELS``) compiled at test time with NVRTC.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpu_devices import CUDA_GPUS, CUDA_KERNELS, compile_cuda, devices_of, host_device, page_buffer, running

from offloadrt import AllocType, ErrorCode, OffloadError, PlatformBackend, api

pytestmark = pytest.mark.cuda

CUDA_DEVICES = CUDA_GPUS.found[0]
if not CUDA_DEVICES:
    pytest.skip(CUDA_GPUS.found[1], allow_module_level=True)


@pytest.fixture(params=range(CUDA_DEVICES), ids=lambda i: f"cuda{i}")
def gpu(request: pytest.FixtureRequest) -> Iterator[api.Device]:
    with running(PlatformBackend.CUDA, request.param) as device:
        yield device


@pytest.fixture
def host(gpu: api.Device) -> api.Device:
    return host_device()


def test_program_formats_and_bad_images(gpu: api.Device) -> None:
    ptx = compile_cuda(CUDA_KERNELS)
    assert api.olIsValidBinary(gpu, ptx)
    gdev = gpu._gdev
    major, minor = gdev.cc  # type: ignore[union-attr]
    cubin = compile_cuda(CUDA_KERNELS, f"sm_{major}{minor}")
    assert api.olIsValidBinary(gpu, cubin)
    api.olDestroyProgram(api.olCreateProgram(gpu, cubin))
    with pytest.raises(OffloadError) as info:
        api.olCreateProgram(gpu, b".version 8.0\n.target sm_75\n.address_size 64\nthis is not ptx\n")
    assert info.value.code == ErrorCode.INVALID_BINARY
    assert "cuModuleLoadDataEx" in info.value.details
    assert not api.olIsValidBinary(gpu, b"garbage")


def test_two_gpus_register_the_same_memory(gpu: api.Device, host: api.Device) -> None:
    if CUDA_DEVICES < 2:
        pytest.skip("one GPU: nothing to share a registration with")
    other = next(d for d in devices_of(PlatformBackend.CUDA) if d is not gpu)
    mapping, view, address = page_buffer(8192)
    pinned = api.olMemRegister(gpu, address, 8192)
    assert api.olMemRegister(other, address, 8192) == pinned
    api.olMemUnregister(gpu, address)  # still registered for the other GPU
    buffer = api.olMemAlloc(other, AllocType.DEVICE, 4096)
    api.olMemFill(None, buffer, b"\x3c", 4096)
    api.olMemcpy(None, pinned, other, buffer, other, 4096)  # the other GPU writes at the registered address
    assert bytes(view[:4096]) == b"\x3c" * 4096
    api.olMemUnregister(other, address)
    api.olMemFree(buffer)
    del view


def test_kernel_fault_is_a_queue_error_then_sticky() -> None:
    """A trap: QUEUE_ERROR with the driver's error, later calls say the device must be re-initialised,
    and olShutDown + olInit brings the device back."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from gpu_devices import compile_cuda, CUDA_KERNELS, devices_of, one_d
        from offloadrt import api, AllocType, ErrorCode, OffloadError, PlatformBackend, SymbolKind
        api.olInit()
        gpu = devices_of(PlatformBackend.CUDA)[0]
        program = api.olCreateProgram(gpu, compile_cuda(CUDA_KERNELS))
        trap = api.olGetSymbol(program, "trap_kernel", SymbolKind.KERNEL)
        queue = api.olCreateQueue(gpu)
        api.olLaunchKernel(queue, gpu, trap, None, one_d(1, 1))
        try:
            api.olSyncQueue(queue)
            sys.exit("sync did not fail")
        except OffloadError as exc:
            assert exc.code == ErrorCode.QUEUE_ERROR, exc
        error, failing = api.olGetQueueError(queue)
        assert failing is queue and "CUDA_ERROR" in error.details, error
        try:
            api.olMemAlloc(gpu, AllocType.DEVICE, 64)
            sys.exit("a call after the sticky fault succeeded")
        except OffloadError as exc:
            assert "re-initialised" in exc.details, exc
        api.olDestroyQueue(queue)
        try:
            api.olShutDown()
        except OffloadError:
            pass  # releasing the poisoned context reports its errors; re-initialising is what is tested
        api.olInit()
        gpu = devices_of(PlatformBackend.CUDA)[0]
        api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 64))
        api.olShutDown()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr
