"""Running a launch's work-groups: in native code through the image's runner, or from Python.

Every image built with ``host_kernel.h`` carries two small exported runners (``__ol_host_dispatch_v1``
and ``__ol_host_call_v1``, see the header). With them a thread makes one ctypes call per launch it
helps with, and the group loop (chunks taken from a shared atomic counter, fault checks, group
coordinates) runs in C at a few nanoseconds per group; queued one-group launches run in batches
of one call. An image without them gets the same behaviour from Python, one ctypes call per group.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
from typing import TYPE_CHECKING, Any

from ...errors import ErrorCode, OffloadError

if TYPE_CHECKING:
    from .image import HostKernel

KERNEL_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
DISPATCH_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
CALL_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p)
DISPATCH_SYMBOL = "__ol_host_dispatch_v1"
CALL_SYMBOL = "__ol_host_call_v1"
NATIVE_LIMIT = 1 << 62  # launches of more work-groups than this run from Python (the runner counts in 64 bits)
CHUNKS_PER_THREAD = 16  # a native launch hands out its groups in about this many chunks per thread
PYTHON_CHUNKS_PER_THREAD = 4


class LaunchStruct(ctypes.Structure):
    """``ol_host_launch_t`` from ``host_kernel.h``, flattened (same layout)."""

    _fields_ = [
        ("gx", ctypes.c_uint32), ("gy", ctypes.c_uint32), ("gz", ctypes.c_uint32),
        ("ngx", ctypes.c_uint32), ("ngy", ctypes.c_uint32), ("ngz", ctypes.c_uint32),
        ("bx", ctypes.c_uint32), ("by", ctypes.c_uint32), ("bz", ctypes.c_uint32),
        ("dyn_shared_memory", ctypes.c_void_p),
    ]


class DispatchStruct(ctypes.Structure):
    """``ol_host_dispatch_t`` from ``host_kernel.h`` (same layout)."""

    _fields_ = [
        ("kernel", ctypes.c_void_p), ("args", ctypes.c_void_p),
        ("ngx", ctypes.c_uint32), ("ngy", ctypes.c_uint32), ("ngz", ctypes.c_uint32),
        ("bx", ctypes.c_uint32), ("by", ctypes.c_uint32), ("bz", ctypes.c_uint32),
        ("total", ctypes.c_uint64), ("chunk", ctypes.c_uint64), ("next", ctypes.c_uint64),
        ("status", ctypes.c_int32), ("reserved", ctypes.c_uint32), ("fault_group", ctypes.c_uint64),
    ]


def _bytes_data_offset() -> int | None:
    """How far a ``bytes`` object's data lies from its ``id`` in this interpreter, or None where the
    two are unrelated: lets a queued launch name its argument blob's address for the batch runner
    at the cost of an addition (the item keeps the object alive until the launch has run)."""
    offsets = set()
    for sample in (b"\x01" * 8, b"\x02" * 100, bytes(range(3))):
        address = ctypes.cast(ctypes.c_char_p(sample), ctypes.c_void_p).value
        if address is None:
            return None
        offsets.add(address - id(sample))
    offset = offsets.pop() if len(offsets) == 1 else None
    if offset is None or sys.implementation.name != "cpython" or not 0 < offset < 256:
        return None
    return offset


BYTES_DATA_OFFSET = _bytes_data_offset()


class Latch:
    """A one-shot gate: closed when made, opened once; waiting on an open latch returns at once."""

    __slots__ = ("_lock", "is_open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.is_open = False

    def open(self) -> None:
        self.is_open = True
        self._lock.release()

    def wait(self, timeout: float = -1) -> bool:
        if self.is_open:
            return True
        if self._lock.acquire(timeout=timeout):
            self._lock.release()
            return True
        return False


class Runners:
    """The native runners of one loaded image."""

    __slots__ = ("dispatch", "call_all")

    def __init__(self, dispatch: Any, call_all: Any):
        self.dispatch = dispatch
        self.call_all = call_all


def find_runners(lib: ctypes.CDLL, symbols: dict[str, Any]) -> Runners | None:
    """The image's runners, when it exports both (it includes ``host_kernel.h``); else None."""
    for name in (DISPATCH_SYMBOL, CALL_SYMBOL):
        symbol = symbols.get(name)
        if symbol is None or symbol.kind != "function":
            return None
    try:
        return Runners(DISPATCH_PROTOTYPE((DISPATCH_SYMBOL, lib)), CALL_PROTOTYPE((CALL_SYMBOL, lib)))
    except AttributeError:
        return None


PORTABLE_FAULTS = {  # what the host runtime of portable kernels returns (gpu/host_runtime.h)
    0x4F4C0001: "a barrier or lane operation the compiler's analysis could not see, in a group run as a loop",
    0x4F4C0002: "the stacks for the group's work-items could not be mapped: the process is out of memory "
                "or of memory mappings (vm.max_map_count); smaller work-groups need fewer",
    0x4F4C0003: "extern __gpu_local memory used, but the launch gave no dynamic work-group memory",
}


def kernel_fault(name: str, status: int, group: tuple[int, int, int]) -> OffloadError:
    meaning = PORTABLE_FAULTS.get(status & 0xFFFFFFFF)
    said = f"{status} ({status & 0xFFFFFFFF:#x}: {meaning})" if meaning else str(status)
    return OffloadError(ErrorCode.BACKEND_FAILURE, f"kernel '{name}' faulted: it returned {said} in work-group {group}")


