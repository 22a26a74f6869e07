"""The image-check helper: a single-threaded process that test-loads host images in throwaway children.

:mod:`.probe` runs this file's source as ``python -I -S -c <source> <socket fd>``. It never
imports offloadrt (it must start fast and load nothing the image could interfere with).

Protocol, over an ``AF_UNIX``/``SOCK_SEQPACKET`` socket: the helper first sends ``b"ready"``. Each
request is one message ``<timeout in ms: u32><span of the loadable segments: u64><working
directory>`` (little-endian) carrying two file descriptors:
the image (a sealed memfd) and the write end of a pipe for the answer. For each request the helper
forks a child (fork is safe here: this process has one thread), which fences off the address
space around where the image will land (:func:`fence`), loads the image with
``dlopen(RTLD_NOW | RTLD_LOCAL)``, unloads it with ``dlclose`` (destructors and ``DT_FINI`` run)
and leaves through ``exit()`` (finalisers of an image that stays loaded run), reporting each step
on a pipe. The helper answers ``<verdict: u8><reason, UTF-8>`` on the request's pipe once the
child has ended, or has been killed at the timeout, with its whole process group. When the
socket closes (the parent ended), the helper kills what still runs and exits.
"""

import _ctypes
import _signal  # type: ignore[import-not-found]  # not signal: its enum import costs 13 ms per start
import _socket
import ctypes
import os
import select
import struct
import sys
import time

# LOADED: it loaded and unloaded cleanly. REJECTED: it crashed or killed the test process, which says
# something about the bytes. REFUSED: a clean loader error, a timeout or an outside kill, which may
# depend on the moment. NOT_RUN: no test process could be started.
LOADED, REJECTED, REFUSED, NOT_RUN = range(4)
RTLD_NOW, RTLD_LOCAL = os.RTLD_NOW, os.RTLD_LOCAL
REPORT_FD, IMAGE_FD = 3, 4
OUTPUT_LIMIT = 4096
SIGNAL_NAMES = {getattr(_signal, name): name for name in
                ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP", "SIGSYS", "SIGKILL", "SIGTERM",
                 "SIGXCPU", "SIGXFSZ", "SIGPIPE", "SIGINT", "SIGHUP", "SIGALRM", "SIGUSR1", "SIGUSR2")
                if hasattr(_signal, name)}
# Deaths that say something about the image; others (SIGKILL from the OOM killer, a user's SIGTERM) do not.
IMAGE_SIGNALS = {getattr(_signal, name) for name in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP",
                                                      "SIGSYS") if hasattr(_signal, name)}
PHASES = {b"": "before loading the image", b"S": "loading the image (mapping, relocation or its constructors)",
          b"L": "unloading the image (its destructors or DT_FINI)",
          b"U": "at process exit (finalisers of an image that stays loaded)"}

_libc = ctypes.CDLL(None, use_errno=True)
_libc_exit = ctypes.CFUNCTYPE(None, ctypes.c_int)(("exit", _libc))
_mmap = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                         ctypes.c_long)(("mmap", _libc))
_munmap = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)(("munmap", _libc))
PAGE = os.sysconf("SC_PAGE_SIZE")
GUARD = 1 << 30  # bytes of inaccessible address space on each side of the image in the test process
# mmap flags where they are the generic Linux values (elsewhere the test load runs without guards)
GUARD_FLAGS = (0x02 | 0x20 | 0x4000, 0x100000) if os.uname().machine in ("x86_64", "aarch64") else None


def fence(span: int) -> None:
    """Make the image land between two inaccessible GUARD-sized regions.

    The image's own code (constructors, destructors) runs in the test load. Code that reaches
    outside the image relative to its own address (a corrupt displacement) touches whatever this
    process has mapped there, which differs from the parent's layout; with nothing mapped around
    the image it faults here every time. Reserve GUARD + hole + GUARD without access, fill every
    free gap above it where the image would fit (mmap allocates top-down: the highest gap that
    fits wins; the gap under the stack is left for it to grow), then open the hole: the loader's
    mapping of the image lands in it.
    """
    if GUARD_FLAGS is None or span <= 0:
        return
    private, noreplace = GUARD_FLAGS
    hole = -(-span // PAGE) * PAGE
    base = _mmap(None, 2 * GUARD + hole, 0, private, -1, 0)
    if base is None or base == ctypes.c_void_p(-1).value:
        return
    top = base + 2 * GUARD + hole
    ranges = []
    with open("/proc/self/maps", "rb") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split(b"-"))
            ranges.append((start, end, fields[-1] if len(fields) > 5 else b""))
    for (_, gap_start, _), (gap_end, _, name) in zip(ranges, ranges[1:]):
        if gap_start >= top and gap_end - gap_start >= hole and name != b"[stack]":
            filled = _mmap(gap_start, gap_end - gap_start, 0, private | noreplace, -1, 0)
            if filled not in (None, gap_start, ctypes.c_void_p(-1).value):
                _munmap(filled, gap_end - gap_start)  # an old kernel took the address as a hint
    _munmap(base + GUARD, hole)


