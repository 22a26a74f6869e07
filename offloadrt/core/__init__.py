"""offloadrt's Python API: devices, buffers, arrays, queues, programs and kernels over the ``ol*`` API.

The names are exported from :mod:`offloadrt` itself (``offloadrt.device()``, ``offloadrt.Queue``);
this package holds them in small private modules. The first use starts the runtime (``olInit``)
and the layer gives its reference back at interpreter exit, after draining its queues.
"""

from ._array import Array, ArrayFlags, asarray, ascontiguousarray, empty, empty_like, full, zeros, zeros_like
from ._device import Device, DeviceProperties, device, devices
from ._elementwise import ElementwiseKernel, ReductionKernel, elementwise, reduction
from ._memory import Buffer
from ._pool import MemoryPool
from ._program import Kernel, Program
from ._queue import Event, Queue

__all__ = ["Array", "ArrayFlags", "Buffer", "Device", "DeviceProperties", "ElementwiseKernel", "Event", "Kernel",
           "MemoryPool", "Program", "Queue", "ReductionKernel", "asarray", "ascontiguousarray", "device", "devices",
           "elementwise", "empty", "empty_like", "full", "reduction", "zeros", "zeros_like"]
