"""``step.order.*``: ``last_n`` keeps insertion order, oldest first, whatever the step says."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import REPLAY
from agentlooptest._data import T0, describe, indices, same_steps, step, steps
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.order.oldest-first",
    "last_n returns its window oldest first",
    why=(
        "the loop replays last_n straight into the model's context: newest-first history "
        "would feed the model its conversation backwards"
    ),
)
async def _oldest_first(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 5)
        await s.append_all(sent)
        got = await s.last_n("s", 5)
        expect(
            same_steps(sent, got),
            did="appended steps 0..4 to session 's', then last_n('s', 5)",
            expected="step_index [0, 1, 2, 3, 4] (oldest first), every field as appended",
            got=indices(got),
        )


@clause(
    "step.order.insertion-not-index",
    "order is insertion order, even with repeated, decreasing and huge step indices",
    why=(
        "step_index is data, not order: a store that sorts by it reorders history whenever "
        "indices repeat or restart, and the model sees events out of sequence"
    ),
    hint="ORDER BY step_index instead of insertion order",
)
async def _not_index(h: Harness) -> None:
    async with open_steps(h) as s:
        wanted = [5, 5, 3, 2**31 - 1, 0, 7, 7, 1, 0]
        sent = [step("s", i, content=f"inserted #{k}") for k, i in enumerate(wanted)]
        await s.append_all(sent)
        got = await s.last_n("s", len(sent))
        expect(
            same_steps(sent, got),
            did=f"appended steps with step_index {wanted} to session 's', then last_n",
            expected=f"{describe(sent)} (insertion order)",
            got=describe(got),
        )
        tail = await s.last_n("s", 4)
        expect(
            same_steps(sent[-4:], tail),
            did="then last_n('s', 4)",
            expected=f"{describe(sent[-4:])} (the last four inserted)",
            got=describe(tail),
        )


@clause(
    "step.order.insertion-not-time",
    "order is insertion order, even when created_at ties or steps backwards",
    why=(
        "clocks tie and step backwards (NTP, several hosts): a store that orders by "
        "created_at reorders history and the model sees events out of sequence"
    ),
    hint="ORDER BY created_at instead of insertion order (a sequence or rowid)",
)
async def _not_time(h: Harness) -> None:
    async with open_steps(h) as s:
        times = [
            T0,
            T0,
            T0 - timedelta(hours=1),
            T0 + timedelta(days=1),
            T0 - timedelta(days=400),
            T0,
        ]
        sent = [step("s", k, created_at=t, content=f"inserted #{k}") for k, t in enumerate(times)]
        await s.append_all(sent)
        got = await s.last_n("s", len(sent))
        expect(
            same_steps(sent, got),
            did="appended 6 steps whose created_at ties and steps backwards, then last_n",
            expected=f"{describe(sent)} (insertion order)",
            got=describe(got),
        )
        tail = await s.last_n("s", 3)
        expect(
            same_steps(sent[-3:], tail),
            did="then last_n('s', 3)",
            expected=f"{describe(sent[-3:])} (the last three inserted)",
            got=describe(tail),
        )
        # A store may take another path for long windows (an ORDER BY only there):
        # 50 steps whose clock runs backwards, ties and jumps, shuffled deterministically.
        offsets = [((k * 37) % 50 - 25) * (-1) ** k // 2 for k in range(50)]
        long = [
            step("long", k, created_at=T0 + timedelta(seconds=o), content=f"inserted #{k}")
            for k, o in enumerate(offsets)
        ]
        await s.append_all(long)
        for n in (50, 20):
            got = await s.last_n("long", n)
            expect(
                same_steps(long[-n:], got),
                did=f"appended 50 steps to 'long' with created_at shuffled (ties, backwards "
                f"jumps), then last_n('long', {n})",
                expected=f"{describe(long[-n:])} (insertion order)",
                got=describe(got),
            )


@clause(
    "step.order.interleaved-sessions",
    "appends interleaved across sessions keep each session's own insertion order",
    why=REPLAY,
)
async def _interleaved(h: Harness) -> None:
    async with open_steps(h) as s:
        a, b = steps("a", 6), steps("b", 6, start=100)
        for x, y in zip(a, b, strict=True):
            await s.append(x)
            await s.append(y)
        for sid, sent in (("a", a), ("b", b)):
            got = await s.last_n(sid, 4)
            expect(
                same_steps(sent[-4:], got),
                did="appended to sessions 'a' and 'b' alternately, then last_n(<session>, 4)",
                expected=f"session {sid!r}: {indices(sent[-4:])}",
                got=describe(got),
            )
