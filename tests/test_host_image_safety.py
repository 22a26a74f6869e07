"""Host program images that must not crash or hang the process: the structural check, the test
load in a separate process, the verdicts remembered by content, and only ``OffloadError`` escaping.

Each structural rule rejects an image crafted from a valid one (tests/kernels/basic.c) with a
reason, before any test process runs; valid images (every test kernel, every library this process
has loaded) pass. Images that are sound on paper but crash or hang the loader (a constructor that
faults or spins, a ``DT_FINI`` that faults, a loader assertion) are found by the test load, and
this process lives on. tests/test_host_image_fuzz.py mutates images at random.
"""

from __future__ import annotations

import ctypes
import io
import itertools
import os
import re
import select
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest
from conftest import JOIN_TIMEOUT, expect_error, launch_args, u32_view
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offloadrt import AllocType, ErrorCode, OffloadError, SymbolKind, api
from offloadrt.plugins.host import loader as host_loader
from offloadrt.plugins.host import probe as host_probe

DT_NULL, DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_RELACOUNT = 0, 1, 4, 5, 6, 0x6FFFFFF9
DT_INIT, DT_FINI, DT_STRSZ, DT_SYMENT, DT_RELAENT, DT_PLTREL = 12, 13, 10, 11, 9, 20
DT_INIT_ARRAYSZ, DT_GNU_HASH, DT_VERNEED, DT_VERNEEDNUM, DT_FLAGS_1 = 27, 0x6FFFFEF5, 0x6FFFFFFE, 0x6FFFFFFF, 0x6FFFFFFB
PT_LOAD, PT_DYNAMIC, PT_NOTE, PT_TLS, PT_GNU_RELRO = 1, 2, 4, 7, 0x6474E552
IGNORED_TAG = 0x6FFFFD00  # a tag no loader knows: it hides an entry without moving the others
_variants = itertools.count()


# ---- reading and editing ELF64 images (pyelftools reads; struct writes) ---------------------------

def elf(image: bytes) -> ELFFile:
    return ELFFile(io.BytesIO(image))


