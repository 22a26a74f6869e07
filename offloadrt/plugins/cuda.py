"""The CUDA plugin: NVIDIA GPUs through the driver API of ``cuda-python`` (``cuda.bindings.driver``).

Each device retains its primary context and makes it current on the calling thread before
every driver call, so any Python thread can use any device. Streams and events come from
per-device pools. A kernel fault that poisons the context (a "sticky" error such as an
illegal address) is remembered: every later call on that device fails at once, saying the
device must be re-initialised (``olShutDown`` then ``olInit``).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from collections.abc import Callable
from typing import Any

from ..errors import ErrorCode, OffloadError
from ..types import AllocType, DeviceInfo, DeviceType, Dimensions, FpCapabilityFlag, PlatformBackend
from . import cuda_driver as cd
from .cuda_images import compatible, image_kind
from .image import DeviceImage, GenericKernel, GlobalVariable
from .interface import Dim3, GenericDevice, GenericPlugin, PluginUnavailable
from .resources import AsyncInfo, GenericEvent, ResourcePool

UINT32_MAX = 0xFFFFFFFF
DEFAULT_SHARED_LIMIT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory
JIT_LOG_SIZE = 16 * 1024

_current = threading.local()  # .context: the CUcontext value this thread last made current


class CudaStream(AsyncInfo):
    """A stream, and the events of other devices it was told to wait for since its last sync."""

    __slots__ = ("stream", "waited")

    def __init__(self, device: CudaDevice, stream: Any):
        super().__init__(device)
        self.stream = stream
        self.waited: list[CudaEvent] = []


class CudaEvent(GenericEvent):
    __slots__ = ("event", "queue")

    def __init__(self, device: CudaDevice, event: Any):
        super().__init__(device)
        self.event = event
        self.queue: AsyncInfo | None = None


class CudaImage(DeviceImage):
    def __init__(self, device: CudaDevice, image: bytes, module: Any):
        super().__init__(device, image)
        self.module = module


class CudaKernel(GenericKernel):
    __slots__ = ("function", "shared_limit", "lock")

    def __init__(self, image: CudaImage, name: str, function: Any):
        super().__init__(image, name)
        self.function = function
        self.shared_limit = DEFAULT_SHARED_LIMIT  # the dynamic shared memory the driver allows now
        self.lock = threading.Lock()  # guards shared_limit and the attribute it mirrors: it only rises


# ---- host functions ---------------------------------------------------------------------------
# The driver calls one C trampoline with an integer key; the key finds the Python callback. The
# trampoline holds the GIL only while the callback runs, and our driver calls release it, so a
# thread waiting in cuStreamSynchronize never blocks a host function (no GIL deadlock).

_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_host_calls: dict[int, tuple[Callable[[Any], object], Any, AsyncInfo]] = {}
_host_keys = itertools.count(1)


def _run_host_call(key: int | None) -> None:
    entry = _host_calls.pop(key or 0, None)
    if entry is None:
        return
    callback, user_data, queue = entry
    if queue.failure is not None:
        return  # the queue failed before this point: later host work does not run
    try:
        callback(user_data)
    except BaseException as exc:  # noqa: BLE001  # the queue fails; the driver thread goes on
        err = OffloadError(ErrorCode.UNKNOWN, f"host function raised {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        queue.fail(err)


_HOST_TRAMPOLINE = _HOST_FN_TYPE(_run_host_call)
_HOST_TRAMPOLINE_ADDRESS = ctypes.cast(_HOST_TRAMPOLINE, ctypes.c_void_p).value


class _LaunchBuffers(threading.local):
    """Per-thread memory for cuLaunchKernel's ``extra`` array and the copied argument blob."""

    def __init__(self) -> None:
        self.size = ctypes.c_size_t(0)
        self.capacity = 256
        self.blob = ctypes.create_string_buffer(self.capacity)
        self.extra = (ctypes.c_void_p * 5)(cd.CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(self.blob),
                                           cd.CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self.size),
                                           cd.CU_LAUNCH_PARAM_END)
        self.address = ctypes.addressof(self.extra)

    def pack(self, args: bytes) -> int:
        """The ``extra`` address for ``args`` (the driver copies the blob during the call)."""
        size = len(args)
        if size > self.capacity:
            self.capacity = max(size, 2 * self.capacity)
            self.blob = ctypes.create_string_buffer(self.capacity)
            self.extra[1] = ctypes.addressof(self.blob)
        ctypes.memmove(self.blob, args, size)
        self.size.value = size
        return self.address


