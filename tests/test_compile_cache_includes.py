"""The compile cache keys on the files a source includes: the same source and options give the
image of the headers they read now, for host C, portable kernels, NVRTC and hiprtc (stand-in).

Before (issue 20) the key was the source text and the option strings only, so two projects with
``#include "params.h"`` and ``-Iinclude``, or a header edited between two compiles, got the first
compiled image. Headers here are written "a while ago" (:func:`write`): a file modified during a
compile is not cached (its contents at the compile cannot be told), which one test shows on its own.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

import offloadrt
from offloadrt import OffloadError
from offloadrt import compile as compiler
from offloadrt.compile import Compiled, Target, build

HOST_C = r"""
#include <offloadrt/host_kernel.h>
#include "params.h"
struct args { int *out; };
OL_HOST_KERNEL put(const void *args, const ol_host_launch_t *launch) {
  (void)launch;
  *((const struct args *)args)->out = VALUE;
  return 0;
}
OL_HOST_KERNEL_ARGS(put, struct args);
"""
PORTABLE = '#include <gpuintrin.h>\n#include "params.h"\n__gpu_kernel void put(int *out) { *out = VALUE; }\n'
CUDA = '#include "params.h"\nextern "C" __global__ void put(int *out) { *out = VALUE; }\n'
HIP = '#include <params.h>\nextern "C" __global__ void put(int *out) { *out = VALUE; }\n'
PTX = Target("cuda", "sm_90")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The languages of the compiles that really ran (cache misses)."""
    ran: list[str] = []
    real = compiler._compile

    def counted(source: str, options: tuple[str, ...], lang: str, target: Target, name: str) -> Compiled:
        ran.append(lang)
        return real(source, options, lang, target, name)

    monkeypatch.setattr(compiler, "_compile", counted)
    return ran


@pytest.fixture
def host() -> offloadrt.Device:
    return offloadrt.device("host")


