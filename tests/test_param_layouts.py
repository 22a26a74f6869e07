"""Kernel parameter layouts read from program images (plugins/common/params.py, cuda/params.py,
amdgpu/metadata.py), on real compiler output.

The images are built once per module: PTX and cubins by NVRTC (as offloadrt.compile drives it)
and by nvJitLink, fatbins by nvFatbin where its library is installed and otherwise assembled here
around NVRTC's cubin and PTX, PTX by clang-22 for nvptx64, AMDGPU code objects by clang-22 and
ld.lld-22 (as offloadrt.compile builds them) and clang offload bundles around those. Each group
skips, saying what is missing, without its compiler. Every kernel's expected layout is its C
layout, from ctypes where ctypes can express the parameters.
"""

from __future__ import annotations

import ctypes
import pickle
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hip_standin.images import HOST_TRIPLE, bundle_triple, offload_bundle
from hypothesis import given, settings
from hypothesis import strategies as st

from offloadrt.errors import OffloadError
from offloadrt.plugins.amdgpu import metadata as amd
from offloadrt.plugins.common.params import ParamLayout, inferred_align, layout, read_elf
from offloadrt.plugins.cuda import params as cuda

SOURCE = r"""
#if defined(__CUDACC_RTC__)
#define KERNEL extern "C" __global__
#define CXX_KERNEL __global__
#define INDEX ((int)blockDim.x)
#elif defined(__AMDGPU__)
#define KERNEL extern "C" __attribute__((amdgpu_kernel, visibility("protected")))
#define CXX_KERNEL __attribute__((amdgpu_kernel, visibility("protected")))
/* Reading the implicit arguments makes the compiler add hidden arguments after the explicit ones. */
#define INDEX ((int)*(const unsigned short*)__builtin_amdgcn_implicitarg_ptr())
#else  /* clang for nvptx64 */
#define KERNEL extern "C" __attribute__((nvptx_kernel))
#define CXX_KERNEL __attribute__((nvptx_kernel))
#define INDEX ((int)__nvvm_read_ptx_sreg_ntid_x())
#endif
struct __attribute__((aligned(16))) F4 { float x, y, z, w; };
struct alignas(16) Aligned16 { float a, b, c, d; };
struct Chars { char c[5]; };

KERNEL void saxpy(float a, const float* x, float* y, int n) { if (INDEX < n) y[INDEX] = a * x[INDEX] + y[INDEX]; }
KERNEL void multiargs(char c, int* p, short s) { p[INDEX] = c + s; }
KERNEL void noargs() {}
KERNEL void vec4(F4 v, float* out, Aligned16 s) { out[INDEX] = v.x + v.w + s.a + s.d; }
KERNEL void dbl(double d, char e, double* out) { out[INDEX] = d + e; }
KERNEL void tail(double* out, double d, char c) { out[INDEX] = d + c; }
KERNEL void chars(Chars c, int* out, Chars d) { out[INDEX] = c.c[4] + d.c[1]; }
KERNEL void one_chars(Chars c) {}
KERNEL void many(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, int a9, char b,
                 double c, short d, int* out) {
  out[INDEX] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + b + c + d;
}
CXX_KERNEL void cxx(int a, long long* b) { b[INDEX] = a; }
#if !defined(__AMDGPU__)
struct Big { char c[20000]; };  /* 16 KiB or more: cubins describe it with EIATTR_KPARAM_INFO_V2 */
KERNEL void big(int a, Big b, int* out) { out[INDEX] = a + b.c[19999]; }
#endif
"""
GFX906_SOURCE = 'extern "C" __attribute__((amdgpu_kernel, visibility("protected"))) void only906(int a, char b) {}'
CXX_SYMBOL = "_Z3cxxiPx"


def c_layout(*types: Any) -> ParamLayout:
    """The layout of a C struct of ``types``, as ctypes (the host's C ABI) lays it out."""
    fields = [(f"p{index}", kind) for index, kind in enumerate(types)]
    struct_type: Any = type("Params", (ctypes.Structure,), {"_fields_": fields})
    params = [(getattr(struct_type, name).offset, getattr(struct_type, name).size) for name, _ in fields]
    return ParamLayout(params, ctypes.alignment(struct_type))


