"""The conformance suite (tests/conformance) on the GPU plugins, against the driver stand-ins.

No GPU is reachable from CI, so this runs the ported liboffload suite once on the AMDGPU plugin
over tests/hip_standin and once on the CUDA plugin over tests/cuda_standin (``--standin``), each
in a subprocess of its own (the stand-in is installed for that whole session) and restricted to
the stand-in's platform (``--platform``, a ``PlatformInfo.NAME``). Both runs start at once and
each test waits for its own. Every skip the runs report must be one listed here, with a reason
that holds for that backend only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conformance import standin_kernels

ROOT = Path(__file__).resolve().parent.parent
DEVICE_CODE = ROOT / "tests" / "conformance" / "device_code" / "cuda"
PLATFORMS = {"hip": "amdgpu", "cuda": "cuda"}  # the stand-in's platform, by PlatformInfo.NAME
DEVICES = 2  # what --standin simulates
TIMEOUT = 120.0  # a hang guard: each run takes 10-20 s on two cores
# Fewer passes than this means devices were not found (the device-parametrized tests vanish).
MIN_PASSED = 280 * DEVICES

# (test file, reason) → how many tests skip with it. global_ctor/global_dtor: device constructors
# come from clang's offload toolchain, not from hiprtc or NVRTC, so there is no GPU version of
# those two programs (tests/conformance/README.md). The synchronous fill on an idle queue is
# what LLVM's AMDGPU plugin does; upstream skips the case elsewhere.
_PAGEABLE_DEADLOCK = ("a queued copy into pageable memory waits for the queue's earlier work (the driver's "
                      "documented behaviour), so behind the untriggered task it deadlocks by design")
EXPECTED_SKIPS = {
    "hip": {
        ("tests/conformance/memory/test_olMemFill.py", f"AMDGPU: {_PAGEABLE_DEADLOCK}"): 2 * DEVICES,
        ("tests/conformance/kernel/test_olLaunchKernel.py",
         "no GPU version of device binary 'global_ctor' (see tests/conformance/README.md)"): DEVICES,
        ("tests/conformance/kernel/test_olLaunchKernel.py",
         "no GPU version of device binary 'global_dtor' (see tests/conformance/README.md)"): DEVICES,
    },
    "cuda": {
        ("tests/conformance/kernel/test_olLaunchKernel.py",
         "no GPU version of device binary 'global_ctor' (see tests/conformance/README.md)"): DEVICES,
        ("tests/conformance/kernel/test_olLaunchKernel.py",
         "no GPU version of device binary 'global_dtor' (see tests/conformance/README.md)"): DEVICES,
        ("tests/conformance/memory/test_olMemFill.py", "Idle-queue synchronous fill is AMDGPU-specific"): DEVICES,
        ("tests/conformance/memory/test_olMemFill.py", f"CUDA: {_PAGEABLE_DEADLOCK}"): 2 * DEVICES,
    },
}

_SKIPPED = re.compile(r"^SKIPPED \[(\d+)\] ([^:]+):\d+: (.*)$", re.MULTILINE)
_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)\b")


class Run:
    """One conformance run in a subprocess: its exit status and output once it finished."""

    def __init__(self, standin: str) -> None:
        env = {k: v for k, v in os.environ.items()
               if k not in ("OFFLOAD_CONFORMANCE_STANDIN", "OFFLOAD_UNITTEST_PLATFORM", "OFFLOAD_TRACE",
                            "PYTEST_ADDOPTS")}
        self.command = [sys.executable, "-m", "pytest", "tests/conformance", "-q", "-rfEsx", "--tb=short",
                        "-p", "no:cacheprovider", "--standin", standin, "--platform", PLATFORMS[standin]]
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.output: str | None = None

    def wait(self) -> tuple[int, str]:
        if self.output is None:
            try:
                self.output, _ = self.process.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.output, _ = self.process.communicate()
                self.output += f"\n[killed after {TIMEOUT:.0f} s]"
        return self.process.returncode, self.output

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Run]]:
    started = {standin: Run(standin) for standin in PLATFORMS}
    yield started
    for run in started.values():
        run.stop()


def _tail(output: str, lines: int = 60) -> str:
    return "\n".join(output.splitlines()[-lines:])


@pytest.mark.parametrize("standin", sorted(PLATFORMS))
def test_conformance_suite_passes_on_standin(runs: dict[str, Run], standin: str) -> None:
    status, output = runs[standin].wait()
    context = f"`{' '.join(runs[standin].command[1:])}` exited {status}; its output ends:\n{_tail(output)}"
    assert status == 0, context
    counts = Counter({kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                      for n, kind in _COUNTS.findall(output.splitlines()[-1])})
    assert counts["failed"] == counts["error"] == counts["xfailed"] == counts["xpassed"] == 0, context
    assert counts["passed"] >= MIN_PASSED, f"{counts['passed']} passed: were the devices found?\n{context}"
    skips = {(path, reason): int(n) for n, path, reason in _SKIPPED.findall(output)}
    assert skips == EXPECTED_SKIPS[standin], context
    assert counts["skipped"] == sum(skips.values()), context


def _cuda_kernels(source: str) -> tuple[set[str], dict[str, int]]:
    """The kernel names and ``{global: size}`` of a device_code/cuda file (unsigned int arrays only)."""
    kernels = set(re.findall(r"__global__\s+void\s+(\w+)\s*\(", source))
    variables = {name: 4 * int(count) for name, count in
                 re.findall(r"__device__\s+unsigned\s+int\s+(\w+)\s*\[(\d+)\]", source)}
    return kernels, variables


def test_standin_kernels_cover_every_cuda_source() -> None:
    """Every .cu file has test doubles of exactly its kernels and globals, so no program silently lacks one."""
    sources = {path.stem: path.read_text() for path in DEVICE_CODE.glob("*.cu")}
    assert set(standin_kernels.SOURCES) == set(sources)
    for name, text in sources.items():
        kernels, variables = _cuda_kernels(text)
        assert set(standin_kernels.SOURCES[name].kernels) == kernels, name
        assert standin_kernels.SOURCES[name].globals == variables, name
