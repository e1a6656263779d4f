"""``step.delete.*``: the optional ``delete_session`` removes one session's steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, same_steps, step, steps
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.delete.removes-steps",
    "delete_session removes the session's steps only, and says whether it had any",
    capability="delete_session",
    why=(
        "deleting a session is how users exercise erasure; steps left behind leak into a "
        "reused id, and deleting the wrong session loses someone else's history"
    ),
    hint="a cache, or a second table, that delete_session does not clear",
)
async def _delete(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append_all(steps("gone", 4))
        keep = steps("gone-not", 2) + steps("Gone", 2)
        await s.append_all(keep)
        existed = await s.store.delete_session("gone")
        expect(
            existed is True,
            did="appended to 'gone', then delete_session('gone')",
            expected="True (it existed)",
            got=existed,
        )
        got = await s.last_n("gone", 10)
        expect(
            got == [],
            did="deleted 'gone', then last_n('gone', 10)",
            expected="[]",
            got=describe(got),
        )
        for sid in ("gone-not", "Gone"):
            left = await s.last_n(sid, 10)
            expect(
                same_steps([x for x in keep if x.session_id == sid], left),
                did=f"deleted 'gone', then last_n({sid!r}, 10)",
                expected="that session's 2 steps, untouched",
                got=describe(left),
            )
        again = await s.store.delete_session("gone")
        expect(
            again is False,
            did="delete_session('gone') a second time",
            expected="False (nothing left)",
            got=again,
        )
        never = await s.store.delete_session("never-seen")
        expect(never is False, did="delete_session('never-seen')", expected="False", got=never)
        fresh = step("gone", 0, content="a new life")
        await s.append(fresh)
        got = await s.last_n("gone", 10)
        expect(
            same_steps([fresh], got),
            did="deleted 'gone', appended one step, then last_n",
            expected=describe([fresh]),
            got=describe(got),
        )
