"""What gpu_check reports: one :class:`Result` per line, and pytest's reports read into results.

A result is ``PASS``, ``FAIL`` or ``SKIP``, a name without spaces (``step.item``) and a detail,
plus any figures (numbers a later reader wants in the JSON). Child steps hand their results to the
parent through a JSON-lines file (:class:`Recorder`), one line written and flushed per result, so
what a child found before it hung or crashed still comes back.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

STATUSES = ("PASS", "FAIL", "SKIP")


@dataclass
class Result:
    """One line of the check: ``status`` (PASS, FAIL, SKIP), ``name`` and ``detail``; ``figures``
    are numbers and facts kept in the JSON."""

    status: str
    name: str
    detail: str = ""
    figures: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"a result's status is one of {STATUSES}, not {self.status!r}")
        self.name = re.sub(r"\s+", "_", self.name.strip()) or "unnamed"

    def line(self) -> str:
        """``STATUS name detail`` on one line (a detail's line breaks become ' | ')."""
        detail = " | ".join(part.strip() for part in self.detail.splitlines() if part.strip())
        return f"{self.status} {self.name} {detail}".rstrip()

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "name": self.name, "detail": self.detail, "figures": self.figures}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        return cls(str(data["status"]), str(data["name"]), str(data.get("detail", "")), dict(data.get("figures", {})))


class Recorder:
    """Where a child step puts its results: printed, and appended to a JSON-lines file at once."""

    def __init__(self, path: Path | None, out: TextIO | None = None) -> None:
        self._file = path.open("a", encoding="utf-8") if path is not None else None
        self._out = out
        self.results: list[Result] = []

    def add(self, status: str, name: str, detail: str = "", **figures: Any) -> Result:
        """Record one result (and return it)."""
        result = Result(status, name, detail, figures)
        self.results.append(result)
        if self._file is not None:
            self._file.write(json.dumps(result.as_dict(), default=str) + "\n")
            self._file.flush()
        if self._out is not None:
            print(result.line(), file=self._out, flush=True)
        return result

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_recorded(path: Path) -> list[Result]:
    """The results a child wrote to ``path`` (a line cut short by a kill is left out)."""
    if not path.exists():
        return []
    found = []
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            found.append(Result.from_dict(json.loads(text)))
        except (ValueError, KeyError, TypeError):
            continue
    return found


# ---- pytest's reports ------------------------------------------------------------------------------

@dataclass(frozen=True)
class PytestOutcome:
    """One test as pytest reported it: its id, ``passed``/``failed``/``error``/``skipped``, and the
    message of a failure, error or skip."""

    test_id: str
    outcome: str
    message: str = ""


def parse_junit(text: str) -> list[PytestOutcome]:
    """The tests of a JUnit XML report written by ``pytest --junitxml`` (ValueError if it is not one)."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise ValueError(f"not a JUnit XML report: {exc}") from exc
    outcomes = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        test_id = f"{classname}::{name}" if classname else name
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                message = element.get("message") or (element.text or "").strip()
                break
        outcomes.append(PytestOutcome(test_id, outcome, _first_line(message)))
    return outcomes


_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(.*)$")
_SKIP_LOCATION = re.compile(r"^\[\d+\]\s+(\S+?):(?:\d+:)?\s*(.*)$")


def parse_short_summary(text: str) -> list[PytestOutcome]:
    """The tests listed in the "short test summary info" section that ``pytest -rA`` prints: what
    is left when no JUnit report was written (pytest killed). A skip line names the test's file
    and line, not the test."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "short test summary info" in line), None)
    if start is None:
        return []
    outcomes = []
    kinds = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped", "XFAIL": "skipped",
             "XPASS": "passed"}
    for line in lines[start + 1:]:
        match = _SUMMARY_LINE.match(line.strip())
        if match is None:
            if line.startswith("="):
                break
            continue
        kind, rest = match.groups()
        if kind == "SKIPPED":
            located = _SKIP_LOCATION.match(rest)
            test_id, message = (located.group(1), located.group(2)) if located else (rest, "")
        else:
            test_id, _, message = rest.partition(" - ")
        outcomes.append(PytestOutcome(test_id.strip(), kinds[kind], _first_line(message)))
    return outcomes


def count_outcomes(outcomes: list[PytestOutcome]) -> dict[str, int]:
    """How many tests passed, failed, had an error and were skipped."""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for outcome in outcomes:
        counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
    return counts


def describe_counts(counts: dict[str, int]) -> str:
    """``"3 failed, 120 passed, 4 skipped"``: the nonzero counts, failures first."""
    order = ("failed", "error", "passed", "skipped")
    parts = [f"{counts[kind]} {'errors' if kind == 'error' else kind}" for kind in order if counts.get(kind)]
    return ", ".join(parts) or "no tests"


def _first_line(message: str, limit: int = 300) -> str:
    line = next((part.strip() for part in message.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."
