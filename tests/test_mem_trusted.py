"""agentloopmem builds the leases and sessions it grants without re-validating them.

A store-built value must equal the one the validating constructor makes, and the
fenced write's fast path (the presented lease is the latest grant) must still send
every other lease through the full check.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from agentloop import Lease, LeaseLostError, RunStep, Session, StepType
from agentloopmem import FencedStore
from agentloopmem import SessionStore as MemSessions
from agentloopmem import StepStore as MemSteps

PARIS = timezone(timedelta(hours=1))


def _clock() -> datetime:
    return datetime(2026, 1, 1, 13, 0, tzinfo=PARIS)  # not UTC: the store converts


async def test_granted_and_renewed_leases_equal_validated_ones() -> None:
    store = MemSessions(clock=_clock)
    lease = await store.acquire_lease("s", "me", 30)
    assert lease is not None
    expected = Lease("s", "me", 1, datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    assert lease == expected
    assert lease.expires_at.tzinfo is UTC
    renewed = await store.renew_lease(lease, 60)
    assert renewed == Lease("s", "me", 1, datetime(2026, 1, 1, 12, 1, tzinfo=UTC))
    assert type(renewed) is Lease
    assert renewed.expires_at.tzinfo is UTC


async def test_unknown_session_is_a_validated_session() -> None:
    store = MemSessions()
    assert await store.get("new") == Session(id="new")
    await store.update_data("other", '{"a": 1}')
    assert (await store.get("other")).id == "other"


async def test_fenced_append_with_latest_token_of_another_owner_is_refused() -> None:
    steps = MemSteps()
    sessions = MemSessions(steps=steps)
    lease = await sessions.acquire_lease("s", "me", 30)
    assert lease is not None
    forged = Lease("s", "someone else", lease.token, lease.expires_at)
    view = FencedStore(sessions, steps, forged)
    with pytest.raises(ValueError, match="one this store granted"):
        await view.append(RunStep("s", 0, StepType.user, "hi"))
    assert await steps.all("s") == []


async def test_fenced_append_after_takeover_is_refused() -> None:
    steps = MemSteps()
    sessions = MemSessions(steps=steps)
    lease = await sessions.acquire_lease("s", "me", 30)
    assert lease is not None
    view = sessions.fenced(lease)
    assert isinstance(view, FencedStore)
    await view.append(RunStep("s", 0, StepType.user, "hi"))
    await sessions.release_lease(lease)
    assert await sessions.acquire_lease("s", "other", 30) is not None
    with pytest.raises(LeaseLostError):
        await view.append(RunStep("s", 1, StepType.user, "again"))
    assert len(await steps.all("s")) == 1
