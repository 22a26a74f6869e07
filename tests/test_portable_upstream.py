"""LLVM's Offload API device kernels, in offloadrt's own words, built from one portable source for
the host, PTX and AMDGPU.

LLVM's ``offload/unittests/OffloadAPI/device_code/*.cpp`` are C++ kernels against clang's
``<gpuintrin.h>``. Their text is not copied here; tests/kernels/portable/ has kernels written
anew in the same dialect and with the same constructs, one for each upstream kernel:

============================  =====================================  ============================
upstream kernel               ours                                   what is checked (as upstream)
============================  =====================================  ============================
foo.cpp, bar.cpp              ids.cpp: ids, ids_plus_one             out[i] == i, i + 1
noargs.cpp                    arguments.cpp: nothing                 a launch without arguments
byte.cpp                      arguments.cpp: one_byte                a 1-byte argument blob
multiargs.cpp                 arguments.cpp: mixed                   char, pointer, short
composite.cpp                 arguments.cpp: by_value                a struct by value
byval_ptr.cpp                 arguments.cpp: through_struct          a pointer inside a struct
localmem.cpp                  dynamic_local.cpp: doubled_through..   extern __gpu_local, no barrier
localmem_reduction.cpp        dynamic_local.cpp: group_total         extern __gpu_local + barrier
localmem_static.cpp           static_local.cpp: static_total         __gpu_local[64] + barrier
localmem_static_wait.cpp      static_local.cpp: static_total_after.. barrier, then a long loop
global.cpp                    globals.cpp: fill_table, read_table    a global shared by launches
global_ctor.cpp               globals.cpp: read_seeded               constructors by priority
global_dtor.cpp               globals.cpp: unload_marker             a destructor at unload
sequence.cpp                  sequence.cpp: fibonacci_step           launches in queue order
gridsize.cpp                  grid.cpp: shape                        3-D grid seen from inside
single_counter.cpp            grid.cpp: counted                      one item's counter loop
============================  =====================================  ============================

All of them run on the host device (every one needs no GPU-only feature). On the CUDA and HIP
driver stand-ins (test doubles that cannot execute PTX or AMDGPU machine code) each PTX and code
object is loaded by the plugin, every kernel is found by its symbol and launched with the blob
its compiled signature packs, and a Python body standing in for the kernel checks that blob and
does the kernel's work on the stand-in's memory.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import offloadrt
from offloadrt import OffloadError
from offloadrt.compile import _clang, _portable
from offloadrt.compile._types import Compiled, Target
from offloadrt.core import _runtime

KERNELS = Path(__file__).parent / "kernels" / "portable"
SOURCES = ("ids", "arguments", "dynamic_local", "static_local", "globals", "sequence", "grid")
TARGETS = {"host": Target("host"), "cuda": Target("cuda", "sm_90"), "amdgpu": Target("amdgpu", "gfx90a")}


def _missing(lld: bool) -> str:
    try:
        clang = _clang.clang()
        if lld:
            _clang.lld(clang)
    except OffloadError as exc:
        return exc.details
    return ""


pytestmark = pytest.mark.skipif(bool(_missing(False)), reason=f"needs clang >= 20: {_missing(False)}")


@pytest.fixture(scope="module")
def images() -> dict[tuple[str, str], Compiled | str]:
    """Every source built for every target (in parallel); a string says why a build is missing."""
    jobs = [(name, kind) for name in SOURCES for kind in TARGETS
            if kind != "amdgpu" or not _missing(True)]
    with ThreadPoolExecutor(4) as pool:
        built = pool.map(lambda job: _portable.compile_portable(
            (KERNELS / f"{job[0]}.cpp").read_text(), [], "gpu-c++", TARGETS[job[1]]), jobs)
        found: dict[tuple[str, str], Compiled | str] = dict(zip(jobs, built))
    for name in SOURCES:
        found.setdefault((name, "amdgpu"), f"needs ld.lld: {_missing(True)}")
    return found


def image(images: dict[tuple[str, str], Compiled | str], name: str, kind: str) -> Compiled:
    found = images[(name, kind)]
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(autouse=True, scope="module")
def layer() -> Iterator[None]:
    _runtime.shutdown()
    yield
    _runtime.shutdown()


# ---- on the host device ----------------------------------------------------------------------------

@pytest.fixture
def host() -> offloadrt.Device:
    return offloadrt.device("host")


def load(host: offloadrt.Device, images: dict[tuple[str, str], Compiled | str], name: str) -> offloadrt.Program:
    return offloadrt.Program._from_compiled(host, image(images, name, "host"))


def zeros(device: offloadrt.Device, count: int, dtype: Any = np.uint32) -> offloadrt.Array:
    return offloadrt.asarray(np.zeros(count, dtype), device)


def test_ids(host: offloadrt.Device, images: Any) -> None:
    program = load(host, images, "ids")
    out, plus = zeros(host, 64), zeros(host, 64, np.int32)
    with host.queue() as queue:
        queue.launch(program.kernel("ids"), 1, 64, out)
        queue.launch(program.kernel("ids_plus_one"), 1, 64, plus)
    assert (out.numpy() == np.arange(64)).all() and (plus.numpy() == np.arange(64) + 1).all()


def test_arguments(host: offloadrt.Device, images: Any) -> None:
    program = load(host, images, "arguments")
    where, out, held = zeros(host, 1, np.int32), zeros(host, 64), zeros(host, 64)
    by_value, through = program.kernel("by_value"), program.kernel("through_struct")
    pair_type, holder_type = by_value.signature[1], through.signature[0]
    with host.queue() as queue:
        queue.launch(program.kernel("nothing"), 1, 1)
        queue.launch(program.kernel("one_byte"), 1, 1, 42)
        queue.launch(program.kernel("mixed"), 1, 1, 5, where, -2)
        queue.launch(by_value, 1, 64, 100, pair_type(first=20, second=3), out)
        queue.launch(through, 1, 64, holder_type(target=held.buffer.ptr))
    assert where.numpy()[0] == 3
    assert (out.numpy() == 123 + np.arange(64)).all() and (held.numpy() == 3 * np.arange(64)).all()


def test_dynamic_local_memory(host: offloadrt.Device, images: Any) -> None:
    program = load(host, images, "dynamic_local")
    out, totals = zeros(host, 128), zeros(host, 4)
    with host.queue() as queue:
        queue.launch(program.kernel("doubled_through_local"), 2, 64, out, shared_mem=64 * 4)
        queue.launch(program.kernel("group_total"), 4, 64, totals, shared_mem=64 * 4)
    assert (out.numpy() == 2 * (np.arange(128) % 64)).all() and (totals.numpy() == 128).all()


def test_static_local_memory(host: offloadrt.Device, images: Any) -> None:
    program = load(host, images, "static_local")
    totals, waited = zeros(host, 4), zeros(host, 4)
    rounds = 20_000
    with host.queue() as queue:
        queue.launch(program.kernel("static_total"), 4, 64, totals)
        queue.launch(program.kernel("static_total_after_work"), 4, 64, waited, rounds)
    product = ctypes.c_int32(int(np.prod(np.arange(1, 30, dtype=object)) % 2**64)).value  # int of 29!
    spent = (product % 2**64 * rounds) % 2**64
    assert (totals.numpy() == 128).all() and (waited.numpy() == (spent + 128) % 2**32).all()


def test_globals_and_constructors(host: offloadrt.Device, images: Any) -> None:
    program = load(host, images, "globals")
    table, seeded = zeros(host, 64), zeros(host, 64)
    with host.queue() as queue:
        queue.launch(program.kernel("fill_table"), 1, 64)
        queue.launch(program.kernel("read_table"), 1, 64, table)
        queue.launch(program.kernel("read_seeded"), 1, 64, seeded)
        queue.launch(program.kernel("unload_marker"), 1, 1)
    assert (table.numpy() == 2 * np.arange(64)).all()
    assert (seeded.numpy() == 100 + np.arange(64)).all()  # (40 * 2) + 20, constructors in priority order
    memory = program.global_var("table")
    assert memory.nbytes == 64 * 4
    assert (np.frombuffer(ctypes.string_at(memory.ptr, 256), np.uint32) == 2 * np.arange(64)).all()


def test_sequence(host: offloadrt.Device, images: Any) -> None:
    program = load(host, images, "sequence")
    values = zeros(host, 24)
    with host.queue() as queue:
        for index in range(24):
            queue.launch(program.kernel("fibonacci_step"), 1, 1, index, values)
    fib = [0, 1]
    while len(fib) < 24:
        fib.append(fib[-1] + fib[-2])
    assert values.numpy().tolist() == fib


def test_grid(host: offloadrt.Device, images: Any) -> None:
    program = load(host, images, "grid")
    groups, items, start, out = zeros(host, 3), zeros(host, 3), offloadrt.asarray(np.array([5], np.uint32), host), \
        zeros(host, 1)
    with host.queue() as queue:
        queue.launch(program.kernel("shape"), (4, 3, 2), (5, 6, 7), groups, items)
        queue.launch(program.kernel("counted"), 1, 32, 1000, 3, start, out)
    assert groups.numpy().tolist() == [4, 3, 2] and items.numpy().tolist() == [5, 6, 7]
    assert out.numpy()[0] == 5 + 3000


# ---- on the driver stand-ins -----------------------------------------------------------------------

def _u32(address: int, count: int) -> Any:
    return (ctypes.c_uint32 * count).from_address(address)


def _ids(params: bytes, grid: Any, block: Any, shared: int, device: int) -> None:
    out = _u32(struct.unpack("<Q", params)[0], block[0])
    for i in range(block[0]):
        out[i] = i


def _by_value(params: bytes, grid: Any, block: Any, shared: int, device: int) -> None:
    base, first, second, address = struct.unpack("<B3xIIxxxxQ", params)
    out = _u32(address, block[0])
    for i in range(block[0]):
        out[i] = base + first + second + i


def _fibonacci_step(params: bytes, grid: Any, block: Any, shared: int, device: int) -> None:
    index, address = struct.unpack("<I4xQ", params)
    values = _u32(address, index + 1)
    values[index] = index if index < 2 else values[index - 1] + values[index - 2]


def _shape(params: bytes, grid: Any, block: Any, shared: int, device: int) -> None:
    groups, items = struct.unpack("<QQ", params)
    _u32(groups, 3)[:] = list(grid)
    _u32(items, 3)[:] = list(block)


STAND_IN_BODIES = {"ids": _ids, "by_value": _by_value, "fibonacci_step": _fibonacci_step, "shape": _shape}


@pytest.fixture(params=["cuda", "amdgpu"])
def gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[offloadrt.Device]:
    """A stand-in GPU of one backend."""
    import cuda_standin
    import hip_standin

    standin = cuda_standin if request.param == "cuda" else hip_standin
    _runtime.shutdown()
    standin.install(monkeypatch, devices=1)
    try:
        yield offloadrt.device(request.param)
    finally:
        try:
            _runtime.shutdown()
        finally:
            standin.shutdown()


@pytest.mark.parametrize("name", SOURCES)
def test_every_kernel_loads_and_launches_on_the_stand_ins(gpu: offloadrt.Device, images: Any, name: str) -> None:
    import cuda_standin
    import hip_standin

    standin = cuda_standin if gpu.backend == offloadrt.PlatformBackend.CUDA else hip_standin
    compiled = image(images, name, "cuda" if standin is cuda_standin else "amdgpu")
    seen: dict[str, bytes] = {}
    for kernel_name in compiled.kernels:
        body = STAND_IN_BODIES.get(kernel_name)

        def record(params: bytes, grid: Any, block: Any, shared: int, device: int, _name: str = kernel_name,
                   _body: Any = body) -> None:
            seen[_name] = bytes(params)
            if _body is not None:
                _body(params, grid, block, shared, device)
        standin.register_kernel(compiled.symbols.get(kernel_name, kernel_name), record)
    program = offloadrt.Program._from_compiled(gpu, compiled)
    buffers = [gpu.allocate(4096) for _ in range(4)]
    with gpu.queue() as queue:
        for kernel_name, signature in compiled.kernels.items():
            kernel = program.kernel(kernel_name)
            assert signature is not None and kernel.signature is not None
            args = [_argument(entry, buffers[index]) for index, entry in enumerate(signature)]
            queue.launch(kernel, (2, 1, 1), (8, 1, 1), *args)
    assert set(seen) == set(compiled.kernels)
    for kernel_name, signature in compiled.kernels.items():
        assert len(seen[kernel_name]) == _blob_size(signature), kernel_name
    if "ids" in compiled.kernels:
        out = np.zeros(1024, np.uint32)
        buffers[0].copy_to(out)
        assert (out[:8] == np.arange(8)).all()


def _argument(entry: Any, buffer: offloadrt.Buffer) -> Any:
    if entry == "ptr":
        return buffer
    if isinstance(entry, str):
        return 1
    made = entry()
    for field, kind in entry._fields_:
        setattr(made, field, buffer.ptr if kind is ctypes.c_void_p else 1)
    return made


def _blob_size(signature: tuple[Any, ...]) -> int:
    """The kernel's parameter buffer: C layout, ending where the last parameter ends (no tail padding)."""
    from offloadrt.compile._signature import size_and_alignment

    offset = 0
    for entry in signature:
        size, align = size_and_alignment(entry)
        offset = (offset + align - 1) // align * align + size
    return offset


