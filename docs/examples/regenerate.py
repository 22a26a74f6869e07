"""Run the examples on the host device and record what they print, for the site's examples gallery.

    python docs/examples/regenerate.py

Writes docs/examples/<name>.txt (the command, then its output) and docs/examples/outputs.json (for each
output: the command, the SHA-256 of every example file it ran, the date, the machine and the commit).
tests/test_docs_site.py fails when an example file no longer matches the digests recorded here, and runs
one example again to compare its output with the recorded one.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXAMPLES = ROOT / "examples"
MANIFEST = HERE / "outputs.json"

# name -> the command line, run in the repository root (sys.executable stands in for "python")
RUNS: dict[str, list[str]] = {
    "offloadrt-info": ["python", "-m", "offloadrt", "info"],
    "saxpy": ["python", "examples/saxpy.py", "host"],
    "portable_saxpy": ["python", "examples/portable_saxpy.py"],
    "portable_reduction": ["python", "examples/portable_reduction.py"],
    "portable_stencil": ["python", "examples/portable_stencil.py"],
    "mpi_saxpy": ["mpiexec", "-n", "2", "python", "examples/mpi_saxpy.py"],
}


def example_files(name: str) -> list[Path]:
    """The example files an output depends on: the script, its same-named kernel and the build helper
    it imports."""
    script = EXAMPLES / f"{name}.py"
    if not script.is_file():
        return []
    files = [script]
    kernel = EXAMPLES / f"{name}.c"
    if kernel.is_file():
        files.append(kernel)
    text = script.read_text(encoding="utf-8")
    for built in re.findall(r"""build\(["'](\w+)["']""", text):
        if (EXAMPLES / f"{built}.c").is_file() and EXAMPLES / f"{built}.c" not in files:
            files.append(EXAMPLES / f"{built}.c")
    if re.search(r"^from kernels import|^import kernels", text, flags=re.M):
        files.append(EXAMPLES / "kernels.py")
    return files


def digests(name: str) -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in example_files(name)}


def clean_env() -> dict[str, str]:
    """The environment without offloadrt's diagnostics switches, which would add lines to the output."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_") and k != "PYTHONWARNINGS"}


def resolve(command: list[str]) -> list[str]:
    """``command`` with "python" as this interpreter and mpiexec found beside it when not on PATH."""
    out = []
    for word in command:
        if word == "python":
            word = sys.executable
        elif word == "mpiexec":
            word = shutil.which("mpiexec") or shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or word
        out.append(word)
    return out


def run(name: str) -> str:
    """What ``RUNS[name]`` prints (stdout, then stderr if any); raises if it fails."""
    result = subprocess.run(resolve(RUNS[name]), cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=clean_env(), check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(RUNS[name])} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout + result.stderr


def transcript(name: str, output: str) -> str:
    return f"$ {' '.join(RUNS[name])}\n{output}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    devices = subprocess.run(
        [sys.executable, "-c", "import offloadrt; print(', '.join(f'{d} ({d.name})' for d in offloadrt.devices()))"],
        cwd=ROOT, capture_output=True, text=True, env=clean_env(), check=True).stdout.strip()
    manifest = {}
    for name in RUNS:
        output = run(name)
        (HERE / f"{name}.txt").write_text(transcript(name, output), encoding="utf-8")
        manifest[name] = {
            "command": " ".join(RUNS[name]),
            "sources": digests(name),
            "date": datetime.date.today().isoformat(),
            "machine": f"{cpu_model()} ({os.cpu_count()} cores), {platform.system()} {platform.machine()}, "
                       f"Python {platform.python_version()}",
            "devices": devices,
            "commit": commit,
        }
        print(f"{name}: {len(output.splitlines())} lines")
    MANIFEST.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
