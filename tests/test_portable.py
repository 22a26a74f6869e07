"""Portable ``<gpuintrin.h>`` kernels (offloadrt.compile._portable): the host build (loops and fibers,
lanes, atomics, work-group memory, 3-D grids, faults), what the host refuses at compile time, the
PTX and AMDGPU builds, and finding clang and ld.lld.

The kernels are tests/kernels/portable/features.c. Everything here needs clang 20 or later (and
ld.lld for AMDGPU code objects) and skips with the reason where they are missing.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolchains import needs_clang, needs_lld

import offloadrt
from offloadrt import ErrorCode, OffloadError
from offloadrt.compile import _clang, _portable
from offloadrt.compile._types import Compiled, Target
from offloadrt.core import _runtime

KERNELS = Path(__file__).parent / "kernels" / "portable"
FEATURES = (KERNELS / "features.c").read_text()
HOST, PTX, AMDGPU = Target("host"), Target("cuda", "sm_90"), Target("amdgpu", "gfx90a")


pytestmark = needs_clang


@pytest.fixture(autouse=True, scope="module")
def layer() -> Iterator[None]:
    """The Python layer's runtime for this module only."""
    _runtime.shutdown()
    yield
    _runtime.shutdown()


@pytest.fixture(scope="module")
def compiled() -> Compiled:
    return _portable.compile_portable(FEATURES, [], "gpu-c", HOST)


@pytest.fixture(scope="module")
def program(layer: None, compiled: Compiled) -> offloadrt.Program:
    return offloadrt.Program._from_compiled(offloadrt.device("host"), compiled)


@pytest.fixture
def host() -> offloadrt.Device:
    return offloadrt.device("host")


def on(device: offloadrt.Device, values: np.ndarray) -> offloadrt.Array:
    return offloadrt.asarray(values, device)


