"""Step clauses for the optional capabilities: ``all``, ``delete_session``, durability."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, same_steps, step, steps
from agentlooptest._stores import open_steps, reopened

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


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


@clause(
    "step.delete.removes-steps",
    "delete_session removes the session's steps only, and says whether it had any",
    capability="delete_session",
    why=(
        "deleting a session is how users exercise erasure; steps left behind leak into a "
        "reused id, and deleting the wrong session loses someone else's history"
    ),
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


@clause(
    "step.durable",
    "appended steps are visible, in order, through a second handle (reopen)",
    capability="reopen",
    why=(
        "a system of record must keep every append it acknowledged: a step visible only "
        "to the handle that wrote it is lost on restart or on another worker"
    ),
)
async def _durable(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("d", 12)
        await s.append_all(sent)
        await s.append_all(steps("e", 2))
        async with reopened(h, s.store) as other:
            got = await other.last_n("d", 20)
            expect(
                same_steps(sent, got),
                did="appended 12 steps to 'd' with one handle, then last_n('d', 20) on reopen()",
                expected=describe(sent),
                got=describe(got),
            )
            more = step("d", 12, content="written through the second handle")
            await other.append(more)
        got = await s.last_n("d", 2)
        expect(
            same_steps([sent[-1], more], got),
            did="appended one more step through the reopened handle, then last_n('d', 2) "
            "on the first",
            expected=describe([sent[-1], more]),
            got=describe(got),
        )
