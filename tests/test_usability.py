"""What trips people up (issue 21): the Python API's names in ``dir``/``help``, why a GPU device is
missing, what ``offloadrt info``'s versions mean, and GPU work-group limits on the host device."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from fake_plugins import Factory, MissingDriverPlugin, registered

import offloadrt
from offloadrt import DeviceInfo, Dimensions, ErrorCode, OffloadError, OffloadWarning, PlatformBackend, api
from offloadrt.api import _state
from offloadrt.core import _runtime

API_NAMES = ("Array", "Buffer", "Device", "Event", "Kernel", "MemoryPool", "Program", "Queue", "asarray", "device",
             "devices", "empty")
# Being added to offloadrt.core by others: offloadrt exports each once offloadrt.core has it.
PENDING_NAMES = ("zeros", "full", "empty_like", "zeros_like", "ascontiguousarray", "elementwise", "reduction")


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (no OFFLOAD* variable of ours leaks in)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**clean, **env}, check=False)


@pytest.fixture(autouse=True)
def layer() -> Iterator[None]:
    """Each test starts the layer's runtime itself (with the plugins or variables it sets) and gives it back."""
    _runtime.shutdown()
    yield
    _runtime.shutdown()


# ---- 1. the Python API in dir(), help() and tab completion -----------------------------------------

def test_dir_lists_the_python_api_without_importing_it() -> None:
    shown = python("import sys, offloadrt\n"
                   "print(sorted(dir(offloadrt)))\n"
                   "print('offloadrt.core' in sys.modules, 'numpy' in sys.modules)")
    assert shown.returncode == 0, shown.stderr
    names, imported = shown.stdout.splitlines()
    for name in (*API_NAMES, *PENDING_NAMES, "compile", "OffloadError", "unavailable_platforms", "get_include"):
        assert repr(name) in names, name
    assert imported == "False False", "dir() imported offloadrt.core"


def test_import_offloadrt_stays_light() -> None:
    shown = python("import sys, offloadrt\nprint(sorted(m for m in sys.modules if m.startswith('offloadrt.core')))")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "[]"


def test_help_shows_the_python_api() -> None:
    shown = python("import offloadrt; help(offloadrt)", PAGER="cat", TERM="dumb")
    assert shown.returncode == 0, shown.stderr
    for words in ("device(spec=None)", "devices(backend=None)", "asarray(obj", "empty(shape", "class Array",
                  "class Queue", "zeros", "elementwise", "reduction"):
        assert words in shown.stdout, words


def test_every_name_of_offloadrt_core_is_exported_lazily() -> None:
    import offloadrt.core

    lazy = offloadrt._PYTHON_API
    assert set(offloadrt.core.__all__) - {"DeviceProperties"} <= lazy
    assert set(PENDING_NAMES) <= lazy
    for name in sorted(lazy):
        if hasattr(offloadrt.core, name):
            assert getattr(offloadrt, name) is getattr(offloadrt.core, name)
            assert name in offloadrt.__all__
        else:  # not written yet: a plain AttributeError, and star-import leaves it out
            with pytest.raises(AttributeError, match=name):
                getattr(offloadrt, name)
            assert name not in offloadrt.__all__


def test_star_import_gives_the_python_api() -> None:
    shown = python("from offloadrt import *\nprint(device().name and asarray([1, 2]).numpy().tolist(), Array)")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("[1, 2] <class 'offloadrt.core._array.Array'>")


# ---- 2. a device whose platform did not start says why ---------------------------------------------

@pytest.mark.parametrize("spec", ["cuda:0", "cuda", "CUDA:0", MissingDriverPlugin.name])
def test_a_missing_gpu_device_names_why_its_platform_did_not_start(spec: str) -> None:
    with registered(Factory(MissingDriverPlugin, PlatformBackend.CUDA)):
        try:
            with pytest.raises(OffloadError) as info:
                offloadrt.device(spec)
        finally:
            _runtime.shutdown()
    assert info.value.code == ErrorCode.NOT_FOUND
    details = info.value.details
    assert f"no device {spec!r}: the {MissingDriverPlugin.name} platform did not start, because the vendor " \
           f"package is not installed" in details
    assert "The devices are: host:0" in details