P, CHARS = ctypes.c_void_p, ctypes.c_char * 5
EXPECTED = {
    "saxpy": c_layout(ctypes.c_float, P, P, ctypes.c_int),
    "multiargs": c_layout(ctypes.c_char, P, ctypes.c_short),
    "noargs": c_layout(),
    "vec4": ParamLayout([(0, 16), (16, 8), (32, 16)], 16),  # ctypes cannot align a struct to 16
    "dbl": c_layout(ctypes.c_double, ctypes.c_char, P),
    "tail": c_layout(P, ctypes.c_double, ctypes.c_char),
    "chars": c_layout(CHARS, P, CHARS),
    "one_chars": c_layout(CHARS),
    "many": c_layout(*[ctypes.c_int] * 10, ctypes.c_char, ctypes.c_double, ctypes.c_short, P),
    CXX_SYMBOL: c_layout(ctypes.c_int, P),
}
EXPECTED_CUDA = {**EXPECTED, "big": c_layout(ctypes.c_int, ctypes.c_char * 20000, P)}


def test_the_expected_layouts_are_the_c_layouts_the_task_names() -> None:
    assert EXPECTED["saxpy"].params == ((0, 4), (8, 8), (16, 8), (24, 4))
    assert (EXPECTED["saxpy"].size, EXPECTED["saxpy"].padded) == (28, 32)
    assert EXPECTED["multiargs"].params == ((0, 1), (8, 8), (16, 2))
    assert (EXPECTED["multiargs"].size, EXPECTED["multiargs"].padded) == (18, 24)
    assert (EXPECTED["tail"].size, EXPECTED["tail"].padded) == (17, 24)
    assert (EXPECTED_CUDA["big"].params[1:], EXPECTED_CUDA["big"].size) == (((4, 20000), (20008, 8)), 20016)


# ---- ParamLayout and layout() --------------------------------------------------------------------

def test_a_layout_ends_at_its_last_parameter_and_pads_to_its_alignment() -> None:
    saxpy = ParamLayout([(0, 4), (8, 8), (16, 8), (24, 4)], 8)
    assert (saxpy.size, saxpy.padded, saxpy.align) == (28, 32, 8)
    assert saxpy.describe() == "4 parameters in 28 bytes (32 with C struct padding)"
    assert ParamLayout([(0, 8), (8, 8)], 8).describe() == "2 parameters in 16 bytes"
    assert ParamLayout([(0, 1)]).describe() == "1 parameter in 1 byte"
    empty = ParamLayout([])
    assert (empty.size, empty.padded, empty.align, empty.describe()) == (0, 0, 1, "no parameters (0 bytes)")


def test_layouts_are_immutable_values() -> None:
    first, second = ParamLayout([(0, 4), (8, 8)], 8), ParamLayout(((0, 4), (8, 8)), 8)
    assert first == second and hash(first) == hash(second) and {first: 1}[second] == 1
    assert first != ParamLayout([(0, 4), (8, 8)], 16) and first != ParamLayout([(0, 4), (8, 4)], 8)
    assert first != ((0, 4), (8, 8))
    assert pickle.loads(pickle.dumps(first)) == first
    assert eval(repr(first), {"ParamLayout": ParamLayout}) == first
    with pytest.raises(AttributeError):
        first.size = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        first.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        del first.params


@pytest.mark.parametrize(("params", "align"), [
    ([(0, 4), (2, 4)], 4),  # overlapping
    ([(8, 4), (0, 4)], 4),  # out of order
    ([(-1, 4)], 1),
    ([(0, -4)], 1),
    ([(0, 4.0)], 1),
    ([(0, 4)], 3),
    ([(0, 4)], 0),
])
def test_what_is_not_a_layout_is_refused(params: list[tuple[Any, Any]], align: int) -> None:
    with pytest.raises(ValueError):
        ParamLayout(params, align)


