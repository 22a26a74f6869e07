"""Port of offload/unittests/OffloadAPI/symbol/olGetSymbol.cpp.

``olGetSymbolKernelTest`` is an OffloadProgramTest (program "foo"): ``test_kernel_*``.
``olGetSymbolGlobalTest`` is an OffloadQueueTest that also loads program "global":
``test_global_*`` (with the ``queue`` fixture, as upstream's set-up creates a queue).

Not ported (the symbol is returned, there is no output pointer): ``Kernel.InvalidNullKernelPointer``,
``Global.InvalidNullGlobalPointer``.
"""

from __future__ import annotations

import pytest

from offloadrt import ErrorCode, SymbolKind, api

from ..conftest import FORCE_UINT32, assert_error


def test_kernel_success(program: api.Program) -> None:
    kernel = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    assert kernel is not None
    assert isinstance(kernel, api.Symbol)


def test_kernel_success_same_ptr(program: api.Program) -> None:
    kernel_a = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    kernel_b = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    assert kernel_a is kernel_b


def test_kernel_invalid_null_program(program: api.Program) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetSymbol, None, "foo", SymbolKind.KERNEL)


def test_kernel_invalid_kernel_name(program: api.Program) -> None:
    assert_error(ErrorCode.NOT_FOUND, api.olGetSymbol, program, "invalid_kernel_name", SymbolKind.KERNEL)


def test_kernel_invalid_kind(program: api.Program) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetSymbol, program, "foo", FORCE_UINT32)


@pytest.mark.usefixtures("queue")
def test_global_success(global_program: api.Program) -> None:
    global_symbol = api.olGetSymbol(global_program, "global", SymbolKind.GLOBAL_VARIABLE)
    assert global_symbol is not None
    assert isinstance(global_symbol, api.Symbol)


@pytest.mark.usefixtures("queue")
def test_global_success_same_ptr(global_program: api.Program) -> None:
    global_a = api.olGetSymbol(global_program, "global", SymbolKind.GLOBAL_VARIABLE)
    global_b = api.olGetSymbol(global_program, "global", SymbolKind.GLOBAL_VARIABLE)
    assert global_a is global_b


@pytest.mark.usefixtures("queue")
def test_global_invalid_null_program(global_program: api.Program) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetSymbol, None, "global", SymbolKind.GLOBAL_VARIABLE)


@pytest.mark.usefixtures("queue")
def test_global_invalid_global_name(global_program: api.Program) -> None:
    assert_error(ErrorCode.NOT_FOUND, api.olGetSymbol, global_program, "invalid_global", SymbolKind.GLOBAL_VARIABLE)
