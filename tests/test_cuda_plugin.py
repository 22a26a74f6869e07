"""What only the CUDA plugin does, on stand-in GPUs (no GPU needed).

``tests/cuda_standin`` replaces ``cuda.bindings.driver`` and follows the driver's documented
behaviour (per-thread current contexts, stream order, NOT_READY while work is pending, sticky
faults). What the CUDA plugin shares with the AMDGPU plugin (memory, queues, events, launches,
faults, error mapping, the replay against the real bindings) is tested once for both in
``tests/gpu_plugins``; here: device info, primary contexts, PTX/cubin/fatbin images, the
dynamic shared memory opt-in, and the status numbers against the real bindings.
"""

from __future__ import annotations

import struct
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import cuda_standin as standin
import pytest
from cuda_fixtures import (
    PTX,
    CUresult,
    call_names,
    calls_of,
    count,
    cubin,
    fatbin,
    program,
    ptx,
    stand_in_runtime,
)
from cuda_standin import DeviceSpec
from gpu_fixtures import (
    GLOBAL,
    KERNEL,
    WAIT,
    Runtime,
    check_device_info,
    expect,
    in_new_thread,
    info_gpus,
    info_output,
    launch_size,
    recorder,
    shut_down_fully,
    tag,
)

from offloadrt import (
    DeviceInfo,
    Dimensions,
    ErrorCode,
    FpCapabilityFlag,
    OffloadError,
    PlatformBackend,
    SymbolInfo,
    api,
)
from offloadrt.plugins.cuda import driver as cuda_driver


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """A runtime on two default stand-in GPUs (compute capability 9.0)."""
    with stand_in_runtime(monkeypatch, devices=2) as runtime:
        yield runtime


# ---- device info ----------------------------------------------------------------------------------

