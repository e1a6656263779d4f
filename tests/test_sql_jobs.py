"""Both SQL stores' typed jobs: one Append of many rows is one all-or-nothing call.

This is what a batch append rests on: its rows are never split, alone or in
group commit, and a refused call fails only itself.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing
from _sql_support import SqlTarget, occupy_worker, open_sql_store

from agentloop import RunStep, StoreError
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql._store import new_key
from agentloopsql._workers import Append, AppendRow

Store = SqliteStore | PostgresStore


@pytest.fixture
async def store(sql_target: SqlTarget, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_sql_store(sql_target, tmp_path / "jobs.db", pool_size=1) as opened:
        yield opened


def append_job(store: Store, steps: Sequence[RunStep]) -> Append[object]:
    """An Append of ``steps`` built the way the store builds a one-step append."""
    ops = store._ops
    rows = tuple(AppendRow(step, new_key()) for step in steps)

    def run(conn: object) -> None:
        for row in rows:
            ops.append(conn, row.step, row.key)  # type: ignore[arg-type]

    def committed(conn: object) -> bool:
        first = rows[0]
        return ops.append_landed(conn, first.step.session_id, first.key)  # type: ignore[arg-type]

    return Append(rows=rows, run=run, committed=committed)


def refused_step(session_id: str, index: int) -> RunStep:
    """A step both schemas refuse (NULL step_index), built past the validators."""
    step = RunStep(session_id, index, "user", content="refused")
    object.__setattr__(step, "step_index", None)
    return step


def steps(session_id: str, indices: range) -> list[RunStep]:
    return [RunStep(session_id, i, "user", content=f"{session_id}{i}") for i in indices]


async def indices(store: Store, session_id: str) -> list[int]:
    return [s.step_index for s in await store.all(session_id)]


async def test_many_rows_land_whole_in_order(store: Store) -> None:
    """An Append of five rows, alone: every row is stored, in the given order."""
    await store._workers.call(append_job(store, steps("a", range(5))))  # type: ignore[arg-type]
    assert await indices(store, "a") == [0, 1, 2, 3, 4]


async def test_a_refused_row_stores_none_of_its_call(store: Store) -> None:
    """An Append whose middle row is refused raises and stores none of its rows."""
    rows = [*steps("a", range(2)), refused_step("a", 2), *steps("a", range(3, 5))]
    with pytest.raises(StoreError):
        await store._workers.call(append_job(store, rows))  # type: ignore[arg-type]
    assert await indices(store, "a") == []


async def test_group_commit_fails_only_the_refused_call(store: Store) -> None:
    """Three calls share one batch; the middle one is refused: the other two land whole."""
    gate = threading.Event()
    jobs = {
        "a": append_job(store, steps("a", range(3))),
        "b": append_job(store, [*steps("b", range(2)), refused_step("b", 2)]),
        "c": append_job(store, steps("c", range(3))),
    }
    failed: list[str] = []

    async def call(name: str) -> None:
        try:
            await store._workers.call(jobs[name])  # type: ignore[arg-type]
        except StoreError:
            failed.append(name)

    async with trio.open_nursery() as nursery:
        await occupy_worker(store, nursery, gate)
        try:
            for name in jobs:
                nursery.start_soon(call, name)
                await trio.testing.wait_all_tasks_blocked()
            assert len(store._workers._queue) == 3  # they will be taken as one batch
        finally:
            gate.set()
    assert failed == ["b"]
    assert await indices(store, "a") == [0, 1, 2]
    assert await indices(store, "b") == []
    assert await indices(store, "c") == [0, 1, 2]