def test_layout_infers_each_parameters_alignment_from_its_offset_and_size() -> None:
    assert layout([(0, 4), (8, 8), (16, 8), (24, 4)]) == EXPECTED["saxpy"]
    assert layout([(0, 5)]).align == 1  # a char[5] struct
    assert layout([(0, 32)]).align == 16  # at most 16
    assert layout([(4, 8)]).align == 4  # an 8-byte struct at offset 4 is at most 4-aligned
    assert layout([(0, 0)]).align == 1 and layout([]) == ParamLayout([], 1)
    assert [inferred_align(offset, size) for offset, size in [(0, 12), (24, 2), (0, 0), (6, 64)]] == [4, 2, 1, 2]


def test_given_alignments_win_over_inferred_ones() -> None:
    assert layout([(0, 5)], [8]).padded == 8
    assert layout([(0, 8), (8, 8)], [None, 1]).align == 8
    with pytest.raises(ValueError):
        layout([(0, 4)], [3])
    with pytest.raises(ValueError):
        layout([(0, 4)], [4, 4])
    with pytest.raises(ValueError):
        layout([(0, 4, 4)])  # type: ignore[list-item]


# ---- building the images --------------------------------------------------------------------------

def _nvrtc(options: Sequence[str]) -> bytes:
    from offloadrt.compile import _nvrtc
    from offloadrt.compile._types import Target

    try:
        return _nvrtc.compile_cuda(SOURCE, options, Target("cuda", "sm_90"), "layouts").image
    except OffloadError as exc:
        pytest.skip(f"NVRTC is not usable here: {exc}")


def _nvjitlink_cubin(ptx: bytes, arch: str) -> bytes:
    try:
        from cuda.bindings import nvjitlink

        handle = nvjitlink.create(1, [f"-arch={arch}"])
    except Exception as exc:  # noqa: BLE001  # not installed, or its library not found
        pytest.skip(f"nvJitLink is not available ({type(exc).__name__}): pip install nvidia-nvjitlink")
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), "layouts.ptx")
        nvjitlink.complete(handle)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


@pytest.fixture(scope="module")
def nvidia() -> dict[str, bytes]:
    """NVRTC's PTX for compute_90 (plain ``.u64`` pointers) and compute_100 (``.u64 .ptr .align 1``),
    its cubins for sm_90 and sm_100, and nvJitLink's cubin from the compute_90 PTX."""
    images = {
        "ptx90": _nvrtc(["--gpu-architecture=compute_90"]),
        "ptx100": _nvrtc(["--gpu-architecture=compute_100"]),
        "cubin90": _nvrtc(["-arch=sm_90"]),
        "cubin100": _nvrtc(["-arch=sm_100"]),
    }
    images["nvjitlink90"] = _nvjitlink_cubin(images["ptx90"], "sm_90")
    return images


def _clang_tools() -> tuple[str, str]:
    from offloadrt.compile import _clang

    try:
        clang = _clang.clang()
        return clang.path, _clang.lld(clang).path
    except OffloadError as exc:
        pytest.skip(f"clang or ld.lld is missing: {exc}")


def _code_object(work: Path, source: str, mcpu: str, version: int) -> bytes:
    from offloadrt.compile import _clang

    clang, lld = _clang_tools()
    stem = f"{mcpu.replace(':', '_')}-v{version}"
    path, obj, out = work / f"{stem}.cpp", work / f"{stem}.o", work / f"{stem}.hsaco"
    path.write_text(source)
    _clang.run([clang, "--target=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", f"-mcode-object-version={version}",
                "-nogpulib", "-nostdlibinc", "-O3", "-x", "c++", "-c", str(path), "-o", str(obj)], "compiling")
    _clang.run([lld, "-shared", str(obj), "-o", str(out)], "linking")
    return out.read_bytes()


@pytest.fixture(scope="module")
def amdgpu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Code objects v4, v5, v6 for gfx90a:xnack- and one for gfx906 (with another kernel)."""
    work = tmp_path_factory.mktemp("layouts")
    images = {f"v{version}": _code_object(work, SOURCE, "gfx90a:xnack-", version) for version in (4, 5, 6)}
    images["gfx906"] = _code_object(work, GFX906_SOURCE, "gfx906", 5)
    return images


@pytest.fixture(scope="module")
def clang_ptx(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """clang-22's PTX for sm_90, whose pointer parameters read ``.param .u64 .ptr .align 1``."""
    from offloadrt.compile import _clang

    clang, _ = _clang_tools()
    work = tmp_path_factory.mktemp("clang_ptx")
    (work / "k.cpp").write_text(SOURCE)
    _clang.run([clang, "--target=nvptx64-nvidia-cuda", "-march=sm_90", "-nogpulib", "-nostdlibinc", "-O3", "-x",
                "c++", "-S", str(work / "k.cpp"), "-o", str(work / "k.ptx")], "compiling to PTX")
    return (work / "k.ptx").read_bytes()


