"""Backends and the registry that finds them.

The registry maps a :class:`~offloadrt.types.PlatformBackend` to a factory. Factories import
their module lazily, so a backend whose vendor package is missing costs nothing until it is
started, and then reports zero devices and why instead of raising.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from ..types import PlatformBackend
from .common import GenericDevice, GenericPlugin, PluginUnavailable

PluginFactory = Callable[[], GenericPlugin]


def _lazy(module: str, cls: str) -> PluginFactory:
    def factory() -> GenericPlugin:
        plugin: GenericPlugin = getattr(importlib.import_module(module, __name__), cls)()
        return plugin

    return factory


_REGISTRY: dict[PlatformBackend, PluginFactory] = {
    PlatformBackend.CUDA: _lazy(".cuda.plugin", "CudaPlugin"),
    PlatformBackend.AMDGPU: _lazy(".amdgpu.plugin", "AmdGpuPlugin"),
    PlatformBackend.HOST: _lazy(".host.plugin", "HostPlugin"),
}


def register_plugin(backend: PlatformBackend, factory: PluginFactory) -> PluginFactory | None:
    """Register (or replace) the plugin for ``backend``; returns the factory it replaced."""
    previous = _REGISTRY.get(backend)
    _REGISTRY[backend] = factory
    return previous


def unregister_plugin(backend: PlatformBackend) -> None:
    _REGISTRY.pop(backend, None)


def registered_backends() -> list[PlatformBackend]:
    return list(_REGISTRY)


def create_plugins(backends: Iterable[PlatformBackend] | None) -> list[GenericPlugin]:
    """Instances of the registered plugins for ``backends`` (all when ``None``), host last."""
    wanted = set(_REGISTRY) if backends is None else set(backends) | {PlatformBackend.HOST}
    order = sorted((b for b in _REGISTRY if b in wanted), key=lambda b: (b == PlatformBackend.HOST, b))
    return [_REGISTRY[b]() for b in order]


__all__ = ["GenericDevice", "GenericPlugin", "PluginUnavailable", "create_plugins", "register_plugin",
           "registered_backends", "unregister_plugin"]
