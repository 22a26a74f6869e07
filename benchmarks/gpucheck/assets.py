"""Prebuilt device images of the examples, for GPU machines whose clang is too old (``--prepare``).

The portable examples (``examples/portable_*.py``) compile their ``<gpuintrin.h>`` source with
``Device.compile``, and ``examples/saxpy.py`` builds ``examples/saxpy.c`` with clang through
``examples/kernels.py``; both need clang 20 or later. ``--prepare`` builds, on a machine that has
one, each example's image for a few GPU targets ahead of time into ``build/gpu_check/`` (git
ignores ``build/``), with ``manifest.json`` naming each image, its target, its kernels' signatures
and the SHA-256 of the source it was built from (so a stale image is never used):

- portable examples: ``offloadrt.compile.build`` (what ``Device.compile`` runs), PTX for sm_80,
  sm_89 and sm_90 and code objects for gfx90a and gfx942;
- ``saxpy``: ``examples/kernels.py``'s own recipe (PTX for sm_52, which every later GPU runs, and
  code objects for the same AMD targets);
- the elementwise step's generated kernels (``gpucheck/elementwise.py``), for the portable targets.

It also downloads the pyelftools wheel into ``build/gpu_check/wheels`` for GPU machines without it
(gpu_check imports it from the wheel, a zip, through ``PYTHONPATH``).
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ASSETS = ROOT / "build" / "gpu_check"
WHEELS = ASSETS / "wheels"
MANIFEST = "manifest.json"
PORTABLE = ("portable_saxpy", "portable_reduction", "portable_stencil")
EXAMPLE_NAMES = ("saxpy", *PORTABLE)
PORTABLE_TARGETS = (("cuda", "sm_80"), ("cuda", "sm_89"), ("cuda", "sm_90"), ("amdgpu", "gfx90a"),
                    ("amdgpu", "gfx942"))
SAXPY_TARGETS = (("cuda", "sm_52"), ("amdgpu", "gfx90a"), ("amdgpu", "gfx942"))
SUFFIX = {"cuda": "ptx", "amdgpu": "hsaco"}


def text_digest(text: str) -> str:
    """SHA-256 of a kernel source as the examples read it (text, UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def source_digest(example: str) -> str:
    """SHA-256 of an example's kernel source, ``examples/<example>.c``."""
    return text_digest((EXAMPLES / f"{example}.c").read_text())


# ---- using them -------------------------------------------------------------------------------------

def load_manifest(folder: Path = ASSETS) -> dict[str, Any] | None:
    """The manifest ``--prepare`` wrote into ``folder``, or None when there is none."""
    path = folder / MANIFEST
    if not path.exists():
        return None
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def _sm(arch: str) -> int | None:
    match = re.fullmatch(r"sm_(\d+)[af]?", arch)
    return int(match.group(1)) if match else None


def pick_image(entries: list[dict[str, Any]], kind: str, arch: str) -> dict[str, Any] | None:
    """The prebuilt image for a device of ``kind`` (``cuda``, ``amdgpu``) and ``arch``: the same
    target, else for CUDA the PTX of the highest architecture not above the device's (the driver
    compiles PTX for later GPUs); an AMD code object only for its own processor (``gfx90a``,
    whatever its feature suffix ``:xnack-``)."""
    same = [entry for entry in entries if entry["kind"] == kind]
    if kind == "amdgpu":
        base = arch.split(":")[0]
        return next((entry for entry in same if entry["arch"].split(":")[0] == base), None)
    wanted = _sm(arch)
    if wanted is None:
        return None
    usable = [(number, entry) for entry in same if (number := _sm(entry["arch"])) is not None and number <= wanted]
    return max(usable, key=lambda pair: pair[0])[1] if usable else None


def image_bytes(entry: dict[str, Any], folder: Path = ASSETS) -> bytes:
    return (folder / entry["file"]).read_bytes()


# ---- making them ----------------------------------------------------------------------------------

def _signature_names(kernels: dict[str, Any]) -> dict[str, list[str] | None]:
    """Kernels' signatures as JSON: the names ``Kernel.signature`` takes (None where a parameter is
    not a plain name, such as a ctypes struct type)."""
    plain: dict[str, list[str] | None] = {}
    for name, signature in kernels.items():
        if signature is None or not all(isinstance(item, str) for item in signature):
            plain[name] = None
        else:
            plain[name] = list(signature)
    return plain


def _saxpy_image(kind: str, arch: str) -> bytes:
    """``examples/saxpy.c`` built by ``examples/kernels.py`` for a GPU of ``kind``: its recipe
    reads only the device's type, backend and (for AMD) name, so a stand-in object names them."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import kernels  # type: ignore[import-not-found]  # noqa: PLC0415  # examples/kernels.py

        from offloadrt import DeviceType, PlatformBackend  # noqa: PLC0415
    finally:
        sys.path.remove(str(EXAMPLES))
    backend = PlatformBackend.CUDA if kind == "cuda" else PlatformBackend.AMDGPU
    device = SimpleNamespace(type=DeviceType.GPU, backend=backend, name=arch)
    image: bytes = kernels.build("saxpy", device)
    return image


def prepare(report: Callable[[str, str, str], None], folder: Path = ASSETS) -> bool:
    """Build every example's images into ``folder`` and download the pyelftools wheel; each thing
    made or failed is passed to ``report(status, name, detail)``. True when nothing failed."""
    from offloadrt.compile import Target, build  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                "offloadrt": _version("offloadrt"), "examples": {}}
    ok = True
    for example in EXAMPLE_NAMES:
        entries: list[dict[str, Any]] = []
        digest = source_digest(example)
        source = (EXAMPLES / f"{example}.c").read_text()
        for kind, arch in (SAXPY_TARGETS if example == "saxpy" else PORTABLE_TARGETS):
            name = f"prepare.{example}.{arch}"
            try:
                if example == "saxpy":
                    image, kernels = _saxpy_image(kind, arch), {}
                else:
                    compiled = build(source, target=Target(kind, arch), cache=False)
                    image, kernels = compiled.image, _signature_names(compiled.kernels)
            except Exception as exc:  # noqa: BLE001  # reported; the other targets are still built
                ok = False
                report("FAIL", name, f"{type(exc).__name__}: {exc}")
                continue
            file = f"{example}.{arch}.{SUFFIX[kind]}"
            (folder / file).write_bytes(image)
            entries.append({"kind": kind, "arch": arch, "file": file, "kernels": kernels, "source_sha256": digest})
            report("PASS", name, f"{len(image)} bytes -> {folder / file}")
        manifest["examples"][example] = entries
    from . import elementwise  # noqa: PLC0415  # (it imports this module)

    ok = elementwise.prepare(report, manifest, folder) and ok
    manifest["clang"] = _clang_banner()
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    report("PASS", "prepare.manifest", str(folder / MANIFEST))
    return _download_pyelftools(report, folder / "wheels") and ok


def _clang_banner() -> str:
    try:
        from offloadrt.compile import _clang  # noqa: PLC0415  # which clang built them, for the record

        return _clang.clang().banner
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _download_pyelftools(report: Callable[[str, str, str], None], wheels: Path) -> bool:
    """``pip download`` the installed pyelftools' wheel (any version when it is not installed)."""
    version = _version("pyelftools")
    wanted = f"pyelftools=={version}" if version else "pyelftools"
    wheels.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", wanted, "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        report("FAIL", "prepare.pyelftools", f"pip download did not run: {exc}")
        return False
    found = sorted(wheels.glob("pyelftools-*.whl"))
    if done.returncode != 0 or not found:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        report("FAIL", "prepare.pyelftools", f"pip download failed (exit {done.returncode}): {tail}")
        return False
    report("PASS", "prepare.pyelftools", str(found[-1]))
    return True


def find_wheel(wheels: Path = WHEELS) -> Path | None:
    """The newest-named pyelftools wheel under ``wheels``, if any."""
    found = sorted(wheels.glob("pyelftools-*.whl"))
    return found[-1] if found else None
