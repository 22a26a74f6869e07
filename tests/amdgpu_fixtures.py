"""Helpers for the AMDGPU plugin's CI tests (tests/test_amdgpu_plugin.py) on the HIP stand-in.

Program images the stand-in loads (AMDGPU code objects and offload bundles built by
``hip_standin.images``), a runtime on stand-in AMD GPUs with a guaranteed teardown, views of the
HIP calls the plugin made (``hip_standin.calls``), and the workload and helpers of the check
against the real hip-python. Helpers that are not vendor-specific (gates that hold a queue,
bounded calls on a brand-new thread, host buffers, launch sizes, kernel recorders) are
cuda_fixtures'.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

import hip_standin as standin
import pytest
from cuda_fixtures import Runtime as GpuRuntime
from cuda_fixtures import (
    exercise_kernels_events_and_teardown,
    host_buffer,
    in_new_thread,
    shut_down_fully,
)
from hip_standin import KernelFault, images

from offloadrt import (
    AllocType,
    OffloadError,
    PlatformBackend,
    SymbolKind,
    api,
)
from offloadrt.plugins.amdgpu import driver as hip_driver
from offloadrt.plugins.amdgpu import plugin as amdgpu
from offloadrt.plugins.amdgpu.plugin import AmdGpuDevice
from offloadrt.types import DeviceInfo, PlatformInfo

hipError_t = standin.hip.hipError_t  # noqa: N816  # hip-python's name
KERNEL, GLOBAL = SymbolKind.KERNEL, SymbolKind.GLOBAL_VARIABLE

# Kernels of the test programs; the tests give them Python bodies with standin.register_kernel
# (before loading: modules pick up a kernel's launch bound when they are loaded).
KERNELS = ("record", "other", "small", "boom")
COUNTER = 7  # the initial value of the global "counter" (a uint32)
TABLE_SIZE = 24  # the zero-initialised global "table"


def code_object(arch: str = "gfx90a", **features: Any) -> bytes:
    """A code object for ``arch`` with :data:`KERNELS` and the globals ``counter`` and ``table``."""
    return images.code_object(arch, kernels=KERNELS, globals={"counter": struct.pack("<I", COUNTER),
                                                              "table": TABLE_SIZE}, **features)


def bundle(*targets: str) -> bytes:
    """An offload bundle: a host entry and a :func:`code_object` per target ID (``gfx90a:xnack-``)."""
    entries = {images.HOST_TRIPLE: b""}
    for target in targets:
        entries[images.bundle_triple(target)] = code_object(target)
    return images.offload_bundle(entries)


def generic_code_object() -> bytes:
    """A code object for ``gfx9-generic`` (EF_AMDGPU_MACH 0x51), which runs on gfx900..gfx90c but
    not on the default gfx90a device."""
    image = bytearray(code_object())
    image[48] = 0x51  # the low byte of e_flags
    return bytes(image)


def newer_code_object() -> bytes:
    """A code object for a processor newer than offloadrt's table (EF_AMDGPU_MACH 0x49, gfx1250 in
    later LLVMs): the plugin leaves it to the driver, and the stand-in refuses it."""
    image = bytearray(code_object())
    image[48] = 0x49
    return bytes(image)


# ---- the HIP calls the plugin made ---------------------------------------------------------------

def call_names() -> list[str]:
    return [name for name, _ in list(standin.calls)]


def count(name: str) -> int:
    return call_names().count(name)


def calls_of(name: str) -> list[tuple[Any, ...]]:
    return [args for call, args in list(standin.calls) if call == name]


# ---- a runtime on stand-in AMD GPUs ------------------------------------------------------------

class Runtime(GpuRuntime):
    """An initialised runtime on the stand-in: its AMD GPUs, the host device, gates to open."""

    backend = PlatformBackend.AMDGPU


def backend(device: api.Device) -> PlatformBackend:
    platform = api.olGetDeviceInfo(device, DeviceInfo.PLATFORM)
    result: PlatformBackend = api.olGetPlatformInfo(platform, PlatformInfo.BACKEND)
    return result


@contextmanager
def stand_in_runtime(monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> Iterator[Runtime]:
    """The stand-in installed (``reset_args`` as for ``hip_standin.install``), then ``olInit`` of
    the AMDGPU platform (and the host); afterwards every gate is opened, the runtime shut down
    and the stand-in stopped."""
    standin.install(monkeypatch, **reset_args)
    runtime: Runtime | None = None
    try:
        api.olInit(platforms=[PlatformBackend.AMDGPU])
        runtime = Runtime()
        yield runtime
    finally:
        if runtime is not None:
            for gate in runtime.gates:
                gate.open()
        try:
            in_new_thread(shut_down_fully, timeout=30.0)  # drains every queue: bounded too
        finally:
            standin.shutdown()


def amd_device(device: api.Device) -> AmdGpuDevice:
    """The plugin's device behind a handle (for white-box checks)."""
    gdev = device._gdev
    assert isinstance(gdev, AmdGpuDevice)
    return gdev


def program(device: api.Device, image: bytes | bytearray | None = None) -> api.Program:
    return api.olCreateProgram(device, code_object() if image is None else image)


