"""``TaskScope``, a cancel scope on asyncio's own protocol (it bounds a leased run's
release under asyncio).

What it must keep: it catches only its own cancellation (a ``Task.cancel()``
or an anyio scope cancelling the task as well still propagates), it leaves the
task's ``cancelling()`` count as it found it, whatever happened inside, and it
delivers as anyio does (again while the task stays inside; not to a task about
to resume with a result). The runs at the end check that a leased run's own
scope (anyio's) still bounds the first ``acquire_lease`` and stops a run whose
lease was lost, leaving the task uncancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
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
from agentloop._asyncio_cancel import TaskScope

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def _task() -> asyncio.Task[object]:
    task = asyncio.current_task()
    assert task is not None
    return task


def _later(fn: Callable[[], object]) -> None:
    """Call ``fn`` from the event loop while the task waits (as the renewal timer does)."""
    asyncio.get_running_loop().call_soon(fn)


async def test_its_own_cancel_is_caught_and_undone() -> None:
    with TaskScope() as scope:
        _later(scope.cancel)
        await asyncio.sleep(10)
    assert scope.cancel_called
    assert scope.cancelled_caught
    assert _task().cancelling() == 0


async def test_a_task_cancel_in_the_same_iteration_propagates() -> None:
    """Both cancel the task before it runs again: the scope must not swallow the other one."""
    task = _task()
    scope = TaskScope()

    def both() -> None:
        scope.cancel()
        task.cancel()

    _later(both)
    with pytest.raises(asyncio.CancelledError), scope:
        await asyncio.sleep(10)
    assert not scope.cancelled_caught
    assert task.cancelling() == 1  # the caller's cancellation is still pending
    task.uncancel()


async def test_an_anyio_scope_cancelling_the_task_too_is_not_lost() -> None:
    """anyio's cancellation is level-triggered: whichever scope the one delivery ends in,
    the outer scope's still lands at its next checkpoint."""
    with anyio.CancelScope() as outer:
        with TaskScope() as scope:

            def both() -> None:
                scope.cancel()
                outer.cancel()

            _later(both)
            await asyncio.sleep(10)
        await asyncio.sleep(10)
    assert outer.cancelled_caught
    assert _task().cancelling() == 0


async def test_an_inner_anyio_scope_catches_only_its_own() -> None:
    with TaskScope() as scope:
        with anyio.move_on_after(0.01) as inner:
            await asyncio.sleep(10)
        _later(scope.cancel)
        await asyncio.sleep(10)
    assert inner.cancelled_caught
    assert scope.cancelled_caught
    assert _task().cancelling() == 0


async def test_a_swallowed_cancel_is_delivered_again_at_the_next_await() -> None:
    """Level-triggered, as anyio's scopes: code inside that swallows the cancellation is
    cancelled again while it stays inside; the count is restored on the way out."""
    swallowed = 0
    with TaskScope() as scope:
        _later(scope.cancel)
        for _ in range(3):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)
                raise AssertionError("not cancelled")
            swallowed += 1
    assert swallowed == 3
    assert scope.cancel_called
    assert not scope.cancelled_caught
    assert _task().cancelling() == 0


async def test_a_result_ready_as_the_cancel_comes_is_taken_first() -> None:
    """The awaited future completed in the same loop pass as ``cancel()``: the task gets
    its result (as anyio would), and the cancellation at its next await."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()
    got: list[str] = []
    with TaskScope() as scope:

        def answer_then_cancel() -> None:
            future.set_result("answer")
            scope.cancel()

        _later(answer_then_cancel)
        got.append(await future)
        await asyncio.sleep(10)
    assert got == ["answer"]
    assert scope.cancelled_caught
    assert _task().cancelling() == 0


async def test_cancel_before_entry_lands_at_the_first_await() -> None:
    scope = TaskScope()
    scope.cancel()
    reached = False
    with scope:
        reached = True
        await asyncio.sleep(10)
    assert reached
    assert scope.cancelled_caught
    assert _task().cancelling() == 0


async def test_cancel_after_leaving_touches_the_task_no_more() -> None:
    with TaskScope() as scope:
        await asyncio.sleep(0)
    scope.cancel()
    assert scope.cancel_called
    assert not scope.cancelled_caught
    assert _task().cancelling() == 0
    await asyncio.sleep(0)  # nothing is delivered here


async def test_others_pending_tells_its_own_cancel_from_the_callers() -> None:
    with TaskScope() as scope:
        scope.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        assert scope.cancelled_alone()
        assert not scope.others_pending()
        _task().cancel()
        assert scope.others_pending()
        assert not scope.cancelled_alone()
        _task().uncancel()
    assert _task().cancelling() == 0


async def test_others_pending_sees_a_cancelled_anyio_scope() -> None:
    with anyio.CancelScope() as outer, TaskScope() as scope:
        assert not scope.others_pending()
        outer.cancel()
        assert scope.others_pending()
        await anyio.sleep(10)
    assert outer.cancelled_caught


async def test_a_scope_is_entered_once() -> None:
    scope = TaskScope()
    with scope:
        pass
    with pytest.raises(RuntimeError, match="entered only once"):
        scope.__enter__()


# -- the loop's two uses ---------------------------------------------------------------------


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
