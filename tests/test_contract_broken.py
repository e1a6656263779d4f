"""The contract catches every store in the catalogue of broken stores, each on its own clause."""

from __future__ import annotations

import pytest
from broken.catalogue import CATALOGUE, Broken, good_harness

import agentlooptest._cancel
import agentlooptest._clauses._machines
from agentlooptest import CLAUSES, certify, memory_harness


@pytest.fixture(autouse=True)
def _quick_hang_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wedged store is detected in a second instead of ten; shrinking stops sooner."""
    monkeypatch.setattr(agentlooptest._cancel, "USABLE_TIMEOUT", 1.0)
    monkeypatch.setattr(agentlooptest._clauses._machines, "SHRINK_SECONDS", 3)


@pytest.mark.parametrize("broken", CATALOGUE, ids=lambda b: b.name.partition(":")[0])
async def test_broken_store_is_caught(broken: Broken) -> None:
    """The broken store fails the clause written for its defect, with a message naming it."""
    report = await certify(broken.harness, pattern=broken.expected)
    result = report.result(broken.expected)
    assert result.outcome == "failed", f"{broken.name} was not caught by {broken.expected}"
    assert result.message.startswith(f"[{broken.expected}]")
    assert not report.ok


async def test_reference_stores_pass_everything() -> None:
    """The correct stores the broken ones derive from pass every clause, durability included."""
    report = await certify(good_harness())
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    assert report.skipped == ()


def test_every_clause_catches_a_broken_store() -> None:
    """Breadth: each clause is the expected catch of at least one broken store."""
    expected = {b.expected for b in CATALOGUE}
    assert [c.id for c in CLAUSES if c.id not in expected] == []


async def test_agentloopmem_passes_everything() -> None:
    """The in-memory stores pass every clause; only durability and one-object clauses skip."""
    report = await certify(memory_harness())
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    assert {r.id for r in report.skipped} == {
        "step.durable",
        "step.append-many.durable",
        "session.durable",
        "session.revision.durable",
        "session.combined.one-session",
    }
    assert report.verdict.startswith("CERTIFIED")


async def test_reserializing_json_is_allowed() -> None:
    """A store that re-serializes JSON (sorted keys, no spaces, like JSONB) passes every clause."""
    from broken.catalogue import reserializing_harness

    report = await certify(reserializing_harness())
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
