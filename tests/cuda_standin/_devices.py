"""The simulated NVIDIA GPUs: what a test asks for (:class:`DeviceSpec`) and what the driver reports.

TEST DOUBLE, not NVIDIA code. The defaults describe an H100-class GPU (compute capability 9.0,
132 SMs, 8 GiB here); ``cuDeviceGetAttribute`` reads the same table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from standin_common.engine import SimulatedDevice

from . import _types as t


@dataclass
class DeviceSpec:
    """One simulated GPU. ``attributes`` overrides defaults by short name ("WARP_SIZE") or number;
    ``peers`` lists the ordinals this device can access directly (None: every other device)."""

    name: str = ""
    total_memory: int = 8 << 30
    memory_budget: int | None = None
    compute_capability: tuple[int, int] = (9, 0)
    attributes: dict[Any, int] = field(default_factory=dict)
    uuid: bytes | None = None
    peers: set[int] | None = None


DEFAULT_ATTRIBUTES = {
    "MAX_THREADS_PER_BLOCK": 1024, "MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64,
    "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535,
    "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 228 * 1024, "TOTAL_CONSTANT_MEMORY": 65536, "WARP_SIZE": 32,
    "MAX_PITCH": 2**31 - 1, "MAX_REGISTERS_PER_BLOCK": 65536, "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
    "CLOCK_RATE": 1980000, "MEMORY_CLOCK_RATE": 2619000, "GPU_OVERLAP": 1, "MULTIPROCESSOR_COUNT": 132,
    "CAN_MAP_HOST_MEMORY": 1, "CONCURRENT_KERNELS": 1, "ECC_ENABLED": 1, "GLOBAL_MEMORY_BUS_WIDTH": 5120,
    "L2_CACHE_SIZE": 50 << 20, "MAX_THREADS_PER_MULTIPROCESSOR": 2048, "ASYNC_ENGINE_COUNT": 3,
    "UNIFIED_ADDRESSING": 1, "STREAM_PRIORITIES_SUPPORTED": 1, "MANAGED_MEMORY": 1,
    "CONCURRENT_MANAGED_ACCESS": 1, "COOPERATIVE_LAUNCH": 1, "HOST_REGISTER_SUPPORTED": 1,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 32, "MEMORY_POOLS_SUPPORTED": 1, "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 1,
}


def attribute_number(name: Any) -> int:
    if isinstance(name, str):
        return int(getattr(t.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"))
    return int(name)


class Device(SimulatedDevice):
    """A CUDA GPU: name, UUID and CUdevice_attribute values."""

    def __init__(self, ordinal: int, spec: DeviceSpec) -> None:
        super().__init__(ordinal, spec)
        self.name = spec.name or f"Stand-in CUDA GPU {ordinal} (test double)"
        self.uuid = spec.uuid or hashlib.md5(f"cuda-standin-{ordinal}".encode()).digest()
        major, minor = spec.compute_capability
        values = dict(DEFAULT_ATTRIBUTES, COMPUTE_CAPABILITY_MAJOR=major, COMPUTE_CAPABILITY_MINOR=minor,
                      PCI_BUS_ID=0x18 + 0x10 * ordinal)
        self.attributes = {attribute_number(k): v for k, v in values.items()}
        self.attributes.update({attribute_number(k): v for k, v in spec.attributes.items()})

    def attr(self, name: str) -> int:
        return self.attributes.get(attribute_number(name), 0)

    def arch(self) -> int:
        """The compute capability as one number (9.0: 90)."""
        return self.attr("COMPUTE_CAPABILITY_MAJOR") * 10 + self.attr("COMPUTE_CAPABILITY_MINOR")

    def uses_host_pointers_for_registered_memory(self) -> bool:
        return bool(self.attr("CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"))
