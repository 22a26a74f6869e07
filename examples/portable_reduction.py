"""A work-group reduction with work-group memory and barriers (examples/portable_reduction.c) on
every device, checked against NumPy.

    python examples/portable_reduction.py
"""

from pathlib import Path

import numpy as np

import offloadrt

SOURCE = (Path(__file__).with_name("portable_reduction.c")).read_text()
GROUP = 256  # the kernel's GROUP


def run(device: offloadrt.Device) -> None:
    block_sums = device.compile(SOURCE).kernel("block_sums")
    n = 1_000_003
    groups = (n + GROUP - 1) // GROUP
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    dx = offloadrt.asarray(x, device)
    partial = offloadrt.asarray(np.zeros(groups, np.float32), device)
    with device.queue() as queue:
        queue.launch(block_sums, groups, GROUP, dx, partial, n)
    sums = partial.numpy()
    padded = np.concatenate([x, np.zeros(groups * GROUP - n, np.float32)]).reshape(groups, GROUP)
    assert np.allclose(sums, padded.sum(axis=1, dtype=np.float64), rtol=1e-5)
    assert np.isclose(sums.sum(dtype=np.float64), x.sum(dtype=np.float64), rtol=1e-6)
    total = sums.sum(dtype=np.float64)
    print(f"portable reduction on {device} ({device.name}): {groups} groups, total {total:.3f}, ok")


if __name__ == "__main__":
    for device in offloadrt.devices():
        try:
            run(device)
        except offloadrt.OffloadError as error:
            if error.code != offloadrt.ErrorCode.HOST_TOOL_NOT_FOUND:
                raise
            print(f"portable reduction on {device}: skipped, {error.details}")
