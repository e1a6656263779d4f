"""``session.get.*``: ``get`` of an unknown id returns a fresh session and creates nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop import Session
from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import expect_data, expect_exists
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.get.unknown-returns-id",
    "get of an unknown id returns a fresh Session carrying that id",
    why=(
        "every first run calls get on an id never seen: an error fails it, and a Session "
        "with an empty or different id writes the run under the wrong session"
    ),
)
async def _get_unknown(h: Harness) -> None:
    async with open_sessions(h) as store:
        for sid in ("never-seen", "Ünïcode 🧪", " spaced "):
            got = await store.get(sid)
            expect(
                got == Session(id=sid),
                did=f"get({sid!r}) on a store where it was never written",
                expected=f"Session(id={sid!r}) with model '', system_prompt '', data None",
                got=got,
            )


@clause(
    "session.get.unknown-creates-nothing",
    "get and exists of an unknown id create nothing",
    why=(
        "reads must not write: a get that creates rows makes every probe, typo and crawler "
        "a session, and exists can no longer tell new users from returning ones"
    ),
    hint="get or exists inserting a row (an upsert on read)",
)
async def _creates_nothing(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.get("probe")
        await store.get("probe")
        await expect_exists(store, "probe", False, "get('probe') twice, then exists('probe')")
        await store.exists("other")
        await expect_exists(store, "other", False, "exists('other') twice")
        await expect_data(store, "probe", None, "get('probe') after those reads")
