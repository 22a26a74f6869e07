"""The fork server: runs every requested case against liboffload, each in its own process.

Run as ``python -m differential.forkserver`` (from ``tests/``) with a JSON request on stdin::

    {"library": path, "cases": [names], "resources": {"elf": path}, "timeout": seconds, "workers": n}

It dlopens the library once, before any ``olInit``, then forks one child per case (``workers`` at
a time). A child initialises liboffload, runs the case and writes each step's outcome to a pipe
as soon as the call returns. A child killed by a signal gets ``crash(SIGSEGV)`` (or the signal's
name) after the outcomes it wrote; one still running after ``timeout`` seconds is killed and gets
``hang``. The answer, on stdout, is one JSON object: case name -> list of outcomes. Some valid
calls crash LLVM 22 on its virtual host device, which is why every case has its own process.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import selectors
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field

from .cases import CASES_BY_NAME
from .liboffload import Library
from .neutral import Case
from .run_liboffload import HarnessError, run_case

HARNESS_ERROR = "harness-error"
_PR_SET_DUMPABLE = 4


@dataclass
class Child:
    case: Case
    pid: int
    fd: int
    started: float
    data: bytearray = field(default_factory=bytearray)
    hung: bool = False


def _child(lib: Library, case: Case, resources: dict[str, str], fd: int) -> None:
    """In the forked child: run the case, write outcomes to ``fd``, never return."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash is expected: no core file
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # stdout carries the server's answer: keep the library's output off it

        def emit(outcome: str) -> None:
            os.write(fd, (json.dumps(outcome) + "\n").encode())

        run_case(lib, case, resources, emit)
    except HarnessError as exc:
        os.write(fd, (json.dumps(f"{HARNESS_ERROR}: {exc}") + "\n").encode())
    except BaseException:  # noqa: BLE001  # reported as the case's outcome, never raised past the fork
        os.write(fd, (json.dumps(f"{HARNESS_ERROR}: {traceback.format_exc()}") + "\n").encode())
    finally:
        os._exit(0)


def _finish(child: Child, status: int) -> list[str]:
    outcomes = [json.loads(line) for line in child.data.decode().splitlines() if line]
    if child.hung:
        outcomes.append("hang")
    elif os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        outcomes.append(f"crash({name})")
    elif os.WEXITSTATUS(status) != 0:
        outcomes.append(f"exit({os.WEXITSTATUS(status)})")
    return outcomes


def serve(lib: Library, cases: list[Case], resources: dict[str, str], timeout: float,
          workers: int) -> dict[str, list[str]]:
    results: dict[str, list[str]] = {}
    pending = list(reversed(cases))
    running: dict[int, Child] = {}  # by pipe fd
    selector = selectors.DefaultSelector()
    while pending or running:
        while pending and len(running) < workers:
            case = pending.pop()
            read_fd, write_fd = os.pipe()
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                for other in running:
                    os.close(other)
                _child(lib, case, resources, write_fd)
            os.close(write_fd)
            running[read_fd] = Child(case, pid, read_fd, time.monotonic())
            selector.register(read_fd, selectors.EVENT_READ)
        now = time.monotonic()
        deadline = min(child.started for child in running.values()) + timeout
        for key, _ in selector.select(max(0.0, deadline - now)):
            child = running[key.fd]
            chunk = os.read(key.fd, 65536)
            if chunk:
                child.data += chunk
                continue
            selector.unregister(key.fd)
            os.close(key.fd)
            del running[key.fd]
            _, status = os.waitpid(child.pid, 0)
            results[child.case.name] = _finish(child, status)
        now = time.monotonic()
        for child in running.values():
            if not child.hung and now - child.started > timeout:
                child.hung = True
                os.kill(child.pid, signal.SIGKILL)  # its pipe then reaches EOF and it is reaped above
    return results


def main() -> int:
    request = json.load(sys.stdin)
    lib = Library(request["library"])  # dlopen once, before any olInit; every child inherits it
    cases = [CASES_BY_NAME[name] for name in request["cases"]]
    results = serve(lib, cases, request.get("resources", {}), float(request.get("timeout", 10.0)),
                    int(request.get("workers", 2)))
    json.dump(results, sys.stdout)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
