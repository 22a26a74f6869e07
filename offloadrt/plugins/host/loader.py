"""Host programs: the image checks, the exported symbol table, and loading through memfd + dlopen.

No byte string may crash or hang this process, so an image passes two checks before the first
``dlopen`` here:

1. :func:`check_image`, a structural check of everything the dynamic loader reads (``elf``,
   ``elf_dynamic``): a few hundred microseconds, and it rejects most malformed images;
2. a test load in a separate, short-lived process (``probe``): the image is loaded and
   unloaded there first, and a crash, an abnormal exit, a loader inconsistency or a timeout there
   makes it ``INVALID_BINARY`` here.

Both answers are remembered by the image's SHA-256 for the life of the process (failures too,
except those that may depend on the moment: a loader error such as a missing library, a
timeout), so loading the same bytes again costs a hash and a dictionary lookup.

An image is loaded from an anonymous in-memory file (the same sealed file the test process
loaded), so the caller's buffer is never touched and the same bytes can be loaded twice as two
independent libraries.
"""

from __future__ import annotations

import _ctypes
import ctypes
import fcntl
import hashlib
import os
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass

from ...errors import ErrorCode, OffloadError
from . import probe
from .elf import (
    ELF_MAGIC,
    ET_DYN,
    MACHINE_NAMES,
    ElfImage,
    check_header,
    check_memory_segments,
    check_section_placement,
    machine_name,
    read_sections,
    read_segments,
)
from .elf_dynamic import ElfSymbol, check_dynamic

__all__ = ["ELF_MAGIC", "ET_DYN", "MACHINE_NAMES", "ElfSymbol", "check_image", "dlclose", "dlopen_image",
           "is_loadable", "machine_name", "read_symbols"]


def _host_elf_header() -> tuple[int, int, int]:
    """(class, data encoding, e_machine) of the running interpreter."""
    with open(sys.executable, "rb") as exe:
        head = exe.read(20)
    endian = "<" if head[5] == 1 else ">"
    (machine,) = struct.unpack_from(endian + "H", head, 18)
    return head[4], head[5], machine


HOST_CLASS, HOST_DATA, HOST_MACHINE = _host_elf_header()
RECORD_LIMIT = 4096  # images remembered per process; the oldest is forgotten first


@dataclass
class _Record:
    """What this process knows about one image (by content)."""

    symbols: dict[str, ElfSymbol] | None  # None: the structural check rejected it
    span: int = 0  # bytes of address space its loadable segments cover
    reason: str = ""  # why it cannot be loaded, once known
    verified: bool = False  # a test process loaded and unloaded it cleanly


_records: dict[bytes, _Record] = {}
_records_lock = threading.Lock()  # guards _records
_last_digest = threading.local()  # this thread's last (image, digest): one load hashes its image once


def check_image(image: bytes) -> None:
    """Raise ``INVALID_BINARY``, with the reason, unless ``image`` is a well-formed ELF shared object
    for this host: every header, segment, section, dynamic-table entry, relocation and symbol the
    dynamic loader uses lies inside the file and agrees with the rest."""
    _checked(image)


def read_symbols(image: bytes) -> dict[str, ElfSymbol]:
    """The defined, exported functions and data objects of the image's dynamic symbol table.

    Raises only ``OffloadError`` (``INVALID_BINARY`` for a malformed image)."""
    symbols = _checked(image).symbols
    assert symbols is not None
    return dict(symbols)


def is_loadable(image: bytes) -> bool:
    """Whether :func:`dlopen_image` would load ``image``: the structural check and a test load in a
    separate process (remembered); never loads it into this process."""
    try:
        record = _checked(image)
        if not record.verified:
            fd = _sealed_file(image)
            try:
                _verify(record, fd)
            finally:
                os.close(fd)
    except OffloadError:
        return False
    finally:
        _last_digest.image = None
    return True


def dlopen_image(image: bytes) -> ctypes.CDLL:
    """Load ``image`` as a new, private library (``RTLD_LOCAL | RTLD_NOW``) once it passed the
    structural check and a test load in a separate process (both remembered by content).

    Raises only ``OffloadError``. The memfd stays open until :func:`dlclose`: the loader matches
    libraries by path, so a path that another loaded program could reuse (a closed fd number)
    would hand back that program instead of loading this one.
    """
    try:
        record = _checked(image)
        fd = _sealed_file(image)
    finally:
        _last_digest.image = None
    try:
        if not record.verified:
            _verify(record, fd)
        lib = _dlopen(f"/proc/self/fd/{fd}", os.RTLD_LOCAL | os.RTLD_NOW)
    except BaseException:
        os.close(fd)
        raise
    _OPEN_FDS[lib._handle] = fd  # type: ignore[attr-defined]
    return lib


_OPEN_FDS: dict[int, int] = {}  # library handle -> the memfd it was loaded from
_PINNED_FDS: list[int] = []  # memfds of libraries that stayed loaded after dlclose: their names stay taken


