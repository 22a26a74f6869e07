"""Every case of the table, run on offloadrt and on LLVM 22's liboffload: the outcomes must be equal,
or the difference must be an expected divergence (both sides as documented) or a pending fix."""

from __future__ import annotations

import ctypes

import pytest

from .cases import CASES
from .divergences import DIVERGENCES_BY_CASE, PENDING_BY_CASE, Expect, matches
from .forkserver import HARNESS_ERROR
from .liboffload import SIGNATURES
from .neutral import Case, describe
from .run_offloadrt import run_case


def _param(case: Case) -> object:
    pending = PENDING_BY_CASE.get(case.name)
    if pending is None:
        return pytest.param(case, id=case.name)
    reason = f"pending offloadrt fix: liboffload answers {pending.liboffload}, offloadrt {pending.offloadrt}"
    return pytest.param(case, id=case.name, marks=pytest.mark.xfail(strict=True, reason=reason))


def _shown(expected: Expect) -> str:
    return expected if isinstance(expected, str) else f"/{expected.pattern}/"


def _table(case: Case, liboffload: list[str], offloadrt: list[str],
           expected: tuple[tuple[Expect, ...], tuple[Expect, ...]] | None = None) -> str:
    """Both sides' outcomes step by step (and what the divergence entry expects, if any)."""
    rows = [("step", "liboffload", "offloadrt")]
    for index, step in enumerate(case.steps):
        if index >= len(liboffload) and index >= len(offloadrt):
            break
        rows.append((describe(step), liboffload[index] if index < len(liboffload) else "-",
                     offloadrt[index] if index < len(offloadrt) else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"  {a:<{widths[0]}}  {b:<{widths[1]}}  {c}" for a, b, c in rows]
    if expected is not None:
        lines.append(f"  expected: liboffload {[_shown(e) for e in expected[0]]}")
        lines.append(f"            offloadrt {[_shown(e) for e in expected[1]]}")
    return "\n".join(lines)


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_case(case: Case, liboffload_outcomes: dict[str, list[str]], resources: dict[str, str],
              clean_environment: None) -> None:
    theirs = liboffload_outcomes[case.name]
    ours = run_case(case, resources)
    problems = [o for o in theirs + ours if o.startswith(HARNESS_ERROR)]
    assert not problems, f"{case.name}: the case could not run:\n" + "\n".join(problems)
    divergence = DIVERGENCES_BY_CASE.get(case.name)
    if divergence is None:
        same = ours == theirs
        assert same, (f"{case.name}: offloadrt and liboffload differ, and no expected divergence or "
                                f"pending fix lists it:\n{_table(case, theirs, ours)}")
        return
    expected = (divergence.liboffload, divergence.offloadrt)
    as_documented = matches(divergence.liboffload, theirs) and matches(divergence.offloadrt, ours)
    assert as_documented, (
        f"{case.name}: not the documented divergence ({divergence.why}):\n{_table(case, theirs, ours, expected)}")
    stale = not divergence.may_agree and ours == theirs
    assert not stale, (
        f"{case.name}: both sides now agree; remove its expected divergence:\n{_table(case, theirs, ours)}")


def test_library_exports_every_entry_point(library_path: str) -> None:
    """The library has LLVM 22's 35 entry points and their WithCodeLoc variants, nothing missing."""
    dll = ctypes.CDLL(library_path)
    missing = [name for fn in SIGNATURES for name in (fn, f"{fn}WithCodeLoc") if not hasattr(dll, name)]
    assert not missing, f"{library_path} lacks {missing}: is it LLVM 22's liboffload?"
