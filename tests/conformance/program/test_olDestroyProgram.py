"""Port of offload/unittests/OffloadAPI/program/olDestroyProgram.cpp (fixture: OffloadProgramTest)."""

from __future__ import annotations

from offloadrt import ErrorCode, api

from ..conftest import assert_error


def test_success(program: api.Program) -> None:
    assert api.olDestroyProgram(program) is None


def test_invalid_null_handle(program: api.Program) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olDestroyProgram, None)
