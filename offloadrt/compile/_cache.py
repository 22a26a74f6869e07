"""The on-disk cache of compiled images: one file per compile, keyed by everything that shapes the image.

A compile's *base key* is the SHA-256 of its source, options, language, target, the compiler's
identity and version, offloadrt's own headers and the context (:func:`key`): the absolute path
each include option names (``-Iinclude`` resolved against the current directory), and for NVRTC
and hiprtc, which look for the source's ``"..."`` includes there, the current directory itself.
What else the compiler read (the headers it included, :mod:`offloadrt.compile._inputs`) is known
only after a compile, so it is kept as in ccache's "depend mode": the manifest
``<base key>.olrtm`` lists, per variant seen (up to :data:`MAX_VARIANTS`, newest first), each file
read with the SHA-256 of its contents and each path looked at and found missing; a variant is
current when every file still has that content and every missing path is still missing, and its
entry is ``<SHA-256 of the base key and the variant>.olrtc``, or ``<base key>.olrtc`` for a compile
that read no file of the user's (:func:`lookup`, :func:`remember`). A manifest is read under the
same rules as an entry (below). A compile whose inputs cannot be told (an ``#include`` of a macro
for NVRTC/hiprtc) is not cached, nor one where a file it read was changed during the compile
(modified later than :data:`FRESH_SECONDS` before it started: which contents the compiler saw
cannot be told).

An entry is one file, ``<key>.olrtc`` in the cache folder: a magic line, the length of a JSON
header, the header (language, target, kernels' signatures, symbols, the compiler's log, the image's
size and SHA-256) and the image. It is written to a temporary file in the same folder and renamed
into place (``os.replace``), so a reader in another process sees the whole old entry, the whole
new one or none. An entry that cannot be read back whole (truncated, damaged, another format) is a
miss: it is removed and the source compiled again.

The folder is ``$OFFLOADRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/offloadrt``, else
``~/.cache/offloadrt``. ``OFFLOADRT_CACHE_DIR=""`` is refused (set it to a folder, or pass
``cache=False``).

An entry is native code that runs in the process when loaded, so the cache trusts only what the
user alone could have written: offloadrt creates the folder ``0700``; a folder that another user
owns, or that its group or others may write, is not used at all (one ``OffloadWarning``, then
compiles go without the cache, as pip does with an unsafe cache folder); an entry is read only if
it is a regular file the user owns (opened without following a symbolic link and without blocking
on a FIFO), of at most :data:`MAX_ENTRY_BYTES`.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, OffloadError, OffloadWarning
from . import _signature
from ._types import Compiled, Inputs, Target

FORMAT = 2  # bump when the entry layout or the meaning of a key changes (2: included files keyed)
MAX_ENTRY_BYTES = 1 << 30  # larger files under an entry's name are not read
MAGIC = b"offloadrt-compiled\n"
SUFFIX = ".olrtc"
MANIFEST_SUFFIX = ".olrtm"
MANIFEST_MAGIC = b"offloadrt-manifest\n"
MAX_VARIANTS = 8  # the variants of one base key kept in its manifest (headers edited back and forth)
FRESH_SECONDS = 0.05  # a file read by a compile modified this close to its start may have changed during it
_HEADER_SIZE = struct.Struct("<Q")
_INCLUDE_DIGEST: str | None = None
_STALE_SECONDS = 3600.0


def folder() -> Path:
    """The cache folder (not created here)."""
    chosen = os.environ.get("OFFLOADRT_CACHE_DIR")
    if chosen is not None:
        if not chosen.strip():
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               "OFFLOADRT_CACHE_DIR is set but empty: set it to a folder, or unset it to use the "
                               "user cache folder")
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "offloadrt"


def include_digest() -> str:
    """SHA-256 of offloadrt's headers (``offloadrt/include``), which every host image is built with;
    computed once per process."""
    global _INCLUDE_DIGEST
    if _INCLUDE_DIGEST is None:
        root = Path(__file__).resolve().parent.parent / "include"
        digest = hashlib.sha256()
        for path in sorted(root.rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _INCLUDE_DIGEST = digest.hexdigest()
    return _INCLUDE_DIGEST


def key(source: str, options: tuple[str, ...], lang: str, target: Target, identity: str,
        context: Any = None) -> str:
    """The base key of one compile (``context``: what else shapes it, JSON-serialisable: the
    resolved include options and, where the compiler searches it, the current directory)."""
    described = json.dumps({"format": FORMAT, "source": source, "options": list(options), "lang": lang,
                            "target": [target.kind, target.arch], "compiler": identity,
                            "headers": include_digest(), "context": context}, sort_keys=True)
    return hashlib.sha256(described.encode()).hexdigest()


def lookup(base: str, where: Path | None = None) -> Compiled | None:
    """The entry of the current variant of ``base`` (see the module's docstring), or None."""
    directory = where or folder()
    if not trusted(directory):
        return None
    for variant in _variants(base, directory):
        if _current(variant):
            found = _load(_variant_name(base, variant), directory)
            if found is not None:
                return found
    return None


def remember(base: str, compiled: Compiled, inputs: Inputs, started: float, lang: str, target: Target,
             where: Path | None = None) -> bool:
    """Store ``compiled`` as the variant of ``base`` whose inputs are ``inputs`` (the files it
    depends on: :func:`offloadrt.compile._inputs.keyed`), for a compile that started at
    ``started`` (``time.time()``); False when it cannot be cached (inputs unknown, or changed
    during the compile). A folder that cannot be written is ``HOST_IO``."""
    if not inputs.complete:
        return False
    files: list[list[str]] = []
    for path in sorted(set(inputs.files)):
        digest = _digest(path, not_after=started - FRESH_SECONDS)
        if digest is None:
            return False
        files.append([path, digest])
    if any(os.path.exists(path) for path in inputs.missing):
        return False  # created during the compile: which one the compiler saw cannot be told
    variant = {"files": files, "missing": sorted(set(inputs.missing))}
    directory = where or folder()
    store(_variant_name(base, variant), compiled, lang, target, directory)
    if not trusted(directory):
        return False
    kept = [variant] + [other for other in _variants(base, directory) if other != variant]
    encoded = json.dumps({"format": FORMAT, "variants": kept[:MAX_VARIANTS]}, sort_keys=True).encode()
    _write(directory / f"{base}{MANIFEST_SUFFIX}", MANIFEST_MAGIC + encoded, base)
    return True


def _variant_name(base: str, variant: dict[str, Any]) -> str:
    """The entry of ``variant``: the base key itself for a compile that read no file of the user's."""
    if not variant["files"] and not variant["missing"]:
        return base
    return hashlib.sha256(f"{base}\0{json.dumps(variant, sort_keys=True)}".encode()).hexdigest()


def _variants(base: str, directory: Path) -> list[dict[str, Any]]:
    """The variants in the manifest of ``base`` ([] when there is none or it is damaged)."""
    data = _read(directory / f"{base}{MANIFEST_SUFFIX}")
    if data is None or not data.startswith(MANIFEST_MAGIC):
        return []
    try:
        manifest = json.loads(data[len(MANIFEST_MAGIC):])
        variants = manifest["variants"] if manifest["format"] == FORMAT else []
        return [variant for variant in variants if isinstance(variant, dict) and _well_formed(variant)]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return []


def _well_formed(variant: dict[str, Any]) -> bool:
    files, missing = variant.get("files"), variant.get("missing")
    return isinstance(files, list) and isinstance(missing, list) and all(isinstance(path, str) for path in missing) \
        and all(isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair)
                for pair in files)


