"""Builds the examples' kernels (``examples/<name>.c``) for a device, with the compilers run by hand.

The host device takes a shared object built with the system C compiler (``cc``); CUDA devices PTX
and AMD GPUs a code object, both built with clang (version 22 or newer, for ``<gpuintrin.h>``;
``CLANG`` names another one). It shows what building an image yourself takes, for
``Device.load``; offloadrt also compiles sources itself, with its disk cache and the kernels'
signatures read from the source: ``device.compile(source)`` (docs/kernels.md), as the README's
examples do. This module is not installed with offloadrt: import it from this folder only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import offloadrt
from offloadrt import DeviceType, PlatformBackend

HERE = Path(__file__).resolve().parent


def build(name: str, device: offloadrt.Device) -> bytes:
    """The image of ``examples/<name>.c`` for ``device``."""
    source = HERE / f"{name}.c"
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / name
        if device.type in (DeviceType.HOST, DeviceType.CPU):
            command = [os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O2", "-I", offloadrt.get_include()]
        elif device.backend == PlatformBackend.CUDA:
            command = [_clang(), "--target=nvptx64-nvidia-cuda", "-march=sm_52", "-S"]
        elif device.backend == PlatformBackend.AMDGPU:
            command = [_clang(), "--target=amdgcn-amd-amdhsa", f"-mcpu={device.name.split(':')[0]}"]
        else:
            raise SystemExit(f"the examples have no recipe for {device}")
        if device.type == DeviceType.GPU:
            command += ["-O2", "-nogpulib", "-ffreestanding"]
        subprocess.run([*command, str(source), "-o", str(out)], check=True)
        return out.read_bytes()


def _clang() -> str:
    found = os.environ.get("CLANG") or shutil.which("clang-22") or shutil.which("clang")
    if found is None:
        raise SystemExit("building GPU kernels needs clang 22 or newer (set CLANG to its path)")
    return found
