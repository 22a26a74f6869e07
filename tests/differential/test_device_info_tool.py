"""``python -m offloadrt info`` against LLVM 22's ``llvm-offload-device-info``: for every field both
print, the same label, in the same order (offloadrt may print fields of its own in between)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL_NAMES = ("llvm-offload-device-info-22", "/usr/lib/llvm-22/bin/llvm-offload-device-info")
FIELD = re.compile(r"^\s*(?P<label>[A-Za-z][^:]*?): (?P<value>.*)$")
TIMEOUT = 120.0


def _tool() -> str:
    for name in TOOL_NAMES:
        found = shutil.which(name) or (name if Path(name).is_file() else None)
        if found:
            return found
    pytest.skip("llvm-offload-device-info-22 not found: apt-get install liboffload-22-dev")


def sections(text: str) -> tuple[list[tuple[str, str]], list[list[tuple[str, str]]]]:
    """The (label, value) fields before the first device, and those of each ``[device]`` section.

    A line ending in ``:`` (offloadrt's "Platforms without devices:") starts a section that is
    neither, and is left out.
    """
    header: list[tuple[str, str]] = []
    devices: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] | None = header
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = []
            devices.append(current)
        elif stripped.endswith(":"):
            current = None
        elif current is not None and (match := FIELD.match(line)):
            current.append((match["label"], match["value"]))
    return header, devices


def shared_order(ours: list[str], theirs: list[str]) -> tuple[list[str], list[str]]:
    common = set(ours) & set(theirs)
    return [label for label in ours if label in common], [label for label in theirs if label in common]


def _run(command: list[str]) -> str:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _host_section(devices: list[list[tuple[str, str]]], who: str) -> list[tuple[str, str]]:
    hosts = [d for d in devices if dict(d).get("Platform Backend") == "HOST"]
    assert hosts, f"{who} printed no device of the HOST platform"
    return hosts[0]


def test_info_prints_the_tools_labels_in_the_tools_order() -> None:
    tool = _tool()
    theirs_header, theirs_devices = sections(_run([tool]))
    ours_header, ours_devices = sections(_run([sys.executable, "-m", "offloadrt", "info"]))

    their_labels = [label for label, _ in theirs_header]
    our_labels = [label for label, _ in ours_header]
    assert their_labels, "the tool printed no header fields: has its output changed?"
    assert set(their_labels) <= set(our_labels), f"offloadrt info lacks {set(their_labels) - set(our_labels)}"
    ours_shared, theirs_shared = shared_order(our_labels, their_labels)
    assert ours_shared == theirs_shared, (
        f"header order differs:\n  offloadrt {ours_shared}\n  tool      {theirs_shared}")

    theirs_host = _host_section(theirs_devices, "the tool")
    their_labels = [label for label, _ in theirs_host]
    assert len(their_labels) > 20, f"the tool printed few device fields: {their_labels}"
    for device in ours_devices:  # every device section has the same fields, GPUs included
        our_labels = [label for label, _ in device]
        missing = [label for label in their_labels if label not in our_labels]
        assert not missing, f"offloadrt info lacks {missing} for {dict(device).get('Name')}"
        ours_shared, theirs_shared = shared_order(our_labels, their_labels)
        assert ours_shared == theirs_shared, (
            f"device field order differs:\n  offloadrt {ours_shared}\n  tool      {theirs_shared}")

    # where the tool gives a value a unit, offloadrt gives it the same unit (or says it is not available)
    ours_host = dict(_host_section(ours_devices, "offloadrt info"))
    for label, value in theirs_host:
        unit = value.rsplit(" ", 1)[-1] if re.fullmatch(r"\d+ (MHz|B)", value) else None
        ours = ours_host[label]
        if unit is not None and not ours.startswith("(not available"):
            assert re.fullmatch(rf"\d+ {unit}", ours), f"{label}: tool {value!r}, offloadrt {ours!r}"