def write(path: Path, text: str) -> Path:
    """Write a header as saved an hour ago (edits keep that time: the cache must see the contents)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    return path


def run(host: offloadrt.Device, source: str, options: list[str], lang: str | None = None) -> int:
    """Compile ``source`` for the host device (through the cache), run its kernel ``put``, and
    return the value it wrote."""
    program = host.compile(source, options, lang)
    out = offloadrt.empty(1, np.int32, device=host)
    with host.queue() as queue:
        queue.launch(program.kernel("put"), 1, 1, out)
    return int(out.numpy()[0])


def projects(tmp_path: Path, *values: int) -> list[Path]:
    """Project folders, each with its own ``include/params.h`` defining VALUE."""
    found = []
    for number, value in enumerate(values):
        folder = tmp_path / f"project{number}"
        write(folder / "include" / "params.h", f"#define VALUE {value}\n")
        found.append(folder)
    return found


def clang_missing() -> str | None:
    from offloadrt.compile import _clang

    try:
        _clang.clang()
    except OffloadError as exc:
        return f"portable kernels need clang >= 20 (clang-22 here): {exc.details}"
    return None


def nvrtc_missing() -> str | None:
    from offloadrt.compile import _nvrtc

    try:
        _nvrtc.version()
    except OffloadError as exc:
        return f"NVRTC (cuda-bindings + the nvidia-cuda-nvrtc wheel) is missing: {exc.details}"
    return None


def ptx_value(compiled: Compiled) -> list[str]:
    """The PTX lines that load a constant into a register or store one (where VALUE shows)."""
    return [line.strip() for line in compiled.image.decode().splitlines() if line.strip().startswith(("mov.", "st."))
            and line.rstrip(";").split()[-1].isdigit()]


# ---- host C --------------------------------------------------------------------------------------

def test_two_projects_with_a_relative_include_folder_get_their_own_headers(
        host: offloadrt.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]) -> None:
    first, second, third = projects(tmp_path, 1, 2, 3)
    results = []
    for folder in (first, second, third, first):
        monkeypatch.chdir(folder)
        results.append(run(host, HOST_C, ["-Iinclude"]))
    assert results == [1, 2, 3, 1]
    assert compiles == ["c"] * 3  # the last one is the first project's entry


def test_an_edited_header_gives_the_new_result_and_its_old_contents_the_old_entry(
        host: offloadrt.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]) -> None:
    folder, = projects(tmp_path, 1)
    monkeypatch.chdir(folder)
    header = folder / "include" / "params.h"
    results = [run(host, HOST_C, ["-Iinclude"])]
    for value in (2, 3, 1):  # same size, same modification time: only the contents differ
        write(header, f"#define VALUE {value}\n")
        results.append(run(host, HOST_C, ["-Iinclude"]))
    assert results == [1, 2, 3, 1]
    assert compiles == ["c"] * 3  # back to 1: that variant is still in the manifest


def test_a_header_under_an_absolute_include_folder_and_what_it_includes_are_keyed(
        host: offloadrt.Device, tmp_path: Path, compiles: list[str]) -> None:
    shared = tmp_path / "shared"
    write(shared / "params.h", '#include "more/value.h"\n')
    nested = write(shared / "more" / "value.h", "#define VALUE 1\n")
    assert run(host, HOST_C, [f"-I{shared}"]) == 1
    write(nested, "#define VALUE 2\n")
    assert run(host, HOST_C, ["-I", str(shared)]) == 2  # the same folder spelled apart
    assert run(host, HOST_C, [f"-I{shared}"]) == 2
    assert compiles == ["c"] * 3  # "-I dir" and "-Idir" are different options, so different keys


def test_unchanged_headers_hit_the_cache_from_any_directory(
        host: offloadrt.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]) -> None:
    folder, = projects(tmp_path, 7)
    include = str(folder / "include")
    assert run(host, HOST_C, [f"-I{include}"]) == 7
    monkeypatch.chdir(tmp_path)
    assert run(host, HOST_C, [f"-I{include}"]) == 7  # an absolute folder does not depend on where one is
    monkeypatch.chdir(folder)
    assert run(host, HOST_C, ["-Iinclude"]) == 7  # another option string: another key
    assert run(host, HOST_C, ["-Iinclude"]) == 7
    assert compiles == ["c", "c"]
    assert run(host, "#include <offloadrt/host_kernel.h>\n#define VALUE 5\n" + HOST_C.replace('#include "params.h"',
               ""), []) == 5
    assert run(host, "#include <offloadrt/host_kernel.h>\n#define VALUE 5\n" + HOST_C.replace('#include "params.h"',
               ""), []) == 5  # only system headers: a hit as well
    assert compiles == ["c"] * 3


def test_a_header_created_earlier_in_the_search_path_is_the_one_read(
        host: offloadrt.Device, tmp_path: Path, compiles: list[str]) -> None:
    early, late = tmp_path / "early", tmp_path / "late"
    early.mkdir()
    write(late / "params.h", "#define VALUE 2\n")
    options = [f"-I{early}", f"-I{late}"]
    assert run(host, HOST_C, options) == 2
    write(early / "params.h", "#define VALUE 1\n")  # now found first
    assert run(host, HOST_C, options) == 1
    (early / "params.h").unlink()
    assert run(host, HOST_C, options) == 2
    assert compiles == ["c", "c"]


def test_a_header_created_where_none_was_found_is_read(host: offloadrt.Device, tmp_path: Path,
                                                        compiles: list[str]) -> None:
    """cc does not report where it looked and found nothing: the source's includes are followed for that."""
    folder = tmp_path / "include"
    folder.mkdir()
    source = HOST_C.replace('#include "params.h"', '#if __has_include("params.h")\n#include "params.h"\n'
                                                    '#else\n#define VALUE 9\n#endif')
    assert run(host, source, [f"-I{folder}"]) == 9
    assert run(host, source, [f"-I{folder}"]) == 9
    write(folder / "params.h", "#define VALUE 1\n")
    assert run(host, source, [f"-I{folder}"]) == 1
    assert compiles == ["c", "c"]


def test_a_header_modified_during_the_compile_is_not_cached(
        host: offloadrt.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]) -> None:
    """Which contents the compiler read cannot be told, so neither can the entry's key: compiled each time."""
    folder, = projects(tmp_path, 4)
    header = folder / "include" / "params.h"
    later = time.time() + 3600  # modified after the compile started, as an editor saving during it would
    os.utime(header, (later, later))
    monkeypatch.chdir(folder)
    assert run(host, HOST_C, ["-Iinclude"]) == 4
    assert run(host, HOST_C, ["-Iinclude"]) == 4
    assert compiles == ["c", "c"]


# ---- portable kernels ----------------------------------------------------------------------------

def test_portable_kernels_key_on_their_headers(
        host: offloadrt.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]) -> None:
    why = clang_missing()
    if why:
        pytest.skip(why)
    first, second = projects(tmp_path, 1, 2)
    results = []
    for folder in (first, second, first):
        monkeypatch.chdir(folder)
        results.append(run(host, PORTABLE, ["-Iinclude"], "gpu-c"))
    write(second / "include" / "params.h", "#define VALUE 3\n")
    monkeypatch.chdir(second)
    results.append(run(host, PORTABLE, ["-Iinclude"], "gpu-c"))
    assert results == [1, 2, 1, 3]
    assert compiles == ["gpu-c"] * 3
    ptx = [ptx_value(build(PORTABLE, ["-Iinclude"], "gpu-c", PTX))]  # a GPU build of the same project
    write(second / "include" / "params.h", "#define VALUE 4\n")
    ptx.append(ptx_value(build(PORTABLE, ["-Iinclude"], "gpu-c", PTX)))
    assert ptx[0] != ptx[1] and "3" in ptx[0][-1] and "4" in ptx[1][-1], ptx


