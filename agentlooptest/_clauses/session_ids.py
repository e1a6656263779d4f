"""``session.ids.*``: session ids are plain, case-sensitive, verbatim text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause
from agentlooptest._clauses._shared import expect_data, expect_exists
from agentlooptest._data import CASE_IDS, SQL_IDS, VERBATIM_IDS
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


async def _ids(h: Harness, ids: tuple[str, ...], what: str) -> None:
    async with open_sessions(h) as store:
        for k, sid in enumerate(ids):
            await store.update_data(sid, f'{{"k": {k}}}')
        for k, sid in enumerate(ids):
            await expect_data(
                store,
                sid,
                f'{{"k": {k}}}',
                f"update_data on {len(ids)} sessions whose ids {what}, then get({sid!r})",
            )
            await expect_exists(store, sid, True, f"then exists({sid!r})")


@clause(
    "session.ids.sql-text",
    "ids that look like SQL, LIKE wildcards or escapes are plain, distinct ids",
    why=(
        "session ids come from users and apps: a store that splices them into SQL or "
        "patterns mixes sessions or can be attacked through them"
    ),
    hint="an id spliced into SQL text or matched with LIKE",
)
async def _sql_ids(h: Harness) -> None:
    await _ids(h, (*SQL_IDS, "100x", "aXb", "a%b"), "look like SQL or patterns")


@clause(
    "session.ids.case-sensitive",
    "ids that differ only in case are different sessions",
    why="ids are opaque and case-sensitive: case-folding merges two users' working memory",
    hint="a case-insensitive collation (COLLATE NOCASE, MySQL's default)",
)
async def _case_ids(h: Harness) -> None:
    await _ids(h, CASE_IDS, "differ only in case")


@clause(
    "session.ids.verbatim",
    "ids with spaces, newlines, other scripts and normalization forms are kept verbatim",
    why="ids are opaque: trimming or normalizing them merges sessions or loses one",
)
async def _verbatim_ids(h: Harness) -> None:
    await _ids(h, VERBATIM_IDS, "hold spaces, newlines, other scripts or forms")
