"""saxpy from one portable C source (examples/portable_saxpy.c) on every device, checked against NumPy.

    python examples/portable_saxpy.py

Device.compile builds the source for each device: offloadrt's host <gpuintrin.h> for the CPU,
clang for NVIDIA and AMD GPUs (clang 20 or later, and ld.lld for AMD: apt-get install clang-22 lld-22).
"""

from pathlib import Path

import numpy as np

import offloadrt

SOURCE = (Path(__file__).with_name("portable_saxpy.c")).read_text()


def run(device: offloadrt.Device) -> None:
    saxpy = device.compile(SOURCE).kernel("saxpy")  # its signature (float, ptr, ptr, uint32) comes from the source
    n, a = 1_000_000, 2.0
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    dx, dy = offloadrt.asarray(x, device), offloadrt.asarray(y, device)
    with device.queue() as queue:
        queue.launch(saxpy, (n + 255) // 256, 256, a, dx, dy, n)
    assert np.allclose(dy.numpy(), a * x + y)
    print(f"portable saxpy on {device} ({device.name}): ok")


if __name__ == "__main__":
    for device in offloadrt.devices():
        try:
            run(device)
        except offloadrt.OffloadError as error:
            if error.code != offloadrt.ErrorCode.HOST_TOOL_NOT_FOUND:
                raise
            print(f"portable saxpy on {device}: skipped, {error.details}")
