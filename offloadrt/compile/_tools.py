"""Running a compiler as a process: finding it, its identity for the cache, and its log as an error."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
from collections.abc import Sequence

from ..errors import ErrorCode, OffloadError

TIMEOUT = 600.0  # a compiler that runs longer than this is stuck
_identities: dict[tuple[str, int, int], str] = {}
_found: dict[tuple[str | None, str | None], list[str]] = {}  # ($CC, $PATH) -> the compiler command found
_lock = threading.Lock()  # guards _identities and _found


def find_c_compiler() -> list[str]:
    """The host C compiler's command: ``$CC`` (split as a shell would: ``ccache gcc``), else the
    first of ``cc``, ``gcc``, ``clang`` on ``PATH``. ``HOST_TOOL_NOT_FOUND`` says what to install.

    The search is remembered per ``$CC`` and ``$PATH`` while the compiler found is still there (a
    cached compile then costs no ``PATH`` scan)."""
    chosen, path = os.environ.get("CC"), os.environ.get("PATH")
    with _lock:
        known = _found.get((chosen, path))
    if known is not None and os.access(known[0], os.X_OK):
        return list(known)
    command = _search(chosen)
    with _lock:
        _found[(chosen, path)] = command
    return list(command)


def _search(chosen: str | None) -> list[str]:
    if chosen is not None and chosen.strip():
        try:
            words = shlex.split(chosen)
        except ValueError as exc:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"cannot read $CC={chosen!r}: {exc}") from None
        found = shutil.which(words[0])
        if found is None:
            raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND,
                               f"$CC names {words[0]!r}, which is not an executable on PATH: install it, point $CC "
                               f"at a C compiler, or unset $CC to use cc")
        return [found, *words[1:]]
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found is not None:
            return [found]
    raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND,
                       "no C compiler found (cc, gcc or clang on PATH, or $CC): install one, e.g. "
                       "`apt install gcc` or `dnf install gcc`, to compile host kernels from source")


def identity(command: Sequence[str]) -> str:
    """The compiler's path, arguments and the first line of ``--version``; run once per compiler
    binary per process (a rebuilt or replaced binary is asked again)."""
    path = command[0]
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"cannot run the compiler {path}: {exc}") from None
    cache_key = (" ".join(command), stat.st_mtime_ns, stat.st_size)
    with _lock:
        known = _identities.get(cache_key)
    if known is not None:
        return known
    try:
        shown = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60, check=False)
        version = (shown.stdout or shown.stderr).strip().splitlines()[0] if (shown.stdout or shown.stderr) else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"cannot run the compiler {path}: {exc}") from None
    found = f"{' '.join(command)} [{version}]"
    with _lock:
        _identities[cache_key] = found
    return found


def run(command: Sequence[str], what: str, cwd: str) -> str:
    """Run a compiler; its output (the log) is returned, or raised in a ``COMPILE_FAILURE``."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd, check=False,
                              errors="replace")
    except FileNotFoundError as exc:
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"cannot run {command[0]}: {exc}") from None
    except subprocess.TimeoutExpired:
        raise OffloadError(ErrorCode.COMPILE_FAILURE,
                           f"{what}: the compiler ran for more than {TIMEOUT:.0f} s and was stopped") from None
    log = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise OffloadError(ErrorCode.COMPILE_FAILURE,
                           f"{what} failed (exit status {done.returncode}); compiler log:\n{log}\n"
                           f"command: {shlex.join(command)}")
    return log