def patch(image: bytes, offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(image)
    struct.pack_into("<" + fmt, data, offset, value)
    return bytes(data)


def phdr_offset(image: bytes, p_type: int, nth: int = 0) -> int:
    header = elf(image).header
    found = [header.e_phoff + 56 * i for i in range(header.e_phnum)
             if struct.unpack_from("<I", image, header.e_phoff + 56 * i)[0] == p_type]
    return found[nth]


def shdr_offset(image: bytes, name: str) -> int:
    parsed = elf(image)
    index = next(i for i, s in enumerate(parsed.iter_sections()) if s.name == name)
    return parsed.header.e_shoff + 64 * index


def section(image: bytes, name: str):  # -> elftools Section
    return elf(image).get_section_by_name(name)


def dynamic_entries(image: bytes) -> list[tuple[int, int, int]]:
    """(file offset, tag, value) of every entry of PT_DYNAMIC, DT_NULLs included."""
    seg = next(s for s in elf(image).iter_segments() if s["p_type"] == "PT_DYNAMIC")
    return [(seg["p_offset"] + 16 * i, *struct.unpack_from("<qQ", image, seg["p_offset"] + 16 * i))
            for i in range(seg["p_filesz"] // 16)]


def dynamic_value(image: bytes, tag: int) -> int:
    return next(value for _, t, value in dynamic_entries(image) if t == tag)


def set_dynamic(image: bytes, tag: int, value: int | None = None, new_tag: int | None = None) -> bytes:
    offset = next(off for off, t, _ in dynamic_entries(image) if t == tag)
    if new_tag is not None:
        image = patch(image, offset, "q", new_tag)
    if value is not None:
        image = patch(image, offset + 8, "Q", value)
    return image


def rela_offset(image: bytes, predicate: Callable[[int, int, int, int], bool]) -> int:
    """File offset of the first .rela.dyn entry with predicate(r_offset, r_type, r_sym, r_addend)."""
    sec = section(image, ".rela.dyn")
    for at in range(sec["sh_offset"], sec["sh_offset"] + sec["sh_size"], 24):
        r_offset, r_info, r_addend = struct.unpack_from("<QQq", image, at)
        if predicate(r_offset, r_info & 0xFFFFFFFF, r_info >> 32, r_addend):
            return at
    raise LookupError("no such relocation")


def dynsym_offset(image: bytes, name: str) -> int:
    sec = section(image, ".dynsym")
    index = next(i for i, sym in enumerate(sec.iter_symbols()) if sym.name == name)
    return sec["sh_offset"] + 24 * index


def variant(image: bytes) -> bytes:
    """``image`` with new bytes in its .comment section (never loaded): new content, same program."""
    sec = section(image, ".comment")
    return patch(image, sec["sh_offset"], "I", 0x5EED0000 + next(_variants))


def old_read_symbols(image: bytes) -> dict[str, tuple[str, int]]:
    """What offloadrt read before the structural check existed (pyelftools, .dynsym): the oracle."""
    table = section(image, ".dynsym")
    symbols = {}
    for sym in table.iter_symbols():
        info = sym["st_info"]
        if sym["st_shndx"] == "SHN_UNDEF" or info["bind"] not in ("STB_GLOBAL", "STB_WEAK"):
            continue
        if sym["st_other"]["visibility"] not in ("STV_DEFAULT", "STV_PROTECTED"):
            continue
        kind = {"STT_FUNC": "function", "STT_GNU_IFUNC": "function", "STT_OBJECT": "object"}.get(info["type"])
        if kind:
            symbols[sym.name] = (kind, sym["st_size"])
    return symbols


def assert_runtime_works(host: api.Device, image: bytes) -> None:
    program = api.olCreateProgram(host, image)
    out = api.olMemAlloc(host, AllocType.HOST, 4 * 12)
    try:
        api.olLaunchKernel(None, host, api.olGetSymbol(program, "foo", SymbolKind.KERNEL), struct.pack("P", out),
                           launch_args(3, 4))
        assert list(u32_view(out, 12)) == list(range(12))
    finally:
        api.olMemFree(out)
        api.olDestroyProgram(program)


@pytest.fixture(scope="module")
def basic_image(build) -> bytes:
    image = build("basic")
    assert image[4] == 2 and image[5] == 1, "these tests edit ELF64 little-endian images"
    return image


# ---- the structural check --------------------------------------------------------------------------

def test_every_test_kernel_passes_and_reads_the_same_symbols_as_before(build) -> None:
    from conftest import KERNELS

    for source in sorted(KERNELS.glob("*.c")):
        image = build(source.stem)
        host_loader.check_image(image)
        found = {name: (s.kind, s.size) for name, s in host_loader.read_symbols(image).items()}
        assert found == old_read_symbols(image), source.name


def test_libraries_this_process_loaded_pass_the_structural_check() -> None:
    """Real shared objects from several toolchains: libc, libpython's extensions, NumPy's."""
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if ".so" in path and path.startswith("/") and os.path.isfile(path):
                paths.add(path)
    checked = 0
    for path in sorted(paths):
        with open(path, "rb") as file:
            image = file.read(64 << 20)
        if image[:4] != b"\x7fELF" or struct.unpack_from("<H", image, 16)[0] != 3 or len(image) >= 64 << 20:
            continue
        host_loader.check_image(image)
        checked += 1
    assert checked >= 5, f"only {checked} libraries found in /proc/self/maps"


def _ehdr(offset: int, fmt: str, value: int) -> Callable[[bytes], bytes]:
    return lambda image: patch(image, offset, fmt, value)


def _phdr(p_type: int, field: int, fmt: str, value: Callable[[int], int], nth: int = 0) -> Callable[[bytes], bytes]:
    def edit(image: bytes) -> bytes:
        at = phdr_offset(image, p_type, nth) + field
        return patch(image, at, fmt, value(struct.unpack_from("<" + fmt, image, at)[0]))
    return edit


def _shdr(name: str, field: int, fmt: str, value: Callable[[bytes], int]) -> Callable[[bytes], bytes]:
    return lambda image: patch(image, shdr_offset(image, name) + field, fmt, value(image))


def _swap_loads(image: bytes) -> bytes:
    first, second = phdr_offset(image, PT_LOAD, 0), phdr_offset(image, PT_LOAD, 1)
    data = bytearray(image)
    data[first:first + 56], data[second:second + 56] = data[second:second + 56], data[first:first + 56]
    return bytes(data)


def _unterminated_dynamic(image: bytes) -> bytes:
    for i, (offset, tag, _) in enumerate(dynamic_entries(image)):
        if tag == DT_NULL:
            image = patch(image, offset, "q", IGNORED_TAG + i)
    return image


def _rela(predicate: Callable[[int, int, int, int], bool], field: int, fmt: str,
          value: Callable[[bytes], int]) -> Callable[[bytes], bytes]:
    return lambda image: patch(image, rela_offset(image, predicate) + field, fmt, value(image))


def _sym(name: str, field: int, fmt: str, value: Callable[[bytes], int]) -> Callable[[bytes], bytes]:
    return lambda image: patch(image, dynsym_offset(image, name) + field, fmt, value(image))


def _verneed_file(image: bytes) -> bytes:
    at = section(image, ".gnu.version_r")["sh_offset"]
    foo = section(image, ".dynstr").data().index(b"\0foo\0") + 1
    return patch(image, at + 4, "I", foo)


def _init_array_slot_unrelocated(image: bytes) -> bytes:
    slot = dynamic_value(image, 25)  # DT_INIT_ARRAY
    at = rela_offset(image, lambda off, *_: off == slot)
    image = set_dynamic(image, DT_RELACOUNT, new_tag=IGNORED_TAG)  # it counted this one as relative
    return patch(image, at + 8, "Q", 0)  # R_X86_64_NONE


def _address_of(name: str) -> Callable[[bytes], int]:
    return lambda image: section(image, name)["sh_addr"]


def RELATIVE(r_offset: int, r_type: int, r_sym: int, r_addend: int) -> bool:
    return r_type == 8  # R_X86_64_RELATIVE


def GLOB_DAT(r_offset: int, r_type: int, r_sym: int, r_addend: int) -> bool:
    return r_type == 6 and r_sym > 0  # R_X86_64_GLOB_DAT

STRUCTURE_CASES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    # ELF header
    "ei-version": (_ehdr(6, "B", 2), "unknown ELF version"),
    "ident-padding": (_ehdr(10, "B", 1), "nonzero padding"),
    "osabi": (_ehdr(7, "B", 9), "unsupported OS ABI"),
    "ehsize": (_ehdr(52, "H", 60), "e_ehsize is 60"),
    "phentsize": (_ehdr(54, "H", 48), "e_phentsize is 48"),
    "no-program-headers": (_ehdr(56, "H", 0), "no program headers"),
    "program-headers-past-the-end": (lambda image: patch(image, 32, "Q", len(image) - 8), "program header table"),
    "shentsize": (_ehdr(58, "H", 32), "e_shentsize is 32"),
    "shstrndx": (_ehdr(62, "H", 999), "e_shstrndx 999"),
    # program headers
    "load-past-the-end": (_phdr(PT_LOAD, 32, "Q", lambda v: v + 0x10000, nth=3), "truncated image"),
    "memsz-below-filesz": (_phdr(PT_LOAD, 40, "Q", lambda v: 8, nth=1), "smaller than p_filesz"),
    "loads-out-of-order": (_swap_loads, "ascending address order"),
    "load-address-not-congruent": (_phdr(PT_LOAD, 16, "Q", lambda v: v + 8, nth=3), "not congruent"),
    "load-alignment": (_phdr(PT_LOAD, 48, "Q", lambda v: 0x1800, nth=1), "alignment 0x1800"),
    "dynamic-outside-every-load": (_phdr(PT_DYNAMIC, 16, "Q", lambda v: 0x100000), "PT_DYNAMIC"),
    "two-dynamic-segments": (_phdr(PT_NOTE, 0, "I", lambda v: PT_DYNAMIC), "more than one PT_DYNAMIC"),
    "relro-outside-its-load": (_phdr(PT_GNU_RELRO, 40, "Q", lambda v: 0x100000), "PT_GNU_RELRO"),
    "tls-alignment": (_phdr(PT_TLS, 48, "Q", lambda v: 3), "PT_TLS): alignment 0x3"),
    # section headers
    "section-past-the-end": (_shdr(".text", 24, "Q", len), "truncated image: section"),
    "huge-section-offset": (_shdr(".comment", 24, "Q", lambda image: 1 << 63), "truncated image: section"),
    "section-link": (_shdr(".dynsym", 40, "I", lambda image: 999), "sh_link 999"),
    "section-entry-size": (_shdr(".dynsym", 56, "Q", lambda image: 16), "entry size 16"),
    "section-moved": (_shdr(".dynsym", 24, "Q", lambda image: section(image, ".dynsym")["sh_offset"] + 8),
                      "does not match where its loadable segment puts"),
    "section-name": (_shdr(".text", 0, "I", lambda image: 0xFFFF), "section name lies outside"),
    # the dynamic table
    "dynamic-unterminated": (_unterminated_dynamic, "no DT_NULL terminator"),
    "strsz-past-its-segment": (lambda image: set_dynamic(image, DT_STRSZ, 0x100000), "dynamic string table"),
    "needed-name-outside-strtab": (lambda image: set_dynamic(image, DT_NEEDED, dynamic_value(image, DT_STRSZ) + 5),
                                   "DT_NEEDED: string offset"),
    "rela-without-relaent": (lambda image: set_dynamic(image, DT_RELAENT, new_tag=IGNORED_TAG),
                             "DT_RELA needs DT_RELASZ and DT_RELAENT"),
    "relaent": (lambda image: set_dynamic(image, DT_RELAENT, 16), "DT_RELAENT is 16"),
    "pltrel": (lambda image: set_dynamic(image, DT_PLTREL, 5), "DT_PLTREL is 5"),
    "relacount": (lambda image: set_dynamic(image, DT_RELACOUNT, 1000), "1000 relative relocations counted"),
    "symtab-twice": (lambda image: set_dynamic(image, DT_SYMENT, dynamic_value(image, DT_SYMTAB), new_tag=DT_SYMTAB),
                     "more than one DT_SYMTAB"),
    "no-hash-table": (lambda image: set_dynamic(image, DT_GNU_HASH, new_tag=IGNORED_TAG),
                      "neither DT_HASH nor DT_GNU_HASH"),
    "gnu-hash-without-buckets": (lambda image: patch(image, section(image, ".gnu.hash")["sh_offset"], "I", 0),
                                 "DT_GNU_HASH: 0 buckets"),
    "init-is-not-code": (lambda image: set_dynamic(image, DT_INIT, _address_of(".dynstr")(image)), "not executable"),
    "fini-outside-the-image": (lambda image: set_dynamic(image, DT_FINI, 0x100000), "DT_FINI"),
    "init-array-without-size": (lambda image: set_dynamic(image, DT_INIT_ARRAYSZ, new_tag=IGNORED_TAG),
                                "must come together"),
    "versym-without-versions": (lambda image: set_dynamic(set_dynamic(image, DT_VERNEED, new_tag=IGNORED_TAG),
                                                          DT_VERNEEDNUM, new_tag=IGNORED_TAG + 1),
                                "DT_VERSYM without"),
    "verneed-names-no-dependency": (_verneed_file, "not a DT_NEEDED library"),
    "pie-executable": (lambda image: set_dynamic(image, DT_RELACOUNT, 0x08000000, new_tag=DT_FLAGS_1), "DF_1_PIE"),
    # relocations
    "relocation-into-code": (_rela(RELATIVE, 0, "Q", _address_of(".text")), "not writable"),
    "relocation-outside-the-image": (_rela(RELATIVE, 0, "Q", lambda image: 0x100000), "outside every loadable"),
    "relocation-into-the-dynamic-table": (_rela(GLOB_DAT, 0, "Q", lambda image: _address_of(".dynamic")(image) + 8),
                                          "into a table the dynamic loader reads"),
    "relocation-symbol-index": (_rela(GLOB_DAT, 12, "I", lambda image: 10000), "uses dynamic symbol 10000"),
    "relocation-type": (_rela(GLOB_DAT, 8, "I", lambda image: 99), "unknown relocation type 99"),
    "copy-relocation": (_rela(GLOB_DAT, 8, "I", lambda image: 5), "copy relocation"),
    "relative-pointer-outside-the-image": (_rela(RELATIVE, 16, "q", lambda image: 0x100000), "outside the image"),
    "init-array-slot-unrelocated": (_init_array_slot_unrelocated, "is not relocated"),
    # symbols
    "symbol-name-outside-strtab": (_sym("foo", 0, "I", lambda image: dynamic_value(image, DT_STRSZ) + 1),
                                   "name lies outside"),
    "function-symbol-not-code": (_sym("foo", 8, "Q", _address_of(".dynstr")), "(a function)"),
    "object-symbol-past-its-segment": (_sym("global", 16, "Q", lambda image: 0x100000), "data object"),
    "symbol-section-index": (_sym("foo", 6, "H", lambda image: 0xFFF5), "section index"),
}


@pytest.mark.parametrize("case", list(STRUCTURE_CASES))
def test_structural_check_rejects_before_any_test_load(host, basic_image, case) -> None:
    edit, reason = STRUCTURE_CASES[case]
    image = edit(basic_image)
    assert image != basic_image
    with pytest.raises(OffloadError) as direct:
        host_loader.check_image(image)
    assert direct.value.code == ErrorCode.INVALID_BINARY
    assert reason in direct.value.details, direct.value.details
    started = host_probe.checks_started()
    assert api.olIsValidBinary(host, image) is False
    error = expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, image)
    assert error.details == direct.value.details
    assert host_probe.checks_started() == started, "a structurally bad image reached a test load"


def test_read_symbols_raises_only_offload_errors(basic_image) -> None:
    """pyelftools raised OverflowError for a huge section offset; reading symbols now never leaks."""
    huge = STRUCTURE_CASES["huge-section-offset"][0](basic_image)
    expect_error(ErrorCode.INVALID_BINARY, host_loader.read_symbols, huge)
    for garbage in (b"", b"\x7fELF", b"\x7fELF\x02\x01\x01" + b"\xff" * 200, bytes(range(256)) * 4):
        with pytest.raises(OffloadError):
            host_loader.read_symbols(garbage)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_structural_check_raises_only_offload_errors_on_mutated_images(basic_image, data) -> None:
    image = bytearray(basic_image)
    for _ in range(data.draw(st.integers(1, 6))):
        offset = data.draw(st.integers(0, len(image) - 8))
        width = data.draw(st.sampled_from([1, 2, 4, 8]))
        image[offset:offset + width] = data.draw(st.binary(min_size=width, max_size=width))
    if data.draw(st.booleans()):
        del image[data.draw(st.integers(0, len(image))):]
    try:
        host_loader.check_image(bytes(image))
        host_loader.read_symbols(bytes(image))
    except OffloadError as exc:
        assert exc.code == ErrorCode.INVALID_BINARY and exc.details


# ---- the test load in a separate process -----------------------------------------------------------

def test_constructor_that_crashes_is_invalid_binary_and_the_process_lives(host, build, basic_image) -> None:
    image = variant(build("image_ctor_crash"))
    host_loader.check_image(image)  # sound on paper: only the test load can tell
    assert api.olIsValidBinary(host, image) is False
    error = expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, image)
    assert "crashed (SIGSEGV)" in error.details and "test process" in error.details, error.details
    assert_runtime_works(host, basic_image)


