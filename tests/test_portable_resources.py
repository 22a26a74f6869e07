"""What portable kernels on the host take from the process: fiber stacks and their guard pages, bounded
per process (not per program), and clear errors when the process runs out of memory mappings.

The cases that exhaust the process's mappings run in a child process (they would leave this one
unable to start threads). Everything here needs clang 20 or later and skips without it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
from toolchains import needs_clang

import offloadrt
from offloadrt.core import _runtime
from offloadrt.plugins.host import image as host_image

FIBERS = "-D__OFFLOADRT_HOST_FIBERS"  # these tests are about fiber stacks: a simple barrier kernel would take regions
BARRIER = """#include <gpuintrin.h>
__gpu_kernel void k(int *p) {
  static __gpu_local int s[1];
  if (__gpu_thread_id_x() == 0) s[0] = VALUE;
  __gpu_sync_threads();
  p[__gpu_thread_id_x()] = s[0];
}
"""


def _child(code: str, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_guard_budget_is_a_quarter_of_the_processs_mappings_at_most() -> None:
    assert host_image.guard_limit(65530) == 8191  # Linux's default: 2 mappings per guard page
    assert host_image.guard_limit(800) == 100
    assert host_image.guard_limit(10**9) == host_image.GUARDS_MOST
    assert host_image.guard_limit(3) == 0


@needs_clang
def test_many_programs_with_big_barrier_groups_share_one_guard_budget() -> None:
    """Before: each program guarded up to 8192 stacks, so four programs with an 8192-item barrier group
    reached vm.max_map_count; afterwards no thread started and a program load failed."""
    out = _child(f"""
        import threading
        import numpy as np
        import offloadrt
        from offloadrt.plugins.host import image
        SOURCE = {BARRIER!r}
        def mappings():
            with open("/proc/self/maps") as maps:
                return sum(1 for _ in maps)
        device = offloadrt.device("host")
        before = mappings()
        programs = []
        for n in range(5):
            program = device.compile(SOURCE.replace("VALUE", str(n + 1)), ["-D__OFFLOADRT_HOST_FIBERS"], lang="gpu-c")
            out = offloadrt.empty(8192, np.int32, device)
            with device.queue() as queue:
                queue.launch(program.kernel("k"), 1, 8192, out)
            assert (out.numpy() == n + 1).all(), n
            programs.append(program)
        grown = mappings() - before
        limit = image.guard_limit()
        assert 0 < image.guard_budget().used <= limit, (image.guard_budget().used, limit)
        assert grown <= 2 * limit + 500, (grown, limit)
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
        room = bytearray(100 << 20)
        print("ok", grown, limit)
        """)
    assert out.startswith("ok"), out


@needs_clang
def test_an_unloaded_program_gives_its_guard_pages_back() -> None:
    _runtime.shutdown()
    try:
        device = offloadrt.device("host")
        program = device.compile(BARRIER.replace("VALUE", "9"), [FIBERS], lang="gpu-c")
        before = host_image.guard_budget().used
        out = offloadrt.empty(300, np.int32, device)
        with device.queue() as queue:
            queue.launch(program.kernel("k"), 1, 300, out)
        assert (out.numpy() == 9).all()
        after = host_image.guard_budget().used
        assert after > before  # this thread's scheduler guards its 300 stacks (unless others took it all)
        program.close()
        assert host_image.guard_budget().used == before
    finally:
        _runtime.shutdown()


EXHAUST = f"""
    import ctypes, mmap
    import numpy as np
    import offloadrt
    from offloadrt import ErrorCode, OffloadError
    SOURCE = {BARRIER!r}
    device = offloadrt.device("host")
    program = device.compile(SOURCE.replace("VALUE", "7"), ["-D__OFFLOADRT_HOST_FIBERS"], lang="gpu-c")
    from offloadrt.compile import _portable
    from offloadrt.compile._types import Target
    other = _portable.compile_portable(SOURCE.replace("VALUE", "8"), ["-D__OFFLOADRT_HOST_FIBERS"], "gpu-c",
                                       Target("host"))
    offloadrt.Program._from_compiled(device, other).close()  # checked now; loaded again below
    out = offloadrt.empty(4096, np.int32, device)
    queue = device.queue()
    queue.launch(program.kernel("k"), 1, 2, out)
    queue.sync()
    # Use up the process's mappings: one region, every other page made inaccessible (each split
    # is a mapping), until Linux refuses.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    with open("/proc/sys/vm/max_map_count") as limit:
        pages = int(limit.read()) // 2 + 100
    base = libc.mmap(None, pages * 2 * 4096, 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    for i in range(pages):
        if libc.mprotect(base + (2 * i + 1) * 4096, 4096, 0):
            break
    else:
        raise SystemExit("the mappings never ran out")
    queue.launch(program.kernel("k"), 1, 4096, out)  # 4096 new stacks: no room
    try:
        queue.sync()
    except OffloadError as error:
        assert error.code == ErrorCode.QUEUE_ERROR
        print("launch:", error)
    try:
        offloadrt.Program._from_compiled(device, other)
    except OffloadError as error:
        assert error.code == ErrorCode.OUT_OF_RESOURCES, error
        print("load:", error)
    libc.munmap(base, pages * 2 * 4096)
    queue = device.queue()
    queue.launch(program.kernel("k"), 1, 4096, out)
    queue.sync()
    assert (out.numpy() == 7).all()
    offloadrt.Program._from_compiled(device, other).close()
    print("recovered")
    """


@needs_clang
def test_running_out_of_mappings_is_said_clearly_and_the_runtime_recovers() -> None:
    """Before: the loader's failure was INVALID_BINARY (the image is fine), and the fault a bare number."""
    out = _child(EXHAUST)
    assert "launch: QUEUE_ERROR" in out and "0x4f4c0002" in out and "vm.max_map_count" in out, out
    assert "load: OUT_OF_RESOURCES" in out and "memory mappings" in out, out
    assert out.rstrip().endswith("recovered"), out
