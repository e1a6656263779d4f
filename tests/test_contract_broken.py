"""The contract catches every store in the catalogue of broken stores, each on its own clause.

The catalogue's stores follow the store-call convention
(``agentloop._shared.call_starts`` / ``call_ends``), so each runs under trio
and under asyncio: the tests marked ``anyio`` certify them on both (about 15 s
per backend for the catalogue, 15 s for the correct stores).
"""

from __future__ import annotations

import pytest
from broken.catalogue import CATALOGUE, Broken, good_harness, unusual_good_harnesses

import agentlooptest._cancel
import agentlooptest._clauses._machines
from agentlooptest import CLAUSES, Harness, certify, memory_harness, memory_store_harness

LIFECYCLE = (
    "page_sessions",
    "set_labels",
    "prune_steps",
    "steps_after",
    "expire_sessions",
    "fork_session",
    "restore_session",
)
"""The session lifecycle's capabilities, which the unusual correct stores do not have."""


@pytest.fixture(autouse=True)
def _quick_hang_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wedged store is detected in a second instead of ten; shrinking stops sooner."""
    monkeypatch.setattr(agentlooptest._cancel, "USABLE_TIMEOUT", 1.0)
    monkeypatch.setattr(agentlooptest._clauses._machines, "SHRINK_SECONDS", 3)


@pytest.mark.anyio
@pytest.mark.parametrize("broken", CATALOGUE, ids=lambda b: b.name.partition(":")[0])
async def test_broken_store_is_caught(broken: Broken) -> None:
    """The broken store fails the clause written for its defect, with a message naming it."""
    report = await certify(broken.harness, pattern=broken.expected)
    result = report.result(broken.expected)
    assert result.outcome == "failed", f"{broken.name} was not caught by {broken.expected}"
    assert result.message.startswith(f"[{broken.expected}]")
    assert not report.ok


@pytest.mark.anyio
async def test_reference_stores_pass_everything() -> None:
    """The correct stores the broken ones derive from pass every clause, durability included."""
    report = await certify(good_harness())
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    assert report.skipped == ()


def test_every_clause_catches_a_broken_store() -> None:
    """Breadth: each clause is the expected catch of at least one broken store."""
    expected = {b.expected for b in CATALOGUE}
    assert [c.id for c in CLAUSES if c.id not in expected] == []


@pytest.mark.anyio
async def test_agentloopmem_passes_everything() -> None:
    """The in-memory stores pass every clause; only durability and one-object clauses skip
    (forks need one object holding steps and sessions)."""
    report = await certify(memory_harness())
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    assert {r.id for r in report.skipped} == {
        "step.durable",
        "step.append-many.durable",
        "session.durable",
        "session.revision.durable",
        "session.combined.one-session",
        "session.fork.copies",
        "session.fork.isolation",
        "session.fork.refused",
        "session.fork.atomic",
    }
    assert report.verdict.startswith("CERTIFIED")


@pytest.mark.anyio
async def test_agentloopmem_memory_store_passes_everything() -> None:
    """The one-object MemoryStore passes every clause, forks and one-object clauses included."""
    report = await certify(memory_store_harness())
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    assert "reopen" in {r.capability for r in report.skipped}
    assert not {r.capability for r in report.skipped} & {"combined", *LIFECYCLE}
    assert report.verdict.startswith("CERTIFIED")


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(unusual_good_harnesses()))
async def test_unusual_correct_stores_pass_everything(name: str) -> None:
    """Correct stores built unusually pass every clause; only the lease and lifecycle
    clauses skip (they have neither).

    A foreign key with cascading delete (ensure_session before every append,
    again after a delete), reads fetched in pages from one snapshot, JSON kept
    re-serialized (sorted keys, compact, 1.0 as 1, like JSONB); and, with every
    capability and a second handle, calls that never suspend and batches
    committed in chunks inside one transaction (``broken/unusual.py``).
    """
    report = await certify(unusual_good_harnesses()[name])
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    if name in ("never-suspends", "chunked-batches"):
        assert report.skipped == ()
        return
    assert report.skipped, "these stores have no leases: the lease clauses must skip"
    assert {r.capability for r in report.skipped} == {"lease", *LIFECYCLE}


MODEL_BASED = [b for b in CATALOGUE if b.expected.endswith(".model-based")]
"""The broken stores a model-based clause is written to catch."""


@pytest.mark.parametrize("broken", MODEL_BASED, ids=lambda b: b.name.partition(":")[0])
async def test_model_based_stores_are_caught_within_the_program_floor(
    broken: Broken, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a store so slow that its machine stops at the floor of programs, the broken
    stores of the model-based clauses are still caught: the floor does not depend on speed."""
    monkeypatch.setattr(agentlooptest._clauses._machines, "PROGRAM_SECONDS", 0.0)
    report = await certify(broken.harness, pattern=broken.expected)
    assert report.result(broken.expected).outcome == "failed", broken.name


async def test_a_slow_store_runs_the_floor_of_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the machine's time budget it starts no more programs once the floor has run, and
    passes; one store is opened per program (and one to probe the store)."""
    from agentloopmem import SessionStore

    monkeypatch.setattr(agentlooptest._clauses._machines, "PROGRAM_SECONDS", 0.0)
    opened: list[SessionStore] = []

    async def new_store() -> SessionStore:
        opened.append(SessionStore())
        return opened[-1]

    report = await certify(Harness(new_session_store=new_store), pattern="session.model-based")
    assert report.result("session.model-based").outcome == "passed"
    assert len(opened) == agentlooptest._clauses._machines.MIN_PROGRAMS + 1
