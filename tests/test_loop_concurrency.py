"""Runs of one session serialize (in arrival order); different sessions run concurrently;
locks are not leaked."""

from __future__ import annotations

import anyio
import pytest
import trio
import trio.testing
from _loop_helpers import SlowModel

from agentloop import Loop, ModelReply, ModelRequest, RunStatus, StepType


class TrackingModel:
    """Sleeps ``delay`` per call and records how many calls overlap, per session."""

    def __init__(self, delay: float = 1.0) -> None:
        self.delay = delay
        self.active: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.peak_total = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        last = request.messages[-1].content
        sid = last.split(":")[0]
        self.active[sid] = self.active.get(sid, 0) + 1
        self.peak[sid] = max(self.peak.get(sid, 0), self.active[sid])
        self.peak_total = max(self.peak_total, sum(self.active.values()))
        try:
            await trio.sleep(self.delay)
        finally:
            self.active[sid] -= 1
        return ModelReply(content=f"echo {last}")


class TestConcurrency:
    async def test_two_runs_of_one_session_serialize(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Two concurrent runs of one session never overlap and their steps do not interleave."""
        model = TrackingModel()
        loop = Loop(model=model)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run, "s", "s:first")
            nursery.start_soon(loop.run, "s", "s:second")
        assert model.peak["s"] == 1
        steps = await loop.steps.all("s")  # type: ignore[attr-defined]
        kinds = [s.step_type for s in steps]
        assert kinds == [StepType.user, StepType.response] * 2
        assert steps[1].content == f"echo {steps[0].content}"
        assert steps[3].content == f"echo {steps[2].content}"
        assert [s.step_index for s in steps] == [0, 1, 2, 3]

    async def test_different_sessions_run_concurrently(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Two sessions' runs overlap: both finish in the time of one."""
        model = TrackingModel(delay=1.0)
        loop = Loop(model=model)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run, "a", "a:x")
            nursery.start_soon(loop.run, "b", "b:x")
        assert trio.current_time() - start == 1.0
        assert model.peak_total == 2

    async def test_fifty_sessions_complete_independently(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """50 concurrent sessions each get exactly their own two steps and a completed finalize."""
        model = TrackingModel(delay=0.5)
        loop = Loop(model=model)
        ids = [f"session-{i}" for i in range(50)]
        results = {}

        async def one(sid: str) -> None:
            results[sid] = await loop.run(sid, f"{sid}:hello")

        async with trio.open_nursery() as nursery:
            for sid in ids:
                nursery.start_soon(one, sid)
        assert model.peak_total == 50
        for sid in ids:
            assert results[sid].status is RunStatus.completed
            assert results[sid].text == f"echo {sid}:hello"
            steps = await loop.steps.all(sid)  # type: ignore[attr-defined]
            assert [(s.step_index, s.content) for s in steps] == [
                (0, f"{sid}:hello"),
                (1, f"echo {sid}:hello"),
            ]
            final = await loop.sessions.final(sid)  # type: ignore[attr-defined]
            assert (final.status, final.step_count) == (RunStatus.completed, 2)

    async def test_session_locks_are_dropped_when_unused(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """After runs end, the loop holds no per-session lock (even after a failed run)."""
        loop = Loop(model=TrackingModel(delay=0.1))
        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(loop.run, f"s{i % 3}", f"s{i % 3}:m{i}")
        with trio.move_on_after(0.05):
            await loop.run("cancelled", "cancelled:x")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run, "busy", "busy:first")
            await trio.sleep(0.01)
            with trio.move_on_after(0.02):
                await loop.run("busy", "busy:never starts")  # cancelled while waiting
        assert loop._turns == {}
        steps = await loop.steps.all("busy")  # type: ignore[attr-defined]
        assert [s.content for s in steps] == ["busy:first", "echo busy:first"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio", "asyncio"])
class TestSessionTurns:
    """The per-session lock: a FIFO queue of waiting runs, on both backends."""

    async def test_waiting_runs_go_in_arrival_order(self) -> None:
        """Runs that queue for one session run in the order they arrived."""
        loop = Loop(model=SlowModel(0.01))
        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(loop.run, "s", f"m{n}")
                await anyio.sleep(0.002)  # each run queues before the next starts
        steps = await loop.steps.all("s")  # type: ignore[attr-defined]
        assert [s.content for s in steps if s.step_type is StepType.user] == [
            f"m{n}" for n in range(5)
        ]
        assert loop._turns == {}

    async def test_a_cancelled_waiter_leaves_the_queue(self) -> None:
        """A run cancelled while it waits is dropped from the queue; the next one still runs."""
        loop = Loop(model=SlowModel(0.05))
        scopes: list[anyio.CancelScope] = []

        async def waiter() -> None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                await loop.run("s", "never")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(loop.run, "s", "first")
                await anyio.sleep(0.01)
                tg.start_soon(waiter)
                await anyio.sleep(0.01)
                tg.start_soon(loop.run, "s", "last")  # queued behind the one cancelled next
                await anyio.sleep(0.01)
                scopes[0].cancel()
        steps = await loop.steps.all("s")  # type: ignore[attr-defined]
        assert [s.content for s in steps if s.step_type is StepType.user] == ["first", "last"]
        assert loop._turns == {}