def test_an_unknown_device_spec_still_lists_the_devices_only() -> None:
    with pytest.raises(OffloadError) as info:
        offloadrt.device("nosuch:0")
    assert info.value.code == ErrorCode.NOT_FOUND
    assert "did not start" not in info.value.details and "The devices are: host:0" in info.value.details


def test_a_missing_ordinal_of_a_running_platform_gives_no_reason() -> None:
    with pytest.raises(OffloadError) as info:
        offloadrt.device("host:7")
    assert "did not start" not in info.value.details and "The devices are: host:0" in info.value.details


# ---- 3. offloadrt info: which version is which -----------------------------------------------------

def test_info_says_what_each_version_is() -> None:
    text = subprocess.run([sys.executable, "-m", "offloadrt", "info"], capture_output=True, text=True, timeout=120,
                          check=True).stdout.splitlines()
    assert text[0] == f"offloadrt Version: {offloadrt.__version__} (implements LLVM 22.1's liboffload API)"
    # LLVM's llvm-offload-device-info prints the same first words; what follows says it is no LLVM release
    assert text[1].startswith("Liboffload Version: 0.0.1 (OL_VERSION of the ol* API headers")
    assert "not an LLVM version" in text[1]
    report = json.loads(subprocess.run([sys.executable, "-m", "offloadrt", "info", "--json"], capture_output=True,
                                       text=True, timeout=120, check=True).stdout)
    assert report["Liboffload Version"] == "0.0.1", "the JSON field stays as llvm-offload-device-info has it"
    assert report["offloadrt Version"] == offloadrt.__version__


# ---- 4. GPU work-group limits on the host device ---------------------------------------------------

@pytest.fixture
def gpu_limited_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[offloadrt.Device]:
    """The host device started with OFFLOADRT_HOST_GPU_LIMITS=1."""
    assert _state.STATE.refcount == 0, "an earlier test left the runtime running: the variable would not be read"
    monkeypatch.setenv("OFFLOADRT_HOST_GPU_LIMITS", "1")
    yield offloadrt.device("host")


@pytest.fixture
def saxpy(build) -> bytes:
    return build("core_kernels")


def _saxpy(host: offloadrt.Device, image: bytes) -> offloadrt.Kernel:
    kernel = host.load(image).kernel("saxpy")
    kernel.signature = ("float32", "ptr", "ptr", "uint32")
    return kernel


def test_gpu_limits_are_what_the_host_reports(gpu_limited_host: offloadrt.Device) -> None:
    info = gpu_limited_host.info
    assert info[DeviceInfo.MAX_WORK_GROUP_SIZE] == 1024
    assert info[DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION] == Dimensions(1024, 1024, 64)
    assert info[DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE] == 48 * 1024
    assert api.olGetDeviceInfo(gpu_limited_host.handle, DeviceInfo.MAX_WORK_GROUP_SIZE) == 1024


