"""The interop step (a child process): arrays between offloadrt and CuPy or PyTorch, and cuda.core
streams over offloadrt's queues, each checked by the values that come out.

Into offloadrt: ``offloadrt.asarray(x, device)`` of a CuPy array or a PyTorch tensor as it is, of
an object offering only DLPack, and of one offering only ``__cuda_array_interface__`` (the wrappers
below hide the other protocol). Out of offloadrt: ``cupy.from_dlpack``, ``cupy.asarray`` (CAI),
``torch.from_dlpack`` and ``torch.as_tensor`` (CAI) of an offloadrt array. Streams: a cuda.core
``Stream`` made from an offloadrt queue (``__cuda_stream__``) is the queue's CUstream, and a kernel
launched by cuda.core on it is ordered before the queue's later work. CUDA only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import offloadrt
from offloadrt.core import asarray
from offloadrt.core import device as find_device

from .results import Recorder

SAXPY_CU = ('extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {\n'
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  if (i < n) y[i] = a * x[i] + y[i];\n"
            "}\n")


class DLPackOnly:
    """An array that offers only DLPack (``__dlpack__``/``__dlpack_device__``) of the one it wraps."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._wrapped.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self._wrapped.__dlpack_device__()


class CudaArrayInterfaceOnly:
    """An array that offers only the CUDA Array Interface of the one it wraps (and keeps it alive)."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped
        self.__cuda_array_interface__ = wrapped.__cuda_array_interface__


def check(recorder: Recorder, name: str, body: Callable[[], str]) -> None:
    """PASS with what ``body`` returns, FAIL with what it raises."""
    try:
        detail = body()
    except Exception as exc:  # noqa: BLE001  # every check is reported, and the next one runs
        recorder.add("FAIL", name, f"{type(exc).__name__}: {exc}")
    else:
        recorder.add("PASS", name, detail)


def run(recorder: Recorder, device_spec: str) -> None:
    """Every interop check for the GPU ``device_spec``, one result each (SKIP for a missing library)."""
    device = find_device(device_spec)
    if device.backend != offloadrt.PlatformBackend.CUDA:
        recorder.add("SKIP", "interop", f"{device} is not a CUDA device: the interop checks are CUDA's")
        return
    ordinal = int(device_spec.partition(":")[2] or 0)
    expected = np.arange(16, dtype=np.float32) * 0.5 + 1

    def same(values: Any, what: str) -> str:
        got = np.asarray(values)
        if got.dtype != np.float32 or got.shape != expected.shape or not np.array_equal(got, expected):
            raise AssertionError(f"{what}: got {got.dtype}{list(got.shape)} {got[:4].tolist()}..., "
                                 f"expected float32[16] {expected[:4].tolist()}...")
        return f"{what}: equal values (float32[16])"

    try:
        import cupy  # type: ignore[import-not-found]  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001  # ImportError, or a CuPy that cannot find its CUDA
        recorder.add("SKIP", "interop.cupy", f"CuPy is not usable here: {type(exc).__name__}: {exc}")
    else:
        with cupy.cuda.Device(ordinal):
            source = cupy.asarray(expected)
            cupy.cuda.get_current_stream().synchronize()
            check(recorder, "interop.cupy.asarray", lambda: same(asarray(source, device).numpy(),
                                                                  "offloadrt.asarray(cupy array)"))
            check(recorder, "interop.cupy.dlpack-in", lambda: same(
                asarray(DLPackOnly(source), device).numpy(), "offloadrt.asarray(DLPack-only cupy array)"))
            check(recorder, "interop.cupy.cai-in", lambda: same(
                asarray(CudaArrayInterfaceOnly(source), device).numpy(),
                "offloadrt.asarray(CAI-only cupy array)"))
            ours = asarray(expected, device)
            check(recorder, "interop.cupy.from_dlpack",
                  lambda: same(cupy.asnumpy(cupy.from_dlpack(ours)), "cupy.from_dlpack(offloadrt array)"))
            check(recorder, "interop.cupy.asarray-cai",
                  lambda: same(cupy.asnumpy(cupy.asarray(ours)), "cupy.asarray(offloadrt array) via CAI"))

    try:
        import torch  # type: ignore[import-not-found]  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        recorder.add("SKIP", "interop.torch", f"PyTorch is not usable here: {type(exc).__name__}: {exc}")
    else:
        if not torch.cuda.is_available():
            recorder.add("SKIP", "interop.torch", "PyTorch sees no CUDA device (a CPU-only build?)")
        else:
            tensor = torch.as_tensor(expected, device=f"cuda:{ordinal}")
            torch.cuda.synchronize(ordinal)
            check(recorder, "interop.torch.asarray", lambda: same(asarray(tensor, device).numpy(),
                                                                   "offloadrt.asarray(torch tensor)"))
            check(recorder, "interop.torch.dlpack-in", lambda: same(
                asarray(DLPackOnly(tensor), device).numpy(), "offloadrt.asarray(DLPack-only tensor)"))
            check(recorder, "interop.torch.cai-in", lambda: same(
                asarray(CudaArrayInterfaceOnly(tensor), device).numpy(),
                "offloadrt.asarray(CAI-only tensor)"))
            ours = asarray(expected, device)
            check(recorder, "interop.torch.from_dlpack",
                  lambda: same(torch.from_dlpack(ours).cpu().numpy(), "torch.from_dlpack(offloadrt array)"))
            check(recorder, "interop.torch.as_tensor-cai", lambda: same(
                torch.as_tensor(ours, device=f"cuda:{ordinal}").cpu().numpy(),
                "torch.as_tensor(offloadrt array) via CAI"))

    _cuda_core_streams(recorder, device, ordinal, expected)


def _cuda_core_streams(recorder: Recorder, device: Any, ordinal: int, expected: Any) -> None:
    """A cuda.core Stream made from an offloadrt queue is its CUstream, and orders work with it."""
    from offloadrt.compile import build, target_of  # noqa: PLC0415

    try:
        from cuda.core import Device, LaunchConfig, ObjectCode, launch  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError as exc:
        recorder.add("SKIP", "interop.cuda-core", f"cuda.core is not installed: {exc}")
        return
    core_device = Device(ordinal)
    core_device.set_current()
    queue = device.queue()

    def same_stream() -> str:
        stream = core_device.create_stream(queue)
        ours = queue.__cuda_stream__()[1]
        if int(stream.handle) != ours:
            raise AssertionError(f"cuda.core's stream {int(stream.handle):#x} is not the queue's CUstream {ours:#x}")
        return f"Device.create_stream(queue) is the queue's CUstream {ours:#x}"

    def ordered() -> str:
        stream = core_device.create_stream(queue)
        ptx = build(SAXPY_CU, lang="cuda", target=target_of(device)).image
        kernel = ObjectCode.from_ptx(ptx).get_kernel("saxpy")
        x = asarray(expected, device, queue=queue)
        y = asarray(np.ones(16, np.float32), device, queue=queue)
        launch(stream, LaunchConfig(grid=1, block=16), kernel, np.float32(2), x.ptr, y.ptr, np.int32(16))
        got = y.numpy(queue=queue)  # after the launch: the same stream
        wanted = 2 * expected + 1
        if not np.array_equal(got, wanted):
            raise AssertionError(f"y after the launch: {got[:4].tolist()}..., expected {wanted[:4].tolist()}")
        return "a cuda.core launch on the queue's stream is done before the queue's next copy"

    check(recorder, "interop.cuda-core.stream", same_stream)
    check(recorder, "interop.cuda-core.order", ordered)
    queue.close()