def test_device_compile_on_a_stand_in_finds_cxx_kernels_by_source_name(
        gpu: offloadrt.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Device.compile picks the stand-in GPU's architecture; a C++-linkage kernel is found by its
    source name and launched under its mangled symbol."""
    import cuda_standin
    import hip_standin

    if gpu.backend == offloadrt.PlatformBackend.AMDGPU and _missing(True):
        pytest.skip(f"needs ld.lld: {_missing(True)}")
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(tmp_path))
    standin = cuda_standin if gpu.backend == offloadrt.PlatformBackend.CUDA else hip_standin
    source = ('#include <gpuintrin.h>\n#include <stdint.h>\n'
              '__gpu_kernel void fill(uint32_t *out, uint32_t value) { out[__gpu_thread_id_x()] = value; }\n')
    seen: list[bytes] = []
    standin.register_kernel("_Z4fillPjj", lambda params, grid, block, shared, device: seen.append(bytes(params)))
    kernel = gpu.compile(source, lang="gpu-c++").kernel("fill")
    assert kernel.signature == ("ptr", "uint32")
    out = gpu.allocate(64)
    with gpu.queue() as queue:
        queue.launch(kernel, 1, 16, out, 9)
    assert seen == [struct.pack("<QI", out.ptr, 9)]  # the parameters, no tail padding


# ---- NVIDIA's own PTX assembler ----------------------------------------------------------------------

def _nvjitlink() -> Any:
    """cuda.bindings' nvJitLink, or a skip saying how to get it (the nvidia-nvjitlink wheel: it
    assembles PTX to a cubin with NVIDIA's ptxas, no GPU needed)."""
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.destroy(nvjitlink.create(1, ["-arch=sm_90"]))
    except Exception as exc:  # noqa: BLE001  # not installed, or its library not found
        pytest.skip(f"nvJitLink is not available ({type(exc).__name__}): pip install nvidia-nvjitlink")
    return nvjitlink


def _assemble(nvjitlink: Any, ptx: bytes, arch: str) -> int:
    handle = nvjitlink.create(1, [f"-arch={arch}"])
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), "kernel.ptx")
        nvjitlink.complete(handle)
        return int(nvjitlink.get_linked_cubin_size(handle))
    finally:
        nvjitlink.destroy(handle)


