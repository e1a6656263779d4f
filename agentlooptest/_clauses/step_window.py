"""``step.window.*``: ``last_n`` returns exactly the newest ``n`` steps, at every size."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import REPLAY
from agentlooptest._data import indices, same_steps, steps
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.window.newest-n",
    "last_n returns the most recent n steps, not the first n",
    why=(
        "the loop asks for the newest history_window steps; the oldest n would replay the "
        "start of the conversation and drop everything the model said since"
    ),
    hint="LIMIT n in ascending order: the oldest n, not the newest",
)
async def _newest_n(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 10)
        await s.append_all(sent)
        got = await s.last_n("s", 3)
        expect(
            same_steps(sent[-3:], got),
            did="appended steps 0..9 to session 's', then last_n('s', 3)",
            expected="step_index [7, 8, 9]",
            got=indices(got),
        )


@clause(
    "step.window.sizes",
    "last_n with n = 1, n = count and n > count",
    why=REPLAY,
)
async def _sizes(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 7)
        await s.append_all(sent)
        for n, want in ((1, sent[-1:]), (7, sent), (8, sent), (1000, sent), (2**31 - 1, sent)):
            got = await s.last_n("s", n)
            expect(
                same_steps(want, got),
                did=f"appended steps 0..6 to session 's', then last_n('s', {n})",
                expected=f"{indices(want)} (n > count returns every step, n = 1 the newest)",
                got=indices(got),
            )


@clause(
    "step.window.long-history",
    "after 5,000 appends, last_n returns exactly the newest n",
    why=(
        "long sessions are the normal case; a window that drifts, truncates or duplicates "
        "after thousands of steps corrupts exactly the conversations that matter most"
    ),
)
async def _long_history(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("long", 5000)
        await s.append_all(sent)
        for n in (1, 80, 4999, 5000, 5001):
            got = await s.last_n("long", n)
            want = sent[-n:]
            expect(
                same_steps(want, got),
                did=f"appended steps 0..4999 to session 'long', then last_n('long', {n})",
                expected=indices(want),
                got=indices(got),
            )
