"""Kernels from source on the host: Device.compile / Program.from_source with host C through cc,
language detection and validation, compile errors with the whole log, a missing compiler, the
signatures filled in from OL_HOST_KERNEL_ARGS, and the portable path's entry point."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import offloadrt
from offloadrt import ErrorCode, OffloadError
from offloadrt.compile import Target, build, detect_lang
from offloadrt.core import _runtime

SAXPY_C = r"""
#include <offloadrt/host_kernel.h>
#include <string.h>

struct saxpy_args { float a; const float *x; float *y; uint32_t n; };
OL_HOST_KERNEL saxpy(const void *args, const ol_host_launch_t *launch) {
  struct saxpy_args p;
  memcpy(&p, args, sizeof p);
  uint32_t size = launch->group_size.x, base = launch->group_id.x * size;
  for (uint32_t i = base; i < base + size && i < p.n; ++i)
    p.y[i] = p.a * p.x[i] + p.y[i];
  return 0;
}
OL_HOST_KERNEL_ARGS(saxpy, struct saxpy_args);

/* A struct by value and a 64-bit count: out[i] = s.scale * i + s.shift. */
typedef struct { double scale; int32_t shift; } affine_t;
struct fill_args { affine_t s; double *out; uint64_t n; };
OL_HOST_KERNEL fill(const void *args, const ol_host_launch_t *launch) {
  struct fill_args p;
  memcpy(&p, args, sizeof p);
  uint32_t size = launch->group_size.x, base = launch->group_id.x * size;
  for (uint64_t i = base; i < base + size && i < p.n; ++i)
    p.out[i] = p.s.scale * (double)i + p.s.shift;
  return 0;
}
OL_HOST_KERNEL_ARGS(fill, struct fill_args);

