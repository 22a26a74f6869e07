"""hip-python's enums, constants and structs, as the stand-in hands them out.

TEST DOUBLE, not AMD code. The names and numbers are HIP's ABI, written out here (never read from
an installed hip-python) so the stand-in works without hip-python; tests/test_hip_standin.py
checks every one against the real module where it is installed. Enums are ``IntEnum``s, as in
hip-python; C strings come back as :class:`CStr` (``bytes`` whose ``str()`` is the text, as
hip-python's ``CStr`` decodes).
"""
# ruff: noqa: N801, N803, N816  # hip-python's names

from __future__ import annotations

import re
from enum import IntEnum
from typing import Any

_ERRORS = """hipSuccess=0 InvalidValue=1 OutOfMemory=2 MemoryAllocation=2 NotInitialized=3 InitializationError=3
Deinitialized=4 ProfilerDisabled=5 ProfilerNotInitialized=6 ProfilerAlreadyStarted=7 ProfilerAlreadyStopped=8
InvalidConfiguration=9 InvalidPitchValue=12 InvalidSymbol=13 InvalidDevicePointer=17 InvalidMemcpyDirection=21
InsufficientDriver=35 MissingConfiguration=52 PriorLaunchFailure=53 InvalidDeviceFunction=98 NoDevice=100
InvalidDevice=101 InvalidImage=200 InvalidContext=201 ContextAlreadyCurrent=202 MapFailed=205
MapBufferObjectFailed=205 UnmapFailed=206 ArrayIsMapped=207 AlreadyMapped=208 NoBinaryForGpu=209 AlreadyAcquired=210
NotMapped=211 NotMappedAsArray=212 NotMappedAsPointer=213 ECCNotCorrectable=214 UnsupportedLimit=215
ContextAlreadyInUse=216 PeerAccessUnsupported=217 InvalidKernelFile=218 InvalidGraphicsContext=219 InvalidSource=300
FileNotFound=301 SharedObjectSymbolNotFound=302 SharedObjectInitFailed=303 OperatingSystem=304 InvalidHandle=400
InvalidResourceHandle=400 IllegalState=401 NotFound=500 NotReady=600 IllegalAddress=700 LaunchOutOfResources=701
LaunchTimeOut=702 PeerAccessAlreadyEnabled=704 PeerAccessNotEnabled=705 SetOnActiveProcess=708
ContextIsDestroyed=709 Assert=710 HostMemoryAlreadyRegistered=712 HostMemoryNotRegistered=713 LaunchFailure=719
CooperativeLaunchTooLarge=720 NotSupported=801 StreamCaptureUnsupported=900 StreamCaptureInvalidated=901
StreamCaptureMerge=902 StreamCaptureUnmatched=903 StreamCaptureUnjoined=904 StreamCaptureIsolation=905
StreamCaptureImplicit=906 CapturedEvent=907 StreamCaptureWrongThread=908 GraphExecUpdateFailure=910
InvalidChannelDescriptor=911 InvalidTexture=912 InvalidResourceType=914 InvalidResourceConfiguration=915
StreamDetached=916 Unknown=999 RuntimeMemory=1052 RuntimeOther=1053 InvalidClusterSize=1054 Tbd=1055"""

