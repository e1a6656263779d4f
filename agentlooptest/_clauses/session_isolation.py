"""``session.isolation``: one session's data, summary and existence never leak into another."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import (
    DONE,
    LONG_HINT,
    LONG_IDS,
    expect_data,
    expect_exists,
    short_id,
)
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.isolation",
    "data, summaries and existence of one session never leak into another, prefixes included",
    why="sessions are separate users: a leak hands one user's working memory to another",
)
async def _isolation(h: Harness) -> None:
    async with open_sessions(h) as store:
        ids = ("a", "ab", "a/b", "A", "a.", "conversation-1", "conversation-2")
        for k, sid in enumerate(ids):
            await store.update_data(sid, json.dumps({"owner": sid, "k": k}))
        await store.finalize("a", DONE)
        for k, sid in enumerate(ids):
            want = json.dumps({"owner": sid, "k": k})
            await expect_data(
                store, sid, want, f"wrote distinct data to {list(ids)}, then get({sid!r})"
            )
        await expect_exists(
            store, "b", False, "wrote to 'a', 'ab', ... but not 'b', then exists('b')"
        )
        if hasattr(store, "final"):
            for sid in ids:
                final = await store.final(sid)
                want_final = DONE if sid == "a" else None
                expect(
                    final == want_final,
                    did=f"finalized only 'a' among {list(ids)}, then final({sid!r})",
                    expected=repr(want_final),
                    got=final,
                )
        for k, sid in enumerate(LONG_IDS):
            await store.update_data(sid, json.dumps({"long": k}))
        for k, sid in enumerate(LONG_IDS):
            await expect_data(
                store,
                sid,
                json.dumps({"long": k}),
                f"wrote distinct data to {len(LONG_IDS)} sessions with ids of 301 to 1,024 bytes "
                f"differing only at the end, then get({short_id(sid)})",
                hint=LONG_HINT,
            )
