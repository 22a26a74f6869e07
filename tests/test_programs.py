"""Programs on the host device: private copies of images, independent loads, constructors and
destructors, unload at once, symbol lookup, and rejection of images the host cannot load."""

from __future__ import annotations

import ctypes
import gc
import shutil
import struct
import subprocess
import sys
import textwrap

import pytest
from conftest import KERNELS, expect_error, launch_args, u32_view

import offloadrt
from offloadrt import AllocType, ErrorCode, SymbolInfo, SymbolKind, api

KERNEL = SymbolKind.KERNEL
GLOBAL = SymbolKind.GLOBAL_VARIABLE
EM_X86_64 = 62
EM_AARCH64 = 183
PROBE_VARIABLE = b"OFFLOADRT_TEST_PROBE_LOADS"

_getenv = ctypes.CDLL(None).getenv
_getenv.argtypes = (ctypes.c_char_p,)
_getenv.restype = ctypes.c_char_p


def probe_loads() -> int:
    """How many times ctor_probe.c's constructor ran in this process (it counts in the C environment)."""
    value = _getenv(PROBE_VARIABLE)
    return int(value) if value else 0


def cc(*args: str) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.fail("no C compiler (cc) on PATH")
    subprocess.run([compiler, *args], check=True, capture_output=True)


def ptr_arg(address: int) -> bytes:
    return struct.pack("P", address)


def elf_header(image: bytes) -> tuple[str, int, int]:
    """(struct endianness, e_type, e_machine) of an ELF image."""
    endian = "<" if image[5] == 1 else ">"
    e_type, e_machine = struct.unpack_from(endian + "HH", image, 16)
    return endian, e_type, e_machine


def foreign_machine_copy(image: bytes) -> bytes:
    endian, _, machine = elf_header(image)
    foreign = EM_AARCH64 if machine != EM_AARCH64 else EM_X86_64
    patched = bytearray(image)
    struct.pack_into(endian + "H", patched, 18, foreign)
    return bytes(patched)


def without_section_headers(image: bytes) -> bytearray:
    """``image`` with its section header table dropped from the ELF header (as ``sstrip`` leaves it)."""
    assert image[4] == 2, "64-bit ELF expected"
    endian = elf_header(image)[0]
    stripped = bytearray(image)
    struct.pack_into(endian + "Q", stripped, 0x28, 0)  # e_shoff
    struct.pack_into(endian + "HH", stripped, 0x3C, 0, 0)  # e_shnum, e_shstrndx
    return stripped


def assert_runtime_works(host: api.Device, image: bytes) -> None:
    """Load basic.c and run foo: the runtime is still usable."""
    program = api.olCreateProgram(host, image)
    out = api.olMemAlloc(host, AllocType.HOST, 4 * 12)
    try:
        api.olLaunchKernel(None, host, api.olGetSymbol(program, "foo", KERNEL), ptr_arg(out), launch_args(3, 4))
        assert list(u32_view(out, 12)) == list(range(12))
    finally:
        api.olMemFree(out)
        api.olDestroyProgram(program)


def global_address(program: api.Program, name: str) -> int:
    return api.olGetSymbolInfo(api.olGetSymbol(program, name, GLOBAL), SymbolInfo.GLOBAL_VARIABLE_ADDRESS)


@pytest.fixture
def alloc_u32(alloc):
    """``alloc_u32(count)`` → the address of ``count`` zeroed uint32 values, freed after the test."""

    def _alloc(count: int) -> int:
        address = alloc(4 * count)
        ctypes.memset(address, 0, 4 * count)
        return address

    return _alloc


@pytest.fixture(scope="session")
def probe_image(build) -> bytes:
    return build("ctor_probe")


