"""The AMDGPU plugin: AMD GPUs through the HIP runtime, called via AMD's hip-python (``from hip import hip``).

HIP keeps a current device per thread; every operation makes its device current first
(``hipSetDevice``, cached per thread), so any Python thread can use any device. Streams, events,
launches, fills and host functions are the shared GPU logic of :mod:`..common.gpu`; this module adds
what is HIP's own: allocation, device properties, peer access, and AMDGPU code objects, whose
processor and features are checked against the device's ``gcnArchName`` before loading.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ...errors import ErrorCode, OffloadError
from ...types import AllocType, DeviceInfo, Dimensions, PlatformBackend
from ..common import GenericDevice, PluginUnavailable
from ..common.gpu import (
    HOST_TRAMPOLINE_ADDRESS,
    GpuDevice,
    GpuDeviceCore,
    GpuImage,
    GpuKernel,
    GpuPlugin,
    ThreadState,
    gpu_info,
)
from ..common.gpu.pointers import PointerFacts
from ..common.image import DeviceImage, GenericKernel
from ..common.params import ParamLayout
from ..common.resources import AsyncInfo
from . import driver as hd
from .images import compatible, parse_target_id
from .metadata import image_layouts


class AmdGpuDevice(GpuDevice):
    """One AMD GPU, selected with ``hipSetDevice`` on each thread that uses it."""

    DRIVER_CALLS: ClassVar[dict[str, str]] = {
        "alloc_device": "hipMalloc", "alloc_host": "hipHostMalloc", "alloc_managed": "hipMallocManaged",
        "free_device": "hipFree", "free_host": "hipHostFree",
        "memcpy_htod": "hipMemcpyHtoDAsync", "memcpy_dtoh": "hipMemcpyDtoHAsync",
        "memcpy_dtod": "hipMemcpyDtoDAsync", "memcpy_peer": "hipMemcpyPeerAsync",
        "memset8": "hipMemsetD8Async", "memset16": "hipMemsetD16Async", "memset32": "hipMemsetD32Async",
        "memset2d8": "hipMemsetD2D8Async", "memset2d16": "hipMemsetD2D16Async",
        "memset2d32": "hipMemsetD2D32Async",
        "module_unload": "hipModuleUnload", "module_get_function": "hipModuleGetFunction",
        "module_get_global": "hipModuleGetGlobal", "launch": "hipModuleLaunchKernel",
        "stream_destroy": "hipStreamDestroy", "stream_sync": "hipStreamSynchronize",
        "stream_query": "hipStreamQuery", "stream_wait_event": "hipStreamWaitEvent",
        "host_func": "hipLaunchHostFunc",
        "event_destroy": "hipEventDestroy", "event_record": "hipEventRecord", "event_sync": "hipEventSynchronize",
        "event_query": "hipEventQuery", "event_elapsed": "hipEventElapsedTime",
        "host_register": "hipHostRegister", "host_unregister": "hipHostUnregister",
        "host_device_pointer": "hipHostGetDevicePointer",
    }
    HOST_REGISTER_FLAGS = ("hipHostRegisterPortable", "hipHostRegisterMapped")
    label = "AMDGPU"
    peer_enable_call = "hipDeviceEnablePeerAccess"
    # .cell.token: the device made current; .cell: the launch buffers too
    thread_state: ClassVar[ThreadState] = ThreadState(hd.HIP_LAUNCH_PARAM_BUFFER_POINTER,
                                                     hd.HIP_LAUNCH_PARAM_BUFFER_SIZE, hd.HIP_LAUNCH_PARAM_END)
    # hipModuleLaunchKernel refuses a block larger than the kernel's launch bounds with status 719
    # (hd.LAUNCH_FAILURE), which a sync reports for a faulted kernel: here a wrong launch, not a fault.
    launch_refusals: ClassVar[frozenset[int]] = frozenset({hd.LAUNCH_FAILURE})
    # HIP has no way to reset one device's state in place: as for CUDA, a re-initialisation of
    # offloadrt does not clear a fault the runtime still holds. On ROCm a GPU memory fault normally
    # aborts the process (HSA's default handler); these paths serve runtimes that report faults.
    sticky_recovery = ("for the rest of this process: HIP cannot reset a faulted device in place (not even "
                       "through olShutDown and olInit), so the process must be restarted")

    def __init__(self, plugin: AmdGpuPlugin, device_id: int):
        super().__init__(plugin, device_id, plugin.driver)
        self.arch = ""  # gcnArchName, e.g. "gfx90a:sramecc+:xnack-"
        self.max_items_per_dim = 0xFFFFFFFF  # HIP: gridDim * blockDim < 2**32 on every axis
        self.props: Any = None
        self.extra_wrapper, self.no_kernel_params = hd.launch_wrappers(self.d)

    # ---- device selection ------------------------------------------------------------------
    def _make_current(self) -> None:
        self.check(self.d.hipSetDevice(self.device_id), "hipSetDevice")

    def _init_impl(self) -> None:
        # A fresh token per start: threads that selected this device before a re-initialisation
        # select it again, rather than trusting a runtime that may have been restarted since.
        self.current_token = object()
        d = self.enter()
        # Block (not spin) in synchronising calls, as the CUDA plugin does; a device already in use
        # keeps its flags (status 708, set on an active process), which only costs CPU time.
        status = int(d.hipSetDeviceFlags(d.hipDeviceScheduleBlockingSync)[0])
        if status not in (hd.SUCCESS, hd.SET_ON_ACTIVE_PROCESS):
            raise self.failure(status, "hipSetDeviceFlags")
        try:
            props = d.hipGetDeviceProperties(self.device_id)
        except RuntimeError as exc:  # hip-python binds the R0600 variant of this call, new in ROCm 6.0
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"hipGetDeviceProperties: this HIP runtime lacks it ({exc}); ROCm 6.0 or newer "
                               f"is needed") from None
        self.props = self.check(props, "hipGetDeviceProperties")
        self.arch = str(self.props.gcnArchName)

    # ---- info ------------------------------------------------------------------------------
    def _obtain_info_impl(self) -> dict[DeviceInfo, Any]:
        p = self.props
        processor, _features = parse_target_id(self.arch)
        total = int(self.check(self.d.hipDeviceTotalMem(self.device_id), "hipDeviceTotalMem"))
        block = Dimensions(*(int(v) for v in list(p.maxThreadsDim)[:3]))
        grid = Dimensions(*(int(v) for v in list(p.maxGridSize)[:3]))
        max_threads = int(p.maxThreadsPerBlock)
        self.max_grid_dims = (grid.x, grid.y, grid.z)
        info = gpu_info(name=processor,  # as LLVM's AMDGPU plugin: the processor; the marketing name next
                        product_name=str(p.name).strip() or processor, uid=_uid(p.uuid), vendor="AMD",
                        vendor_id=0x1002, driver_version=self.plugin.version(), max_threads=max_threads,
                        block=block, grid=grid, compute_units=int(p.multiProcessorCount), clock_khz=int(p.clockRate),
                        memory_clock_khz=int(p.memoryClockRate), memory=total,
                        local_memory=int(p.sharedMemPerBlock), half=True)
        self.details = [
            ("GCN Architecture", self.arch, ""),
            ("Wavefront Size", int(p.warpSize), ""),
            ("Max Threads Per Compute Unit", int(p.maxThreadsPerMultiProcessor), ""),
            ("Max Grid Dimensions", grid, ""),
            ("LDS Per Work Group", int(p.sharedMemPerBlock), "B"),
            ("L2 Cache Size", int(p.l2CacheSize), "B"),
            ("Memory Bus Width", int(p.memoryBusWidth), "bits"),
            ("PCI Bus ID", f"{int(p.pciDomainID):04x}:{int(p.pciBusID):02x}:{int(p.pciDeviceID):02x}", ""),
            ("Managed Memory", bool(int(p.managedMemory)), ""),
        ]
        return info

    # ---- memory ----------------------------------------------------------------------------
    def _alloc_flags(self, kind: AllocType) -> tuple[Any, ...]:
        if kind == AllocType.HOST:
            return (self.d.hipHostMallocDefault,)
        return (self.d.hipMemAttachGlobal,) if kind == AllocType.MANAGED else ()

    @property
    def peer_handle(self) -> Any:
        return self.device_id

    def _memset_value(self, width: int, value: int) -> int:
        # hipMemsetD32Async takes a C int: the same 32 bits, read as signed.
        return value - (1 << 32) if width == 4 and value >= 1 << 31 else value

    def _data_fill_impl(self, ptr: int, pattern: bytes, size: int, queue: AsyncInfo | None) -> None:
        """As LLVM's AMDGPU plugin: a fill on an idle queue is finished when the call returns.

        Asking HIP whether the queue is idle may report a fault of earlier work, once: the
        queue fails with it (as any query does) instead of losing it.
        """
        self.enter()
        idle = queue is not None and not self.has_pending_work(queue)
        if queue is not None and queue.failure is not None:
            raise queue.queue_error()
        super()._data_fill_impl(ptr, pattern, size, queue)
        if idle:
            assert queue is not None
            self.synchronize(queue, release=False)

    def _pointer_facts(self, ptr: int) -> PointerFacts | None:
        """``hipPointerGetAttributes``: the memory type, the device and the host address; None for
        memory HIP does not know (ROCm 6 answers success with an "unregistered" type, ROCm 5
        hipErrorInvalidValue)."""
        d = self.d
        found = d.hipPointerGetAttributes(ptr)
        if int(found[0]) in hd.INVALID_VALUE:
            return None
        attributes = self.check(found, "hipPointerGetAttributes")
        types = d.hipMemoryType
        memory_type = int(attributes.type)
        name = next((t.name for t in types if int(t) == memory_type), f"hipMemoryType {memory_type}")
        if memory_type == int(types.hipMemoryTypeUnregistered):
            return None
        ordinal = int(attributes.device)
        if memory_type == int(types.hipMemoryTypeDevice):
            return PointerFacts(AllocType.DEVICE, ordinal, 0, name)
        if memory_type == int(types.hipMemoryTypeManaged):
            return PointerFacts(AllocType.MANAGED, ordinal, ptr, name)
        if memory_type == int(types.hipMemoryTypeHost):
            return PointerFacts(AllocType.HOST, ordinal, int(attributes.hostPointer), name)
        return PointerFacts(None, ordinal, 0, name)  # an array, unified memory, or a type newer than this code

    def _can_access_peer(self, peer: GpuDeviceCore) -> bool:
        return bool(self.check(self.d.hipDeviceCanAccessPeer(self.device_id, peer.device_id),
                               "hipDeviceCanAccessPeer"))

    def _enable_peer_access(self, peer: GpuDeviceCore) -> int:
        return int(self.d.hipDeviceEnablePeerAccess(peer.device_id, 0)[0])  # for the current device (self)

    # ---- programs --------------------------------------------------------------------------
    def _is_valid_binary_impl(self, image: bytes) -> bool:
        return compatible(image, self.arch)[0]

    def _load_binary_impl(self, image: bytes) -> DeviceImage:
        ok, why = compatible(image, self.arch)
        if not ok:
            raise OffloadError(ErrorCode.INVALID_BINARY, why)
        d = self.enter(select=True)
        # The image keeps these very bytes alive as long as the module exists.
        module = self.check(d.hipModuleLoadData(image), "hipModuleLoadData")
        return GpuImage(self, image, module)

    # ---- kernels ---------------------------------------------------------------------------
    def _image_layouts(self, image: bytes) -> dict[str, ParamLayout]:
        """HIP has no query of a kernel's parameters: they come from the code object's metadata
        (its explicit arguments, without the hidden ones HIP appends itself)."""
        return image_layouts(image, self.arch)

    def _optimal_occupancy_impl(self, kernel: GenericKernel, shared_memory: int) -> int:
        assert isinstance(kernel, GpuKernel)
        d = self.enter()
        _grid, block = self.check(d.hipModuleOccupancyMaxPotentialBlockSize(kernel.function, shared_memory, 0),
                                  "hipModuleOccupancyMaxPotentialBlockSize")
        return int(block)

    # ---- streams, events, host functions ---------------------------------------------------
    def _new_stream(self) -> Any:
        return self.check(self.d.hipStreamCreateWithFlags(self.d.hipStreamNonBlocking), "hipStreamCreateWithFlags")

    def _new_event(self, timed: bool) -> Any:
        d = self.d
        return self.check(d.hipEventCreateWithFlags(d.hipEventDefault if timed else d.hipEventDisableTiming),
                          "hipEventCreateWithFlags")

    def _host_function_argument(self) -> Any:
        return hd.host_function(self.d, HOST_TRAMPOLINE_ADDRESS)


def _uid(uuid: Any) -> str:
    """HIP's 16-byte device UUID as text: AMD's are ASCII already (``GPU-`` prefixed, as ``rocm-smi``)."""
    raw = bytes(getattr(uuid, "bytes", b"") or b"")
    text = raw.rstrip(b"\0")
    if text and all(0x20 < c < 0x7F for c in text):
        return "GPU-" + text.decode()
    return "GPU-" + raw.hex()


class AmdGpuPlugin(GpuPlugin):
    """AMD GPUs; present only when hip-python imports, ``libamdhip64`` loads and ``hipInit`` succeeds."""

    name = "amdgpu"
    backend = PlatformBackend.AMDGPU
    vendor_name = "Advanced Micro Devices, Inc."
    device_class = AmdGpuDevice
    no_device_message = "no AMD GPU is present"
    install_hint = ("install ROCm 6.0 or newer (https://rocm.docs.amd.com), or add the folder holding "
                    "libamdhip64.so to LD_LIBRARY_PATH")

    def _init_impl(self) -> int:
        # hip-python binds libamdhip64.so on the first call
        self.start_driver(hd.Driver(hd.load_driver()), lambda: self.driver.module.hipInit(0), "hipInit",
                          "ROCm's HIP runtime (libamdhip64)")
        d = self.driver.module
        version = int(self.driver.check(d.hipDriverGetVersion(), "hipDriverGetVersion"))
        # HIP encodes versions as major * 10**7 + minor * 10**5 + patch.
        self._version = f"HIP {version // 10_000_000}.{version // 100_000 % 100}.{version % 100_000}"
        status, count = d.hipGetDeviceCount()[:2]
        if int(status) == hd.NO_DEVICE:
            raise PluginUnavailable(f"hipGetDeviceCount: {self.no_device_message}")
        return int(self.driver.check((status, count), "hipGetDeviceCount"))

    def _create_device(self, device_id: int) -> GenericDevice:
        return AmdGpuDevice(self, device_id)
