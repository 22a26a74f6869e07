"""The errors of the Python layer: every one is an :class:`offloadrt.OffloadError`.

Where a Python protocol needs a particular exception type (``AttributeError`` so that ``hasattr``
answers False, ``KeyError`` for a mapping, ``BufferError`` for DLPack consumers), the error is an
``OffloadError`` and that type at once.
"""

from __future__ import annotations

from typing import NoReturn

from ..errors import ErrorCode, OffloadError


class NotAvailableError(OffloadError, AttributeError):
    """An optional protocol attribute this object does not offer (``hasattr`` is False)."""


class MissingKeyError(OffloadError, KeyError):
    """A mapping key without a value (``mapping.get`` returns its default)."""

    def __str__(self) -> str:  # KeyError would quote the whole text
        return OffloadError.__str__(self)


class ExportError(OffloadError, BufferError):
    """A DLPack or buffer export that cannot be made (consumers expect ``BufferError``)."""


def fail(code: ErrorCode, details: str) -> NoReturn:
    raise OffloadError(code, details)


def with_context(error: OffloadError, context: str) -> OffloadError:
    """``error`` with ``context`` (what the layer was doing) in front of its details; same code and
    errors, the original as ``__cause__``."""
    wrapped = OffloadError(error.code, f"{context}: {error.details}", error.errors)
    wrapped.__cause__ = error
    return wrapped
