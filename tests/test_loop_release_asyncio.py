"""Releasing a leased run's lease under asyncio, where an anyio shield does not stop
``Task.cancel()``.

The release runs as a task of its own, bounded by ``finalize_timeout``; the
caller waits for it, and a cancellation of the caller (an anyio scope,
``Task.cancel()``, ``asyncio.timeout``) that arrives meanwhile neither cuts it
short nor is lost: it lands at the caller's next suspension, as trio's shield
leaves it. What must hold, as under trio (``test_loop_release.py``): the run's
own outcome always wins over the release's, the release is bounded and
reported, and a cancelled run still frees its lease.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest
from _loop_helpers import SlowModel

import agentloopmem
from agentloop import (
    Event,
    EventCollector,
    Finalized,
    Lease,
    Loop,
    LoopConfig,
    LoopWarning,
    RunStatus,
    ScriptedModel,
)

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

BOUND = 0.5  # finalize_timeout, seconds
ABANDONED = (
    f"release_lease abandoned after {BOUND}s (finalize_timeout); the lease expires on its own"
)


class HangingRelease(agentloopmem.SessionStore):
    async def release_lease(self, lease: Lease) -> None:
        await asyncio.sleep(3600)


class FailingRelease(agentloopmem.SessionStore):
    async def release_lease(self, lease: Lease) -> None:
        await asyncio.sleep(0)
        raise OSError("gone")


class ReleaseWaits(agentloopmem.SessionStore):
    """Each ``release_lease`` signals ``waiting``, then waits for ``go`` before releasing."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()
        self.go = asyncio.Event()
        self.calls = 0

    async def release_lease(self, lease: Lease) -> None:
        self.calls += 1
        self.waiting.set()
        await self.wait()
        await super().release_lease(lease)

    async def wait(self) -> None:
        await self.go.wait()


class CancelBecomesError(ReleaseWaits):
    """A ``release_lease`` that would turn its cancellation into an ``OSError``, as some
    drivers report a cancelled call ("connection closed")."""

    async def wait(self) -> None:
        try:
            await self.go.wait()
        except asyncio.CancelledError:
            raise OSError("connection closed") from None


def _loop(model: object, sessions: agentloopmem.SessionStore, events: EventCollector) -> Loop:
    config = LoopConfig(finalize_timeout=BOUND)
    return Loop(model=model, sessions=sessions, config=config, on_event=events)  # type: ignore[arg-type]


def _warnings(events: EventCollector) -> list[str]:
    return [w.message for w in events.of_type(LoopWarning)]


def _cancelling() -> int:
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling()


async def _free(sessions: agentloopmem.SessionStore) -> bool:
    return await agentloopmem.SessionStore.acquire_lease(sessions, "s", "next", 10) is not None


def _run_then_wait(loop: Loop, results: list[RunStatus]) -> asyncio.Task[None]:
    """A task that runs ``loop`` on session ``s``, keeps the status, then waits: a
    cancellation re-delivered after the run lands in that wait."""

    async def run_then_wait() -> None:
        results.append((await loop.run("s", "hi")).status)
        await asyncio.sleep(3600)

    return asyncio.get_running_loop().create_task(run_then_wait())


async def _ends_cancelled(task: asyncio.Task[None]) -> None:
    done, _ = await asyncio.wait({task}, timeout=5)  # not cancelled from outside meanwhile
    assert done == {task}
    assert task.cancelled()


async def test_a_hanging_release_of_a_run_cancelled_by_a_scope_lets_it_through() -> None:
    events = EventCollector()
    sessions = HangingRelease()
    with anyio.fail_after(10), anyio.move_on_after(0.05) as scope:
        await _loop(SlowModel(), sessions, events).run("s", "hi")
    assert scope.cancelled_caught
    assert _warnings(events) == [ABANDONED]
    final = await sessions.final("s")
    assert final is not None
    assert final.status is RunStatus.cancelled
    assert _cancelling() == 0


async def test_a_hanging_release_of_a_task_cancelled_run_raises_the_cancellation() -> None:
    events = EventCollector()
    task = asyncio.get_running_loop().create_task(
        _loop(SlowModel(), HangingRelease(), events).run("s", "hi")
    )
    await asyncio.sleep(0.05)
    task.cancel()
    with anyio.fail_after(10), pytest.raises(asyncio.CancelledError):
        await task
    assert _warnings(events) == [ABANDONED]


async def test_a_failing_release_is_a_warning() -> None:
    events = EventCollector()
    result = await _loop(ScriptedModel(["ok"]), FailingRelease(), events).run("s", "hi")
    assert result.status is RunStatus.completed
    assert _warnings(events) == [
        "release_lease failed; the lease expires on its own: OSError('gone')"
    ]


