"""agentloopsql: each store against the raw driver doing the same statements.

SQLite appends are compared with two floors: raw ``sqlite3`` running the
same ``BEGIN IMMEDIATE; INSERT; COMMIT`` in the calling thread (the physical
floor), and the same raw statements behind one ``to_thread`` hop (what any
off-thread store must pay per call); the SQLite rows run under trio and again
under asyncio (``_sql_lite``). PostgreSQL appends are compared with
raw ``psycopg`` running the same INSERT on its own connection(s). ``last_n``
is timed at a 10^5-step history against a 10^2-step one in the same table.
PostgreSQL rows need ``AGENTLOOP_PG_DSN``; they are left out without it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import trio

from agentloop import RunStep
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql._ops import new_key
from agentloopsql._sqlite import _INSERT_STEP, step_params
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


def _raw_sqlite(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    return conn


def _raw_append(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(_INSERT_STEP, step_params(_STEP))
    conn.execute("COMMIT")


def fill_sqlite(path: str, sizes: dict[str, int]) -> None:
    """Insert ``sizes[session]`` steps per session straight into a SqliteStore's file."""
    conn = _raw_sqlite(path, "normal")
    conn.execute("BEGIN")
    for session, count in sizes.items():
        rows = (
            step_params(RunStep(session, i, "tool_result", content="y" * 200)) for i in range(count)
        )
        conn.executemany(_INSERT_STEP, rows)
    conn.execute("COMMIT")
    conn.close()


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


# -- PostgreSQL ---------------------------------------------------------------


def _pg_floor(dsn: str, insert: str, sessions: int, ops: int) -> float:
    """Raw psycopg: one autocommit connection per session, each in its own thread.

    Every INSERT carries a fresh append key, as the store's do: a repeated key
    would make each INSERT after the first a no-op (``ON CONFLICT DO NOTHING``)
    that writes and flushes nothing, a floor no store that stores rows can meet.
    """
    import psycopg

    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(sessions)]
    params = [
        [f"floor-{n}", 0, "tool_result", "x" * 200, None, '{"k": 1}', 0, 0, 0, datetime.now(UTC), 1]
        for n in range(sessions)
    ]
    for conn, p in zip(conns, params, strict=True):
        p[-1] = new_key()
        conn.execute(insert, p)  # connect and warm up before the clock starts
    barrier = threading.Barrier(sessions + 1)

    def worker(conn: Any, p: list[object]) -> None:
        barrier.wait()
        for _ in range(ops):
            p[-1] = new_key()
            conn.execute(insert, p)

    threads = [
        threading.Thread(target=worker, args=(c, p)) for c, p in zip(conns, params, strict=True)
    ]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for conn in conns:
        conn.close()
    return sessions * ops / elapsed


async def _pg_ours(store: PostgresStore, sessions: int, ops: int) -> float:
    steps = [
        RunStep(f"ours-{n}", 0, "tool_result", content="x" * 200, tool_args='{"k": 1}')
        for n in range(sessions)
    ]

    async def writer(step: RunStep) -> None:
        for _ in range(ops):
            await store.append(step)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for step in steps:
            nursery.start_soon(writer, step)
    return sessions * ops / (time.perf_counter() - start)


async def _postgres_rows(dsn: str) -> list[Row]:
    import psycopg
    from psycopg import sql

    from agentloopsql._pg_ops import PgOps

    schema = f"agentloop_bench_{secrets.token_hex(4)}"
    store = await PostgresStore.open(dsn, schema=schema, pool_size=_TASKS)
    rows: list[Row] = []
    try:
        assert isinstance(store._ops, PgOps)
        insert = store._ops.q["append"]
        for sessions, ops in ((1, 300), (_TASKS, 60)):
            await _pg_ours(store, sessions, 5)  # warm every pooled connection
            floor = ours = 0.0
            for _ in range(_REPEATS):
                floor = max(
                    floor, await trio.to_thread.run_sync(_pg_floor, dsn, insert, sessions, ops)
                )
                ours = max(ours, await _pg_ours(store, sessions, ops))
            rows.append(
                Row(
                    f"postgres appends/s, {sessions} session{'s' if sessions > 1 else ''}",
                    f"vs raw psycopg, same INSERT ({ours:.0f} vs {floor:.0f}/s)",
                    ours / floor,
                    0.7 if sessions > 1 else 0.8,
                    at_least=True,
                )
            )
        await trio.to_thread.run_sync(_fill_pg, dsn, schema, {"big": 100_000, "small": 100})
        big, small = await _last_n_pair(store)
        rows.append(
            Row(
                "postgres last_n(50)",
                f"10^5 vs 10^2 steps of history ({big:.0f} vs {small:.0f} us)",
                big / small,
                1.5,
            )
        )
    finally:
        await store.aclose()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    return rows


def _fill_pg(dsn: str, schema: str, sizes: dict[str, int]) -> None:
    import psycopg
    from psycopg import sql

    copy = sql.SQL(
        "COPY {}.steps (session_id, step_index, step_type, content, tool_args, duration_ms, "
        "prompt_tokens, completion_tokens, created_at) FROM STDIN"
    ).format(sql.Identifier(schema))
    now = datetime.now(UTC)
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(copy) as out:
            for session, count in sizes.items():
                for i in range(count):
                    out.write_row((session, i, "tool_result", "y" * 200, "{}", 0, 0, 0, now))
        cur.execute(sql.SQL("ANALYZE {}.steps").format(sql.Identifier(schema)))


# -- the section ----------------------------------------------------------------


async def _all_rows() -> list[Row]:
    from bench import _sql_lite  # it imports this module's helpers

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="agentloopsql-bench-") as directory:
        rows.extend(await _sql_lite.sqlite_rows(directory, _sql_lite.TRIO))
    dsn = os.environ.get("AGENTLOOP_PG_DSN", "")
    if dsn:
        rows.extend(await _postgres_rows(dsn))
    return rows


def rows() -> list[Row]:
    """SQLite (under trio, then asyncio) and (with ``AGENTLOOP_PG_DSN``) PostgreSQL ratios,
    all measured in this run."""
    from bench import _sql_lite

    return trio.run(_all_rows) + _sql_lite.asyncio_rows()