def dlclose(lib: ctypes.CDLL) -> None:
    """Unload ``lib``; its destructors run now. No function of it may be called afterwards.

    A library the loader keeps (``DF_1_NODELETE``, ``STB_GNU_UNIQUE`` symbols) keeps its memfd
    open, so that its ``/proc/self/fd/N`` name never names another image: the loader would hand
    back the old library for it.
    """
    handle = lib._handle  # type: ignore[attr-defined]
    _ctypes.dlclose(handle)
    fd = _OPEN_FDS.pop(handle, None)
    if fd is None:
        return
    try:
        kept = _ctypes.dlopen(f"/proc/self/fd/{fd}", os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        os.close(fd)
        return
    _ctypes.dlclose(kept)
    _PINNED_FDS.append(fd)


def _checked(image: bytes) -> _Record:
    """The record of ``image``, checking its structure the first time; raises if it failed."""
    digest = _digest(image)
    with _records_lock:
        record = _records.get(digest)
    if record is None:
        try:
            record = _Record(*_check_structure(bytes(image)))
        except OffloadError as exc:
            record = _Record(None, reason=exc.details)
        with _records_lock:
            record = _records.setdefault(digest, record)
            if len(_records) > RECORD_LIMIT:
                del _records[next(iter(_records))]
    if record.symbols is None:
        raise OffloadError(ErrorCode.INVALID_BINARY, record.reason)
    return record


def _check_structure(image: bytes) -> tuple[dict[str, ElfSymbol], int]:
    """Run the structural checks; return the exported symbols and the span of the loadable segments.
    Raises only ``OffloadError``."""
    try:
        layout, header = check_header(image, (HOST_CLASS, HOST_DATA, HOST_MACHINE))
        segments = read_segments(image, layout, header)
        sections = read_sections(image, layout, header)
        elf = ElfImage(image, layout, header[2], segments, sections)
        dynamic = check_memory_segments(elf, header)
        check_section_placement(elf)
        return check_dynamic(elf, dynamic), elf.span()
    except OffloadError:
        raise
    except Exception as exc:  # a field combination the checks did not foresee is still bad input
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"malformed ELF image ({type(exc).__name__}: {exc})") from exc


def _digest(image: bytes) -> bytes:
    if type(image) is bytes and getattr(_last_digest, "image", None) is image:
        return _last_digest.digest  # type: ignore[no-any-return]
    digest = hashlib.sha256(image).digest()
    if type(image) is bytes:  # immutable: the digest stays right while we hold the same object
        _last_digest.image, _last_digest.digest = image, digest
    return digest


def _verify(record: _Record, fd: int) -> None:
    """Test-load the image in ``fd`` in a separate process unless this record failed or passed before."""
    if record.reason:
        raise OffloadError(ErrorCode.INVALID_BINARY, record.reason)
    verdict = probe.verify(fd, record.span)
    if verdict.loaded:
        record.verified = True
        return
    if verdict.final:
        record.reason = verdict.reason
    raise OffloadError(ErrorCode.INVALID_BINARY, verdict.reason)


def _sealed_file(image: bytes) -> int:
    """An anonymous file holding ``image`` that nobody can change (the test process loads the same one)."""
    try:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("offloadrt-program", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        else:
            fd, path = tempfile.mkstemp(prefix="offloadrt-program-", suffix=".so")
            os.unlink(path)
    except OSError as exc:
        raise OffloadError(ErrorCode.OUT_OF_RESOURCES, f"cannot create a memory file for the image: {exc}") from None
    try:
        view = memoryview(image)
        while view:
            view = view[os.write(fd, view):]
        if hasattr(fcntl, "F_ADD_SEALS"):
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                        | fcntl.F_SEAL_WRITE)
    except OSError as exc:
        os.close(fd)
        raise OffloadError(ErrorCode.OUT_OF_RESOURCES, f"cannot write the image to a memory file: {exc}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _dlopen(path: str, mode: int) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(path, mode=mode)
    except OSError as exc:
        if _out_of_memory(str(exc)):  # the image passed its checks: the process lacks memory or mappings
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                               f"the dynamic loader could not map the image: {exc} ({_mappings()})") from None
        raise OffloadError(ErrorCode.INVALID_BINARY, f"the dynamic loader rejected the image: {exc}") from None
    except UnicodeDecodeError as exc:  # the loader's message holds bytes that are not UTF-8 (a library name)
        message = bytes(exc.object).decode("utf-8", "replace")
        raise OffloadError(ErrorCode.INVALID_BINARY, f"the dynamic loader rejected the image: {message}") from None


def _out_of_memory(message: str) -> bool:
    """Whether a loader message says memory could not be mapped (not that the image is wrong)."""
    lowered = message.lower()
    return "failed to map" in lowered or "cannot allocate memory" in lowered or "cannot map" in lowered


def _mappings() -> str:
    """How many memory mappings the process has, and how many Linux allows it."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            used = sum(1 for _ in maps)
        with open("/proc/sys/vm/max_map_count") as limit:
            most = int(limit.read())
    except (OSError, ValueError):
        return "out of memory or of memory mappings"
    return f"the process has {used} memory mappings of the {most} Linux allows it (vm.max_map_count)"
