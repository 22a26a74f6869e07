"""The generic plugin layer every backend builds on (LLVM's ``plugins-nextgen/common``).

- :mod:`.device` (:class:`GenericDevice`) and :mod:`.queues`: the generic half of every operation;
  :mod:`.hooks` (:class:`DeviceHooks`): the ``_*_impl`` hooks a backend implements;
- :mod:`.plugin` (:class:`GenericPlugin`): a backend and its devices;
- :mod:`.image`: loaded programs, kernels and global variables;
- :mod:`.resources`: backend queues and events, queue failures, resource pools;
- :mod:`.registrations`: host memory registered with a device; :mod:`.launch`: launch shapes;
- :mod:`.gpu`: what the GPU plugins share.

Imports go one way: ``hooks`` ← ``queues`` ← ``device`` ← ``plugin``; ``image``, ``resources`` and
``registrations`` import none of them.
"""

from .device import GenericDevice
from .hooks import DeviceHooks, Dim3
from .image import DeviceImage, GenericKernel, GlobalVariable
from .plugin import GenericPlugin, PluginUnavailable
from .resources import AsyncInfo, GenericEvent, QueueFailure, ResourcePool

__all__ = ["AsyncInfo", "DeviceHooks", "DeviceImage", "Dim3", "GenericDevice", "GenericEvent", "GenericKernel",
           "GenericPlugin", "GlobalVariable", "PluginUnavailable", "QueueFailure", "ResourcePool"]