def test_dt_fini_that_crashes_is_found_before_the_load(host, build, basic_image) -> None:
    """The issue's case: an edit of DT_FINI loads fine and used to kill olDestroyProgram in _dl_call_fini."""
    image = variant(build("image_fini_target"))
    api.olDestroyProgram(api.olCreateProgram(host, image))  # unedited, it loads and unloads
    crash = section(image, ".dynsym")
    target = next(sym for sym in crash.iter_symbols() if sym.name == "offloadrt_test_crash")["st_value"]
    edited = set_dynamic(image, DT_FINI, target)
    host_loader.check_image(edited)  # DT_FINI points at code of the image: structurally fine
    error = expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, edited)
    assert "unloading the image" in error.details and "SIGSEGV" in error.details, error.details
    assert api.olIsValidBinary(host, edited) is False
    assert_runtime_works(host, basic_image)


@pytest.mark.parametrize("case, said", [("pltrel", "Inconsistency detected by ld.so"),
                                        ("rela-without-relaent", "crashed (SIGSEGV)"),
                                        ("init-array-without-size", "crashed (SIGSEGV)")])
def test_images_that_kill_the_loader_are_survived_by_the_test_load(basic_image, case, said) -> None:
    """What the structural check rejects first would otherwise end the process: the test load
    alone (asked directly) sees the loader die and reports it as a property of the image."""
    image = STRUCTURE_CASES[case][0](variant(basic_image))
    fd = host_loader._sealed_file(image)
    try:
        verdict = host_probe.verify(fd, 0x5000)
    finally:
        os.close(fd)
    assert not verdict.loaded and verdict.final, verdict
    assert said in verdict.reason, verdict.reason


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def test_constructor_that_never_returns_times_out(host, build, basic_image, monkeypatch) -> None:
    monkeypatch.setenv("OFFLOAD_IMAGE_CHECK_TIMEOUT", "1")
    image = variant(build("image_ctor_spin"))
    began = time.monotonic()
    error = expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, image)
    elapsed = time.monotonic() - began
    assert "did not finish within 1 s" in error.details, error.details
    assert 1.0 <= elapsed < 1.0 + host_probe.ANSWER_GRACE, elapsed
    helper = host_probe.helper_pid()
    assert helper is not None and _children_of(helper) == [], "the spinning test process was not reaped"
    assert_runtime_works(host, basic_image)


