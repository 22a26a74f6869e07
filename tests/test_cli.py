"""The command line: ``offloadrt`` / ``python -m offloadrt``, its help, version and the JSON report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import offloadrt

SCHEMA = Path(offloadrt.__file__).with_name("info.schema.json")


def run(*argv: str, module: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    script = shutil.which("offloadrt") or "offloadrt"
    command = [sys.executable, "-m", "offloadrt", *argv] if module else [script, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)


def test_help_is_plain_text_with_the_program_name_it_was_run_as() -> None:
    shown = run("--help")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: python -m offloadrt ")
    assert "``" not in shown.stdout and "info" in shown.stdout
    info_help = run("info", "--help").stdout
    assert "--json" in info_help and "``" not in info_help


@pytest.mark.skipif(shutil.which("offloadrt") is None, reason="the offloadrt console script is not installed")
def test_the_console_script_calls_itself_offloadrt() -> None:
    shown = run("--help", module=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: offloadrt ")


def test_version() -> None:
    shown = run("--version")
    assert shown.returncode == 0
    assert shown.stdout.strip() == f"offloadrt {offloadrt.__version__} (LLVM 22.1's liboffload API, OL_VERSION 0.0.1)"


def test_the_json_report_follows_its_schema_and_has_no_units_in_values() -> None:
    shown = run("info", "--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    assert report["Units"]["Global Mem Size"] == "B" and report["Units"]["Max Clock Frequency"] == "MHz"
    for device in report["Devices"]:
        for key, value in device.items():
            assert not (isinstance(value, str) and value.rstrip().endswith((" B", " MHz", " bits"))), (key, value)
        for key, why in device["Unavailable"].items():
            assert device[key] is None and why
        for key, value in device.items():
            if value is None:
                assert key in device["Unavailable"], key
    text = run("info").stdout
    for device in report["Devices"]:
        for key, why in device["Unavailable"].items():
            assert f"{key}: (not available: {why})" in text


def test_the_report_lists_the_platforms_that_did_not_start_from_the_public_call() -> None:
    report = json.loads(run("info", "--json").stdout)
    offloadrt.api.olInit()
    try:
        missing = {p.name: p.reason for p in offloadrt.unavailable_platforms()}
    finally:
        offloadrt.api.olShutDown()
    assert report["Unavailable Platforms"] == missing


def test_a_closed_pipe_is_no_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    shell = f"{sys.executable} -m offloadrt info --json | head -c 10 >/dev/null; exit ${{PIPESTATUS[0]}}"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


def test_cache_list_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from offloadrt.compile import Target, build

    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(tmp_path / "cache"))
    empty = run("cache")
    assert empty.returncode == 0, empty.stderr
    assert f"Cache folder: {tmp_path / 'cache'}" in empty.stdout and "Entries: 0 (0 B)" in empty.stdout
    source = "#include <offloadrt/host_kernel.h>\nOL_HOST_KERNEL one(const void *a, const ol_host_launch_t *l) " \
             "{ (void)a; (void)l; return 0; }\nOL_HOST_KERNEL_NO_ARGS(one);\n"
    build(source)
    build(source, target=Target("host"), options=["-O0"])
    shown = run("cache", "list")
    assert shown.returncode == 0, shown.stderr
    assert "Entries: 2 (" in shown.stdout and "``" not in shown.stdout
    rows = [line.split() for line in shown.stdout.splitlines() if line.endswith(" one")]
    assert len(rows) == 2 and all(row[3:] == ["c", "host", "one"] for row in rows)
    cleared = run("cache", "clear")
    assert cleared.returncode == 0 and cleared.stdout.startswith("Removed 2 entries (")
    assert "Entries: 0 (0 B)" in run("cache").stdout
    assert "clear" in run("cache", "--help").stdout and "cache" in run("--help").stdout
    assert run("cache", "burn").returncode == 2  # argparse's usage error
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", "")
    refused = run("cache")
    assert refused.returncode == 1 and "OFFLOADRT_CACHE_DIR" in refused.stderr
