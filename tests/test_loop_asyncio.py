"""Under asyncio only: cancellation sources anyio does not own, and what leased runs leave behind.

``Task.cancel()`` and ``asyncio.timeout`` cancel a run from outside any anyio
scope; each must still record the run (``finalize(cancelled)``, shielded and
bounded) and release its lease. Anyio cancel scopes are covered on both
backends in ``test_loop_backends.py``.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import anyio
import pytest
from _loop_helpers import SlowFinalize, SlowModel

import agentloopmem
from agentloop import (
    Lease,
    Loop,
    LoopConfig,
    ModelReply,
    ModelRequest,
    RunStatus,
    ScriptedModel,
    Session,
    StepType,
)

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


class _Gate:
    """A model whose first call signals, then waits until cancelled; later calls answer "ok"."""

    def __init__(self) -> None:
        self.called = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelReply:
        if self.called.is_set():
            return ModelReply(content="ok")
        self.called.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def _final(loop: Loop, session_id: str = "s") -> tuple[RunStatus, int]:
    final = await loop.sessions.final(session_id)  # type: ignore[attr-defined]
    return final.status, final.step_count


async def _released(loop: Loop, session_id: str = "s") -> bool:
    sessions: agentloopmem.SessionStore = loop.sessions  # type: ignore[assignment]
    return await sessions.acquire_lease(session_id, "next", 10) is not None


async def test_task_cancel_records_cancelled_and_releases() -> None:
    """``Task.cancel()`` mid-run: finalize(cancelled), lease released, CancelledError raised."""
    model = _Gate()
    loop = Loop(model=model)
    task = asyncio.create_task(loop.run("s", "hi"))
    await model.called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _final(loop) == (RunStatus.cancelled, 1)
    assert await _released(loop)


async def test_asyncio_timeout_records_cancelled_and_releases() -> None:
    """An expiring ``asyncio.timeout`` around a run: finalize(cancelled), then TimeoutError."""
    loop = Loop(model=SlowModel())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await loop.run("s", "hi")
    assert await _final(loop) == (RunStatus.cancelled, 1)
    assert await _released(loop)


async def test_second_task_cancel_waits_for_the_finalize() -> None:
    """A second ``Task.cancel()`` during the cancelled run's finalize does not cut it short."""
    model = _Gate()
    sessions = SlowFinalize(delay=0.05)
    loop = Loop(model=model, sessions=sessions)
    task = asyncio.create_task(loop.run("s", "hi"))
    await model.called.wait()
    task.cancel()
    for _ in range(5):  # the run reaches its finalize, which sleeps 50 ms
        await asyncio.sleep(0)
    assert sessions.finalize_calls == 1
    task.cancel()  # the finalize is sleeping now
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _final(loop) == (RunStatus.cancelled, 1)


async def test_task_cancel_while_waiting_for_the_session_lock() -> None:
    """A run cancelled while another run of its session holds the lock records nothing."""
    model = _Gate()
    loop = Loop(model=model)
    first = asyncio.create_task(loop.run("s", "first"))
    await model.called.wait()
    second = asyncio.create_task(loop.run("s", "second"))
    for _ in range(5):
        await asyncio.sleep(0)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    steps = await loop.steps.last_n("s", 10)
    assert [step.content for step in steps] == ["first"]
    result = await loop.run("s", "third")  # the lock was let go
    assert result.status is RunStatus.completed


async def test_cancel_before_the_run_starts_records_nothing() -> None:
    """A ``Task.cancel()`` made before the run starts lands before the lock: nothing written."""
    loop = Loop(model=ScriptedModel(["never"]))

    async def run() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await loop.run("s", "hi")

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(run())
    assert await loop.steps.last_n("s", 5) == []
    assert await loop.sessions.final("s") is None  # type: ignore[attr-defined]


async def test_renewals_leave_no_task_or_timer_behind() -> None:
    """Leased runs leave no renewal task running once they end."""
    config = LoopConfig(lease_ttl=0.03)  # renewed every 10 ms
    loop = Loop(model=SlowModel(0.05), config=config)
    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(loop.run, f"s{n}", "hi")
    for _ in range(5):  # let a renewal that started last finish
        await asyncio.sleep(0.01)
    assert [task for task in asyncio.all_tasks() if task.get_name().startswith("agentloop")] == []
    assert [step.step_type for step in await loop.steps.last_n("s0", 5)] == [
        StepType.user,
        StepType.response,
    ]


