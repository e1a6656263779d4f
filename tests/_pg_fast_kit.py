"""Building blocks for the PostgreSQL fast-path tests (not a test module)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import psycopg
from _sql_anyio import until
from _sql_support import fresh_schema

from agentloop import RunStep
from agentloopsql import PostgresStore


def step(index: int, session: str = "s", content: str = "") -> RunStep:
    return RunStep(session, index, "tool_result", content=content)


async def warm(store: PostgresStore) -> None:
    """Make the store open its fast connection (an append asks for it), and wait for it."""
    await store.append(step(0, "warm-up"))
    await until(store._fast.ready)


@asynccontextmanager
async def fast_store(
    dsn: str, *, route: str | None = None, **options: Any
) -> AsyncIterator[PostgresStore]:
    """A fresh store whose fast connection is open; it connects by ``route`` if given."""
    async with (
        fresh_schema(dsn) as schema,
        await PostgresStore.open(route or dsn, schema=schema, **options) as store,
    ):
        await warm(store)
        yield store


def raw(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def waiting_on_steps(dsn: str, schema: str) -> int:
    """How many backends wait for a lock on ``schema.steps``."""
    rows = raw(
        dsn,
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = to_regclass(%s)",
        f'"{schema}".steps',
    )
    return int(rows[0][0])


async def until_waiting(dsn: str, schema: str, count: int) -> None:
    """Wait until ``count`` statements wait for the lock on the steps table."""

    def check() -> bool:
        return waiting_on_steps(dsn, schema) == count

    with anyio.fail_after(10):
        while not await anyio.to_thread.run_sync(check):  # noqa: ASYNC110 (polls the server)
            await anyio.sleep(0.01)


@contextmanager
def steps_locked(dsn: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """Hold a lock on ``schema.steps`` that makes every INSERT wait (released on exit,
    or by committing the yielded connection; 15 s at most, so a failing test cannot hang)."""
    locker = psycopg.connect(dsn)
    release = threading.Timer(15, locker.rollback)
    try:
        locker.execute(f'LOCK TABLE "{schema}".steps IN SHARE MODE')
        release.start()
        yield locker
    finally:
        release.cancel()
        locker.rollback()
        locker.close()


def stored(dsn: str, schema: str, session: str = "s") -> list[int]:
    """The step indexes stored for ``session``, in order."""
    rows = raw(
        dsn, f'SELECT step_index FROM "{schema}".steps WHERE session_id = %s ORDER BY seq', session
    )
    return [int(row[0]) for row in rows]


def fast_pid(store: PostgresStore) -> int:
    """The server process of the store's fast connection."""
    conn = store._fast._conn
    assert conn is not None
    return int(conn.pgconn.backend_pid)