_ATTRIBUTES = """CudaCompatibleBegin=0 EccEnabled=0 AccessPolicyMaxWindowSize=1 AsyncEngineCount=2 CanMapHostMemory=3
CanUseHostPointerForRegisteredMem=4 ClockRate=5 ComputeMode=6 ComputePreemptionSupported=7 ConcurrentKernels=8
ConcurrentManagedAccess=9 CooperativeLaunch=10 CooperativeMultiDeviceLaunch=11 DeviceOverlap=12
DirectManagedMemAccessFromHost=13 GlobalL1CacheSupported=14 HostNativeAtomicSupported=15 Integrated=16
IsMultiGpuBoard=17 KernelExecTimeout=18 L2CacheSize=19 LocalL1CacheSupported=20 Luid=21 LuidDeviceNodeMask=22
ComputeCapabilityMajor=23 ManagedMemory=24 MaxBlocksPerMultiProcessor=25 MaxBlockDimX=26 MaxBlockDimY=27
MaxBlockDimZ=28 MaxGridDimX=29 MaxGridDimY=30 MaxGridDimZ=31 MaxSurface1D=32 MaxSurface1DLayered=33 MaxSurface2D=34
MaxSurface2DLayered=35 MaxSurface3D=36 MaxSurfaceCubemap=37 MaxSurfaceCubemapLayered=38 MaxTexture1DWidth=39
MaxTexture1DLayered=40 MaxTexture1DLinear=41 MaxTexture1DMipmap=42 MaxTexture2DWidth=43 MaxTexture2DHeight=44
MaxTexture2DGather=45 MaxTexture2DLayered=46 MaxTexture2DLinear=47 MaxTexture2DMipmap=48 MaxTexture3DWidth=49
MaxTexture3DHeight=50 MaxTexture3DDepth=51 MaxTexture3DAlt=52 MaxTextureCubemap=53 MaxTextureCubemapLayered=54
MaxThreadsDim=55 MaxThreadsPerBlock=56 MaxThreadsPerMultiProcessor=57 MaxPitch=58 MemoryBusWidth=59
MemoryClockRate=60 ComputeCapabilityMinor=61 MultiGpuBoardGroupID=62 MultiprocessorCount=63 Unused1=64
PageableMemoryAccess=65 PageableMemoryAccessUsesHostPageTables=66 PciBusId=67 PciDeviceId=68 PciDomainId=69
PciDomainID=69 PersistingL2CacheMaxSize=70 MaxRegistersPerBlock=71 MaxRegistersPerMultiprocessor=72
ReservedSharedMemPerBlock=73 MaxSharedMemoryPerBlock=74 SharedMemPerBlockOptin=75 SharedMemPerMultiprocessor=76
SingleToDoublePrecisionPerfRatio=77 StreamPrioritiesSupported=78 SurfaceAlignment=79 TccDriver=80
TextureAlignment=81 TexturePitchAlignment=82 TotalConstantMemory=83 TotalGlobalMem=84 UnifiedAddressing=85
Unused2=86 WarpSize=87 MemoryPoolsSupported=88 VirtualMemoryManagementSupported=89 HostRegisterSupported=90
MemoryPoolSupportedHandleTypes=91 HostNumaId=92 DmaBufSupported=93 GPUDirectRDMAWithHipVMMSupported=94
HandleTypeFabricSupported=95 CudaCompatibleEnd=9999 AmdSpecificBegin=10000 ClockInstructionRate=10000 Unused3=10001
MaxSharedMemoryPerMultiprocessor=10002 Unused4=10003 Unused5=10004 HdpMemFlushCntl=10005 HdpRegFlushCntl=10006
CooperativeMultiDeviceUnmatchedFunc=10007 CooperativeMultiDeviceUnmatchedGridDim=10008
CooperativeMultiDeviceUnmatchedBlockDim=10009 CooperativeMultiDeviceUnmatchedSharedMem=10010 IsLargeBar=10011
AsicRevision=10012 CanUseStreamWaitValue=10013 ImageSupport=10014 PhysicalMultiProcessorCount=10015
FineGrainSupport=10016 WallClockRate=10017 NumberOfXccs=10018 MaxAvailableVgprsPerThread=10019 PciChipId=10020
ExpertSchedMode=10021 MaxDynDataPrefetchRegions=10022 AmdSpecificEnd=19999 VendorSpecificBegin=20000"""

_FUNCTION_ATTRIBUTES = """MAX_THREADS_PER_BLOCK=0 SHARED_SIZE_BYTES=1 CONST_SIZE_BYTES=2 LOCAL_SIZE_BYTES=3 NUM_REGS=4
PTX_VERSION=5 BINARY_VERSION=6 CACHE_MODE_CA=7 MAX_DYNAMIC_SHARED_SIZE_BYTES=8 PREFERRED_SHARED_MEMORY_CARVEOUT=9
CLUSTER_DIM_MUST_BE_SET=10 REQUIRED_CLUSTER_WIDTH=11 REQUIRED_CLUSTER_HEIGHT=12 REQUIRED_CLUSTER_DEPTH=13
NON_PORTABLE_CLUSTER_SIZE_ALLOWED=14 CLUSTER_SCHEDULING_POLICY_PREFERENCE=15 MAX=16"""


