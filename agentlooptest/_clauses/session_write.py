"""``session.write.*``: ``update_data`` and ``finalize`` bring a session into being."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause
from agentlooptest._clauses._shared import DONE, expect_data, expect_exists
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.write.creates",
    "update_data and finalize each bring the session into being",
    why=(
        "exists is how the app tells a returning session from a new one: a write that "
        "does not make the session exist loses returning users' state"
    ),
)
async def _write_creates(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("by-data", '{"k": 1}')
        await expect_exists(store, "by-data", True, "update_data('by-data', ...), then exists")
        await store.update_data("by-none", None)
        await expect_exists(store, "by-none", True, "update_data('by-none', None), then exists")
        await store.finalize("by-final", DONE)
        await expect_exists(store, "by-final", True, "finalize('by-final', ...), then exists")
        await expect_data(store, "by-final", None, "finalize('by-final', ...), then get")