# ---- PTX ------------------------------------------------------------------------------------------

def test_nvrtc_ptx_has_the_c_layouts(nvidia: dict[str, bytes]) -> None:
    assert b".ptr" not in nvidia["ptx90"]
    assert cuda.ptx_layouts(nvidia["ptx90"]) == EXPECTED_CUDA


def test_an_align_after_ptr_is_the_pointees_and_does_not_place_the_parameter(
        nvidia: dict[str, bytes], clang_ptx: bytes) -> None:
    for ptx in (nvidia["ptx100"], clang_ptx):
        assert b".u64 .ptr .align 1 " in ptx
        assert cuda.ptx_layouts(ptx) == EXPECTED_CUDA


def test_ptx_with_or_without_its_nul_and_through_image_layouts(nvidia: dict[str, bytes]) -> None:
    ptx = nvidia["ptx90"]
    assert ptx.endswith(b"\0")
    assert cuda.image_layouts(ptx) == cuda.image_layouts(ptx.rstrip(b"\0")) == EXPECTED_CUDA
    assert cuda.ptx_layouts(ptx.rstrip(b"\0")) == EXPECTED_CUDA


HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"


@pytest.mark.parametrize(("text", "expected"), [
    (".weak .entry w(.param .u32 .ptr.global.align 16 p, .param .v4 .f32 v, .param .align 8 .b8 a[2][0x4]) {}",
     {"w": ParamLayout([(0, 4), (16, 16), (32, 8)], 16)}),
    (".entry plain\n{\n ret;\n}", {"plain": ParamLayout([])}),
    (".visible .entry c(/* .param .u64 x, */ .param .u16 a, // .param .b8 y[3],\n .param .f64 b) {}",
     {"c": ParamLayout([(0, 2), (8, 8)], 8)}),
    ("/* .visible .entry hidden(.param .u32 a) {} */ // .entry gone(.param .u32 a)\n", {}),
    (".file 1 \"/tmp/*odd\"\n.visible .entry after(.param .u8 a) {}", {"after": ParamLayout([(0, 1)])}),
    (".extern .entry elsewhere(.param .u32 a);\n.visible .extern .entry also(.param .u32 a);", {}),
    (".visible .entry twice(.param .u32 a);\n.visible .entry twice(.param .u32 a) {}",
     {"twice": ParamLayout([(0, 4)], 4)}),
    (".visible .entry clash(.param .u32 a) {}\n.visible .entry clash(.param .u64 a) {}", {}),
    (".visible .entry tex(.param .texref t) {}", {}),
    (".visible .entry odd(.param .u32 a, .param .b8 b[]) {}", {}),
    (".visible .entry badalign(.param .align 3 .b8 b[4]) {}", {}),
    (".visible .entry open(.param .u32 a\n.visible .entry next(.param .u16 b) {}", {"next": ParamLayout([(0, 2)], 2)}),
    (".visible .entry explicit(.param .align 2 .u64 a, .param .u8 b) {}",
     {"explicit": ParamLayout([(0, 8), (8, 1)], 2)}),
])
def test_ptx_grammar(text: str, expected: dict[str, ParamLayout]) -> None:
    assert cuda.ptx_layouts((HEADER + text).encode()) == expected


# ---- cubins ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cubin90", "cubin100", "nvjitlink90"])
def test_cubin_layouts_are_the_ptx_layouts(nvidia: dict[str, bytes], name: str) -> None:
    assert cuda.image_kind(nvidia[name]) == "cubin"
    assert cuda.cubin_layouts(nvidia[name]) == cuda.ptx_layouts(nvidia["ptx90"]) == EXPECTED_CUDA
    assert cuda.image_layouts(nvidia[name]) == EXPECTED_CUDA


