"""How long a run waits for its lease when the store itself is slow to answer (trio, mock clock)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import agentloopmem
from agentloop import Lease, Loop, LoopConfig, RunStatus, ScriptedModel, StoreError


class SlowAcquire(agentloopmem.SessionStore):
    """``acquire_lease`` answers ``delay`` seconds after it took the lease; shielded, it
    answers even past a deadline."""

    def __init__(self, delay: float, *, shielded: bool) -> None:
        super().__init__()
        self.delay = delay
        self.shielded = shielded

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        lease = await super().acquire_lease(session_id, owner, ttl)
        with trio.CancelScope(shield=self.shielded):
            await trio.sleep(self.delay)
        return lease


async def test_unanswered_acquire_is_bounded_by_lease_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A store that does not answer is given up on at lease_wait: StoreError, nothing written."""
    sessions = SlowAcquire(1000, shielded=False)
    loop = Loop(model=ScriptedModel(["x"]), sessions=sessions, config=LoopConfig(lease_wait=3))
    with pytest.raises(StoreError, match=r"^acquire_lease did not finish within lease_wait \(3"):
        await loop.run("s", "hi")
    assert trio.current_time() == 3
    assert await sessions.final("s") is None


async def test_lease_granted_as_the_bound_passes_still_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A lease the store grants just after the bound passed is used: the run completes."""
    sessions = SlowAcquire(5, shielded=True)
    loop = Loop(model=ScriptedModel(["x"]), sessions=sessions, config=LoopConfig(lease_wait=3))
    result = await loop.run("s", "hi")
    assert result.status is RunStatus.completed
    final = await sessions.final("s")
    assert final is not None
    assert final.status is RunStatus.completed
    assert await sessions.acquire_lease("s", "next", 10) is not None  # released
