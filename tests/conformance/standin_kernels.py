"""TEST DOUBLES of the conformance suite's GPU kernels (``device_code/cuda/*.cu``), for the driver stand-ins.

No GPU runs in CI, so ``--standin hip`` / ``--standin cuda`` (see conftest.py) runs the suite on
tests/hip_standin or tests/cuda_standin, whose kernels are Python bodies registered by name. This
module holds one body per kernel of every ``.cu`` file, doing what the CUDA C does for every
thread of every block: it reads the launch's argument blob as the C ABI lays the parameters out
(natural alignment, a ``ctypes.Structure`` per kernel), reads and writes device memory through
ctypes (the stand-ins' memory is real host memory), keeps ``__shared__`` memory per block, and
runs the code after a ``__syncthreads()`` only once every thread of the block has reached it.
An access outside every allocation of the stand-in (or outside the block's shared memory) is a
kernel fault with the driver's illegal-address code, as on a GPU, never a stray host write.

It also builds the images the stand-ins load in place of hiprtc/NVRTC output: an AMDGPU code
object (``hip_standin.images.code_object``, with a metadata note giving each kernel's explicit
arguments, as clang writes it) or PTX text declaring each kernel with its parameters, and each
module-scope variable. The stand-ins hand a body the parameters up to the end of the last one
(the size a launch must pass, without the struct's tail padding); the body pads that to its
``ctypes.Structure``. Every image carries one more global,
``__standin_source`` (the ``.cu`` file's name), so that a body can tell which module it runs
in: bodies are registered by kernel name, and two sources define ``foo``; ``write``/``read``
reach their module's ``global`` through it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

from offloadrt import PlatformBackend

SOURCE_MARKER = "__standin_source"  # the global naming the .cu file an image was built from
ILLEGAL_ADDRESS = 700  # CUDA_ERROR_ILLEGAL_ADDRESS and hipErrorIllegalAddress alike
U32 = 0xFFFFFFFF

# ---- what a body sees ------------------------------------------------------------------------------


class Dim3(tuple[int, int, int]):
    """``dim3``: blockIdx, threadIdx, blockDim or gridDim."""

    @property
    def x(self) -> int:
        return self[0]


class Fault(Exception):  # noqa: N818  # raised as the stand-in's KernelFault by the launcher
    """An access a GPU would fault on."""


class DeviceMemory:
    """Loads and stores of 32-bit words at device addresses, each checked against the stand-in's
    allocations (device, host, managed memory and module globals of every device: one address space)."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def _checked(self, address: int, size: int) -> int:
        with self._state.lock:
            if not address or self._state.find_locked(address, size) is None:
                raise Fault(f"{size}-byte access at {address:#x}, outside every allocation")
        return address

    def load_u32(self, address: int) -> int:
        return ctypes.c_uint32.from_address(self._checked(address, 4)).value

    def store_u32(self, address: int, value: int) -> None:
        ctypes.c_uint32.from_address(self._checked(address, 4)).value = value & U32

    def store_i32(self, address: int, value: int) -> None:
        ctypes.c_int32.from_address(self._checked(address, 4)).value = value


class SharedMemory:
    """One block's ``__shared__`` array of 32-bit words (``size`` bytes)."""

    def __init__(self, size: int) -> None:
        self.words = [0] * (size // 4)

    def _index(self, index: int) -> int:
        if not 0 <= index < len(self.words):
            raise Fault(f"shared memory word {index} outside the block's {len(self.words) * 4} bytes")
        return index

    def __getitem__(self, index: int) -> int:
        return self.words[self._index(index)]

    def __setitem__(self, index: int, value: int) -> None:
        self.words[self._index(index)] = value & U32


@dataclass
class Launch:
    """One launch as a body sees it: its arguments, sizes, memory and the module it runs in."""

    args: Any  # the kernel's parameter Structure, read from the blob (None: no parameters)
    grid: Dim3
    block: Dim3
    shared_mem: int  # dynamic shared memory per block, in bytes
    mem: DeviceMemory
    module: Any  # the stand-in's Module: its globals are Allocations

    def blocks(self) -> Iterator[Dim3]:
        """Every blockIdx of the grid."""
        return _indices(self.grid)

    def threads(self) -> Iterator[Dim3]:
        """Every threadIdx of a block."""
        return _indices(self.block)

    def global_address(self, name: str) -> int:
        return int(self.module.globals[name].ptr)


def _indices(dims: Dim3) -> Iterator[Dim3]:
    for z in range(dims[2]):
        for y in range(dims[1]):
            for x in range(dims[0]):
                yield Dim3((x, y, z))


# ---- the kernels: device_code/cuda/<source>.cu --------------------------------------------------------

class _Out(ctypes.Structure):
    _fields_ = [("out", ctypes.c_void_p)]


class _FooPair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint), ("b", ctypes.c_uint)]


