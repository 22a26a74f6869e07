"""Failed calls, kernel faults, injected failures and kernel bodies of the driver stand-ins.

TEST DOUBLE, not NVIDIA or AMD code. A vendor front end raises :class:`DriverError` with its
driver's status code; its call wrapper turns it into the status the bindings return.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

in_host_function = threading.local()  # .active: this thread is running a host function now


class DriverError(Exception):
    """A driver call fails with ``code`` (raised inside the stand-in, returned as its status);
    ``why``, when given, is what the stand-in's call wrapper adds to its diagnostics."""

    def __init__(self, code: int, why: str = "") -> None:
        super().__init__(code)
        self.code = int(code)
        self.why = why


def fail(code: int, why: str) -> DriverError:
    """A :class:`DriverError` with its reason, which the stand-in's call wrapper keeps in its
    diagnostics for the test to read."""
    return DriverError(code, why)


class KernelFault(Exception):  # noqa: N818  # the name the tests use
    """Raised by a registered kernel implementation: the launch faults with ``code`` (a CUresult
    in the CUDA stand-in, a hipError_t in the HIP stand-in).

    Reported asynchronously, as on a GPU; a sticky code poisons the context.
    """

    def __init__(self, code: Any, message: str = "") -> None:
        super().__init__(f"{getattr(code, 'name', code)}{': ' + message if message else ''}")
        self.code = int(code)


KernelBody = Callable[[bytes, tuple[int, int, int], tuple[int, int, int], int, int], object]
Layout = list[tuple[int, int]]  # a kernel's parameters: (offset, size) each, in order


def c_layout(params: Iterable[int | tuple[int, int]]) -> Layout:
    """(offset, size) of each parameter of a C parameter list given as (size, alignment) pairs or
    sizes (a size alone is aligned to itself, at most 8 bytes): each at the next multiple of its
    alignment, as C lays out a struct of the parameters and as NVCC/clang lay out kernel arguments."""
    layout: Layout = []
    end = 0
    for param in params:
        size, align = param if isinstance(param, tuple) else (param, min(param, 8) or 1)
        offset = end + (-end % max(1, align))
        layout.append((offset, size))
        end = offset + size
    return layout


def layout_size(layout: Layout) -> int:
    """The size of a parameter buffer of ``layout``: where its last parameter ends (no tail padding)."""
    return max((offset + size for offset, size in layout), default=0)


@dataclass
class KernelImpl:
    """A Python body for the kernel of that name: ``fn(params, grid, block, shared_mem, device)``."""

    fn: KernelBody
    params: Layout | None = None  # where each parameter lies in the argument buffer
    max_threads: int | None = None


@dataclass
class Injection:
    code: int
    times: int | None  # None: every call from now on
    skip: int


class Controls:
    """What a test sets for one stand-in: injected failures and kernel bodies by name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards injections and kernels (set by tests, read by any thread)
        self.injections: dict[str, deque[Injection]] = {}
        self.kernels: dict[str, KernelImpl] = {}

    def clear(self) -> None:
        with self.lock:
            self.injections.clear()
            self.kernels.clear()

    def inject(self, name: str, code: int, times: int | None, skip: int) -> None:
        """Queue a failure of ``name`` (see the stand-ins' ``inject``)."""
        with self.lock:
            self.injections.setdefault(name, deque()).append(Injection(int(code), times, skip))

    def register_kernel(self, name: str, fn: KernelBody, param_sizes: Iterable[int | tuple[int, int]] | None,
                        max_threads: int | None) -> None:
        """Give ``name`` a body; ``param_sizes`` are (size, alignment) pairs or sizes (aligned to
        at most 8 bytes), laid out as :func:`c_layout` says."""
        layout = None if param_sizes is None else c_layout(param_sizes)
        with self.lock:
            self.kernels[name] = KernelImpl(fn, layout, max_threads)

    def kernel(self, name: str) -> KernelImpl | None:
        with self.lock:
            return self.kernels.get(name)

    def kernel_table(self) -> dict[str, KernelImpl]:
        with self.lock:
            return dict(self.kernels)

    def take_injection(self, name: str) -> int | None:
        """The code an injected failure makes this call of ``name`` return, if any."""
        with self.lock:
            pending = self.injections.get(name)
            if not pending:
                return None
            entry = pending[0]
            if entry.skip > 0:
                entry.skip -= 1
                return None
            if entry.times is not None:
                entry.times -= 1
                if entry.times <= 0:
                    pending.popleft()
            return entry.code
