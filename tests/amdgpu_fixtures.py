"""The AMDGPU part of the GPU plugins' test helpers: images the HIP stand-in loads, and the real hip-python.

Program images (AMDGPU code objects and offload bundles built by ``hip_standin.images``), views
of the HIP calls the plugin made (``hip_standin.calls``), the runtime on stand-in AMD GPUs bound
to the AMDGPU platform, and the HIP functions the plugin calls (for the replay against the
installed hip-python, ``hip_standin.replay_against_real``). What every vendor shares is in
``gpu_fixtures``; the HIP row of the shared suite's vendor table is in
``tests/gpu_plugins/vendors.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import gpu_fixtures
import hip_standin as standin
import pytest
from gpu_fixtures import COUNTER, KERNELS, TABLE_SIZE, CallLog, Runtime, kernel_params
from hip_standin import images

from offloadrt import PlatformBackend, api
from offloadrt.plugins.amdgpu.plugin import AmdGpuDevice

hipError_t = standin.hip.hipError_t  # noqa: N816  # hip-python's name


def code_object(arch: str = "gfx90a", kernels: Sequence[str] = KERNELS, **features: Any) -> bytes:
    """A code object for ``arch`` with ``kernels`` and the globals ``counter`` and ``table``; its
    metadata lists each kernel's explicit arguments (``gpu_fixtures.kernel_params``), as clang writes
    them, which is where the plugin and HIP learn a kernel's parameters."""
    return images.code_object(arch, kernels=kernels, globals={"counter": struct.pack("<I", COUNTER),
                                                              "table": TABLE_SIZE},
                              args={name: kernel_params(name) for name in kernels}, **features)


def bundle(*targets: str) -> bytes:
    """An offload bundle: a host entry and a :func:`code_object` per target ID (``gfx90a:xnack-``)."""
    entries = {images.HOST_TRIPLE: b""}
    for target in targets:
        entries[images.bundle_triple(target)] = code_object(target)
    return images.offload_bundle(entries)


def generic_code_object() -> bytes:
    """A code object for ``gfx9-generic`` (EF_AMDGPU_MACH 0x51), which runs on gfx900..gfx90c but
    not on the default gfx90a device."""
    image = bytearray(code_object())
    image[48] = 0x51  # the low byte of e_flags
    return bytes(image)


def newer_code_object() -> bytes:
    """A code object for a processor newer than offloadrt's table (EF_AMDGPU_MACH 0x49, gfx1250 in
    later LLVMs): the plugin leaves it to the driver, and the stand-in refuses it."""
    image = bytearray(code_object())
    image[48] = 0x49
    return bytes(image)


def program(device: api.Device, image: bytes | bytearray | None = None) -> api.Program:
    return api.olCreateProgram(device, code_object() if image is None else image)


def amd_device(device: api.Device) -> AmdGpuDevice:
    """The plugin's device behind a handle (for white-box checks)."""
    gdev = device._gdev
    assert isinstance(gdev, AmdGpuDevice)
    return gdev


# ---- the HIP calls the plugin made, and a runtime on stand-in AMD GPUs ---------------------------

log = CallLog(standin)
call_names, count, calls_of = log.names, log.count, log.of


@contextmanager
def stand_in_runtime(monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> Iterator[Runtime]:
    """The HIP stand-in installed (``reset_args`` as for ``hip_standin.install``), then ``olInit``
    of the AMDGPU platform; see :func:`gpu_fixtures.stand_in_runtime`."""
    with gpu_fixtures.stand_in_runtime(standin, PlatformBackend.AMDGPU, monkeypatch, **reset_args) as runtime:
        yield runtime
