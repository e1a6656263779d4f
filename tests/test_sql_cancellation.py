"""Both SQL stores under random cancellation: a call either returned (stored) or raised (not)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from _sql_support import SqlTarget, open_sql_store

from agentloop import RunStep
from agentloopsql import PostgresStore, SqliteStore

Store = SqliteStore | PostgresStore


@pytest.fixture
async def store(sql_target: SqlTarget, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_sql_store(sql_target, tmp_path / "cancel.db", pool_size=4) as opened:
        yield opened


async def test_random_cancellation_is_all_or_nothing(store: Store) -> None:
    """8 tasks x 40 appends, each cancelled after a random number of scheduler ticks."""
    rng = random.Random(5)
    stored: dict[int, list[int]] = {task: [] for task in range(8)}

    async def writer(task: int) -> None:
        for index in range(40):
            with trio.CancelScope() as scope:

                async def cancel_soon(scope: trio.CancelScope = scope) -> None:
                    # A few scheduler ticks land while the call is queued or taken;
                    # a few milliseconds let some calls finish before the cancel.
                    for _ in range(rng.randrange(0, 6)):
                        await trio.lowlevel.checkpoint()
                    await trio.sleep(rng.choice([0, 0, 0.002, 0.02]))
                    scope.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cancel_soon)
                    await store.append(RunStep(f"t{task}", index, "tool_result"))
                    stored[task].append(index)  # no checkpoint in between: it returned

    async with trio.open_nursery() as nursery:
        for task in range(8):
            nursery.start_soon(writer, task)

    total = 0
    for task, indices in stored.items():
        assert [s.step_index for s in await store.all(f"t{task}")] == indices
        total += len(indices)
    assert 0 < total < 8 * 40  # both outcomes happened
    await store.append(RunStep("after", 0, "user"))  # and the store is still usable
    assert len(await store.last_n("after", 1)) == 1
