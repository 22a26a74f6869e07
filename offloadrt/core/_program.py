"""Device code: :class:`Program` (a loaded image) and :class:`Kernel` (one of its kernels)."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import api
from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import AllocType, SymbolInfo, SymbolKind
from . import _args
from ._errors import with_context

if TYPE_CHECKING:
    from ..compile._types import Compiled
    from ._device import Device
    from ._memory import Buffer


class Program:
    """Device code loaded on one device by :meth:`Device.load`, or compiled from source by
    :meth:`Device.compile` / :meth:`Program.from_source`.

    ``kernel(name)`` finds a kernel (a compiled program's kernels come with their signatures, and
    C++ kernels are found by their source name), ``global_var(name)`` a global variable's memory.
    ``close()`` (or
    the end of a ``with`` block) unloads it: launches already queued still run, and its kernels and
    global variables cannot be used afterwards. A program is unloaded when it is garbage collected
    too; its kernels and global-variable buffers keep it alive.
    """

    def __init__(self, device: Device, handle: api.Program) -> None:
        self._device = device
        self._handle: api.Program | None = handle
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()  # guards _kernels
        self._compiled: Compiled | None = None  # what the compiler said of the kernels (compiled programs)

    @classmethod
    def _load(cls, device: Device, image: Any) -> Program:
        device._runtime.check()
        if isinstance(image, os.PathLike):
            with open(image, "rb") as file:
                data: Any = file.read()
        elif isinstance(image, str):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               "an image is bytes (PTX text too: encode it) or a pathlib.Path to read them from, "
                               "not a str")
        else:
            data = image
        try:
            handle = api.olCreateProgram(device.handle, data)
        except OffloadError as exc:
            raise with_context(exc, f"loading a program on {device}") from exc
        return cls(device, handle)

    @classmethod
    def from_source(cls, device: Device, source: str, options: Sequence[str] = (), lang: str | None = None, *,
                    name: str | None = None, cache: bool = True) -> Program:
        """Compile ``source`` for ``device`` and load it; the same as ``device.compile(source, options, lang)``.

        ``name`` is the source's file stem in compiler messages (``kernel``); ``cache=False``
        compiles without the disk cache. Errors: see ``docs/kernels.md``."""
        from ..compile import build_for  # kernels from source: imported on first use
        from ._device import Device

        if not isinstance(device, Device):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"device is an offloadrt.Device, got {type(device).__name__}")
        device._runtime.check()
        return cls._from_compiled(device, build_for(device, source, options, lang, name=name, cache=cache))

    @classmethod
    def _from_compiled(cls, device: Device, compiled: Compiled) -> Program:
        program = cls._load(device, compiled.image)
        program._compiled = compiled
        return program

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """The kernels the compiler found in the source (by source name); ``()`` for a loaded image."""
        return () if self._compiled is None else tuple(self._compiled.kernels)

    @property
    def log(self) -> str:
        """The compiler's output (warnings) for a compiled program; ``""`` for a loaded image."""
        return "" if self._compiled is None else self._compiled.log

    @property
    def device(self) -> Device:
        """The device the program is loaded on."""
        return self._device

    @property
    def handle(self) -> api.Program:
        """The ``ol*`` API's program."""
        return self._live()

    def _live(self) -> api.Program:
        handle = self._handle
        if handle is None:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{self!r} is closed; load the image again")
        self._device._runtime.check()
        return handle

    def kernel(self, name: str) -> Kernel:
        """The kernel ``name`` (the same object every time); ``NOT_FOUND`` if the program has none.

        In a compiled program ``name`` is the kernel's source name (a C++ kernel's mangled symbol
        works too), and the kernel's ``signature`` is already set where the source tells it."""
        found = self._kernels.get(name)
        if found is not None and self._handle is not None:
            return found
        if not isinstance(name, str):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"a kernel name is a str, got {type(name).__name__}")
        handle = self._live()
        compiled = self._compiled
        symbol_name = compiled.symbols.get(name, name) if compiled is not None else name
        try:
            symbol = api.olGetSymbol(handle, symbol_name, SymbolKind.KERNEL)
        except OffloadError as exc:
            known = f" (kernels compiled: {', '.join(compiled.kernels) or 'none'})" if compiled is not None else ""
            raise with_context(exc, f"finding kernel {name!r} in {self!r}{known}") from exc
        made = Kernel(self, symbol, name)
        if compiled is not None:
            signature = compiled.kernels.get(name)
            if signature is None and symbol_name != name:
                signature = compiled.kernels.get(symbol_name)
            if signature is None:  # asked by the mangled name: find the source name it stands for
                source_name = next((k for k, v in compiled.symbols.items() if v == name), None)
                signature = compiled.kernels.get(source_name) if source_name is not None else None
            if signature is not None:
                made.signature = signature
        with self._lock:
            return self._kernels.setdefault(name, made)

    def global_var(self, name: str) -> Buffer:
        """The memory of the global variable ``name``: a Buffer of its address and size on the device.
        It stays valid while the program is loaded (the buffer keeps the program alive); closing it
        frees nothing."""
        from ._memory import foreign

        handle = self._live()
        try:
            symbol = api.olGetSymbol(handle, name, SymbolKind.GLOBAL_VARIABLE)
            address = api.olGetSymbolInfo(symbol, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
            size = api.olGetSymbolInfo(symbol, SymbolInfo.GLOBAL_VARIABLE_SIZE)
        except OffloadError as exc:
            raise with_context(exc, f"finding global variable {name!r} in {self!r}") from exc
        return foreign(self._device, int(address), int(size), AllocType.DEVICE, self)

    def close(self) -> None:
        """Unload the program (``olDestroyProgram``) without waiting; closing twice is allowed."""
        handle, self._handle = self._handle, None
        if handle is None or self._device._runtime.closed:
            return
        try:
            api.olDestroyProgram(handle)
        except OffloadError as exc:
            raise with_context(exc, f"unloading {self!r}") from exc

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            try:
                self.close()
            except Exception as exc:  # noqa: BLE001  # a finaliser must not raise
                try:
                    warnings.warn(f"offloadrt: unloading a garbage-collected program failed: {exc}", OffloadWarning,
                                  stacklevel=2)
                except Exception:  # noqa: BLE001, S110  # interpreter shutdown
                    pass

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else str(self._handle).split(" on ")[0]
        return f"<Program on {self._device} ({state})>"


class Kernel:
    """A kernel of a :class:`Program`; launch it with :meth:`Queue.launch`.

    ``signature`` gives the C types of its parameters, e.g. ``("float32", "ptr", "ptr", "uint32")``
    for ``saxpy(float a, const float *x, float *y, uint32_t n)``: with it, plain Python numbers are
    packed as those types. ``"ptr"`` (or any C pointer type such as ``"float*"``) is a pointer
    parameter (pass a Buffer or Array); number types are NumPy or C names. A kernel keeps its
    program alive.
    """

    def __init__(self, program: Program, symbol: api.Symbol, name: str) -> None:
        self._program = program
        self._handle = symbol
        self.name = name
        self._signature: tuple[Any, ...] | None = None
        self._params: tuple[_args.Param, ...] | None = None
        self._fast: Any = _args.not_built  # the launcher of the last argument types and launch shape

    @property
    def program(self) -> Program:
        """The program the kernel belongs to."""
        return self._program

    @property
    def handle(self) -> api.Symbol:
        """The ``ol*`` API's kernel symbol."""
        self._program._live()
        return self._handle

    @property
    def signature(self) -> tuple[Any, ...] | None:
        """The parameter types, or None when unknown (then plain Python numbers cannot be passed)."""
        return self._signature

    @signature.setter
    def signature(self, value: Sequence[Any] | None) -> None:
        params = _args.parse_signature(value)
        self._signature = None if value is None else tuple(value)
        self._params = params
        self._fast = _args.not_built

    def __repr__(self) -> str:
        signature = "" if self._signature is None else f" ({', '.join(map(str, self._signature))})"
        return f"<Kernel {self.name!r}{signature} of {self._program!r}>"
