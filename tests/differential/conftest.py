"""Fixtures of the differential suite: the real library, the test program, and liboffload's outcomes.

liboffload's side of every case is computed once per session by the fork server (one process,
one dlopen, one forked child per case); nothing is cached across pytest runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import offloadrt

from .cases import CASES, PROGRAM_SOURCE
from .liboffload import MISSING_REASON, find_library

TESTS_DIR = Path(__file__).resolve().parent.parent
CASE_TIMEOUT = 10.0  # seconds a case may run in its child before it counts as a hang
SERVER_TIMEOUT = 300.0  # the whole fork server: only reached if the machine is badly overloaded
_RUNTIME_VARIABLES = ("OFFLOAD_DISABLE_VALIDATION", "OFFLOAD_TRACE")  # change what both sides answer or print


@pytest.fixture(scope="session")
def library_path() -> str:
    path = find_library()
    if path is None:
        pytest.skip(f"{MISSING_REASON} (or point OFFLOADRT_LIBOFFLOAD at libLLVMOffload.so)")
    return path


@pytest.fixture(scope="session")
def resources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Files cases refer to by name: "elf", the test program built with cc."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.fail("no C compiler (cc) on PATH: the differential suite builds its test program with it")
    folder = tmp_path_factory.mktemp("differential")
    source = folder / "program.c"
    source.write_text(PROGRAM_SOURCE)
    target = folder / "program.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-I", offloadrt.get_include(), str(source), "-o",
                    str(target)], check=True, capture_output=True)
    return {"elf": str(target)}


@pytest.fixture(scope="session")
def liboffload_outcomes(library_path: str, resources: dict[str, str]) -> dict[str, list[str]]:
    """Case name -> liboffload's outcomes, every case run in its own forked process."""
    request = {"library": library_path, "cases": [case.name for case in CASES], "resources": resources,
               "timeout": CASE_TIMEOUT, "workers": min(2, os.cpu_count() or 1)}
    env = {k: v for k, v in os.environ.items() if k not in _RUNTIME_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "differential.forkserver"], input=json.dumps(request),
                          capture_output=True, text=True, cwd=TESTS_DIR, env=env, timeout=SERVER_TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"the fork server failed (exit {proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout)


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """offloadrt reads these at olInit; the fork server runs liboffload without them too."""
    for name in _RUNTIME_VARIABLES:
        monkeypatch.delenv(name, raising=False)