# ---- NVRTC and hiprtc (which cannot say what they read: the includes are followed) ---------------

def test_cuda_kernels_key_on_their_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           compiles: list[str]) -> None:
    why = nvrtc_missing()
    if why:
        pytest.skip(why)
    first, second = projects(tmp_path, 1, 2)
    ptx = []
    for folder in (first, second, first):
        monkeypatch.chdir(folder)
        ptx.append(ptx_value(build(CUDA, ["-Iinclude"], "cuda", PTX)))
    assert ptx[0] != ptx[1] and ptx[0] == ptx[2] and "1" in ptx[0][0] and "2" in ptx[1][0], ptx
    assert compiles == ["cuda"] * 2
    write(second / "include" / "params.h", "#define VALUE 3\n")
    monkeypatch.chdir(second)
    assert "3" in ptx_value(build(CUDA, ["--include-path=include"], "cuda", PTX))[0]
    # NVRTC looks for the source's "..." includes in the current directory first
    write(second / "params.h", "#define VALUE 5\n")
    assert "5" in ptx_value(build(CUDA, ["--include-path=include"], "cuda", PTX))[0]
    monkeypatch.chdir(first)
    assert "1" in ptx_value(build(CUDA, ["-Iinclude"], "cuda", PTX))[0]
    assert compiles == ["cuda"] * 4


def test_a_cuda_include_named_by_a_macro_is_compiled_each_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               compiles: list[str]) -> None:
    why = nvrtc_missing()
    if why:
        pytest.skip(why)
    folder, = projects(tmp_path, 1)
    monkeypatch.chdir(folder)
    source = CUDA.replace('#include "params.h"', '#define PARAMS "params.h"\n#include PARAMS')
    assert "1" in ptx_value(build(source, ["-Iinclude"], "cuda", PTX))[0]
    write(folder / "include" / "params.h", "#define VALUE 2\n")
    assert "2" in ptx_value(build(source, ["-Iinclude"], "cuda", PTX))[0]
    assert compiles == ["cuda"] * 2


def test_hip_kernels_key_on_their_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          compiles: list[str]) -> None:
    """Through the hiprtc stand-in (clang -x hip; no ROCm here): an absolute include folder only,
    as the stand-in runs clang in a folder of its own."""
    from hip_standin import hiprtc as hiprtc_standin

    if hiprtc_standin.find_clang() is None:
        pytest.skip("the hiprtc stand-in needs clang >= 20 with the AMDGPU target and ld.lld")
    hiprtc_standin.install(monkeypatch)
    folder, = projects(tmp_path, 1)
    header = folder / "include" / "params.h"
    target = Target("amdgpu", "gfx90a")
    images = [build(HIP, [f"-I{folder / 'include'}"], "hip", target).image]
    write(header, "#define VALUE 2\n")
    images.append(build(HIP, [f"-I{folder / 'include'}"], "hip", target).image)
    images.append(build(HIP, [f"-I{folder / 'include'}"], "hip", target).image)
    assert images[0] != images[1] == images[2]
    assert compiles == ["hip"] * 2


# ---- what is read, in parts ------------------------------------------------------------------------

def test_include_options_are_resolved_in_every_spelling() -> None:
    from offloadrt.compile import _inputs

    options = ["-O2", "-Iinc", "-I", "/abs", "-isystem", "sys", "-iquoteq", "--include-path=np", "-include", "pre.h",
               "-DX=1", "--pre-include=pp.h", "-idirafter", "after", "-imacros", "m.h", "-std=c17"]
    assert _inputs.include_options(options, "/work") == [
        ("-I", "/work/inc"), ("-I", "/abs"), ("-isystem", "/work/sys"), ("-iquote", "/work/q"),
        ("--include-path", "/work/np"), ("-include", "/work/pre.h"), ("--pre-include", "/work/pp.h"),
        ("-idirafter", "/work/after"), ("-imacros", "/work/m.h")]


def test_a_make_rule_with_escaped_names_is_read() -> None:
    from offloadrt.compile import _inputs

    rule = "/tmp/w/k.so: /tmp/w/k.c include/a\\ b.h \\\n  /usr/include/stdio.h /x/$$dollar.h\n"
    assert _inputs.from_make(rule, "/proj", "/tmp/w").files == (
        "/proj/include/a b.h", "/usr/include/stdio.h", "/x/$dollar.h")
