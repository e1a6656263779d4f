"""The cancellation machinery: a call is cancelled exactly at the checkpoint asked for."""

from __future__ import annotations

import trio

from agentlooptest import Harness, certify
from agentlooptest._cancel import Points, cancel_at


async def test_cancel_lands_on_the_kth_checkpoint() -> None:
    """Point 0 cancels before the call starts; point k lets exactly k checkpoints' work through."""
    for point in range(6):
        progress: list[int] = []

        async def op(progress: list[int] = progress) -> None:
            for k in range(4):
                progress.append(k)
                await trio.lowlevel.checkpoint()

        done = await cancel_at(op, point)
        if point == 0:
            assert progress == [0]  # the first checkpoint raised
        else:
            assert progress == list(range(min(point, 4)))
        assert done is (point > 4)


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
        await trio.sleep_forever()

    async def last_n(self, session_id: str, n: int) -> list[object]:
        return []


async def _new_hanging() -> _Hangs:
    return _Hangs()


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