def faulting_kernel(code: Any) -> Callable[..., None]:
    """A kernel body that faults with hipError_t ``code`` (reported asynchronously, as on a GPU)."""

    def fault(*_: Any) -> None:
        raise KernelFault(code, "memory access fault")

    return fault


def wait_until_drained(queue: api.Queue) -> None:
    """Until the stand-in has run everything on ``queue``'s stream (a condition wait; asks the
    stand-in, not the plugin, so no fault is reported to the plugin on the way)."""
    state = standin.state()
    stream = state.streams[int(queue._ai.stream)]  # type: ignore[union-attr]
    with state.cv:
        assert state.cv.wait_for(lambda: not stream.ops, 10.0), "the stream never drained"


def wait_until_faulted(ordinal: int) -> None:
    """Until the stand-in's device ``ordinal`` has hit its sticky fault (a condition wait)."""
    state = standin.state()
    with state.cv:
        assert state.cv.wait_for(lambda: state.devices[ordinal].context.sticky is not None, 10.0)


# ---- the representative workload and the real hip-python ------------------------------------------

def representative_workload(runtime: Runtime) -> None:
    """Every HIP call the plugin can make, each kind of argument included; ends shut down."""
    gpu0, gpu1 = runtime.gpus
    standin.register_kernel("record", lambda *_: None)
    standin.register_kernel("boom", faulting_kernel(hipError_t.hipErrorLaunchOutOfResources))
    source, source_address = host_buffer(bytes(range(64)))
    queues = [api.olCreateQueue(gpu) for gpu in (gpu0, gpu0, gpu1)]
    pointers = {kind: api.olMemAlloc(gpu0, kind, 256) for kind in AllocType}
    other = api.olMemAlloc(gpu1, AllocType.DEVICE, 256)
    for queue in (None, queues[0]):
        api.olMemcpy(queue, pointers[AllocType.DEVICE], gpu0, source_address, runtime.host, 64)
        api.olMemcpy(queue, pointers[AllocType.MANAGED], gpu0, pointers[AllocType.DEVICE], gpu0, 64)
        api.olMemcpy(queue, other, gpu1, pointers[AllocType.DEVICE], gpu0, 64)
        api.olMemcpy(queue, source_address, runtime.host, pointers[AllocType.MANAGED], gpu0, 64)
        # Values at both ends of every C type: memsets of 1, 2 and 4 bytes, 2-D lanes of each width.
        for pattern in (b"\x00", b"\xff", b"\xff\xff", b"\x01\x00", b"\xff\xff\xff\xff", b"\x00\x00\x00\x80",
                        b"\x01\x02\x03", b"\xff" * 6, b"\xff" * 8, b"\x00\x00\x00\x80" * 4, bytes(range(1, 18))):
            api.olMemFill(queue, pointers[AllocType.DEVICE], pattern, len(pattern) * 4)
    api.olMemFill(None, pointers[AllocType.HOST] + 1, b"\x01\x02\x03\x04\x05\x06", 12)
    prog = program(gpu0)
    for image in (bundle("gfx90a:xnack-"), bytearray(code_object(xnack=False, sramecc=True))):
        api.olDestroyProgram(program(gpu0, image))
    for bad in (generic_code_object(), b"CCOB" + bytes(60)):  # the plugin lets the driver decide these
        with pytest.raises(OffloadError):
            program(gpu0, bad)
    exercise_kernels_events_and_teardown(runtime, prog, queues, lambda: [
        standin.inject(name, hipError_t.hipErrorOutOfMemory)
        for name in ("hipMalloc", "hipHostMalloc", "hipMallocManaged")])


def plugin_hip_calls() -> set[str]:
    """Every HIP function the plugin's source calls: ``DRIVER_CALLS``, the functions that name a
    status (``hip_driver.Driver``), and each ``<module>.hipX(...)`` call in the AMDGPU plugin's package
    (``d.hipMalloc(``, ``self.d.hipSetDevice(``, ``self.driver.module.hipInit(``);
    ``hipError_t(status)`` makes an enum member and is no HIP call."""
    package = Path(amdgpu.__file__).parent
    text = "".join(path.read_text() for path in sorted(package.glob("*.py")))
    direct = set(re.findall(r"\.(hip[A-Z]\w*)\(", text))
    functions = {name for name in direct if not isinstance(getattr(standin.hip, name, None), type)}
    naming = {hip_driver.Driver.name_function, hip_driver.Driver.explain_function}
    return functions | naming | set(AmdGpuDevice.DRIVER_CALLS.values())


def call_key(name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What makes two calls of ``name`` different for argument conversion: the types, and for
    integers their size and sign."""

    def describe(value: Any) -> Any:
        if isinstance(value, (bytes, bytearray)):
            return (type(value).__name__, len(value) > 0)
        if isinstance(value, (list, tuple)):
            return tuple(describe(v) for v in value)
        if isinstance(value, Enum):
            return (type(value).__name__, value.name)
        if isinstance(value, int) and not isinstance(value, bool):
            return ("int", value.bit_length(), value < 0)
        return (type(value).__qualname__,)

    return (name, describe(args))


def error_details(err: OffloadError) -> str:
    """An error's details and those of the errors it wraps (a queue error wraps its cause)."""
    parts = [err.details]
    cause = err.__cause__
    while isinstance(cause, OffloadError):
        parts.append(cause.details)
        cause = cause.__cause__
    return " / ".join(parts)

