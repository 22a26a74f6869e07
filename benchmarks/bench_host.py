"""Hot-path costs of offloadrt on the host device, each against its raw floor in the same run.

    python benchmarks/bench_host.py [--json FILE] [--launches N] [--queues N]

- launch: ``olLaunchKernel`` of an empty kernel on a queue (then one sync), per launch, against
  a raw ctypes call of the same function with the same arguments. Goal: <= 5x the raw call.
- memcpy: ``olMemcpy`` host->host of 64 MiB (no queue) against ``numpy.copyto`` between the same
  two buffers. Goal: >= 0.9x NumPy's bandwidth.
- queue: ``olCreateQueue`` + ``olDestroyQueue`` of an idle queue, per pair.
- event: ``olCreateEvent`` + ``olSyncEvent`` + ``olDestroyEvent`` on an idle queue, per triple.
- program load: ``olCreateProgram`` + ``olDestroyProgram`` of the empty-kernel image, for new bytes
  each time (the structural check and a test load in a separate process run) and for bytes this
  process verified before (a hash and a lookup), against ``dlopen`` + ``dlclose`` of the same file
  in the same run. New bytes are the image with a different 8-byte tail after its section headers
  (nothing reads it). Also shown: the structural check alone, and the one-off start of the helper
  process that forks the test loads.
"""

from __future__ import annotations

import _ctypes
import argparse
import ctypes
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _report import best_of, print_table, write_json

import offloadrt
from offloadrt import AllocType, DeviceInfo, DeviceType, Dimensions, KernelLaunchSizeArgs, SymbolKind, api
from offloadrt.plugins.host import loader as host_loader
from offloadrt.plugins.host import probe as host_probe
from offloadrt.plugins.host.exec import KERNEL_PROTOTYPE, LaunchStruct

EMPTY_KERNEL = """
#include <offloadrt/host_kernel.h>
OL_HOST_KERNEL empty(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }
"""


def build_empty_kernel(workdir: Path) -> Path:
    source = workdir / "empty.c"
    source.write_text(EMPTY_KERNEL)
    target = workdir / "empty.so"
    compiler = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-I", offloadrt.get_include(), str(source), "-o", str(target)],
                   check=True)
    return target



def bench_launch(device: api.Device, library: Path, launches: int) -> dict[str, float]:
    program = api.olCreateProgram(device, library.read_bytes())
    kernel = api.olGetSymbol(program, "empty", SymbolKind.KERNEL)
    queue = api.olCreateQueue(device)
    size = KernelLaunchSizeArgs(1, Dimensions(1, 1, 1), Dimensions(1, 1, 1))
    args = b"\0" * 8

    def ours() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            api.olLaunchKernel(queue, device, kernel, args, size)
        api.olSyncQueue(queue)
        return (time.perf_counter() - start) / launches

    raw_lib = ctypes.CDLL(str(library))
    raw_fn = KERNEL_PROTOTYPE(("empty", raw_lib))
    launch = LaunchStruct(0, 0, 0, 1, 1, 1, 1, 1, 1, None)
    address = ctypes.addressof(launch)

    def raw() -> float:
        start = time.perf_counter()
        for _ in range(launches):
            raw_fn(args, address)
        return (time.perf_counter() - start) / launches

    ours()  # warm the queue's worker and the pools
    result = {"ours_us": best_of(5, ours) * 1e6, "raw_us": best_of(5, raw) * 1e6}
    api.olDestroyQueue(queue)
    api.olDestroyProgram(program)
    result["ratio"] = result["ours_us"] / result["raw_us"]
    return result


def bench_memcpy(device: api.Device, host: api.Device, size: int = 64 << 20) -> dict[str, float]:
    src = api.olMemAlloc(device, AllocType.HOST, size)
    dst = api.olMemAlloc(device, AllocType.HOST, size)
    src_view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(src))
    dst_view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(dst))
    src_view[:] = np.arange(size, dtype=np.uint64).astype(np.uint8)
    dst_view[:] = 0  # touch every page before timing

    def ours() -> float:
        start = time.perf_counter()
        api.olMemcpy(None, dst, host, src, host, size)
        return time.perf_counter() - start

    def numpy_copy() -> float:
        start = time.perf_counter()
        np.copyto(dst_view, src_view)
        return time.perf_counter() - start

    t_ours = best_of(7, ours)
    assert np.array_equal(dst_view[:4096], src_view[:4096])
    t_numpy = best_of(7, numpy_copy)
    api.olMemFree(src)
    api.olMemFree(dst)
    gbps = lambda t: size / t / 1e9  # noqa: E731
    return {"ours_GBps": gbps(t_ours), "numpy_GBps": gbps(t_numpy), "ratio": t_numpy / t_ours}


def bench_queue(device: api.Device, count: int) -> dict[str, float]:
    def ours() -> float:
        start = time.perf_counter()
        for _ in range(count):
            api.olDestroyQueue(api.olCreateQueue(device))
        return (time.perf_counter() - start) / count

    ours()
    return {"create_destroy_us": best_of(5, ours) * 1e6}