/* No OL_HOST_KERNEL_ARGS: no signature. */
OL_HOST_KERNEL bare(const void *args, const ol_host_launch_t *launch) { (void)args; (void)launch; return 0; }
"""


@pytest.fixture(autouse=True, scope="module")
def layer() -> Iterator[None]:
    _runtime.shutdown()
    yield
    _runtime.shutdown()


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def host() -> offloadrt.Device:
    return offloadrt.device("host")


def test_host_c_compiles_runs_and_matches_numpy(host: offloadrt.Device) -> None:
    program = host.compile(SAXPY_C)
    assert program.kernel_names == ("saxpy", "fill", "bare")
    saxpy = program.kernel("saxpy")
    assert saxpy.signature == ("float32", "ptr", "ptr", "uint32")
    n = 1000
    x_host = np.random.default_rng(1).random(n, dtype=np.float32)
    x = offloadrt.asarray(x_host, host)
    y = offloadrt.asarray(np.ones(n, np.float32), host)
    with host.queue() as queue:
        queue.launch(saxpy, (n + 63) // 64, 64, 2.5, x, y, n)  # plain Python numbers
    np.testing.assert_allclose(y.numpy(), 2.5 * x_host + 1, rtol=1e-6)


def test_struct_parameters_and_kernels_without_a_signature(host: offloadrt.Device) -> None:
    program = offloadrt.Program.from_source(host, SAXPY_C, ["-O1"], "c")
    fill = program.kernel("fill")
    affine = fill.signature[0]
    assert issubclass(affine, ctypes.Structure) and [f[0] for f in affine._fields_] == ["scale", "shift"]
    assert fill.signature[1:] == ("ptr", "uint64")
    out = offloadrt.empty(10, np.float64, device=host)
    with host.queue() as queue:
        queue.launch(fill, 1, 16, affine(0.5, 3), out, 10)
    np.testing.assert_array_equal(out.numpy(), 0.5 * np.arange(10) + 3)
    assert program.kernel("bare").signature is None
    assert program.kernel("fill") is fill


def test_a_compile_error_carries_the_whole_log(host: offloadrt.Device) -> None:
    source = "#include <offloadrt/host_kernel.h>\nOL_HOST_KERNEL broken(const void *a, const ol_host_launch_t *l) {\n" \
             "  return undeclared_one + undeclared_two;\n}\n"
    with pytest.raises(OffloadError) as info:
        host.compile(source)
    assert info.value.code == ErrorCode.COMPILE_FAILURE
    assert "undeclared_one" in info.value.details and "undeclared_two" in info.value.details
    assert "kernel.c:3" in info.value.details


def test_warnings_are_kept_in_the_log(host: offloadrt.Device) -> None:
    source = SAXPY_C + "\nstatic int unused_but_warned(void) { int x; return x; }\n"
    program = host.compile(source, ["-Wall"])
    assert "unused_but_warned" in program.log
    assert host.load(build(SAXPY_C).image).log == ""  # a loaded image has no compiler log


def test_a_missing_compiler_says_what_to_install(host: offloadrt.Device, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, gcc or clang
    with pytest.raises(OffloadError) as info:
        host.compile(SAXPY_C)
    assert info.value.code == ErrorCode.HOST_TOOL_NOT_FOUND and "install" in info.value.details
    monkeypatch.setenv("CC", "no-such-compiler-here")
    with pytest.raises(OffloadError) as info:
        host.compile(SAXPY_C)
    assert info.value.code == ErrorCode.HOST_TOOL_NOT_FOUND and "$CC" in info.value.details


def test_cc_is_honoured(host: offloadrt.Device, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = shutil.which("cc") or shutil.which("gcc")
    assert real is not None
    marker = tmp_path / "used"
    wrapper = tmp_path / "my-cc"
    wrapper.write_text(f"#!/bin/sh\ntouch {marker}\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", f"{wrapper} -DFROM_CC=1")
    program = host.compile(SAXPY_C + "\n#ifndef FROM_CC\n#error not through $CC\n#endif\n")
    assert marker.exists() and program.kernel("saxpy").signature is not None


@pytest.mark.parametrize(("args", "code", "words"), [
    ((b"int x;",), ErrorCode.INVALID_ARGUMENT, "str"),
    (("   ",), ErrorCode.INVALID_ARGUMENT, "empty"),
    ((SAXPY_C, "-O2"), ErrorCode.INVALID_ARGUMENT, "sequence"),
    ((SAXPY_C, [3]), ErrorCode.INVALID_ARGUMENT, "option"),
    ((SAXPY_C, (), "fortran"), ErrorCode.INVALID_ARGUMENT, "unknown lang"),
    ((SAXPY_C, (), "cuda"), ErrorCode.UNSUPPORTED, "CUDA devices"),
    ((SAXPY_C, (), "hip"), ErrorCode.UNSUPPORTED, "amdgpu devices"),
])
def test_arguments_are_checked(host: offloadrt.Device, args: tuple, code: ErrorCode, words: str) -> None:
    with pytest.raises(OffloadError) as info:
        host.compile(*args)
    assert info.value.code == code and words.lower() in info.value.details.lower()


def test_other_arguments_are_checked(host: offloadrt.Device) -> None:
    compile_source = offloadrt.Program.from_source

    for bad in ({"name": "../escape"}, {"name": ""}, {"cache": "yes"}):
        with pytest.raises(OffloadError) as info:
            compile_source(host, SAXPY_C, **bad)
        assert info.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(OffloadError) as info:
        compile_source("host", SAXPY_C)  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(OffloadError) as info:
        build(SAXPY_C, target=Target("opencl"))
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    program = compile_source(host, SAXPY_C, name="my_saxpy", cache=False)
    with pytest.raises(OffloadError) as info:
        program.kernel("nope")
    assert info.value.code == ErrorCode.NOT_FOUND and "saxpy" in info.value.details


def test_language_detection() -> None:
    host, cuda, amd = Target("host"), Target("cuda", "sm_90"), Target("amdgpu", "gfx90a")
    assert [detect_lang("int x;", t) for t in (host, cuda, amd)] == ["c", "cuda", "hip"]
    portable_c = "#include <gpuintrin.h>\n__gpu_kernel void k(int *p) { *p = 1; }\n"
    portable_cxx = '#include <gpuintrin.h>\nextern "C" __gpu_kernel void k(int *p) { *p = 1; }\n'
    assert {detect_lang(portable_c, t) for t in (host, cuda, amd)} == {"gpu-c"}
    assert detect_lang(portable_cxx, cuda) == "gpu-c++"
    assert detect_lang("// #include <gpuintrin.h> is only mentioned\n", host) == "c"
    c23 = "#include <gpuintrin.h>\n// C++ would say extern \"C\"\n[[clang::address_space(3)]] int shared[4];\n"
    assert detect_lang(c23, host) == "gpu-c"
    assert detect_lang("#include <gpuintrin.h>\nnamespace k { }\n", amd) == "gpu-c++"
    assert detect_lang("#include <gpuintrin.h>\n[[a]] class [[b]] x;\n", host) == "gpu-c++"  # between lists
    assert detect_lang("#include <gpuintrin.h>\n[[a class]] [[ b\n", host) == "gpu-c"  # inside one


def test_language_detection_is_linear_in_unclosed_attribute_lists() -> None:
    """1 MB of unclosed ``[[`` with a C++ hint: a regular expression rescanning the rest from every
    ``[[`` took about 40 minutes; the detection now runs through it once (a hang guard, not a timing)."""
    code = ("from offloadrt.compile import Target, detect_lang\n"
            "source = '#include <gpuintrin.h>\\nclass k;\\n' + '[[' * 500_000\n"
            "print(detect_lang(source, Target('host')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "gpu-c++", result.stderr


def test_portable_kernels_without_their_compiler_are_unsupported(host: offloadrt.Device,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "offloadrt.compile._portable", None)  # the import fails
    with pytest.raises(OffloadError) as info:
        host.compile("#include <gpuintrin.h>\n__gpu_kernel void k(int *p) { *p = 1; }\n")
    assert info.value.code == ErrorCode.UNSUPPORTED and "portable kernels need" in info.value.details


def test_the_compiler_process_leaves_no_files_behind(host: offloadrt.Device, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    build(SAXPY_C, cache=False)
    with pytest.raises(OffloadError):
        build("int broken(", cache=False)
    assert os.listdir(scratch) == []
