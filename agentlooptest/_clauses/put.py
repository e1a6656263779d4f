"""``session.put.*`` (capability ``put``): the optional ``put`` seeds a session's settings and
keeps them."""

from __future__ import annotations

from agentloop import Session
from agentlooptest._clause import clause, expect
from agentlooptest._data import DONE, TEXTS, expect_exists, same_session
from agentlooptest._harness import Harness, open_sessions


@clause(
    "session.put.seeds-get",
    "put seeds what get returns (model, system prompt, data) and makes the session exist",
    capability="put",
    why=(
        "put is how an app configures a session before its first run; a field lost here "
        "runs the agent with the wrong model or without its system prompt"
    ),
)
async def _put(h: Harness) -> None:
    async with open_sessions(h) as store:
        seeded = [
            Session("a", "model-a", "You are terse.\n\n", '{"seed": 1}'),
            Session("b", "", "", None),
            Session("c", "m/ü-🧪", TEXTS[8] + "\n", "null"),
        ]
        for session in seeded:
            await store.put(session)
            got = await store.get(session.id)
            expect(
                same_session(session, got),
                did=f"put({session!r:.120}), then get",
                expected=repr(session),
                got=got,
            )
            await expect_exists(store, session.id, True, f"put({session.id!r}), then exists")
        # Long values: a column sized for the common case (VARCHAR(64), 64 KiB) clips them.
        prompt = "".join(f"Rule {i:07d}: be precise.\n" for i in range(2**20 // 26 + 1))[: 2**20]
        big = Session("big", "provider/" + "m" * 991, prompt, '{"seed": 2}')
        await store.put(big)
        got = await store.get("big")
        expect(
            same_session(big, got),
            did="put(Session('big', <a 1,000-char model>, <a 1 MiB system prompt>)), then get",
            expected="the same model (1,000 chars) and system prompt (1 MiB), exactly",
            got=f"model of {len(got.model)} chars, system prompt of {len(got.system_prompt)} chars"
            if isinstance(got, Session)
            else got,
        )
        replaced = Session("a", "model-b", "Another prompt.", None)
        await store.put(replaced)
        got = await store.get("a")
        expect(
            same_session(replaced, got),
            did="put a second Session for 'a', then get('a')",
            expected=repr(replaced),
            got=got,
        )
        emptied = Session("a", "", "", None)
        await store.put(emptied)
        got = await store.get("a")
        expect(
            same_session(emptied, got),
            did="put(Session('a', 'model-b', 'Another prompt.')), then put(Session('a', '', '', "
            "None)), then get('a')",
            expected=f"{emptied!r}: empty fields are values, put replaces them too",
            got=got,
            hint="put writing COALESCE(NULLIF(new, ''), old): an empty field keeps the old one",
        )


@clause(
    "session.put.update-keeps-settings",
    "update_data and finalize after put keep the model and system prompt",
    capability="put",
    why=(
        "every run writes data and finalizes: a store that rewrites the whole session row "
        "there drops the configured model and system prompt after the first run"
    ),
)
async def _update_keeps(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.put(Session("s", "model-s", "Be precise.", '{"v": 0}'))
        await store.update_data("s", '{"v": 1}')
        await store.finalize("s", DONE)
        want = Session("s", "model-s", "Be precise.", '{"v": 1}')
        got = await store.get("s")
        expect(
            same_session(want, got),
            did="put(Session('s', 'model-s', 'Be precise.', ...)), update_data, finalize, get",
            expected=repr(want),
            got=got,
        )
