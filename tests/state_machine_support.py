"""Support for tests/test_api_state_machine.py: calling the API with an expectation, the trace
of calls shown when a run fails, the hang watchdog, the counters of the summary, and gates."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Collection
from typing import Any

from offloadrt import CodeLocation, ErrorCode, OffloadError, api

HANG_EXIT = 75  # the child's exit status when the watchdog finds a call that never returned
GATE_SAFETY = 60.0  # a gate left closed by a broken run lets its queue go after this long


# Runtime bugs reported and not fixed yet: where the test meets one it counts it (the summary and
# a pytest warning show the count) instead of failing. A key is a rule's own name for a wrong
# outcome ("event behind a racing failure"), or "<entry point>: <exception type>" for an entry
# point that raises something other than an OffloadError. Remove an entry once the bug is fixed.
# (Both bugs the test found first, those two, were fixed in 00a4036.)
KNOWN_BUGS: dict[str, str] = {}


class Violation(AssertionError):  # noqa: N818  # a broken invariant, not an error of the code under test
    """A broken invariant. ``category`` names which, for the long run's tally."""

    def __init__(self, category: str, message: str):
        super().__init__(f"[{category}] {message}")
        self.category = category


class Stats:
    """What the runs did, for the summary: calls per entry point, errors per code, checks."""

    def __init__(self) -> None:
        self.examples = 0
        self.steps = 0
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.errors_by_call: Counter[str] = Counter()
        self.checks: Counter[str] = Counter()
        self.warnings: Counter[str] = Counter()
        self.rules: Counter[str] = Counter()
        self.known_bugs: Counter[str] = Counter()

    def summary(self) -> dict[str, Any]:
        return {"examples": self.examples, "steps": self.steps, "calls": dict(sorted(self.calls.items())),
                "errors": dict(sorted(self.errors.items())),
                "errors_by_call": dict(sorted(self.errors_by_call.items())),
                "checks": dict(sorted(self.checks.items())), "warnings": dict(sorted(self.warnings.items())),
                "rules": dict(sorted(self.rules.items())), "known_bugs": dict(sorted(self.known_bugs.items()))}

    def known_bug(self, key: str) -> None:
        assert key in KNOWN_BUGS, key
        self.known_bugs[key] += 1


class Watchdog:
    """Ends the process with the trace and every thread's stack when an API call (or a wait of
    the test's own) has not returned within ``limit`` seconds: a hang is reported, not waited out."""

    def __init__(self, limit: float, trace: deque[str]):
        self.limit = limit
        self.trace = trace
        self.label: str | None = None
        self.since = 0.0
        self._tick = threading.Event()  # never set: its timed wait paces the checks
        self.thread = threading.Thread(target=self._watch, name="state-machine-watchdog", daemon=True)
        self.thread.start()

    def enter(self, label: str) -> None:
        self.since = time.monotonic()
        self.label = label

    def leave(self) -> None:
        self.label = None

    def _watch(self) -> None:
        while True:
            self._tick.wait(min(1.0, self.limit / 4))
            label = self.label
            if label is not None and time.monotonic() - self.since > self.limit:
                self._fire(label)

    def _fire(self, label: str) -> None:
        out = sys.stderr
        print(f"\n[HANG] {label} has not returned after {self.limit:.0f} s", file=out)
        print("---- the last calls of the run ----", file=out)
        for line in self.trace:
            print(line, file=out)
        print("---- every thread ----", file=out, flush=True)
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.flush()
        sys.stdout.flush()
        os._exit(HANG_EXIT)