def _members(table: str, prefix: str) -> list[tuple[str, int]]:
    """``[(prefix + name, value)]`` from a ``name=value`` table (a repeated value is an alias)."""
    pairs = (item.split("=") for item in table.split())
    return [(name if name.startswith("hip") else prefix + name, int(value)) for name, value in pairs]


def _enum(name: str, table: str, prefix: str) -> Any:
    """An IntEnum named as hip-python's, with the members of ``table`` (aliases included)."""
    enum = IntEnum(name, _members(table, prefix))  # type: ignore[misc]  # members from a table
    enum.__module__ = __name__
    return enum


_MEMORY_TYPES = "Unregistered=0 Host=1 Device=2 Managed=3 Array=10 Unified=11"

hipError_t = _enum("hipError_t", _ERRORS, "hipError")
hipMemoryType = _enum("hipMemoryType", _MEMORY_TYPES, "hipMemoryType")
hipDeviceAttribute_t = _enum("hipDeviceAttribute_t", _ATTRIBUTES, "hipDeviceAttribute")
hipFunction_attribute = _enum("hipFunction_attribute", _FUNCTION_ATTRIBUTES, "HIP_FUNC_ATTRIBUTE_")

# Flags and launch markers: plain ints in hip-python.
hipStreamDefault = 0
hipStreamNonBlocking = 1
hipDeviceScheduleAuto = 0
hipDeviceScheduleSpin = 1
hipDeviceScheduleYield = 2
hipDeviceScheduleBlockingSync = 4
hipEventDefault = 0
hipEventBlockingSync = 1
hipEventDisableTiming = 2
hipEventInterprocess = 4
hipEventReleaseToDevice = 0x40000000
hipEventReleaseToSystem = -0x80000000  # as hip-python spells it (a C int)
hipHostMallocDefault = 0
hipHostMallocPortable = 1
hipHostMallocMapped = 2
hipHostMallocWriteCombined = 4
hipHostMallocNumaUser = 0x20000000
hipHostMallocCoherent = 0x40000000
hipHostMallocNonCoherent = -0x80000000  # as hip-python spells it (a C int)
hipMemAttachGlobal = 1
hipMemAttachHost = 2
hipMemAttachSingle = 4
hipHostRegisterDefault = 0
hipHostRegisterPortable = 1
hipHostRegisterMapped = 2
hipHostRegisterIoMemory = 4
hipExtHostRegisterCoarseGrained = 8
HIP_LAUNCH_PARAM_BUFFER_POINTER = 1
HIP_LAUNCH_PARAM_BUFFER_SIZE = 2
HIP_LAUNCH_PARAM_END = 3  # CUDA's CU_LAUNCH_PARAM_END is 0
hipInvalidDeviceId = -2

_MESSAGES = {
    0: "no error", 1: "invalid argument", 2: "out of memory", 3: "initialization error", 4: "driver shutting down",
    9: "invalid configuration argument", 17: "invalid device pointer",
    35: "driver version is insufficient for runtime version", 98: "invalid device function",
    100: "no ROCm-capable device is detected", 101: "invalid device ordinal", 200: "device kernel image is invalid",
    201: "invalid device context", 209: "no kernel image is available for execution on the device",
    214: "uncorrectable ECC error encountered", 217: "peer access is not supported between these two devices",
    218: "invalid kernel file", 400: "invalid resource handle", 500: "named symbol not found",
    600: "device not ready", 700: "an illegal memory access was encountered",
    701: "too many resources requested for launch", 702: "the launch timed out and was terminated",
    704: "peer access is already enabled", 705: "peer access has not been enabled", 709: "context is destroyed",
    710: "device-side assert triggered", 719: "unspecified launch failure", 801: "operation not supported",
    999: "unknown error",
}


def message(code: int) -> str:
    """hipGetErrorString's text for ``code`` (a member of :data:`hipError_t`)."""
    text = _MESSAGES.get(int(code))
    if text is None:  # "hipErrorStreamCaptureMerge" -> "stream capture merge"
        words = re.findall(r"[A-Z][a-z]+|[A-Z]+(?![a-z])|\d+", hipError_t(code).name.removeprefix("hipError"))
        text = " ".join(words).lower()
    return text


