"""The README's examples run as written, each alone: a Python block copied into an empty folder (no
file of this repository beside it, nothing on PYTHONPATH) runs and prints what the README says."""

from __future__ import annotations

import ctypes
import os
import re
import runpy
import struct
import subprocess
import sys
from pathlib import Path

import cuda_standin
import pytest

from offloadrt import OffloadError
from offloadrt.compile import _clang
from offloadrt.core import _runtime

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def block(marker: str) -> str:
    return next(text for text in blocks("python") if marker in text)


def run_alone(script: str, folder: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    """``script`` as ``example.py`` in an empty folder, run there as a user would run a copy of it."""
    folder.mkdir(parents=True, exist_ok=True)
    assert not any(folder.iterdir())
    (folder / "example.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD") and k not in ("PYTHONPATH", "CC")}
    env["OFFLOADRT_CACHE_DIR"] = str(folder.parent / f"{folder.name}-cache")
    env.update(env_extra)
    return subprocess.run([sys.executable, "example.py", *args], cwd=folder, capture_output=True, text=True,
                          timeout=180, env=env, check=False)


def clang_missing() -> str:
    try:
        _clang.clang()
    except OffloadError as error:
        return str(error)
    return ""


def test_every_python_example_is_self_contained(tmp_path: Path) -> None:
    """No block imports a module of the repository (before: ``from kernels import build``, the
    examples folder's build helper, and a block that read ``scale.c`` from a separate block)."""
    python = blocks("python")
    assert len(python) >= 3
    for index, text in enumerate(python):
        done = run_alone(text, tmp_path / f"block{index}")
        assert done.returncode == 0, f"README Python block {index}:\n{text[:300]}\n{done.stderr}"


def test_the_python_api_example_runs_on_the_host(tmp_path: Path) -> None:
    done = run_alone(block("HOST_SAXPY"), tmp_path / "api", "host")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("saxpy on host:0") and done.stdout.rstrip().endswith(": ok"), done.stdout


def test_the_python_api_example_compiles_cuda_for_a_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """On the CUDA stand-in the example's GPU source goes through NVRTC and its PTX loads."""
    from offloadrt.compile import _nvrtc

    try:
        _nvrtc.version()
    except OffloadError as error:
        pytest.skip(f"NVRTC missing: {error}")
    _runtime.shutdown()
    cuda_standin.install(monkeypatch, devices=1)

    def saxpy(params: bytes, grid: object, block_: object, shared: int, device: int) -> None:
        import numpy as np

        a, x, y, n = struct.unpack("<f4xQQI", params)
        xs = np.ctypeslib.as_array((ctypes.c_float * n).from_address(x))
        ys = np.ctypeslib.as_array((ctypes.c_float * n).from_address(y))
        ys[:] = a * xs + ys

    cuda_standin.register_kernel("saxpy", saxpy)
    monkeypatch.setattr(sys, "argv", ["saxpy.py", "cuda"])
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "saxpy.py"
    script.write_text(block("HOST_SAXPY"))
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        _runtime.shutdown()
        cuda_standin.shutdown()
    assert capsys.readouterr().out.startswith("saxpy on cuda:0")


def test_the_first_kernel_example_prints_its_result(tmp_path: Path) -> None:
    done = run_alone(block("SCALE_C"), tmp_path / "first")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["20.0"], done.stdout


def test_the_kernels_from_source_example_runs_on_every_device(tmp_path: Path) -> None:
    """The portable-kernel example compiles one <gpuintrin.h> source (needs clang >= 20 for the host build)."""
    if clang_missing():
        pytest.skip(f"portable kernels need clang >= 20: {clang_missing()}")
    done = run_alone(block("device.compile(SOURCE)"), tmp_path / "portable")
    assert done.returncode == 0, done.stderr
    assert "host:0: ('float32', 'ptr', 'uint32')" in done.stdout, done.stdout


def test_the_kernels_from_source_example_skips_a_device_it_cannot_compile_for(tmp_path: Path) -> None:
    """With only clang 16 the loop says why it skipped the host and goes on (before: it died with
    HOST_TOOL_NOT_FOUND)."""
    old = tmp_path / "bin" / "clang"
    old.parent.mkdir()
    old.write_text("#!/bin/sh\necho 'Ubuntu clang version 16.0.6'\n")
    old.chmod(0o755)
    done = run_alone(block("device.compile(SOURCE)"), tmp_path / "portable", OFFLOADRT_CLANG=str(old))
    assert done.returncode == 0, done.stderr
    assert "host:0: skipped:" in done.stdout and "clang 20 or later" in done.stdout, done.stdout