def test_a_spinning_image_does_not_hold_up_other_loads(host, build, basic_image, monkeypatch) -> None:
    monkeypatch.setenv("OFFLOAD_IMAGE_CHECK_TIMEOUT", "2")
    spinning = variant(build("image_ctor_spin"))
    outcome: list[BaseException] = []

    def load_spinning() -> None:
        try:
            api.olCreateProgram(host, spinning)
        except OffloadError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=load_spinning)
    thread.start()
    try:
        assert_runtime_works(host, variant(basic_image))  # a new image: it needs its own test load
        assert thread.is_alive(), "the other load should still be waiting for its spinning test load"
    finally:
        thread.join(JOIN_TIMEOUT)
    assert len(outcome) == 1 and outcome[0].code == ErrorCode.INVALID_BINARY


def test_verdicts_are_remembered_by_content(host, build, basic_image, tmp_path) -> None:
    fresh = variant(basic_image)
    started = host_probe.checks_started()
    assert api.olIsValidBinary(host, fresh) is True
    assert host_probe.checks_started() == started + 1
    for copy in (fresh, bytearray(fresh), memoryview(bytes(fresh))):
        api.olDestroyProgram(api.olCreateProgram(host, copy))
    assert host_probe.checks_started() == started + 1, "a second load of verified bytes started a test load"
    assert api.olIsValidBinary(host, basic_image) is True  # loaded before in this process: remembered
    crashing = variant(build("image_ctor_crash"))
    for _ in range(3):
        expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, crashing)
    assert api.olIsValidBinary(host, crashing) is False
    assert host_probe.checks_started() == started + 2, "a crash verdict is a property of the bytes: kept"
    missing = _image_needing_a_missing_library(build, tmp_path)
    for _ in range(2):
        error = expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, missing)
        assert "libofrt_image_missing.so" in error.details
    assert host_probe.checks_started() == started + 4, "a loader error may change (a library installed): not kept"


