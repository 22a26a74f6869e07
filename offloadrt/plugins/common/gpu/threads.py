"""What a GPU vendor keeps per thread: the device made current there, and the launch buffers.

Both are read on every launch, so they live together in one plain object per thread, a
:class:`ThreadCell`, the one attribute of the vendor's ``threading.local`` (whose attribute reads
each cost a lookup of the thread's dictionary: a launch makes one).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

_EXTRA_BYTES = 5 * 8  # the extra array: five pointer-sized words
_SIZE_AT = _EXTRA_BYTES  # then the blob's size (a size_t)
_BLOB_AT = _SIZE_AT + 8  # then the blob
_UNWRAPPED = object()  # ThreadCell.wrapper before the first wrap()


class ThreadCell:
    """One thread's ``token`` (what the thread made current, see ``GpuDeviceCore.enter``; None until
    it made a device current) and its memory for a launch's ``extra`` array and argument blob.

    The array is ``[BUFFER_POINTER, &blob, BUFFER_SIZE, &size, END]`` with the vendor's marker
    values (CUDA ends it with 0, HIP with 3); the array, the size and the blob share one buffer.
    The driver copies the blob during the launch call, so the buffer is reused at once; a launch
    with the very ``bytes`` object of the thread's previous one and the same size copies nothing
    (``last``, ``size``).
    """

    __slots__ = ("token", "markers", "memory", "blob", "size_slot", "size", "capacity", "address", "last", "wrapper",
                 "argument")

    def __init__(self, pointer_marker: int, size_marker: int, end_marker: int) -> None:
        self.token: object = None
        self.markers = (pointer_marker, size_marker, end_marker)
        self._allocate(256)

    def _allocate(self, capacity: int) -> None:
        self.capacity = capacity
        self.memory = ctypes.create_string_buffer(_BLOB_AT + capacity)
        self.address = ctypes.addressof(self.memory)
        pointer_marker, size_marker, end_marker = self.markers
        words = (ctypes.c_uint64 * 5).from_buffer(self.memory)
        words[:] = [pointer_marker, self.address + _BLOB_AT, size_marker, self.address + _SIZE_AT, end_marker]
        view = memoryview(self.memory).cast("B")
        self.blob = view[_BLOB_AT:]
        self.size_slot = view[_SIZE_AT:_BLOB_AT].cast("Q")
        self.size = 0
        self.last: bytes | None = None
        # What the launch call is given for the array: wrapper(address), or the address itself when
        # the wrapper is None (see GpuDeviceCore.extra_wrapper); made at first use by wrap().
        self.wrapper: Any = _UNWRAPPED
        self.argument: Any = None

    def wrap(self, wrapper: Callable[[int], Any] | None) -> Any:
        """The launch call's argument for the array, as ``wrapper`` makes it (None: the address)."""
        self.argument = self.address if wrapper is None else wrapper(self.address)
        self.wrapper = wrapper
        return self.argument

    def copy(self, args: bytes, size: int) -> None:
        """Copy ``args`` (non-empty) into the blob and give the driver its first ``size`` bytes (the
        kernel's parameters, without a C struct's tail padding); :attr:`address` is then its
        ``extra`` address. A launch may skip the copy when ``args`` is :attr:`last` and ``size`` is
        :attr:`size`."""
        given = len(args)
        if given > self.capacity:
            self._allocate(max(given, 2 * self.capacity))
        self.blob[:given] = args
        if size != self.size:
            self.size_slot[0] = self.size = size
        self.last = args


class ThreadState(threading.local):
    """A vendor's per-thread state: ``cell``, the thread's :class:`ThreadCell`."""

    def __init__(self, pointer_marker: int, size_marker: int, end_marker: int) -> None:
        self.cell = ThreadCell(pointer_marker, size_marker, end_marker)
