"""``session.delete.*``: the optional ``delete_session`` removes one whole session."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import DONE, expect_data, expect_exists
from agentlooptest._stores import open_sessions

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
    hint="a cache, or a second table, that delete_session does not clear",
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
