"""HIP statuses in offloadrt (offloadrt.plugins.amdgpu.driver): what each means, how it is named, and
loading hip-python.

The mapping and naming are checked against tests/hip_standin (any machine); the status numbers,
launch constants and every HIP function the AMDGPU plugin calls are checked against the real
hip-python where it is installed (it imports without ROCm), so a number or signature that drifts
from AMD's bindings fails here rather than on a GPU machine.
"""

from __future__ import annotations

import inspect
import re
import sys
import types
from collections.abc import Iterator
from enum import EnumMeta
from pathlib import Path
from typing import Any

import hip_standin as standin
import pytest

from offloadrt import ErrorCode, OffloadError
from offloadrt.plugins.amdgpu import driver as hd
from offloadrt.plugins.amdgpu import plugin as amdgpu
from offloadrt.plugins.amdgpu.plugin import AmdGpuDevice
from offloadrt.plugins.common import PluginUnavailable
from offloadrt.plugins.common.gpu import driver as gpu

GROUPS = [("OUT_OF_MEMORY", ErrorCode.OUT_OF_RESOURCES), ("BAD_IMAGE", ErrorCode.INVALID_BINARY),
          ("NOT_SUPPORTED", ErrorCode.UNSUPPORTED), ("NOT_FOUND", ErrorCode.NOT_FOUND),
          ("INVALID_VALUE", ErrorCode.INVALID_ARGUMENT)]
OTHERS = sorted(hd.STICKY) + [3, 35, 100, 101, 400, 600, 704, 1054, 12345]  # not in any group
STATUS_CODES = ([(status, code) for group, code in GROUPS for status in sorted(getattr(hd, group))]
                + [(999, ErrorCode.UNKNOWN)] + [(status, ErrorCode.BACKEND_FAILURE) for status in OTHERS])


