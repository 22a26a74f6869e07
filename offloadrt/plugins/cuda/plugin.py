"""The CUDA plugin: NVIDIA GPUs through the driver API of ``cuda-python`` (``cuda.bindings.driver``).

Each device retains its primary context and makes it current on the calling thread before
every driver call, so any Python thread can use any device. Streams, events, launches, fills
and host functions are the shared GPU logic of :mod:`..common.gpu`; this module adds what is CUDA's
own: contexts, allocation, device attributes, PTX/cubin/fatbin images and the shared-memory
opt-in.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ...errors import ErrorCode, OffloadError
from ...types import AllocType, DeviceInfo, Dimensions, PlatformBackend
from ..common import GenericDevice
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
from ..common.params import ParamLayout, layout
from . import driver as cd
from .images import compatible, image_kind
from .params import image_layouts

DEFAULT_SHARED_LIMIT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory
JIT_LOG_SIZE = 16 * 1024
MAX_PARAMS = 4096  # more than any kernel takes: CUDA limits a launch's parameters to 32 KiB


class CudaDevice(GpuDevice):
    """One NVIDIA GPU, used through its primary context."""

    DRIVER_CALLS: ClassVar[dict[str, str]] = {
        "alloc_device": "cuMemAlloc", "alloc_host": "cuMemAllocHost", "alloc_managed": "cuMemAllocManaged",
        "free_device": "cuMemFree", "free_host": "cuMemFreeHost",
        "memcpy_htod": "cuMemcpyHtoDAsync", "memcpy_dtoh": "cuMemcpyDtoHAsync", "memcpy_dtod": "cuMemcpyDtoDAsync",
        "memcpy_peer": "cuMemcpyPeerAsync",
        "memset8": "cuMemsetD8Async", "memset16": "cuMemsetD16Async", "memset32": "cuMemsetD32Async",
        "memset2d8": "cuMemsetD2D8Async", "memset2d16": "cuMemsetD2D16Async", "memset2d32": "cuMemsetD2D32Async",
        "module_unload": "cuModuleUnload", "module_get_function": "cuModuleGetFunction",
        "module_get_global": "cuModuleGetGlobal", "launch": "cuLaunchKernel",
        "stream_destroy": "cuStreamDestroy", "stream_sync": "cuStreamSynchronize", "stream_query": "cuStreamQuery",
        "stream_wait_event": "cuStreamWaitEvent", "host_func": "cuLaunchHostFunc",
        "event_destroy": "cuEventDestroy", "event_record": "cuEventRecord", "event_sync": "cuEventSynchronize",
        "event_query": "cuEventQuery", "event_elapsed": "cuEventElapsedTime",
        "host_register": "cuMemHostRegister", "host_unregister": "cuMemHostUnregister",
        "host_device_pointer": "cuMemHostGetDevicePointer",
    }
    HOST_REGISTER_FLAGS = ("CU_MEMHOSTREGISTER_PORTABLE", "CU_MEMHOSTREGISTER_DEVICEMAP")
    label = "CUDA"
    default_shared_limit = DEFAULT_SHARED_LIMIT
    # .cell.token: the CUcontext value made current; .cell: the launch buffers too
    thread_state: ClassVar[ThreadState] = ThreadState(cd.CU_LAUNCH_PARAM_BUFFER_POINTER,
                                                     cd.CU_LAUNCH_PARAM_BUFFER_SIZE, cd.CU_LAUNCH_PARAM_END)
    peer_limit_statuses = (711,)  # CUDA_ERROR_TOO_MANY_PEERS
    peer_enable_call = "cuCtxEnablePeerAccess"

    def __init__(self, plugin: CudaPlugin, device_id: int):
        super().__init__(plugin, device_id, plugin.driver)
        self.context: Any = None
        self.context_value = 0  # the CUcontext as an int: the thread's current-device token
        self.cc = (0, 0)

    # ---- context ---------------------------------------------------------------------------
    def _make_current(self) -> None:
        self.check(self.d.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _init_impl(self) -> None:
        d = self.d
        self.handle = self.check(d.cuDeviceGet(self.device_id), "cuDeviceGet")
        _flags, active = self.check(d.cuDevicePrimaryCtxGetState(self.handle), "cuDevicePrimaryCtxGetState")
        if not active:
            # Block (not spin) in synchronising calls, as LLVM's plugin does.
            self.check(d.cuDevicePrimaryCtxSetFlags(self.handle, d.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC),
                       "cuDevicePrimaryCtxSetFlags")
        self.context = self.check(d.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self.context_value = self.current_token = int(self.context)
        self.enter()

    def _release_device(self) -> None:
        self.check(self.d.cuDevicePrimaryCtxRelease(self.handle), "cuDevicePrimaryCtxRelease")

    def attribute(self, name: str) -> int:
        attr = getattr(self.d.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(self.check(self.d.cuDeviceGetAttribute(attr, self.handle), f"cuDeviceGetAttribute({name})"))

    def _obtain_info_impl(self) -> dict[DeviceInfo, Any]:
        d = self.d
        a = self.attribute
        name = self.check(d.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        name = name.split(b"\0", 1)[0].decode(errors="replace").strip()
        uuid = bytes(self.check(d.cuDeviceGetUuid(self.handle), "cuDeviceGetUuid").bytes)
        hexed = uuid.hex()
        uid = f"GPU-{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:32]}"
        total = int(self.check(d.cuDeviceTotalMem(self.handle), "cuDeviceTotalMem"))
        self.cc = (a("COMPUTE_CAPABILITY_MAJOR"), a("COMPUTE_CAPABILITY_MINOR"))
        version = self.plugin.version()
        block = Dimensions(a("MAX_BLOCK_DIM_X"), a("MAX_BLOCK_DIM_Y"), a("MAX_BLOCK_DIM_Z"))
        grid = Dimensions(a("MAX_GRID_DIM_X"), a("MAX_GRID_DIM_Y"), a("MAX_GRID_DIM_Z"))
        self.max_grid_dims = (grid.x, grid.y, grid.z)
        max_threads = a("MAX_THREADS_PER_BLOCK")
        shared = max(a("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"), a("MAX_SHARED_MEMORY_PER_BLOCK"))
        info = gpu_info(name=name, product_name=name, uid=uid, vendor="NVIDIA Corporation", vendor_id=0x10DE,
                        driver_version=version, max_threads=max_threads, block=block, grid=grid,
                        compute_units=a("MULTIPROCESSOR_COUNT"), clock_khz=a("CLOCK_RATE"),
                        memory_clock_khz=a("MEMORY_CLOCK_RATE"), memory=total, local_memory=shared,
                        half=self.cc >= (5, 3))
        self.details = [
            ("Compute Capability", f"{self.cc[0]}.{self.cc[1]} (sm_{self.cc[0]}{self.cc[1]})", ""),
            ("Warp Size", a("WARP_SIZE"), ""),
            ("Max Threads Per Multiprocessor", a("MAX_THREADS_PER_MULTIPROCESSOR"), ""),
            ("Max Grid Dimensions", grid, ""),
            ("Shared Memory Per Block", a("MAX_SHARED_MEMORY_PER_BLOCK"), "B"),
            ("Shared Memory Per Block Opt-in", shared, "B"),
            ("L2 Cache Size", a("L2_CACHE_SIZE"), "B"),
            ("Memory Bus Width", a("GLOBAL_MEMORY_BUS_WIDTH"), "bits"),
            ("PCI Bus ID", f"{a('PCI_DOMAIN_ID'):04x}:{a('PCI_BUS_ID'):02x}:{a('PCI_DEVICE_ID'):02x}", ""),
            ("Unified Addressing", bool(a("UNIFIED_ADDRESSING")), ""),
            ("Managed Memory", bool(a("MANAGED_MEMORY")), ""),
        ]
        return info


    # ---- memory ----------------------------------------------------------------------------
    def _alloc_flags(self, kind: AllocType) -> tuple[Any, ...]:
        return (self.d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL,) if kind == AllocType.MANAGED else ()

    @property
    def peer_handle(self) -> Any:
        return self.context

    def _pointer_facts(self, ptr: int) -> PointerFacts | None:
        """``cuPointerGetAttribute``: the memory type, the device ordinal, whether it is managed, and
        the host address of page-locked memory; None where the driver answers
        CUDA_ERROR_INVALID_VALUE (memory it did not allocate, map or register)."""
        d = self.d
        attr = d.CUpointer_attribute
        found = d.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
        if int(found[0]) == cd.INVALID_VALUE_STATUS:
            return None
        memory_type = int(self.check(found, "cuPointerGetAttribute(MEMORY_TYPE)"))
        ordinal = int(self.check(d.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr),
                                 "cuPointerGetAttribute(DEVICE_ORDINAL)"))
        managed = bool(self.check(d.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr),
                                  "cuPointerGetAttribute(IS_MANAGED)"))
        types = d.CUmemorytype
        name = next((t.name for t in types if int(t) == memory_type), f"CUmemorytype {memory_type}")
        if managed:
            return PointerFacts(AllocType.MANAGED, ordinal, ptr, "managed")
        if memory_type == int(types.CU_MEMORYTYPE_DEVICE):
            return PointerFacts(AllocType.DEVICE, ordinal, 0, name)
        if memory_type == int(types.CU_MEMORYTYPE_HOST):
            host = self.check(d.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_HOST_POINTER, ptr),
                              "cuPointerGetAttribute(HOST_POINTER)")
            return PointerFacts(AllocType.HOST, ordinal, int(host), name)
        return PointerFacts(None, ordinal, 0, name)  # a CUDA array, or a type newer than this code

    def _can_access_peer(self, peer: GpuDeviceCore) -> bool:
        assert isinstance(peer, CudaDevice)
        return bool(self.check(self.d.cuDeviceCanAccessPeer(self.handle, peer.handle), "cuDeviceCanAccessPeer"))

    def _enable_peer_access(self, peer: GpuDeviceCore) -> int:
        assert isinstance(peer, CudaDevice)
        return int(self.d.cuCtxEnablePeerAccess(peer.context, 0)[0])

    # ---- programs --------------------------------------------------------------------------
    def _is_valid_binary_impl(self, image: bytes) -> bool:
        return compatible(image, *self.cc)[0]

    def _load_binary_impl(self, image: bytes) -> DeviceImage:
        d = self.enter(select=True)
        kind = image_kind(image)
        if kind is None:
            raise OffloadError(ErrorCode.INVALID_BINARY, "not a CUDA image (PTX text, cubin or fatbin)")
        data = image + b"\0" if kind == "ptx" and not image.endswith(b"\0") else image
        log = b"\0" * JIT_LOG_SIZE  # the bindings hand this buffer to the driver, which writes the JIT log
        options = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        result = d.cuModuleLoadDataEx(data, len(options), options, [log, JIT_LOG_SIZE])
        status = int(result[0])
        if status != cd.SUCCESS:
            err = self.failure(status, "cuModuleLoadDataEx")
            text = log.split(b"\0", 1)[0].decode(errors="replace").strip()
            if text:
                err.details += f"; JIT log: {text}"
            raise err
        return GpuImage(self, image, result[1])

    # ---- kernels ---------------------------------------------------------------------------
    def _driver_param_layout(self, function: Any) -> ParamLayout | None:
        """``cuFuncGetParamInfo`` for each parameter until ``CUDA_ERROR_INVALID_VALUE`` (past the last);
        None where the driver or the bindings lack it (before CUDA 12.4) or it answers otherwise."""
        info = getattr(self.d, "cuFuncGetParamInfo", None)
        if info is None:
            return None
        params: list[tuple[int, int]] = []
        try:
            while len(params) <= MAX_PARAMS:
                result = info(function, len(params))
                status = int(result[0])
                if status == cd.INVALID_VALUE_STATUS:
                    break
                if status != cd.SUCCESS:
                    return None  # e.g. CUDA_ERROR_NOT_SUPPORTED: the image says, if anything does
                params.append((int(result[1]), int(result[2])))
            else:
                return None
            return layout(params)
        except (RuntimeError, TypeError, ValueError):  # the bindings found no such driver entry point
            return None

    def _image_layouts(self, image: bytes) -> dict[str, ParamLayout]:
        return image_layouts(image)

    def _raise_shared_limit(self, kernel: GpuKernel, size: int) -> None:
        attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.check(self.d.cuFuncSetAttribute(kernel.function, attr, size), "cuFuncSetAttribute")

    def _optimal_occupancy_impl(self, kernel: GenericKernel, shared_memory: int) -> int:
        assert isinstance(kernel, GpuKernel)
        d = self.enter()
        _grid, block = self.check(d.cuOccupancyMaxPotentialBlockSize(kernel.function, None, shared_memory, 0),
                                  "cuOccupancyMaxPotentialBlockSize")
        return int(block)

    # ---- streams, events, host functions ---------------------------------------------------
    def _new_stream(self) -> Any:
        d = self.d
        return self.check(d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")

    def _new_event(self, timed: bool) -> Any:
        flags = self.d.CUevent_flags
        return self.check(self.d.cuEventCreate(flags.CU_EVENT_DEFAULT if timed else flags.CU_EVENT_DISABLE_TIMING),
                          "cuEventCreate")

    def _host_function_argument(self) -> Any:
        return self.d.CUhostFn(HOST_TRAMPOLINE_ADDRESS)


class CudaPlugin(GpuPlugin):
    """NVIDIA GPUs; present only when cuda-bindings imports and ``cuInit`` succeeds."""

    name = "cuda"
    backend = PlatformBackend.CUDA
    vendor_name = "NVIDIA Corporation"
    device_class = CudaDevice
    no_device_message = "no CUDA-capable device is present"
    install_hint = "install the NVIDIA driver (it provides libcuda.so.1); the CUDA toolkit is not needed"

    def _init_impl(self) -> int:
        # cuda.pathfinder finds libcuda on the first call
        self.start_driver(cd.Driver(cd.load_driver()), lambda: self.driver.module.cuInit(0), "cuInit",
                          "the NVIDIA driver library (libcuda)")
        d = self.driver.module
        version = int(self.driver.check(d.cuDriverGetVersion(), "cuDriverGetVersion"))
        self._version = f"CUDA {version // 1000}.{version % 1000 // 10} (driver API {version})"
        return int(self.driver.check(d.cuDeviceGetCount(), "cuDeviceGetCount"))

    def _create_device(self, device_id: int) -> GenericDevice:
        return CudaDevice(self, device_id)
