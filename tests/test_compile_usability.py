"""Kernels from source, as a user meets them (issue 21): messages that say what to write instead
(template kernels, OpenCL C), host builds for the CPU that runs them (``-march=native`` unless
turned off), and the package's shape (offloadrt.compile never imports offloadrt.core; no module
past 450 lines; the split modules' names still importable where they were)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from toolchains import needs_clang

import offloadrt
from offloadrt import ErrorCode, OffloadError
from offloadrt.compile import Target, _clang, build, detect_lang
from offloadrt.core import _runtime

COMPILE = Path(offloadrt.__file__).resolve().parent / "compile"


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


# ---- messages ------------------------------------------------------------------------------------

TEMPLATE = """#include <gpuintrin.h>
#include <stdint.h>
template <typename T>
MARK void fill(T *p, T v, uint32_t n) {
  uint32_t i = __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  if (i < n) p[i] = v;
}
"""


@needs_clang
def test_a_template_kernel_is_explained_and_the_advice_compiles_and_runs(host: offloadrt.Device) -> None:
    """Before: "the layout of 'T' is unknown (define it in the source as a plain struct)"."""
    with pytest.raises(OffloadError) as info:
        host.compile(TEMPLATE.replace("MARK", "__gpu_kernel") + "template __gpu_kernel void fill<float>"
                                                                  "(float *, float, uint32_t);\n")
    details = info.value.details
    assert info.value.code == ErrorCode.COMPILE_FAILURE
    assert "function template" in details and "a template is not a kernel" in details, details
    assert "layout of 'T'" not in details
    advice = re.search(r"`(__gpu_kernel void [^`]*)`", details)
    assert advice is not None, details
    # what the message says to write, as it says it, compiles and runs
    program = host.compile(TEMPLATE.replace("MARK", "") + advice.group(1) + "\n")
    kernel = program.kernel("fill_float")
    assert kernel.signature == ("ptr", "float32", "uint32")
    out = offloadrt.asarray(np.zeros(100, np.float32), host)
    with host.queue() as queue:
        queue.launch(kernel, 2, 64, out, 2.5, 100)
    assert (out.numpy() == 2.5).all()


OPENCL = """// y = a * x + y in OpenCL C
__kernel void saxpy(float a, __global const float *x, __global float *y) {
  size_t i = get_global_id(0);
  y[i] = a * x[i] + y[i];
}
"""


@pytest.mark.parametrize("target", [Target("host"), Target("cuda", "sm_90"), Target("amdgpu", "gfx90a")])
def test_opencl_c_is_refused_with_what_to_write_instead(target: Target) -> None:
    """Before: cc's (or NVRTC's) own errors about `__global`."""
    with pytest.raises(OffloadError) as info:
        build(OPENCL, target=target, cache=False)
    details = info.value.details
    assert info.value.code == ErrorCode.UNSUPPORTED
    assert "does not compile OpenCL C" in details and "__gpu_kernel" in details and "<gpuintrin.h>" in details
    assert "__gpu_thread_id_x()" in details and "docs/portable-kernels.md" in details


def test_opencl_c_through_device_compile(host: offloadrt.Device) -> None:
    kernel_keyword = "kernel void k(global float *x) { x[get_global_id(0)] = 1.0f; }\n"  # without underscores
    for source in (OPENCL, kernel_keyword):
        with pytest.raises(OffloadError) as info:
            host.compile(source)
        assert info.value.code == ErrorCode.UNSUPPORTED and "OpenCL C" in info.value.details


def test_sources_that_only_mention_opencl_are_not_refused() -> None:
    host = Target("host")
    assert detect_lang("/* was: __kernel void saxpy(__global float *x) */\nint x;\n", host) == "c"
    assert detect_lang('const char *text = "__kernel void k(__global float *p)";\n', host) == "c"
    assert detect_lang("extern \"C\" __global__ void k(float *x) { x[threadIdx.x] = 1; }\n",
                       Target("cuda", "sm_90")) == "cuda"
    assert detect_lang("static int kernel(void) { return 0; }\nint kernel_void;\n", host) == "c"


# ---- the package's shape -------------------------------------------------------------------------

def test_offloadrt_compile_never_imports_offloadrt_core() -> None:
    """core -> compile, never back (type-checking imports included): before, compile_source imported
    core's Device and Program."""
    back: list[str] = []
    for path in sorted(COMPILE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if (node.level == 2 and module.split(".")[0] == "core") or module.startswith("offloadrt.core") or (
                        node.level == 2 and not module and any(alias.name == "core" for alias in node.names)):
                    back.append(f"{path.name}:{node.lineno}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("offloadrt.core") for a in node.names):
                back.append(f"{path.name}:{node.lineno}")
    assert back == []


def test_no_compile_module_is_past_450_lines() -> None:
    long = {path.name: n for path in COMPILE.glob("*.py") if (n := len(path.read_text().splitlines())) > 450}
    assert long == {}


def test_the_split_modules_names_are_importable_where_they_were() -> None:
    from offloadrt.compile import _portable, _signature

    for name in ("compile_portable", "toolchain_identity", "kernels_needing_fibers", "elf_symbols", "host_source",
                 "rewrite_local_memory", "Analysis", "LANGS", "GENERATOR", "SOURCE_NAME"):
        assert hasattr(_portable, name), name
    for name in ("SignatureError", "SourceInfo", "KernelDecl", "Param", "analyse", "clean", "signature",
                 "describe", "rebuild", "size_and_alignment", "host_abi_kernels", "ptx_entries", "ptx_signature",
                 "matches_ptx", "symbol_for", "extern_local_arrays", "scalar_dtype", "parse_params"):
        assert hasattr(_signature, name), name


def test_program_from_source_takes_name_and_cache(host: offloadrt.Device, cache_dir: Path) -> None:
    source = "#include <offloadrt/host_kernel.h>\nOL_HOST_KERNEL k(const void *a, const ol_host_launch_t *l) " \
             "{ (void)a; (void)l; return 0; }\nOL_HOST_KERNEL_NO_ARGS(k);\n"
    program = offloadrt.Program.from_source(host, source, name="mine", cache=False)
    assert program.kernel("k").signature == ()
    assert not cache_dir.exists() or not any(cache_dir.iterdir())
    with pytest.raises(OffloadError) as info:
        offloadrt.Program.from_source(host, source + "syntax error here", name="mine", cache=False)
    assert info.value.code == ErrorCode.COMPILE_FAILURE and "mine.c" in info.value.details
    with pytest.raises(OffloadError) as info:
        offloadrt.Program.from_source("host", source)  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


# ---- host builds for this CPU --------------------------------------------------------------------

def _native_only_macro() -> str:
    """A macro clang defines with -march=native and not without (``__AVX2__`` on most x86-64 machines)."""
    import subprocess

    clang = _clang.clang().path

    def macros(*flags: str) -> set[str]:
        shown = subprocess.run([clang, *flags, "-dM", "-E", "-x", "c", "/dev/null"], capture_output=True, text=True,
                               check=False)
        return {line.split()[1] for line in shown.stdout.splitlines() if line.startswith("#define ")}

    extra = sorted(macros("-march=native") - macros())
    preferred = [name for name in ("__AVX2__", "__AVX__", "__SSE4_2__", "__ARM_FEATURE_SVE") if name in extra]
    if not (preferred or extra):
        pytest.skip("this CPU gains no macro from -march=native")
    return (preferred or extra)[0]


def _cpu_source(macro: str) -> str:
    """One kernel whose name says whether the build was for this CPU."""
    return (f"#include <gpuintrin.h>\n#ifdef {macro}\n__gpu_kernel void native(int *p) {{ *p = 1; }}\n"
            f"#else\n__gpu_kernel void baseline(int *p) {{ *p = 0; }}\n#endif\n")


@needs_clang
def test_portable_host_builds_are_for_this_cpu_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: -O3 without -march=native (a compute-bound kernel 1.5-2x slower than PoCL's build)."""
    source = _cpu_source(_native_only_macro())
    assert set(build(source).kernels) == {"native"}
    for own in (["-march=x86-64"] if _is_x86() else ["-mcpu=generic"]) + ["-mtune=generic"]:
        assert set(build(source, [own]).kernels) == {"baseline"}, own  # the user's CPU option wins
    monkeypatch.setenv("OFFLOADRT_HOST_MARCH", "generic")
    assert set(build(source).kernels) == {"baseline"}  # the same cache folder: another key
    monkeypatch.delenv("OFFLOADRT_HOST_MARCH")
    assert set(build(source).kernels) == {"native"}


def _is_x86() -> bool:
    import platform

    return platform.machine() in ("x86_64", "AMD64", "i686")


@needs_clang
def test_the_cache_keys_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image built on another CPU (a cache folder shared between machines) is not this one's."""
    from offloadrt.compile import _portable, _portable_host

    clang = _clang.clang()
    here = _portable_host.native_cpu(clang)
    assert here is not None and here.split()[0] in _portable.toolchain_identity(Target("host"))
    source = "#include <gpuintrin.h>\n__gpu_kernel void k(int *p) { *p = 1; }\n"
    build(source)
    compiles: list[str] = []
    real = _portable.compile_portable
    monkeypatch.setattr(_portable, "compile_portable", lambda *args: compiles.append("compiled") or real(*args))
    build(source)
    assert compiles == []  # a hit on this CPU
    monkeypatch.setattr(_portable_host, "native_cpu", lambda tool: "othercpu 0123456789abcdef")
    monkeypatch.setattr(_portable, "_identities", {})
    build(source)
    assert compiles == ["compiled"]  # the same source on another CPU


# ---- portable sources found through the user's own headers (issue 22) -------------------------------

MYLIB = """#pragma once
#include <gpuintrin.h>
#include <stdint.h>
static inline uint32_t global_id(void) { return __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x(); }
"""
USES_MYLIB = """#include "mylib.h"
__gpu_kernel void ids(uint32_t *out) { out[global_id()] = global_id() * 3; }
"""


@needs_clang
def test_a_source_reaching_gpuintrin_through_its_own_header_is_portable(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: only the first file's text was read, so this went to cc as host C and failed."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "mylib.h").write_text(MYLIB)
    (tmp_path / "include" / "cxxlib.h").write_text('#include "mylib.h"\nnamespace lib { }\n')
    monkeypatch.chdir(tmp_path)
    host = Target("host")
    assert detect_lang(USES_MYLIB, host, ["-Iinclude"]) == "gpu-c"
    assert detect_lang('#include "cxxlib.h"\n', host, ["-Iinclude"]) == "gpu-c++"
    assert detect_lang(USES_MYLIB, host, []) == "c"  # the header is not found without -I: cc says so
    assert detect_lang('#include "other.h"\n#include <stdio.h>\n', host, ["-Iinclude"]) == "c"
    device = offloadrt.device("host")
    program = offloadrt.Program.from_source(device, USES_MYLIB, ["-Iinclude"], cache=False)
    out = offloadrt.zeros(64, np.uint32, device)
    with device.queue() as queue:
        queue.launch(program.kernel("ids"), 2, 32, out)
    assert out.get().tolist() == [3 * i for i in range(64)]
