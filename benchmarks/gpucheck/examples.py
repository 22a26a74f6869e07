"""The examples step (a child process per example): run ``examples/<name>.py`` on the GPU.

The example runs in this process as ``python examples/<name>.py [device]`` would run it (``runpy``,
``__name__ == "__main__"``), and passes when it prints its ``on <device> (...): ok`` line for the
GPU. Where this machine's clang cannot build portable kernels (offloadrt's own probe: a compile
for the GPU's target raising ``HOST_TOOL_NOT_FOUND``), the example's device code comes from the
images ``--prepare`` built (:mod:`.assets`) instead: ``Device.compile`` and ``examples/kernels.py``'s
``build`` are replaced, in this process only, by functions that load the prebuilt image for a GPU
whose source matches (SHA-256) and set the kernels' signatures from the manifest. Everything else
the example does (its arrays, launches and checks against NumPy) runs as written.

The examples cannot take a prebuilt image themselves: see the report of the change they would need.
"""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
import types
from pathlib import Path
from typing import Any

import offloadrt
from offloadrt.core import device as find_device

from . import assets
from .results import Recorder

# The smallest portable kernel: compiling it for the GPU's target tells whether clang can (the probe).
PROBE = "#include <gpuintrin.h>\n__gpu_kernel void probe(int *out) { *out = 1; }\n"


def run(recorder: Recorder, example: str, device_spec: str, assets_folder: Path) -> None:
    """Run ``example`` for the GPU ``device_spec`` (``cuda:0``), recording one result."""
    from offloadrt.compile import build, target_of  # noqa: PLC0415

    name = f"examples.{example}"
    device = find_device(device_spec)
    target = target_of(device)
    try:
        build(PROBE, target=target, cache=False)
        mode = "local clang"
    except offloadrt.OffloadError as exc:
        if exc.code != offloadrt.ErrorCode.HOST_TOOL_NOT_FOUND:
            raise
        mode = "prebuilt"
    stale: list[str] = []
    if mode == "prebuilt":
        manifest = assets.load_manifest(assets_folder)
        entries = (manifest or {}).get("examples", {}).get(example, [])
        entry = assets.pick_image(entries, target.kind, target.arch)
        if entry is None:
            why = ("no prebuilt images: run `python benchmarks/gpu_check.py --prepare` where clang 20+ is, and carry "
                   "build/gpu_check/ here" if manifest is None else f"no prebuilt image for {target.arch}")
            recorder.add("SKIP", name, f"this machine's clang cannot build it, and {why}")
            return
        image = assets.image_bytes(entry, assets_folder)
        _use_prebuilt(example, entry, image, stale)
        mode = f"prebuilt {entry['arch']} image"
    argv = [str(assets.EXAMPLES / f"{example}.py")] + ([device_spec] if example == "saxpy" else [])
    output = io.StringIO()
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = argv
    sys.path.insert(0, str(assets.EXAMPLES))
    try:
        with contextlib.redirect_stdout(output):
            runpy.run_path(argv[0], run_name="__main__")
    except BaseException as exc:  # noqa: BLE001  # SystemExit too: the example failed, say how
        printed = " | ".join(output.getvalue().strip().splitlines()[-3:])
        said = f"; printed: {printed}" if printed else ""
        recorder.add("FAIL", name, f"({mode}) {type(exc).__name__}: {exc}{said}", mode=mode, output=output.getvalue())
        return
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    _judge(recorder, name, str(device), output.getvalue(), mode, stale)


def _judge(recorder: Recorder, name: str, label: str, printed: str, mode: str, stale: list[str]) -> None:
    """PASS on the example's ``on <label> (...): ok`` line, SKIP on its ``skipped`` line, else FAIL."""
    lines = [line for line in printed.splitlines() if f" on {label}" in line]
    if any(line.rstrip().endswith(": ok") for line in lines):
        recorder.add("PASS", name, f"({mode}) {lines[-1].strip()}", mode=mode, output=printed)
    elif any("skipped" in line for line in lines):
        why = " (the prebuilt image is stale: the example's source changed after --prepare)" if stale else ""
        recorder.add("SKIP", name, f"({mode}) {lines[-1].strip()}{why}", mode=mode, output=printed)
    else:
        recorder.add("FAIL", name, f"({mode}) it printed no 'on {label} (...): ok' line: "
                                   + " | ".join(printed.strip().splitlines()[-3:]), mode=mode, output=printed)


def _use_prebuilt(example: str, entry: dict[str, Any], image: bytes, stale: list[str]) -> None:
    """Make this process's ``Device.compile`` (portable examples) or ``kernels.build`` (saxpy.py)
    load ``image`` for a GPU; a source other than the one it was built from is compiled as before,
    and noted in ``stale``."""
    from offloadrt.core import Device  # noqa: PLC0415

    def load(device: Any) -> Any:
        program = device.load(image)
        for kernel_name, signature in entry["kernels"].items():
            if signature is not None:
                program.kernel(kernel_name).signature = tuple(signature)
        return program

    if example == "saxpy":
        sys.path.insert(0, str(assets.EXAMPLES))
        try:
            import kernels as recipe  # type: ignore[import-not-found]  # noqa: PLC0415  # examples/kernels.py
        finally:
            sys.path.remove(str(assets.EXAMPLES))

        def build(name: str, device: Any) -> bytes:
            if device.type == offloadrt.DeviceType.GPU and name == example:
                if assets.source_digest(name) == entry["source_sha256"]:
                    return image
                stale.append(name)
            built: bytes = recipe.build(name, device)
            return built

        stand_in = types.ModuleType("kernels", "examples/kernels.py with prebuilt GPU images (gpu_check)")
        stand_in.build = build  # type: ignore[attr-defined]
        sys.modules["kernels"] = stand_in
        return

    original = Device.compile

    def compile_prebuilt(self: Any, source: str, options: Any = (), lang: Any = None, **kwargs: Any) -> Any:
        if self.type == offloadrt.DeviceType.GPU:
            if assets.text_digest(source) == entry["source_sha256"]:
                return load(self)
            stale.append(example)
        return original(self, source, options, lang, **kwargs)

    Device.compile = compile_prebuilt  # type: ignore[method-assign]
