"""The CUDA part of the GPU plugins' test helpers: images the CUDA stand-in loads, and the real bindings.

Program images (PTX text, a header-only cubin, a fatbin), views of the driver calls the plugin
made (``cuda_standin.calls``), the runtime on stand-in GPUs bound to the CUDA platform, and the
replay of recorded calls against the real ``cuda.bindings.driver``. What every vendor shares is
in ``gpu_fixtures``; the CUDA row of the shared suite's vendor table is in
``tests/gpu_plugins/vendors.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from typing import Any

import cuda_standin as standin
import gpu_fixtures
import pytest
from gpu_fixtures import KERNELS, CallLog, Runtime, kernel_params

from offloadrt import PlatformBackend, api
from offloadrt.plugins.cuda.plugin import CudaDevice

CUresult = standin.driver.CUresult
LAUNCH_BOUNDS = {"small": 128}  # .maxntid of the test program's kernels


_PTX_TYPES = {1: ".u8", 2: ".u16", 4: ".u32", 8: ".u64"}


def _ptx_params(name: str) -> str:
    """The ``.param`` list of test kernel ``name`` (its parameters: ``gpu_fixtures.kernel_params``)."""
    declarations = []
    for index, (size, align) in enumerate(kernel_params(name)):
        if size == align and size in _PTX_TYPES:
            declarations.append(f".param {_PTX_TYPES[size]} {name}_param_{index}")
        else:
            declarations.append(f".param .align {align} .b8 {name}_param_{index}[{size}]")
    return ", ".join(declarations)


def ptx(target: str = "sm_90", kernels: Sequence[str] = KERNELS) -> bytes:
    """PTX for ``.target`` with ``kernels`` (parameters from ``gpu_fixtures.kernel_params``) and the
    globals ``counter`` (7) and ``table`` (24 bytes); the tests give the kernels Python bodies with
    ``standin.register_kernel``."""
    entries = "".join(f"\n.visible .entry {name}({_ptx_params(name)})\n"
                      + (f".maxntid {LAUNCH_BOUNDS[name]}, 1, 1\n" if name in LAUNCH_BOUNDS else "")
                      + "{\n    ret;\n}\n" for name in kernels)
    return (f"\n.version 8.0\n.target {target}\n.address_size 64\n\n"
            f".visible .global .align 4 .u32 counter = {gpu_fixtures.COUNTER};\n"
            f".visible .global .align 8 .b8 table[{gpu_fixtures.TABLE_SIZE}];\n" + entries).encode()


PTX = ptx()


def cubin(sm: int = 90, machine: int = 190) -> bytes:
    """A header-only 64-bit little-endian ELF: ``e_machine`` 190 (EM_CUDA), the SM in ``e_flags``.

    The stand-in takes its kernel and global names from ``standin.set_binary_symbols``.
    """
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0, 0, 0, sm, 64, 0, 0, 0, 0, 0)
    image = ident + header
    assert len(image) == 64
    return image


def fatbin() -> bytes:
    """A fatbin container: magic 0xBA55ED50, version, header size 16, an 8-byte body."""
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 8) + bytes(8)


def program(device: api.Device, image: bytes | bytearray = PTX) -> api.Program:
    return api.olCreateProgram(device, image)


def cuda_device(device: api.Device) -> CudaDevice:
    """The plugin's device behind a handle (for white-box checks)."""
    gdev = device._gdev
    assert isinstance(gdev, CudaDevice)
    return gdev


# ---- the driver calls the plugin made, and a runtime on stand-in GPUs ------------------------------

log = CallLog(standin)
call_names, count, calls_of = log.names, log.count, log.of


@contextmanager
def stand_in_runtime(monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> Iterator[Runtime]:
    """The CUDA stand-in installed (``reset_args`` as for ``cuda_standin.install``), then ``olInit``
    of the CUDA platform; see :func:`gpu_fixtures.stand_in_runtime`."""
    with gpu_fixtures.stand_in_runtime(standin, PlatformBackend.CUDA, monkeypatch, **reset_args) as runtime:
        yield runtime


# ---- the calls against the real bindings -----------------------------------------------------------

def to_real(value: Any, real: Any) -> Any:
    """A stand-in look-alike handle or enum as the real bindings' type of the same name."""
    if isinstance(value, (list, tuple)):
        return type(value)(to_real(v, real) for v in value)
    kind = type(value)
    if kind.__module__.startswith("cuda_standin"):
        target = getattr(real, kind.__name__)
        return target(int(value)) if not isinstance(value, Enum) else target(value.value)
    return value


def _real_bindings() -> tuple[Any, type[Exception]]:
    """The real ``cuda.bindings.driver`` and its missing-libcuda error (skips where there is none).

    Where libcuda loads (a GPU machine) the replay would hand stand-in pointers and handles to a
    real driver, so it is skipped there; tests/test_cuda_gpu.py makes the real calls instead.
    """
    real = standin._types.real
    if real is None:
        pytest.skip("the real cuda-bindings (cuda.bindings.driver) is not importable: nothing to check against")
    from cuda.pathfinder import DynamicLibNotFoundError  # type: ignore[import-untyped]

    try:
        real.cuDriverGetVersion()
    except DynamicLibNotFoundError:
        return real, DynamicLibNotFoundError
    pytest.skip("libcuda is present: replaying stand-in pointers against a real driver is unsafe "
                "(tests/test_cuda_gpu.py covers the real calls)")


Refusal = tuple[str, tuple[Any, ...], BaseException]


def replay_against_real(calls: Iterable[tuple[str, tuple[Any, ...]]]) -> list[Refusal]:
    """Replay ``calls`` (``(name, args)``, as recorded in ``cuda_standin.calls``) against the real
    bindings; return ``(name, args, exception)`` for each call whose arguments they refused. The
    bindings convert every argument before they load libcuda, so a missing libcuda means the
    arguments were accepted. Skips where the bindings are missing or libcuda loads."""
    real, lib_not_found = _real_bindings()
    # The assumption behind the replay: the bindings convert every argument before loading libcuda.
    with pytest.raises(TypeError):
        real.cuMemAlloc("sixty-four bytes")
    with pytest.raises(TypeError):
        real.cuStreamSynchronize(object())
    with pytest.raises(lib_not_found):
        real.cuMemAlloc(64)
    refused: list[Refusal] = []
    for name, args in calls:
        converted = to_real(args, real)
        try:
            getattr(real, name)(*converted)
        except lib_not_found:
            continue  # argument conversion passed; only the missing libcuda failed
        except Exception as exc:  # noqa: BLE001  # TypeError, ValueError, OverflowError: a wrong argument
            refused.append((name, tuple(type(a).__name__ for a in converted), exc))
            continue
        refused.append((name, args, AssertionError("returned without loading libcuda")))
    return refused
