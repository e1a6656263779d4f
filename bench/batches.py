"""Batches: one ``append_many`` of 10 steps against 10 ``append`` calls, on each store.

Both write the same 10 steps to one session; the ratio is the batch's time
over the ten calls' (below 1: the batch is cheaper). SQLite runs with
``synchronous="full"`` (one fsync per commit, its default). PostgreSQL rows
need ``AGENTLOOP_PG_DSN``; they are left out without it.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from agentloop import RunStep, StepType
from agentloopmem import StepStore
from agentloopsql import PostgresStore, SqliteStore
from bench._report import Row

BATCH = 10
ROUNDS = {"mem": 2_000, "sqlite": 60, "postgres": 100}
REPEATS = 3
_STEPS = [
    RunStep("bench", i, StepType.tool_call, content=f"call {i}", tool_args='{"k": 1}')
    for i in range(BATCH)
]


async def _us_per_round(rounds: int, run: Callable[[], Awaitable[None]]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(rounds):
            await run()
        best = min(best, (time.perf_counter() - start) / rounds * 1e6)
    return best


async def _row(name: str, store: Any, rounds: int) -> Row:
    async def one_by_one() -> None:
        for step in _STEPS:
            await store.append(step)

    async def batched() -> None:
        await store.append_many(_STEPS)

    singles = await _us_per_round(rounds, one_by_one)
    batch = await _us_per_round(rounds, batched)
    return Row(
        f"{name} append_many({BATCH}) vs {BATCH} appends",
        f"{batch:.0f} vs {singles:.0f} µs per {BATCH} steps",
        batch / singles,
        1.0,
    )


async def _all_rows() -> list[Row]:
    rows = [await _row("mem", StepStore(), ROUNDS["mem"])]
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-batches-") as directory:
        async with await SqliteStore.open(os.path.join(directory, "b.db")) as lite:
            rows.append(await _row("sqlite", lite, ROUNDS["sqlite"]))
    dsn = os.environ.get("AGENTLOOP_PG_DSN", "")
    if dsn:
        schema = f"agentloop_bench_{secrets.token_hex(4)}"
        try:
            async with await PostgresStore.open(dsn, schema=schema, pool_size=2) as pg:
                rows.append(await _row("postgres", pg, ROUNDS["postgres"]))
        finally:
            _drop(dsn, schema)
    return rows


def _drop(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def rows() -> list[Row]:
    """The batch-vs-singles ratio on each store, measured in this run."""
    return trio.run(_all_rows)