def _image_needing_a_missing_library(build, tmp_path) -> bytes:
    from conftest import KERNELS, compile_kernels

    import offloadrt

    folder = tmp_path / "deps"
    folder.mkdir()
    dep = folder / "libofrt_image_missing.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(KERNELS / "dlopen_dep.c"), "-o", str(dep)], check=True)
    image = compile_kernels(KERNELS / "dlopen_needs.c", tmp_path, ("-L", str(folder), "-Wl,--no-as-needed",
                                                                   "-lofrt_image_missing", "-I",
                                                                   offloadrt.get_include()))
    dep.unlink()
    return image


def test_non_utf8_library_name_in_the_loader_message(host, basic_image, tmp_path) -> None:
    """The loader's message names the library; as bytes that are not UTF-8 it used to leak a
    UnicodeDecodeError. Both the test load's message and this process's are decoded leniently."""
    strings = section(basic_image, ".dynstr")
    name = dynamic_value(basic_image, DT_NEEDED)
    at = strings["sh_offset"] + name
    length = basic_image.index(b"\0", at) - at
    image = variant(basic_image[:at] + b"\xffbad\xfe" + b"x" * (length - 5) + basic_image[at + length:])
    host_loader.check_image(image)
    error = expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, image)
    assert "\ufffdbad\ufffd" in error.details, error.details
    error = expect_error(ErrorCode.INVALID_BINARY, host_loader._dlopen, os.fsdecode(bytes(tmp_path) + b"/\xff.so"),
                         os.RTLD_NOW)
    assert "\ufffd" in error.details


