"""Shared rules of the ``olGet*Info`` / ``olGet*InfoSize`` queries."""

from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, OffloadError
from ..types import FIXED_SIZES, ValueKind


def value_size(kind: ValueKind, value: Any) -> int:
    """The byte size the C API reports for an info value (strings count their NUL)."""
    if kind is ValueKind.STRING:
        return len(str(value).encode()) + 1
    return FIXED_SIZES[kind]


def unimplemented(prop: Any, why: str = "the backend does not report this property") -> OffloadError:
    return OffloadError(ErrorCode.UNIMPLEMENTED, f"{prop.name}: {why}")
