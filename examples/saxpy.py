"""saxpy (y = a * x + y) on any device with offloadrt's Python API, checked against NumPy.

    python examples/saxpy.py [device]     # "host", "cuda:0", "amdgpu:1"...; default: the first GPU, else the host
"""

import sys

import numpy as np
from kernels import build  # builds examples/saxpy.c for the device (cc for the host, clang for GPUs)

import offloadrt

device = offloadrt.device(sys.argv[1] if len(sys.argv) > 1 else None)  # the first GPU, or the host
saxpy = device.load(build("saxpy", device)).kernel("saxpy")
saxpy.signature = ("float32", "ptr", "ptr", "uint32")  # saxpy(float a, const float *x, float *y, uint32_t n)

n, a = 1_000_000, 2.0
x = np.random.default_rng(0).random(n, dtype=np.float32)
y = np.ones(n, dtype=np.float32)
dx, dy = offloadrt.asarray(x, device), offloadrt.asarray(y, device)  # copies onto the device
with device.queue() as queue:  # at the end of the block, waits for the queue's work
    queue.launch(saxpy, (n + 255) // 256, 256, a, dx, dy, n)  # grid, block, then the kernel's arguments
assert np.allclose(dy.numpy(), a * x + y)
print(f"saxpy on {device} ({device.name}): ok")