class _Composite(ctypes.Structure):
    _fields_ = [("n", ctypes.c_ubyte), ("f", _FooPair), ("out", ctypes.c_void_p)]


class _Byte(ctypes.Structure):
    _fields_ = [("c", ctypes.c_ubyte)]


class _MultiArgs(ctypes.Structure):
    _fields_ = [("a", ctypes.c_byte), ("b", ctypes.c_void_p), ("c", ctypes.c_short)]  # char is signed here


class _Sequence(ctypes.Structure):
    _fields_ = [("idx", ctypes.c_uint), ("inout", ctypes.c_void_p)]


class _SingleCounter(ctypes.Structure):
    _fields_ = [("init_loop", ctypes.c_int), ("addend", ctypes.c_int),
                ("init_val", ctypes.c_void_p), ("out", ctypes.c_void_p)]


def _pointer(value: int | None) -> int:
    return value or 0


def foo(k: Launch) -> None:
    """foo.cu: ``out[threadIdx.x] = threadIdx.x``."""
    out = _pointer(k.args.out)
    for _ in k.blocks():
        for t in k.threads():
            k.mem.store_u32(out + 4 * t.x, t.x)


def bar_foo(k: Launch) -> None:
    """bar.cu's foo: ``out[threadIdx.x] = threadIdx.x + 1``."""
    out = _pointer(k.args.out)
    for _ in k.blocks():
        for t in k.threads():
            k.mem.store_u32(out + 4 * t.x, t.x + 1)


def byte(k: Launch) -> None:
    """byte.cu: takes one ``unsigned char`` and does nothing with it."""


def composite(k: Launch) -> None:
    """composite.cu: ``out[threadIdx.x] = n + f.a + f.b + threadIdx.x`` (unsigned arithmetic)."""
    n, a, b, out = k.args.n, k.args.f.a, k.args.f.b, _pointer(k.args.out)
    for _ in k.blocks():
        for t in k.threads():
            k.mem.store_u32(out + 4 * t.x, n + a + b + t.x)


def write(k: Launch) -> None:
    """global.cu: ``global[threadIdx.x] = threadIdx.x * 2``."""
    base = k.global_address("global")
    for _ in k.blocks():
        for t in k.threads():
            k.mem.store_u32(base + 4 * t.x, t.x * 2)


def read(k: Launch) -> None:
    """global.cu: ``out[threadIdx.x + blockDim.x * blockIdx.x] = global[threadIdx.x]``."""
    base, out = k.global_address("global"), _pointer(k.args.out)
    for b in k.blocks():
        for t in k.threads():
            k.mem.store_u32(out + 4 * (t.x + k.block.x * b.x), k.mem.load_u32(base + 4 * t.x))


def localmem(k: Launch) -> None:
    """localmem.cu: each thread stores ``threadIdx.x * 2`` in dynamic shared memory and copies it out."""
    out = _pointer(k.args.out)
    for b in k.blocks():
        shared = SharedMemory(k.shared_mem)
        for t in k.threads():
            shared[t.x] = t.x * 2
            k.mem.store_u32(out + 4 * (t.x + k.block.x * b.x), shared[t.x])


def _reduce(k: Launch, shared_size: int) -> None:
    """localmem_reduction.cu / localmem_static.cu: every thread stores 2 in shared memory;
    after ``__syncthreads()`` thread x == 0 stores the sum of ``shared[0 .. blockDim.x)`` in ``out[blockIdx.x]``."""
    out = _pointer(k.args.out)
    for b in k.blocks():
        shared = SharedMemory(shared_size)
        for t in k.threads():
            shared[t.x] = 2
        # __syncthreads()
        for t in k.threads():
            if t.x == 0:
                total = sum(shared[i] for i in range(k.block.x))
                k.mem.store_u32(out + 4 * b.x, total)


def localmem_reduction(k: Launch) -> None:
    _reduce(k, k.shared_mem)  # extern __shared__: the launch's dynamic shared memory


def localmem_static(k: Launch) -> None:
    _reduce(k, 64 * 4)  # __shared__ unsigned int shared_mem[64]


def multiargs(k: Launch) -> None:
    """multiargs.cu: ``b[threadIdx.x] = a + c + (int)threadIdx.x``."""
    a, b, c = k.args.a, _pointer(k.args.b), k.args.c
    for _ in k.blocks():
        for t in k.threads():
            k.mem.store_i32(b + 4 * t.x, a + c + t.x)