def bench_event(device: api.Device, count: int) -> dict[str, float]:
    queue = api.olCreateQueue(device)

    def ours() -> float:
        start = time.perf_counter()
        for _ in range(count):
            event = api.olCreateEvent(queue)
            api.olSyncEvent(event)
            api.olDestroyEvent(event)
        return (time.perf_counter() - start) / count

    ours()
    result = {"create_sync_destroy_us": best_of(5, ours) * 1e6}
    api.olDestroyQueue(queue)
    return result


def bench_program_load(device: api.Device, library: Path, loads: int) -> dict[str, float]:
    image = library.read_bytes()
    fresh = (image + struct.pack("<Q", n) for n in range(1, 1 << 62))  # new content, the same program

    host_probe.stop_helper()  # measure the helper's start once, as the first load of a process pays it
    start = time.perf_counter()
    api.olDestroyProgram(api.olCreateProgram(device, next(fresh)))
    first_in_process = time.perf_counter() - start

    def new_bytes() -> float:
        images = [next(fresh) for _ in range(loads)]
        start = time.perf_counter()
        for data in images:
            api.olDestroyProgram(api.olCreateProgram(device, data))
        return (time.perf_counter() - start) / loads

    def verified_bytes() -> float:
        start = time.perf_counter()
        for _ in range(loads):
            api.olDestroyProgram(api.olCreateProgram(device, image))
        return (time.perf_counter() - start) / loads

    def structure_only() -> float:
        images = [next(fresh) for _ in range(loads)]
        start = time.perf_counter()
        for data in images:
            host_loader.check_image(data)
        return (time.perf_counter() - start) / loads

    path = str(library.with_name("bare-" + library.name))  # a path nothing else holds loaded
    shutil.copyfile(library, path)
    mode = os.RTLD_NOW | os.RTLD_LOCAL

    def bare() -> float:
        start = time.perf_counter()
        for _ in range(loads):
            _ctypes.dlclose(_ctypes.dlopen(path, mode))
        return (time.perf_counter() - start) / loads

    verified_bytes()  # the first of these verifies the image; the rest are repeats
    bare()
    result = {"new_us": best_of(3, new_bytes) * 1e6, "verified_us": best_of(3, verified_bytes) * 1e6,
              "structure_us": best_of(3, structure_only) * 1e6, "bare_dlopen_us": best_of(3, bare) * 1e6,
              "first_in_process_ms": first_in_process * 1e3}
    result["new_ratio"] = result["new_us"] / result["bare_dlopen_us"]
    result["verified_ratio"] = result["verified_us"] / result["bare_dlopen_us"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--queues", type=int, default=20000)
    parser.add_argument("--loads", type=int, default=200, help="program loads per timing")
    args = parser.parse_args(argv)
    api.olInit(platforms=[offloadrt.PlatformBackend.HOST])
    try:
        devices: list[api.Device] = []
        api.olIterateDevices(lambda d, _: devices.append(d))
        host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
        with tempfile.TemporaryDirectory() as workdir:
            library = build_empty_kernel(Path(workdir))
            results = {
                "device": api.olGetDeviceInfo(host, DeviceInfo.NAME),
                "launch": bench_launch(host, library, args.launches),
                "memcpy_64MiB": bench_memcpy(host, host),
                "queue": bench_queue(host, args.queues),
                "event": bench_event(host, args.queues),
                "program_load": bench_program_load(host, library, args.loads),
            }
    finally:
        api.olShutDown()
    launch, memcpy, load = results["launch"], results["memcpy_64MiB"], results["program_load"]
    rows = [
        ("olLaunchKernel (empty, queued)", f"{launch['ours_us']:.2f} us", f"raw ctypes call {launch['raw_us']:.2f} us",
         f"{launch['ratio']:.2f}x", "<= 5x"),
        ("olMemcpy H2H 64 MiB", f"{memcpy['ours_GBps']:.2f} GB/s", f"numpy.copyto {memcpy['numpy_GBps']:.2f} GB/s",
         f"{memcpy['ratio']:.2f}x", ">= 0.9x"),
        ("olCreateQueue+olDestroyQueue", f"{results['queue']['create_destroy_us']:.2f} us", "-", "-", "-"),
        ("olCreateEvent+Sync+Destroy", f"{results['event']['create_sync_destroy_us']:.2f} us", "-", "-", "-"),
        ("olCreateProgram+olDestroyProgram, new bytes", f"{load['new_us']:.0f} us",
         f"dlopen+dlclose {load['bare_dlopen_us']:.0f} us", f"{load['new_ratio']:.1f}x", "-"),
        ("olCreateProgram+olDestroyProgram, verified bytes", f"{load['verified_us']:.0f} us",
         f"dlopen+dlclose {load['bare_dlopen_us']:.0f} us", f"{load['verified_ratio']:.2f}x", "-"),
        ("  of new bytes: the structural check", f"{load['structure_us']:.0f} us", "-", "-", "-"),
        ("  first load of a process (helper start)", f"{load['first_in_process_ms']:.1f} ms", "-", "-", "-"),
    ]
    print(f"offloadrt {offloadrt.__version__} on {results['device']} (host device)")
    print_table(("operation", "offloadrt", "floor (same run)", "ratio", "goal"), rows)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
