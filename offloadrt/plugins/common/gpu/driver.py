"""GPU driver statuses: naming them with the driver's own words and mapping them to offloadrt's errors.

The CUDA driver API and HIP's driver-style API are close cousins: both return ``(status,
*outputs)`` tuples from their Python bindings and share many status numbers (600 is
``NOT_READY`` for both). A vendor subclass of :class:`GpuDriver` names its status enum and says
which statuses mean what.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any, ClassVar

from ....errors import ErrorCode, OffloadError

SUCCESS = 0
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE and hipErrorNoDevice
NOT_READY = 600  # CUDA_ERROR_NOT_READY and hipErrorNotReady share the number
PEER_ALREADY_ENABLED = 704  # CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, hipErrorPeerAccessAlreadyEnabled
ALREADY_REGISTERED = 712  # CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, hipErrorHostMemoryAlreadyRegistered
NOT_REGISTERED = 713  # CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, hipErrorHostMemoryNotRegistered


class GpuDriver:
    """A loaded driver module, and the naming and mapping of its statuses to errors.

    A vendor subclass names its status enum and the two functions that describe a status, and
    says which statuses mean what.
    """

    #: label used in messages ("CUDA", "HIP")
    vendor: ClassVar[str] = "GPU"
    #: the bindings' status enum and the functions giving a status's name and explanation
    status_enum: ClassVar[str]
    name_function: ClassVar[str]
    explain_function: ClassVar[str]
    #: statuses by what they mean for offloadrt
    out_of_memory: ClassVar[frozenset[int]] = frozenset()
    bad_image: ClassVar[frozenset[int]] = frozenset()
    not_supported: ClassVar[frozenset[int]] = frozenset()
    not_found: ClassVar[frozenset[int]] = frozenset()
    invalid_value: ClassVar[frozenset[int]] = frozenset()
    invalid_size: ClassVar[frozenset[int]] = frozenset()
    #: faults that leave the device unusable for the rest of the process
    sticky: ClassVar[frozenset[int]] = frozenset()
    unknown_status: ClassVar[int] = 999

    def __init__(self, module: ModuleType):
        self.module = module
        self.names: dict[int, str] = {}  # status -> "NAME (explanation)"; a benign race fills it twice

    @classmethod
    def error_code(cls, status: int) -> ErrorCode:
        for statuses, code in ((cls.out_of_memory, ErrorCode.OUT_OF_RESOURCES),
                               (cls.bad_image, ErrorCode.INVALID_BINARY),
                               (cls.not_supported, ErrorCode.UNSUPPORTED),
                               (cls.not_found, ErrorCode.NOT_FOUND),
                               (cls.invalid_value, ErrorCode.INVALID_ARGUMENT),
                               (cls.invalid_size, ErrorCode.INVALID_SIZE)):
            if status in statuses:
                return code
        if status == cls.unknown_status:
            return ErrorCode.UNKNOWN
        return ErrorCode.BACKEND_FAILURE

    def _lookup_name(self, status: int) -> str:
        """The driver's own name and explanation of ``status``."""
        mod = self.module
        try:
            enum = getattr(mod, self.status_enum)(status)
        except ValueError:
            return f"{self.status_enum} {status}"
        label = getattr(enum, "name", str(status))
        res, name = getattr(mod, self.name_function)(enum)
        if int(res) == SUCCESS and name:
            label = _text(name)
        res, text = getattr(mod, self.explain_function)(enum)
        if int(res) == SUCCESS and text:
            label = f"{label} ({_text(text)})"
        return label

    def name(self, status: int) -> str:
        """The driver's name for a status and its explanation, e.g. ``hipErrorOutOfMemory (out of memory)``."""
        known = self.names.get(status)
        if known is None:
            try:
                known = self._lookup_name(status)
            except Exception:  # noqa: BLE001  # naming an error must never hide it
                known = f"{self.vendor} status {status}"
            self.names[status] = known
        return known

    def error(self, status: int, call: str, extra: str = "") -> OffloadError:
        details = f"{call}: {self.name(status)}"
        if extra:
            details = f"{details}: {extra}"
        err = OffloadError(self.error_code(status), details)
        err.driver_status = status  # type: ignore[attr-defined]
        return err

    def check(self, result: Any, call: str) -> Any:
        """The outputs of a driver call (one value unpacked, several as a tuple); raise on failure."""
        status = int(result[0])
        if status != SUCCESS:
            raise self.error(status, call)
        if len(result) == 2:
            return result[1]
        return result[1:]


def _text(value: object) -> str:
    """A C string from the bindings (``bytes``, or hip-python's ``CStr``) as text."""
    decode = getattr(value, "decode", None)
    return decode(errors="replace") if callable(decode) else str(value)



def _plain(exc: BaseException) -> str:
    """An exception's text without Python's bytes reprs (``b'libamdhip64.so'`` → ``libamdhip64.so``)."""
    text = str(exc)
    text = re.sub(r"""'?b(['"])(.*?)\1'?""", r"\2", text)
    return text.strip().rstrip(".")
