"""Error codes and the one exception type every layer of offloadrt raises."""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum


class ErrorCode(IntEnum):
    """liboffload's ``ol_errc_t`` without prefix, in C order, plus ``QUEUE_ERROR``."""

    SUCCESS = 0
    UNKNOWN = 1
    HOST_IO = 2
    INVALID_BINARY = 3
    INVALID_NULL_POINTER = 4
    INVALID_ARGUMENT = 5
    NOT_FOUND = 6
    OUT_OF_RESOURCES = 7
    INVALID_SIZE = 8
    INVALID_ENUMERATION = 9
    HOST_TOOL_NOT_FOUND = 10
    INVALID_VALUE = 11
    UNIMPLEMENTED = 12
    UNSUPPORTED = 13
    ASSEMBLE_FAILURE = 14
    COMPILE_FAILURE = 15
    LINK_FAILURE = 16
    BACKEND_FAILURE = 17
    QUEUE_ERROR = 18
    UNINITIALIZED = 19
    INVALID_NULL_HANDLE = 20
    INVALID_PLATFORM = 21
    INVALID_DEVICE = 22
    INVALID_QUEUE = 23
    INVALID_EVENT = 24
    SYMBOL_KIND = 25


class OffloadError(Exception):
    """A failed offloadrt call.

    ``code`` is an :class:`ErrorCode`; ``details`` says what was wrong. ``errors`` holds the
    individual failures when one call had several (``olShutDown`` of several plugins); it is
    empty otherwise.
    """

    def __init__(self, code: ErrorCode, details: str = "", errors: Iterable[OffloadError] = ()):
        self.code = ErrorCode(code)
        self.details = details
        self.errors: tuple[OffloadError, ...] = tuple(errors)
        super().__init__(code, details)

    def __str__(self) -> str:
        return f"{self.code.name}: {self.details}" if self.details else self.code.name

    def __repr__(self) -> str:
        return f"OffloadError({self.code.name}, {self.details!r})"

    @classmethod
    def join(cls, errors: Iterable[OffloadError], summary: str) -> OffloadError:
        """One error that carries every failure in ``errors`` (none dropped).

        A single failure keeps its own code; several get the code of the first and a
        details text listing all of them.
        """
        errs = list(errors)
        if len(errs) == 1:
            only = errs[0]
            return cls(only.code, f"{summary}: {only.details}", errs)
        lines = "; ".join(f"[{i + 1}] {e}" for i, e in enumerate(errs))
        return cls(errs[0].code, f"{summary} ({len(errs)} errors): {lines}", errs)


class OffloadWarning(RuntimeWarning):
    """Raised as a warning where an error cannot be raised: destructors, callbacks, exit."""
