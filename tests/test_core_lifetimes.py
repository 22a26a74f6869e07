"""Exported host memory outlives the runtime: NumPy views, memoryviews and DLPack tensors of host device
buffers stay valid after the last shutdown (and in atexit handlers that run after offloadrt's), and
DLPack capsules that a consumer takes and then refuses give their export back without hiding the
consumer's error; objects that hand out raw addresses of memory the process has not mapped are
refused before anything is copied.

Cases that crashed the interpreter before run in a child process.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest

import offloadrt
from offloadrt.core import _dlpack, _hostmem, _runtime


@pytest.fixture(autouse=True)
def layer() -> Iterator[None]:
    _runtime.shutdown()
    yield
    _runtime.shutdown()


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-X", "dev", "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_views_of_host_memory_stay_valid_after_the_last_shutdown() -> None:
    """Before: reading any of these views after the shutdown was a segmentation fault (4 MiB blocks are
    given back to the system when freed)."""
    done = _child("""
        import numpy as np
        import offloadrt
        from offloadrt.core import _runtime
        device = offloadrt.device("host")
        n = 1 << 19
        a = offloadrt.asarray(np.arange(n, dtype=np.float64), device)
        view = np.asarray(a)
        b = offloadrt.asarray(np.full(n, 2.0), device)
        tensor = np.from_dlpack(b)
        c = offloadrt.asarray(np.full(n, 3.0), device)
        closed_view = np.asarray(c)
        c.buffer.close()
        raw = memoryview(np.asarray(offloadrt.asarray(np.full(n, 4.0), device))).cast("B")
        _runtime.shutdown()
        assert view.sum() == n * (n - 1) / 2 and tensor.sum() == 2 * n and closed_view.sum() == 3 * n
        view[:] = 1.0
        tensor[:] = 5.0
        assert view.sum() == n and tensor.sum() == 5 * n
        assert np.frombuffer(raw, np.float64).sum() == 4 * n
        print("ok")
        """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_an_atexit_handler_registered_before_offloadrt_reads_a_view() -> None:
    """atexit runs handlers last-registered first, so offloadrt's exit shutdown runs before this one."""
    done = _child("""
        import atexit
        import numpy as np
        views = []
        atexit.register(lambda: print("sum", float(views[0].sum())))
        import offloadrt
        device = offloadrt.device("host")
        views.append(np.asarray(offloadrt.asarray(np.full(1 << 20, 0.5), device)))
        """)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"sum {float(1 << 19)}", done.stdout + done.stderr


def test_memory_kept_past_the_shutdown_is_freed_with_its_last_view() -> None:
    device = offloadrt.device("host")
    array = offloadrt.asarray(np.arange(1000, dtype=np.int32), device)
    view = np.asarray(array)
    capsule_view = np.from_dlpack(array)
    _runtime.shutdown()
    assert len(_hostmem._orphans) == 1  # the shutdown left the block to its views
    assert view[999] == 999 and capsule_view[10] == 10
    del view
    gc.collect()
    assert len(_hostmem._orphans) == 1  # the DLPack tensor still reads it
    del capsule_view
    gc.collect()
    assert not _hostmem._orphans


def test_views_that_end_before_the_shutdown_leave_nothing_behind() -> None:
    device = offloadrt.device("host")
    array = offloadrt.asarray(np.arange(10, dtype=np.int32), device)
    view = np.asarray(array)
    assert view.sum() == 45
    del view
    gc.collect()
    _runtime.shutdown()
    assert not _hostmem._orphans


def test_a_capsule_the_consumer_refuses_keeps_its_error_and_gives_the_export_back() -> None:
    """Before: NumPy's refusal (more than 64 dimensions) became 'SystemError: returned NULL without setting
    an exception', an 'Exception ignored' report, and a block that never went back to the pool."""
    done = _child("""
        import gc
        import numpy as np
        import offloadrt
        device = offloadrt.device("host")
        buffer = device.allocate(64)
        array = offloadrt.Array(buffer, (1,) * 65, np.uint8)
        try:
            np.from_dlpack(array)
        except RuntimeError as error:
            print("refused:", error)
        gc.collect()
        print("exports", buffer._exports)
        ptr = buffer.ptr
        buffer.close()
        again = device.allocate(64)
        print("reused", again.ptr == ptr)
        """)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused: maxdims" in done.stdout, done.stdout + done.stderr
    assert "exports 0" in done.stdout and "reused True" in done.stdout, done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr and "SystemError" not in done.stderr, done.stderr


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_exported_capsules_describe_the_memory(max_version: tuple[int, int] | None) -> None:
    """A capsule carried by NumPy's machinery still describes offloadrt's tensor: data, shape, strides,
    dtype, version and flags; and the export ends when the consumer lets go."""
    device = offloadrt.device("host")
    array = offloadrt.asarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4), device)
    capsule = array.__dlpack__(max_version=max_version)
    buffer = array.buffer
    assert buffer._exports == 1
    taken = _dlpack.take(capsule)
    assert taken.data == array.ptr
    assert tuple(taken.shape) == (2, 3, 4) and taken.strides in (None, (12, 4, 1))
    assert tuple(taken.dtype) == (2, 32, 1)
    assert tuple(taken.device) == (_dlpack.CPU, 0)
    assert taken.read_only is False
    assert taken.version == ((1, 0) if max_version else None)
    taken.release()
    del taken, capsule
    gc.collect()
    assert buffer._exports == 0
    assert np.from_dlpack(array).tolist() == np.arange(24, dtype=np.float32).reshape(2, 3, 4).tolist()