class Check:
    """One child test-loading one image."""

    def __init__(self, pid: int, answer_fd: int, report_fd: int, output_fd: int, timeout: float):
        self.pid = pid
        self.answer_fd = answer_fd
        self.pipes = {report_fd: bytearray(), output_fd: bytearray()}
        self.report_fd, self.output_fd = report_fd, output_fd
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.timed_out = False


def child(image_fd: int, report_fd: int, output_fd: int, directory: bytes, span: int) -> None:
    """In the forked child: load, unload, exit; never returns."""
    try:
        os.setpgid(0, 0)
        _signal.set_wakeup_fd(-1)
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        # Move the three descriptors above the ones they will replace, then into place.
        moved = [os.dup(fd) for fd in (output_fd, report_fd, image_fd)]
        while min(moved) <= IMAGE_FD:
            moved = [os.dup(fd) for fd in moved]
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(moved[0], 2)
        os.dup2(moved[1], REPORT_FD)
        os.dup2(moved[2], IMAGE_FD)
        os.closerange(IMAGE_FD + 1, os.sysconf("SC_OPEN_MAX"))
        if directory:
            try:
                os.chdir(directory)
            except OSError:
                pass
        fence(span)
        os.write(REPORT_FD, b"S")
        try:
            handle = _dlopen(f"/proc/self/fd/{IMAGE_FD}")
        except OSError as exc:
            os.write(REPORT_FD, b"E" + str(exc).encode("utf-8", "replace")[:OUTPUT_LIMIT])
            os._exit(0)
        except UnicodeDecodeError as exc:  # the loader's message has bytes that are not UTF-8
            os.write(REPORT_FD, b"E" + bytes(exc.object)[:OUTPUT_LIMIT])
            os._exit(0)
        os.write(REPORT_FD, b"L")
        _dlclose(handle)
        os.write(REPORT_FD, b"U")
        _libc_exit(0)
    finally:
        os._exit(120)


def _dlopen(path: str) -> int:
    return int(_ctypes.dlopen(path, RTLD_NOW | RTLD_LOCAL))


def _dlclose(handle: int) -> None:
    _ctypes.dlclose(handle)


def verdict(check: Check, status: int) -> tuple[int, str]:
    """The answer for a child that ended with wait status ``status``."""
    report = bytes(check.pipes[check.report_fd])
    output = bytes(check.pipes[check.output_fd]).decode("utf-8", "replace").strip()
    first_line = output.splitlines()[0][:300] if output else ""
    steps = report.split(b"E", 1)[0]
    phase = PHASES.get(steps[-1:], PHASES[b""])
    said = f" (it printed: {first_line})" if first_line else ""
    if check.timed_out:
        return REFUSED, (f"test-loading the image in a separate process did not finish within {check.timeout:g} s, "
                           f"{phase} (a constructor or destructor that does not return?)")
    if b"E" in report:
        message = report.split(b"E", 1)[1].decode("utf-8", "replace")
        return REFUSED, "the dynamic loader rejected the image: " + message.replace(f"/proc/self/fd/{IMAGE_FD}: ", "")
    if os.WIFSIGNALED(status):
        signal = os.WTERMSIG(status)
        name = SIGNAL_NAMES.get(signal, f"signal {signal}")
        if signal not in IMAGE_SIGNALS:
            return REFUSED, f"the test process was ended by {name} {phase}{said}"
        return REJECTED, f"the dynamic loader crashed ({name}) {phase} in a test process{said}"
    code = os.WEXITSTATUS(status)
    if code == 0 and steps.endswith(b"U"):
        return LOADED, ""
    if "Inconsistency detected by ld.so" in output:
        return REJECTED, (f"the dynamic loader found the image inconsistent {phase} in a test process and would "
                          f"have ended this one: {first_line}")
    return REJECTED, f"the image's code ended the test process (exit status {code}) {phase}{said}"


