"""Test-loading host images in a separate process before this process loads them.

A structurally sound image can still crash the dynamic loader (a relocation or constructor
that faults, a corrupt ``DT_FINI`` that faults at ``dlclose``) or never return from a constructor.
:func:`verify` therefore loads and unloads the image in a short-lived test process first and
reports whether that process survived.

The test processes are forked by a helper (:mod:`.probe_child`): a fresh, single-threaded
interpreter started on first use with ``subprocess`` (spawn, never a fork of this process, whose
queue and pool threads could hold the loader's or malloc's locks at fork time). The helper forks
one child per image (a millisecond or two), so the same bytes cost one test load per process when
the caller remembers the answer. Checks run concurrently: each request has its own answer pipe.

The helper inherits this process's environment, except that the loader's own variables
(``LD_LIBRARY_PATH``, ``LD_PRELOAD``, ``GLIBC_TUNABLES``, ...) are taken from the environment this
process started with, which is what its dynamic loader uses. It ends when this process ends
(it sees its socket close), at interpreter exit, or with :func:`stop_helper`; it is kept across
``olShutDown``/``olInit``, since what it checks are bytes, not runtime state.
"""

from __future__ import annotations

import atexit
import errno
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib import resources

from ...errors import ErrorCode, OffloadError

TIMEOUT_VARIABLE = "OFFLOAD_IMAGE_CHECK_TIMEOUT"
DEFAULT_TIMEOUT = 10.0  # seconds a test load may take (constructors included)
START_TIMEOUT = 30.0  # seconds the helper may take to start
ANSWER_GRACE = 5.0  # seconds past the test load's timeout before the helper counts as stuck
LOADED, REJECTED, REFUSED, NOT_RUN = range(4)  # the helper's verdicts (probe_child.py)


@dataclass(frozen=True)
class Verdict:
    """What a test load said. ``final``: the answer depends only on the image's bytes (it may be kept)."""

    loaded: bool
    reason: str
    final: bool


def check_timeout() -> float:
    """Seconds a test load may take: ``OFFLOAD_IMAGE_CHECK_TIMEOUT``, read at each check, or 10."""
    text = os.environ.get(TIMEOUT_VARIABLE)
    if text is None:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{TIMEOUT_VARIABLE}={text!r}: expected a number of seconds above 0 and up to 3600")
    return value


def verify(image_fd: int, span: int) -> Verdict:
    """Test-load the image in file ``image_fd`` (sealed: the test process must not change it) in a
    separate process; ``span`` is the address range its loadable segments cover. Raises
    ``OffloadError`` only when no test process could be run."""
    timeout = check_timeout()
    try:
        directory = os.getcwdb()
    except OSError:
        directory = b""
    request = struct.pack("<IQ", int(timeout * 1000), span) + directory
    for _attempt in range(2):  # a helper that died meanwhile is replaced once
        helper = _running_helper()
        try:
            answer = _ask(helper, request, image_fd, timeout + ANSWER_GRACE)
        except OSError as exc:
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES, f"cannot ask for a test load of the image: {exc}; "
                                                           f"the image was not loaded") from None
        if answer is None:
            helper.stop()
            raise OffloadError(ErrorCode.BACKEND_FAILURE,
                               f"the helper process that test-loads host images did not answer within "
                               f"{timeout + ANSWER_GRACE:g} s; the image was not loaded")
        if not answer:
            helper.stop()
            continue
        code, reason = answer[0], answer[1:].decode("utf-8", "replace")
        if code == NOT_RUN:
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES, f"{reason}; the image was not loaded untested")
        return Verdict(code == LOADED, reason, code in (LOADED, REJECTED))
    raise OffloadError(ErrorCode.BACKEND_FAILURE,
                       "the helper process that test-loads host images ended twice while checking this image; "
                       "the image was not loaded")


def _ask(helper: _Helper, request: bytes, image_fd: int, patience: float) -> bytes | None:
    """Send one request; return the answer, b"" if the helper is gone, None if it did not answer in time."""
    answer_read, answer_write = os.pipe()
    try:
        try:
            socket.send_fds(helper.sock, [request], [image_fd, answer_write])
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS):
                raise
            return b""  # the helper ended (EPIPE, ECONNRESET) or was stopped (EBADF)
        finally:
            os.close(answer_write)
        _count_check()
        return _read_answer(answer_read, time.monotonic() + patience)
    finally:
        os.close(answer_read)


