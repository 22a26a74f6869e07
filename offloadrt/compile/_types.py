"""What every compiler back end of :mod:`offloadrt.compile` takes and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..types import PlatformBackend


class DeviceLike(Protocol):
    """What :mod:`offloadrt.compile` reads of a device (an ``offloadrt.Device``): its backend, and its
    ``ol*`` handle for the architecture. offloadrt.core imports this package, never the other way."""

    @property
    def backend(self) -> PlatformBackend: ...

    @property
    def handle(self) -> Any: ...


@dataclass(frozen=True)
class Target:
    """What a source is compiled for: ``kind`` is ``"host"``, ``"cuda"`` or ``"amdgpu"``; ``arch`` is the
    device's architecture (``"sm_90"``, ``"gfx90a"``; ``""`` for the host, which builds for this machine)."""

    kind: str
    arch: str = ""


@dataclass
class Compiled:
    """One compiled image and what is known of its kernels.

    ``kernels`` maps each kernel's source name to its signature in the forms ``Kernel.signature``
    takes (NumPy type names, ``"ptr"``, ``ctypes.Structure`` types), or to None where the parameters
    could not be read; ``symbols`` maps a source name to the symbol the image exports for it where the
    two differ (a C++ kernel's mangled name); ``log`` is the compiler's output (warnings);
    ``inputs`` what the compiler read besides the source, for the cache (None: not known, so the
    image is not cached; an image loaded from the cache has None)."""

    image: bytes
    kernels: dict[str, tuple[Any, ...] | None] = field(default_factory=dict)
    symbols: dict[str, str] = field(default_factory=dict)
    log: str = ""
    inputs: Inputs | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Inputs:
    """What a compile read besides its source: ``files`` (absolute paths), ``missing`` (absolute
    paths it looked at and found nothing: a file created there would be read) and whether that is
    ``complete`` (False where it cannot be told, such as an ``#include`` of a macro)."""

    files: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    complete: bool = True
