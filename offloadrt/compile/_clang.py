"""Finding clang and ld.lld, and running them.

clang is ``$OFFLOADRT_CLANG`` when set, else ``clang`` on ``PATH``, else the highest ``clang-NN``
on ``PATH``; it must be version 20 or later (the first with the ``<gpuintrin.h>`` that offloadrt's
portable dialect follows). ``ld.lld`` (for AMDGPU code objects) is ``$OFFLOADRT_LLD``, else
``ld.lld`` next to that clang or on ``PATH``, else the ``ld.lld-NN`` of clang's version, else the
highest one on ``PATH``. A missing or too old tool is ``HOST_TOOL_NOT_FOUND`` saying what to
install; a failed run is ``COMPILE_FAILURE`` with the tool's whole output.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ErrorCode, OffloadError

MIN_CLANG = 20
INSTALL_HINT = ("install clang and lld 20 or later (Debian/Ubuntu: apt-get install clang-22 lld-22; "
                "or https://apt.llvm.org), or point $OFFLOADRT_CLANG at a clang binary")
_VERSIONED = re.compile(r"^(clang|ld\.lld)-(\d+)$")
_VERSION = re.compile(r"(?:version|LLD)\s+(\d+)\.(\d+)(?:\.(\d+))?")
_lock = threading.Lock()  # guards _found


@dataclass(frozen=True)
class Tool:
    """A tool found: its path, its major version and the first line of its ``--version``."""

    path: str
    major: int
    banner: str


_found: dict[str, Tool] = {}


def _versioned(prefix: str) -> list[tuple[int, str]]:
    """``(NN, path)`` of every ``<prefix>-NN`` on ``PATH``, highest first."""
    seen: dict[int, str] = {}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            match = _VERSIONED.match(name)
            if match and match.group(1) == prefix and int(match.group(2)) not in seen:
                path = os.path.join(folder, name)
                if os.access(path, os.X_OK):
                    seen[int(match.group(2))] = path
    return sorted(seen.items(), reverse=True)


@functools.lru_cache(maxsize=32)
def _probe(path: str, mtime: float) -> Tool | None:
    """The version of the tool at ``path`` (cached per path and modification time)."""
    del mtime
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    banner = (done.stdout or done.stderr).strip().splitlines()
    match = _VERSION.search(banner[0]) if banner else None
    if done.returncode != 0 or match is None:
        return None
    return Tool(path, int(match.group(1)), banner[0])


def _tool_at(path: str) -> Tool | None:
    try:
        return _probe(path, os.stat(path).st_mtime)
    except OSError:
        return None


def clang() -> Tool:
    """The clang that compiles portable kernels; ``HOST_TOOL_NOT_FOUND`` when there is none (≥ 20)."""
    wanted = os.environ.get("OFFLOADRT_CLANG", "")
    key = f"clang:{wanted}:{os.environ.get('PATH', '')}"
    with _lock:
        if key in _found:
            return _found[key]
    if wanted:
        path = shutil.which(wanted) or wanted
        tool = _tool_at(path)
        if tool is None:
            raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND,
                               f"$OFFLOADRT_CLANG is {wanted!r}, which is not a clang that runs; {INSTALL_HINT}")
        candidates = [tool]
    else:
        candidates = []
        plain = shutil.which("clang")
        if plain:
            tool = _tool_at(plain)
            if tool is not None:
                candidates.append(tool)
        for _, path in _versioned("clang"):
            tool = _tool_at(path)
            if tool is not None:
                candidates.append(tool)
    usable = [tool for tool in candidates if tool.major >= MIN_CLANG]
    if not usable:
        have = ", ".join(f"{t.path} ({t.major})" for t in candidates) or "no clang on PATH"
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND,
                           f"portable kernels need clang {MIN_CLANG} or later ({have}); {INSTALL_HINT}")
    with _lock:
        _found[key] = usable[0]
    return usable[0]


def lld(for_clang: Tool) -> Tool:
    """The ``ld.lld`` that links AMDGPU code objects; ``HOST_TOOL_NOT_FOUND`` when there is none."""
    wanted = os.environ.get("OFFLOADRT_LLD", "")
    key = f"lld:{wanted}:{for_clang.path}:{os.environ.get('PATH', '')}"
    with _lock:
        if key in _found:
            return _found[key]
    paths: list[str] = []
    if wanted:
        paths.append(shutil.which(wanted) or wanted)
    else:
        beside = os.path.join(os.path.dirname(os.path.realpath(for_clang.path)), "ld.lld")
        paths += [beside, shutil.which("ld.lld") or ""]
        paths += [path for major, path in _versioned("ld.lld") if major == for_clang.major]
        paths += [path for _, path in _versioned("ld.lld")]
    for path in paths:
        if path and os.path.exists(path):
            tool = _tool_at(path)
            if tool is not None:
                with _lock:
                    _found[key] = tool
                return tool
    hint = (f"install lld {for_clang.major} (Debian/Ubuntu: apt-get install lld-{for_clang.major}), or point "
            "$OFFLOADRT_LLD at ld.lld")
    if wanted:
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"$OFFLOADRT_LLD is {wanted!r}, which does not run; {hint}")
    raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"AMDGPU code objects are linked with ld.lld: {hint}")


def run(command: Sequence[str], what: str, *, stdin: str | None = None, timeout: float = 600.0) -> str:
    """Run a tool; its output (stdout and stderr) when it succeeds, else ``COMPILE_FAILURE`` whose
    details are ``what`` failed, the command and the whole log."""
    try:
        done = subprocess.run(list(command), input=stdin, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise OffloadError(ErrorCode.COMPILE_FAILURE, f"{what}: {command[0]} ran past {timeout:.0f} s") from exc
    except OSError as exc:
        raise OffloadError(ErrorCode.HOST_TOOL_NOT_FOUND, f"{what}: cannot run {command[0]}: {exc}") from exc
    log = (done.stdout or "") + (done.stderr or "")
    if done.returncode != 0:
        shown = shlex.join(command)  # as the shell would need it (paths with spaces, quotes)
        raise OffloadError(ErrorCode.COMPILE_FAILURE,
                           f"{what} failed (exit status {done.returncode}):\n$ {shown}\n{log.rstrip()}")
    return log
