"""Devices: ``offloadrt.devices()``, ``offloadrt.device()`` and :class:`Device`."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import api
from ..api.platform import unavailable_platforms
from ..errors import ErrorCode, OffloadError
from ..types import AllocType, DeviceInfo, DeviceType, PlatformBackend
from . import _program, _queue, _runtime
from ._errors import MissingKeyError, with_context

if TYPE_CHECKING:
    from ._memory import Buffer
    from ._pool import MemoryPool
    from ._program import Program
    from ._queue import Queue


class DeviceProperties(Mapping[DeviceInfo, Any]):
    """A device's properties, read-only: ``device.info[DeviceInfo.NAME]``.

    Values are read with ``olGetDeviceInfo`` on first access and kept. A property the backend
    cannot tell is missing: indexing it raises an ``OffloadError`` (``UNIMPLEMENTED``) that is also
    a ``KeyError``, ``.get`` returns the default, and iteration skips it.
    """

    def __init__(self, device: Device) -> None:
        self._device = device
        self._values: dict[DeviceInfo, Any] = {}
        self._missing: dict[DeviceInfo, OffloadError] = {}

    def __getitem__(self, prop: DeviceInfo) -> Any:
        try:
            return self._values[prop]
        except (KeyError, TypeError):
            pass
        if prop in self._missing:
            raise self._missing[prop]
        if not isinstance(prop, DeviceInfo):
            raise MissingKeyError(ErrorCode.INVALID_ENUMERATION,
                                  f"device properties are keyed by offloadrt.DeviceInfo members, got {prop!r}")
        self._device._runtime.check()
        try:
            value = api.olGetDeviceInfo(self._device.handle, prop)
        except OffloadError as exc:
            if exc.code not in (ErrorCode.UNIMPLEMENTED, ErrorCode.UNSUPPORTED):
                raise with_context(exc, f"reading {prop.name} of {self._device}") from exc
            missing = MissingKeyError(exc.code, f"{self._device} cannot tell {prop.name}: {exc.details}")
            self._missing[prop] = missing
            raise missing from exc
        self._values[prop] = value
        return value

    def __iter__(self) -> Iterator[DeviceInfo]:
        for prop in DeviceInfo:
            if prop in self:
                yield prop

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, prop: object) -> bool:
        try:
            self[prop]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __repr__(self) -> str:
        return f"<DeviceProperties of {self._device}: {len(self)} properties>"


class Device:
    """One device: a GPU, or the host CPU (``offloadrt.device("host")``).

    Get devices with :func:`offloadrt.devices` or :func:`offloadrt.device`; there is one object per
    device. ``name``, ``backend``, ``type`` and ``info`` describe it; ``allocate``, ``queue`` and
    ``load`` make buffers, queues and programs on it. ``handle`` is the ``ol*`` API's device.
    """

    def __init__(self, runtime: _runtime.Runtime, handle: api.Device, backend: PlatformBackend, platform: str,
                 device_type: DeviceType, ordinal: int) -> None:
        self._runtime = runtime
        self.handle = handle
        self.backend = PlatformBackend(backend)
        self.type = DeviceType(device_type)
        self._platform = platform
        self._ordinal = ordinal
        self._label = f"{platform}:{ordinal}"
        self._pool: MemoryPool | None = None
        self._pool_lock = threading.Lock()  # guards the creation of _pool
        self.info: Mapping[DeviceInfo, Any] = DeviceProperties(self)

    @property
    def name(self) -> str:
        """The device's name (``DeviceInfo.NAME``: the GPU model, the AMD processor, the CPU model)."""
        return str(self.info[DeviceInfo.NAME])

    @property
    def memory_pool(self) -> MemoryPool:
        """The device's memory pool, which :meth:`allocate` draws from."""
        pool = self._pool
        if pool is None:
            from ._pool import MemoryPool

            with self._pool_lock:
                if self._pool is None:
                    self._pool = MemoryPool(self)
                pool = self._pool
        return pool

    def allocate(self, nbytes: int, kind: AllocType = AllocType.DEVICE, queue: Queue | None = None) -> Buffer:
        """A :class:`Buffer` of ``nbytes`` bytes of ``kind`` memory from the device's pool.

        ``kind``: ``DEVICE`` for kernel data, ``HOST`` for pinned host memory the device reaches,
        ``MANAGED`` for memory both sides use. ``queue`` is where the buffer will be used: a
        block freed on that queue is reused at once, one freed on another queue only once the work
        before its free has completed. The contents are not initialised.
        """
        pool = self._pool
        if pool is None:
            pool = self.memory_pool
        return pool.allocate(nbytes, kind, queue)

    def queue(self) -> Queue:
        """A new in-order :class:`Queue` of work on this device (use it in a ``with`` block)."""
        return _queue.make_queue(self)

    def load(self, image: bytes | bytearray | memoryview | os.PathLike[str]) -> Program:
        """Load device code: the image's bytes, or a ``pathlib.Path`` to read them from.

        The host device takes an ELF shared object built with ``cc -shared -fPIC``; CUDA devices PTX,
        cubin or fatbin; AMD GPUs a code object. ``INVALID_BINARY`` says why an image was refused.
        """
        return _program.Program._load(self, image)

    def compile(self, source: str, options: Sequence[str] = (), lang: str | None = None) -> Program:
        """Compile kernel ``source`` for this device and load it (see ``docs/kernels.md``).

        ``lang``: ``"c"`` (host C, the host kernel ABI, built with ``cc``), ``"cuda"`` (CUDA C++
        through NVRTC), ``"hip"`` (HIP through hiprtc), ``"gpu-c"``/``"gpu-c++"`` (portable
        ``<gpuintrin.h>`` kernels); None reads it from the source. ``options`` are compiler
        options. Images are cached on disk. The program's kernels come with their signatures.
        ``COMPILE_FAILURE`` holds the compiler's whole log; ``HOST_TOOL_NOT_FOUND`` says what to
        install; ``UNSUPPORTED`` a language this device cannot run.
        """
        return _program.Program.from_source(self, source, options, lang)

    def __repr__(self) -> str:
        state = " (shut down)" if self._runtime.closed else ""
        try:
            name = f" {self.name!r}"
        except OffloadError:
            name = ""
        return f"<Device {self._label}{name} ({self.type.name}){state}>"

    def __str__(self) -> str:
        return self._label