def _nv_info_attribute(cubin: bytes | bytearray, kernel: str, attribute: int) -> int:
    """The file offset of the first attribute ``attribute`` in ``.nv.info.<kernel>``."""
    elf = read_elf(bytes(cubin))
    assert elf is not None
    section = elf.section(f".nv.info.{kernel}")
    assert section is not None
    position = section.offset
    while position < section.offset + section.size:
        form, found = cubin[position], cubin[position + 1]
        if found == attribute:
            return position
        position += 4 + (struct.unpack_from("<H", cubin, position + 2)[0] if form == 4 else 0)
    raise AssertionError(f"no attribute {attribute:#x} for {kernel}")


def test_a_cubin_whose_parameter_size_disagrees_leaves_that_kernel_out(nvidia: dict[str, bytes]) -> None:
    cubin = bytearray(nvidia["cubin90"])
    at = _nv_info_attribute(cubin, "saxpy", cuda.EIATTR_CBANK_PARAM_SIZE)
    assert struct.unpack_from("<H", cubin, at + 2)[0] == 28
    struct.pack_into("<H", cubin, at + 2, 32)
    found = cuda.cubin_layouts(bytes(cubin))
    assert "saxpy" not in found and found == {k: v for k, v in EXPECTED_CUDA.items() if k != "saxpy"}


def test_a_cubin_with_a_missing_ordinal_leaves_that_kernel_out(nvidia: dict[str, bytes]) -> None:
    cubin = bytearray(nvidia["cubin90"])
    at = _nv_info_attribute(cubin, "multiargs", cuda.EIATTR_KPARAM_INFO)
    struct.pack_into("<H", cubin, at + 8, 7)  # an ordinal 7 of 3 parameters
    assert "multiargs" not in cuda.cubin_layouts(bytes(cubin))


# ---- fatbins --------------------------------------------------------------------------------------

def fatbin(*entries: tuple[int, bytes, bool]) -> bytes:
    """A fatbin container of ``(kind, payload, compressed)`` entries, with the headers nvFatbin 13.5
    writes (seen here in its output): 2-byte kind and version 0x0101, 4-byte header size, 8-byte
    payload size, ..., SM 90 at byte 28, the name's offset and length at 32, flags at 40 (0x11:
    64-bit, Linux; 0x8000: compressed), the uncompressed size at 56, the name at 64."""
    body = b""
    for kind, payload, compressed in entries:
        padded = payload + bytes(-len(payload) % 8)
        header = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, 72, len(padded), len(payload) if compressed else 0,
                             0, 0 if kind == 2 else 5, 1 if kind == 2 else 9, 90, 64, 1,
                             0x11 | (0x8000 if compressed else 0), 0, len(payload) * 3 if compressed else 0)
        body += header + b"k".ljust(8, b"\0") + padded
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


ZSTD_LOOKING = b"\x28\xb5\x2f\xfd" + bytes(100)


def test_a_fatbin_gives_its_cubin_layouts_else_its_ptx_layouts(nvidia: dict[str, bytes]) -> None:
    cubin, ptx = nvidia["cubin90"], nvidia["ptx90"]
    assert cuda.image_kind(fatbin((2, cubin, False), (1, ptx, False))) == "fatbin"
    assert cuda.image_layouts(fatbin((2, cubin, False), (1, ptx, False))) == EXPECTED_CUDA
    assert cuda.image_layouts(fatbin((1, ptx, False))) == EXPECTED_CUDA
    assert cuda.image_layouts(fatbin((2, ZSTD_LOOKING, True), (1, ptx, False))) == EXPECTED_CUDA
    assert cuda.image_layouts(fatbin((2, cubin, False), (1, ZSTD_LOOKING, True))) == EXPECTED_CUDA
    # Compressed entries are skipped: this one's kernels stay unknown.
    assert cuda.image_layouts(fatbin((2, ZSTD_LOOKING, True), (1, ZSTD_LOOKING, True))) == {}
    # Two containers back to back, as in a .nv_fatbin section.
    other = (HEADER + ".visible .entry other(.param .u8 a) {}\n").encode()
    two = fatbin((2, cubin, False)) + fatbin((1, other, False))
    assert cuda.image_layouts(two) == {**EXPECTED_CUDA, "other": ParamLayout([(0, 1)])}