def test_is_valid_binary_agrees_with_create_program(host, build, basic_image, tmp_path) -> None:
    images = {
        "valid": variant(basic_image),
        "structurally bad": STRUCTURE_CASES["pltrel"][0](basic_image),
        "crashing constructor": variant(build("image_ctor_crash")),
        "missing library": _image_needing_a_missing_library(build, tmp_path),
        "truncated": basic_image[:len(basic_image) // 2],
        "not ELF": b"hello" * 20,
    }
    for name, image in images.items():
        valid = api.olIsValidBinary(host, image)
        try:
            api.olDestroyProgram(api.olCreateProgram(host, image))
            loaded = True
        except OffloadError as exc:
            assert exc.code == ErrorCode.INVALID_BINARY, (name, exc)
            loaded = False
        assert valid == loaded == (name == "valid"), name


def test_loads_from_many_threads(host, basic_image) -> None:
    images = [variant(basic_image) for _ in range(8)]
    started = host_probe.checks_started()
    barrier = threading.Barrier(len(images))
    failures: list[BaseException] = []

    def load(image: bytes) -> None:
        try:
            barrier.wait(JOIN_TIMEOUT)
            assert_runtime_works(host, image)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=load, args=(image,)) for image in images]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
    assert not failures, failures
    assert host_probe.checks_started() == started + len(images)