def _current(variant: dict[str, Any]) -> bool:
    """Whether every file of ``variant`` still has its recorded contents and every missing path is missing."""
    return all(_digest(path) == digest for path, digest in variant["files"]) \
        and not any(os.path.exists(path) for path in variant["missing"])


def _digest(path: str, not_after: float | None = None) -> str | None:
    """SHA-256 of the regular file at ``path``; None when it cannot be read, or when it was modified
    after ``not_after`` (seconds since the epoch; looked at after reading it)."""
    try:  # not blocking on a FIFO put where a header was
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        with os.fdopen(handle, "rb") as file:
            handle = -1
            digest = hashlib.file_digest(file, "sha256").hexdigest()
            if not_after is not None and os.fstat(file.fileno()).st_mtime_ns > not_after * 1e9:
                return None
        return digest
    except OSError:
        return None
    finally:
        if handle >= 0:
            os.close(handle)


def _path(name: str, where: Path | None = None) -> Path:
    return (where or folder()) / f"{name}{SUFFIX}"


_warned_folders: set[str] = set()  # untrusted folders already warned about (once per process each)


def trusted(directory: Path) -> bool:
    """Whether ``directory`` may hold entries this process loads: it is missing (it will be made
    ``0700``), or a folder the user owns that neither its group nor others may write. The first
    time a folder fails the test, an ``OffloadWarning`` says why."""
    try:
        info = os.stat(directory)
    except (FileNotFoundError, NotADirectoryError):
        return True  # nothing there to trust or not: a store makes it (or says why it cannot)
    except OSError as exc:
        why = f"it cannot be examined ({exc})"
    else:
        if not stat.S_ISDIR(info.st_mode):
            why = "it is not a folder"
        elif info.st_uid != os.getuid():
            why = f"it belongs to another user (uid {info.st_uid})"
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            why = f"its group or other users may write it (mode {stat.S_IMODE(info.st_mode):o})"
        else:
            return True
    if str(directory) not in _warned_folders:
        _warned_folders.add(str(directory))
        warnings.warn(f"offloadrt: not using the compile cache {directory}: {why}, so another user could put code "
                      f"there that would run in this process. Compiling without the cache; set "
                      f"OFFLOADRT_CACHE_DIR to a folder only you can write (offloadrt makes it 0700)",
                      OffloadWarning, stacklevel=3)
    return False