def test_a_fatbin_made_by_nvfatbin(nvidia: dict[str, bytes]) -> None:
    try:
        from cuda.bindings import nvfatbin

        nvfatbin.version()
    except Exception as exc:  # noqa: BLE001  # not installed, or its library not found
        pytest.skip(f"nvFatbin is not available ({type(exc).__name__}): pip install nvidia-nvfatbin")
    made = {}
    for options in ([], ["-compress-all"]):
        handle = nvfatbin.create(options, len(options))
        try:
            nvfatbin.add_cubin(handle, nvidia["cubin90"], len(nvidia["cubin90"]), "90", "layouts")
            nvfatbin.add_ptx(handle, nvidia["ptx90"], len(nvidia["ptx90"]), "90", "layouts", "")
            image = bytearray(nvfatbin.size(handle))
            nvfatbin.get(handle, image)
        finally:
            nvfatbin.destroy(handle)
        made[bool(options)] = bytes(image)
    assert cuda.image_layouts(made[False]) == EXPECTED_CUDA
    assert cuda.image_layouts(made[True]) == {}  # every entry compressed


# ---- AMDGPU code objects and bundles -----------------------------------------------------------------

@pytest.mark.parametrize("version", [4, 5, 6])
def test_code_objects_have_the_c_layouts_of_their_explicit_arguments(amdgpu: dict[str, bytes], version: int) -> None:
    image = amdgpu[f"v{version}"]
    assert image[8] == version - 2  # EI_ABIVERSION
    assert amd.code_object_layouts(image) == EXPECTED
    document: Any = amd.metadata(image)
    kernels = {kernel[".name"]: kernel for kernel in document["amdhsa.kernels"]}
    hidden = [arg for arg in kernels["saxpy"][".args"] if arg[".value_kind"].startswith("hidden_")]
    assert hidden, "the kernels read their implicit arguments, so the compiler adds hidden ones"
    assert kernels["saxpy"][".kernarg_segment_size"] > EXPECTED["saxpy"].padded


def test_the_metadata_note_is_found_by_segment_or_by_section(amdgpu: dict[str, bytes]) -> None:
    image = amdgpu["v5"]
    no_sections = bytearray(image)
    struct.pack_into("<Q", no_sections, 40, 0)  # e_shoff
    struct.pack_into("<HHH", no_sections, 58, 0, 0, 0)  # e_shentsize, e_shnum, e_shstrndx
    no_segments = bytearray(image)
    struct.pack_into("<Q", no_segments, 32, 0)  # e_phoff
    struct.pack_into("<HH", no_segments, 54, 0, 0)  # e_phentsize, e_phnum
    assert amd.code_object_layouts(bytes(no_sections)) == amd.code_object_layouts(bytes(no_segments)) == EXPECTED
    no_notes = bytearray(no_sections)
    struct.pack_into("<Q", no_notes, 32, 0)
    assert amd.code_object_layouts(bytes(no_notes)) == {}


def test_a_bundle_gives_the_layouts_of_the_entry_the_device_runs(amdgpu: dict[str, bytes]) -> None:
    bundle = offload_bundle({HOST_TRIPLE: b"", bundle_triple("gfx906"): amdgpu["gfx906"],
                             bundle_triple("gfx90a:xnack-"): amdgpu["v5"]})
    assert amd.image_layouts(bundle, "gfx90a:sramecc+:xnack-") == EXPECTED
    assert amd.image_layouts(bundle, "gfx90a") == EXPECTED
    assert amd.image_layouts(bundle, "gfx906:sramecc-:xnack-") == {"only906": ParamLayout([(0, 4), (4, 1)], 4)}
    assert amd.image_layouts(bundle, "gfx90a:sramecc+:xnack+") == {}  # the entry pins xnack-
    assert amd.image_layouts(bundle, "gfx1100") == {}
    assert amd.image_layouts(amdgpu["v6"], "gfx1100") == EXPECTED  # a code object is read as it is
    assert amd.code_object_layouts(bundle) == {}


