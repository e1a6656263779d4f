"""The cancellation machinery: a call is cancelled exactly at the checkpoint asked for."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import anyio
import pytest
import trio
from broken._good import GoodBoth

from agentloop import RunStep
from agentloop._shared import call_ends, call_starts, on_trio
from agentlooptest import Harness, certify
from agentlooptest._cancel import Points, cancel_at


@pytest.mark.anyio
async def test_cancel_lands_on_the_kth_checkpoint() -> None:
    """Point 0 cancels before the call starts; point k lets exactly k checkpoints' work through."""
    for point in range(6):
        progress: list[int] = []

        async def op(progress: list[int] = progress) -> None:
            for k in range(4):
                progress.append(k)
                await anyio.lowlevel.checkpoint()

        done = await cancel_at(op, point)
        if point == 0:
            assert progress == [0]  # the first checkpoint raised
        else:
            assert progress == list(range(min(point, 4)))
        assert done is (point > 4)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_lands_on_each_kind_of_asyncio_suspension() -> None:
    """Under asyncio the k-th suspension is the one cancelled, whatever it waits on.

    A bare yield (``sleep(0)``), a timer future, an event set later and a
    worker thread: the cancellation aborts exactly the wait it lands on. (As
    under trio, a wait that already finished when the cancellation is
    delivered resumes, and the cancellation lands on the next one.)
    """
    waits = ["sleep(0)", "timer", "event", "thread", "sleep(0)"]
    for point in range(len(waits) + 2):
        reached: list[str] = []
        landed: list[str] = []

        async def op(reached: list[str] = reached, landed: list[str] = landed) -> None:
            event, gate = asyncio.Event(), threading.Event()
            loop = asyncio.get_running_loop()
            for wait in waits:
                reached.append(wait)
                try:
                    if wait == "sleep(0)":
                        await asyncio.sleep(0)
                    elif wait == "timer":
                        await asyncio.sleep(0.001)
                    elif wait == "event":  # set two loop turns after this task waits
                        loop.call_soon(loop.call_soon, event.set)
                        await event.wait()
                    else:  # a worker thread, released two loop turns after this task waits
                        loop.call_soon(loop.call_soon, gate.set)
                        await loop.run_in_executor(None, gate.wait)
                except asyncio.CancelledError:
                    landed.append(wait)
                    raise

        done = await cancel_at(op, point)
        assert done is (point > len(waits)), point
        if not done:
            assert len(reached) == max(point, 1), (point, reached)
            assert landed == [reached[-1]], (point, landed)


@pytest.mark.anyio
async def test_a_completed_call_is_never_reported_cancelled() -> None:
    """With the store-call convention, a call cancelled at any point did all its work or none."""
    for point in range(4):
        work: list[int] = []

        async def op(work: list[int] = work) -> None:
            await call_starts()
            work.append(1)
            await call_ends()

        done = await cancel_at(op, point)
        assert done is bool(work), (point, work)
    assert done


async def test_shielded_work_finishes() -> None:
    """A call that shields its last step finishes it even when cancelled there."""
    finished: list[bool] = []

    async def op() -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        finished.append(True)
        await trio.lowlevel.cancel_shielded_checkpoint()

    assert await cancel_at(op, 1) is True
    assert finished == [True]


def test_points_stop_after_two_uncancelled_runs() -> None:
    """Points are tried until the call twice ran to its end, or the limit."""
    points = Points(limit=10)
    seen = []
    for point in points:
        seen.append(point)
        points.finished(point >= 3)
    assert seen == [0, 1, 2, 3, 4]
    assert list(Points(limit=3)) == [0, 1, 2]


class _Hangs:
    async def append(self, step: object) -> None:
        await anyio.sleep_forever()

    async def last_n(self, session_id: str, n: int) -> list[object]:
        return []


async def _new_hanging() -> _Hangs:
    return _Hangs()


@pytest.mark.anyio
async def test_a_hung_store_fails_as_hung() -> None:
    """A call that never returns fails its clause after the clause timeout, saying so."""
    report = await certify(
        Harness(new_step_store=_new_hanging), pattern="step.order.oldest-first", clause_timeout=0.2
    )
    [result] = report.results
    assert result.outcome == "failed"
    assert "the store call _Hangs.append (test_contract_cancel.py:" in result.message
    assert "never returned" in result.message
    assert "`await s.append_all(sent)`, in the clause's check" in result.message


class _HangsOnRead(GoodBoth):
    """last_n never returns (the model-based clause calls it from its worker thread)."""

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def _new_hangs_on_read() -> _HangsOnRead:
    return _HangsOnRead()


@pytest.mark.anyio
async def test_a_store_hung_under_the_model_based_clause_fails_as_hung() -> None:
    """The clause's timeout reaches a store call the machine's worker thread is waiting on.

    Under asyncio the thread's calls would otherwise run inside the shield of
    its ``to_thread`` wait, and the clause would never end.
    """
    with anyio.fail_after(120):  # the test's own bound: without the fix it hangs forever
        report = await certify(
            Harness(new_step_store=_new_hangs_on_read),
            pattern="step.model-based",
            clause_timeout=1.0,
        )
    [result] = report.results
    assert result.outcome == "failed"
    assert "never returned" in result.message, result.message


def _call_soon(fn: Callable[[], object]) -> None:
    """Run ``fn`` on the running event loop once the current task step is over."""
    if on_trio():
        trio.lowlevel.current_trio_token().run_sync_soon(fn)
    else:
        asyncio.get_running_loop().call_soon(fn)


@pytest.mark.anyio
async def test_cancelling_the_model_based_clause_stops_its_machine() -> None:
    """The machine's worker thread stops at its next store call once the clause is cancelled.

    A full run makes hundreds of calls; cancelled just after the 5th returned
    (the thread is then between calls, or in the 6th), only the call in flight
    may follow, and nothing runs after certify() returned.
    """
    calls: list[int] = []
    outer: list[anyio.CancelScope] = []

    class Counts(GoodBoth):
        async def last_n(self, session_id: str, n: int) -> list[RunStep]:
            calls.append(1)
            if len(calls) == 5:  # cancel once this call returned: the thread runs on meanwhile
                _call_soon(outer[0].cancel)
            return await super().last_n(session_id, n)

    async def new() -> Counts:
        return Counts()

    with anyio.CancelScope() as scope:
        outer.append(scope)
        await certify(Harness(new_step_store=new), pattern="step.model-based")
    assert scope.cancelled_caught
    made = len(calls)
    assert made <= 6, made
    await anyio.sleep(0.2)
    assert len(calls) == made
