"""``step.no-alias``: what ``last_n`` returns is the caller's, not the store's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, same_steps, step, steps
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.no-alias",
    "mutating a list last_n returned never changes the store",
    why=(
        "the loop edits the history it gets back (rehydrating, trimming); if that list is "
        "the store's own, the edit silently rewrites the stored trace"
    ),
    hint="returning the store's own list (or its objects) instead of a copy",
)
async def _no_alias(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 4)
        await s.append_all(sent)
        first = await s.last_n("s", 4)
        first.reverse()
        first.append(step("s", 99))
        first.pop(0)
        everything = await s.last_n("s", 10)
        everything.clear()
        got = await s.last_n("s", 10)
        expect(
            same_steps(sent, got),
            did="reversed, appended to, popped from and cleared lists returned by last_n, "
            "then called last_n again",
            expected=describe(sent),
            got=describe(got),
        )
        # Unknown sessions too: a shared empty list handed to every caller is store state.
        empty = await s.last_n("unknown-1", 10)
        empty.append(step("unknown-1", 0))
        for sid in ("unknown-1", "unknown-2"):
            got = await s.last_n(sid, 10)
            expect(
                got == [],
                did="appended to the list last_n('unknown-1', 10) returned, "
                f"then last_n({sid!r}, 10)",
                expected="[] (the session has no steps)",
                got=describe(got),
            )