def test_a_compressed_bundle_or_another_image_gives_nothing(amdgpu: dict[str, bytes]) -> None:
    assert amd.image_layouts(b"CCOB" + bytes(60), "gfx90a") == {}
    assert amd.image_layouts(b"__CLANG_OFFLOAD_BUNDLE__" + bytes(3), "gfx90a") == {}
    assert amd.image_layouts(b"\x7fELF" + bytes(60), "gfx90a") == {}


# ---- the MessagePack decoder ------------------------------------------------------------------------

@pytest.mark.parametrize(("encoded", "value"), [
    (b"\x00", 0), (b"\x7f", 127), (b"\xff", -1), (b"\xe0", -32), (b"\xcc\xff", 255), (b"\xcd\x01\x00", 256),
    (b"\xce\x00\x01\x00\x00", 65536), (b"\xcf" + (2**40).to_bytes(8, "big"), 2**40), (b"\xd0\x80", -128),
    (b"\xd1\xff\x00", -256), (b"\xd2\xff\xff\xff\xff", -1), (b"\xd3" + (-(2**40)).to_bytes(8, "big", signed=True),
                                                                  -(2**40)),
    (b"\xc0", None), (b"\xc2", False), (b"\xc3", True), (b"\xca\x3f\xc0\x00\x00", 1.5),
    (b"\xcb" + struct.pack(">d", -2.25), -2.25), (b"\xa3abc", "abc"), (b"\xd9\x02\xc3\xa9", "\u00e9"),
    (b"\xda\x00\x01x", "x"), (b"\xdb\x00\x00\x00\x00", ""), (b"\xc4\x02\x00\x01", b"\x00\x01"),
    (b"\xc5\x00\x00", b""), (b"\xc6\x00\x00\x00\x01z", b"z"), (b"\x92\x01\xa1x", [1, "x"]),
    (b"\xdc\x00\x01\xc0", [None]), (b"\xdd\x00\x00\x00\x00", []), (b"\x81\xa1k\x91\x80", {"k": [{}]}),
    (b"\xde\x00\x01\x01\x02", {1: 2}), (b"\xdf\x00\x00\x00\x01\xc3\xc2", {True: False}),
])
def test_msgpack_values(encoded: bytes, value: Any) -> None:
    assert amd.unpack(encoded) == value


@pytest.mark.parametrize("encoded", [
    b"", b"\xc1", b"\xd4\x01\x00", b"\xc7\x01\x01\x00", b"\xa3ab", b"\x92\x01", b"\x00\x00", b"\xa2\xff\xfe",
    b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\x81\x90\x00", b"\x82\x01\x02\x01\x03", b"\x91" * 40 + b"\x00",
    b"\xc6\xff\xff\xff\xff",
])
def test_malformed_msgpack_is_a_msgpack_error(encoded: bytes) -> None:
    with pytest.raises(amd.MsgpackError):
        amd.unpack(encoded)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_msgpack_on_random_bytes_raises_only_its_own_error(data: bytes) -> None:
    try:
        amd.unpack(data)
    except amd.MsgpackError:
        pass


