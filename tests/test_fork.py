"""A process forked while offloadrt runs (multiprocessing's default start method on Linux up to
Python 3.13): the child cannot use the parent's runtime, says so, and may start its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import cuda_standin
import pytest
from gpu_fixtures import stand_in_runtime

import offloadrt
from offloadrt import PlatformBackend
from offloadrt.plugins.common.gpu import plugin as gpu_plugin

FORKING = textwrap.dedent("""
    import multiprocessing, sys, threading
    import numpy as np
    import offloadrt
    from offloadrt import api

    host = offloadrt.device("host")
    queue = host.queue()
    gate = threading.Event()
    queue.host_function(gate.wait, 30)  # the parent's queue is busy while the children run
    buffer = host.allocate(16)


    def child(conn):
        out = {}
        for name, call in (("sync", queue.sync), ("copy", lambda: buffer.copy_from(np.zeros(4, np.int32))),
                           ("ol", lambda: api.olSyncQueue(queue.handle))):
            try:
                call()
                out[name] = "no error"
            except offloadrt.OffloadError as exc:
                out[name] = (exc.code.name, "forked" in exc.details and "spawn" in exc.details)
        device = offloadrt.device("host")  # the child's own runtime
        mine = device.allocate(16)
        with device.queue() as own:
            mine.copy_from(np.arange(4, dtype=np.int32), own)
            result = np.zeros(4, np.int32)
            mine.copy_to(result, own)
        out["own"] = result.tolist()
        try:
            api.olSyncQueue(queue.handle)
        except offloadrt.OffloadError as exc:
            out["ol after init"] = (exc.code.name, "forked" in exc.details)
        conn.send(out)


    if __name__ == "__main__":
        context = multiprocessing.get_context("fork")
        mine, theirs = context.Pipe()
        process = context.Process(target=child, args=(theirs,))
        process.start()
        print(mine.recv() if mine.poll(30) else "no answer", flush=True)
        process.join(30)
        print("child exit code", process.exitcode, flush=True)
        only_exits = context.Process(target=sys.exit, args=(0,))
        only_exits.start()
        only_exits.join(30)
        print("exit-only child exit code", only_exits.exitcode, flush=True)
        gate.set()
        queue.sync()
        print("parent ok", flush=True)
""")


def test_a_forked_child_refuses_the_parents_objects_and_starts_its_own_runtime() -> None:
    """Before: the child hung at its first sync (the worker threads did not carry over)."""
    result = subprocess.run([sys.executable, "-c", FORKING], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    answer, child, exit_only, parent = result.stdout.splitlines()
    assert answer == str({"sync": ("UNINITIALIZED", True), "copy": ("INVALID_DEVICE", True),
                          "ol": ("UNINITIALIZED", True), "own": [0, 1, 2, 3],
                          "ol after init": ("INVALID_QUEUE", True)})
    assert (child, exit_only, parent) == ("child exit code 0", "exit-only child exit code 0", "parent ok")


def test_a_gpu_driver_that_refuses_a_forked_child_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA cannot be used in a child forked after the parent started it: its init fails there."""
    monkeypatch.setattr(gpu_plugin, "_STARTED_BEFORE_FORK", {"CudaPlugin"})
    status = cuda_standin.driver.CUresult.CUDA_ERROR_NOT_INITIALIZED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # olInit warns that the asked-for platform did not start
        with stand_in_runtime(cuda_standin, PlatformBackend.CUDA, monkeypatch, init_error=status):
            (reason,) = [p.reason for p in offloadrt.unavailable_platforms() if p.backend == PlatformBackend.CUDA]
    assert "cuInit failed" in reason and "forked" in reason and "'spawn'" in reason, reason