def devices(backend: PlatformBackend | str | None = None) -> list[Device]:
    """Every device, GPUs first and the host last; only those of ``backend`` when given.

    ``backend`` is a :class:`offloadrt.PlatformBackend` or its name (``"cuda"``, ``"amdgpu"``,
    ``"host"``). The first call starts the runtime (``olInit``); the layer shuts it down at exit.
    """
    found = _live_runtime().devices
    if backend is None:
        return list(found)
    wanted = _backend(backend)
    return [d for d in found if d.backend == wanted]


def device(spec: Device | str | None = None) -> Device:
    """One device: with no ``spec`` the first GPU, or else the host.

    ``spec`` is ``"host"``, a backend (``"cuda"``: its first device), or a backend and an ordinal
    (``"cuda:1"``, ``"amdgpu:0"``). An unknown spec raises ``NOT_FOUND`` listing the devices there are,
    and for a platform that did not start (``"cuda"`` without a driver) the reason it did not.
    """
    runtime = _live_runtime()
    if isinstance(spec, Device):
        spec._runtime.check()
        return spec
    if spec is None:
        return next((d for d in runtime.devices if d.type == DeviceType.GPU), runtime.host)
    if not isinstance(spec, str):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"a device spec is a string such as 'host', 'cuda' or 'cuda:1', got {type(spec).__name__}")
    name, _, ordinal = spec.strip().lower().partition(":")
    for candidate in runtime.devices:
        if candidate._platform == name and (not ordinal or ordinal == str(candidate._ordinal)):
            return candidate
    there = ", ".join(str(d) for d in runtime.devices)
    raise OffloadError(ErrorCode.NOT_FOUND, f"no device {spec!r}{_why_missing(runtime, name)}. The devices are: "
                                            f"{there} (name one as 'platform' or 'platform:ordinal')")


def _why_missing(runtime: _runtime.Runtime, name: str) -> str:
    """Why the platform ``name`` (its name or its backend's, in lower case) has no device, as words
    to follow "no device 'cuda:0'": the reason it did not start; empty when it did or is unknown."""
    if any(d._platform == name for d in runtime.devices):
        return ""
    try:
        missing = unavailable_platforms()
    except OffloadError:  # the runtime ended under the layer: the plain message is still true
        return ""
    for platform in missing:
        if name in (platform.name.lower(), platform.backend.name.lower()):
            return f": the {platform.name} platform did not start, because {platform.reason}"
    return ""


def _live_runtime() -> _runtime.Runtime:
    runtime = _runtime.runtime()
    try:  # a program's extra olShutDown may have ended the runtime under the layer: start afresh
        api.olGetDeviceInfo(runtime.host.handle, DeviceInfo.TYPE)
    except OffloadError:
        _runtime.discard(runtime)
        runtime = _runtime.runtime()
    return runtime


def _backend(value: PlatformBackend | str) -> PlatformBackend:
    if isinstance(value, str):
        try:
            return PlatformBackend[value.strip().upper()]
        except KeyError:
            names = ", ".join(repr(b.name.lower()) for b in PlatformBackend if b != PlatformBackend.UNKNOWN)
            raise OffloadError(ErrorCode.INVALID_ENUMERATION,
                               f"unknown backend {value!r}; use one of {names} or a PlatformBackend") from None
    try:
        return PlatformBackend(value)
    except ValueError:
        raise OffloadError(ErrorCode.INVALID_ENUMERATION, f"{value!r} is not a PlatformBackend") from None
