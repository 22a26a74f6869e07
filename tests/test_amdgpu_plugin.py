"""What only the AMDGPU plugin does, on stand-in AMD GPUs (no GPU needed).

``tests/hip_standin`` replaces hip-python's ``hip.hip`` and follows the HIP runtime's documented
behaviour (a current device per thread, stream order, hipErrorNotReady while work is pending,
host functions on a stream thread, sticky faults). What the AMDGPU plugin shares with the CUDA
plugin (memory, queues, events, launches, faults, error mapping, the replay against the real
hip-python) is tested once for both in ``tests/gpu_plugins``; here: device info, HIP's device
flags and runtime versions, the fill fallback before ROCm 7.1, fills on an idle queue, code
objects and offload bundles (gcnArchName and target features), and launch bounds.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import hip_standin as standin
import pytest
from amdgpu_fixtures import (
    amd_device,
    bundle,
    call_names,
    calls_of,
    code_object,
    count,
    generic_code_object,
    hipError_t,
    newer_code_object,
    program,
    stand_in_runtime,
)
from gpu_fixtures import (
    COUNTER,
    GLOBAL,
    KERNEL,
    TABLE_SIZE,
    Runtime,
    check_device_info,
    error_details,
    expect,
    faulting_kernel,
    host_buffer,
    in_new_thread,
    info_gpus,
    launch_size,
    recorder,
    wait_until_drained,
)
from hip_standin import DeviceSpec, images

from offloadrt import AllocType, DeviceInfo, Dimensions, ErrorCode, PlatformBackend, QueueInfo, SymbolInfo, api

E = hipError_t
POISONED = "sticky"  # what every error of a poisoned device says


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """A runtime on two default stand-in GPUs (AMD Instinct MI210, gfx90a:sramecc+:xnack-)."""
    with stand_in_runtime(monkeypatch, devices=2) as runtime:
        yield runtime


# ---- device info ----------------------------------------------------------------------------------

ALPHA = DeviceSpec(name="AMD Instinct MI300X", arch="gfx942:sramecc+:xnack-", total_memory=192 << 30,
                   compute_units=304, clock_rate=2_100_000, memory_clock_rate=1_300_000, shared_memory=64 << 10,
                   uuid=b"3b1f5c2e8a9d4f60")
BETA = DeviceSpec(name="", arch="gfx1100", total_memory=48 << 30, compute_units=96, clock_rate=2_495_500,
                  memory_clock_rate=1_249_999, shared_memory=32 << 10, max_threads_per_block=256, warp_size=32,
                  attributes={"MaxGridDimX": 65535})
U32 = 0xFFFFFFFF


def test_device_info_comes_from_hip(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=[ALPHA, BETA], driver_version=60443483) as runtime:
        alpha, beta = runtime.gpus
        beta_uid = "GPU-" + standin.state().devices[1].uuid.hex()  # random bytes: shown as hex
        check_device_info({
            alpha: {DeviceInfo.NAME: "gfx942", DeviceInfo.PRODUCT_NAME: "AMD Instinct MI300X",
                    DeviceInfo.UID: "GPU-3b1f5c2e8a9d4f60",  # AMD's UUIDs are ASCII already
                    DeviceInfo.NUM_COMPUTE_UNITS: 304, DeviceInfo.MAX_CLOCK_FREQUENCY: 2100,
                    DeviceInfo.MEMORY_CLOCK_RATE: 1300, DeviceInfo.GLOBAL_MEM_SIZE: 192 << 30,
                    DeviceInfo.MAX_MEM_ALLOC_SIZE: 192 << 30, DeviceInfo.MAX_WORK_GROUP_SIZE: 1024,
                    DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(1024, 1024, 1024),
                    DeviceInfo.MAX_WORK_SIZE: U32, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: 64 << 10,
                    DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(U32, 65536 * 1024, 65536 * 1024)},
            beta: {DeviceInfo.NAME: "gfx1100", DeviceInfo.PRODUCT_NAME: "gfx1100",  # no marketing name
                   DeviceInfo.UID: beta_uid, DeviceInfo.NUM_COMPUTE_UNITS: 96, DeviceInfo.MAX_CLOCK_FREQUENCY: 2495,
                   DeviceInfo.MEMORY_CLOCK_RATE: 1249, DeviceInfo.GLOBAL_MEM_SIZE: 48 << 30,
                   DeviceInfo.MAX_MEM_ALLOC_SIZE: 48 << 30, DeviceInfo.MAX_WORK_GROUP_SIZE: 256,
                   DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(256, 256, 256),
                   DeviceInfo.MAX_WORK_SIZE: 65535 * 256, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: 32 << 10,
                   DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(65535 * 256, 65536 * 256, 65536 * 256)},
        }, vendor="AMD", vendor_id=0x1002, version="HIP 6.4.43483", platform_vendor="Advanced Micro Devices, Inc.")
        for device in (alpha, beta):
            assert api.olGetDeviceInfo(device, DeviceInfo.HALF_FP_CONFIG) != 0
        # The device info is read once, when the device starts.
        assert [int(args[0]) for args in calls_of("hipGetDeviceProperties")] == [0, 1]
        gpus = info_gpus(["[AMD Instinct MI300X]", "[gfx1100]", "Name: gfx942", "UID: GPU-3b1f5c2e8a9d4f60",
                          "Vendor ID: 4098", "Max Clock Frequency: 2100 MHz", "Memory Clock Rate: 1249 MHz",
                          "Num Compute Units: 304", "Work Group Shared Mem Size: 32768 B",
                          "Driver Version: HIP 6.4.43483", "GCN Architecture: gfx942:sramecc+:xnack-",
                          "GCN Architecture: gfx1100", "Wavefront Size: 32", "Wavefront Size: 64",
                          "LDS Per Work Group: 65536 B", "Max Grid Dimensions: {x: 65535, y: 65536",
                          "Global Mem Size: 206158430208 B", "Managed Memory: yes"])
    assert gpus["gfx1100"]["Global Mem Size"] == 48 << 30
    assert gpus["gfx942"]["Details"]["GCN Architecture"] == "gfx942:sramecc+:xnack-"
    assert gpus["gfx942"]["Product Name"] == "AMD Instinct MI300X"


# ---- HIP's device flags and runtime versions --------------------------------------------------------

def test_devices_block_rather_than_spin_while_synchronising(rt: Runtime) -> None:
    assert {device.schedule_flags for device in standin.state().devices} == {
        standin.hip.hipDeviceScheduleBlockingSync}


def test_a_device_already_in_use_keeps_its_flags_and_still_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    standin.install(monkeypatch, devices=1)
    standin.inject("hipSetDeviceFlags", E.hipErrorSetOnActiveProcess)
    try:
        api.olInit(platforms=[PlatformBackend.AMDGPU])
        try:
            assert len(Runtime(PlatformBackend.AMDGPU).gpus) == 1
        finally:
            api.olShutDown()
    finally:
        standin.shutdown()


def test_a_hip_runtime_too_old_for_the_bindings_leaves_the_platform_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """hip-python 10 binds hipGetDeviceProperties to its ROCm 6.0 variant; an older libamdhip64
    lacks it, and the bindings raise RuntimeError: no exception may escape olInit."""
    module = standin.install(monkeypatch, devices=1)

    def old_runtime(_device: Any) -> Any:
        raise RuntimeError("failed to dlsym 'hipGetDevicePropertiesR0600': undefined symbol")

    monkeypatch.setattr(module, "hipGetDeviceProperties", old_runtime)
    try:
        with pytest.warns(Warning, match="ROCm 6.0"):
            api.olInit(platforms=[PlatformBackend.AMDGPU])
        try:
            assert Runtime(PlatformBackend.AMDGPU).gpus == []
        finally:
            api.olShutDown()
    finally:
        standin.shutdown()


# ---- fills: before ROCm 7.1, and on an idle queue ---------------------------------------------------

def test_fills_work_on_a_runtime_without_the_2d_memsets(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """hipMemsetD2D*Async exist from ROCm 7.1 on; before that hip-python fails to find them with a
    RuntimeError. Odd-width fills then write the pattern once with 1-byte memsets and double it with
    device-to-device copies, and stop trying the 2-D memsets."""
    gpu = rt.gpus[0]
    device = amd_device(gpu)
    tried: list[str] = []

    def missing(name: str) -> Callable[..., Any]:
        def call(*_: Any) -> Any:
            tried.append(name)
            raise RuntimeError(f"failed to dlsym '{name}': undefined symbol")  # as hip-python words it
        return call

    for lane in (8, 16, 32):
        monkeypatch.setattr(device, f"drv_memset2d{lane}", missing(f"hipMemsetD2D{lane}Async"))
    queue = api.olCreateQueue(gpu)
    size = 700
    for width, offset, use_queue in ((3, 0, False), (8, 1, True), (16, 4, False), (5, 3, True), (2, 1, False)):
        pattern = bytes((0x11 * (i + 1) + width) % 256 for i in range(width))
        copies = (size - 32) // width
        pointer = api.olMemAlloc(gpu, AllocType.DEVICE, size)
        standin.write(pointer, b"\xee" * size)
        api.olMemFill(queue if use_queue else None, pointer + 16 + offset, pattern, width * copies)
        if use_queue:
            api.olSyncQueue(queue)
        expected = b"\xee" * (16 + offset) + pattern * copies
        assert standin.read(pointer, size) == expected + b"\xee" * (size - len(expected)), (width, offset)
        api.olMemFree(pointer)
    assert len(tried) == 1 and device.strided_memset is False  # found missing once, never tried again
    assert count("hipMemcpyDtoDAsync") > 0
    api.olDestroyQueue(queue)


def test_a_fill_on_an_idle_queue_is_done_when_olMemFill_returns(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 4096)
    syncs = count("hipStreamSynchronize")
    api.olMemFill(queue, pointer, b"\x11\x22\x33\x44", 4096)
    assert standin.read(pointer, 4096) == b"\x11\x22\x33\x44" * 1024
    assert api.olQueryQueue(queue) is True and api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    assert count("hipStreamSynchronize") == syncs + 1
    # Behind pending work the fill stays queued: olMemFill does not wait for the gate.
    gate = rt.gate(queue)
    gate.wait_entered()
    api.olMemFill(queue, pointer, b"\x99", 4096)
    assert count("hipStreamSynchronize") == syncs + 1
    assert api.olQueryQueue(queue) is False
    assert standin.read(pointer, 4096) == b"\x11\x22\x33\x44" * 1024
    gate.open()
    in_new_thread(api.olSyncQueue, queue)
    assert standin.read(pointer, 4096) == b"\x99" * 4096
    api.olDestroyQueue(queue)
    api.olMemFree(pointer)


def test_a_fill_on_a_queue_whose_kernel_faulted_reports_the_fault(rt: Runtime) -> None:
    """The idle check of a fill asks HIP about the stream, which reports an earlier kernel's fault
    once: the queue must fail with it, not lose it."""
    gpu = rt.gpus[0]
    standin.register_kernel("boom", faulting_kernel(E.hipErrorLaunchOutOfResources))
    queue = api.olCreateQueue(gpu)
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(program(gpu), "boom", KERNEL), None, launch_size())
    wait_until_drained(standin, queue)  # the fault has happened; the plugin has not asked yet
    err = expect(ErrorCode.QUEUE_ERROR, api.olMemFill, queue, pointer, b"\x01", 64)
    assert "hipErrorLaunchOutOfResources" in error_details(err), err
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and error is not None and "hipErrorLaunchOutOfResources" in error.details, error
    api.olMemFill(None, pointer, b"\x02", 64)  # not sticky: the device still works
    assert standin.read(pointer, 64) == b"\x02" * 64
    api.olDestroyQueue(queue)


# ---- code objects and offload bundles -----------------------------------------------------------------

def test_code_objects_and_offload_bundles_load(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    images_: list[bytes | bytearray] = [
        code_object(xnack=False, sramecc=True),  # the device's own features
        code_object(xnack="any", sramecc="any"), code_object(abi_version=5), code_object(abi_version=6),
        bundle("gfx908", "gfx90a:xnack-"),  # HIP picks the entry for the device
        bundle("gfx90a:sramecc+:xnack-"), bundle("gfx90a")]
    for image in images_:
        loads = count("hipModuleLoadData")
        loaded = program(gpu, image)
        assert count("hipModuleLoadData") == loads + 1
        assert calls_of("hipModuleLoadData")[-1][0] == image  # HIP picks a bundle's entry itself
        api.olGetSymbol(loaded, "record", KERNEL)
        counter = api.olGetSymbol(loaded, "counter", GLOBAL)
        value, value_address = host_buffer(4)
        address = api.olGetSymbolInfo(counter, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
        api.olMemcpy(None, value_address, rt.host, address, gpu, 4)
        assert struct.unpack("<I", value.raw)[0] == COUNTER
        table = api.olGetSymbol(loaded, "table", GLOBAL)
        assert api.olGetSymbolInfo(table, SymbolInfo.GLOBAL_VARIABLE_SIZE) == TABLE_SIZE
        api.olDestroyProgram(loaded)
    assert standin.state().modules == {}


MISMATCHES = [
    (code_object("gfx908"), "code object built for gfx908 cannot run on a gfx90a:sramecc+:xnack- device"),
    (code_object("gfx1100"), "code object built for gfx1100 cannot run"),
    (code_object(xnack=True), "code object built for gfx90a with xnack+ but the device runs with xnack-"),
    (code_object(sramecc=False), "code object built for gfx90a with sramecc- but the device runs with sramecc+"),
    (code_object("gfx90a:xnack+", sramecc=True), "with xnack+ but the device runs with xnack-"),
    (bundle("gfx908", "gfx90a:xnack+"),
     "offload bundle has no code object for gfx90a:sramecc+:xnack- (targets: gfx908, gfx90a:xnack+)"),
    (images.offload_bundle({images.HOST_TRIPLE: b""}), "offload bundle has no code object for gfx90a"),
    (b"not a program image", "not an AMDGPU image"),
    (b".version 8.0\n.target sm_90\n.address_size 64\n", "not an AMDGPU image"),  # PTX
    (b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack("<HH", 2, 190) + bytes(44), "not an AMDGPU image"),
    (code_object()[:40], "truncated ELF header"),
    (b"__CLANG_OFFLOAD_BUNDLE__", "malformed offload bundle"),  # no entry count
]


@pytest.mark.parametrize(("image", "why"), MISMATCHES,
                         ids=["gfx908", "gfx1100", "xnack+", "sramecc-", "target-id-xnack+", "bundle-without-entry",
                              "host-only-bundle", "garbage", "ptx", "cuda-elf", "truncated", "malformed-bundle"])
def test_images_the_device_cannot_run_are_refused_before_hip_sees_them(rt: Runtime, image: bytes, why: str) -> None:
    gpu = rt.gpus[0]
    err = expect(ErrorCode.INVALID_BINARY, program, gpu, image)
    assert why in err.details, err
    assert api.olIsValidBinary(gpu, image) is False
    assert count("hipModuleLoadData") == 0 and standin.state().modules == {}


def test_is_valid_binary_answers_without_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [DeviceSpec(), DeviceSpec(arch="gfx90a:sramecc-:xnack+"), DeviceSpec(arch="gfx1100")]
    with stand_in_runtime(monkeypatch, devices=specs) as runtime:
        mi210, xnack_on, navi = runtime.gpus
        standin.calls.clear()
        cases = [
            (mi210, code_object(), True), (xnack_on, code_object(), True), (navi, code_object(), False),
            (mi210, code_object(xnack=False), True), (xnack_on, code_object(xnack=False), False),
            (xnack_on, code_object(xnack=True, sramecc=False), True), (mi210, code_object(sramecc=False), False),
            (mi210, code_object(xnack="any", sramecc="any"), True), (navi, code_object("gfx1100"), True),
            (mi210, bundle("gfx90a:xnack-", "gfx90a:xnack+"), True),
            (xnack_on, bundle("gfx90a:xnack-", "gfx90a:xnack+"), True),
            (navi, bundle("gfx90a:xnack-", "gfx90a:xnack+"), False), (navi, bundle("gfx90a", "gfx1100"), True),
            (mi210, generic_code_object(), False),  # gfx9-generic does not cover gfx90a
            (mi210, newer_code_object(), True),  # a processor newer than offloadrt's table: the driver decides
            (mi210, b"CCOB" + bytes(60), True),  # a compressed bundle: the driver decides
            (mi210, b"garbage", False), (mi210, b"\x7fELF", False), (mi210, code_object("gfx908"), False),
        ]
        answers = [(case, api.olIsValidBinary(device, image)) for case, (device, image, _) in enumerate(cases)]
        assert [answer for _, answer in answers] == [valid for *_, valid in cases], answers
        assert "hipModuleLoadData" not in call_names() and standin.state().modules == {}


@pytest.mark.parametrize(("status", "image"), [(E.hipErrorInvalidKernelFile, newer_code_object()),
                                               (E.hipErrorInvalidImage, b"CCOB" + bytes(60))],
                         ids=["newer-processor", "compressed-bundle"])
def test_images_only_hip_can_judge_are_refused_by_hip(rt: Runtime, status: Any, image: bytes) -> None:
    gpu = rt.gpus[0]
    err = expect(ErrorCode.INVALID_BINARY, program, gpu, image)
    assert f"hipModuleLoadData: {status.name} (" in err.details, err
    assert count("hipModuleLoadData") == 1 and standin.state().modules == {}
    api.olDestroyProgram(program(gpu))  # a good image still loads


# ---- launch bounds ------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_a_block_beyond_the_kernels_launch_bounds_is_refused_and_poisons_nothing(rt: Runtime,
                                                                                  with_queue: bool) -> None:
    """HIP refuses a block larger than the kernel's launch bounds with hipErrorLaunchFailure from
    hipModuleLaunchKernel itself: nothing ran, the device is fine."""
    seen, body = recorder()
    standin.register_kernel("small", body, max_threads=128)
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu) if with_queue else None
    small = api.olGetSymbol(program(gpu), "small", KERNEL)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olLaunchKernel, queue, gpu, small, b"over",
                 launch_size(items=(256, 1, 1)))
    assert "hipModuleLaunchKernel('small'): hipErrorLaunchFailure" in err.details, err
    assert POISONED not in err.details
    api.olLaunchKernel(queue, gpu, small, b"fits", launch_size(items=(128, 1, 1)))
    if queue is not None:
        in_new_thread(api.olSyncQueue, queue)
        api.olDestroyQueue(queue)
    assert [launch[0] for launch in seen] == [b"fits"]
    api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 8))
