"""The elementwise step: ``offloadrt.core._elementwise`` kernels on the GPU, compared with NumPy.

Saxpy (``elementwise``), and the sum, max, min (``-INFINITY``/``INFINITY`` identities), dot (float64
partials) and an int32 sum (int64 result) (``reduction``), each for 1, 31, 1000 and 1,000,003
elements and no elements (the identity): one PASS or FAIL line per kernel. The kernels' generated
sources are portable ``<gpuintrin.h>`` C compiled through ``Device.compile``; where this machine's
clang cannot build them (the GPU machines have clang 16), ``--prepare`` builds them beforehand for
the same targets as the portable examples, into ``build/gpu_check/`` with the manifest's
``"elementwise"`` entries (target, file, signatures and the SHA-256 of the generated source), and
``Device.compile`` is made, in this process only, to load the prebuilt image of a source whose
digest matches.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import offloadrt
from offloadrt.core import device as find_device
from offloadrt.core._elementwise import elementwise, reduction

from . import assets
from .results import Recorder

SIZES = (0, 1, 31, 1000, 1_000_003)


def kernels() -> dict[str, Any]:
    """The kernels the step runs, by name (their sources are what ``--prepare`` builds)."""
    return {
        "saxpy": elementwise("float a, const float *x, float *y", "y[i] = a * x[i] + y[i]", "saxpy"),
        "sum": reduction("const float *x", "x[i]", "a + b", "0", np.float32, "sum"),
        "max": reduction("const float *x", "x[i]", "a > b ? a : b", "-INFINITY", np.float32, "max_of"),
        "min": reduction("const double *x", "x[i]", "a < b ? a : b", "INFINITY", np.float64, "min_of"),
        "dot": reduction("const float *x, const float *y", "x[i] * y[i]", "a + b", "0", np.float64, "dot"),
        "int sum": reduction("const int32_t *x", "x[i]", "a + b", "0", np.int64, "isum"),
    }


def prepare(report: Callable[[str, str, str], None], manifest: dict[str, Any], folder: Path) -> bool:
    """Build every kernel's source for the portable examples' targets into ``folder``, adding the
    entries to ``manifest["elementwise"]``; True when nothing failed."""
    from offloadrt.compile import Target, build  # noqa: PLC0415

    ok = True
    entries: dict[str, list[dict[str, Any]]] = {}
    for name, kernel in kernels().items():
        entries[name] = []
        for kind, arch in assets.PORTABLE_TARGETS:
            label = f"prepare.elementwise.{name}.{arch}"
            try:
                compiled = build(kernel.source, lang="gpu-c", target=Target(kind, arch), cache=False)
            except Exception as exc:  # noqa: BLE001  # reported; the other targets are still built
                ok = False
                report("FAIL", label, f"{type(exc).__name__}: {exc}")
                continue
            file = f"elementwise.{name.replace(' ', '_')}.{arch}.{assets.SUFFIX[kind]}"
            (folder / file).write_bytes(compiled.image)
            entries[name].append({"kind": kind, "arch": arch, "file": file,
                                  "kernels": assets._signature_names(compiled.kernels),
                                  "source_sha256": assets.text_digest(kernel.source)})
            report("PASS", label, f"{len(compiled.image)} bytes -> {folder / file}")
    manifest["elementwise"] = entries
    return ok


def _use_prebuilt(recorder: Recorder, folder: Path, kind: str, arch: str) -> str:
    """Make ``Device.compile`` load the prebuilt image of a GPU source ``--prepare`` built; the mode said."""
    from offloadrt.core import Device  # noqa: PLC0415

    manifest = assets.load_manifest(folder) or {}
    by_digest: dict[str, dict[str, Any]] = {}
    for entries in manifest.get("elementwise", {}).values():
        entry = assets.pick_image(entries, kind, arch)
        if entry is not None:
            by_digest[entry["source_sha256"]] = entry
    original = Device.compile

    def compile_prebuilt(self: Any, source: str, options: Any = (), lang: Any = None) -> Any:
        entry = by_digest.get(assets.text_digest(source))
        if self.type != offloadrt.DeviceType.GPU or entry is None:
            return original(self, source, options, lang)
        program = self.load(assets.image_bytes(entry, folder))
        for kernel_name, signature in entry["kernels"].items():
            if signature is not None:
                program.kernel(kernel_name).signature = tuple(signature)
        return program

    Device.compile = compile_prebuilt  # type: ignore[method-assign]
    return f"prebuilt images ({len(by_digest)} of {len(kernels())})"


def _expected(name: str, x: np.ndarray, y: np.ndarray) -> float:
    if name == "sum":
        return float(x.astype(np.float64).sum())
    if name == "max":
        return float(x.max()) if x.size else -np.inf
    if name == "min":
        return float(x.astype(np.float64).min()) if x.size else np.inf
    if name == "dot":
        return float((x.astype(np.float64) * y.astype(np.float64)).sum())
    return float(np.round(x * 1000).astype(np.int32).astype(np.int64).sum())


def run(recorder: Recorder, device_spec: str, assets_folder: Path) -> None:
    """Each kernel on the GPU ``device_spec`` against NumPy: a PASS or FAIL line per kernel."""
    from offloadrt.compile import build, target_of  # noqa: PLC0415

    from .examples import PROBE  # noqa: PLC0415

    device = find_device(device_spec)
    target = target_of(device)
    try:
        build(PROBE, target=target, cache=False)
        mode = "local clang"
    except offloadrt.OffloadError as exc:
        if exc.code != offloadrt.ErrorCode.HOST_TOOL_NOT_FOUND:
            raise
        mode = _use_prebuilt(recorder, assets_folder, target.kind, target.arch)
    rng = np.random.default_rng(0)
    for name, kernel in kernels().items():
        problems = []
        try:
            for n in SIZES:
                x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
                if name == "saxpy":
                    dy = offloadrt.asarray(y, device)
                    kernel(2.0, offloadrt.asarray(x, device), dy)
                    if not np.allclose(dy.numpy(), np.float32(2) * x + y, rtol=1e-5, atol=1e-6):
                        problems.append(f"n={n}: saxpy differs from NumPy")
                    continue
                args = {"min": (x.astype(np.float64),), "dot": (x, y),
                        "int sum": (np.round(x * 1000).astype(np.int32),)}.get(name, (x,))
                got = float(kernel(*(offloadrt.asarray(a, device) for a in args)).numpy())
                want = _expected(name, x, y)
                if not np.isclose(got, want, rtol=1e-4, atol=1e-3) and got != want:
                    problems.append(f"n={n}: {got!r}, NumPy {want!r}")
        except offloadrt.OffloadError as exc:
            if exc.code == offloadrt.ErrorCode.HOST_TOOL_NOT_FOUND:
                recorder.add("SKIP", f"elementwise.{name}", f"({mode}) no image and no clang: {exc.details[:200]}")
                continue
            problems.append(f"{exc.code.name}: {exc.details[:300]}")
        status = "FAIL" if problems else "PASS"
        detail = "; ".join(problems[:3]) if problems else f"sizes {', '.join(map(str, SIZES))} match NumPy"
        recorder.add(status, f"elementwise.{name}", f"({mode}) on {device}: {detail}", mode=mode)
