"""Where two mistakes coincide, offloadrt reports the one LLVM 22's liboffload reports: its
validation checks the conditions of the header's ``@returns`` list in order (for example a zero
size before a NULL device), then the implementation checks the rest."""

from __future__ import annotations

import pytest
from conftest import expect_error, kernel, launch_args

from offloadrt import AllocType, ErrorCode, api


def test_olmemalloc_checks_the_size_before_the_device(runtime) -> None:
    expect_error(ErrorCode.INVALID_SIZE, api.olMemAlloc, None, AllocType.DEVICE, 0)
    expect_error(ErrorCode.INVALID_SIZE, api.olMemAlloc, "not a device", 99, 0)


def test_olmemregister_checks_the_size_before_the_device_and_the_pointer(runtime) -> None:
    expect_error(ErrorCode.INVALID_SIZE, api.olMemRegister, None, 0, 0)
    expect_error(ErrorCode.INVALID_NULL_HANDLE, api.olMemRegister, None, 0, 16)


def test_olmemfill_checks_the_size_rule_before_the_queue_and_the_pointer(host, queue) -> None:
    api.olDestroyQueue(queue)
    expect_error(ErrorCode.INVALID_SIZE, api.olMemFill, queue, 0, b"\x00\x00\x00\x00", 6)
    expect_error(ErrorCode.INVALID_SIZE, api.olMemFill, None, None, b"\x00\x00", 3)
    expect_error(ErrorCode.INVALID_QUEUE, api.olMemFill, queue, 0, b"\x00\x00", 4)
    expect_error(ErrorCode.INVALID_NULL_POINTER, api.olMemFill, None, 0, b"\x00\x00", 4)


def test_ollaunchkernel_checks_handles_then_launch_sizes_then_the_queue(host, basic) -> None:
    foo = kernel(basic, "foo")
    global_var = api.olGetSymbol(basic, "global", 1)
    other_device_queue = object()
    expect_error(ErrorCode.INVALID_NULL_HANDLE, api.olLaunchKernel, None, None, None, None, None)
    expect_error(ErrorCode.INVALID_NULL_HANDLE, api.olLaunchKernel, None, host, None, None, None)
    # NULL launch sizes come before the queue's device and the symbol's kind
    expect_error(ErrorCode.INVALID_NULL_POINTER, api.olLaunchKernel, other_device_queue, host, foo, None, None)
    expect_error(ErrorCode.INVALID_NULL_POINTER, api.olLaunchKernel, None, host, global_var, None, None)
    expect_error(ErrorCode.SYMBOL_KIND, api.olLaunchKernel, None, host, global_var, None, launch_args())


@pytest.mark.parametrize("call", ["olGetDeviceInfo", "olGetDeviceInfoSize"])
def test_info_queries_check_the_handle_before_the_property(runtime, call) -> None:
    expect_error(ErrorCode.INVALID_NULL_HANDLE, getattr(api, call), None, 999)
