"""Failure messages read well: model-based programs as numbered calls; cancellation by the rules."""

from __future__ import annotations

import math
import re

import pytest
from broken import sessions, steps
from broken.catalogue import _factory

import agentlooptest._clauses._machines
from agentloop import FinalizeSummary, RunStep
from agentlooptest import Harness, certify


@pytest.fixture(autouse=True)
def _quick_shrink(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agentlooptest._clauses._machines, "SHRINK_SECONDS", 3)


async def test_a_model_based_failure_is_a_numbered_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shrunk program is a numbered list of store calls ending at the first divergence.

    Shrinking runs to the end here: cut off by a wall-clock bound, it reports the
    shortest program found by then, which on a loaded machine is an early, unshrunk
    one (starting anywhere, with a last_n say), so the first call would depend on the
    machine's speed.
    """
    monkeypatch.setattr(agentlooptest._clauses._machines, "SHRINK_SECONDS", math.inf)
    report = await certify(
        Harness(new_step_store=_factory(steps.WindowMath)), pattern="step.model-based"
    )
    message = report.result("step.model-based").message
    assert re.search(r"call by call:\n {14}1\. append(_many)?\(\[?RunStep\(", message), message
    assert "<- the first result that differs from the model" in message
    assert "  expected: last_n(" in message
    assert "to return what the model says: " in message
    for noise in ("Failing test case", "_machines.py", "state = ", "Explanation"):
        assert noise not in message


async def test_a_program_cut_short_is_still_numbered(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no time left to shrink, the shortest failing program found so far is shown, as
    numbered calls ending at the first divergence."""
    monkeypatch.setattr(agentlooptest._clauses._machines, "SHRINK_SECONDS", 0)
    report = await certify(
        Harness(new_step_store=_factory(steps.WindowMath)), pattern="step.model-based"
    )
    message = report.result("step.model-based").message
    assert re.search(r"call by call:\n {14}1\. [a-z_]+\(", message), message
    assert re.search(r"\d+\. last_n\(.*<- the first result that differs from the model", message)
    assert "  expected: last_n(" in message


class _FinalizeDropsData(sessions.GoodSessions):
    """finalize forgets the session's data (a row rewritten without it)."""

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        await super().finalize(session_id, summary)
        record = self.records[session_id]
        record.session = record.session.with_data(None)


async def test_cancellation_expectations_come_from_the_rules() -> None:
    """A store whose uncancelled write is wrong is not shown its own state as "expected"."""
    report = await certify(
        Harness(new_session_store=_factory(_FinalizeDropsData)), pattern="session.cancel.writes"
    )
    message = report.result("session.cancel.writes").message
    expected = next(line for line in message.splitlines() if line.startswith("  expected:"))
    assert "'data': {'before': 1}" in expected
    assert "'data': None" not in expected.partition(" or ")[2]
    assert "hint:     two round trips without a transaction" in message


async def test_a_failure_ends_with_the_clauses_hint() -> None:
    """A clause that knows the usual cause names it on the failure's last line."""
    report = await certify(
        Harness(new_step_store=_factory(steps.OldestN)), pattern="step.window.newest-n"
    )
    message = report.result("step.window.newest-n").message
    assert message.splitlines()[-1] == (
        "  hint:     LIMIT n in ascending order: the oldest n, not the newest"
    )


class _TwoBugs(steps.WindowMath):
    """WindowMath's window bug, and ``all`` failing outright on a session of 3 steps or more."""

    async def all(self, session_id: str) -> list[RunStep]:
        steps_ = await super().all(session_id)
        if len(steps_) >= 3:
            raise ValueError("all() cannot read past 2 steps")
        return steps_


async def test_two_distinct_bugs_are_two_numbered_programs() -> None:
    """Hypothesis finds two distinct failures: each is shown as its own numbered program,
    not as a raw ExceptionGroup traceback."""
    report = await certify(Harness(new_step_store=_factory(_TwoBugs)), pattern="step.model-based")
    message = report.result("step.model-based").message
    assert "ExceptionGroup" not in message
    assert "Traceback" not in message
    assert "2 distinct failures" in message
    assert "failure 1 of 2" in message
    assert "failure 2 of 2" in message
    assert len(re.findall(r"^ +1\. ", message, re.MULTILINE)) == 2  # two programs, numbered
    assert "<- the first result that differs from the model" in message
    assert "ValueError: all() cannot read past 2 steps" in message