class ThreadState:
    """What a thread that runs work-groups keeps between launches: its launch struct (Python path)
    and its work-group memory buffer, which the next group on the thread reuses (as documented)."""

    __slots__ = ("launch", "launch_address", "buffer", "buffer_size", "buffer_address", "status", "status_address")

    def __init__(self) -> None:
        self.launch = LaunchStruct()
        self.launch_address = ctypes.addressof(self.launch)
        self.buffer: ctypes.Array[ctypes.c_char] | None = None
        self.buffer_size = 0
        self.buffer_address = 0
        self.status = ctypes.c_int32(0)  # the batch runner's fault status
        self.status_address = ctypes.addressof(self.status)

    def work_group_memory(self, size: int) -> int:
        """The address of at least ``size`` bytes of this thread's work-group memory (0 for none)."""
        if size > self.buffer_size:
            self.buffer = ctypes.create_string_buffer(size)
            self.buffer_size = size
            self.buffer_address = ctypes.addressof(self.buffer)
        return self.buffer_address if size else 0


_local = threading.local()


def thread_state() -> ThreadState:
    state: ThreadState | None = getattr(_local, "state", None)
    if state is None:
        state = _local.state = ThreadState()
    return state


def run_one_group(kernel: HostKernel, args: bytes | None, group_size: tuple[int, int, int], dyn: int) -> None:
    """Call the kernel for the single work-group of a launch on this thread; raise on a fault."""
    state = thread_state()
    launch = state.launch
    launch.gx = launch.gy = launch.gz = 0
    launch.ngx = launch.ngy = launch.ngz = 1
    launch.bx, launch.by, launch.bz = group_size
    launch.dyn_shared_memory = state.work_group_memory(dyn) or None
    status = kernel.fn(args, state.launch_address)
    if status:
        raise kernel_fault(kernel.name, status, (0, 0, 0))


class GroupJob:
    """One launch's work-groups, run by the launching thread and the helpers it asked for.

    Each participant calls :meth:`work` once: natively the image's runner takes chunks from a
    shared atomic counter; from Python the chunks come from a shared counter too. The first fault
    stops the handing out of further groups.
    """

    __slots__ = ("kernel", "args", "num_groups", "group_size", "dyn", "total", "native", "struct", "address",
                 "chunk", "nchunks", "_next", "_lock", "_active", "done", "python_fault")

    def __init__(self, kernel: HostKernel, args: bytes | None, num_groups: tuple[int, int, int],
                 group_size: tuple[int, int, int], dyn: int, participants: int):
        self.kernel = kernel
        self.args = args  # kept alive while the runner reads it
        self.num_groups = num_groups
        self.group_size = group_size
        self.dyn = dyn
        self.total = num_groups[0] * num_groups[1] * num_groups[2]
        self.native = kernel.runners is not None and self.total < NATIVE_LIMIT
        self._lock = threading.Lock()  # guards _active
        self._active = participants
        self.done = Latch()
        self.python_fault: OffloadError | None = None
        if self.native:
            self.chunk = max(1, self.total // (participants * CHUNKS_PER_THREAD))
            self.nchunks = 0
            args_address = ctypes.cast(ctypes.c_char_p(args), ctypes.c_void_p).value if args else None
            self.struct = DispatchStruct(kernel.address, args_address, *num_groups, *group_size, self.total,
                                         self.chunk, 0, 0, 0, 0)
            self.address = ctypes.addressof(self.struct)
        else:
            self.nchunks = min(self.total, participants * PYTHON_CHUNKS_PER_THREAD)
            self.chunk = -(-self.total // self.nchunks)
            self._next = itertools.count()

    def work(self) -> None:
        """Run chunks of groups on this thread until none is left or a group faulted."""
        try:
            state = thread_state()
            if self.native:
                self.kernel.runners.dispatch(self.address, state.work_group_memory(self.dyn))  # type: ignore[union-attr]
            else:
                self._work_in_python(state)
        finally:
            self.leave(1)

    def leave(self, count: int) -> None:
        """``count`` participants are done (or will never start)."""
        with self._lock:
            self._active -= count
            last = self._active == 0
        if last:
            self.done.open()

    def fault(self) -> OffloadError | None:
        """The first fault of the launch, once every participant has left."""
        if not self.native:
            return self.python_fault
        status = self.struct.status
        if not status:
            return None
        linear = self.struct.fault_group
        ngx, ngy, _ = self.num_groups
        z, rest = divmod(linear, ngx * ngy)
        y, x = divmod(rest, ngx)
        return kernel_fault(self.kernel.name, status, (x, y, z))

    def _work_in_python(self, state: ThreadState) -> None:
        launch, address = state.launch, state.launch_address
        ngx, ngy, ngz = self.num_groups
        launch.ngx, launch.ngy, launch.ngz = ngx, ngy, ngz
        launch.bx, launch.by, launch.bz = self.group_size
        launch.dyn_shared_memory = state.work_group_memory(self.dyn) or None
        fn = self.kernel.fn
        args = self.args
        plane = ngx * ngy
        while self.python_fault is None:
            index = next(self._next)
            if index >= self.nchunks:
                return
            start = index * self.chunk
            for linear in range(start, min(start + self.chunk, self.total)):
                z, rest = divmod(linear, plane)
                y, x = divmod(rest, ngx)
                launch.gx = x
                launch.gy = y
                launch.gz = z
                status = fn(args, address)
                if status:
                    if self.python_fault is None:
                        self.python_fault = kernel_fault(self.kernel.name, status, (x, y, z))
                    return