def test_no_test_process_means_no_load(host, build, monkeypatch) -> None:
    """Without a test load (here: the helper cannot start) an image is refused, never loaded untested."""
    host_probe.stop_helper()
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    image = variant(build("ctor_probe"))
    before = os.environ.get("OFFLOADRT_TEST_PROBE_LOADS")
    error = expect_error(ErrorCode.BACKEND_FAILURE, api.olCreateProgram, host, image)
    assert "cannot start the helper process" in error.details and "not loaded" in error.details, error.details
    assert api.olIsValidBinary(host, image) is False
    probe = ctypes.CDLL(None).getenv
    probe.restype = ctypes.c_char_p
    assert probe(b"OFFLOADRT_TEST_PROBE_LOADS") == (before.encode() if before else None), "the image was loaded"
    monkeypatch.undo()
    api.olDestroyProgram(api.olCreateProgram(host, image))


def test_stopping_the_helper_leaves_no_process(host, basic_image) -> None:
    api.olIsValidBinary(host, variant(basic_image))
    helper = host_probe._helper
    assert helper is not None
    host_probe.stop_helper()
    assert helper.process.returncode is not None, "the helper was not waited for"
    assert host_probe.helper_pid() is None
    assert api.olIsValidBinary(host, variant(basic_image)) is True  # a new one starts on demand


