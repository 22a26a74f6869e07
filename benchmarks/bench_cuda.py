"""Hot-path costs of offloadrt on CUDA devices, each against raw cuda.bindings calls in the same run.

    python benchmarks/bench_cuda.py [--json FILE] [--launches N] [--device I]

- launch: ``olLaunchKernel`` of an empty kernel on a queue against ``cuLaunchKernel`` of the same
  function on a raw stream (both then synced once). Goal: <= 1.5x the raw call.
- memcpy: host<->device ``olMemcpy`` of 64 MiB, from pinned (``AllocType.HOST``) and pageable
  (NumPy) host memory, against raw ``cuMemcpyHtoDAsync``/``cuMemcpyDtoHAsync`` + sync on the same
  buffers. Goal: >= 0.95x the raw bandwidth.
- queue: ``olCreateQueue`` + ``olDestroyQueue`` against ``cuStreamCreate`` + ``cuStreamDestroy``.

Prints "no CUDA device" and exits 0 on a machine without one; ``collect(quick)`` (run_all.py) then
returns no rows and a note. What offloadrt adds to each driver call is measured without a GPU
by ``bench_gpu_overhead.py``, over a null driver.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _report import best_of, print_rows, row, write_json

import offloadrt
from offloadrt import (
    AllocType,
    DeviceInfo,
    Dimensions,
    KernelLaunchSizeArgs,
    PlatformBackend,
    PlatformInfo,
    SymbolKind,
    api,
)

EMPTY_KERNEL = b'extern "C" __global__ void empty(int x) { (void)x; }'
SIZE = 64 << 20
NAME = "cuda"


def compile_ptx(source: bytes) -> bytes:
    from cuda.bindings import nvrtc  # type: ignore[import-untyped]  # noqa: PLC0415

    err, prog = nvrtc.nvrtcCreateProgram(source, b"empty.cu", 0, [], [])
    options = [b"--gpu-architecture=compute_75"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC failed: {err}")
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    return ptx



def cuda_devices() -> list[api.Device]:
    devices: list[api.Device] = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    return [d for d in devices
            if api.olGetPlatformInfo(api.olGetDeviceInfo(d, DeviceInfo.PLATFORM), PlatformInfo.BACKEND)
            == PlatformBackend.CUDA]


def bench_launch(device: api.Device, launches: int) -> dict[str, float]:
    from cuda.bindings import driver as d  # type: ignore[import-untyped]  # noqa: PLC0415

    program = api.olCreateProgram(device, compile_ptx(EMPTY_KERNEL))
    kernel = api.olGetSymbol(program, "empty", SymbolKind.KERNEL)
    queue = api.olCreateQueue(device)
    size = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(32, 1, 1))
    args = np.int32(7).tobytes()

    def ours() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            api.olLaunchKernel(queue, device, kernel, args, size)
        api.olSyncQueue(queue)
        return (time.perf_counter() - start) / launches

    function = kernel._target.function  # the same CUfunction, launched raw
    _, stream = d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING)
    import ctypes  # noqa: PLC0415

    value = ctypes.c_int(7)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(value))
    params_address = ctypes.addressof(params)

    def raw() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            d.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream, params_address, 0)
        d.cuStreamSynchronize(stream)
        return (time.perf_counter() - start) / launches

    ours()
    raw()
    result = {"ours_us": best_of(5, ours) * 1e6, "raw_us": best_of(5, raw) * 1e6}
    result["ratio"] = result["ours_us"] / result["raw_us"]
    d.cuStreamDestroy(stream)
    api.olDestroyQueue(queue)
    api.olDestroyProgram(program)
    return result


def bench_memcpy(device: api.Device, host: api.Device) -> dict[str, float]:
    from cuda.bindings import driver as d  # type: ignore[import-untyped]  # noqa: PLC0415

    dev_buf = api.olMemAlloc(device, AllocType.DEVICE, SIZE)
    pinned = api.olMemAlloc(device, AllocType.HOST, SIZE)
    pageable = np.ones(SIZE, dtype=np.uint8)
    queue = api.olCreateQueue(device)
    _, stream = d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING)
    results: dict[str, float] = {}
    for label, host_ptr in (("pinned", pinned), ("pageable", pageable.ctypes.data)):
        for direction in ("H2D", "D2H"):
            if direction == "H2D":
                def ours(ptr: int = host_ptr) -> float:
                    start = time.perf_counter()
                    api.olMemcpy(queue, dev_buf, device, ptr, host, SIZE)
                    api.olSyncQueue(queue)
                    return time.perf_counter() - start

                def raw(ptr: int = host_ptr) -> float:
                    start = time.perf_counter()
                    d.cuMemcpyHtoDAsync(dev_buf, ptr, SIZE, stream)
                    d.cuStreamSynchronize(stream)
                    return time.perf_counter() - start
            else:
                def ours(ptr: int = host_ptr) -> float:
                    start = time.perf_counter()
                    api.olMemcpy(queue, ptr, host, dev_buf, device, SIZE)
                    api.olSyncQueue(queue)
                    return time.perf_counter() - start

                def raw(ptr: int = host_ptr) -> float:
                    start = time.perf_counter()
                    d.cuMemcpyDtoHAsync(ptr, dev_buf, SIZE, stream)
                    d.cuStreamSynchronize(stream)
                    return time.perf_counter() - start
            ours()
            raw()
            t_ours, t_raw = best_of(7, ours), best_of(7, raw)
            results[f"{label}_{direction}_ours_GBps"] = SIZE / t_ours / 1e9
            results[f"{label}_{direction}_raw_GBps"] = SIZE / t_raw / 1e9
            results[f"{label}_{direction}_ratio"] = t_raw / t_ours
    d.cuStreamDestroy(stream)
    api.olDestroyQueue(queue)
    api.olMemFree(dev_buf)
    api.olMemFree(pinned)
    return results


def bench_queue(device: api.Device, count: int) -> dict[str, float]:
    from cuda.bindings import driver as d  # type: ignore[import-untyped]  # noqa: PLC0415

    def ours() -> float:
        start = time.perf_counter()
        for _ in range(count):
            api.olDestroyQueue(api.olCreateQueue(device))
        return (time.perf_counter() - start) / count

    flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING

    def raw() -> float:
        start = time.perf_counter()
        for _ in range(count):
            _, stream = d.cuStreamCreate(flags)
            d.cuStreamDestroy(stream)
        return (time.perf_counter() - start) / count

    ours()
    raw()
    result = {"ours_us": best_of(5, ours) * 1e6, "raw_us": best_of(5, raw) * 1e6}
    result["ratio"] = result["ours_us"] / result["raw_us"]
    return result


def measure(device_index: int, launches: int, queues: int) -> dict[str, Any] | None:
    """The figures on CUDA device ``device_index``, or None without one."""
    api.olInit()
    try:
        devices = cuda_devices()
        if len(devices) <= device_index:
            return None
        device = devices[device_index]
        all_devices: list[api.Device] = []
        api.olIterateDevices(lambda d, _: all_devices.append(d))
        host = next(d for d in all_devices
                    if api.olGetPlatformInfo(api.olGetDeviceInfo(d, DeviceInfo.PLATFORM), PlatformInfo.BACKEND)
                    == PlatformBackend.HOST)
        return {
            "device": api.olGetDeviceInfo(device, DeviceInfo.NAME),
            "launch": bench_launch(device, launches),
            "memcpy_64MiB": bench_memcpy(device, host),
            "queue": bench_queue(device, queues),
        }
    finally:
        api.olShutDown()


def make_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures in the shared row format (run_all.py)."""
    launch, copy, queue = results["launch"], results["memcpy_64MiB"], results["queue"]
    on = f"on {results['device']}"
    rows = [row(NAME, f"CUDA olLaunchKernel (empty, queued) {on}", launch["ours_us"], "us", launch["raw_us"],
                "cuLaunchKernel, same run", "<= 1.5x")]
    for label in ("pinned", "pageable"):
        for direction in ("H2D", "D2H"):
            key = f"{label}_{direction}"
            raw_call = "cuMemcpyHtoDAsync" if direction == "H2D" else "cuMemcpyDtoHAsync"
            rows.append(row(NAME, f"CUDA olMemcpy {direction} 64 MiB {label} {on}", copy[key + "_ours_GBps"], "GB/s",
                            copy[key + "_raw_GBps"], f"{raw_call}, same run", ">= 0.95x"))
    rows.append(row(NAME, f"CUDA olCreateQueue+olDestroyQueue {on}", queue["ours_us"], "us", queue["raw_us"],
                    "cuStreamCreate+cuStreamDestroy, same run"))
    return rows


def collect(quick: bool = False) -> dict[str, Any]:
    """The figures on the first CUDA device (none without one: see bench_gpu_overhead.py for the
    null-driver figures that need no GPU)."""
    results = measure(0, 2_000 if quick else 20_000, 500 if quick else 5_000)
    if results is None:
        return {"rows": [], "notes": ["no CUDA device: nothing measured on hardware"]}
    return {"rows": make_rows(results), "cuda": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--queues", type=int, default=5000)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    results = measure(args.device, args.launches, args.queues)
    if results is None:
        print("no CUDA device: nothing to measure (bench_gpu_overhead.py measures offloadrt's own costs over a "
              "null driver without one)")
        return 0
    print(f"offloadrt {offloadrt.__version__} on {results['device']} (CUDA)")
    print_rows(make_rows(results))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
