"""Releasing a leased run's lease, however the run ended, when the release hangs or fails.

Under trio the release runs in the run's own cancel scope, shielded and given the
``finalize_timeout`` bound once the run is over. These tests pin what that must not
change: the run's own outcome (result, exception or the caller's cancellation)
always wins over the release's, and the release is bounded and reported.
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from _loop_helpers import SlowModel

import agentloopmem
from agentloop import (
    EventCollector,
    Lease,
    Loop,
    LoopConfig,
    LoopWarning,
    ModelReply,
    ModelRequest,
    RunStatus,
    ScriptedModel,
)

ABANDONED = "release_lease abandoned after 2s (finalize_timeout); the lease expires on its own"


class HangingRelease(agentloopmem.SessionStore):
    async def release_lease(self, lease: Lease) -> None:
        await trio.sleep(math.inf)


class FailingRelease(agentloopmem.SessionStore):
    async def release_lease(self, lease: Lease) -> None:
        await trio.lowlevel.checkpoint()
        raise OSError("gone")


class FailingModel:
    async def complete(self, request: ModelRequest) -> ModelReply:
        raise RuntimeError("model down")


def _loop(model: object, sessions: agentloopmem.SessionStore, events: EventCollector) -> Loop:
    config = LoopConfig(finalize_timeout=2)
    return Loop(model=model, sessions=sessions, config=config, on_event=events)  # type: ignore[arg-type]


def _warnings(events: EventCollector) -> list[str]:
    return [w.message for w in events.of_type(LoopWarning)]


async def test_hanging_release_of_a_cancelled_run_lets_the_cancellation_through(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = EventCollector()
    sessions = HangingRelease()
    with trio.move_on_after(5) as scope:
        await _loop(SlowModel(), sessions, events).run("s", "hi")
    assert scope.cancelled_caught
    assert trio.current_time() == pytest.approx(7)  # the finalize is instant; release bound 2 s
    assert _warnings(events) == [ABANDONED]
    final = await sessions.final("s")
    assert final is not None
    assert final.status is RunStatus.cancelled


async def test_hanging_release_of_a_failed_run_keeps_its_exception(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = EventCollector()
    with pytest.raises(RuntimeError, match=r"^model down$"):
        await _loop(FailingModel(), HangingRelease(), events).run("s", "hi")
    assert trio.current_time() == pytest.approx(2)
    assert _warnings(events) == [ABANDONED]


async def test_run_goes_on_being_cancellable_after_an_abandoned_release(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The caller's scope still works on what comes after a run whose release timed out."""
    events = EventCollector()
    loop = _loop(ScriptedModel(["ok", "again"]), HangingRelease(), events)
    assert (await loop.run("s", "hi")).status is RunStatus.completed
    with trio.move_on_after(1) as scope:
        await trio.sleep(5)
    assert scope.cancelled_caught
    assert _warnings(events) == [ABANDONED]


async def test_failing_release_of_a_cancelled_run_is_a_warning(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = EventCollector()
    with trio.move_on_after(5) as scope:
        await _loop(SlowModel(), FailingRelease(), events).run("s", "hi")
    assert scope.cancelled_caught
    assert _warnings(events) == [
        "release_lease failed; the lease expires on its own: OSError('gone')"
    ]


async def test_release_is_shielded_from_the_callers_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A release that takes 1 s of a cancelled run still completes: the lease is free."""

    class SlowRelease(agentloopmem.SessionStore):
        async def release_lease(self, lease: Lease) -> None:
            await trio.sleep(1)
            await super().release_lease(lease)

    events = EventCollector()
    sessions = SlowRelease()
    with trio.move_on_after(5):
        await _loop(SlowModel(), sessions, events).run("s", "hi")
    assert trio.current_time() == pytest.approx(6)
    assert _warnings(events) == []
    lease = await sessions.acquire_lease("s", "next", 1)
    assert lease is not None
    assert lease.token == 2
