"""Seeding the SQL stores for the lifecycle rows: many sessions, written in bulk.

A million sessions written one store call at a time would take the bench
minutes; the rows go straight into the store's own tables instead, in one
transaction, as the store writes them (``write_seq`` ascending, one label
row per pair, every tenth session labelled ``team=a``). ``idle_s`` back-dates
their last write, so expiry finds them idle without waiting.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from agentloopsql import PostgresStore, SqliteStore
from bench._raw_sql import drop_pg_schema, pg_schema, sqlite_checksum

_LABELLED = '{"team":"a"}'
_IDLE = 3600.0  # seconds the seeded sessions' last write lies back


def _rows(prefix: str, count: int, first_seq: int) -> Iterator[tuple[str, int, bool]]:
    for n in range(count):
        yield f"{prefix}{n:07d}", first_seq + n, n % 10 == 0


def _session_row(session_id: str, stamp: int, seq: int, labels: str) -> tuple[object, ...]:
    """The varying columns of a new ``sessions`` row, its checksum last (docs/stores.md)."""
    fields = (session_id, "", "", *(None,) * 7, 0, stamp, stamp, seq, labels, seq)
    return (session_id, stamp, stamp, seq, labels, seq, sqlite_checksum(fields))


def seed_sqlite(path: str, prefix: str, count: int, idle_s: float = 0.0) -> None:
    """``count`` sessions into the SqliteStore file at ``path`` (its schema made already)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        (top,) = conn.execute("SELECT coalesce(max(write_seq), 0) FROM sessions").fetchone()
        stamp = round((time.time() - idle_s) * 1_000_000)
        rows = list(_rows(prefix, count, top + 1))
        conn.executemany(
            "INSERT INTO sessions VALUES (?, '', '', NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
            "0, ?, ?, ?, ?, ?, ?)",
            (_session_row(i, stamp, seq, _LABELLED if lab else "{}") for i, seq, lab in rows),
        )
        conn.executemany(
            "INSERT INTO session_labels VALUES (?, 'team', 'a', ?, ?)",
            ((i, seq, seq) for i, seq, lab in rows if lab),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def seed_postgres(dsn: str, schema: str, prefix: str, count: int, idle_s: float = 0.0) -> None:
    """``count`` sessions into the PostgresStore tables in ``schema`` (made already)."""
    import psycopg

    s = pg_schema(schema)
    with psycopg.connect(dsn) as conn:
        (top,) = conn.execute(f"SELECT nextval('{s}.session_writes')").fetchone()  # type: ignore[misc]
        conn.execute(
            f"INSERT INTO {s}.sessions "
            "(id, system_prompt, created_at, updated_at, write_seq, labels) "
            "SELECT %(p)s || lpad(n::text, 7, '0'), '', "
            "now() - make_interval(secs => %(idle)s), now() - make_interval(secs => %(idle)s), "
            "%(top)s + n, CASE WHEN n %% 10 = 0 THEN %(lab)s ELSE '{}' END "
            "FROM generate_series(0, %(count)s - 1) AS n",
            {"p": prefix, "idle": idle_s, "top": top, "count": count, "lab": _LABELLED},
        )
        conn.execute(
            f"INSERT INTO {s}.session_labels "
            "SELECT id, 'team', 'a', write_seq, created_seq FROM "
            f"{s}.sessions WHERE id LIKE %(like)s AND labels <> '{{}}'",
            {"like": prefix + "%"},
        )
        conn.execute(f"SELECT setval('{s}.session_writes', %s)", (top + count,))
        conn.execute(f"ANALYZE {s}.sessions")
        conn.execute(f"ANALYZE {s}.session_labels")


@asynccontextmanager
async def sqlite_target(directory: str) -> AsyncIterator[Any]:
    """A SqliteStore on a new file in ``directory``, seeded in bulk."""
    from bench.lifecycle import Target

    path = os.path.join(directory, "lifecycle.db")
    async with await SqliteStore.open(path) as store:

        async def seed(prefix: str, count: int) -> None:
            await trio.to_thread.run_sync(seed_sqlite, path, prefix, count, _IDLE)

        yield Target("sqlite", store, seed, idle_for=_IDLE / 2, wait=0.0)


@asynccontextmanager
async def postgres_target(dsn: str) -> AsyncIterator[Any]:
    """A PostgresStore in a fresh schema, seeded in bulk; the schema is dropped after."""
    from bench.lifecycle import Target

    schema = f"agentloop_bench_{secrets.token_hex(4)}"
    try:
        async with await PostgresStore.open(dsn, schema=schema) as store:

            async def seed(prefix: str, count: int) -> None:
                await trio.to_thread.run_sync(seed_postgres, dsn, schema, prefix, count, _IDLE)

            yield Target("postgres", store, seed, idle_for=_IDLE / 2, wait=0.0)
    finally:
        await trio.to_thread.run_sync(drop_pg_schema, dsn, schema)