class CStr(bytes):
    """A C string returned by a call: ``bytes``, whose ``str()`` is the decoded text (as
    hip-python's ``CStr``, which also has ``decode()`` and the buffer protocol)."""

    def __str__(self) -> str:
        return self.decode("utf-8", errors="replace")


class hipUUID_t:
    """A device UUID: 16 bytes, read through ``.bytes``."""

    def __init__(self, raw: bytes = b"") -> None:
        self._raw = bytes(raw[:16]).ljust(16, b"\0")

    @property
    def bytes(self) -> bytes:
        return self._raw

    def __repr__(self) -> str:
        return f"<hipUUID_t {self._raw.hex()} (hip_standin)>"


_PROPERTY_DEFAULTS: dict[str, Any] = {
    "name": "", "gcnArchName": "", "totalGlobalMem": 0, "sharedMemPerBlock": 0, "regsPerBlock": 0, "warpSize": 0,
    "memPitch": 0, "maxThreadsPerBlock": 0, "clockRate": 0, "totalConstMem": 0, "major": 0, "minor": 0,
    "multiProcessorCount": 0, "l2CacheSize": 0, "maxThreadsPerMultiProcessor": 0, "computeMode": 0,
    "concurrentKernels": 0, "pciDomainID": 0, "pciBusID": 0, "pciDeviceID": 0, "maxSharedMemoryPerMultiProcessor": 0,
    "sharedMemPerMultiprocessor": 0, "sharedMemPerBlockOptin": 0, "isMultiGpuBoard": 0, "canMapHostMemory": 0,
    "integrated": 0, "ECCEnabled": 0, "memoryClockRate": 0, "memoryBusWidth": 0, "clockInstructionRate": 0,
    "managedMemory": 0, "concurrentManagedAccess": 0, "pageableMemoryAccess": 0, "unifiedAddressing": 0,
    "asyncEngineCount": 0, "cooperativeLaunch": 0, "maxBlocksPerMultiProcessor": 0, "regsPerMultiprocessor": 0,
    "hostNativeAtomicSupported": 0, "streamPrioritiesSupported": 0, "memoryPoolsSupported": 0,
    "hostRegisterSupported": 0, "isLargeBar": 0, "asicRevision": 0, "kernelExecTimeoutEnabled": 0,
}


class hipDeviceProp_t:
    """The device properties hipGetDeviceProperties fills in (a subset of hip-python's struct;
    reading a field the stand-in does not fill raises AttributeError saying so)."""

    def __init__(self, **values: Any) -> None:
        for name, default in _PROPERTY_DEFAULTS.items():
            setattr(self, name, values.pop(name, default))
        self.uuid: hipUUID_t = values.pop("uuid", None) or hipUUID_t()
        self.maxThreadsDim: list[int] = list(values.pop("maxThreadsDim", (0, 0, 0)))
        self.maxGridSize: list[int] = list(values.pop("maxGridSize", (0, 0, 0)))
        if values:
            raise TypeError(f"hip_standin: hipDeviceProp_t has no fields {sorted(values)}")

    def __getattr__(self, name: str) -> Any:  # only called for names not set in __init__
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"hip_standin does not fill hipDeviceProp_t.{name}; add it to "
                             f"tests/hip_standin/_types.py and _devices.py")

    def __repr__(self) -> str:
        return f"<hipDeviceProp_t {self.name!r} {self.gcnArchName!r} (hip_standin)>"


class hipPointerAttribute_t:
    """What hipPointerGetAttributes fills in. hip-python's struct hands ``devicePointer`` and
    ``hostPointer`` out as its ``Pointer`` objects (``int()`` gives the address); the stand-in's
    are the ints themselves."""

    def __init__(self, type: Any = None, device: int = 0, devicePointer: int = 0,  # noqa: A002  # HIP's field
                 hostPointer: int = 0, isManaged: int = 0, allocationFlags: int = 0) -> None:
        self.type = hipMemoryType.hipMemoryTypeUnregistered if type is None else type
        self.device = device
        self.devicePointer = devicePointer
        self.hostPointer = hostPointer
        self.isManaged = isManaged
        self.allocationFlags = allocationFlags

    def __repr__(self) -> str:
        return (f"<hipPointerAttribute_t {self.type.name} device={self.device} devicePointer={self.devicePointer:#x} "
                f"hostPointer={self.hostPointer:#x} (hip_standin)>")
