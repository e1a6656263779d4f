"""Session clauses on a session's life: deletion, durability, one object for both protocols."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agentloop import FinalizeSummary, RunStatus, Session
from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, same_steps, step
from agentlooptest._sessions_caps import same_session
from agentlooptest._sessions_core import DONE, expect_data, expect_exists
from agentlooptest._stores import Steps, open_sessions, reopened

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.delete.removes-all",
    "delete_session removes data and summary, says whether it existed, spares the rest",
    capability="delete_session",
    why=(
        "deleting a session is how users exercise erasure; data or summaries left behind "
        "resurface under a reused id, and deleting the wrong session loses another's state"
    ),
)
async def _delete(h: Harness) -> None:
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


@clause(
    "session.durable",
    "data, settings and summaries are visible through a second handle (reopen)",
    capability="reopen",
    why=(
        "a system of record must keep every write it acknowledged: working memory visible "
        "only to the handle that wrote it is lost on restart or on another worker"
    ),
)
async def _durable(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("d", '{"memory": [1, 2]}')
        summary = FinalizeSummary(RunStatus.max_iterations, 1, 2, 3, 4, 5)
        await store.finalize("d", summary)
        if hasattr(store, "put"):
            await store.put(Session("p", "model-p", "prompt-p", '{"p": 1}'))
        async with reopened(h, store) as other:
            await expect_data(
                other,
                "d",
                '{"memory": [1, 2]}',
                "wrote 'd' with one handle, then get('d') on reopen()",
            )
            await expect_exists(other, "d", True, "then exists('d') on the reopened handle")
            if hasattr(other, "final"):
                got = await other.final("d")
                expect(
                    got == summary,
                    did="then final('d') on the reopened handle",
                    expected=repr(summary),
                    got=got,
                )
            if hasattr(store, "put"):
                got_p = await other.get("p")
                want = Session("p", "model-p", "prompt-p", '{"p": 1}')
                expect(
                    same_session(want, got_p),
                    did="put('p') on one handle, get('p') on the other",
                    expected=repr(want),
                    got=got_p,
                )
            await other.update_data("d", '{"memory": [3]}')
        await expect_data(
            store,
            "d",
            '{"memory": [3]}',
            "update_data('d') through the reopened handle, then get('d') on the first",
        )


@clause(
    "session.combined.one-session",
    "on a store that is both protocols, session writes keep steps and delete removes all",
    capability="combined",
    why=(
        "with one object for both, a session write that clears its steps (a cascading "
        "row replace) erases the history the next run replays, and a delete that leaves "
        "steps resurrects them under a reused id"
    ),
)
async def _combined(h: Harness) -> None:
    async with open_sessions(h) as store:
        steps = Steps(h, store)
        sent = [step("both", k) for k in range(4)]
        await steps.append_all(sent[:2])
        await store.update_data("both", '{"d": 1}')
        await steps.append_all(sent[2:])
        await store.finalize("both", DONE)
        if hasattr(store, "put"):
            await store.put(Session("both", "m", "p", '{"d": 1}'))
        got = await steps.last_n("both", 10)
        expect(
            same_steps(sent, got),
            did="appended steps to 'both' around update_data, finalize and put, then last_n",
            expected=describe(sent),
            got=describe(got),
        )
        await expect_data(store, "both", '{"d": 1}', "then get('both')")
        await steps.append(step("other", 0))
        if not hasattr(store, "delete_session"):
            return
        existed = await store.delete_session("both")
        expect(existed is True, did="delete_session('both')", expected="True", got=existed)
        left = await steps.last_n("both", 10)
        expect(
            left == [],
            did="deleted 'both', then last_n('both', 10)",
            expected="[]",
            got=describe(left),
        )
        await expect_exists(store, "both", False, "deleted 'both', then exists('both')")
        other = await steps.last_n("other", 10)
        expect(
            len(other) == 1,
            did="deleted 'both', then last_n('other', 10)",
            expected="the other session's step, untouched",
            got=describe(other),
        )
