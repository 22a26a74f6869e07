"""A GPU device: the core (driver calls, vendor hooks, faults) with its memory, queues and programs."""

from __future__ import annotations

from .launch import GpuPrograms
from .memory import GpuMemory
from .pointers import GpuPointers
from .queues import GpuQueues


class GpuDevice(GpuQueues, GpuPointers, GpuMemory, GpuPrograms):
    """One GPU behind a CUDA-like driver API; a vendor subclass fills in the hooks marked abstract
    (see :class:`.core.GpuDeviceCore`) and names its driver functions in ``DRIVER_CALLS``."""
