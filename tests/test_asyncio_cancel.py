"""Leased runs under asyncio: the bound of the first ``acquire_lease`` and a lost lease
leave the run's task uncancelled (its ``cancelling()`` count as it was), so a later
``asyncio.timeout`` in that task still works."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import anyio
import pytest

import agentloopmem
from agentloop import (
    Lease,
    LeaseLostError,
    Loop,
    LoopConfig,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    StoreError,
)

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def _task() -> asyncio.Task[object]:
    task = asyncio.current_task()
    assert task is not None
    return task


class _HangingAcquire(agentloopmem.SessionStore):
    """``acquire_lease`` never answers."""

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


class _SwallowingAcquire(agentloopmem.SessionStore):
    """The first ``acquire_lease`` takes the lease, then waits past the bound and swallows
    its cancellation."""

    swallowed = 0

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        lease = await super().acquire_lease(session_id, owner, ttl)
        if not self.swallowed:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.swallowed += 1
        return lease


async def test_an_unanswered_acquire_is_bounded_and_leaves_the_task_uncancelled() -> None:
    loop = Loop(
        model=ScriptedModel(["x"]), sessions=_HangingAcquire(), config=LoopConfig(lease_wait=0.01)
    )
    with anyio.fail_after(10):
        with pytest.raises(StoreError, match=r"^acquire_lease did not finish within lease_wait"):
            await loop.run("s", "hi")
    assert _task().cancelling() == 0


async def test_a_lease_granted_past_the_bound_is_used() -> None:
    """The store swallowed the bound's cancellation and answered: the run goes on with it."""
    sessions = _SwallowingAcquire()
    loop = Loop(model=ScriptedModel(["x"]), sessions=sessions, config=LoopConfig(lease_wait=0.01))
    with anyio.fail_after(10):
        result = await loop.run("s", "hi")
    assert (result.text, sessions.swallowed) == ("x", 1)
    assert _task().cancelling() == 0
    assert await sessions.acquire_lease("s", "next", 10) is not None  # released


async def test_a_lost_lease_ends_the_run_and_leaves_the_task_uncancelled() -> None:
    """A renew finds the lease taken over: LeaseLostError, and the run's task is not left
    counted as cancelling (a later ``asyncio.timeout`` in it still works)."""
    offset = [0.0]
    steps = agentloopmem.StepStore()
    sessions = agentloopmem.SessionStore(
        lambda: BASE + timedelta(seconds=anyio.current_time() + offset[0]), steps=steps
    )
    called = asyncio.Event()

    class Gate:
        async def complete(self, request: ModelRequest) -> ModelReply:
            called.set()
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

    config = LoopConfig(lease_ttl=0.06)
    loop = Loop(model=Gate(), steps=steps, sessions=sessions, config=config)
    after: list[int] = []

    async def run() -> None:
        with pytest.raises(LeaseLostError):
            await loop.run("s", "hi")
        after.append(_task().cancelling())
        async with asyncio.timeout(0.01):  # works only in a task not left cancelling
            await asyncio.sleep(0)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await called.wait()
            offset[0] += 60  # the run's lease expired
            assert await sessions.acquire_lease("s", "intruder", 60) is not None
    assert after == [0]