def expect(code: ErrorCode, fn, *args, **kwargs) -> OffloadError:  # noqa: ANN001
    with pytest.raises(OffloadError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


# ---- the host build ---------------------------------------------------------------------------------

def test_signatures_come_from_the_source(compiled: Compiled) -> None:
    assert compiled.kernels["scale"] == ("float32", "ptr", "ptr", "uint32")
    assert compiled.kernels["count"] == ("ptr", "ptr") and compiled.symbols == {}
    assert compiled.image[:4] == b"\x7fELF"


def test_only_kernels_that_reach_a_barrier_or_lane_call_run_as_fibers() -> None:
    fibers = _portable.kernels_needing_fibers(FEATURES)
    assert fibers == {"scale": False, "where": False, "lanes": True, "divergent": True, "count": False,
                      "group_sum": True, "reverse": True, "leave_early": True, "hidden_barrier": False}


def test_a_kernel_without_barriers_runs_as_a_loop(program: offloadrt.Program, host: offloadrt.Device) -> None:
    n = 1000
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    y = on(host, np.zeros(n, np.float32))
    with host.queue() as queue:
        queue.launch(program.kernel("scale"), (n + 127) // 128, 128, 3.0, on(host, x), y, n)
    assert np.allclose(y.numpy(), 3 * x)


def test_every_id_of_a_three_dimensional_launch(program: offloadrt.Program, host: offloadrt.Device) -> None:
    groups, items = (3, 2, 2), (4, 3, 2)
    total = int(np.prod(groups) * np.prod(items))
    out = on(host, np.zeros(6 * total, np.uint32))
    with host.queue() as queue:
        queue.launch(program.kernel("where"), groups, items, out)
    got = out.numpy().reshape(total, 6)
    expected = [(gx, gy, gz, tx, ty, tz)
                for gz in range(2) for gy in range(2) for gx in range(3)
                for tz in range(2) for ty in range(3) for tx in range(4)]
    assert [tuple(row) for row in got] == expected


def lane_model(items: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """What features.c's ``lanes`` writes for one group of ``items`` items and wavefronts of ``width``."""
    rows, sums = [], []
    for i in range(items):
        start = i - i % width
        members = list(range(start, min(start + width, items)))
        lane = i % width
        count = len(members)
        mask = (1 << count) - 1
        ballot = sum(1 << (m - start) for m in members if (m - start) & 1)
        source = (lane + 1) % width
        shuffled = (start + source) * 10 if (mask >> source) & 1 else 0
        match = sum(1 << (m - start) for m in members if (m - start) // 4 == lane // 4)
        rows.append((lane, width, ballot, shuffled, start + 1000, sum(members), sum(members[:lane + 1]), match))
        sums.append(sum(0.5 * (m - start) for m in members))
    return np.array(rows, np.uint32), np.array(sums, np.float32)


@pytest.mark.parametrize("items", [96, 40])
def test_lane_operations_act_on_wavefronts_of_32(program: offloadrt.Program, host: offloadrt.Device,
                                                 items: int) -> None:
    out, sums = on(host, np.zeros(8 * items, np.uint32)), on(host, np.zeros(items, np.float32))
    with host.queue() as queue:
        queue.launch(program.kernel("lanes"), 1, items, out, sums)
    rows, fsums = lane_model(items, 32)
    assert (out.numpy().reshape(items, 8) == rows).all()
    assert np.allclose(sums.numpy(), fsums)


@settings(max_examples=20, deadline=None)
@given(shape=st.tuples(st.integers(1, 9), st.integers(1, 5), st.integers(1, 3)))
def test_lanes_over_any_group_shape(program: offloadrt.Program, shape: tuple[int, int, int]) -> None:
    """Wavefronts are 32 consecutive items in x, then y, then z order, whatever the group's shape."""
    host = offloadrt.device("host")
    items = shape[0] * shape[1] * shape[2]
    out, sums = on(host, np.zeros(8 * items, np.uint32)), on(host, np.zeros(items, np.float32))
    with host.queue() as queue:
        queue.launch(program.kernel("lanes"), 1, shape, out, sums)
    rows, fsums = lane_model(items, 32)
    assert (out.numpy().reshape(items, 8) == rows).all() and np.allclose(sums.numpy(), fsums)


@settings(max_examples=15, deadline=None)
@given(log_items=st.integers(0, 8), groups=st.integers(1, 9))
def test_group_sums_for_any_power_of_two_group(program: offloadrt.Program, log_items: int, groups: int) -> None:
    host = offloadrt.device("host")
    items = 1 << log_items
    x = np.random.default_rng(items + groups).random(groups * items, dtype=np.float32)
    sums = on(host, np.zeros(groups, np.float32))
    with host.queue() as queue:
        queue.launch(program.kernel("group_sum"), groups, items, on(host, x), sums)
    assert np.allclose(sums.numpy(), x.reshape(groups, items).sum(axis=1), rtol=1e-5)


def test_the_wavefront_width_is_a_build_option(host: offloadrt.Device) -> None:
    compiled = _portable.compile_portable(FEATURES, ["-D__OFFLOADRT_HOST_LANES=8"], "gpu-c", HOST)
    program = offloadrt.Program._from_compiled(host, compiled)
    out, sums = on(host, np.zeros(8 * 20, np.uint32)), on(host, np.zeros(20, np.float32))
    with host.queue() as queue:
        queue.launch(program.kernel("lanes"), 1, 20, out, sums)
    rows, fsums = lane_model(20, 8)
    assert (out.numpy().reshape(20, 8) == rows).all() and np.allclose(sums.numpy(), fsums)
    bad = expect(ErrorCode.COMPILE_FAILURE, _portable.compile_portable, FEATURES, ["-D__OFFLOADRT_HOST_LANES=3"],
                 "gpu-c", HOST)
    assert "power of two" in bad.details


def test_fibers_through_ucontext_where_there_is_no_assembly_switch(host: offloadrt.Device) -> None:
    """Builds with -D__OFFLOADRT_HOST_UCONTEXT take the portable swapcontext path (what CPUs other
    than x86-64 use): the same results."""
    compiled = _portable.compile_portable(FEATURES, ["-D__OFFLOADRT_HOST_UCONTEXT"], "gpu-c", HOST)
    program = offloadrt.Program._from_compiled(host, compiled)
    x = np.random.default_rng(3).random(4 * 256, dtype=np.float32)
    sums, out, fsums = on(host, np.zeros(4, np.float32)), on(host, np.zeros(8 * 40, np.uint32)), \
        on(host, np.zeros(40, np.float32))
    early = on(host, np.zeros(16, np.uint32))
    with host.queue() as queue:
        queue.launch(program.kernel("group_sum"), 4, 256, on(host, x), sums)
        queue.launch(program.kernel("lanes"), 1, 40, out, fsums)
        queue.launch(program.kernel("leave_early"), 1, 16, early)
    assert np.allclose(sums.numpy(), x.reshape(4, 256).sum(axis=1), rtol=1e-5)
    assert (out.numpy().reshape(40, 8) == lane_model(40, 32)[0]).all()
    assert early.numpy().tolist() == [1, 0] * 8


def test_lanes_that_diverge_see_only_the_lanes_at_their_call(program: offloadrt.Program,
                                                             host: offloadrt.Device) -> None:
    out = on(host, np.zeros(64, np.uint64))
    with host.queue() as queue:
        queue.launch(program.kernel("divergent"), 1, 64, out)
    assert out.numpy().tolist() == [0x55555555 if i % 2 == 0 else 0 for i in range(64)]


def test_atomics_across_groups_on_several_threads(program: offloadrt.Program, host: offloadrt.Device) -> None:
    counter, largest = on(host, np.zeros(1, np.uint32)), on(host, np.zeros(1, np.uint32))
    with host.queue() as queue:
        queue.launch(program.kernel("count"), 64, 128, counter, largest)
    assert counter.numpy()[0] == 64 * 128 and largest.numpy()[0] == 64 * 128 - 1


def test_static_work_group_memory_is_each_groups_own(program: offloadrt.Program, host: offloadrt.Device) -> None:
    groups = 64  # more groups than cores: groups run on several threads at once
    x = np.random.default_rng(2).random(groups * 256, dtype=np.float32)
    sums = on(host, np.zeros(groups, np.float32))
    with host.queue() as queue:
        queue.launch(program.kernel("group_sum"), groups, 256, on(host, x), sums)
    assert np.allclose(sums.numpy(), x.reshape(groups, 256).sum(axis=1), rtol=1e-5)


def test_fiber_groups_of_several_queues_at_once(program: offloadrt.Program, host: offloadrt.Device) -> None:
    """Launches of a barrier kernel on four queues run at the same time, on the same worker
    threads: each thread's fibers and work-group memory stay its own."""
    rng = np.random.default_rng(4)
    inputs = [rng.random(32 * 128, dtype=np.float32) for _ in range(4)]
    outputs = [on(host, np.zeros(32, np.float32)) for _ in range(4)]
    queues = [host.queue() for _ in range(4)]
    for _ in range(3):
        for queue, x, sums in zip(queues, inputs, outputs):
            queue.launch(program.kernel("group_sum"), 32, 128, on(host, x), sums)
    for queue, x, sums in zip(queues, inputs, outputs):
        queue.sync()
        assert np.allclose(sums.numpy(), x.reshape(32, 128).sum(axis=1), rtol=1e-5)


def test_a_pointer_into_work_group_memory(program: offloadrt.Program, host: offloadrt.Device) -> None:
    data = on(host, np.arange(256, dtype=np.uint32))
    with host.queue() as queue:
        queue.launch(program.kernel("reverse"), 4, 64, data)
    assert (data.numpy() == np.arange(256).reshape(4, 64)[:, ::-1].ravel()).all()


def test_items_that_exit_do_not_hold_up_the_barrier(program: offloadrt.Program, host: offloadrt.Device) -> None:
    out = on(host, np.zeros(16, np.uint32))
    with host.queue() as queue:
        queue.launch(program.kernel("leave_early"), 1, 16, out)
    assert out.numpy().tolist() == [1, 0] * 8


def test_a_barrier_the_analysis_cannot_see_faults_instead_of_computing_wrong(program: offloadrt.Program,
                                                                            host: offloadrt.Device) -> None:
    out = on(host, np.zeros(16, np.uint32))
    with host.queue() as queue:
        queue.launch(program.kernel("hidden_barrier"), 1, 1, out)  # one item: the barrier is trivial
    assert out.numpy()[0] == 1
    queue = host.queue()
    queue.launch(program.kernel("hidden_barrier"), 1, 16, out)
    error = expect(ErrorCode.QUEUE_ERROR, queue.sync)
    assert "hidden_barrier" in str(error) and str(0x4F4C0001) in str(error)  # OL_GPU_FAULT_UNEXPECTED_SYNC
    with pytest.warns(offloadrt.OffloadWarning, match="queue that failed"):
        out.buffer.close()  # memory a failed launch used is not reused, and says so


def test_dynamic_work_group_memory_is_the_launch_shared_memory(host: offloadrt.Device) -> None:
    source = """#include <gpuintrin.h>
#include <stdint.h>
extern __gpu_local float first[];
extern uint32_t __gpu_local second[];   /* the same memory, another type */
__gpu_kernel void prefix(float *out) {
  uint32_t t = __gpu_thread_id_x();
  first[t] = (float)t;
  __gpu_sync_threads();
  if (t == 0) {
    for (uint32_t i = 1; i < __gpu_num_threads_x(); ++i) first[i] += first[i - 1];
    second[__gpu_num_threads_x()] = 7u;
  }
  __gpu_sync_threads();
  out[__gpu_block_id_x() * __gpu_num_threads_x() + t] = first[t] + (float)second[__gpu_num_threads_x()];
}
"""
    program = offloadrt.Program._from_compiled(host, _portable.compile_portable(source, [], "gpu-c", HOST))
    out = on(host, np.zeros(8 * 32, np.float32))
    with host.queue() as queue:
        queue.launch(program.kernel("prefix"), 8, 32, out, shared_mem=33 * 4)
    assert (out.numpy().reshape(8, 32) == np.cumsum(np.arange(32)) + 7).all()


def test_dynamic_memory_without_a_launch_size_faults_instead_of_crashing(host: offloadrt.Device) -> None:
    source = ("#include <gpuintrin.h>\nextern __gpu_local int s[];\n"
              "__gpu_kernel void k(int *p) { s[__gpu_thread_id_x()] = 1; p[__gpu_thread_id_x()] = s[0]; }\n")
    program = offloadrt.Program._from_compiled(host, _portable.compile_portable(source, [], "gpu-c", HOST))
    out = on(host, np.zeros(4, np.int32))
    queue = host.queue()
    queue.launch(program.kernel("k"), 1, 4, out)  # no shared_mem
    error = expect(ErrorCode.QUEUE_ERROR, queue.sync)
    assert str(0x4F4C0003) in str(error)  # OL_GPU_FAULT_NO_DYNAMIC_MEMORY
    with pytest.warns(offloadrt.OffloadWarning, match="queue that failed"):
        out.buffer.close()


# ---- what the host refuses at compile time ---------------------------------------------------------

REFUSED = {
    "a pointer query": ("__gpu_kernel void k(int *p) { *p = __gpu_is_ptr_local(p); }",
                        "not supported on offloadrt's host device"),
    "another address space": ("__gpu_kernel void k(int *p) { "
                              "static __attribute__((address_space(5))) int x; *p = 0; (void)x; }",
                              "one address space"),
    "dynamic memory declared by a macro": ("#define SHARED(T, n) extern __gpu_local T n[]\nSHARED(int, s);\n"
                                           "__gpu_kernel void k(int *p) { s[0] = 1; *p = s[0]; }",
                                           "through a macro"),
    "an initialised work-group variable": ("__gpu_kernel void k(int *p) { static __gpu_local int x = 4; *p = x; }",
                                           "cannot have an initializer"),
    "a target builtin": ("__gpu_kernel void k(int *p) { *p = __builtin_amdgcn_workitem_id_x(); }",
                         "__builtin_amdgcn_workitem_id_x"),
    "a syntax error": ("__gpu_kernel void k(int *p) { *p = ; }", "expected expression"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_the_host_cannot_run_is_a_compile_error(case: str) -> None:
    body, message = REFUSED[case]
    error = expect(ErrorCode.COMPILE_FAILURE, _portable.compile_portable,
                   "#include <gpuintrin.h>\n" + body + "\n", [], "gpu-c", HOST)
    assert "kernel.c" in error.details  # the log names the source as the user wrote it
    assert message in error.details


def test_cxx_exceptions_and_reference_parameters_are_refused() -> None:
    throwing = '#include <gpuintrin.h>\nextern "C" __gpu_kernel void k(int *p) { if (!p) throw 1; *p = 1; }\n'
    error = expect(ErrorCode.COMPILE_FAILURE, _portable.compile_portable, throwing, [], "gpu-c++", HOST)
    assert "exceptions" in error.details
    reference = '#include <gpuintrin.h>\nextern "C" __gpu_kernel void k(int &p) { p = 1; }\n'
    error = expect(ErrorCode.COMPILE_FAILURE, _portable.compile_portable, reference, [], "gpu-c++", HOST)
    assert "reference parameter" in error.details


def test_offloadrts_code_adds_no_warnings() -> None:
    """The host header and the generated wrappers are clean under strict C99 and -Werror, so they
    never break a user's warning flags."""
    compiled = _portable.compile_portable(FEATURES, ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror"],
                                          "gpu-c", HOST)
    assert compiled.log == ""


def test_a_source_may_include_cxx_standard_headers() -> None:
    """Struct members the signature reader cannot lay out (references in <algorithm>) leave those
    structs unknown instead of failing the whole source."""
    source = ('#include <gpuintrin.h>\n#include <algorithm>\n#include <cstdint>\n'
              'extern "C" __gpu_kernel void k(uint32_t *p) { p[0] = std::max(p[0], 3u); }\n')
    assert _portable.compile_portable(source, [], "gpu-c++", HOST).kernels == {"k": ("ptr",)}


def test_kernels_the_host_wrapper_cannot_call_are_explained() -> None:
    source = '#include <gpuintrin.h>\nnamespace inner { extern "C" __gpu_kernel void k(int *p) { *p = 1; } }\n'
    error = expect(ErrorCode.COMPILE_FAILURE, _portable.compile_portable, source, [], "gpu-c++", HOST)
    assert "declared in a namespace" in error.details
    assert _portable.compile_portable(source, [], "gpu-c++", PTX).kernels == {"k": ("ptr",)}


def test_the_compile_log_is_whole() -> None:
    source = "#include <gpuintrin.h>\n" + "".join(f"__gpu_kernel void k{i}(int *p) {{ *p = x{i}; }}\n"
                                                   for i in range(3))
    error = expect(ErrorCode.COMPILE_FAILURE, _portable.compile_portable, source, [], "gpu-c", HOST)
    assert all(f"x{i}" in error.details for i in range(3)) and "3 errors generated" in error.details


def test_arguments_are_checked() -> None:
    expect(ErrorCode.UNSUPPORTED, _portable.compile_portable, FEATURES, [], "cuda", HOST)
    expect(ErrorCode.UNSUPPORTED, _portable.compile_portable, FEATURES, [], "gpu-c", Target("opencl"))
    expect(ErrorCode.UNSUPPORTED, _portable.compile_portable, FEATURES, [], "gpu-c", Target("cuda"))
    expect(ErrorCode.UNSUPPORTED, _portable.compile_portable, FEATURES, [], "gpu-c", Target("amdgpu", "sm_90"))
    expect(ErrorCode.INVALID_ARGUMENT, _portable.compile_portable, FEATURES, "-O2", "gpu-c", HOST)
    expect(ErrorCode.INVALID_ARGUMENT, _portable.compile_portable, b"x", [], "gpu-c", HOST)
    expect(ErrorCode.INVALID_ARGUMENT, _portable.compile_portable, FEATURES, [], "gpu-c", "host")


# ---- GPU builds ------------------------------------------------------------------------------------

def test_ptx_build() -> None:
    compiled = _portable.compile_portable(FEATURES, [], "gpu-c", PTX)
    ptx = compiled.image.decode()
    assert ".target sm_90" in ptx and ".visible .entry group_sum(" in ptx
    assert compiled.kernels["scale"] == ("float32", "ptr", "ptr", "uint32")
    assert set(compiled.kernels) == set(_portable.kernels_needing_fibers(FEATURES))


def test_cxx_kernels_are_found_by_their_source_name() -> None:
    source = ('#include <gpuintrin.h>\n#include <stdint.h>\n'
              '__gpu_kernel void mangled(uint32_t *out, uint16_t v) { out[0] = v; }\n'
              'extern "C" __gpu_kernel void plain(uint32_t *out) { out[0] = 1; }\n')
    compiled = _portable.compile_portable(source, [], "gpu-c++", PTX)
    assert compiled.symbols == {"mangled": "_Z7mangledPjt"}
    assert compiled.kernels == {"mangled": ("ptr", "uint16"), "plain": ("ptr",)}
    host = _portable.compile_portable(source, [], "gpu-c++", HOST)
    assert host.symbols == {} and set(host.kernels) == {"mangled", "plain"}


def test_device_compile_takes_portable_cxx(host: offloadrt.Device, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Through Device.compile (the language found from the source), a C++-linkage kernel by its name."""
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(tmp_path))
    source = ('#include <gpuintrin.h>\n#include <stdint.h>\n'
              'template <typename T> static T twice(T v) { return v + v; }\n'
              '__gpu_kernel void mangled(uint32_t *out, uint16_t v) { out[__gpu_thread_id_x()] = twice(v); }\n')
    kernel = host.compile(source).kernel("mangled")
    assert kernel.signature == ("ptr", "uint16")
    out = on(host, np.zeros(8, np.uint32))
    with host.queue() as queue:
        queue.launch(kernel, 1, 8, out, 21)
    assert (out.numpy() == 42).all()


@needs_lld
def test_amdgpu_build() -> None:
    compiled = _portable.compile_portable(FEATURES, [], "gpu-c", AMDGPU)
    image = compiled.image
    assert image[:4] == b"\x7fELF" and struct.unpack_from("<H", image, 18)[0] == 224  # EM_AMDGPU
    assert struct.unpack_from("<H", image, 16)[0] == 3  # ET_DYN: a linked code object
    names = _portable.elf_symbols(image)
    assert "group_sum.kd" in names and "scale.kd" in names
    assert compiled.kernels["scale"] == ("float32", "ptr", "ptr", "uint32")


def test_gpu_builds_take_the_clang_header() -> None:
    """On a GPU target offloadrt's gpuintrin.h hands over to clang's: the analysis's host view and
    the target's own view of one source agree on its kernels."""
    compiled = _portable.compile_portable(FEATURES, ["-DEXTRA=1"], "gpu-c", PTX)
    assert "__ol_" not in compiled.image.decode()


# ---- tools -----------------------------------------------------------------------------------------

def test_a_missing_clang_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OFFLOADRT_CLANG", str(tmp_path / "no-clang"))
    error = expect(ErrorCode.HOST_TOOL_NOT_FOUND, _portable.compile_portable, FEATURES, [], "gpu-c", HOST)
    assert "apt-get install clang-22 lld-22" in error.details
    monkeypatch.delenv("OFFLOADRT_CLANG")
    monkeypatch.setenv("PATH", str(tmp_path))
    error = expect(ErrorCode.HOST_TOOL_NOT_FOUND, _portable.toolchain_identity, HOST)
    assert "no clang on PATH" in error.details


def test_an_old_clang_is_not_taken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    old = tmp_path / "clang-15"
    old.write_text("#!/bin/sh\necho 'clang version 15.0.7'\n")
    old.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    error = expect(ErrorCode.HOST_TOOL_NOT_FOUND, _clang.clang)
    assert "clang-15 (15)" in error.details and "20 or later" in error.details


@needs_lld
def test_a_missing_lld_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OFFLOADRT_LLD", str(tmp_path / "no-lld"))
    error = expect(ErrorCode.HOST_TOOL_NOT_FOUND, _portable.compile_portable, FEATURES, [], "gpu-c", AMDGPU)
    assert "lld" in error.details and "apt-get install lld-" in error.details


@needs_lld
def test_the_toolchain_identity_names_the_tools_and_versions() -> None:
    clang = _clang.clang()
    host, cuda, amd = (_portable.toolchain_identity(t) for t in (HOST, PTX, AMDGPU))
    assert clang.path in host and clang.banner in cuda and "host gpuintrin" in host
    assert "LLD" in amd and "host gpuintrin" not in cuda


def test_a_compile_failure_shows_its_command_as_a_shell_would_take_it() -> None:
    error = expect(ErrorCode.COMPILE_FAILURE, _portable.compile_portable,
                   "#include <gpuintrin.h>\n__gpu_kernel void k(int *p) { *p = ; }\n", ["-DLABEL=two words"],
                   "gpu-c", HOST)
    assert "'-DLABEL=two words'" in error.details, error.details  # quoted, as host C compile errors are
