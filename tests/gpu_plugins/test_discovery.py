"""A GPU plugin's start: without its bindings or its driver, after a failure while starting, and again
after a full shutdown."""

from __future__ import annotations

import importlib
import json
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from _pytest.mark import ParameterSet
from gpu_fixtures import (
    KERNEL,
    Runtime,
    in_new_thread,
    info_output,
    launch_size,
    recorder,
    shut_down_fully,
    tag,
    unavailable,
)

from offloadrt import AllocType, ErrorCode, OffloadError, PlatformBackend, api
from offloadrt.errors import OffloadWarning

from .vendors import VENDORS, Vendor, per_vendor


def devices_of(report: dict[str, Any], vendor: Vendor) -> list[dict[str, Any]]:
    """The devices of ``vendor``'s platform in ``info --json``'s report."""
    return [device for device in report["Devices"] if device["Platform Backend"] == vendor.backend.name]


def test_without_the_bindings_the_platform_has_no_devices_and_a_reason(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in vendor.packages:
        monkeypatch.setitem(sys.modules, name, None)  # importing the bindings raises ImportError
    with pytest.raises(ImportError):
        importlib.import_module(vendor.packages[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # never an exception, not even a warning
        api.olInit()
        try:
            assert Runtime(vendor.backend).gpus == []
            reason = unavailable()[vendor.platform]
        finally:
            api.olShutDown()
        text = info_output()
        report = json.loads(info_output("--json"))
    assert re.fullmatch(vendor.no_bindings, reason), reason
    assert f"{vendor.platform}: {reason}" in text, text
    assert devices_of(report, vendor) == []


@pytest.mark.parametrize(("vendor", "reset_args", "inject", "reason"), per_vendor(lambda v: v.start_failures()),
                         indirect=["vendor"])
def test_a_driver_that_cannot_start_gives_zero_devices_and_a_reason(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch, reset_args: dict[str, Any],
        inject: tuple[str, str] | None, reason: str) -> None:
    vendor.standin.install(monkeypatch, **reset_args)
    if inject is not None:
        vendor.inject(*inject, times=None)  # info_output starts the runtime again
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            api.olInit()
            try:
                assert Runtime(vendor.backend).gpus == []
                assert reason in unavailable()[vendor.platform]
            finally:
                api.olShutDown()
            text = info_output()
            report = json.loads(info_output("--json"))
    finally:
        vendor.standin.shutdown()
    assert f"{vendor.platform}: {reason}" in text, text
    assert reason in report["Unavailable Platforms"][vendor.platform]
    assert devices_of(report, vendor) == []
    if reset_args.get("library_missing"):  # plain words and advice, no Python bytes reprs
        assert "b'" not in text and vendor.install_advice in text, text


@pytest.mark.parametrize(("vendor", "call", "skip"), per_vendor(lambda v: v.start_calls()), indirect=["vendor"])
def test_a_failure_while_starting_leaves_the_platform_out_with_a_warning(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch, call: str, skip: int) -> None:
    with vendor.runtime(monkeypatch, devices=2) as runtime:
        shut_down_fully()
        status = vendor.status("INVALID_VALUE")
        vendor.standin.inject(call, status, skip=skip)
        with pytest.warns(OffloadWarning, match=f"{vendor.platform} plugin failed to start"):
            vendor.init()
        runtime.refresh()
        assert runtime.gpus == []
        reason = unavailable()[vendor.platform]
        assert reason.startswith("initialisation failed") and f"{call}: {status.name}" in reason, reason
        shut_down_fully()
        vendor.init()  # nothing was left behind: the next init works
        runtime.refresh()
        assert len(runtime.gpus) == 2


def other_platforms(vendor: Vendor) -> Iterator[ParameterSet]:
    yield pytest.param([PlatformBackend.HOST], id="host")
    for other in VENDORS:
        if other is not vendor:
            yield pytest.param([other.backend], id=other.platform)


@pytest.mark.parametrize(("vendor", "platforms"), per_vendor(other_platforms), indirect=["vendor"])
def test_an_init_without_the_platform_never_calls_the_driver(
        vendor: Vendor, monkeypatch: pytest.MonkeyPatch, platforms: list[PlatformBackend]) -> None:
    vendor.standin.install(monkeypatch)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OffloadWarning)  # another GPU platform, asked for, is missing here
            api.olInit(platforms=platforms)
        try:
            assert Runtime(vendor.backend).gpus == []
            assert vendor.platform not in unavailable()
        finally:
            api.olShutDown()
        assert vendor.standin.calls == []
    finally:
        vendor.standin.shutdown()


def test_after_a_full_shutdown_a_new_init_finds_the_devices_again(vendor: Vendor, rt: Runtime) -> None:
    first = rt.gpus
    seen, body = recorder()
    vendor.standin.register_kernel("record", body)
    for cycle in range(3):
        vendor.init()  # nested: a reference, not a restart
        api.olShutDown()
        prog = vendor.program(rt.gpus[1])
        queue = api.olCreateQueue(rt.gpus[1])
        pointer = api.olMemAlloc(rt.gpus[1], AllocType.DEVICE, 16)
        api.olMemFill(queue, pointer, bytes([cycle]), 16)
        api.olLaunchKernel(queue, rt.gpus[1], api.olGetSymbol(prog, "record", KERNEL), tag(cycle), launch_size())
        in_new_thread(api.olSyncQueue, queue)
        assert vendor.standin.read(pointer, 16) == bytes([cycle]) * 16
        selections = vendor.count("select")
        inits = vendor.count("init")
        shut_down_fully()  # leaves the queue, the program and the memory to olShutDown
        state = vendor.standin.state()
        assert state.streams == {} and state.events == {} and state.modules == {} and state.allocations == {}
        vendor.init()
        rt.refresh()
        assert len(rt.gpus) == 2 and not set(rt.gpus) & set(first)
        assert vendor.count("init") == inits + 1
        api.olMemFree(api.olMemAlloc(rt.gpus[1], AllocType.DEVICE, 8))
        assert vendor.count("select") > selections  # a restarted device is selected again, not trusted
    assert [launch[0] for launch in seen] == [tag(0), tag(1), tag(2)]
    with pytest.raises(OffloadError) as info:
        api.olCreateQueue(first[0])
    assert info.value.code in (ErrorCode.INVALID_DEVICE, ErrorCode.INVALID_ARGUMENT)