@pytest.fixture
def hip(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The HIP stand-in, installed as hip.hip; shut down afterwards."""
    module = standin.install(monkeypatch)
    yield module
    standin.shutdown()


def status_name(status: int) -> str | None:
    """The stand-in's hipError_t name of ``status`` (None if it is no hipError_t)."""
    try:
        return str(standin.hip.hipError_t(status).name)
    except ValueError:
        return None


# ---- error codes ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "code"), STATUS_CODES, ids=[f"{s}-{status_name(s)}" for s, _ in STATUS_CODES])
def test_every_status_maps_to_its_error_code(status: int, code: ErrorCode) -> None:
    assert hd.Driver.error_code(status) == code
    assert hd.error_code(status) == code


def test_the_groups_do_not_overlap() -> None:
    groups = {name: getattr(hd, name) for name, _ in GROUPS} | {"STICKY": hd.STICKY}
    seen: dict[int, str] = {}
    for name, statuses in groups.items():
        for status in statuses:
            assert status not in seen, f"{status} is in {seen.get(status)} and {name}"
            seen[status] = name
    for status in (hd.SUCCESS, hd.NOT_READY, hd.NO_DEVICE, hd.INSUFFICIENT_DRIVER, 999):
        assert status not in seen, status


def test_the_shared_status_numbers_agree_with_the_gpu_layer() -> None:
    assert (hd.SUCCESS, hd.NOT_READY) == (gpu.SUCCESS, gpu.NOT_READY)


# ---- names, errors and check against the stand-in ---------------------------------------------------

@pytest.mark.parametrize(("status", "code"), [(s, c) for s, c in STATUS_CODES if status_name(s)],
                         ids=[f"{s}-{status_name(s)}" for s, _ in STATUS_CODES if status_name(s)])
def test_errors_carry_the_hip_name_and_explanation(hip: Any, status: int, code: ErrorCode) -> None:
    driver = hd.Driver(hip)
    name = status_name(status)
    assert driver.name(status).startswith(f"{name} (") and driver.name(status).endswith(")")
    err = driver.error(status, "hipSomething", "while testing")
    assert isinstance(err, OffloadError) and err.code == code
    assert err.details.startswith(f"hipSomething: {name} (") and err.details.endswith(": while testing")
    assert err.driver_status == status  # type: ignore[attr-defined]
    with pytest.raises(OffloadError) as info:
        driver.check((hip.hipError_t(status), None), "hipOther")
    assert info.value.code == code and info.value.details.startswith(f"hipOther: {name} (")
    assert info.value.driver_status == status  # type: ignore[attr-defined]


def test_a_few_names_in_full(hip: Any) -> None:
    driver = hd.Driver(hip)
    assert driver.name(2) == "hipErrorOutOfMemory (out of memory)"
    assert driver.error(200, "hipModuleLoadData").details == (
        "hipModuleLoadData: hipErrorInvalidImage (device kernel image is invalid)")
    assert driver.error(700, "hipStreamSynchronize").details == (
        "hipStreamSynchronize: hipErrorIllegalAddress (an illegal memory access was encountered)")


def test_a_status_outside_hiperror_t_is_a_backend_failure_and_does_not_raise(hip: Any) -> None:
    driver = hd.Driver(hip)
    err = driver.error(12345, "hipFuture")
    assert err.code == ErrorCode.BACKEND_FAILURE and err.details == "hipFuture: hipError_t 12345"
    assert err.driver_status == 12345  # type: ignore[attr-defined]
    with pytest.raises(OffloadError, match="hipFuture: hipError_t 12345"):
        driver.check((12345,), "hipFuture")


def test_check_unpacks_the_outputs(hip: Any) -> None:
    driver = hd.Driver(hip)
    assert driver.check((hip.hipError_t.hipSuccess, 7), "x") == 7
    assert driver.check((hip.hipError_t.hipSuccess, 7, 8), "x") == (7, 8)
    assert driver.check((0, None), "x") is None
    pointer = driver.check(hip.hipMalloc(64), "hipMalloc")  # a real call through the stand-in
    assert int(pointer) != 0
    driver.check(hip.hipFree(pointer), "hipFree")


def test_a_failing_call_through_the_stand_in_names_the_hip_status(hip: Any) -> None:
    driver = hd.Driver(hip)
    standin.inject("hipMalloc", hip.hipError_t.hipErrorOutOfMemory)
    with pytest.raises(OffloadError) as info:
        driver.check(hip.hipMalloc(64), "hipMalloc")
    assert info.value.code == ErrorCode.OUT_OF_RESOURCES
    assert info.value.details == "hipMalloc: hipErrorOutOfMemory (out of memory)"


def test_without_libamdhip64_a_status_is_named_by_its_enum_member(monkeypatch: pytest.MonkeyPatch) -> None:
    """hip-python's hipGetErrorName/String return (hipSuccess, None) when libamdhip64.so is missing."""
    module = standin.install(monkeypatch, library_missing=True)
    try:
        driver = hd.Driver(module)
        assert driver.name(2) == "hipErrorOutOfMemory"
        assert driver.error(500, "hipModuleGetFunction").details == "hipModuleGetFunction: hipErrorNotFound"
    finally:
        standin.shutdown()


def test_naming_a_status_never_hides_it() -> None:
    """Where the naming functions themselves fail, the error still has its code and a name."""
    broken = types.ModuleType("broken_hip")

    def refuse(*_args: object) -> tuple[int, None]:
        raise RuntimeError("libamdhip64.so is broken")

    broken.hipError_t = standin.hip.hipError_t  # type: ignore[attr-defined]
    broken.hipGetErrorName = refuse  # type: ignore[attr-defined]
    broken.hipGetErrorString = refuse  # type: ignore[attr-defined]
    driver = hd.Driver(broken)
    err = driver.error(2, "hipMalloc")
    assert err.code == ErrorCode.OUT_OF_RESOURCES and err.details == "hipMalloc: HIP status 2"


# ---- load_driver ---------------------------------------------------------------------------------

def test_load_driver_finds_hip_hip(hip: Any) -> None:
    assert hd.load_driver() is hip


def test_a_missing_hip_python_makes_the_plugin_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hip", None)  # `import hip` raises ImportError
    with pytest.raises(PluginUnavailable, match=r"hip-python is not installed .*offloadrt\[amd\]"):
        hd.load_driver()


def test_an_unrelated_hip_package_makes_the_plugin_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    unrelated = types.ModuleType("hip", "some other project called hip")
    unrelated.__path__ = []
    monkeypatch.setitem(sys.modules, "hip", unrelated)
    monkeypatch.delitem(sys.modules, "hip.hip", raising=False)
    with pytest.raises(PluginUnavailable, match="hip-python is not installed"):
        hd.load_driver()


# ---- against the real hip-python -----------------------------------------------------------------

def real_hip() -> Any:
    real = standin.real_module()
    if real is None:
        pytest.skip("hip-python (rocm.bindings.hip / hip.hip) is not importable: nothing to compare with")
    return real


def test_the_status_numbers_name_the_hip_errors_we_mean() -> None:
    real = real_hip()
    expected = {
        "OUT_OF_MEMORY": {"hipErrorOutOfMemory"},
        "BAD_IMAGE": {"hipErrorInvalidImage", "hipErrorNoBinaryForGpu", "hipErrorInvalidKernelFile",
                      "hipErrorInvalidSource", "hipErrorSharedObjectInitFailed"},
        "NOT_SUPPORTED": {"hipErrorNotSupported", "hipErrorPeerAccessUnsupported"},
        "NOT_FOUND": {"hipErrorNotFound"},
        "INVALID_VALUE": {"hipErrorInvalidValue"},
        "STICKY": {"hipErrorIllegalAddress", "hipErrorLaunchTimeOut", "hipErrorAssert", "hipErrorLaunchFailure",
                   "hipErrorECCNotCorrectable"},
    }
    for group, names in expected.items():
        statuses = getattr(hd, group)
        assert {real.hipError_t(status).name for status in statuses} == names, group
        assert len(statuses) == len(names), group
    for number, name in ((hd.SUCCESS, "hipSuccess"), (hd.NOT_READY, "hipErrorNotReady"),
                         (hd.NO_DEVICE, "hipErrorNoDevice"), (hd.INSUFFICIENT_DRIVER, "hipErrorInsufficientDriver"),
                         (hd.Driver.unknown_status, "hipErrorUnknown"),
                         (gpu.PEER_ALREADY_ENABLED, "hipErrorPeerAccessAlreadyEnabled")):
        assert real.hipError_t(number).name == name


def test_the_launch_constants_are_hips() -> None:
    real = real_hip()
    for constant in ("HIP_LAUNCH_PARAM_BUFFER_POINTER", "HIP_LAUNCH_PARAM_BUFFER_SIZE", "HIP_LAUNCH_PARAM_END"):
        assert int(getattr(real, constant)) == getattr(hd, constant), constant


def names_used_by_the_plugin() -> set[str]:
    """Every HIP name the AMDGPU plugin uses: its DRIVER_CALLS, each hip* name in amdgpu.py, and what
    hip_driver looks up on the module."""
    plugin_source = Path(amdgpu.__file__).read_text()
    driver_source = Path(hd.__file__).read_text()
    names = set(AmdGpuDevice.DRIVER_CALLS.values()) | set(re.findall(r"\bhip[A-Z]\w*", plugin_source))
    names |= set(re.findall(r"\b(hip(?:GetError\w+|Error_t))\b", driver_source))
    names |= {getattr(hd.Driver, attr) for attr in ("status_enum", "name_function", "explain_function")
              if isinstance(getattr(hd.Driver, attr, None), str)}
    return names


def members(enum: Any) -> dict[str, int]:
    return {name: int(member) for name, member in enum.__members__.items()}


def test_every_hip_name_the_plugin_uses_is_the_real_modules_with_the_stand_ins_signature() -> None:
    real = real_hip()
    names = names_used_by_the_plugin()
    assert set(AmdGpuDevice.DRIVER_CALLS.values()) <= names and {"hipInit", "hipModuleLoadData",
                                                                 "hipGetErrorName", "hipError_t"} <= names
    problems = []
    enums = [getattr(real, name) for name in names if isinstance(getattr(real, name, None), EnumMeta)]
    for name in sorted(names):
        if not hasattr(real, name):
            if not any(name in enum.__members__ for enum in enums):  # else a member of an enum it uses
                problems.append(f"{name}: not in the real module")
            continue
        if not hasattr(standin.hip, name):
            problems.append(f"{name}: not in the stand-in")
            continue
        ours, theirs = getattr(standin.hip, name), getattr(real, name)
        if isinstance(ours, EnumMeta):  # an enum: the same members and values
            if members(ours) != members(theirs):
                problems.append(f"{name}: members differ")
        elif callable(ours):
            if inspect.signature(ours) != inspect.signature(theirs):
                problems.append(f"{name}: stand-in {inspect.signature(ours)} but real {inspect.signature(theirs)}")
        elif int(ours) != int(theirs):
            problems.append(f"{name}: stand-in {int(ours)} but real {int(theirs)}")
    assert not problems, "\n".join(problems)
