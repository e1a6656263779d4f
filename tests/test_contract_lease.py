"""The lease clauses: real expiry under any clock, and views covering another store's appends."""

from __future__ import annotations

import time

import trio

from agentloop import Lease, RunStep
from agentloopmem import FencedStore, SessionStore, StepStore
from agentlooptest import Harness, certify
from agentlooptest._clauses.lease import real_sleep


async def test_real_sleep_waits_wall_clock_time_under_a_fake_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Leases expire on the store's clock: a jumping trio clock must not cut the wait short."""
    start = time.monotonic()
    await real_sleep(0.1)
    assert time.monotonic() - start >= 0.1


async def _covering() -> SessionStore:
    return SessionStore(steps=StepStore())


async def test_a_view_covering_another_stores_appends_is_checked() -> None:
    """A session store whose fenced view also appends (steps= given) passes; its appends are read
    back through the view, since the session store itself has no last_n."""
    report = await certify(Harness(new_session_store=_covering), pattern="session.fenced.*")
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    assert [r.id for r in report.passed] == [
        "session.fenced.writes",
        "session.fenced.by-token",
        "session.fenced.race",
    ]


class _UnfencedAppends(FencedStore):
    """Fences session writes but appends to its step store unchecked."""

    def __init__(self, sessions: SessionStore, steps: StepStore, lease: Lease) -> None:
        super().__init__(sessions, steps, lease)
        self.covered = steps

    async def append(self, step: RunStep) -> None:
        await self.covered.append(step)


async def _leaky() -> SessionStore:
    steps = StepStore()

    class LeakyAppends(SessionStore):
        def fenced(self, lease: Lease) -> FencedStore:
            return _UnfencedAppends(self, steps, lease)

    return LeakyAppends(steps=steps)


async def test_an_unfenced_append_through_a_covering_view_is_caught() -> None:
    """The old holder's append through a view of another store is refused, or the clause fails."""
    report = await certify(Harness(new_session_store=_leaky), pattern="session.fenced.writes")
    [failed] = report.failed
    assert "append(<step 7 of 'f'>) through a's fenced view" in failed.message


async def test_without_a_clock_hook_the_lease_clock_clauses_skip_saying_why() -> None:
    """A harness with no clock hook (the SQL stores' case) skips the exact-expiry clauses with
    a reason naming the hook, what goes unchecked and what still checks expiry."""
    report = await certify(Harness(new_session_store=_covering), pattern="session.lease-clock.*")
    assert report.skipped
    assert report.failed == ()
    for result in report.skipped:
        assert result.message.startswith("no new_session_store_with_clock in the harness (")
        assert "expiry to the microsecond is not checked" in result.message
        assert "the other lease clauses check it with real waits" in result.message


async def test_the_lease_model_programs_pass_on_agentloopmem() -> None:
    """The lease machine's programs (leases, fenced writes, session calls) match the model on
    the in-memory store."""
    report = await certify(Harness(new_session_store=_covering), pattern="session.lease.model*")
    assert [(r.id, r.outcome) for r in report.results] == [("session.lease.model-based", "passed")]
