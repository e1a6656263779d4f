"""``step.all.*`` (capability ``all``): the optional ``all`` returns the whole trace."""

from __future__ import annotations

from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, same_steps, step, steps
from agentlooptest._harness import Harness, open_steps


@clause(
    "step.all.insertion-order",
    "all returns the whole trace in insertion order, [] when unknown, never aliased",
    capability="all",
    why=(
        "all is the audit and export view of a run; a reordered, partial or aliased trace "
        "misreports what the agent did"
    ),
)
async def _all(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = [step("s", i, content=f"#{k}") for k, i in enumerate([3, 1, 2, 2, 0, 9])]
        sent += steps("s", 200, start=10)
        await s.append_all(sent)
        await s.append_all(steps("other", 3))
        got = await s.store.all("s")
        expect(
            same_steps(sent, got),
            did="appended 206 steps (indices out of order) to 's' and 3 to 'other', then all('s')",
            expected=describe(sent),
            got=describe(got),
        )
        got.clear()
        again = await s.store.all("s")
        expect(
            same_steps(sent, again),
            did="cleared the list all('s') returned, then called all('s') again",
            expected=describe(sent),
            got=describe(again),
        )
        unknown = await s.store.all("unknown")
        expect(unknown == [], did="all('unknown')", expected="[]", got=unknown)
