"""The Python API's examples run as written: examples/saxpy.py (the README's "Python API" quick
start) on the host device and, when clang can build its GPU kernel, on the CUDA stand-in;
examples/mpi_saxpy.py on 2 MPI ranks; and the ``# runnable`` blocks of docs/python-api.md."""

from __future__ import annotations

import ctypes
import os
import re
import runpy
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import cuda_standin
import pytest

import offloadrt
from offloadrt.core import _runtime

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DOC = ROOT / "docs" / "python-api.md"


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_") and k != "PYTHONWARNINGS"}


def test_saxpy_example_on_the_host() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLES / "saxpy.py"), "host"], capture_output=True, text=True,
                            timeout=120, env=clean_env(), check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("saxpy on host:0") and result.stdout.rstrip().endswith(": ok"), result.stdout
    assert result.stderr == ""


def test_saxpy_example_on_the_cuda_standin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if not (shutil.which("clang-22") or os.environ.get("CLANG")):
        pytest.skip("clang-22 (for <gpuintrin.h> GPU kernels) is not installed")
    _runtime.shutdown()
    cuda_standin.install(monkeypatch, devices=1)

    def saxpy(params: bytes, grid: object, block: object, shared: int, device: int) -> None:
        a, x, y, n = struct.unpack("<f4xQQI", params)  # (float, float*, float*, unsigned): 28 bytes, no tail padding
        import numpy as np

        xs = np.ctypeslib.as_array((ctypes.c_float * n).from_address(x))
        ys = np.ctypeslib.as_array((ctypes.c_float * n).from_address(y))
        ys[:] = a * xs + ys

    cuda_standin.register_kernel("saxpy", saxpy)
    monkeypatch.setattr(sys, "argv", ["saxpy.py"])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    try:
        runpy.run_path(str(EXAMPLES / "saxpy.py"), run_name="__main__")  # the PTX clang built loads on the driver
    finally:
        _runtime.shutdown()
        cuda_standin.shutdown()
    assert capsys.readouterr().out.startswith("saxpy on cuda:0")


def test_mpi_saxpy_example_on_two_ranks() -> None:
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install '.[mpi]')")
    mpiexec = shutil.which("mpiexec") or shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    if mpiexec is None:
        pytest.skip("no mpiexec on PATH (pip install '.[mpi]' brings MPICH's)")
    result = subprocess.run([mpiexec, "-n", "2", sys.executable, str(EXAMPLES / "mpi_saxpy.py")], capture_output=True,
                            text=True, timeout=120, env=clean_env(), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # the ranks' lines reach mpiexec's stdout in pieces that may interleave, even within a line
    assert "saxpy on 2 ranks: ok" in result.stdout, result.stdout
    assert set(re.findall(r"rank (\d): \d+ elements", result.stdout)) == {"0", "1"}, result.stdout


# ---- docs/python-api.md ------------------------------------------------------------------------------

def doc_blocks() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(C sources by name, (heading, code) of every ``# runnable`` python block) of docs/python-api.md."""
    text = DOC.read_text(encoding="utf-8")
    sources = {m.group(1): m.group(0) for m in re.finditer(r"/\* (\w+)\.c \*/.*?(?=^```)", text, flags=re.S | re.M)}
    examples = []
    for match in re.finditer(r"^```python\n(# runnable\n.*?)^```", text, flags=re.S | re.M):
        heading = re.findall(r"^#{2,4} (.+)$", text[:match.start()], flags=re.M)[-1]
        examples.append((heading, match.group(1)))
    return sources, examples


def test_the_reference_runs_as_written(tmp_path: Path) -> None:
    sources, examples = doc_blocks()
    assert len(examples) >= 4 and sources
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler (cc) to build the reference's kernels")
    for name, source in sources.items():
        (tmp_path / f"{name}.c").write_text(source)
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-I", offloadrt.get_include(),
                        f"{name}.c", "-o", f"{name}.so"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    # one process runs every example in turn, each in a fresh namespace (a process each costs seconds)
    script = "import sys\nfor heading, code in EXAMPLES:\n    print('--', heading, flush=True)\n" \
             "    exec(compile(code, heading, 'exec'), {'__name__': '__main__'})\n"
    result = subprocess.run([sys.executable, "-X", "faulthandler", "-c", f"EXAMPLES = {examples!r}\n{script}"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=clean_env(), check=False)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "Warning" not in result.stderr, result.stderr