def test_an_unconsumed_capsule_gives_its_export_back() -> None:
    device = offloadrt.device("host")
    buffer = device.allocate(16)
    for max_version in (None, (1, 0)):
        capsule = buffer.__dlpack__(max_version=max_version)
        assert buffer._exports == 1
        del capsule
        gc.collect()
        assert buffer._exports == 0


# ---- raw addresses (__array_interface__) ------------------------------------------------------------

RAW = """
    import mmap, sys
    import numpy as np
    import offloadrt
    from offloadrt import ErrorCode, OffloadError

    class Raw:
        def __init__(self, address, read_only=False):
            self.__array_interface__ = {"shape": (1024,), "typestr": "<f4", "version": 3,
                                        "data": (address, read_only)}

    device = offloadrt.device("host")
    buffer = device.allocate(4096)
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ)  # readable, not writable
    page_address = np.frombuffer(page, np.uint8).__array_interface__["data"][0]
    import ctypes
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    two = libc.mmap(None, 8192, 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    libc.munmap(two + 4096, 4096)  # the first page mapped, the one after it not
    calls = {
        "from": lambda: buffer.copy_from(Raw(0x10000)),
        "to": lambda: buffer.copy_to(Raw(0x10000)),
        "asarray": lambda: offloadrt.asarray(Raw(0x10000), device),
        "to read-only": lambda: buffer.copy_to(Raw(page_address)),
        "straddling": lambda: buffer.copy_from(Raw(two + 2048)),
    }
    for name, call in calls.items():
        try:
            call()
        except OffloadError as error:
            assert error.code == ErrorCode.INVALID_ARGUMENT, error
            print(name, "refused:", error.details)
        else:
            print(name, "copied")
    buffer.copy_from(Raw(page_address))  # readable: fine
    array = offloadrt.asarray(np.arange(1024, dtype=np.float32), device)
    print("own memory", float(np.asarray(offloadrt.asarray(Raw(array.ptr), device)).sum()))
    """


def test_unmapped_raw_addresses_are_refused_before_the_copy() -> None:
    """Before: each of these copies was a segmentation fault."""
    done = _child(RAW)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for name in ("from", "to", "asarray"):
        assert f"{name} refused:" in out and "no memory mapped at 0x10000" in out, out
    assert "to read-only refused:" in out and "is not writable" in out, out
    assert "straddling refused:" in out and "no memory mapped" in out, out
    assert f"own memory {float(sum(range(1024)))}" in out, out


def test_a_view_of_a_global_variable_keeps_its_programs_code_loaded() -> None:
    """A host program closed (or unloaded by the shutdown) while a NumPy view of one of its global
    variables exists stays loaded until the view is gone (before: the view read unmapped memory)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import gc
        import numpy as np
        import offloadrt
        from offloadrt.core import _hostmem, _runtime
        device = offloadrt.device("host")
        program = device.compile("#include <offloadrt/host_kernel.h>\\n"
                                 "OL_HOST_EXPORT int table[1 << 20];\\n"
                                 "OL_HOST_KERNEL k(const void *a, const ol_host_launch_t *l) "
                                 "{ (void)a; (void)l; table[5] = 7; return 0; }\\n"
                                 "OL_HOST_KERNEL_NO_ARGS(k);\\n")
        with device.queue() as queue:
            queue.launch(program.kernel("k"), 1, 1)
        view = np.frombuffer(np.asarray(program.global_var("table")), np.int32)
        program.close()
        assert view[5] == 7
        _runtime.shutdown()
        view[6] = 1
        assert view[:8].tolist() == [0, 0, 0, 0, 0, 7, 1, 0]
        del view
        gc.collect()
        assert not _hostmem._held_images
        print("ok")
        """)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
