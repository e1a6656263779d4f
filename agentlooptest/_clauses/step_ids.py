"""``step.ids.*``: session ids are plain, case-sensitive, verbatim text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._data import CASE_IDS, SQL_IDS, VERBATIM_IDS, describe, same_steps, step
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


async def _ids_round_trip(h: Harness, ids: tuple[str, ...], what: str) -> None:
    async with open_steps(h) as s:
        for k, sid in enumerate(ids):
            await s.append(step(sid, k, content=f"for {sid!r}"))
        for k, sid in enumerate(ids):
            got = await s.last_n(sid, 5)
            want = [step(sid, k, content=f"for {sid!r}")]
            expect(
                same_steps(want, got),
                did=f"appended one step to each of {len(ids)} sessions whose ids {what}, "
                f"then last_n({sid!r}, 5)",
                expected=f"exactly that session's step: {describe(want)}",
                got=describe(got),
            )


@clause(
    "step.ids.sql-text",
    "ids that look like SQL, LIKE wildcards or escapes are plain, distinct ids",
    why=(
        "session ids come from users and apps: a store that splices them into SQL or "
        "patterns mixes sessions or can be attacked through them"
    ),
    hint="an id spliced into SQL text or matched with LIKE",
)
async def _sql_ids(h: Harness) -> None:
    await _ids_round_trip(h, (*SQL_IDS, "100x", "aXb", "a%b"), "look like SQL or patterns")


@clause(
    "step.ids.case-sensitive",
    "ids that differ only in case are different sessions",
    why=(
        "ids are opaque and case-sensitive: a store that case-folds them (a NOCASE "
        "collation, lower()) merges two users' conversations"
    ),
    hint="a case-insensitive collation (COLLATE NOCASE, MySQL's default)",
)
async def _case_ids(h: Harness) -> None:
    await _ids_round_trip(h, CASE_IDS, "differ only in case")


@clause(
    "step.ids.verbatim",
    "ids with spaces, newlines, other scripts and normalization forms are kept verbatim",
    why=(
        "ids are opaque: a store that trims or normalizes them merges distinct sessions "
        "or loses a session's history"
    ),
)
async def _verbatim_ids(h: Harness) -> None:
    await _ids_round_trip(h, VERBATIM_IDS, "hold spaces, newlines, other scripts or forms")