def test_the_ptx_assembles_with_nvidias_assembler(images: Any) -> None:
    """clang's PTX of every test kernel and example is accepted by NVIDIA's ptxas (inside nvJitLink),
    for the architecture it was built for and one it was not."""
    nvjitlink = _nvjitlink()
    sources = {name: image(images, name, "cuda").image for name in SOURCES}
    for path in [KERNELS / "features.c", *sorted((KERNELS.parent.parent.parent / "examples").glob("portable_*.c"))]:
        sources[path.name] = _portable.compile_portable(path.read_text(), [], "gpu-c", TARGETS["cuda"]).image
    sm80 = _portable.compile_portable((KERNELS / "features.c").read_text(), [], "gpu-c", Target("cuda", "sm_80"))
    for name, ptx in sources.items():
        assert _assemble(nvjitlink, ptx, "sm_90") > 0, name
    assert _assemble(nvjitlink, sm80.image, "sm_80") > 0


# ---- the AMDGPU kernel ABI ---------------------------------------------------------------------------

def _amdgpu_arguments(image_bytes: bytes, tmp_path: Path) -> dict[str, list[tuple[int, int]]]:
    """Each kernel's explicit arguments (offset, size) from the code object's AMDGPU metadata note,
    as ``llvm-readelf --notes`` prints it (skips without llvm-readelf)."""
    import re
    import shutil
    import subprocess

    major = _clang.clang().major
    readelf = shutil.which(f"llvm-readelf-{major}") or shutil.which("llvm-readelf")
    if readelf is None:
        pytest.skip(f"needs llvm-readelf (apt-get install llvm-{major})")
    path = tmp_path / "kernel.hsaco"
    path.write_bytes(image_bytes)
    text = subprocess.run([readelf, "--notes", str(path)], capture_output=True, text=True, check=True).stdout
    found: dict[str, list[tuple[int, int]]] = {}
    kernels = re.split(r"\n(?=amdhsa\.)", text.split("amdhsa.kernels:", 1)[1])[0]
    for entry in re.split(r"\n  - ", kernels)[1:]:
        name = re.search(r"^    \.name:\s+(\S+)", entry, re.MULTILINE)
        assert name is not None
        arguments = re.findall(r"\.offset:\s+(\d+)\s+\.size:\s+(\d+)\s+\.value_kind:\s+(\w+)", entry)
        found[name.group(1)] = [(int(offset), int(size)) for offset, size, kind in arguments
                                if not kind.startswith("hidden_")]
    return found


@pytest.mark.parametrize("name", SOURCES)
def test_amdgpu_argument_layout_is_the_blob_the_signature_packs(images: Any, name: str, tmp_path: Path) -> None:
    """The AMDGPU ABI's offsets and sizes of each kernel's arguments (the code object's metadata)
    are those of the argument blob that the compiled signature packs."""
    from offloadrt.compile._signature import size_and_alignment

    compiled = image(images, name, "amdgpu")
    metadata = _amdgpu_arguments(compiled.image, tmp_path)
    for kernel, signature in compiled.kernels.items():
        assert signature is not None
        layout, offset = [], 0
        for entry in signature:
            size, align = size_and_alignment(entry)
            offset = (offset + align - 1) // align * align
            layout.append((offset, size))
            offset += size
        assert metadata[compiled.symbols.get(kernel, kernel)] == layout, kernel
