"""``step.delete.*``, ``session.delete.*`` (capability ``delete_session``): the optional
``delete_session`` removes one whole session, and only it.

Cancelled deletes are ``step.cancel.delete`` and ``session.cancel.delete``
(``concurrency.py``).
"""

from __future__ import annotations

import json

from agentlooptest._clause import clause, expect
from agentlooptest._data import DONE, describe, expect_data, expect_exists, same_steps, step, steps
from agentlooptest._harness import Harness, open_sessions, open_steps


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
async def _delete_steps(h: Harness) -> None:
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
    "session.delete.removes-all",
    "delete_session removes data and summary, says whether it existed, spares the rest",
    capability="delete_session",
    why=(
        "deleting a session is how users exercise erasure; data or summaries left behind "
        "resurface under a reused id, and deleting the wrong session loses another's state"
    ),
    hint="a cache, or a second table, that delete_session does not clear",
)
async def _delete_session(h: Harness) -> None:
    async with open_sessions(h) as store:
        for sid in ("gone", "gone-not", "Gone"):
            await store.update_data(sid, json.dumps({"owner": sid}))
            await store.finalize(sid, DONE)
        existed = await store.delete_session("gone")
        expect(
            existed is True,
            did="wrote 'gone', then delete_session('gone')",
            expected="True",
            got=existed,
        )
        await expect_exists(store, "gone", False, "deleted 'gone', then exists('gone')")
        await expect_data(store, "gone", None, "deleted 'gone', then get('gone')")
        if hasattr(store, "final"):
            final = await store.final("gone")
            expect(
                final is None, did="deleted 'gone', then final('gone')", expected="None", got=final
            )
        if hasattr(store, "list_sessions"):
            ids = [i.id for i in await store.list_sessions()]
            expect(
                "gone" not in ids,
                did="deleted 'gone', then list_sessions()",
                expected="'gone' not listed",
                got=ids,
            )
        for sid in ("gone-not", "Gone"):
            await expect_data(
                store, sid, json.dumps({"owner": sid}), f"deleted 'gone', then get({sid!r})"
            )
        again = await store.delete_session("gone")
        expect(again is False, did="delete_session('gone') again", expected="False", got=again)
        never = await store.delete_session("never")
        expect(never is False, did="delete_session('never')", expected="False", got=never)
        await expect_exists(store, "never", False, "delete_session('never'), then exists('never')")
