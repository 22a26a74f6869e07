"""Port of offload/unittests/OffloadAPI/symbol/olGetSymbolInfo.cpp.

``olGetSymbolInfoKernelTest`` (OffloadKernelTest: kernel "foo") → ``test_kernel_*``;
``olGetSymbolInfoGlobalTest`` (OffloadGlobalTest: variable "global") → ``test_global_*``.

Not ported (outputs are returned, there is no PropSize or PropValue): ``Kernel.InvalidSizeZero``,
``Kernel.InvalidSizeSmall``, ``Kernel.InvalidNullPointerPropValue``.
"""

from __future__ import annotations

from offloadrt import ErrorCode, SymbolInfo, SymbolKind, api

from ..conftest import FORCE_UINT32, assert_error

SIZEOF_UINT32 = 4


def test_kernel_success_kind(kernel: api.Symbol) -> None:
    assert api.olGetSymbolInfo(kernel, SymbolInfo.KIND) == SymbolKind.KERNEL


def test_global_success_kind(global_symbol: api.Symbol) -> None:
    assert api.olGetSymbolInfo(global_symbol, SymbolInfo.KIND) == SymbolKind.GLOBAL_VARIABLE


def test_kernel_invalid_address(kernel: api.Symbol) -> None:
    assert_error(ErrorCode.SYMBOL_KIND, api.olGetSymbolInfo, kernel, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)


def test_global_success_address(global_symbol: api.Symbol) -> None:
    address = api.olGetSymbolInfo(global_symbol, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert isinstance(address, int)
    assert address != 0


def test_kernel_invalid_size(kernel: api.Symbol) -> None:
    assert_error(ErrorCode.SYMBOL_KIND, api.olGetSymbolInfo, kernel, SymbolInfo.GLOBAL_VARIABLE_SIZE)


def test_global_success_size(global_symbol: api.Symbol) -> None:
    assert api.olGetSymbolInfo(global_symbol, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 64 * SIZEOF_UINT32


def test_kernel_invalid_null_handle(kernel: api.Symbol) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetSymbolInfo, None, SymbolInfo.KIND)


def test_kernel_invalid_symbol_info_enumeration(kernel: api.Symbol) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetSymbolInfo, kernel, FORCE_UINT32)