ALPHA = DeviceSpec(name="Alpha X100", uuid=bytes(range(16)), compute_capability=(8, 6), total_memory=24 << 30,
                   attributes={"MULTIPROCESSOR_COUNT": 84, "CLOCK_RATE": 1695000, "MEMORY_CLOCK_RATE": 9751000,
                               "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 99 * 1024})
BETA = DeviceSpec(name="Beta Y2", uuid=bytes(range(0xF0, 0x100)), compute_capability=(5, 0), total_memory=4 << 30,
                  attributes={"MULTIPROCESSOR_COUNT": 16, "CLOCK_RATE": 1000500, "MEMORY_CLOCK_RATE": 3505000,
                              "MAX_THREADS_PER_BLOCK": 512, "MAX_BLOCK_DIM_X": 512, "MAX_BLOCK_DIM_Y": 256,
                              "MAX_BLOCK_DIM_Z": 32, "MAX_GRID_DIM_X": 65535,
                              "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 0})


def test_device_info_comes_from_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=[ALPHA, BETA], driver_version=12080) as runtime:
        alpha, beta = runtime.gpus
        check_device_info({
            alpha: {DeviceInfo.NAME: "Alpha X100", DeviceInfo.PRODUCT_NAME: "Alpha X100",
                    DeviceInfo.UID: "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f",
                    DeviceInfo.NUM_COMPUTE_UNITS: 84, DeviceInfo.MAX_CLOCK_FREQUENCY: 1695,
                    DeviceInfo.MEMORY_CLOCK_RATE: 9751, DeviceInfo.GLOBAL_MEM_SIZE: 24 << 30,
                    DeviceInfo.MAX_MEM_ALLOC_SIZE: 24 << 30, DeviceInfo.MAX_WORK_GROUP_SIZE: 1024,
                    DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(1024, 1024, 64),
                    DeviceInfo.MAX_WORK_SIZE: 0xFFFFFFFF, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: 99 * 1024,
                    DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(0xFFFFFFFF, 65535 * 1024, 65535 * 64)},
            beta: {DeviceInfo.NAME: "Beta Y2", DeviceInfo.PRODUCT_NAME: "Beta Y2",
                   DeviceInfo.UID: "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff",
                   DeviceInfo.NUM_COMPUTE_UNITS: 16, DeviceInfo.MAX_CLOCK_FREQUENCY: 1000,
                   DeviceInfo.MEMORY_CLOCK_RATE: 3505, DeviceInfo.GLOBAL_MEM_SIZE: 4 << 30,
                   DeviceInfo.MAX_MEM_ALLOC_SIZE: 4 << 30, DeviceInfo.MAX_WORK_GROUP_SIZE: 512,
                   DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION: Dimensions(512, 256, 32),
                   DeviceInfo.MAX_WORK_SIZE: 65535 * 512,
                   DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION: Dimensions(65535 * 512, 65535 * 256, 65535 * 32),
                   DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE: 48 * 1024},  # no opt-in: the per-block limit
        }, vendor="NVIDIA Corporation", vendor_id=0x10DE, version="CUDA 12.8 (driver API 12080)",
            platform_vendor="NVIDIA Corporation")
        assert api.olGetDeviceInfo(alpha, DeviceInfo.HALF_FP_CONFIG) != FpCapabilityFlag(0)  # sm_86 has fp16
        assert api.olGetDeviceInfo(beta, DeviceInfo.HALF_FP_CONFIG) == FpCapabilityFlag(0)  # sm_50 has not
        assert api.olGetDeviceInfo(beta, DeviceInfo.NATIVE_VECTOR_WIDTH_HALF) == 0
        gpus = info_gpus(["[Alpha X100]", "[Beta Y2]", "UID: GPU-00010203-0405-0607-0809-0a0b0c0d0e0f",
                          "Max Clock Frequency: 1695 MHz", "Memory Clock Rate: 3505 MHz", "Num Compute Units: 84",
                          "Compute Capability: 8.6 (sm_86)", "Compute Capability: 5.0 (sm_50)",
                          "Driver Version: CUDA 12.8"])
    assert gpus["Beta Y2"]["Global Mem Size"] == 4 << 30
    assert gpus["Alpha X100"]["Details"]["Compute Capability"] == "8.6 (sm_86)"


# ---- primary contexts -----------------------------------------------------------------------------

def test_each_device_retains_its_primary_context_and_releases_it_at_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = standin.install(monkeypatch, devices=2)
    try:
        assert int(driver.cuInit(0)[0]) == 0
        assert int(driver.cuDevicePrimaryCtxRetain(1)[0]) == 0  # another library already uses device 1
        api.olInit()
        try:
            contexts = standin.state().devices
            assert [device.context.refcount for device in contexts] == [1, 2]
            # Blocking sync is set only on a context that was not active yet.
            assert [int(args[0]) for args in calls_of("cuDevicePrimaryCtxSetFlags")] == [0]
            assert contexts[0].context.flags == int(driver.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC)
            api.olDestroyQueue(api.olCreateQueue(Runtime(PlatformBackend.CUDA).gpus[1]))
        finally:
            in_new_thread(shut_down_fully)
        # De-init releases each primary context once, after destroying its streams in it.
        assert sorted(int(args[0]) for args in calls_of("cuDevicePrimaryCtxRelease")) == [0, 1]
        assert [device.context.refcount for device in standin.state().devices] == [0, 1]  # only its own
    finally:
        standin.shutdown()


def test_a_device_that_fails_to_start_leaves_no_context_retained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device whose setup fails after its primary context was retained must release it: a
    retained primary context holds device memory until the process exits."""
    standin.install(monkeypatch, devices=2)
    standin.inject("cuDeviceGetName", CUresult.CUDA_ERROR_UNKNOWN, skip=1)  # the second device's setup fails
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a plugin that fails to start may warn, never raise
            api.olInit()
        try:
            if not Runtime(PlatformBackend.CUDA).gpus:
                assert "cuDeviceGetName: CUDA_ERROR_UNKNOWN" in info_output()
        finally:
            api.olShutDown()
        retained = {device.ordinal: device.context.refcount for device in standin.state().devices}
        assert retained == {0: 0, 1: 0}, f"primary contexts still retained after olShutDown: {retained}"
    finally:
        standin.shutdown()


# ---- PTX, cubin and fatbin images -------------------------------------------------------------------

def test_cubin_and_fatbin_images_load_with_their_symbols(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    standin.set_binary_symbols(kernels=["vector_add"], globals={"state": 8})
    for image in (cubin(90), fatbin()):
        loaded = program(gpu, image)
        api.olGetSymbol(loaded, "vector_add", KERNEL)
        state = api.olGetSymbol(loaded, "state", GLOBAL)
        assert api.olGetSymbolInfo(state, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 8
        api.olDestroyProgram(loaded)
    assert count("cuModuleLoadDataEx") == 2 and standin.state().modules == {}
    for text in (PTX, PTX + b"\0"):  # NUL-terminated for the driver, whether or not it was
        api.olDestroyProgram(program(gpu, text))
        assert calls_of("cuModuleLoadDataEx")[-1][0] == PTX + b"\0"


def test_images_the_driver_cannot_load_are_invalid_binaries(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    standin.calls.clear()
    for garbage in (b"not a program image", cubin(machine=62), b"\x7fELF", b".version 8.0\n"):
        err = expect(ErrorCode.INVALID_BINARY, program, gpu, garbage)
        assert "not a CUDA image" in err.details
    assert set(call_names()) <= {"cuCtxSetCurrent"}  # refused without asking the driver to load it
    err = expect(ErrorCode.INVALID_BINARY, program, gpu, PTX + b"// standin-invalid\n")
    assert "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX" in err.details
    assert "JIT log: ptxas fatal : standin: invalid PTX" in err.details, err
    err = expect(ErrorCode.INVALID_BINARY, program, gpu, ptx("sm_100"))
    assert "sm_100" in err.details, err  # the JIT log says why
    assert standin.state().modules == {}


def test_is_valid_binary_answers_without_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_runtime(monkeypatch, devices=[DeviceSpec(), DeviceSpec(compute_capability=(8, 6))]) as runtime:
        sm90, sm86 = runtime.gpus
        standin.calls.clear()
        cases = [
            (sm90, ptx("sm_90"), True), (sm90, ptx("sm_75"), True), (sm90, ptx("sm_100"), False),
            (sm86, ptx("sm_86"), True), (sm86, ptx("sm_89"), False), (sm86, ptx("sm_90"), False),
            (sm90, cubin(90), True), (sm90, cubin(86), False), (sm90, cubin(100), False),
            (sm86, cubin(80), True), (sm86, cubin(86), True), (sm86, cubin(89), False), (sm86, cubin(90), False),
            (sm90, fatbin(), True), (sm86, fatbin(), True),
            (sm90, b"garbage", False), (sm90, cubin(90, machine=62), False), (sm90, b"\x7fELF", False),
        ]
        answers = [(case, api.olIsValidBinary(device, image)) for case, (device, image, _) in enumerate(cases)]
        assert [answer for _, answer in answers] == [valid for *_, valid in cases], answers
        assert "cuModuleLoadDataEx" not in call_names() and standin.state().modules == {}


# ---- the dynamic shared memory opt-in -------------------------------------------------------------

def test_dynamic_shared_memory_above_48k_opts_in_once_per_kernel_and_size(rt: Runtime) -> None:
    seen, body = recorder()
    standin.register_kernel("record", body)
    standin.register_kernel("other", body)
    gpu = rt.gpus[0]
    prog = program(gpu)
    record, other = api.olGetSymbol(prog, "record", KERNEL), api.olGetSymbol(prog, "other", KERNEL)
    queue = api.olCreateQueue(gpu)
    kib = 1024
    sizes = [(record, 1 * kib), (record, 48 * kib), (record, 64 * kib), (record, 64 * kib), (record, 100 * kib),
             (record, 100 * kib), (record, 64 * kib), (other, 64 * kib), (other, 64 * kib), (other, 227 * kib)]
    functions = {}
    for kernel, dyn in sizes:
        api.olLaunchKernel(queue, gpu, kernel, tag(0) if kernel is record else None, launch_size(dyn=dyn))
        functions[kernel.name] = calls_of("cuLaunchKernel")[-1][0]
    in_new_thread(api.olSyncQueue, queue)
    assert [launch[3] for launch in seen] == [dyn for _, dyn in sizes]
    attribute = standin.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert calls_of("cuFuncSetAttribute") == [(functions["record"], attribute, 64 * kib),
                                              (functions["record"], attribute, 100 * kib),
                                              (functions["other"], attribute, 64 * kib),
                                              (functions["other"], attribute, 227 * kib)]
    api.olDestroyQueue(queue)


def test_a_c_struct_blob_with_all_the_opt_in_shared_memory_launches(rt: Runtime) -> None:
    """The H100 case that failed: ``struct {void *out; uint32_t words;}`` (12 bytes of parameters, 16
    with tail padding) and the device's whole opt-in dynamic shared memory. It failed on the padded
    blob (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), not on the shared memory, which opts in as it should."""
    seen, body = recorder()
    standin.register_kernel("pair", body)
    gpu = rt.gpus[0]
    kernel = api.olGetSymbol(program(gpu, ptx(kernels=["pair"])), "pair", KERNEL)
    limit = api.olGetDeviceInfo(gpu, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE)
    assert limit == standin.state().devices[0].attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN") > 48 * 1024
    blob = struct.pack("<QI4x", 0x1000, limit // 4)
    api.olLaunchKernel(None, gpu, kernel, blob, launch_size(items=(256, 1, 1), dyn=limit))
    assert seen == [(blob[:12], (1, 1, 1), (256, 1, 1), limit, 0)]
    attribute = standin.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert [call[1:] for call in calls_of("cuFuncSetAttribute")] == [(attribute, limit)]


def test_concurrent_launches_never_lower_the_dynamic_shared_memory_opt_in(
        rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread A opts a kernel in to 64 KiB while thread B opts it in to 100 KiB and launches; if A's
    smaller opt-in reaches the driver last, B's next 100 KiB launch must still work."""
    seen, body = recorder()
    standin.register_kernel("record", body)
    gpu = rt.gpus[0]
    kernel = api.olGetSymbol(program(gpu), "record", KERNEL)
    queue_a, queue_b = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    small, big = 64 * 1024, 100 * 1024
    real_set = standin.driver.cuFuncSetAttribute
    a_inside, b_launched, a_applied, b_again = (threading.Event() for _ in range(4))

    def interleaving_set(hfunc: Any, attrib: Any, value: int) -> Any:
        if int(value) != small:
            return real_set(hfunc, attrib, value)
        a_inside.set()
        # A plugin that serialises opt-ins keeps B out until A is done: then there is nothing to
        # interleave, and this probe just times out.
        interleaved = b_launched.wait(0.5)
        result = real_set(hfunc, attrib, value)
        a_applied.set()
        if interleaved:
            b_again.wait(WAIT)
        return result

    monkeypatch.setattr(standin.driver, "cuFuncSetAttribute", interleaving_set)
    outcome: dict[str, BaseException | None] = {}

    def launch_a() -> None:
        try:
            api.olLaunchKernel(queue_a, gpu, kernel, tag(b"a"), launch_size(dyn=small))
            outcome["a"] = None
        except BaseException as exc:  # noqa: BLE001  # checked in the test's thread
            outcome["a"] = exc

    def launch_b() -> None:
        api.olLaunchKernel(queue_b, gpu, kernel, tag(b"b1"), launch_size(dyn=big))
        b_launched.set()

    thread_a = threading.Thread(target=launch_a, daemon=True)
    thread_a.start()
    try:
        assert a_inside.wait(WAIT)
        in_new_thread(launch_b)
        assert a_applied.wait(WAIT)
        second: BaseException | None = None
        try:
            in_new_thread(api.olLaunchKernel, queue_b, gpu, kernel, tag(b"b2"), launch_size(dyn=big))
        except OffloadError as exc:
            second = exc
    finally:
        b_again.set()
        thread_a.join(WAIT)
    assert not thread_a.is_alive() and outcome == {"a": None}
    assert second is None, f"a 100 KiB launch after a racing 64 KiB opt-in failed: {second!r}"
    for queue in (queue_a, queue_b):
        in_new_thread(api.olSyncQueue, queue)
    assert sorted((launch[0], launch[3]) for launch in seen) == [(tag(b"a"), small), (tag(b"b1"), big),
                                                                 (tag(b"b2"), big)]


# ---- the status numbers against the real bindings -------------------------------------------------

def test_the_plugins_status_numbers_and_launch_constants_match_the_real_bindings() -> None:
    """cuda_driver hard-codes CUresult numbers and CU_LAUNCH_PARAM_* values: they must name what
    its comments say in the real bindings."""
    real = standin._types.real
    if real is None:
        pytest.skip("the real cuda-bindings (cuda.bindings.driver) is not importable: nothing to check against")
    expected = {
        "OUT_OF_MEMORY": {"CUDA_ERROR_OUT_OF_MEMORY"}, "NOT_FOUND": {"CUDA_ERROR_NOT_FOUND"},
        "INVALID_VALUE": {"CUDA_ERROR_INVALID_VALUE"},
        "NOT_SUPPORTED": {"CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
        "BAD_IMAGE": {"CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_PTX",
                      "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
                      "CUDA_ERROR_INVALID_SOURCE", "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
                      "CUDA_ERROR_JIT_COMPILATION_DISABLED"},
        "STICKY": {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ASSERT",
                   "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
                   "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED",
                   "CUDA_ERROR_TENSOR_MEMORY_LEAK", "CUDA_ERROR_CONTAINED", "CUDA_ERROR_EXTERNAL_DEVICE"},
    }
    for group, names in expected.items():
        assert {real.CUresult(code).name for code in getattr(cuda_driver, group)} == names, group
    for constant, name in ((cuda_driver.SUCCESS, "CUDA_SUCCESS"), (cuda_driver.NOT_READY, "CUDA_ERROR_NOT_READY"),
                           (cuda_driver.NO_DEVICE, "CUDA_ERROR_NO_DEVICE")):
        assert real.CUresult(constant).name == name
    for param in ("CU_LAUNCH_PARAM_END", "CU_LAUNCH_PARAM_BUFFER_POINTER", "CU_LAUNCH_PARAM_BUFFER_SIZE"):
        assert int(getattr(real, param)) == getattr(cuda_driver, param), param
