"""The README's examples run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from offloadrt import OffloadError
from offloadrt.compile import _clang

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def test_the_first_kernel_example_runs_and_prints_its_result(tmp_path: Path) -> None:
    source = next(block for block in blocks("c") if block.startswith("/* scale.c */"))
    script = next(block for block in blocks("python") if '"scale.c"' in block)
    (tmp_path / "scale.c").write_text(source)
    (tmp_path / "example.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    result = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["20.0"], result.stdout


def test_the_python_api_example_is_examples_saxpy() -> None:
    """The README shows examples/saxpy.py as it is (tests/test_core_examples.py runs that file)."""
    example = (README.parent / "examples" / "saxpy.py").read_text()
    shown = next(block for block in blocks("python") if "offloadrt.asarray" in block)
    assert example.endswith(shown), "README's Python API example differs from examples/saxpy.py"


def test_the_kernels_from_source_example_runs_on_every_device(tmp_path: Path) -> None:
    """The portable-kernel example compiles one <gpuintrin.h> source (needs clang >= 20 for the host build)."""
    try:
        _clang.clang()
    except OffloadError as error:
        pytest.skip(f"portable kernels need clang >= 20: {error}")
    script = next(block for block in blocks("python") if "device.compile(SOURCE)" in block)
    (tmp_path / "example.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    env["OFFLOADRT_CACHE_DIR"] = str(tmp_path / "cache")
    result = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert "host:0: ('float32', 'ptr', 'uint32')" in result.stdout, result.stdout