def noargs(k: Launch) -> None:
    """noargs.cu: an empty kernel."""


def sequence(k: Launch) -> None:
    """sequence.cu: ``inout[idx] = idx == 0 ? 0 : idx == 1 ? 1 : inout[idx - 1] + inout[idx - 2]``."""
    idx, inout = k.args.idx, _pointer(k.args.inout)
    for _ in k.blocks():
        for _ in k.threads():
            value = idx if idx < 2 else k.mem.load_u32(inout + 4 * (idx - 1)) + k.mem.load_u32(inout + 4 * (idx - 2))
            k.mem.store_u32(inout + 4 * idx, value)


# The loop's running time on a GPU, scaled down: long enough that reading the result too early
# (a sync that does not wait for the kernel) shows.
SINGLE_COUNTER_TIME = 0.002


def single_counter(k: Launch) -> None:
    """single_counter.cu: thread x == 0 adds ``addend`` to ``*init_val`` ``init_loop`` times, stores it in ``*out``."""
    args = k.args
    init_val, out = _pointer(args.init_val), _pointer(args.out)
    for _ in k.blocks():
        for t in k.threads():
            if t.x != 0:
                continue
            value = k.mem.load_u32(init_val)
            value += args.addend * max(0, args.init_loop)  # unsigned wrap-around, as the loop's
            time.sleep(SINGLE_COUNTER_TIME)
            k.mem.store_u32(out, value)


@dataclass(frozen=True)
class Kernel:
    body: Callable[[Launch], None]
    params: type[ctypes.Structure] | None = None  # the parameter list; None: no parameters


@dataclass(frozen=True)
class Source:
    """One ``device_code/cuda/<name>.cu``: its kernels and module-scope variables (name → size)."""

    kernels: dict[str, Kernel]
    globals: dict[str, int] = field(default_factory=dict)


SOURCES: dict[str, Source] = {
    "foo": Source({"foo": Kernel(foo, _Out)}),
    "bar": Source({"foo": Kernel(bar_foo, _Out)}),
    "byte": Source({"byte": Kernel(byte, _Byte)}),
    "composite": Source({"composite": Kernel(composite, _Composite)}),
    "global": Source({"write": Kernel(write), "read": Kernel(read, _Out)}, {"global": 64 * 4}),
    "localmem": Source({"localmem": Kernel(localmem, _Out)}),
    "localmem_reduction": Source({"localmem_reduction": Kernel(localmem_reduction, _Out)}),
    "localmem_static": Source({"localmem_static": Kernel(localmem_static, _Out)}),
    "multiargs": Source({"multiargs": Kernel(multiargs, _MultiArgs)}),
    "noargs": Source({"noargs": Kernel(noargs)}),
    "sequence": Source({"sequence": Kernel(sequence, _Sequence)}),
    "single_counter": Source({"single_counter": Kernel(single_counter, _SingleCounter)}),
}


# ---- images ----------------------------------------------------------------------------------------

def code_object(source: str, arch: str) -> bytes:
    """``source``'s kernels and globals as an AMDGPU code object for ``arch`` (the device's gcnArchName)."""
    from hip_standin import images  # noqa: PLC0415  (tests/ is on sys.path; only with --standin hip)

    found = SOURCES[source]
    return images.code_object(arch, kernels=list(found.kernels),
                              globals={**found.globals, SOURCE_MARKER: source.encode()},
                              args={name: _param_sizes(kernel.params) for name, kernel in found.kernels.items()})


_PTX_TYPES = {ctypes.c_void_p: ".u64", ctypes.c_ubyte: ".u8", ctypes.c_byte: ".u8", ctypes.c_short: ".u16",
              ctypes.c_uint: ".u32", ctypes.c_int: ".u32"}


def _field_types(params: type[ctypes.Structure]) -> list[Any]:
    return [spec[1] for spec in params._fields_]


def _ptx_params(name: str, params: type[ctypes.Structure] | None) -> str:
    """The ``.param`` list NVRTC declares: scalars by type, a struct by value as aligned bytes."""
    if params is None:
        return ""
    declarations = []
    for index, kind in enumerate(_field_types(params)):
        if issubclass(kind, ctypes.Structure):
            declarations.append(f".param .align {ctypes.alignment(kind)} .b8 {name}_param_{index}"
                                f"[{ctypes.sizeof(kind)}]")
        else:
            declarations.append(f".param {_PTX_TYPES[kind]} {name}_param_{index}")
    return "\n\t" + ",\n\t".join(declarations) + "\n"