def _note_description(image: bytes) -> tuple[int, int]:
    """(offset, size) of the metadata note's description in a code object."""
    elf = read_elf(image)
    assert elf is not None
    note = next(section for section in elf.sections if section.type == 7)
    name_size, desc_size, _ = struct.unpack_from("<III", image, note.offset)
    return note.offset + 12 + (-(-name_size // 4) * 4), desc_size


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_random_metadata_is_caught_inside(amdgpu: dict[str, bytes], data: st.DataObject) -> None:
    """The note's description, wholly or in part, replaced by random bytes."""
    image = bytearray(amdgpu["v5"])
    start, size = _note_description(bytes(image))
    noise = data.draw(st.binary(min_size=1, max_size=64))
    if data.draw(st.booleans()):
        image[start:start + size] = (noise * (size // len(noise) + 1))[:size]
    else:
        at = start + data.draw(st.integers(0, size - 1))
        image[at:at + len(noise)] = noise[:start + size - at]
    assert isinstance(amd.code_object_layouts(bytes(image)), dict)


# ---- robustness on cut and mutated images ----------------------------------------------------------

def _hot_offsets(image: bytes) -> list[int]:
    """Offsets worth mutating: the ELF or fatbin headers, the section headers, the attribute and note sections."""
    hot = list(range(min(len(image), 96)))
    elf = read_elf(image)
    if elf is not None:
        shoff = struct.unpack_from("<Q", image, 40)[0]
        hot += range(shoff, min(len(image), shoff + 64 * len(elf.sections)))
        for section in elf.sections:
            if section.name.startswith(".nv.info") or section.type == 7:
                hot += range(section.offset, min(len(image), section.offset + section.size))
    return hot


def _mutate(data: st.DataObject, image: bytes) -> bytes:
    hot = _hot_offsets(image)
    mutated = bytearray(image)
    positions = st.one_of(st.integers(0, len(image) - 1), st.sampled_from(hot))
    for position, value in data.draw(st.lists(st.tuples(positions, st.integers(0, 255)), max_size=6)):
        mutated[position] = value
    return bytes(mutated[:data.draw(st.integers(0, len(mutated)))])


def _check_quick(parse: Callable[[bytes], dict[str, ParamLayout]], image: bytes) -> None:
    started = time.perf_counter()
    result = parse(image)
    assert time.perf_counter() - started < 1.0
    assert isinstance(result, dict) and all(isinstance(value, ParamLayout) for value in result.values())


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_cut_and_mutated_cuda_images_never_raise(nvidia: dict[str, bytes], data: st.DataObject) -> None:
    images = [nvidia["ptx100"], nvidia["cubin90"], nvidia["cubin100"],
              fatbin((2, nvidia["cubin90"], False), (1, nvidia["ptx90"], False))]
    image = data.draw(st.sampled_from(images))
    _check_quick(cuda.image_layouts, _mutate(data, image))


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_cut_and_mutated_amdgpu_images_never_raise(amdgpu: dict[str, bytes], data: st.DataObject) -> None:
    bundle = offload_bundle({bundle_triple("gfx90a"): amdgpu["v4"]})
    image = data.draw(st.sampled_from([amdgpu["v5"], amdgpu["v6"], bundle]))
    _check_quick(lambda mutated: amd.image_layouts(mutated, "gfx90a"), _mutate(data, image))


def test_every_prefix_of_a_cubin_header_area_is_handled(nvidia: dict[str, bytes]) -> None:
    cubin = nvidia["cubin90"]
    for cut in [*range(0, 200), *range(200, len(cubin), 97)]:
        assert isinstance(cuda.image_layouts(cubin[:cut]), dict)


HOSTILE_CUDA = [
    b"\x50\xed\x55\xba\x01\x00\x10\x00" + b"\xff" * 8 + bytes(200),  # a fatbin claiming 2**64 bytes
    b"\x50\xed\x55\xba\x01\x00\x10\x00" + struct.pack("<Q", 80) + struct.pack("<HHIQ", 2, 0, 64, 2**63) + bytes(56),
    b"\x7fELF\x02\x01\x01\x41" + bytes(8) + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, 64, 0, 64, 56, 0, 64,
                                                           0xFFFF, 1) + bytes(200),  # 65535 sections, none there
    (HEADER + ".entry a(" * 5000).encode(),
    (HEADER + ".visible " * 5000).encode(),
    (HEADER + ".entry a(" + ".param .u8 x," * 5000 + ".param .u8 y)").encode(),
    (HEADER + "/*" * 20000).encode(),
    (HEADER + ".entry a(.param .b8 x[99999999999999999999999])").encode(),
]


@pytest.mark.parametrize("image", HOSTILE_CUDA)
def test_hostile_cuda_images_give_nothing_quickly(image: bytes) -> None:
    _check_quick(cuda.image_layouts, image)
    assert len(cuda.image_layouts(image)) <= 1


def test_hostile_msgpack_is_refused_quickly() -> None:
    for encoded in (b"\x91" * 100000, b"\xdd\xff\xff\xff\xff" + bytes(100000), b"\x9f" * 100000,
                    b"\xdc\xff\xff" + b"\x90" * 65534):
        started = time.perf_counter()
        with pytest.raises(amd.MsgpackError):
            amd.unpack(encoded)
        assert time.perf_counter() - started < 1.0
