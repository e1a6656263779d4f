"""``step.fresh-store``: each ``new_step_store()`` call gives an empty store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import SENTINEL
from agentlooptest._data import describe, step
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.fresh-store",
    "each new_step_store() call gives an empty store, not one sharing another's state",
    why=(
        "the loop and eval suites count on fresh stores starting empty; state shared "
        "between instances leaks one suite's (or tenant's) history into another"
    ),
)
async def _fresh(h: Harness) -> None:
    async with open_steps(h) as first:
        got = await first.last_n(SENTINEL, 10)
        expect(
            got == [],
            did=f"opened a store with new_step_store(), then last_n({SENTINEL!r}, 10)",
            expected="[] (a fresh store is empty)",
            got=describe(got),
        )
        await first.append(step(SENTINEL, 0))
        async with open_steps(h) as second:
            got = await second.last_n(SENTINEL, 10)
            expect(
                got == [],
                did=f"appended to {SENTINEL!r} in one store, opened a second with "
                "new_step_store() and called last_n on it",
                expected="[] (the second store is fresh and empty)",
                got=describe(got),
            )