def answer(fd: int, code: int, reason: str) -> None:
    try:
        os.write(fd, bytes([code]) + reason.encode("utf-8", "replace"))
    except OSError:
        pass  # the parent stopped waiting
    os.close(fd)


def serve(sock_fd: int) -> None:
    sock = _socket.socket(fileno=sock_fd)
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # Ctrl-C is for the parent; we end when it closes the socket
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    _signal.set_wakeup_fd(wake_write)
    _signal.signal(_signal.SIGCHLD, lambda signum, frame: None)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    checks: dict[int, Check] = {}
    by_pipe: dict[int, Check] = {}
    fd_space = _socket.CMSG_SPACE(2 * 4)
    sock.send(b"ready")
    while True:
        now = time.monotonic()
        for check in checks.values():
            if not check.timed_out and now >= check.deadline:
                check.timed_out = True
                _kill_group(check.pid)
        pending = [c.deadline for c in checks.values() if not c.timed_out]
        wait = None if not pending else max(0, int((min(pending) - now) * 1000) + 1)
        for fd, _events in poller.poll(wait):
            if fd == sock.fileno():
                if not _receive(sock, fd_space, poller, checks, by_pipe):
                    for check in checks.values():
                        _kill_group(check.pid)
                    return
            elif fd == wake_read:
                while True:
                    try:
                        if not os.read(wake_read, 512):
                            break
                    except BlockingIOError:
                        break
            elif fd in by_pipe:
                _drain(fd, by_pipe[fd], poller, by_pipe)
        _reap(checks, poller, by_pipe)


def _receive(sock: _socket.socket, fd_space: int, poller: select.poll, checks: dict[int, Check],
             by_pipe: dict[int, Check]) -> bool:
    """Start the check one request asks for; False when the parent closed the socket."""
    data, ancillary, _flags, _address = sock.recvmsg(8192, fd_space)
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.extend(struct.unpack(f"{len(payload) // 4}i", payload[:len(payload) // 4 * 4]))
    if not data and not fds:
        return False
    if len(fds) != 2 or len(data) < 12:
        for fd in fds:
            os.close(fd)
        return True
    image_fd, answer_fd = fds
    timeout_ms, span = struct.unpack_from("<IQ", data)
    timeout = timeout_ms / 1000
    report_read, report_write = os.pipe()
    output_read, output_write = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (image_fd, report_read, report_write, output_read, output_write):
            os.close(fd)
        answer(answer_fd, NOT_RUN, f"cannot start a test process: {exc}")
        return True
    if pid == 0:
        child(image_fd, report_write, output_write, data[12:], span)
    try:
        os.setpgid(pid, pid)  # as the child does first: a kill at the timeout must reach its group either way
    except OSError:
        pass
    for fd in (image_fd, report_write, output_write):
        os.close(fd)
    check = Check(pid, answer_fd, report_read, output_read, timeout)
    checks[pid] = check
    for fd in (report_read, output_read):
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
        by_pipe[fd] = check
    return True


def _drain(fd: int, check: Check, poller: select.poll, by_pipe: dict[int, Check]) -> None:
    """Read what a child wrote (keeping the first OUTPUT_LIMIT bytes); stop watching a closed pipe."""
    buffer = check.pipes[fd]
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            poller.unregister(fd)
            del by_pipe[fd]
            return
        buffer += chunk[:max(0, OUTPUT_LIMIT - len(buffer))]


def _reap(checks: dict[int, Check], poller: select.poll, by_pipe: dict[int, Check]) -> None:
    for pid in list(checks):
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                continue
            _kill_group(pid)  # whatever it started; the group id stays reserved until we reap it
            status = os.waitpid(pid, 0)[1]
        except ChildProcessError:  # reaped elsewhere: its status is lost
            status = _signal.SIGKILL  # as a wait status: killed by an unknown hand
        check = checks.pop(pid)
        for fd in (check.report_fd, check.output_fd):
            if fd in by_pipe:
                _drain(fd, check, poller, by_pipe)
            if fd in by_pipe:  # a process the child started still holds the pipe open
                poller.unregister(fd)
                del by_pipe[fd]
            os.close(fd)
        answer(check.answer_fd, *verdict(check, status))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, _signal.SIGKILL)
    except OSError:
        pass


if __name__ == "__main__":
    serve(int(sys.argv[1]))
