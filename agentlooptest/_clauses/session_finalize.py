"""``session.finalize.*``: ``finalize`` is repeatable and keeps the data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop import FinalizeSummary, RunStatus
from agentlooptest._clause import clause
from agentlooptest._clauses._shared import DONE, expect_data, expect_exists
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.finalize.repeatable",
    "finalize can be called again and again on one session (once per run)",
    why=(
        "every run finalizes; a store that allows one finalize per session (a unique "
        "summary row) fails the second run of every session"
    ),
)
async def _twice(h: Harness) -> None:
    async with open_sessions(h) as store:
        for status in (
            RunStatus.completed,
            RunStatus.error,
            RunStatus.cancelled,
            RunStatus.completed,
        ):
            await store.finalize("s", FinalizeSummary(status, step_count=2))
        await expect_exists(store, "s", True, "finalize('s', ...) four times, then exists")


@clause(
    "session.finalize.keeps-data",
    "finalize never discards the data snapshot",
    why=(
        "finalize ends every run: a store that resets the session row there wipes the "
        "agent's working memory after each run"
    ),
    hint="finalize writing the whole row, data column included",
)
async def _keeps(h: Harness) -> None:
    async with open_sessions(h) as store:
        doc = '{"memory": ["a", "b"], "n": 2}'
        await store.update_data("s", doc)
        await store.finalize("s", DONE)
        await store.finalize("s", FinalizeSummary(RunStatus.error))
        await expect_data(store, "s", doc, "update_data('s', <doc>), finalize twice, then get")
        await store.update_data("t", None)
        await store.finalize("t", DONE)
        await expect_data(store, "t", None, "update_data('t', None), finalize, then get")
