"""The vendor table of the shared GPU plugin suite: one object per driver stand-in.

Every test in ``tests/gpu_plugins`` runs once per vendor through the ``vendor`` fixture; this is
the one place where the vendors differ. A :class:`Vendor` says how to install and reset its
stand-in and inject a status, names its statuses (by a vendor-neutral name: ``OUT_OF_MEMORY`` is
``CUDA_ERROR_OUT_OF_MEMORY`` or ``hipErrorOutOfMemory``) and its driver functions (by role: the
plugin's ``DRIVER_CALLS`` keys, plus the calls each plugin makes in its own code), builds its test
program, and knows the few facts where the two drivers part ways (how a peer is named, whether
an idle queue's fill finishes before ``olMemFill`` returns, ...).

A vendor's images, device selection and other cases the other vendor cannot express are tested
in ``tests/test_cuda_plugin.py`` and ``tests/test_amdgpu_plugin.py``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import amdgpu_fixtures
import cuda_fixtures
import cuda_standin
import gpu_fixtures
import hip_standin
import pytest
from _pytest.mark import ParameterSet
from gpu_fixtures import KERNELS, CallLog, Runtime

from offloadrt import PlatformBackend, api
from offloadrt.plugins.amdgpu import driver as hip_driver
from offloadrt.plugins.amdgpu.plugin import AmdGpuDevice
from offloadrt.plugins.common.gpu import GpuDevice, GpuDriver
from offloadrt.plugins.cuda import driver as cuda_driver
from offloadrt.plugins.cuda.plugin import CudaDevice

Refusal = tuple[str, tuple[Any, ...], BaseException]


class Vendor:
    """One GPU plugin over its driver stand-in. Subclasses fill in the class attributes."""

    name: ClassVar[str]  # the test id
    platform: ClassVar[str]  # the platform's PlatformInfo.NAME, as `info` lists it
    backend: ClassVar[PlatformBackend]
    label: ClassVar[str]  # what the plugin's messages call a device ("CUDA device 0")
    standin: ClassVar[ModuleType]  # the stand-in package (install, inject, read, write, ...)
    bindings: ClassVar[ModuleType]  # the stand-in's module in place of the vendor's bindings
    call_prefix: ClassVar[str]  # what the driver's function names start with
    status_enum: ClassVar[Any]
    driver_class: ClassVar[type[GpuDriver]]
    device_class: ClassVar[type[GpuDevice]]
    #: vendor-neutral status name -> the vendor's (only those the tests use)
    statuses: ClassVar[dict[str, str]]
    #: role -> driver function, for the calls a plugin makes in its own code (the shared ones are DRIVER_CALLS)
    own_calls: ClassVar[dict[str, str]]
    #: the flags of the streams and events the plugin creates
    nonblocking_stream: ClassVar[int]
    default_event: ClassVar[int]  # the flags of a timed event
    untimed_event: ClassVar[int]  # the flags of a plain event (no timing)
    #: what every error of a poisoned device says
    poisoned: ClassVar[str]
    #: the faults that poison a device (vendor-neutral names)
    sticky: ClassVar[tuple[str, ...]]
    #: the test program itself says that kernel "small" runs at most 128 work items per group
    image_declares_launch_bounds: ClassVar[bool] = False
    #: the stand-in keeps a sticky fault after offloadrt released the device (HIP cannot reset one)
    keeps_sticky_faults: ClassVar[bool] = False
    #: a fill on an idle queue has finished when olMemFill returns (as LLVM's AMDGPU plugin does)
    fills_idle_queue_at_once: ClassVar[bool] = False
    #: the modules that make up the vendor's bindings, and why the platform is out without them
    packages: ClassVar[tuple[str, ...]]
    no_bindings: ClassVar[str]  # a regular expression of the whole reason
    #: advice given where the driver library is missing
    install_advice: ClassVar[str]
    #: the prefix of the names of the stand-in's stream threads (which run host functions)
    stream_thread: ClassVar[str]
    #: device attributes of a GPU that cannot use host pointers for registered memory
    no_host_pointers: ClassVar[dict[str, int]]
    #: the stand-in's attribute holding a device's grid limit in y, and its dynamic shared memory limit
    grid_y_attribute: ClassVar[int]
    shared_memory_limit: ClassVar[int]
    #: work items (groups x group size) a launch may have on one axis, where the plugin limits them
    items_per_axis: ClassVar[int | None] = None
    min_distinct_calls: ClassVar[int]  # distinct calls (argument kinds) the representative workload makes

    def __init__(self) -> None:
        self.log = CallLog(self.standin)

    def __repr__(self) -> str:
        return self.name

    # ---- names -----------------------------------------------------------------------------
    def call(self, role: str) -> str:
        """The driver function of ``role``: a ``DRIVER_CALLS`` key or one of :attr:`own_calls`."""
        return self.device_class.DRIVER_CALLS.get(role) or self.own_calls[role]

    def status(self, name: str) -> Any:
        """The vendor's status enum member of a vendor-neutral status name."""
        return getattr(self.status_enum, self.statuses[name])

    def has_status(self, name: str) -> bool:
        return name in self.statuses

    # ---- the stand-in ----------------------------------------------------------------------
    def runtime(self, monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> AbstractContextManager[Runtime]:
        """A runtime on the stand-in (``reset_args`` as for its ``install``): see ``gpu_fixtures.stand_in_runtime``."""
        return gpu_fixtures.stand_in_runtime(self.standin, self.backend, monkeypatch, **reset_args)

    def init(self) -> None:
        """``olInit`` of this vendor's platform (and the host)."""
        api.olInit(platforms=[self.backend])

    def spec(self, **fields: Any) -> Any:
        """A stand-in GPU (``DeviceSpec``)."""
        return self.standin.DeviceSpec(**fields)

    def inject(self, role: str, status: str, times: int | None = 1, skip: int = 0) -> Any:
        """The next calls of ``role``'s function fail with ``status`` (a vendor-neutral name); returns the status."""
        member = self.status(status)
        self.standin.inject(self.call(role), member, times=times, skip=skip)
        return member

    def call_names(self) -> list[str]:
        return self.log.names()

    def count(self, role: str) -> int:
        return self.log.count(self.call(role))

    def calls_of(self, role: str) -> list[tuple[Any, ...]]:
        return self.log.of(self.call(role))

    def faulting_kernel(self, status: str) -> Callable[..., None]:
        """A kernel body that faults with ``status`` (reported asynchronously, as on a GPU)."""
        return gpu_fixtures.faulting_kernel(self.status(status))

    # ---- programs --------------------------------------------------------------------------
    def image(self, kernels: Sequence[str] = KERNELS) -> bytes:
        """The test program: ``kernels`` (default :data:`gpu_fixtures.KERNELS`), a uint32 global
        ``counter`` (:data:`gpu_fixtures.COUNTER`) and a global ``table`` (:data:`gpu_fixtures.TABLE_SIZE` bytes)."""
        raise NotImplementedError

    def program(self, device: api.Device, image: bytes | bytearray | None = None) -> api.Program:
        return api.olCreateProgram(device, self.image() if image is None else image)

    # ---- where the drivers differ ----------------------------------------------------------
    def selected(self, arguments: tuple[Any, ...]) -> int:
        """The ordinal of the device a recorded ``select`` call made current."""
        raise NotImplementedError

    def select_elsewhere(self, ordinal: int) -> None:
        """Another library makes device ``ordinal`` current on the calling thread."""
        raise NotImplementedError

    def alloc_arguments(self, kind: Any) -> tuple[Any, ...]:
        """The arguments after the size of the allocation call of ``kind``."""
        raise NotImplementedError

    def peer(self, device: api.Device) -> int:
        """How a peer copy and peer access name ``device`` (CUDA: its context; HIP: its ordinal)."""
        raise NotImplementedError

    def enable_peer_access_elsewhere(self, device: int, peer: int) -> None:
        """Another library enables ``device``'s access to ``peer`` (stand-in ordinals)."""
        raise NotImplementedError

    def register_elsewhere(self, host: int, size: int) -> None:
        """Another library page-locks ``size`` bytes at ``host``."""
        raise NotImplementedError

    def host_register_flags(self) -> int:
        """What olMemRegister passes to the driver: portable and mapped."""
        flags = 0
        for flag in self.device_class.HOST_REGISTER_FLAGS:
            flags |= int(getattr(self.bindings, flag))
        return flags

    def device_pointer_arguments(self, host: int) -> tuple[Any, ...]:
        """The arguments of the call that answers a registration's device address, as recorded."""
        raise NotImplementedError

    def occupancy_arguments(self, recorded: tuple[Any, ...]) -> tuple[Any, ...]:
        """(function, dynamic shared memory, block size limit) from a recorded occupancy call."""
        raise NotImplementedError

    def memset32_value(self, value: int) -> int:
        """What the 32-bit memset receives for the pattern ``value`` (an unsigned 32-bit number)."""
        return value

    def stream_is_idle(self, stream: int) -> bool:
        """Ask the stand-in directly whether a stream (a queue's native handle) has no pending work."""
        raise NotImplementedError

    def standin_function(self, name: str) -> bool:
        """Whether the stand-in has driver function ``name``."""
        return callable(getattr(self.bindings, name, None))

    def plugin_calls(self) -> set[str]:
        """Every driver function the plugin's source calls: ``DRIVER_CALLS``, the functions that name a
        status, and each ``<module>.<prefix>X(...)`` call in the plugin's package (``d.cuMemAlloc(``,
        ``self.d.hipSetDevice(``, ``self.driver.module.cuInit(``); ``hipError_t(status)`` makes an
        enum member and is no driver call."""
        package = Path(inspect.getfile(self.device_class)).parent
        text = "".join(path.read_text() for path in sorted(package.glob("*.py")))
        direct = set(re.findall(rf"\.({self.call_prefix}[A-Z]\w*)\(", text))
        functions = {name for name in direct if not isinstance(getattr(self.bindings, name, None), type)}
        naming = {self.driver_class.name_function, self.driver_class.explain_function}
        return functions | naming | set(self.device_class.DRIVER_CALLS.values())

    def replay(self, calls: Iterable[tuple[str, tuple[Any, ...]]]) -> list[Refusal]:
        """Replay recorded calls against the real bindings: the calls whose arguments they refuse."""
        raise NotImplementedError

    # ---- the representative workload's vendor part -----------------------------------------
    def prepare_workload(self) -> None:
        """Whatever the stand-in must know before the workload's images load."""

    def other_images(self) -> list[bytes | bytearray]:
        """Images of the vendor's other formats, which load."""
        raise NotImplementedError

    def refused_images(self) -> list[bytes]:
        """Images the plugin passes to the driver, which refuses them."""
        raise NotImplementedError

    # ---- vendor-specific cases of shared tests ---------------------------------------------
    def start_failures(self) -> Iterator[ParameterSet]:
        """(reset_args, (role, status) to inject or None, the reason the platform gives)."""
        raise NotImplementedError

    def start_calls(self) -> Iterator[ParameterSet]:
        """(driver function, calls of it to let pass): a failure there leaves the platform out with a warning."""
        raise NotImplementedError

    def refused_image_statuses(self) -> tuple[str, ...]:
        """Statuses with which the driver refuses an image."""
        raise NotImplementedError


class Cuda(Vendor):
    name = "cuda"
    platform = "cuda"
    backend = PlatformBackend.CUDA
    label = "CUDA"
    standin = cuda_standin
    bindings = cuda_standin.driver
    call_prefix = "cu"
    status_enum = cuda_standin.driver.CUresult
    driver_class = cuda_driver.Driver
    device_class = CudaDevice
    statuses = {"SUCCESS": "CUDA_SUCCESS"} | {name: f"CUDA_ERROR_{name}" for name in (
        "OUT_OF_MEMORY", "INVALID_VALUE", "NOT_SUPPORTED", "NOT_FOUND", "UNKNOWN", "INVALID_HANDLE", "INVALID_DEVICE",
        "INVALID_CONTEXT", "NOT_READY", "NO_DEVICE", "NOT_PERMITTED", "ILLEGAL_ADDRESS", "LAUNCH_OUT_OF_RESOURCES",
        "LAUNCH_TIMEOUT", "ASSERT", "LAUNCH_FAILED", "ILLEGAL_INSTRUCTION", "MISALIGNED_ADDRESS", "INVALID_IMAGE",
        "NO_BINARY_FOR_GPU", "INVALID_PTX", "SHARED_OBJECT_INIT_FAILED", "HOST_MEMORY_ALREADY_REGISTERED")}
    own_calls = {
        "init": "cuInit", "driver_version": "cuDriverGetVersion", "device_count": "cuDeviceGetCount",
        "select": "cuCtxSetCurrent", "stream_create": "cuStreamCreate", "event_create": "cuEventCreate",
        "module_load": "cuModuleLoadDataEx", "occupancy": "cuOccupancyMaxPotentialBlockSize",
        "peer_can_access": "cuDeviceCanAccessPeer", "peer_enable": "cuCtxEnablePeerAccess",
        "name_status": "cuGetErrorName", "explain_status": "cuGetErrorString",
    }
    image_declares_launch_bounds = True
    nonblocking_stream = int(cuda_standin.driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
    default_event = int(cuda_standin.driver.CUevent_flags.CU_EVENT_DEFAULT)
    untimed_event = int(cuda_standin.driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    poisoned = "the process"
    sticky = ("ILLEGAL_ADDRESS", "LAUNCH_TIMEOUT", "ASSERT", "LAUNCH_FAILED", "ILLEGAL_INSTRUCTION",
              "MISALIGNED_ADDRESS")
    packages = ("cuda", "cuda.bindings", "cuda.bindings.driver")
    no_bindings = r"cuda-bindings is not installed \(.*\); install offloadrt\[cuda\] to use NVIDIA GPUs"
    install_advice = "install the NVIDIA driver (it provides libcuda.so.1)"
    stream_thread = "cuda-standin-stream"
    no_host_pointers = {"CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 0}
    grid_y_attribute = int(cuda_standin.driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)
    shared_memory_limit = 227 * 1024  # the default stand-in GPU's opt-in limit
    min_distinct_calls = 40

    def image(self, kernels: Sequence[str] = KERNELS) -> bytes:
        return cuda_fixtures.ptx(kernels=kernels)

    def selected(self, arguments: tuple[Any, ...]) -> int:
        (context,) = arguments
        return next(d.ordinal for d in self.standin.state().devices if d.context.handle == int(context))

    def select_elsewhere(self, ordinal: int) -> None:
        d = self.bindings
        assert int(d.cuCtxSetCurrent(d.CUcontext(self.standin.state().devices[ordinal].context.handle))[0]) == 0

    def alloc_arguments(self, kind: Any) -> tuple[Any, ...]:
        managed = kind.name == "MANAGED"
        return (self.bindings.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL,) if managed else ()

    def peer(self, device: api.Device) -> int:
        return cuda_fixtures.cuda_device(device).context_value

    def enable_peer_access_elsewhere(self, device: int, peer: int) -> None:
        d, devices = self.bindings, self.standin.state().devices
        assert int(d.cuCtxSetCurrent(d.CUcontext(devices[device].context.handle))[0]) == 0
        assert int(d.cuCtxEnablePeerAccess(d.CUcontext(devices[peer].context.handle), 0)[0]) == 0

    def register_elsewhere(self, host: int, size: int) -> None:
        d = self.bindings
        assert int(d.cuCtxSetCurrent(d.CUcontext(self.standin.state().devices[0].context.handle))[0]) == 0
        assert int(d.cuMemHostRegister(host, size, self.host_register_flags())[0]) == 0

    def device_pointer_arguments(self, host: int) -> tuple[Any, ...]:
        return (host, 0)

    def occupancy_arguments(self, recorded: tuple[Any, ...]) -> tuple[Any, ...]:
        func, block_to_shared, shared, limit = recorded
        assert block_to_shared is None
        return func, shared, limit

    def stream_is_idle(self, stream: int) -> bool:
        d = self.bindings
        return int(d.cuStreamQuery(d.CUstream(stream))[0]) == 0

    def replay(self, calls: Iterable[tuple[str, tuple[Any, ...]]]) -> list[Refusal]:
        return cuda_fixtures.replay_against_real(calls)

    def prepare_workload(self) -> None:
        self.standin.set_binary_symbols(kernels=["vector_add"], globals={"state": 8})

    def other_images(self) -> list[bytes | bytearray]:
        return [cuda_fixtures.cubin(90), cuda_fixtures.fatbin()]

    def refused_images(self) -> list[bytes]:
        return [cuda_fixtures.PTX + b"// standin-invalid\n", cuda_fixtures.ptx("sm_100")]

    def start_failures(self) -> Iterator[ParameterSet]:
        yield pytest.param({"library_missing": True}, None,
                           "the NVIDIA driver library (libcuda) was not found or could not be loaded",
                           id="library-missing")
        yield pytest.param({"init_error": self.status("NO_DEVICE")}, None, "cuInit: no CUDA-capable device is present",
                           id="no-device-error")
        yield pytest.param({"devices": 0}, None, "cuInit: no CUDA-capable device is present", id="zero-devices")
        yield pytest.param({"init_error": self.status("UNKNOWN")}, None, "cuInit failed: CUDA_ERROR_UNKNOWN (",
                           id="init-fails")

    def start_calls(self) -> Iterator[ParameterSet]:
        yield pytest.param("cuDriverGetVersion", 0, id="driver-version")
        yield pytest.param("cuDeviceGetCount", 0, id="device-count")
        yield pytest.param("cuDeviceGetName", 1, id="second-device-name")
        yield pytest.param("cuDeviceTotalMem", 0, id="total-memory")
        yield pytest.param("cuDevicePrimaryCtxRetain", 0, id="primary-context")

    def refused_image_statuses(self) -> tuple[str, ...]:
        return ("INVALID_IMAGE", "NO_BINARY_FOR_GPU", "INVALID_PTX", "SHARED_OBJECT_INIT_FAILED")


class Hip(Vendor):
    name = "hip"
    platform = "amdgpu"
    backend = PlatformBackend.AMDGPU
    label = "AMDGPU"
    standin = hip_standin
    bindings = hip_standin.hip
    call_prefix = "hip"
    status_enum = hip_standin.hip.hipError_t
    driver_class = hip_driver.Driver
    device_class = AmdGpuDevice
    statuses = {
        "SUCCESS": "hipSuccess", "OUT_OF_MEMORY": "hipErrorOutOfMemory", "INVALID_VALUE": "hipErrorInvalidValue",
        "NOT_SUPPORTED": "hipErrorNotSupported", "NOT_FOUND": "hipErrorNotFound", "UNKNOWN": "hipErrorUnknown",
        "INVALID_HANDLE": "hipErrorInvalidHandle", "INVALID_DEVICE": "hipErrorInvalidDevice",
        "INVALID_CONTEXT": "hipErrorInvalidContext", "NOT_READY": "hipErrorNotReady", "NO_DEVICE": "hipErrorNoDevice",
        "INSUFFICIENT_DRIVER": "hipErrorInsufficientDriver", "INVALID_CONFIGURATION": "hipErrorInvalidConfiguration",
        "ILLEGAL_ADDRESS": "hipErrorIllegalAddress", "LAUNCH_OUT_OF_RESOURCES": "hipErrorLaunchOutOfResources",
        "LAUNCH_TIMEOUT": "hipErrorLaunchTimeOut", "ASSERT": "hipErrorAssert", "LAUNCH_FAILED": "hipErrorLaunchFailure",
        "ECC_UNCORRECTABLE": "hipErrorECCNotCorrectable", "INVALID_IMAGE": "hipErrorInvalidImage",
        "NO_BINARY_FOR_GPU": "hipErrorNoBinaryForGpu", "INVALID_KERNEL_FILE": "hipErrorInvalidKernelFile",
        "SHARED_OBJECT_INIT_FAILED": "hipErrorSharedObjectInitFailed",
        "HOST_MEMORY_ALREADY_REGISTERED": "hipErrorHostMemoryAlreadyRegistered",
    }
    own_calls = {
        "init": "hipInit", "driver_version": "hipDriverGetVersion", "device_count": "hipGetDeviceCount",
        "select": "hipSetDevice", "stream_create": "hipStreamCreateWithFlags",
        "event_create": "hipEventCreateWithFlags", "module_load": "hipModuleLoadData",
        "occupancy": "hipModuleOccupancyMaxPotentialBlockSize", "peer_can_access": "hipDeviceCanAccessPeer",
        "peer_enable": "hipDeviceEnablePeerAccess", "name_status": "hipGetErrorName",
        "explain_status": "hipGetErrorString",
    }
    nonblocking_stream = int(hip_standin.hip.hipStreamNonBlocking)
    default_event = int(hip_standin.hip.hipEventDefault)
    untimed_event = int(hip_standin.hip.hipEventDisableTiming)
    poisoned = "the process"
    sticky = ("ILLEGAL_ADDRESS", "LAUNCH_TIMEOUT", "ASSERT", "LAUNCH_FAILED", "ECC_UNCORRECTABLE")
    keeps_sticky_faults = True
    fills_idle_queue_at_once = True
    packages = ("hip", "hip.hip")
    no_bindings = r"hip-python is not installed \(.*\); install offloadrt\[amd\] to use AMD GPUs"
    install_advice = "install ROCm 6.0 or newer"
    stream_thread = "hip-standin-stream"
    no_host_pointers = {"CanUseHostPointerForRegisteredMem": 0}
    grid_y_attribute = int(hip_standin.hip.hipDeviceAttribute_t.hipDeviceAttributeMaxGridDimY)
    shared_memory_limit = 64 * 1024  # the default stand-in GPU's LDS per work-group
    items_per_axis = 0xFFFFFFFF  # HIP: gridDim * blockDim < 2**32 on every axis
    min_distinct_calls = 60

    def image(self, kernels: Sequence[str] = KERNELS) -> bytes:
        return amdgpu_fixtures.code_object(kernels=kernels)

    def selected(self, arguments: tuple[Any, ...]) -> int:
        (ordinal,) = arguments
        return int(ordinal)

    def select_elsewhere(self, ordinal: int) -> None:
        assert int(self.bindings.hipSetDevice(ordinal)[0]) == 0

    def alloc_arguments(self, kind: Any) -> tuple[Any, ...]:
        return {"DEVICE": (), "HOST": (self.bindings.hipHostMallocDefault,),
                "MANAGED": (self.bindings.hipMemAttachGlobal,)}[kind.name]

    def peer(self, device: api.Device) -> int:
        return amdgpu_fixtures.amd_device(device).device_id

    def enable_peer_access_elsewhere(self, device: int, peer: int) -> None:
        assert int(self.bindings.hipSetDevice(device)[0]) == 0
        assert int(self.bindings.hipDeviceEnablePeerAccess(peer, 0)[0]) == 0

    def register_elsewhere(self, host: int, size: int) -> None:
        assert int(self.bindings.hipHostRegister(host, size, 0)[0]) == 0

    def device_pointer_arguments(self, host: int) -> tuple[Any, ...]:
        return (host, 0)

    def occupancy_arguments(self, recorded: tuple[Any, ...]) -> tuple[Any, ...]:
        return recorded

    def memset32_value(self, value: int) -> int:
        return value - (1 << 32) if value >= 1 << 31 else value  # hipMemsetD32Async takes a C int

    def stream_is_idle(self, stream: int) -> bool:
        return int(self.bindings.hipStreamQuery(stream)[0]) == 0

    def standin_function(self, name: str) -> bool:
        return bool(getattr(getattr(self.bindings, name, None), "__hip_standin__", False))

    def replay(self, calls: Iterable[tuple[str, tuple[Any, ...]]]) -> list[Refusal]:
        return self.standin.replay_against_real(calls)

    def other_images(self) -> list[bytes | bytearray]:
        return [amdgpu_fixtures.bundle("gfx90a:xnack-"), bytearray(amdgpu_fixtures.code_object(xnack=False,
                                                                                                sramecc=True))]

    def refused_images(self) -> list[bytes]:
        return [amdgpu_fixtures.generic_code_object(), b"CCOB" + bytes(60)]  # the plugin lets the driver decide

    def start_failures(self) -> Iterator[ParameterSet]:
        yield pytest.param({"library_missing": True}, None,
                           "ROCm's HIP runtime (libamdhip64) was not found or could not be loaded "
                           "(failed to dlopen libamdhip64.so", id="library-missing")
        yield pytest.param({"init_error": self.status("NO_DEVICE")}, None, "hipInit: no AMD GPU is present",
                           id="no-device-error")
        yield pytest.param({"devices": 0}, None, "hipInit: no AMD GPU is present", id="zero-devices")
        yield pytest.param({"init_error": self.status("UNKNOWN")}, None,
                           "hipInit failed: hipErrorUnknown (unknown error)", id="init-fails")
        yield pytest.param({"init_error": self.status("INSUFFICIENT_DRIVER")}, None,
                           "hipInit failed: hipErrorInsufficientDriver", id="insufficient-driver")
        yield pytest.param({}, ("device_count", "NO_DEVICE"), "hipGetDeviceCount: no AMD GPU is present",
                           id="device-count-no-device")

    def start_calls(self) -> Iterator[ParameterSet]:
        yield pytest.param("hipDriverGetVersion", 0, id="driver-version")
        yield pytest.param("hipGetDeviceCount", 0, id="device-count")
        yield pytest.param("hipGetDeviceProperties", 1, id="second-device-properties")
        yield pytest.param("hipDeviceTotalMem", 0, id="total-memory")
        yield pytest.param("hipSetDevice", 0, id="set-device")

    def refused_image_statuses(self) -> tuple[str, ...]:
        return ("INVALID_IMAGE", "NO_BINARY_FOR_GPU", "INVALID_KERNEL_FILE", "SHARED_OBJECT_INIT_FAILED")


CUDA, HIP = Cuda(), Hip()
VENDORS = (CUDA, HIP)


def per_vendor(cases: Callable[[Vendor], Iterable[ParameterSet | tuple[Any, ...] | Any]]) -> list[ParameterSet]:
    """Parameters ``(vendor, *case)`` for each vendor and each of its ``cases(vendor)``, with ids
    ``<vendor>-<case id>``; use with ``indirect=["vendor"]``."""
    params = []
    for vendor in VENDORS:
        for case in cases(vendor):
            if isinstance(case, ParameterSet):
                values, case_id = tuple(case.values), case.id
            else:
                values = case if isinstance(case, tuple) else (case,)
                case_id = "-".join(str(getattr(v, "name", v)) for v in values)
            params.append(pytest.param(vendor, *values, id=f"{vendor.name}-{case_id}"))
    return params
