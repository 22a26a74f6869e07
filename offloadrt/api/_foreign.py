"""What the Python layer asks a GPU plugin about another library's memory and streams.

Private helpers of ``offloadrt.core._foreign`` (the import of CuPy, PyTorch or Numba arrays), kept
here so that ``offloadrt.core`` never reaches into a plugin: where the driver places an address,
whether one GPU reads another's memory directly, and a wait for a stream offloadrt did not make.
They are not ``ol*`` entry points (liboffload has no such calls) and are not traced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import ErrorCode, OffloadError
from ..types import AllocType
from .handles import Device, Queue, live_device, live_queue

if TYPE_CHECKING:
    from ..plugins.common.gpu.pointers import GpuPointers


class PointerLocation(NamedTuple):
    """Where a GPU driver places an address (see ``PointerFacts``): ``kind`` (None: a kind offloadrt
    cannot use, named by ``driver_kind``), the driver's ``ordinal`` of its device, and the
    ``host_address`` the host reaches it at (0: none)."""

    kind: AllocType | None
    ordinal: int
    host_address: int
    driver_kind: str


def _gpu(device: object, what: str) -> GpuPointers:
    from ..plugins.common.gpu.pointers import GpuPointers

    gdev = live_device(device)
    if not isinstance(gdev, GpuPointers):
        raise OffloadError(ErrorCode.UNSUPPORTED, f"{device} is not a GPU: it cannot {what}")
    return gdev


def locate_pointer(device: Device, ptr: int) -> PointerLocation | None:
    """Where ``device``'s driver places the memory at ``ptr`` (any device of the platform answers
    for all of them), or None when that driver does not know the address."""
    facts = _gpu(device, "tell where memory lives").pointer_facts(ptr)
    if facts is None:
        return None
    return PointerLocation(facts.kind, facts.device_id, facts.host_address, facts.driver_kind)


def reaches_directly(src: Device, dst: Device) -> bool:
    """Whether a copy from GPU ``src`` to GPU ``dst`` (one platform) runs without passing through
    host memory: the same device, or ``src`` has peer access to ``dst``."""
    source = _gpu(src, "copy between GPUs")
    return source.reaches_directly(_gpu(dst, "copy between GPUs"))


def wait_for_stream(device: Device, stream: Any, queue: Queue | None) -> None:
    """Order ``queue`` (a queue of ``device``; None: the calling thread) after the work given so
    far to ``stream``, a driver stream of ``device`` that offloadrt did not make."""
    gdev = _gpu(device, "wait for a stream")
    ai = None
    if queue is not None:
        ai = live_queue(queue)
        if queue.device is not device:
            raise OffloadError(ErrorCode.INVALID_DEVICE,
                               f"the wait runs on {device!r} but the queue belongs to {queue.device!r}")
    gdev.wait_for_stream(stream, ai)
