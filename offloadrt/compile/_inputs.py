"""What a compile reads besides its source, so that the cache keys on it: include options resolved
to absolute paths, the files the compiler read, and the paths it looked at and found nothing.

- cc and clang report the files they read (``-MD -MF deps.d``, :func:`from_make`);
- NVRTC and hiprtc cannot report them, so the source's ``#include``/``#embed``/``__has_include``
  lines are followed the way their search goes (:func:`scan`): the including file's folder for
  ``"..."`` (the current directory for the source itself), then the include folders of the
  options, in order. A file found is read; every place looked at before it (or everywhere, for a
  name found nowhere: a built-in or system header) is *missing*, since a file created there later
  would be read instead. An ``#include`` whose name is a macro cannot be followed: the compile is
  then not cached (:attr:`Inputs.complete` False).

Which files count (:func:`keyed`): everything under an include folder the options name, and
anything else outside the system's folders (:data:`SYSTEM_FOLDERS`: ``/usr/include``, the
compiler's own headers under ``/usr/lib``...), whose headers count as part of the compiler's
identity; offloadrt's own headers are keyed already (:func:`offloadrt.compile._cache.include_digest`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._types import Inputs

# Options that name a folder searched for includes, or a file read as if included, as cc, clang,
# NVRTC and hiprtc spell them: the value is joined (-Idir, --include-path=dir) or the next option.
FOLDER_OPTIONS = ("-I", "-iquote", "-isystem", "-idirafter", "--include-directory", "--include-path",
                  "--system-include", "--embed-dir")
FILE_OPTIONS = ("-include-pch", "-include", "-imacros", "--pre-include")
_BY_LENGTH = sorted(FOLDER_OPTIONS + FILE_OPTIONS, key=len, reverse=True)  # -include-pch before -include
SYSTEM_FOLDERS = ("/usr/include/", "/usr/lib/", "/usr/lib64/", "/usr/libexec/", "/usr/share/", "/lib/", "/lib64/")
OWN_INCLUDE = str(Path(__file__).resolve().parent.parent / "include") + os.sep
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(include_next|include|import|embed)\b[ \t]*([^\n]*)", re.MULTILINE)
_HAS = re.compile(r"__has_(?:include_next|include|embed)\s*\(\s*([^)\n]*)")
_NAME = re.compile(r'"([^"\n]+)"|<([^>\n]+)>')


def include_options(options: Sequence[str], cwd: str) -> list[tuple[str, str]]:
    """Each include option of ``options`` as ``(option, absolute path)``, in order, a relative path
    resolved against ``cwd`` (where the compiler resolves it)."""
    found: list[tuple[str, str]] = []
    index = 0
    while index < len(options):
        option = options[index]
        index += 1
        for flag in _BY_LENGTH:
            if option == flag:
                if index < len(options):
                    found.append((flag, os.path.normpath(os.path.join(cwd, options[index]))))
                    index += 1
                break
            value = option[len(flag) + 1:] if flag.startswith("--") and option.startswith(flag + "=") else \
                option[len(flag):] if not flag.startswith("--") and option.startswith(flag) else ""
            if value:
                found.append((flag, os.path.normpath(os.path.join(cwd, value))))
                break
    return found


def context(options: Sequence[str], in_process: bool) -> tuple[dict[str, Any] | None, list[str]] | None:
    """What the cache's base key holds of a compile's surroundings (None: nothing), and the include
    folders in search order; None when there is no current directory (then relative paths mean
    nothing).

    ``in_process``: the compiler (NVRTC, hiprtc) reads the source as a file in the current
    directory, so it looks for the source's ``"..."`` includes there: the directory is keyed."""
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    resolved = include_options(options, cwd)
    described: dict[str, Any] = {"includes": [list(pair) for pair in resolved]} if resolved else {}
    if in_process:
        described["cwd"] = cwd
    return described or None, folders(resolved)


def folders(resolved: Iterable[tuple[str, str]]) -> list[str]:
    """The include folders among :func:`include_options`' results, in search order."""
    return [path for flag, path in resolved if flag in FOLDER_OPTIONS]


