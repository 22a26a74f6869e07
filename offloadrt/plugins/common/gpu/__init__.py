"""What the GPU plugins (CUDA, AMDGPU) share.

The CUDA driver API and HIP's driver-style API are close cousins: both return ``(status,
*outputs)`` tuples from their Python bindings, report pending work with status 600
(``NOT_READY``), order work on streams, pass a packed argument blob through the ``extra``
launch parameter and run host callbacks in stream order. This package holds that logic once,
split along its seams:

- :mod:`.driver`: statuses, their names and error codes;
- :mod:`.core`: a device's driver calls, vendor hooks and fault ("sticky" error) tracking;
- :mod:`.memory`: allocation, host-memory registration, copies and fills;
- :mod:`.queues` and :mod:`.streams`: streams, events, waits and where a failure happened;
- :mod:`.launch` and :mod:`.hostcalls`: programs, launches (with a fast path for queued ones),
  and host functions; :mod:`.threads`: what a vendor keeps per thread (current device, launch buffers);
- :mod:`.device`: :class:`GpuDevice`, all of the above; :mod:`.plugin`: :class:`GpuPlugin`.

Host memory registered with ``olMemRegister`` is page-locked once for every device of the plugin
(portable and mapped), because both drivers pin a host range once per process: the plugin counts
its devices' registrations of a range (:attr:`GpuPlugin.host_pins`) and unpins it with the last.
"""

from .core import GpuDeviceCore
from .device import GpuDevice
from .driver import GpuDriver
from .hostcalls import HOST_TRAMPOLINE_ADDRESS
from .launch import GpuImage, GpuKernel
from .plugin import GpuPlugin, gpu_info
from .streams import GpuEvent, GpuStream
from .threads import ThreadCell, ThreadState

__all__ = ["HOST_TRAMPOLINE_ADDRESS", "GpuDevice", "GpuDeviceCore", "GpuDriver", "GpuEvent", "GpuImage", "GpuKernel",
           "GpuPlugin", "GpuStream", "ThreadCell", "ThreadState", "gpu_info"]