class Names:
    """Readable names for handles and addresses in the trace."""

    def __init__(self, describe_address: Callable[[int], str | None]):
        self._names: dict[int, str] = {}
        self._describe_address = describe_address

    def add(self, obj: object, name: str) -> None:
        self._names[id(obj)] = name

    def format(self, value: object) -> str:
        name = self._names.get(id(value))
        if name is not None:
            return name
        if isinstance(value, bool) or value is None:
            return repr(value)
        if isinstance(value, int) and type(value) is int:
            where = self._describe_address(value) if value > 0xFFFF else None
            return where or (hex(value) if value > 0xFFFF else str(value))
        if isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
            shown = raw.hex() if len(raw) <= 24 else f"{raw[:8].hex()}...<{len(raw)} bytes>"
            return f"{type(value).__name__}({shown})"
        if isinstance(value, (list, tuple)):
            inner = ", ".join(self.format(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        if callable(value) and hasattr(value, "label"):
            return str(value.label)
        text = repr(value)
        return text if len(text) < 80 else text[:77] + "..."


def describe_codes(ok: bool, codes: Collection[ErrorCode]) -> str:
    parts = (["success"] if ok else []) + sorted(code.name for code in codes)
    return " or ".join(parts) or "nothing"


class Caller:
    """Calls ``ol*`` entry points, checks the outcome against an expectation, keeps a trace."""

    def __init__(self, stats: Stats, watchdog: Watchdog, names: Names, trace: deque[str]):
        self.stats = stats
        self.watchdog = watchdog
        self.names = names
        self.trace = trace
        self.count = 0

    def note(self, line: str) -> None:
        self.trace.append(f"   # {line}")

    def call(self, name: str, *args: Any, ok: bool = True, codes: Collection[ErrorCode] = (),
             passthrough: BaseException | None = None) -> tuple[bool, Any]:
        """``api.<name>(*args)``: (True, result) or (False, the OffloadError).

        Success must be allowed (``ok``) or the error's code be one of ``codes``; any other
        exception is a violation, unless it is ``passthrough`` (a user callback's own).
        """
        self.count += 1
        variant = getattr(api, f"{name}WithCodeLoc", None)
        fn: Callable[..., Any] = getattr(api, name)
        kwargs: dict[str, Any] = {}
        if variant is not None and self.count % 3 == 0:  # every third call through its WithCodeLoc twin
            location = None if self.count % 2 else CodeLocation(name, "test_api_state_machine.py", self.count, 7)
            name = f"{name}WithCodeLoc"
            if name == "olInitWithCodeLoc":
                args, kwargs = (location,), {"platforms": args[0] if args else None}
            else:
                kwargs = {"code_location": location}
            fn = variant
        shown = f"{name}({', '.join(self.names.format(a) for a in (*args, *kwargs.values()))})"
        self.stats.calls[name] += 1
        self.trace.append(shown)
        self.watchdog.enter(shown)
        try:
            result = fn(*args, **kwargs)
        except OffloadError as exc:
            self.watchdog.leave()
            self.stats.errors[exc.code.name] += 1
            self.stats.errors_by_call[f"{name}:{exc.code.name}"] += 1
            self.trace.append(f"   -> {exc.code.name}: {exc.details}")
            if exc.code not in codes:
                raise Violation("wrong-outcome", f"{shown} raised {exc!r}; expected {describe_codes(ok, codes)}") \
                    from exc
            if not isinstance(exc.details, str) or not exc.details.strip():
                raise Violation("wrong-outcome", f"{shown} raised {exc.code.name} with blank details") from exc
            return False, exc
        except BaseException as exc:  # noqa: BLE001  # anything but OffloadError is a finding
            self.watchdog.leave()
            if passthrough is not None and exc is passthrough:
                self.trace.append(f"   -> the callback's own {type(exc).__name__} propagated")
                return False, exc
            self.trace.append(f"   -> {type(exc).__name__}: {exc}")
            bug = f"{name.removesuffix('WithCodeLoc')}: {type(exc).__name__}"
            if bug in KNOWN_BUGS:
                self.stats.known_bug(bug)
                self.trace.append(f"   # known runtime bug: {KNOWN_BUGS[bug]}")
                return False, exc
            raise Violation("non-OffloadError",
                            f"{shown} raised {type(exc).__name__} (not an OffloadError): {exc}\n"
                            + "".join(traceback.format_exception(exc))) from exc
        self.watchdog.leave()
        self.trace.append(f"   -> {self.names.format(result)}")
        if not ok:
            raise Violation("wrong-outcome", f"{shown} succeeded (returned {self.names.format(result)}); "
                                             f"expected {describe_codes(ok, codes)}")
        return True, result


class Gate:
    """A host function that holds its queue until the test opens it (opened before any blocking
    call, so nothing waits on a closed gate)."""

    def __init__(self, label: str):
        self.label = label
        self.queue = 0  # the model queue it holds and its place there (set once queued)
        self.seq = 0
        self.opened = threading.Event()
        self.entered = threading.Event()

    def __call__(self, _user_data: object) -> None:
        self.entered.set()
        if not self.opened.wait(GATE_SAFETY):
            raise TimeoutError(f"{self.label} was never opened")

    def open(self) -> None:
        self.opened.set()