def test_gpu_limits_run_what_a_gpu_runs(gpu_limited_host: offloadrt.Device, saxpy: bytes) -> None:
    kernel = _saxpy(gpu_limited_host, saxpy)
    n = 4096
    x = offloadrt.asarray(np.arange(n, dtype=np.float32), gpu_limited_host)
    y = offloadrt.asarray(np.ones(n, dtype=np.float32), gpu_limited_host)
    with gpu_limited_host.queue() as queue:
        queue.launch(kernel, n // 1024, 1024, 2.0, x, y, n, shared_mem=48 * 1024)
        queue.launch(kernel, (n // 1024, 1, 1), (1024, 1, 1), 2.0, x, y, n)
    assert np.array_equal(y.numpy(), 4 * np.arange(n, dtype=np.float32) + 1)


@pytest.mark.parametrize("group, shared, words", [
    ((2048, 1, 1), 0, "group size (2048, 1, 1) exceeds the device limit (1024, 1024, 64) / 1024 items"),
    ((1, 1, 65), 0, "group size (1, 1, 65) exceeds the device limit (1024, 1024, 64) / 1024 items"),
    ((32, 32, 2), 0, "group size (32, 32, 2) exceeds the device limit (1024, 1024, 64) / 1024 items"),
    ((256, 1, 1), 48 * 1024 + 1, "dynamic shared memory 49153 is outside 0..49152, the device's work-group memory"),
])
def test_gpu_limits_refuse_what_every_gpu_refuses(gpu_limited_host: offloadrt.Device, saxpy: bytes,
                                                   group: tuple[int, int, int], shared: int, words: str) -> None:
    kernel = _saxpy(gpu_limited_host, saxpy)
    y = offloadrt.empty(16, np.float32, gpu_limited_host)
    with gpu_limited_host.queue() as queue:
        for _ in range(2):  # the second launch of a shape takes the fast path, which must refuse it too
            with pytest.raises(OffloadError) as info:
                queue.launch(kernel, 1, group, 2.0, y, y, 0, shared_mem=shared)
            assert info.value.code == ErrorCode.INVALID_SIZE and words in info.value.details
    # the ol* API refuses it alike, with or without a queue (the same check as a GPU plugin's)
    blob = bytes(ctypes.c_float(2.0)) + bytes(4) + y.ptr.to_bytes(8, "little") * 2 + bytes(4)
    sizes = offloadrt.KernelLaunchSizeArgs(dimensions=3, num_groups=Dimensions(1, 1, 1),
                                           group_size=Dimensions(*group), dyn_shared_memory=shared)
    with pytest.raises(OffloadError) as info:
        api.olLaunchKernel(None, gpu_limited_host.handle, kernel.handle, blob, sizes)
    assert info.value.code == ErrorCode.INVALID_SIZE and words in info.value.details


def test_without_the_variable_the_host_takes_any_group(monkeypatch: pytest.MonkeyPatch, saxpy: bytes) -> None:
    monkeypatch.delenv("OFFLOADRT_HOST_GPU_LIMITS", raising=False)
    host = offloadrt.device("host")
    assert host.info[DeviceInfo.MAX_WORK_GROUP_SIZE] == 0xFFFFFFFF
    assert host.info[DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE] > 48 * 1024
    kernel = _saxpy(host, saxpy)
    y = offloadrt.asarray(np.ones(2048, dtype=np.float32), host)
    with host.queue() as queue:
        queue.launch(kernel, 1, 2048, 1.0, y, y, 2048)
    assert np.array_equal(y.numpy(), np.full(2048, 2, dtype=np.float32))


@pytest.mark.parametrize("value, limited", [("0", False), ("", False), ("off", False), ("true", True)])
def test_the_variable_reads_as_a_switch(monkeypatch: pytest.MonkeyPatch, value: str, limited: bool) -> None:
    monkeypatch.setenv("OFFLOADRT_HOST_GPU_LIMITS", value)
    expected = 1024 if limited else 0xFFFFFFFF
    assert offloadrt.device("host").info[DeviceInfo.MAX_WORK_GROUP_SIZE] == expected


def test_an_unreadable_value_keeps_the_host_limits_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFLOADRT_HOST_GPU_LIMITS", "gpu")
    with pytest.warns(OffloadWarning, match="OFFLOADRT_HOST_GPU_LIMITS='gpu' is neither 1 nor 0"):
        host = offloadrt.device("host")
    assert host.info[DeviceInfo.MAX_WORK_GROUP_SIZE] == 0xFFFFFFFF


def test_info_shows_the_gpu_limits() -> None:
    shown = python("import offloadrt.__main__ as m; m.main(['info'])", OFFLOADRT_HOST_GPU_LIMITS="1")
    assert shown.returncode == 0, shown.stderr
    assert "    Max Work Group Size: 1024\n" in shown.stdout
    assert "    Max Work Group Size Per Dimension: {x: 1024, y: 1024, z: 64}\n" in shown.stdout
    assert "    Work Group Shared Mem Size: 49152 B\n" in shown.stdout
    assert "GPU Limits: on (OFFLOADRT_HOST_GPU_LIMITS)" in shown.stdout