_launch_buffers = _LaunchBuffers()


class CudaDevice(GenericDevice):
    """One NVIDIA GPU, used through its primary context."""

    def __init__(self, plugin: CudaPlugin, device_id: int):
        super().__init__(plugin, device_id)
        self.driver = plugin.driver
        self.d = plugin.driver.module
        self.sticky: OffloadError | None = None
        self.context: Any = None
        self.context_value = 0
        self.cc = (0, 0)
        self.peers: dict[int, bool] = {}  # peer device id -> direct access enabled
        self._peer_lock = threading.Lock()  # guards peers
        # Events the user never destroyed die with the primary context at de-init: no warning.
        self.event_pool: ResourcePool[Any] = ResourcePool("event", self._create_cu_event, self._destroy_cu_event,
                                                          warn_missing=False)

    # ---- driver access ---------------------------------------------------------------------
    def check(self, result: Any, call: str) -> Any:
        """Unpack a driver result; a failure raises, and a sticky one poisons the device."""
        status = int(result[0])
        if status == cd.SUCCESS:
            return result[1] if len(result) == 2 else result[1:]
        raise self.failure(status, call)

    def failure(self, status: int, call: str) -> OffloadError:
        err = self.driver.error(status, call)
        if status in cd.STICKY:
            if self.sticky is None:
                self.sticky = OffloadError(
                    ErrorCode.BACKEND_FAILURE,
                    f"CUDA device {self.device_id} hit a sticky error ({self.driver.name(status)} in {call}); "
                    f"its context is unusable until the device is re-initialised (olShutDown, then olInit)")
            err.details += " (sticky: the device must be re-initialised)"
        return err

    def enter(self) -> Any:
        """Fail fast on a poisoned device, make its context current on this thread; return the driver."""
        if self.sticky is not None:
            raise self.sticky
        if getattr(_current, "context", None) != self.context_value:
            self.check(self.d.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            _current.context = self.context_value
        return self.d

    # ---- lifecycle -------------------------------------------------------------------------
    def _init_impl(self) -> None:
        d = self.d
        self.handle = self.check(d.cuDeviceGet(self.device_id), "cuDeviceGet")
        _flags, active = self.check(d.cuDevicePrimaryCtxGetState(self.handle), "cuDevicePrimaryCtxGetState")
        if not active:
            # Block (not spin) in synchronising calls, as LLVM's plugin does.
            self.check(d.cuDevicePrimaryCtxSetFlags(self.handle, d.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC),
                       "cuDevicePrimaryCtxSetFlags")
        self.context = self.check(d.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self.context_value = int(self.context)
        self.enter()

    def _deinit_impl(self) -> None:
        errors = self.event_pool.deinit()
        # Host functions the driver will never run (behind a fault) must not keep their data alive.
        for key, entry in list(_host_calls.items()):
            if entry[2].device is self:
                _host_calls.pop(key, None)
        if getattr(_current, "context", None) == self.context_value:
            _current.context = None
        try:
            self.check(self.d.cuDevicePrimaryCtxRelease(self.handle), "cuDevicePrimaryCtxRelease")
        except OffloadError as exc:
            errors.append(exc)
        if errors:
            raise OffloadError.join(errors, f"releasing CUDA device {self.device_id}")

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
        max_threads = a("MAX_THREADS_PER_BLOCK")
        shared = max(a("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"), a("MAX_SHARED_MEMORY_PER_BLOCK"))
        full = FpCapabilityFlag(0x7F)  # IEEE 754 with FMA: everything but SOFT_FLOAT
        half = self.cc >= (5, 3)

        def work(g: int, b: int) -> int:
            return min(UINT32_MAX, g * b)

        info: dict[DeviceInfo, Any] = {
            DeviceInfo.TYPE: DeviceType.GPU,
            DeviceInfo.NAME: name,
            DeviceInfo.PRODUCT_NAME: name,
            DeviceInfo.UID: uid,
            DeviceInfo.VENDOR: "NVIDIA Corporation",
            DeviceInfo.DRIVER_VERSION: version,
            DeviceInfo.MAX_WORK_GROUP_SIZE: max_threads,
            DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: block,
            DeviceInfo.MAX_WORK_SIZE: work(grid.x, max_threads),
            DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(work(grid.x, block.x), work(grid.y, block.y),
                                                               work(grid.z, block.z)),
            DeviceInfo.VENDOR_ID: 0x10DE,
            DeviceInfo.NUM_COMPUTE_UNITS: a("MULTIPROCESSOR_COUNT"),
            DeviceInfo.MAX_CLOCK_FREQUENCY: a("CLOCK_RATE") // 1000,
            DeviceInfo.MEMORY_CLOCK_RATE: a("MEMORY_CLOCK_RATE") // 1000,
            DeviceInfo.ADDRESS_BITS: 64,
            DeviceInfo.MAX_MEM_ALLOC_SIZE: total,
            DeviceInfo.GLOBAL_MEM_SIZE: total,
            DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: shared,
            DeviceInfo.SINGLE_FP_CONFIG: full,
            DeviceInfo.DOUBLE_FP_CONFIG: full,
            DeviceInfo.HALF_FP_CONFIG: FpCapabilityFlag(0x5E) if half else FpCapabilityFlag(0),
            DeviceInfo.NATIVE_VECTOR_WIDTH_CHAR: 1,
            DeviceInfo.NATIVE_VECTOR_WIDTH_SHORT: 1,
            DeviceInfo.NATIVE_VECTOR_WIDTH_INT: 1,
            DeviceInfo.NATIVE_VECTOR_WIDTH_LONG: 1,
            DeviceInfo.NATIVE_VECTOR_WIDTH_FLOAT: 1,
            DeviceInfo.NATIVE_VECTOR_WIDTH_DOUBLE: 1,
            DeviceInfo.NATIVE_VECTOR_WIDTH_HALF: 1 if half else 0,
        }
        self.details = [
            ("Compute Capability", f"{self.cc[0]}.{self.cc[1]} (sm_{self.cc[0]}{self.cc[1]})"),
            ("Warp Size", str(a("WARP_SIZE"))),
            ("Max Threads Per Multiprocessor", str(a("MAX_THREADS_PER_MULTIPROCESSOR"))),
            ("Max Grid Dimensions", f"{{x: {grid.x}, y: {grid.y}, z: {grid.z}}}"),
            ("Shared Memory Per Block", f"{a('MAX_SHARED_MEMORY_PER_BLOCK')} B (opt-in {shared} B)"),
            ("L2 Cache Size", f"{a('L2_CACHE_SIZE')} B"),
            ("Memory Bus Width", f"{a('GLOBAL_MEMORY_BUS_WIDTH')} bits"),
            ("PCI Bus ID", f"{a('PCI_DOMAIN_ID'):04x}:{a('PCI_BUS_ID'):02x}:{a('PCI_DEVICE_ID'):02x}"),
            ("Unified Addressing", "yes" if a("UNIFIED_ADDRESSING") else "no"),
            ("Managed Memory", "yes" if a("MANAGED_MEMORY") else "no"),
        ]
        return info

    # ---- memory ----------------------------------------------------------------------------
    def _alloc_impl(self, size: int, kind: AllocType) -> int:
        d = self.enter()
        if kind == AllocType.HOST:
            return int(self.check(d.cuMemAllocHost(size), "cuMemAllocHost"))
        if kind == AllocType.MANAGED:
            flags = d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL
            return int(self.check(d.cuMemAllocManaged(size, flags), "cuMemAllocManaged"))
        return int(self.check(d.cuMemAlloc(size), "cuMemAlloc"))

    def _free_impl(self, ptr: int, kind: AllocType) -> None:
        if self.sticky is not None:
            return  # the poisoned context's memory goes when the context is released
        d = self.enter()
        if kind == AllocType.HOST:
            self.check(d.cuMemFreeHost(ptr), "cuMemFreeHost")
        else:
            self.check(d.cuMemFree(ptr), "cuMemFree")

    def on_stream(self, queue: AsyncInfo | None, call: str, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args, stream)`` on ``queue``'s stream, or on a temporary one that is synced."""
        if queue is not None:
            result = fn(*args, queue.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), call)
            return
        with self.queue_or_temporary(None) as temporary:
            result = fn(*args, temporary.stream)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), call)

    def _data_submit_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        d = self.enter()
        self.on_stream(queue, "cuMemcpyHtoDAsync", d.cuMemcpyHtoDAsync, dst, src, size)

    def _data_retrieve_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        d = self.enter()
        self.on_stream(queue, "cuMemcpyDtoHAsync", d.cuMemcpyDtoHAsync, dst, src, size)

    def _data_memcpy_impl(self, dst: int, src: int, size: int, queue: AsyncInfo | None) -> None:
        d = self.enter()
        self.on_stream(queue, "cuMemcpyDtoDAsync", d.cuMemcpyDtoDAsync, dst, src, size)

    def _data_exchange_impl(self, src: int, dst_device: GenericDevice, dst: int, size: int,
                            queue: AsyncInfo | None) -> None:
        assert isinstance(dst_device, CudaDevice)
        d = self.enter()
        self._enable_peer(dst_device)
        # The driver routes a peer copy directly when access is enabled, through the host otherwise.
        self.on_stream(queue, "cuMemcpyPeerAsync", d.cuMemcpyPeerAsync, dst, dst_device.context, src, self.context,
                       size)

    def _enable_peer(self, peer: CudaDevice) -> None:
        with self._peer_lock:
            if peer.device_id in self.peers:
                return
            d = self.d
            can = self.check(d.cuDeviceCanAccessPeer(self.handle, peer.handle), "cuDeviceCanAccessPeer")
            enabled = False
            if can:
                status = int(d.cuCtxEnablePeerAccess(peer.context, 0)[0])
                # Already enabled, or the hardware's peer limit: both leave copies working.
                enabled = status in (cd.SUCCESS, 704)
                if status not in (cd.SUCCESS, 704, 711):
                    raise self.failure(status, "cuCtxEnablePeerAccess")
            self.peers[peer.device_id] = enabled

    def _data_fill_impl(self, ptr: int, pattern: bytes, size: int, queue: AsyncInfo | None) -> None:
        d = self.enter()
        width = len(pattern)
        count, tail = divmod(size, width)
        with self.queue_or_temporary(queue) as q:
            stream = q.stream  # type: ignore[attr-defined]
            if count:
                if width in (1, 2, 4) and ptr % width == 0:  # D16/D32 need an aligned start
                    memset = {1: d.cuMemsetD8Async, 2: d.cuMemsetD16Async, 4: d.cuMemsetD32Async}[width]
                    self.check(memset(ptr, int.from_bytes(pattern, "little"), count, stream),
                               f"cuMemsetD{width * 8}Async")
                else:
                    self._fill_lanes(ptr, pattern, count, stream)
            for index in range(tail):  # only without validation: a last, partial copy
                self.check(d.cuMemsetD8Async(ptr + count * width + index, pattern[index], 1, stream),
                           "cuMemsetD8Async")

    def _fill_lanes(self, ptr: int, pattern: bytes, count: int, stream: Any) -> None:
        """Any pattern width: one strided 2-D memset per 4-, 2- or 1-byte lane of the pattern."""
        d = self.d
        width = len(pattern)
        lane = next(w for w in (4, 2, 1) if width % w == 0 and ptr % w == 0)
        memset2d = {1: d.cuMemsetD2D8Async, 2: d.cuMemsetD2D16Async, 4: d.cuMemsetD2D32Async}[lane]
        for offset in range(0, width, lane):
            value = int.from_bytes(pattern[offset:offset + lane], "little")
            self.check(memset2d(ptr + offset, width, value, 1, count, stream), f"cuMemsetD2D{lane * 8}Async")

    # ---- programs --------------------------------------------------------------------------
    def _is_valid_binary_impl(self, image: bytes) -> bool:
        return compatible(image, *self.cc)[0]

    def _load_binary_impl(self, image: bytes) -> DeviceImage:
        d = self.enter()
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
        return CudaImage(self, image, result[1])

    def _unload_binary_impl(self, image: DeviceImage) -> None:
        assert isinstance(image, CudaImage)
        if self.sticky is not None:
            return  # the poisoned context takes its modules with it when it is released
        d = self.enter()
        self.check(d.cuModuleUnload(image.module), "cuModuleUnload")

    def _construct_kernel_impl(self, image: DeviceImage, name: str) -> GenericKernel:
        assert isinstance(image, CudaImage)
        d = self.enter()
        function = self.check(d.cuModuleGetFunction(image.module, name.encode()), f"cuModuleGetFunction({name!r})")
        return CudaKernel(image, name, function)

    def _get_global_impl(self, image: DeviceImage, name: str) -> GlobalVariable:
        assert isinstance(image, CudaImage)
        d = self.enter()
        address, size = self.check(d.cuModuleGetGlobal(image.module, name.encode()), f"cuModuleGetGlobal({name!r})")
        return GlobalVariable(image, name, int(address), int(size))

    # ---- kernels ---------------------------------------------------------------------------
    def _launch_impl(self, kernel: GenericKernel, args: bytes | None, num_groups: Dim3, group_size: Dim3,
                     dyn_shared_memory: int, queue: AsyncInfo | None) -> None:
        assert isinstance(kernel, CudaKernel)
        d = self.enter()
        if dyn_shared_memory > kernel.shared_limit:
            with kernel.lock:
                if dyn_shared_memory > kernel.shared_limit:
                    attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                    self.check(d.cuFuncSetAttribute(kernel.function, attr, dyn_shared_memory), "cuFuncSetAttribute")
                    kernel.shared_limit = dyn_shared_memory
        extra = _launch_buffers.pack(args) if args else 0
        gx, gy, gz = num_groups
        bx, by, bz = group_size
        if queue is not None:
            result = d.cuLaunchKernel(kernel.function, gx, gy, gz, bx, by, bz, dyn_shared_memory,
                                      queue.stream, None, extra)  # type: ignore[attr-defined]
            if result[0]:
                raise self.failure(int(result[0]), f"cuLaunchKernel({kernel.name!r})")
            return
        try:
            with self.queue_or_temporary(None) as temporary:
                result = d.cuLaunchKernel(kernel.function, gx, gy, gz, bx, by, bz, dyn_shared_memory,
                                          temporary.stream, None, extra)  # type: ignore[attr-defined]
                if result[0]:
                    raise self.failure(int(result[0]), f"cuLaunchKernel({kernel.name!r})")
        except OffloadError as exc:
            if "cuLaunchKernel" not in exc.details:
                exc.details += f" (running kernel {kernel.name!r})"
            raise

    def _optimal_occupancy_impl(self, kernel: GenericKernel, shared_memory: int) -> int:
        assert isinstance(kernel, CudaKernel)
        d = self.enter()
        _grid, block = self.check(d.cuOccupancyMaxPotentialBlockSize(kernel.function, None, shared_memory, 0),
                                  "cuOccupancyMaxPotentialBlockSize")
        return int(block)

    # ---- queues ----------------------------------------------------------------------------
    def init_async_info(self) -> AsyncInfo:
        if self.sticky is not None:  # even a pooled stream belongs to the poisoned context
            raise self.sticky
        return super().init_async_info()

    def _create_queue_impl(self) -> AsyncInfo:
        d = self.enter()
        stream = self.check(d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        return CudaStream(self, stream)

    def _destroy_queue_impl(self, queue: AsyncInfo) -> None:
        assert isinstance(queue, CudaStream)
        if self.sticky is not None:
            return  # the context is dead; its streams go with it at re-initialisation
        d = self.enter()
        self.check(d.cuStreamDestroy(queue.stream), "cuStreamDestroy")

    def _synchronize_impl(self, queue: AsyncInfo) -> None:
        assert isinstance(queue, CudaStream)
        d = self.enter()
        self.check(d.cuStreamSynchronize(queue.stream), "cuStreamSynchronize")
        self._settle_waits(queue)

    def _query_impl(self, queue: AsyncInfo) -> bool:
        assert isinstance(queue, CudaStream)
        d = self.enter()
        status = int(d.cuStreamQuery(queue.stream)[0])
        if status == cd.NOT_READY:
            return False
        if status != cd.SUCCESS:
            raise self.failure(status, "cuStreamQuery")
        self._settle_waits(queue)
        return True

    def _settle_waits(self, queue: CudaStream) -> None:
        """Once a stream drained: fail it if a queue of another device it waited on failed.

        A fault on another GPU does not stop this stream, so the failure spreads here, when the
        waiting queue is next synced or queried.
        """
        waited, queue.waited = queue.waited, []
        for event in waited:
            source = event.queue
            source_device = event.device
            assert isinstance(source_device, CudaDevice)
            if source is None:
                continue
            if source.failure is None:
                # Ask the event's own device: a fault there shows up as an error of the event.
                source_device._is_event_complete_impl(event)
            if source.failure is not None:
                queue.adopt(source.failure)
                return

    def _has_pending_work_impl(self, queue: AsyncInfo) -> bool:
        return not self._query_impl(queue)

    def _enqueue_host_call_impl(self, callback: Callable[[Any], object], user_data: Any,
                                queue: AsyncInfo) -> None:
        assert isinstance(queue, CudaStream)
        d = self.enter()
        key = next(_host_keys)
        _host_calls[key] = (callback, user_data, queue)
        result = d.cuLaunchHostFunc(queue.stream, d.CUhostFn(_HOST_TRAMPOLINE_ADDRESS), key)
        if int(result[0]) != cd.SUCCESS:
            _host_calls.pop(key, None)
            self.check(result, "cuLaunchHostFunc")

    # ---- events ----------------------------------------------------------------------------
    def _create_cu_event(self) -> Any:
        d = self.enter()
        return self.check(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")

    def _destroy_cu_event(self, event: Any) -> None:
        if self.sticky is None:
            d = self.enter()
            self.check(d.cuEventDestroy(event), "cuEventDestroy")

    def _create_event_impl(self) -> GenericEvent:
        return CudaEvent(self, self.event_pool.acquire())

    def _record_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        assert isinstance(event, CudaEvent) and isinstance(queue, CudaStream)
        d = self.enter()
        self.check(d.cuEventRecord(event.event, queue.stream), "cuEventRecord")
        event.queue = queue

    def _wait_event_impl(self, event: GenericEvent, queue: AsyncInfo) -> None:
        assert isinstance(event, CudaEvent) and isinstance(queue, CudaStream)
        source = event.queue
        source_device = event.device
        assert isinstance(source_device, CudaDevice)
        if source is not None and source.failure is None and source_device.sticky is not None:
            source.fail(source_device.sticky)
        if source is not None and source.failure is not None:
            queue.adopt(source.failure)
            return
        d = self.enter()
        self.check(d.cuStreamWaitEvent(queue.stream, event.event, 0), "cuStreamWaitEvent")
        if source_device is not self:
            queue.waited.append(event)

    def _sync_event_impl(self, event: GenericEvent) -> None:
        assert isinstance(event, CudaEvent)
        if self.sticky is not None:  # a poisoned context fails every queue, and so every event
            self._event_failed(event, self.sticky)
            return
        d = self.enter()
        status = int(d.cuEventSynchronize(event.event)[0])
        if status != cd.SUCCESS:
            self._event_failed(event, self.failure(status, "cuEventSynchronize"))

    def _event_failed(self, event: CudaEvent, error: OffloadError) -> None:
        """The event's queue failed before reaching it: both carry that failure."""
        source = event.queue
        event.failure = source.fail(error) if source is not None else None
        if event.failure is None:
            raise error

    def _is_event_complete_impl(self, event: GenericEvent) -> bool:
        assert isinstance(event, CudaEvent)
        if self.sticky is not None:
            self._event_failed(event, self.sticky)
            return True
        d = self.enter()
        status = int(d.cuEventQuery(event.event)[0])
        if status == cd.NOT_READY:
            return False
        if status != cd.SUCCESS:
            self._event_failed(event, self.failure(status, "cuEventQuery"))
        return True

    def _destroy_event_impl(self, event: GenericEvent) -> None:
        assert isinstance(event, CudaEvent)
        self.event_pool.release(event.event)

    def _event_elapsed_time_impl(self, start: GenericEvent, end: GenericEvent) -> float:
        assert isinstance(start, CudaEvent) and isinstance(end, CudaEvent)
        d = self.enter()
        return float(self.check(d.cuEventElapsedTime(start.event, end.event), "cuEventElapsedTime"))


class CudaPlugin(GenericPlugin):
    """NVIDIA GPUs; present only when cuda-bindings imports and ``cuInit`` succeeds."""

    name = "cuda"
    backend = PlatformBackend.CUDA
    vendor_name = "NVIDIA Corporation"

    def __init__(self) -> None:
        super().__init__()
        self.driver: cd.Driver
        self._version = "unknown"

    def _init_impl(self) -> int:
        self.driver = cd.Driver(cd.load_driver())
        d = self.driver.module
        try:
            result = d.cuInit(0)
        except (RuntimeError, OSError) as exc:  # cuda.pathfinder cannot find libcuda
            raise PluginUnavailable(f"the NVIDIA driver library (libcuda) could not be loaded: {exc}") from None
        status = int(result[0])
        if status == cd.NO_DEVICE:
            raise PluginUnavailable("cuInit: no CUDA-capable device is present")
        if status != cd.SUCCESS:
            raise PluginUnavailable(f"cuInit failed: {self.driver.name(status)}")
        version = int(self.driver.check(d.cuDriverGetVersion(), "cuDriverGetVersion"))
        self._version = f"CUDA {version // 1000}.{version % 1000 // 10} (driver API {version})"
        return int(self.driver.check(d.cuDeviceGetCount(), "cuDeviceGetCount"))

    def _create_device(self, device_id: int) -> GenericDevice:
        return CudaDevice(self, device_id)

    def is_data_exchangeable(self, src: GenericDevice, dst: GenericDevice) -> bool:
        return isinstance(src, CudaDevice) and isinstance(dst, CudaDevice)

    def version(self) -> str:
        return self._version
