"""The session-lifecycle clauses: each capability is detected on its own, a store without it
has its clauses skipped saying which protocol it lacks, and the built-in stores pass them."""

from __future__ import annotations

import pytest
from broken import lifecycle
from broken._good import GoodBoth, harness_for

from agentlooptest import CAPABILITIES, CLAUSES, certify, memory_harness, memory_store_harness

LIFECYCLE = {
    "page_sessions": "SupportsPaging",
    "set_labels": "SupportsLabels",
    "prune_steps": "SupportsPrune",
    "steps_after": "SupportsStepsAfter",
    "expire_sessions": "SupportsExpire",
    "fork_session": "SupportsFork",
    "restore_session": "SupportsRestore",
}


def test_each_lifecycle_capability_has_clauses() -> None:
    """Every lifecycle capability is a named capability of the contract, with clauses."""
    for name, protocol in LIFECYCLE.items():
        assert CAPABILITIES[name].__name__ == protocol
        assert [c for c in CLAUSES if c.capability == name], name


@pytest.mark.anyio
async def test_a_store_without_the_lifecycle_skips_its_clauses() -> None:
    """A store with none of the capabilities has every lifecycle clause skipped, naming it."""
    report = await certify(harness_for(GoodBoth))
    skipped = {r.id: r for r in report.skipped}
    for c in CLAUSES:
        if c.capability in LIFECYCLE:
            assert f"agentloop.{LIFECYCLE[c.capability]}" in skipped[c.id].message, c.id
    assert report.failed == ()


class _PagingOnly(GoodBoth):
    """Pages (by borrowing the reference store's paging) but has no labels and no forks."""

    def __init__(self) -> None:
        super().__init__()
        self._lifecycle = lifecycle.Lifecycle()
        self._lifecycle.records = self.records
        self._lifecycle.trace = self.trace
        self._lifecycle.born = {}

    def write(self, session_id: str) -> object:
        record = super().write(session_id)
        self._lifecycle.born.setdefault(session_id, record.seq)
        return record

    async def page_sessions(self, **query: object) -> object:
        return await self._lifecycle.page_sessions(**query)  # type: ignore[arg-type]

    async def session_info(self, session_id: str) -> object:
        return await self._lifecycle.session_info(session_id)


@pytest.mark.anyio
async def test_capabilities_are_detected_one_by_one() -> None:
    """A store that pages but has no labels runs the paging clauses and skips the label ones."""
    report = await certify(harness_for(_PagingOnly), pattern="session.")
    ran = {r.id for r in report.results if r.outcome == "passed"}
    skipped = {r.id for r in report.skipped}
    assert {c.id for c in CLAUSES if c.capability == "page_sessions"} <= ran
    assert {c.id for c in CLAUSES if c.capability in ("set_labels", "fork_session")} <= skipped
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)


@pytest.mark.anyio
async def test_forks_run_on_the_one_object_memory_store_only() -> None:
    """agentloopmem's MemoryStore forks and passes the fork clauses; the stores apart skip them."""
    one = await certify(memory_store_harness(), pattern="session.fork.")
    assert one.failed == (), "\n\n".join(r.message for r in one.failed)
    assert {r.outcome for r in one.results} == {"passed"}
    apart = await certify(memory_harness(), pattern="session.fork.")
    assert {r.outcome for r in apart.results} == {"skipped"}