def _wait_readable(fd: int, seconds: float) -> bool:
    """Whether ``fd`` becomes readable (or closed) within ``seconds`` (poll: any descriptor number)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(seconds * 1000))))


def _read_answer(fd: int, deadline: float) -> bytes | None:
    """Everything the helper writes before closing ``fd``; None if it did not close it by ``deadline``."""
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not _wait_readable(fd, remaining):
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


class _Helper:
    """The running helper process and our end of its socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            source = resources.files(__package__).joinpath("probe_child.py").read_text()
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", source, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=_loader_environment())
        except (OSError, ValueError) as exc:
            ours.close()
            code = ErrorCode.OUT_OF_RESOURCES if getattr(exc, "errno", None) in (errno.EAGAIN, errno.ENOMEM) \
                else ErrorCode.BACKEND_FAILURE
            raise OffloadError(code, f"cannot start the helper process that test-loads host images "
                                     f"({sys.executable or 'no interpreter path'}): {exc}; "
                                     f"the image was not loaded") from None
        finally:
            theirs.close()
        self.sock = ours
        self.owner = os.getpid()
        try:
            ready = _wait_readable(ours.fileno(), START_TIMEOUT) and ours.recv(16)
        except OSError:
            ready = b""
        if ready != b"ready":
            self._end()
            status = self.process.poll()
            raise OffloadError(ErrorCode.BACKEND_FAILURE,
                               f"the helper process that test-loads host images did not start "
                               f"({'exit status ' + str(status) if status is not None else 'no answer'} "
                               f"from {sys.executable}); the image was not loaded")

    def stop(self) -> None:
        """Stop it (also when it ended or its socket broke) and forget it: the next check starts another."""
        global _helper
        with _helper_lock:
            if _helper is self:
                _helper = None
        self._end()

    def _end(self) -> None:
        self.sock.close()  # the helper sees the socket close and exits
        try:
            self.process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_helper: _Helper | None = None
_helper_lock = threading.Lock()  # guards _helper (starting and replacing it)
_checks_started = 0
_count_lock = threading.Lock()  # guards _checks_started


def _running_helper() -> _Helper:
    global _helper
    with _helper_lock:
        if _helper is None or _helper.owner != os.getpid():
            _helper = _Helper()
        return _helper


def _count_check() -> None:
    global _checks_started
    with _count_lock:
        _checks_started += 1


def checks_started() -> int:
    """How many test loads this process has asked for (tests use it to see the cache at work)."""
    return _checks_started


def helper_pid() -> int | None:
    """The helper's process id, while one runs."""
    helper = _helper
    return helper.process.pid if helper is not None else None


def stop_helper() -> None:
    """Stop the helper now (the next check starts a new one)."""
    helper = _helper
    if helper is not None:
        helper.stop()


_inherited: list[_Helper] = []  # a forked child's copy of its parent's helper, never waited for


def _after_fork_in_child() -> None:
    """A forked child must not share the parent's helper: it starts its own when it needs one."""
    global _helper, _helper_lock, _count_lock
    helper = _helper
    _helper, _helper_lock, _count_lock = None, threading.Lock(), threading.Lock()
    if helper is not None:
        helper.sock.close()
        _inherited.append(helper)  # not ours to wait for; kept so that no warning says it still runs


LOADER_VARIABLES = (b"LD_", b"GLIBC_TUNABLES")


def _loader_environment() -> dict[bytes, bytes]:
    """This environment, with the dynamic loader's variables as they were when this process started."""
    environment = {key: value for key, value in os.environb.items() if not key.startswith(LOADER_VARIABLES)}
    try:
        with open("/proc/self/environ", "rb") as initial:
            entries = initial.read().split(b"\0")
    except OSError:
        return dict(os.environb)
    for entry in entries:
        key, equals, value = entry.partition(b"=")
        if equals and key.startswith(LOADER_VARIABLES):
            environment[key] = value
    return environment


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(stop_helper)