def _read(path: Path) -> bytes | None:
    """The bytes of the entry at ``path`` if it is a regular file of this user of at most
    :data:`MAX_ENTRY_BYTES` (a symbolic link, a FIFO, a device or a foreign file is not read)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                or info.st_size > MAX_ENTRY_BYTES):
            return None
        with os.fdopen(handle, "rb") as file:
            handle = -1
            data = file.read(info.st_size + 1)  # its size, not the limit: a 1 GiB read buffer costs 40 µs
        return data if len(data) == info.st_size else None  # else it changed while read: a miss
    except OSError:
        return None
    finally:
        if handle >= 0:
            os.close(handle)


def load(name: str, where: Path | None = None) -> Compiled | None:
    """The entry ``name``, or None when there is none, it is damaged (then it is removed) or it
    cannot be trusted (see the module's docstring)."""
    directory = where or folder()
    return _load(name, directory) if trusted(directory) else None


def _load(name: str, directory: Path) -> Compiled | None:
    path = _path(name, directory)
    data = _read(path)
    if data is None:
        return None  # missing, unreadable or untrusted: compile again (a store replaces it)
    entry = _parse(data)
    if entry is None:
        _discard(path)
        return None
    header, image = entry
    try:
        kernels = {kernel: None if described is None else _signature.rebuild(described)
                   for kernel, described in header["kernels"].items()}
        return Compiled(image, kernels, dict(header["symbols"]), str(header["log"]))
    except (KeyError, TypeError, ValueError, AttributeError):
        _discard(path)
        return None


def _parse(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    start = len(MAGIC) + _HEADER_SIZE.size
    if not data.startswith(MAGIC) or len(data) < start:
        return None
    size, = _HEADER_SIZE.unpack_from(data, len(MAGIC))
    if size > len(data) - start:
        return None
    try:
        header = json.loads(data[start:start + size])
    except (UnicodeDecodeError, ValueError):
        return None
    image = data[start + size:]
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("image_size") != len(image) \
            or header.get("image_sha256") != hashlib.sha256(image).hexdigest():
        return None
    return header, image


def store(name: str, compiled: Compiled, lang: str, target: Target, where: Path | None = None) -> None:
    """Write an entry (atomically: a temporary file renamed into place). A folder that cannot be
    written is reported as ``HOST_IO``."""
    directory = where or folder()
    header = {
        "format": FORMAT, "lang": lang, "target": [target.kind, target.arch], "created": time.time(),
        "kernels": {kernel: None if sig is None else _signature.describe(sig)
                    for kernel, sig in compiled.kernels.items()},
        "symbols": compiled.symbols, "log": compiled.log,
        "image_size": len(compiled.image), "image_sha256": hashlib.sha256(compiled.image).hexdigest(),
    }
    encoded = json.dumps(header, sort_keys=True).encode()
    if not trusted(directory):
        return
    _write(_path(name, directory), MAGIC + _HEADER_SIZE.pack(len(encoded)) + encoded + compiled.image, name)


def _write(path: Path, data: bytes, name: str) -> None:
    """Write ``path`` atomically (a temporary file renamed into place), making its folder ``0700``
    first where it is missing; ``HOST_IO`` when it cannot be written."""
    directory = path.parent
    try:
        if not directory.exists():
            directory.parent.mkdir(parents=True, exist_ok=True)
            directory.mkdir(mode=0o700, exist_ok=True)  # only this user: entries run as native code
        handle, temporary = tempfile.mkstemp(prefix=f".{name[:16]}-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except BaseException:
            _discard(Path(temporary))
            raise
    except OSError as exc:
        raise OffloadError(ErrorCode.HOST_IO, f"cannot write the compile cache in {directory}: {exc} "
                                              f"(set OFFLOADRT_CACHE_DIR to a writable folder, or pass "
                                              f"cache=False)") from exc


def _discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass  # another process removed or replaced it first


@dataclass(frozen=True)
class Entry:
    """One cache entry as ``python -m offloadrt cache list`` shows it (``lang``/``target`` are
    ``"?"`` for a damaged entry)."""

    name: str
    size: int
    lang: str
    target: str
    kernels: tuple[str, ...]
    created: float


def entries(where: Path | None = None) -> list[Entry]:
    """The entries in the cache folder, oldest first."""
    directory = where or folder()
    found = []
    for path in sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []:
        try:
            info = path.lstat()
        except OSError:
            continue
        data = _read(path)
        if data is None:  # not a regular file of this user (a link, a FIFO, a device) or too large
            found.append(Entry(path.stem, info.st_size, "?", "?", (), info.st_mtime))
            continue
        parsed = _parse(data)
        if parsed is None:
            found.append(Entry(path.stem, len(data), "?", "?", (), info.st_mtime))
            continue
        header = parsed[0]
        kind, arch = header.get("target", ["?", ""])
        found.append(Entry(path.stem, len(data), str(header.get("lang", "?")), f"{kind}:{arch}" if arch else str(kind),
                           tuple(header.get("kernels", {})), float(header.get("created", info.st_mtime))))
    return sorted(found, key=lambda entry: entry.created)


def clear(where: Path | None = None) -> tuple[int, int]:
    """Remove every entry and manifest, and temporary files a killed process left (older than an
    hour: younger ones may be another process's write in progress); returns (entries removed,
    bytes freed)."""
    directory = where or folder()
    removed = freed = 0
    if not directory.is_dir():
        return 0, 0
    for path in [*directory.glob(f"*{SUFFIX}"), *directory.glob(f"*{MANIFEST_SUFFIX}"), *directory.glob(".*.tmp")]:
        try:
            info = path.lstat()
            if path.suffix not in (SUFFIX, MANIFEST_SUFFIX) and time.time() - info.st_mtime < _STALE_SECONDS:
                continue
            path.unlink()
        except OSError:
            continue
        size = info.st_size
        if path.suffix == SUFFIX:
            removed += 1
        freed += size
    return removed, freed