def ptx(source: str) -> bytes:
    """``source``'s kernels and globals as NUL-terminated PTX text (what NVRTC would hand over)."""
    found = SOURCES[source]
    marker = source.encode()
    lines = [f"// {source}.cu as the CUDA stand-in reads it (TEST DOUBLE: no real code)",
             ".version 8.0", ".target sm_75", ".address_size 64", ""]
    lines += [f".visible .global .align 4 .b8 {name}[{size}];" for name, size in found.globals.items()]
    lines.append(f".visible .global .align 1 .b8 {SOURCE_MARKER}[{len(marker)}] = "
                 f"{{{', '.join(str(c) for c in marker)}}};")
    for name, kernel in found.kernels.items():
        lines += ["", f".visible .entry {name}({_ptx_params(name, kernel.params)})", "{", "\tret;", "}"]
    return ("\n".join(lines) + "\n").encode() + b"\0"


# ---- running the bodies ----------------------------------------------------------------------------

def _source_of(module: Any) -> str | None:
    marker = module.globals.get(SOURCE_MARKER)
    return None if marker is None else ctypes.string_at(marker.ptr, marker.size).decode()


def _module_running(state: Any, kernel: str, device: int) -> tuple[Any, str]:
    """The module whose ``kernel`` the launch runs: the only loaded stand-in module of the device
    that has it. Two would be ambiguous (bodies are registered by name): that fails the launch."""
    with state.lock:
        modules = [m for m in state.modules.values()
                   if not m.unloaded and m.ctx.device.ordinal == device and kernel in m.functions]
    found = [(m, source) for m in modules if (source := _source_of(m)) in SOURCES]
    if len(found) != 1:
        raise RuntimeError(f"stand-in kernel {kernel!r} on device {device}: {len(found)} loaded conformance "
                           f"modules define it, the body needs exactly one")
    return found[0]


def _dispatcher(package: ModuleType, kernel: str) -> Callable[[bytes, tuple[int, int, int],
                                                              tuple[int, int, int], int, int], None]:
    def run(params: bytes, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
            device: int) -> None:
        state = package.state()
        module, source = _module_running(state, kernel, device)
        impl = SOURCES[source].kernels[kernel]
        # The stand-ins pass the parameters up to the end of the last one; the struct has tail
        # padding after it, which no parameter occupies. A blob shorter than the parameters
        # (the stand-in's own layout unknown) fails from_buffer_copy: a launch failure.
        args = None if impl.params is None else impl.params.from_buffer_copy(
            params + bytes(max(0, ctypes.sizeof(impl.params) - len(params))) if len(params) >= _end(impl.params)
            else params)
        try:
            impl.body(Launch(args, Dim3(grid), Dim3(block), shared_mem, DeviceMemory(state), module))
        except Fault as fault:
            raise package.KernelFault(ILLEGAL_ADDRESS, f"{source}.cu {kernel}: {fault}") from None

    return run


def _end(params: type[ctypes.Structure]) -> int:
    """Where the last parameter of ``params`` ends (the parameter buffer's size, no tail padding)."""
    field_info = getattr(params, params._fields_[-1][0])
    return int(field_info.offset + field_info.size)


def _param_sizes(params: type[ctypes.Structure] | None) -> list[tuple[int, int]]:
    return [] if params is None else [(ctypes.sizeof(kind), ctypes.alignment(kind)) for kind in _field_types(params)]


BACKENDS = {"hip": PlatformBackend.AMDGPU, "cuda": PlatformBackend.CUDA}


@contextlib.contextmanager
def installed(name: str, devices: int = 2) -> Iterator[ModuleType]:
    """The ``name`` stand-in ("hip" or "cuda") installed with ``devices`` GPUs and every kernel of
    :data:`SOURCES` registered, until the context ends (then its threads stop, its memory is freed
    and the real modules are back)."""
    package = importlib.import_module(f"{name}_standin")
    with pytest.MonkeyPatch.context() as monkeypatch:
        package.install(monkeypatch, devices=devices)
        try:
            for kernel in {k for source in SOURCES.values() for k in source.kernels}:
                layouts = {tuple(_param_sizes(s.kernels[kernel].params)) for s in SOURCES.values()
                           if kernel in s.kernels}
                package.register_kernel(kernel, _dispatcher(package, kernel),
                                        param_sizes=list(layouts.pop()) if len(layouts) == 1 else None)
            yield package
        finally:
            package.shutdown()


def image(name: str, source: str, arch: str) -> bytes:
    """``source`` built for stand-in ``name``'s device (``arch``: its gcnArchName, for HIP)."""
    return code_object(source, arch) if name == "hip" else ptx(source)
