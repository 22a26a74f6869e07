"""The simulated AMD GPUs: what a test asks for (:class:`DeviceSpec`) and what HIP reports.

TEST DOUBLE, not AMD code. The defaults describe an AMD Instinct MI210 (gfx90a, 104 compute
units, 64 GiB, 64 KiB of LDS per work-group, wavefronts of 64); ``hipDeviceGetAttribute`` and
``hipGetDeviceProperties`` read the same table, so the two always agree.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from standin_common.engine import SimulatedDevice

from ._code_objects import parse_target_id
from ._types import hipDeviceAttribute_t, hipDeviceProp_t, hipUUID_t


@dataclass
class DeviceSpec:
    """One simulated AMD GPU.

    ``arch`` is the device's ``gcnArchName`` (processor and target features, as HIP reports
    them); ``clock_rate``/``memory_clock_rate`` are in kHz; ``shared_memory`` is the LDS a
    work-group may use; ``peers`` lists the ordinals this device can access directly (None:
    every other device); ``attributes`` overrides any hipDeviceAttribute_t value, by short name
    ("WarpSize"), full name or number; ``memory_budget`` (None: ``total_memory``) is what
    allocations may use before hipErrorOutOfMemory.
    """

    name: str = "AMD Instinct MI210"
    arch: str = "gfx90a:sramecc+:xnack-"
    total_memory: int = 64 << 30
    memory_budget: int | None = None
    compute_units: int = 104
    clock_rate: int = 1_700_000
    memory_clock_rate: int = 1_600_000
    memory_bus_width: int = 4096
    l2_cache_size: int = 8 << 20
    shared_memory: int = 64 << 10
    max_threads_per_block: int = 1024
    warp_size: int = 64
    peers: set[int] | None = None
    uuid: bytes | None = None
    attributes: dict[Any, int] = field(default_factory=dict)


def attribute_number(key: Any) -> int:
    """A hipDeviceAttribute_t value from its short name, full name, member or number."""
    if isinstance(key, str):
        name = key if key.startswith("hipDeviceAttribute") else f"hipDeviceAttribute{key}"
        return int(hipDeviceAttribute_t[name])
    return int(key)


class HipDevice(SimulatedDevice):
    """A simulated AMD GPU: its name, target ID (processor and features) and attributes."""

    def __init__(self, ordinal: int, spec: DeviceSpec) -> None:
        super().__init__(ordinal, spec)
        self.name = spec.name
        self.arch = spec.arch
        self.schedule_flags = 0  # hipSetDeviceFlags: hipDeviceScheduleAuto until set
        self.processor, self.features = parse_target_id(spec.arch)
        self.uuid = spec.uuid or hashlib.md5(f"hip-standin-{ordinal}".encode()).digest()
        digits = self.processor.removeprefix("gfx")
        self.major, self.minor = int(digits[:-2]), int(digits[-2], 16)
        shared, threads = spec.shared_memory, spec.max_threads_per_block
        values = {
            "MaxThreadsPerBlock": threads, "MaxBlockDimX": threads, "MaxBlockDimY": threads, "MaxBlockDimZ": threads,
            "MaxGridDimX": 2**31 - 1, "MaxGridDimY": 65536, "MaxGridDimZ": 65536,
            "MaxSharedMemoryPerBlock": shared, "SharedMemPerBlockOptin": shared,
            "SharedMemPerMultiprocessor": shared, "MaxSharedMemoryPerMultiprocessor": shared,
            "ReservedSharedMemPerBlock": 0, "WarpSize": spec.warp_size, "MultiprocessorCount": spec.compute_units,
            "PhysicalMultiProcessorCount": spec.compute_units, "ClockRate": spec.clock_rate,
            "ClockInstructionRate": spec.clock_rate, "MemoryClockRate": spec.memory_clock_rate,
            "MemoryBusWidth": spec.memory_bus_width, "L2CacheSize": spec.l2_cache_size,
            "ComputeCapabilityMajor": self.major, "ComputeCapabilityMinor": self.minor,
            "PciBusId": 0x03 + 0x80 * ordinal, "PciDeviceId": 0,  # the slot on the bus, as in "0000:03:00.0"
            "PciDomainId": 0, "ManagedMemory": 1,
            "ConcurrentManagedAccess": 1, "ConcurrentKernels": 1, "CanMapHostMemory": 1,
            "MaxThreadsPerMultiProcessor": 2048, "MaxBlocksPerMultiProcessor": 32, "MaxRegistersPerBlock": 65536,
            "MaxRegistersPerMultiprocessor": 65536, "TotalConstantMemory": 2**31 - 1, "MaxPitch": 2**31 - 1,
            "UnifiedAddressing": 1, "Integrated": 0, "EccEnabled": int(self.features.get("sramecc") is True),
            "AsyncEngineCount": 2, "CooperativeLaunch": 1, "CooperativeMultiDeviceLaunch": 1,
            "PageableMemoryAccess": 0, "HostNativeAtomicSupported": 1, "ComputeMode": 0, "KernelExecTimeout": 0,
            "IsMultiGpuBoard": 0, "DeviceOverlap": 1, "MemoryPoolsSupported": 1, "HostRegisterSupported": 1,
            "VirtualMemoryManagementSupported": 1, "StreamPrioritiesSupported": 1, "DirectManagedMemAccessFromHost": 0,
            "CanUseHostPointerForRegisteredMem": 1, "GlobalL1CacheSupported": 1, "LocalL1CacheSupported": 1,
            "ComputePreemptionSupported": 0, "IsLargeBar": 1, "AsicRevision": 1, "FineGrainSupport": 1,
            "WallClockRate": 100_000, "NumberOfXccs": 1, "ImageSupport": 1, "TextureAlignment": 256,
            "TexturePitchAlignment": 256,
        }
        self.attributes = {attribute_number(k): v for k, v in values.items()}
        self.attributes.update({attribute_number(k): v for k, v in spec.attributes.items()})

    def attr(self, name: str) -> int:
        return self.attributes[attribute_number(name)]

    def uses_host_pointers_for_registered_memory(self) -> bool:
        return bool(self.attr("CanUseHostPointerForRegisteredMem"))

    def properties(self) -> hipDeviceProp_t:
        """What hipGetDeviceProperties reports, from the same values as hipDeviceGetAttribute."""
        a = self.attr
        return hipDeviceProp_t(
            name=self.name, gcnArchName=self.arch, uuid=hipUUID_t(self.uuid), totalGlobalMem=self.spec.total_memory,
            sharedMemPerBlock=a("MaxSharedMemoryPerBlock"), regsPerBlock=a("MaxRegistersPerBlock"),
            warpSize=a("WarpSize"), memPitch=a("MaxPitch"), maxThreadsPerBlock=a("MaxThreadsPerBlock"),
            maxThreadsDim=[a("MaxBlockDimX"), a("MaxBlockDimY"), a("MaxBlockDimZ")],
            maxGridSize=[a("MaxGridDimX"), a("MaxGridDimY"), a("MaxGridDimZ")], clockRate=a("ClockRate"),
            totalConstMem=a("TotalConstantMemory"), major=self.major, minor=self.minor,
            multiProcessorCount=a("MultiprocessorCount"), l2CacheSize=a("L2CacheSize"),
            maxThreadsPerMultiProcessor=a("MaxThreadsPerMultiProcessor"), computeMode=a("ComputeMode"),
            concurrentKernels=a("ConcurrentKernels"), pciDomainID=a("PciDomainId"), pciBusID=a("PciBusId"),
            pciDeviceID=a("PciDeviceId"), maxSharedMemoryPerMultiProcessor=a("MaxSharedMemoryPerMultiprocessor"),
            sharedMemPerMultiprocessor=a("SharedMemPerMultiprocessor"),
            sharedMemPerBlockOptin=a("SharedMemPerBlockOptin"), isMultiGpuBoard=a("IsMultiGpuBoard"),
            canMapHostMemory=a("CanMapHostMemory"), integrated=a("Integrated"), ECCEnabled=a("EccEnabled"),
            memoryClockRate=a("MemoryClockRate"), memoryBusWidth=a("MemoryBusWidth"),
            clockInstructionRate=a("ClockInstructionRate"), managedMemory=a("ManagedMemory"),
            concurrentManagedAccess=a("ConcurrentManagedAccess"), pageableMemoryAccess=a("PageableMemoryAccess"),
            unifiedAddressing=a("UnifiedAddressing"), asyncEngineCount=a("AsyncEngineCount"),
            cooperativeLaunch=a("CooperativeLaunch"), maxBlocksPerMultiProcessor=a("MaxBlocksPerMultiProcessor"),
            regsPerMultiprocessor=a("MaxRegistersPerMultiprocessor"),
            hostNativeAtomicSupported=a("HostNativeAtomicSupported"),
            streamPrioritiesSupported=a("StreamPrioritiesSupported"), memoryPoolsSupported=a("MemoryPoolsSupported"),
            hostRegisterSupported=a("HostRegisterSupported"), isLargeBar=a("IsLargeBar"),
            asicRevision=a("AsicRevision"), kernelExecTimeoutEnabled=a("KernelExecTimeout"))
