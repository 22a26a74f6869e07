"""The differential tables are consistent and complete (no library needed for these checks)."""

from __future__ import annotations

from offloadrt import ErrorCode, api

from . import liboffload as lo
from .cases import CASES, CASES_BY_NAME, HEADER_RULES, NOT_COMPARABLE
from .divergences import EXPECTED_DIVERGENCES, PENDING_FIXES, Divergence, PendingFix
from .neutral import SIGNATURES, Call


def test_every_divergence_and_pending_fix_names_a_case_and_says_why() -> None:
    entries: list[Divergence | PendingFix] = [*EXPECTED_DIVERGENCES, *PENDING_FIXES]
    for entry in entries:
        assert entry.case in CASES_BY_NAME, f"{entry.case}: no such case"
        assert len(entry.why) > 20, f"{entry.case}: say why it differs"
    both = {d.case for d in EXPECTED_DIVERGENCES} & {p.case for p in PENDING_FIXES}
    assert not both, f"listed both as expected and as pending: {both}"


def test_every_header_entry_point_has_cases_plain_and_with_code_location() -> None:
    assert set(SIGNATURES) == set(lo.SIGNATURES) == set(HEADER_RULES)
    called = {(step.fn, step.loc) for case in CASES for step in case.steps if isinstance(step, Call)}
    missing = [f"{fn}{'WithCodeLoc' if loc else ''}" for fn in lo.SIGNATURES for loc in (False, True)
               if (fn, loc) not in called]
    assert not missing, f"no case calls {missing}"


def test_every_header_rule_is_covered_or_explained() -> None:
    rules = {f"{fn}: {rule}" for fn, listed in HEADER_RULES.items() for rule in listed}
    checked = {rule for case in CASES for rule in case.checks}
    assert checked <= rules, f"cases check rules the header does not list: {sorted(checked - rules)}"
    assert set(NOT_COMPARABLE) <= rules, f"unknown rules in NOT_COMPARABLE: {sorted(set(NOT_COMPARABLE) - rules)}"
    both = sorted(checked & set(NOT_COMPARABLE))
    assert not both, f"both checked and not comparable: {both}"
    uncovered = sorted(rules - checked - set(NOT_COMPARABLE))
    assert not uncovered, f"header rules with no case and no reason: {uncovered}"


def test_offloadrt_has_every_entry_point_and_its_code_location_variant() -> None:
    missing = [name for fn in lo.SIGNATURES for name in (fn, f"{fn}WithCodeLoc") if not hasattr(api, name)]
    assert not missing, f"offloadrt.api lacks {missing}"


def test_offloadrt_enums_have_llvm22_values() -> None:
    import offloadrt  # noqa: PLC0415  (the enum classes by their names)

    for family, names in lo.ENUMS.items():
        enum = getattr(offloadrt, family)
        for value, name in enumerate(names):
            assert enum[name] == value, f"{family}.{name} is {int(enum[name])} in offloadrt, {value} in LLVM 22"
    for value, name in enumerate(lo.ERRC):
        # compared by name: offloadrt inserts QUEUE_ERROR after BACKEND_FAILURE
        expected = value if value <= lo.ERRC.index("BACKEND_FAILURE") else value + 1
        assert ErrorCode[name] == expected, f"ErrorCode.{name}"
    assert ErrorCode.QUEUE_ERROR == lo.ERRC.index("BACKEND_FAILURE") + 1