@pytest.mark.parametrize("ending", ["exit", "SIGKILL"])
def test_helper_ends_with_its_parent(basic_image, tmp_path, ending) -> None:
    path = tmp_path / "basic.so"
    path.write_bytes(basic_image)
    script = textwrap.dedent(f"""
        import os, signal, sys
        from offloadrt.plugins.host import loader as host_loader
        from offloadrt.plugins.host import probe as host_probe
        assert host_loader.is_loadable(open(sys.argv[1], "rb").read())
        print(host_probe.helper_pid(), flush=True)
        if {ending == "SIGKILL"}:
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.stdout.strip(), f"the child failed (status {done.returncode}): {done.stderr[-2000:]}"
    helper = int(done.stdout.split()[0])
    try:
        pidfd = os.pidfd_open(helper)
    except ProcessLookupError:
        return  # already gone
    try:
        assert select.select([pidfd], [], [], 10.0)[0], f"the helper outlived its parent ({ending})"
    finally:
        os.close(pidfd)


def test_image_that_stays_loaded_does_not_shadow_later_images(host, build) -> None:
    """A library the loader keeps after dlclose (here -z nodelete) keeps its /proc/self/fd/N name:
    a later image must never be handed that library back instead of its own."""
    kept = variant(build("basic", "-Wl,-z,nodelete"))
    api.olDestroyProgram(api.olCreateProgram(host, kept))
    for _ in range(3):
        program = api.olCreateProgram(host, variant(build("lifetime")))
        api.olGetSymbol(program, "global_ctor", SymbolKind.KERNEL)
        api.olDestroyProgram(program)


def test_loader_variables_come_from_the_start_environment(monkeypatch) -> None:
    """The test load must see the library path this process's loader uses, not a later os.environ."""
    monkeypatch.setenv("LD_LIBRARY_PATH", "/changed/after/start")
    environment = host_probe._loader_environment()
    with open("/proc/self/environ", "rb") as initial:
        started = dict(entry.partition(b"=")[::2] for entry in initial.read().split(b"\0") if b"=" in entry)
    assert environment.get(b"LD_LIBRARY_PATH") == started.get(b"LD_LIBRARY_PATH")
    assert all(not re.match(rb"LD_", key) or started.get(key) == value for key, value in environment.items())


def test_invalid_timeout_setting_is_a_clear_error(host, basic_image, monkeypatch) -> None:
    monkeypatch.setenv("OFFLOAD_IMAGE_CHECK_TIMEOUT", "soon")
    error = expect_error(ErrorCode.INVALID_VALUE, api.olCreateProgram, host, variant(basic_image))
    assert "OFFLOAD_IMAGE_CHECK_TIMEOUT" in error.details


def test_checks_work_with_descriptor_numbers_above_1024(host, basic_image) -> None:
    """Each loaded program holds a descriptor: a process with many has numbers select() cannot watch."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard if hard != resource.RLIM_INFINITY else 4096) < 1200:
        pytest.skip(f"RLIMIT_NOFILE {soft}/{hard} does not allow descriptor numbers above 1100")
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        host_probe.stop_helper()  # the helper's socket and the answer pipes get numbers above 1100 too
        assert_runtime_works(host, variant(basic_image))
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_running_out_of_descriptors_is_an_offload_error(host, basic_image) -> None:
    import resource

    api.olIsValidBinary(host, variant(basic_image))  # the helper runs (it keeps its own limits)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    holes = []  # fill the free numbers below the highest one: new descriptors must go past it
    while (fd := os.open(os.devnull, os.O_RDONLY)) < highest:
        holes.append(fd)
    highest = fd
    outcomes = set()
    try:
        for extra in range(8):  # run out at each step of a load in turn: memfd, pipe, socket message, dlopen
            resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1 + extra, hard))
            try:
                api.olDestroyProgram(api.olCreateProgram(host, variant(basic_image)))
                outcomes.add("loaded")
            except OffloadError as exc:
                outcomes.add(exc.code.name)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in [*holes, highest]:
            os.close(fd)
    assert "loaded" in outcomes and outcomes - {"loaded"}, outcomes
    assert_runtime_works(host, variant(basic_image))
