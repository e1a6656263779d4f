"""``Harness(expected_failures={clause_id: reason})``: known divergences, strictly tracked.

A listed clause that fails is an expected failure (the report stays ok, the
row, ``--json`` and JUnit say so); one that passes fails; unknown ids and
empty reasons are refused when the harness is made.
"""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest
from broken import steps
from broken.catalogue import _factory

from agentlooptest import ClauseResult, Harness, Report, certify, memory_harness
from agentlooptest._cli import render

XFAIL = "step.all.insertion-order"
PATTERN = "step.[ao]*"  # step.all.* (one fails) and step.order.* (they pass)


def _known(**extra: object) -> Harness:
    return Harness(
        new_step_store=_factory(steps.AllNewestFirst),
        expected_failures={XFAIL: "all() reads newest-first until #12 lands"},
        **extra,  # type: ignore[arg-type]
    )


def test_unknown_clause_ids_are_refused_naming_the_closest() -> None:
    with pytest.raises(ValueError, match=r"names no clause of the contract: 'step.all.insertion'"):
        Harness(
            new_step_store=_factory(steps.OldestN), expected_failures={"step.all.insertion": "x"}
        )
    with pytest.raises(ValueError, match=r"did you mean 'step.all.insertion-order'\?"):
        Harness(
            new_step_store=_factory(steps.OldestN),
            expected_failures={"step.all.insertion-ordr": "x"},
        )


def test_reasons_and_the_mapping_are_checked() -> None:
    new = _factory(steps.OldestN)
    with pytest.raises(
        TypeError, match=r"^expected_failures\['step.all.insertion-order'\] must be"
    ):
        Harness(new_step_store=new, expected_failures={XFAIL: " "})
    with pytest.raises(TypeError, match=r"^expected_failures must be a mapping"):
        Harness(new_step_store=new, expected_failures=[XFAIL])  # type: ignore[arg-type]


def test_the_harness_keeps_its_own_copy() -> None:
    listed = {XFAIL: "known"}
    harness = Harness(new_step_store=_factory(steps.OldestN), expected_failures=listed)
    listed.clear()
    assert harness.expected_failures == {XFAIL: "known"}


async def test_a_listed_clause_that_fails_is_an_expected_failure() -> None:
    report = await certify(_known(), pattern=PATTERN)
    result = report.result(XFAIL)
    assert result.outcome == "xfailed"
    assert result.expected_failure == "all() reads newest-first until #12 lands"
    assert result.message.startswith(f"[{XFAIL}]")  # the divergence itself is kept
    assert report.ok
    assert report.failed == ()
    assert "0 failed, 1 expected failure, " in report.verdict
    assert "(1 expected failure)" in report.level


async def test_the_table_json_and_junit_show_it() -> None:
    report = await certify(_known(), pattern=PATTERN)
    table = render("mine", report)
    row = next(line for line in table.splitlines() if line.startswith(XFAIL))
    assert "xfail" in row
    assert "expected failure: all() reads newest-first" in row
    assert "expected failures (the harness's known divergences):" in table
    doc = json.loads(json.dumps(report.to_dict()))
    [listed] = [r for r in doc["results"] if r["id"] == XFAIL]
    assert listed["outcome"] == "xfailed"
    assert listed["expected_failure"].startswith("all() reads")
    case = next(
        c
        for c in ElementTree.fromstring(report.to_junit_xml()).iter("testcase")
        if c.get("name") == XFAIL
    )
    skipped = case.find("skipped")
    assert skipped is not None
    assert skipped.get("type") == "pytest.xfail"
    assert case.find("failure") is None


async def test_a_listed_clause_that_passes_fails() -> None:
    """Strict: a fixed divergence must leave the list."""
    harness = memory_harness()
    strict = Harness(
        new_step_store=harness.new_step_store,
        expected_failures={"step.order.oldest-first": "was reversed once"},
    )
    report = await certify(strict, pattern="step.order.oldest-first")
    [result] = report.results
    assert result.outcome == "failed"
    assert "expected to fail but passed" in result.message
    assert "remove it from expected_failures" in result.message
    assert not report.ok


def test_a_whole_run_with_known_divergences_is_certified_naming_them() -> None:
    def result(clause_id: str, outcome: str) -> ClauseResult:
        return ClauseResult(clause_id, "t", "step", None, outcome)  # type: ignore[arg-type]

    report = Report(
        results=(result("step.order.oldest-first", "passed"), result(XFAIL, "xfailed")),
        level="step: base (1 expected failure)",
        duration=1.0,
    )
    assert report.ok
    assert report.verdict.startswith(
        "CERTIFIED (step: base (1 expected failure)) with known divergences "
        "(step.all.insertion-order): 1 passed, 0 failed, 1 expected failure, 0 skipped"
    )