@pytest.fixture(scope="session")
def invalid_images(probe_image: bytes, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Images of ctor_probe.c that the host must reject without running its constructor."""
    folder = tmp_path_factory.mktemp("invalid")
    relocatable = folder / "ctor_probe.o"
    cc("-c", "-fPIC", "-O2", "-I", offloadrt.get_include(), str(KERNELS / "ctor_probe.c"), "-o", str(relocatable))
    return {
        "empty": b"",
        "not-elf": b"this is not an ELF image at all\n" * 8,
        "script": b"#!/bin/sh\necho hello\n" + b"\0" * 64,
        "magic-only": b"\x7fELF",
        "foreign-machine": foreign_machine_copy(probe_image),
        "relocatable": relocatable.read_bytes(),
        "truncated-64": probe_image[:64],
        "truncated-half": probe_image[:len(probe_image) // 2],
        "truncated-one-byte": probe_image[:-1],
    }


# ---- loading -------------------------------------------------------------------------------------

def test_create_program_copies_the_image(host, build):
    image = bytearray(build("basic"))
    program = api.olCreateProgram(host, image)
    image[:] = b"\0" * len(image)
    del image
    view_source = bytearray(build("basic"))
    second = api.olCreateProgram(host, memoryview(view_source))
    view_source[:64] = b"\xFF" * 64
    del view_source
    gc.collect()
    for prog in (program, second):
        out = api.olMemAlloc(host, AllocType.HOST, 4 * 8)
        api.olLaunchKernel(None, host, api.olGetSymbol(prog, "foo", KERNEL), ptr_arg(out), launch_args(2, 4))
        assert list(u32_view(out, 8)) == list(range(8))
        api.olMemFree(out)


def test_same_image_twice_is_two_independent_programs(host, build, alloc_u32):
    image = build("basic")
    first = api.olCreateProgram(host, image)
    second = api.olCreateProgram(host, image)
    assert first is not second
    assert global_address(first, "global") != global_address(second, "global")
    # write() fills `global` of the first program only.
    api.olLaunchKernel(None, host, api.olGetSymbol(first, "write", KERNEL), None, launch_args(1, 64))
    out_first, out_second = alloc_u32(64), alloc_u32(64)
    api.olLaunchKernel(None, host, api.olGetSymbol(first, "read", KERNEL), ptr_arg(out_first), launch_args(1, 64))
    api.olLaunchKernel(None, host, api.olGetSymbol(second, "read", KERNEL), ptr_arg(out_second), launch_args(1, 64))
    assert list(u32_view(out_first, 64)) == [2 * i for i in range(64)]
    assert list(u32_view(out_second, 64)) == [0] * 64
    ctypes.c_int32.from_address(global_address(first, "scalar_global")).value = 99
    assert ctypes.c_int32.from_address(global_address(second, "scalar_global")).value == 7


def test_lifetime_image_twice_runs_constructors_once_per_load(host, build):
    image = build("lifetime")
    programs = [api.olCreateProgram(host, image) for _ in range(2)]
    addresses = [global_address(program, "load_count") for program in programs]
    assert addresses[0] != addresses[1], "the second load returned the first copy of the library"
    for program in programs:
        assert ctypes.c_uint32.from_address(global_address(program, "load_count")).value == 1
        assert ctypes.c_uint32.from_address(global_address(program, "ctor_value")).value == 100


def test_different_images_loaded_together(host, build, alloc_u32):
    """Each program is its own library: loading one never hands back another that is loaded."""
    basic = api.olCreateProgram(host, build("basic"))
    lifetime = api.olCreateProgram(host, build("lifetime"))
    out = alloc_u32(8)
    api.olLaunchKernel(None, host, api.olGetSymbol(lifetime, "global_ctor", KERNEL), ptr_arg(out), launch_args(1, 8))
    assert list(u32_view(out, 8)) == [100 + i for i in range(8)]
    api.olLaunchKernel(None, host, api.olGetSymbol(basic, "foo", KERNEL), ptr_arg(out), launch_args(2, 4))
    assert list(u32_view(out, 8)) == list(range(8))
    expect_error(ErrorCode.NOT_FOUND, api.olGetSymbol, lifetime, "foo", KERNEL)
    expect_error(ErrorCode.NOT_FOUND, api.olGetSymbol, basic, "global_ctor", KERNEL)


def test_constructors_run_at_load_in_priority_order(host, build, alloc_u32):
    program = api.olCreateProgram(host, build("lifetime"))
    out = alloc_u32(16)
    api.olLaunchKernel(None, host, api.olGetSymbol(program, "global_ctor", KERNEL), ptr_arg(out), launch_args(1, 16))
    # 40, then *2, then +20: any other order gives another number.
    assert list(u32_view(out, 16)) == [100 + i for i in range(16)]


def test_valid_binary_answers_without_loading(host, probe_image):
    before = probe_loads()
    assert api.olIsValidBinary(host, probe_image) is True
    assert api.olIsValidBinary(host, bytearray(probe_image)) is True
    assert probe_loads() == before, "olIsValidBinary ran the image's constructor"
    program = api.olCreateProgram(host, probe_image)
    assert probe_loads() == before + 1, "olCreateProgram must load the image (its constructor runs)"
    api.olCreateProgram(host, probe_image)
    assert probe_loads() == before + 2, "a second load is a second copy of the library"
    api.olLaunchKernel(None, host, api.olGetSymbol(program, "probe", KERNEL), None, launch_args())


# ---- unloading -----------------------------------------------------------------------------------

@pytest.mark.parametrize("use_queue", [False, True], ids=["sync", "queue"])
def test_destroy_program_unloads_at_once(host, build, queue, alloc_u32, use_queue):
    program = api.olCreateProgram(host, build("lifetime"))
    target = alloc_u32(1)
    api.olLaunchKernel(queue if use_queue else None, host, api.olGetSymbol(program, "arm_destructor", KERNEL),
                       ptr_arg(target), launch_args())
    if use_queue:
        api.olSyncQueue(queue)
    assert u32_view(target, 1)[0] == 0, "the destructor ran before the program was destroyed"
    api.olDestroyProgram(program)
    assert u32_view(target, 1)[0] == 0xD7, "olDestroyProgram returned before the program was unloaded"


def test_symbols_of_a_destroyed_program_fail_cleanly(host, basic, queue, build):
    foo = api.olGetSymbol(basic, "foo", KERNEL)
    array = api.olGetSymbol(basic, "global", GLOBAL)
    api.olDestroyProgram(basic)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetSymbol, basic, "foo", KERNEL)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetSymbol, basic, "read", KERNEL)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetSymbolInfo, foo, SymbolInfo.NAME)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetSymbolInfo, array, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetSymbolInfoSize, array, SymbolInfo.GLOBAL_VARIABLE_SIZE)
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, None, host, foo, ptr_arg(8), launch_args())
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, queue, host, foo, ptr_arg(8), launch_args(4, 2))
    expect_error(ErrorCode.INVALID_ARGUMENT, api.olDestroyProgram, basic)
    api.olSyncQueue(queue)  # nothing was queued, so nothing failed
    assert_runtime_works(host, build("basic"))


# ---- symbols -------------------------------------------------------------------------------------

def test_get_symbol_returns_the_same_handle(basic):
    assert api.olGetSymbol(basic, "foo", KERNEL) is api.olGetSymbol(basic, "foo", KERNEL)
    assert api.olGetSymbol(basic, "global", GLOBAL) is api.olGetSymbol(basic, "global", GLOBAL)
    assert api.olGetSymbol(basic, "foo", KERNEL) is not api.olGetSymbol(basic, "read", KERNEL)


def test_symbol_of_the_wrong_kind_is_not_found(basic):
    expect_error(ErrorCode.NOT_FOUND, api.olGetSymbol, basic, "global", KERNEL)
    expect_error(ErrorCode.NOT_FOUND, api.olGetSymbol, basic, "scalar_global", KERNEL)
    expect_error(ErrorCode.NOT_FOUND, api.olGetSymbol, basic, "foo", GLOBAL)
    expect_error(ErrorCode.NOT_FOUND, api.olGetSymbol, basic, "no_such_symbol", KERNEL)
    expect_error(ErrorCode.NOT_FOUND, api.olGetSymbol, basic, "no_such_symbol", GLOBAL)
    # The failed lookups cached nothing: the right kinds still work.
    assert api.olGetSymbolInfo(api.olGetSymbol(basic, "global", GLOBAL), SymbolInfo.KIND) == GLOBAL
    assert api.olGetSymbolInfo(api.olGetSymbol(basic, "foo", KERNEL), SymbolInfo.KIND) == KERNEL


# ---- images the host cannot load -----------------------------------------------------------------

INVALID = ["empty", "not-elf", "script", "magic-only", "foreign-machine", "relocatable", "truncated-64",
           "truncated-half", "truncated-one-byte"]


@pytest.mark.parametrize("name", INVALID)
def test_invalid_binary(host, build, invalid_images, name):
    image = invalid_images[name]
    before = probe_loads()
    assert api.olIsValidBinary(host, image) is False
    error = expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, image)
    assert probe_loads() == before, "a rejected image was loaded (its constructor ran)"
    if name == "foreign-machine":
        assert "AArch64" in error.details or "x86-64" in error.details
    assert_runtime_works(host, build("basic"))


def test_invalid_images_are_what_they_claim(probe_image, invalid_images):
    """Guards the fixture: each bad image differs from a good one only in the intended way."""
    _, e_type, machine = elf_header(probe_image)
    assert e_type == 3
    assert elf_header(invalid_images["foreign-machine"])[2] not in (machine, 0)
    assert elf_header(invalid_images["relocatable"])[1] == 1  # ET_REL
    assert elf_header(invalid_images["relocatable"])[2] == machine


def test_truncated_image_without_section_headers_is_not_valid(host, probe_image):
    truncated = bytes(without_section_headers(probe_image)[:len(probe_image) // 3])
    assert api.olIsValidBinary(host, truncated) is False


def test_truncated_image_without_section_headers_is_invalid_binary(probe_image, tmp_path):
    """Loading it must be an error, not a crash of the process: run it in a child to see which."""
    path = tmp_path / "truncated.so"
    path.write_bytes(bytes(without_section_headers(probe_image)[:len(probe_image) // 3]))
    script = textwrap.dedent("""
        import sys
        from offloadrt import DeviceInfo, DeviceType, OffloadError, api
        api.olInit()
        devices = []
        api.olIterateDevices(lambda device, _: devices.append(device))
        host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
        try:
            api.olCreateProgram(host, open(sys.argv[1], "rb").read())
        except OffloadError as exc:
            print(exc.code.name)
        else:
            print("LOADED")
        api.olShutDown()
    """)
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, (f"loading a truncated image killed the process (exit status "
                                    f"{result.returncode}): {result.stderr[-2000:]}")
    assert result.stdout.strip() == "INVALID_BINARY"


@pytest.fixture(scope="session")
def unloadable_images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """ELF shared objects for this host that the dynamic loader rejects."""
    folder = tmp_path_factory.mktemp("unloadable")
    include = offloadrt.get_include()
    needs = str(KERNELS / "dlopen_needs.c")
    undefined = folder / "undefined.so"
    cc("-shared", "-fPIC", "-I", include, needs, "-o", str(undefined))
    dep_folder = folder / "deps"
    dep_folder.mkdir()
    dep = dep_folder / "libofrt_test_dep.so"
    cc("-shared", "-fPIC", str(KERNELS / "dlopen_dep.c"), "-o", str(dep))
    missing = folder / "missing.so"
    cc("-shared", "-fPIC", "-I", include, needs, "-o", str(missing), "-L", str(dep_folder),
       f"-Wl,-rpath,{dep_folder}", "-Wl,--no-as-needed", "-lofrt_test_dep")
    dep.unlink()  # the image still names it (DT_NEEDED), the loader cannot find it
    return {"undefined-symbol": undefined.read_bytes(), "missing-library": missing.read_bytes()}


@pytest.mark.parametrize("name, loader_says", [
    ("undefined-symbol", "offloadrt_test_dep_value"),
    ("missing-library", "libofrt_test_dep.so"),
])
def test_image_the_loader_rejects(host, build, unloadable_images, name, loader_says):
    image = unloadable_images[name]
    assert elf_header(image)[1] == 3
    if name == "missing-library":
        assert b"libofrt_test_dep.so" in image
    error = expect_error(ErrorCode.INVALID_BINARY, api.olCreateProgram, host, image)
    assert loader_says in error.details, error.details
    assert_runtime_works(host, build("basic"))


def test_symbol_names_that_no_program_can_have_are_clean_errors(basic) -> None:
    for kind in (SymbolKind.KERNEL, SymbolKind.GLOBAL_VARIABLE):
        assert "UTF-8" in expect_error(ErrorCode.NOT_FOUND, api.olGetSymbol, basic, b"\xff\xfe", kind).details
        expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetSymbol, basic, "foo\0bar", kind)
        expect_error(ErrorCode.INVALID_ARGUMENT, api.olGetSymbol, basic, b"foo\0", kind)
    assert api.olGetSymbol(basic, b"foo", SymbolKind.KERNEL) is api.olGetSymbol(basic, "foo", SymbolKind.KERNEL)
