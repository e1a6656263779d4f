"""``step.prune.*`` (capability ``prune_steps``): a prune keeps the newest steps whole and the
loop's next index; and ``step.steps-after.*`` (capability ``steps_after``), the other ranged
step capability: ``steps_after`` is ``all()[after:after + limit]``."""

from __future__ import annotations

from functools import partial
from typing import Any

from agentloop import RunStep, SupportsAll, SupportsPrune
from agentlooptest._cancel import Points, cancel_at, still_usable
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._data import describe, indices, mismatch, same_steps, steps
from agentlooptest._harness import Harness, Steps, open_steps

RETENTION = (
    "the loop prunes a completed run's session to keep_steps and replays the rest: a prune "
    "that keeps the wrong steps, changes them or touches another session loses history the "
    "next run needs, and a next index that moves back reuses step indices"
)


async def _trace(s: Steps, sid: str) -> list[RunStep]:
    if isinstance(s.store, SupportsAll):
        got: list[RunStep] = await s.store.all(sid)
        return got
    return await s.last_n(sid, 10_000)


async def _interleaved(s: Steps) -> tuple[list[RunStep], list[RunStep]]:
    mine, other = steps("pr", 10), steps("other", 5)
    for k in range(10):
        await s.append(mine[k])
        if k % 2:
            await s.append(other[k // 2])
    return mine, other


@clause(
    "step.prune.keeps-newest",
    "prune_steps(keep_last=4) removes all but the newest 4 steps, in order, every field "
    "kept, returns how many went, keeps the next index and leaves other sessions alone",
    capability="prune_steps",
    why=RETENTION,
)
async def _keeps_newest(h: Harness) -> None:
    async with open_steps(h) as s:
        mine, other = await _interleaved(s)
        removed = await s.store.prune_steps("pr", keep_last=4)
        did = (
            "appended 10 steps to 'pr' (5 to 'other' between), then prune_steps('pr', keep_last=4)"
        )
        expect(removed == 6, did=did, expected="6 (removed)", got=removed)
        got = await _trace(s, "pr")
        expect(
            same_steps(mine[6:], got),
            did=did + ", then read 'pr'",
            expected=describe(mine[6:]),
            got=mismatch(mine[6:], got),
        )
        last = await s.last_n("pr", 1)
        expect(
            [x.step_index for x in last] == [9],
            did=did + ", then last_n('pr', 1): where the loop's next index follows",
            expected="step_index [9]: the next step is 10",
            got=indices(last),
            hint="a prune that renumbers the steps it keeps",
        )
        kept = await _trace(s, "other")
        expect(
            same_steps(other, kept),
            did=did + ", then read 'other'",
            expected=describe(other),
            got=mismatch(other, kept),
            hint="a DELETE missing its session filter",
        )
        for keep in (4, 100):
            again = await s.store.prune_steps("pr", keep_last=keep)
            expect(
                again == 0,
                did=f"then prune_steps('pr', keep_last={keep}) again",
                expected="0",
                got=again,
            )
        nothing = await s.store.prune_steps("never-written", keep_last=1)
        expect(
            nothing == 0, did="prune_steps('never-written', keep_last=1)", expected="0", got=nothing
        )
        more = steps("pr", 2, start=10)
        await s.append_all(more)
        got = await _trace(s, "pr")
        want = mine[6:] + more
        expect(
            same_steps(want, got),
            did="then appended steps #10 and #11 to 'pr'",
            expected=describe(want),
            got=mismatch(want, got),
        )


_BAD_KEEP: tuple[object, ...] = (0, -1, True, 1.5, "3", None)


@clause(
    "step.prune.bad-input",
    "prune_steps refuses keep_last 0, negative, bool, float, str or None with a TypeError "
    "or ValueError naming keep_last, and removes nothing",
    capability="prune_steps",
    why="keep_last=0 taken at its word empties a session: a bad setting erases history",
    hint="keep_last passed to LIMIT/OFFSET unchecked",
)
async def _bad_input(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("b", 5)
        await s.append_all(sent)
        for keep in _BAD_KEEP:
            did = f"appended 5 steps to 'b', then prune_steps('b', keep_last={keep!r})"
            try:
                got = await s.store.prune_steps("b", keep_last=keep)
            except (TypeError, ValueError) as exc:
                expect(
                    "keep_last" in str(exc),
                    did=did,
                    expected="a message naming keep_last",
                    got=f"{type(exc).__name__}: {exc}",
                )
            except Exception as exc:
                raise Violation(
                    did, "TypeError or ValueError", f"{type(exc).__name__}: {exc}"
                ) from None
            else:
                raise Violation(
                    did, "TypeError or ValueError, nothing removed", f"it returned {got!r}"
                )
            left = await _trace(s, "b")
            expect(
                same_steps(sent, left),
                did=did + ", then read 'b'",
                expected=describe(sent),
                got=mismatch(sent, left),
            )


@clause(
    "step.prune.cancel",
    "prune_steps cancelled at each checkpoint removed all it was asked to or nothing",
    capability="prune_steps",
    why=RETENTION,
    hint="steps deleted one round trip at a time, outside one transaction",
)
async def _cancel(h: Harness) -> None:
    async with open_steps(h) as s:
        points = Points()
        for point in points:
            sid = f"cancel-{point}"
            sent = steps(sid, 8)
            await s.append_all(sent)
            done = await cancel_at(partial(s.store.prune_steps, sid, keep_last=3), point)
            points.finished(done)
            got = await still_usable(f"last_n({sid!r}, 100)", partial(s.last_n, sid, 100))
            pruned = same_steps(sent[5:], got)
            did = f"appended 8 steps, prune_steps({sid!r}, keep_last=3) cancelled after "
            did += f"{point} checkpoint(s)" + (" (the call returned)" if done else "")
            expect(
                pruned if done else pruned or same_steps(sent, got),
                did=did + ", then last_n",
                expected="the newest 3 steps" + ("" if done else ", or all 8"),
                got=describe(got),
            )


async def _after(store: Any, sid: str, after: int, limit: int) -> list[RunStep]:
    got: list[RunStep] = await store.steps_after(sid, after, limit)
    return got


@clause(
    "step.steps-after.ranges",
    "steps_after(id, after, limit) is all()[after:after + limit] for every range, counts "
    "from what the session holds now (after a prune), and refuses after < 0 or limit < 1",
    capability="steps_after",
    why=(
        "export streams a session with steps_after: a range off by one drops or repeats a "
        "step in every chunk of the file"
    ),
    hint="OFFSET computed from a step index instead of a count",
)
async def _ranges(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("r", 7)
        await s.append_all(sent)
        await s.append_all(steps("r2", 3))
        for after in range(9):
            for limit in (1, 2, 3, 7, 100):
                got = await _after(s.store, "r", after, limit)
                want = sent[after : after + limit]
                did = f"appended 7 steps to 'r', then steps_after('r', {after}, {limit})"
                expect(
                    same_steps(want, got), did=did, expected=describe(want), got=mismatch(want, got)
                )
        none = await _after(s.store, "never-written", 0, 5)
        expect(none == [], did="steps_after('never-written', 0, 5)", expected="[]", got=none)
        for after, limit in ((-1, 5), (0, 0)):
            did = f"steps_after('r', {after}, {limit})"
            try:
                got = await _after(s.store, "r", after, limit)
            except (TypeError, ValueError):
                continue
            raise Violation(did, "ValueError", f"it returned {describe(got)}")
        if isinstance(s.store, SupportsPrune):
            await s.store.prune_steps("r", keep_last=3)
            got = await _after(s.store, "r", 1, 5)
            did = "prune_steps('r', keep_last=3), then steps_after('r', 1, 5)"
            expect(
                same_steps(sent[5:], got),
                did=did,
                expected=describe(sent[5:]),
                got=mismatch(sent[5:], got),
            )