async def test_finished_loops_are_not_kept_alive_by_renewals() -> None:
    """Leased runs on many ``asyncio.run`` loops in turn keep none of those loops alive."""
    loop = Loop(model=ScriptedModel(["ok"] * 10))
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def run(n: int) -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        await loop.run(f"s{n}", "hi")

    def runs() -> None:  # loops of their own, in a thread: this test's loop is running
        for n in range(5):
            asyncio.run(run(n))

    await anyio.to_thread.run_sync(runs)
    gc.collect()
    assert [ref() for ref in loops] == [None] * 5


class _CountingRenewals(agentloopmem.SessionStore):
    """Counts each session's renewals."""

    def __init__(self) -> None:
        super().__init__()
        self.renewed: dict[str, int] = {}

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        self.renewed[lease.session_id] = self.renewed.get(lease.session_id, 0) + 1
        return await super().renew_lease(lease, ttl)


async def test_a_run_due_sooner_is_renewed_on_time_while_a_later_one_is_armed() -> None:
    """Two runs with different TTLs, started at different times, are each renewed on
    their own schedule."""
    sessions = _CountingRenewals()
    slow = Loop(model=SlowModel(0.5), sessions=sessions, config=LoopConfig(lease_ttl=0.9))
    quick = Loop(model=SlowModel(0.25), sessions=sessions, config=LoopConfig(lease_ttl=0.06))
    async with anyio.create_task_group() as tg:
        tg.start_soon(slow.run, "long", "hi")
        await asyncio.sleep(0.05)  # the long run's renewal (due at 0.3 s) is armed
        tg.start_soon(quick.run, "short", "hi")
    assert sessions.renewed.get("short", 0) >= 5  # every 20 ms for 250 ms: about 12
    assert sessions.renewed.get("long", 0) == 1  # at 0.3 s, during its 0.5 s


class _NoCheckpointSessions:
    """A session store (no leases) whose calls never suspend: they cannot deliver a cancel."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def get(self, session_id: str) -> Session:
        self.calls.append("get")
        return Session(id=session_id)

    async def exists(self, session_id: str) -> bool:
        return False

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        self.calls.append("update_data")

    async def finalize(self, session_id: str, summary: object) -> None:
        self.calls.append("finalize")


@pytest.mark.parametrize("source", ["anyio scope", "Task.cancel"])
async def test_cancel_pending_before_the_lock_lands_there_whatever_the_stores(source: str) -> None:
    """A cancellation pending when ``run`` starts lands before the lock, even when the
    store calls cannot deliver it: the store is never called."""
    sessions = _NoCheckpointSessions()
    loop = Loop(model=ScriptedModel(["never"]), sessions=sessions)

    async def run() -> None:
        with anyio.CancelScope() as scope:
            if source == "anyio scope":
                scope.cancel()
            else:
                asyncio.current_task().cancel()  # type: ignore[union-attr]
            await loop.run("s", "hi")
        assert source == "anyio scope"
        assert scope.cancelled_caught

    task = asyncio.create_task(run())
    if source == "anyio scope":
        await task
    else:
        with pytest.raises(asyncio.CancelledError):
            await task
    assert sessions.calls == []
    assert await loop.steps.last_n("s", 5) == []


async def test_scripted_model_complete_is_a_checkpoint_under_asyncio() -> None:
    """A cancelled ``complete`` consumes no reply; an uncancelled one yields to the loop."""
    model = ScriptedModel(["a"])
    request = ModelRequest("", "", (), (), None)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await model.complete(request)
    assert scope.cancelled_caught
    assert model.remaining == 1
    other_ran = False

    async def other() -> None:
        nonlocal other_ran
        other_ran = True

    task = asyncio.create_task(other())
    assert (await model.complete(request)).content == "a"
    assert other_ran
    await task


async def test_a_waiter_cancelled_as_its_turn_comes_passes_the_turn_on() -> None:
    """``Task.cancel()`` lands on a waiting run just after the session's turn was handed to
    it (before it ran again): it passes the turn on, so the run queued behind it runs."""
    loop = Loop(model=SlowModel(0.02))
    tasks: list[asyncio.Task[object]] = []

    async def first() -> None:
        await loop.run("s", "first")
        tasks[0].cancel()  # the turn was just handed to it; it has not run since

    async with asyncio.timeout(5):
        holder = asyncio.create_task(first())
        await asyncio.sleep(0.005)
        tasks.append(asyncio.create_task(loop.run("s", "cancelled")))
        await asyncio.sleep(0.005)
        last = asyncio.create_task(loop.run("s", "last"))
        await holder
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]
        await last
    steps = await loop.steps.all("s")  # type: ignore[attr-defined]
    assert [s.content for s in steps if s.step_type is StepType.user] == ["first", "last"]
    assert loop._turns == {}