def from_make(text: str, cwd: str, skip: str) -> Inputs:
    """The files of a make rule as ``cc -MD`` writes it (``target: dep dep \\``), absolute (a
    relative one against ``cwd``, the compiler's directory), without those under ``skip`` (the
    compile's own scratch folder, where the source was written)."""
    tokens: list[str] = []
    current: list[str] = []
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    position = 0
    while position < len(text):
        char = text[position]
        if char == "\\" and position + 1 < len(text) and text[position + 1] in " #":
            current.append(text[position + 1])
            position += 2
            continue
        if char == "$" and text.startswith("$$", position):
            current.append("$")
            position += 2
            continue
        if char.isspace():
            if current:
                tokens.append("".join(current))
                current = []
        else:
            current.append(char)
        position += 1
    if current:
        tokens.append("".join(current))
    files: list[str] = []
    target_seen = False
    for token in tokens:
        if not target_seen:
            target_seen = token.endswith(":")
            continue
        path = os.path.normpath(os.path.join(cwd, token))
        if not _under(path, skip) and path not in files:
            files.append(path)
    return Inputs(tuple(files))


def reported(make: Inputs, source: str, cwd: str, options: Sequence[str]) -> Inputs:
    """The files a compiler reported reading (``make``: :func:`from_make`), and where it would have
    found a file that is not there (from :func:`scan`: a header created there later would be read)."""
    return Inputs(make.files, scan(source, cwd, options, None).missing, make.complete)


def merge(*parts: Inputs) -> Inputs:
    """The inputs of several compiler runs of one compile."""
    files = tuple(dict.fromkeys(path for part in parts for path in part.files))
    missing = tuple(dict.fromkeys(path for part in parts for path in part.missing))
    return Inputs(files, missing, all(part.complete for part in parts))


def scan(source: str, cwd: str, options: Sequence[str], source_folder: str | None) -> Inputs:
    """The files ``source`` includes, followed from its ``#include`` lines (see the module's
    docstring), for a compiler run in ``cwd`` with ``options`` that looks for the source's own
    ``"..."`` includes in ``source_folder`` first (None: a scratch folder holding nothing else)."""
    search = folders(include_options(options, cwd))
    files: dict[str, None] = {}
    missing: dict[str, None] = {}
    complete = True
    pending: list[tuple[str, str | None, bool]] = [(source, source_folder, True)]  # (text, its folder, follow it)
    for flag, option_file in include_options(options, ""):
        if flag in FILE_OPTIONS:  # read as if included first: looked for in the current directory first
            pending.append((f'#include "{option_file}"\n', cwd, True))
    seen: set[str] = set()
    while pending:
        text, here, follow = pending.pop()
        if not follow:
            continue
        for quoted, name, embed in _includes(text):
            if name is None:
                complete = False  # a computed name (#include MACRO): which file is read cannot be told
                continue
            places = [name] if os.path.isabs(name) else \
                [os.path.join(folder, name) for folder in ([here] if quoted and here else []) + search]
            for place in (os.path.normpath(candidate) for candidate in places):
                if os.path.isfile(place):
                    files[place] = None
                    if place not in seen:
                        seen.add(place)
                        try:
                            content = "" if embed else Path(place).read_text(errors="replace")
                        except OSError:
                            content = ""
                        pending.append((content, os.path.dirname(place), not embed))
                    break
                missing[place] = None
    return Inputs(tuple(files), tuple(missing), complete)


def _includes(text: str) -> list[tuple[bool, str | None, bool]]:
    """``(quoted, name or None for a computed one, is #embed)`` of each include-like line of ``text``."""
    found: list[tuple[bool, str | None, bool]] = []
    if "include" not in text and "embed" not in text:
        return found
    for match in _DIRECTIVE.finditer(text):
        name = _NAME.match(match.group(2))
        found.append((bool(name and name.group(1)), (name.group(1) or name.group(2)) if name else None,
                      match.group(1) == "embed"))
    for match in _HAS.finditer(text):
        name = _NAME.match(match.group(1))
        found.append((bool(name and name.group(1)), (name.group(1) or name.group(2)) if name else None,
                      "embed" in match.group(0)))
    return found


def keyed(inputs: Inputs, search: Sequence[str]) -> Inputs:
    """The part of ``inputs`` the cache keys on (see the module's docstring), with, for each file
    found under an include folder, the same name under each other include folder as missing (a
    file created there could be read instead)."""
    files = [path for path in inputs.files if not _under(path, OWN_INCLUDE)
             and (any(_under(path, folder) for folder in search) or not path.startswith(SYSTEM_FOLDERS))]
    missing = dict.fromkeys(inputs.missing)
    for path in files:
        for folder in search:
            if _under(path, folder):
                relative = os.path.relpath(path, folder)
                for other in search:
                    shadow = os.path.normpath(os.path.join(other, relative))
                    if other != folder and shadow not in files and not os.path.exists(shadow):
                        missing[shadow] = None
    return Inputs(tuple(files), tuple(missing), inputs.complete)


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)
