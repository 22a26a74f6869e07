"""Port of offload/unittests/OffloadAPI/symbol/olGetSymbolInfoSize.cpp.

``olGetSymbolInfoSizeKernelTest`` (OffloadKernelTest) → ``test_kernel_*``;
``olGetSymbolInfoSizeGlobalTest`` (OffloadGlobalTest) → ``test_global_*``. The 2026 version
folds the ``Success*`` cases into ``SuccessPropertySize`` (parametrized over
``SymbolGlobalProperties``); those map onto the cases below (see ``tests/conformance/README.md``).

Not ported (the size is returned, there is no size pointer): ``Kernel.InvalidNullPointer``.
"""

from __future__ import annotations

from offloadrt import ErrorCode, SymbolInfo, api

from ..conftest import FORCE_UINT32, assert_error

SIZEOF_SYMBOL_KIND = 4  # sizeof(ol_symbol_kind_t)
SIZEOF_POINTER = 8  # sizeof(void *)
SIZEOF_SIZE_T = 8  # sizeof(size_t)


def test_kernel_success_kind(kernel: api.Symbol) -> None:
    assert api.olGetSymbolInfoSize(kernel, SymbolInfo.KIND) == SIZEOF_SYMBOL_KIND


def test_global_success_kind(global_symbol: api.Symbol) -> None:
    assert api.olGetSymbolInfoSize(global_symbol, SymbolInfo.KIND) == SIZEOF_SYMBOL_KIND


def test_global_success_address(global_symbol: api.Symbol) -> None:
    assert api.olGetSymbolInfoSize(global_symbol, SymbolInfo.GLOBAL_VARIABLE_ADDRESS) == SIZEOF_POINTER


def test_global_success_size(global_symbol: api.Symbol) -> None:
    assert api.olGetSymbolInfoSize(global_symbol, SymbolInfo.GLOBAL_VARIABLE_SIZE) == SIZEOF_SIZE_T


def test_kernel_invalid_null_handle(kernel: api.Symbol) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetSymbolInfoSize, None, SymbolInfo.KIND)


def test_kernel_invalid_symbol_info_enumeration(kernel: api.Symbol) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetSymbolInfoSize, kernel, FORCE_UINT32)