@pytest.mark.parametrize("store", [ReleaseWaits, CancelBecomesError])
async def test_a_release_is_not_cut_by_the_callers_scope(store: type[ReleaseWaits]) -> None:
    """The scope is cancelled while the release waits: the release is not cut short (the
    store never sees that cancellation), the completed run returns its result, and the
    cancellation reaches the scope at the caller's next checkpoint."""
    events = EventCollector()
    sessions = store()
    loop = _loop(ScriptedModel(["ok"]), sessions, events)
    results: list[RunStatus] = []
    with anyio.fail_after(10), anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def cancel_when_waiting() -> None:
                await sessions.waiting.wait()
                scope.cancel()
                sessions.go.set()  # the release goes on after the scope was cancelled

            tg.start_soon(cancel_when_waiting)
            results.append((await loop.run("s", "hi")).status)
            await anyio.sleep(3600)
    assert results == [RunStatus.completed]
    assert scope.cancelled_caught
    assert sessions.calls == 1
    assert await _free(sessions)
    assert _warnings(events) == []
    assert _cancelling() == 0


@pytest.mark.parametrize("store", [ReleaseWaits, CancelBecomesError])
@pytest.mark.parametrize("cancels", [1, 2])
async def test_a_release_is_not_cut_by_task_cancel_which_lands_after_it(
    store: type[ReleaseWaits], cancels: int
) -> None:
    """``Task.cancel()`` (once, or twice) while the release waits: the release finishes and
    frees the lease, the run's result is returned, and the cancellation lands at the
    task's next suspension."""
    events = EventCollector()
    sessions = store()
    loop = _loop(ScriptedModel(["ok"]), sessions, events)
    results: list[RunStatus] = []

    task = _run_then_wait(loop, results)
    with anyio.fail_after(10):
        await sessions.waiting.wait()
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0.01)
    sessions.go.set()
    await _ends_cancelled(task)
    assert results == [RunStatus.completed]
    assert sessions.calls == 1
    assert await _free(sessions)
    assert _warnings(events) == []


class CleanupOnCancel(agentloopmem.SessionStore):
    """``release_lease`` hangs; cancelled, it awaits a long cleanup before re-raising."""

    async def release_lease(self, lease: Lease) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(3600)
            raise


@pytest.mark.parametrize("store", [HangingRelease, CleanupOnCancel])
async def test_a_hanging_release_of_a_completed_run_is_abandoned_at_the_bound(
    store: type[agentloopmem.SessionStore],
) -> None:
    """Also when the release waits after its cancellation: the bound is delivered again
    while the release stays in its scope (as anyio's)."""
    events = EventCollector()
    start = anyio.current_time()
    with anyio.fail_after(10):
        result = await _loop(ScriptedModel(["ok"]), store(), events).run("s", "hi")
    assert result.status is RunStatus.completed
    assert BOUND <= anyio.current_time() - start < BOUND + 1
    assert _warnings(events) == [ABANDONED]
    assert _cancelling() == 0


class ModelFails:
    async def complete(self, request: object) -> object:
        raise RuntimeError("model failed")


async def test_a_scope_and_a_timeout_during_the_release_leave_the_runs_own_error() -> None:
    """The caller's scope and an ``asyncio.timeout`` both expire while the release waits:
    the run's own exception propagates (not the timeout's), and the release finished."""
    events = EventCollector()
    sessions = ReleaseWaits()
    loop = _loop(ModelFails(), sessions, events)

    async def run() -> None:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                async with asyncio.timeout(None) as timeout:

                    async def cut_when_waiting() -> None:
                        await sessions.waiting.wait()
                        scope.cancel()
                        timeout.reschedule(asyncio.get_running_loop().time())
                        sessions.go.set()

                    tg.start_soon(cut_when_waiting)
                    await loop.run("s", "hi")

    with anyio.fail_after(10), pytest.raises(ExceptionGroup) as raised:
        await run()
    assert raised.group_contains(RuntimeError, match="model failed")
    assert not raised.group_contains(TimeoutError)
    assert sessions.calls == 1
    assert await _free(sessions)
    assert _warnings(events) == []
    assert _cancelling() == 0


class CancelOnFinalized(EventCollector):
    """Collects events, and cancels the run's own task as it reports ``Finalized``: a
    ``Task.cancel()`` made before the release, delivered inside it."""

    def __call__(self, event: Event) -> None:
        super().__call__(event)
        if isinstance(event, Finalized):
            task = asyncio.current_task()
            assert task is not None
            task.cancel()


async def test_a_cancel_pending_as_the_release_starts_lands_after_it() -> None:
    """A ``Task.cancel()`` made before the release (by ``on_event``) never reaches the
    store's release, which finishes; the cancellation lands after the run's result."""
    events = CancelOnFinalized()
    sessions = CancelBecomesError()
    sessions.go.set()
    loop = _loop(ScriptedModel(["ok"]), sessions, events)
    results: list[RunStatus] = []

    task = _run_then_wait(loop, results)
    await _ends_cancelled(task)
    assert results == [RunStatus.completed]
    assert sessions.calls == 1
    assert await _free(sessions)
    assert _warnings(events) == []
