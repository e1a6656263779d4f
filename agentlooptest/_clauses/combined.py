"""``session.combined.*`` (capability ``combined``): a store that is both protocols keeps one
session's steps with it."""

from __future__ import annotations

from agentloop import Session
from agentlooptest._clause import clause, expect
from agentlooptest._data import DONE, describe, expect_data, expect_exists, same_steps, step
from agentlooptest._harness import Harness, Steps, open_sessions


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
