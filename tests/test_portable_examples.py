"""The portable examples (examples/portable_*.py and their .c kernels) on the host device: each
compiles its kernel with Device.compile and checks the result against NumPy itself; run as scripts,
they go over every device found."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import offloadrt
from offloadrt import OffloadError
from offloadrt.compile import _clang
from offloadrt.core import _runtime

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ("portable_saxpy", "portable_reduction", "portable_stencil")


def _clang_missing() -> str:
    try:
        _clang.clang()
    except OffloadError as exc:
        return exc.details
    return ""


pytestmark = pytest.mark.skipif(bool(_clang_missing()), reason=f"needs clang >= 20: {_clang_missing()}")


@pytest.fixture(autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "portable-examples-cache"))
    _runtime.shutdown()
    yield
    _runtime.shutdown()


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", NAMES)
def test_example_on_the_host(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    example(name).run(offloadrt.device("host"))
    assert capsys.readouterr().out.strip().endswith("ok")


def test_an_example_runs_as_a_script_over_every_device() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "portable_saxpy.py")], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr
    assert "portable saxpy on host:0" in done.stdout and done.stdout.strip().endswith("ok")
