"""agentloopsql: each store against the raw driver doing the same statements.

SQLite appends are compared with two floors: raw ``sqlite3`` running the
same ``BEGIN IMMEDIATE; INSERT; COMMIT`` in the calling thread (the physical
floor), and the same raw statements behind one ``to_thread`` hop (what any
off-thread store must pay per call); the SQLite rows run under trio and again
under asyncio (``_sql_lite``). ``last_n`` is timed at a 10^5-step history
against a 10^2-step one in the same table. The PostgreSQL rows
(``bench._sql_pg``) need ``AGENTLOOP_PG_DSN``; they are left out without it.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable

import trio

from agentloop import RunStep
from agentloopsql import PostgresStore, SqliteStore
from bench._raw_sql import SQLITE_INSERT, sqlite_row
from bench._report import Row

NO_TARGET = float("inf")
_STEP = RunStep("bench", 0, "tool_result", content="x" * 200, tool_args='{"k": 1}')
_SEQ_OPS = 400
_TASKS = 16
_REPEATS = 5


async def _per_op_us(ops: int, run: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await run()
    return (time.perf_counter() - start) / ops * 1e6


async def _best(make: Callable[[], Awaitable[float]]) -> float:
    return min([await make() for _ in range(_REPEATS)])


# -- SQLite -----------------------------------------------------------------


def _raw_append(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(SQLITE_INSERT, sqlite_row(_STEP))
    conn.execute("COMMIT")


async def _last_n_pair(store: SqliteStore | PostgresStore) -> tuple[float, float]:
    ops = 200

    def timed(session: str) -> Callable[[], Awaitable[float]]:
        async def run() -> None:
            for _ in range(ops):
                await store.last_n(session, 50)

        return lambda: _per_op_us(ops, run)

    big = small = float("inf")
    for _ in range(_REPEATS):  # interleaved, so drift hits both alike
        big = min(big, await timed("big")())
        small = min(small, await timed("small")())
    return big, small


# -- the section ----------------------------------------------------------------


async def _all_rows() -> list[Row]:
    from bench import _sql_lite  # it imports this module's helpers

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="agentloopsql-bench-") as directory:
        rows.extend(await _sql_lite.sqlite_rows(directory, _sql_lite.TRIO))
    dsn = os.environ.get("AGENTLOOP_PG_DSN", "")
    if dsn:
        from bench._sql_pg import postgres_rows

        rows.extend(await postgres_rows(dsn))
    return rows


def rows() -> list[Row]:
    """SQLite (under trio, then asyncio) and (with ``AGENTLOOP_PG_DSN``) PostgreSQL ratios,
    all measured in this run."""
    from bench import _sql_lite

    return trio.run(_all_rows) + _sql_lite.asyncio_rows()
