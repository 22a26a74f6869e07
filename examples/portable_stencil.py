"""A 2-D stencil (examples/portable_stencil.c: Jacobi steps of the Laplace equation) on every
device, checked against NumPy.

    python examples/portable_stencil.py
"""

from pathlib import Path

import numpy as np

import offloadrt

SOURCE = (Path(__file__).with_name("portable_stencil.c")).read_text()
STEPS, BLOCK = 50, (16, 16)


def reference(grid: np.ndarray, steps: int) -> np.ndarray:
    grid = grid.copy()
    for _ in range(steps):
        inner = 0.25 * (grid[1:-1, :-2] + grid[1:-1, 2:] + grid[:-2, 1:-1] + grid[2:, 1:-1])
        grid[1:-1, 1:-1] = inner.astype(np.float32)
    return grid


def run(device: offloadrt.Device) -> None:
    jacobi = device.compile(SOURCE).kernel("jacobi")
    ny, nx = 200, 300
    grid = np.zeros((ny, nx), np.float32)
    grid[0, :] = 1.0  # a hot top edge
    a, b = offloadrt.asarray(grid, device), offloadrt.asarray(grid, device)
    groups = ((nx + BLOCK[0] - 1) // BLOCK[0], (ny + BLOCK[1] - 1) // BLOCK[1])
    with device.queue() as queue:
        for _ in range(STEPS):
            queue.launch(jacobi, groups, BLOCK, a, b, nx, ny)
            a, b = b, a
    result = a.numpy().reshape(ny, nx)
    assert np.allclose(result, reference(grid, STEPS), atol=1e-6)
    print(f"portable stencil on {device} ({device.name}): {STEPS} steps on {ny}x{nx}, ok")


if __name__ == "__main__":
    for device in offloadrt.devices():
        try:
            run(device)
        except offloadrt.OffloadError as error:
            if error.code != offloadrt.ErrorCode.HOST_TOOL_NOT_FOUND:
                raise
            print(f"portable stencil on {device}: skipped, {error.details}")
