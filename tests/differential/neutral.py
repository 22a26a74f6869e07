"""The neutral form of a differential case: call sequences that both sides can run.

A :class:`Case` is a list of steps written once; ``run_offloadrt`` runs it through
``offloadrt.api`` and ``run_liboffload`` through the ctypes binding. Arguments follow the Python
form of the API (outputs are returned, so C's output pointers never appear) and are tokens each
side turns into its own representation: ``NULL`` is ``None`` in Python and a NULL pointer or
handle in C; ``E("DeviceInfo", "NAME")`` is offloadrt's ``DeviceInfo.NAME`` and LLVM 22's
``OL_DEVICE_INFO_NAME`` (so the enum numbering is checked too); a plain ``int`` where an enum goes
is passed as is (invalid enumerations); ``Ptr("buf", 4)`` is an address inside a host buffer the
case declares; ``Pattern``/``Image``/``Blob`` are byte payloads, which C passes as pointer and size.

What a step shows (its *outcome*) is the error name, by name (offloadrt numbers its codes
differently after BACKEND_FAILURE), and, on success, the returned value where both sides can
produce a comparable one: sizes, integers, strings, enum names, booleans, dimensions, copied
bytes. Handles and pointers are shown by what they are (``HOST``, ``PLATFORM``, a saved name, an
address inside a declared buffer as ``buf+4``), never by their numeric value.

This module must not import offloadrt: the fork server imports it next to liboffload only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# ---- argument tokens ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Symbolic:
    """A handle the runner finds itself: ``HOST`` (the device of the HOST platform) or ``PLATFORM`` (its platform)."""

    name: str

    def __repr__(self) -> str:
        return self.name


HOST = Symbolic("HOST")
PLATFORM = Symbolic("PLATFORM")
NULL = Symbolic("NULL")  # a NULL handle or pointer: None in Python


@dataclass(frozen=True)
class Ref:
    """The output an earlier step saved under ``name`` (``Call(..., save=name)``), plus ``offset``
    bytes for an address."""

    name: str
    offset: int = 0


@dataclass(frozen=True)
class Ptr:
    """The address ``offset`` bytes into the host buffer ``buffer`` that the case declares."""

    buffer: str
    offset: int = 0


@dataclass(frozen=True)
class E:
    """The enumerator ``name`` of ``family`` (offloadrt's enum class name: ``DeviceInfo``, ``AllocType``...)."""

    family: str
    name: str


@dataclass(frozen=True)
class Pattern:
    """olMemFill's pattern: ``bytes`` in Python, ``PatternPtr``/``PatternSize`` in C."""

    data: bytes


@dataclass(frozen=True)
class Image:
    """A program image: literal bytes, or ``resource`` ("elf": the test program built with cc)."""

    data: bytes = b""
    resource: str | None = None


@dataclass(frozen=True)
class Blob:
    """olLaunchKernel's argument blob: the parts packed in order (a ``Ptr`` as an 8-byte address)."""

    parts: tuple[bytes | Ptr, ...]


@dataclass(frozen=True)
class Launch:
    """``KernelLaunchSizeArgs`` / ``ol_kernel_launch_size_args_t``."""

    dimensions: int = 1
    num_groups: tuple[int, int, int] = (1, 1, 1)
    group_size: tuple[int, int, int] = (1, 1, 1)
    dyn_shared_memory: int = 0


@dataclass(frozen=True)
class Iterate:
    """olIterateDevices' callback: visits devices and answers False after ``stop_after`` of them."""

    stop_after: int | None = None


@dataclass(frozen=True)
class HostFunction:
    """olLaunchHostFunction's callback (it does nothing)."""


@dataclass(frozen=True)
class Events:
    """olWaitEvents' list of events (``Events(NULL)`` is a list holding one NULL handle)."""

    items: tuple[Any, ...]


# ---- steps and cases ------------------------------------------------------------------------------

SHOW_VALUE, SHOW_KIND, SHOW_CODE = "value", "kind", "code"


@dataclass(frozen=True)
class Call:
    """One entry point called with neutral arguments.

    ``save`` keeps the output for later ``Ref``s; ``show`` picks what the outcome holds besides the
    error name: the value, only its kind (``string``, ``integer``, ``enum:DeviceType``...), or
    nothing; ``loc`` calls the ``...WithCodeLoc`` variant with a code location.
    """

    fn: str
    args: tuple[Any, ...] = ()
    save: str | None = None
    show: str = SHOW_VALUE
    loc: bool = False

    @property
    def entry_point(self) -> str:
        return f"{self.fn}WithCodeLoc" if self.loc else self.fn


def call(fn: str, *args: Any, save: str | None = None, show: str = SHOW_VALUE, loc: bool = False) -> Call:
    return Call(fn, args, save, show, loc)


@dataclass(frozen=True)
class Read:
    """Not a call: the current bytes of a declared host buffer (to check what a copy wrote)."""

    buffer: str


Step = Call | Read


@dataclass(frozen=True)
class Case:
    """A call sequence run on both sides.

    ``buffers`` declares host buffers by name: initial bytes, or a size (zero-filled).
    With ``init`` the steps run between an ``olInit`` and a drain to zero users that are not part
    of the outcome; without it the case starts uninitialised and makes its own init calls.
    ``checks`` names the header ``@returns`` rules it exercises, as ``"olName: condition"``.
    """

    name: str
    steps: tuple[Step, ...]
    buffers: dict[str, bytes | int] = field(default_factory=dict)
    init: bool = True
    checks: tuple[str, ...] = ()

    def __hash__(self) -> int:
        return hash(self.name)


# ---- what each entry point takes and returns -----------------------------------------------------
# Parameter kinds (in neutral-argument order, C outputs left out): "handle", "pointer", "size",
# "flags" (uint32), "enum:<family>", "image", "pattern", "name", "iterate", "hostfn", "events",
# "launch", "blob". Output kinds: None, "handle", "pointer", "size", "bool", "info:<family>",
# "visits" (how many devices olIterateDevices' callback saw).


@dataclass(frozen=True)
class Signature:
    params: tuple[str, ...]
    output: str | None = None


def _info(family: str, handle: str = "handle") -> tuple[Signature, Signature]:
    params = (handle, f"enum:{family}")
    return Signature(params, f"info:{family}"), Signature(params, "size")


_PLATFORM_INFO, _PLATFORM_INFO_SIZE = _info("PlatformInfo")
_DEVICE_INFO, _DEVICE_INFO_SIZE = _info("DeviceInfo")
_MEM_INFO, _MEM_INFO_SIZE = _info("MemInfo", "pointer")
_QUEUE_INFO, _QUEUE_INFO_SIZE = _info("QueueInfo")
_EVENT_INFO, _EVENT_INFO_SIZE = _info("EventInfo")
_SYMBOL_INFO, _SYMBOL_INFO_SIZE = _info("SymbolInfo")

SIGNATURES: dict[str, Signature] = {
    "olInit": Signature(()),
    "olShutDown": Signature(()),
    "olIterateDevices": Signature(("iterate",), "visits"),
    "olGetPlatformInfo": _PLATFORM_INFO,
    "olGetPlatformInfoSize": _PLATFORM_INFO_SIZE,
    "olGetDeviceInfo": _DEVICE_INFO,
    "olGetDeviceInfoSize": _DEVICE_INFO_SIZE,
    "olMemAlloc": Signature(("handle", "enum:AllocType", "size"), "pointer"),
    "olMemFree": Signature(("pointer",)),
    "olMemRegister": Signature(("handle", "pointer", "size", "flags"), "pointer"),
    "olMemUnregister": Signature(("handle", "pointer")),
    "olGetMemInfo": _MEM_INFO,
    "olGetMemInfoSize": _MEM_INFO_SIZE,
    "olMemcpy": Signature(("handle", "pointer", "handle", "pointer", "handle", "size")),
    "olMemFill": Signature(("handle", "pointer", "pattern", "size")),
    "olCreateQueue": Signature(("handle",), "handle"),
    "olDestroyQueue": Signature(("handle",)),
    "olSyncQueue": Signature(("handle",)),
    "olWaitEvents": Signature(("handle", "events")),
    "olGetQueueInfo": _QUEUE_INFO,
    "olGetQueueInfoSize": _QUEUE_INFO_SIZE,
    "olLaunchHostFunction": Signature(("handle", "hostfn")),
    "olCreateEvent": Signature(("handle",), "handle"),
    "olDestroyEvent": Signature(("handle",)),
    "olSyncEvent": Signature(("handle",)),
    "olGetEventInfo": _EVENT_INFO,
    "olGetEventInfoSize": _EVENT_INFO_SIZE,
    "olCreateProgram": Signature(("handle", "image"), "handle"),
    "olDestroyProgram": Signature(("handle",)),
    "olIsValidBinary": Signature(("handle", "image"), "bool"),
    "olGetSymbol": Signature(("handle", "name", "enum:SymbolKind"), "handle"),
    "olGetSymbolInfo": _SYMBOL_INFO,
    "olGetSymbolInfoSize": _SYMBOL_INFO_SIZE,
    "olLaunchKernel": Signature(("handle", "handle", "handle", "blob", "launch")),
    "olCalculateOptimalOccupancy": Signature(("handle", "handle", "size"), "size"),
}

CODE_LOCATION = ("differential_case", "tests/differential/cases.py", 1, 1)  # what ...WithCodeLoc calls pass


# ---- outcomes -------------------------------------------------------------------------------------


def render(code: str, value: Any = None, show: str = SHOW_VALUE) -> str:
    """One step's outcome: the error name, then (on success) the value or its kind.

    ``value`` is already neutral: a symbolic name for handles and pointers (a ``str`` wrapped in
    :class:`Name`), an enum name (``Name``), a ``str`` (shown quoted), an ``int``, a ``bool``, a
    3-tuple of dimensions or ``bytes``; for ``SHOW_KIND`` it is the kind's name.
    """
    if code != "SUCCESS" or value is None or show == SHOW_CODE:
        return code
    if show == SHOW_KIND:
        return f"{code} {value}"
    if isinstance(value, Name):
        return f"{code} {value.text}"
    if isinstance(value, bool):
        return f"{code} {'true' if value else 'false'}"
    if isinstance(value, tuple):
        return f"{code} {{{', '.join(str(v) for v in value)}}}"
    return f"{code} {value!r}"


@dataclass(frozen=True)
class Name:
    """A value shown without quotes: an enum name or a symbolic handle/pointer name."""

    text: str


def kind_name(c_type: str) -> str:
    """The kind shown for an info value of C type ``c_type`` (liboffload.INFO_TYPES): integers of any
    width (and ``void *`` addresses, ints in Python) are "integer": the size query tells the width."""
    return "integer" if c_type in ("u32", "u64", "pointer") else c_type


def describe(step: Step) -> str:
    """A step as one short line: ``olMemAlloc(HOST, AllocType.DEVICE, 64)``."""
    if isinstance(step, Read):
        return f"read {step.buffer}"

    def arg(token: Any) -> str:
        if isinstance(token, E):
            return f"{token.family}.{token.name}"
        if isinstance(token, Ref):
            return f"{token.name}+{token.offset}" if token.offset else token.name
        if isinstance(token, Ptr):
            return f"{token.buffer}+{token.offset}" if token.offset else token.buffer
        if isinstance(token, (Pattern, Image)):
            return token.resource if isinstance(token, Image) and token.resource else repr(token.data)
        if isinstance(token, int) and not isinstance(token, bool) and token > 0xFFFF:
            return hex(token)
        return repr(token)

    return f"{step.entry_point}({', '.join(arg(t) for t in step.args)})"
