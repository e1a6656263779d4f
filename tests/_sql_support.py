"""Shared fixtures and building blocks for the SQL store tests (not a test module).

A PostgreSQL test that cannot run is skipped from a sync fixture
(``sql_target``, ``postgres_dsn``): a skip raised inside a trio test or async
fixture reaches pytest without its reason.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import anyio
import anyio.abc
import attrs
import pytest
import trio
import trio.testing

from agentloop import RunStep
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql._workers import Read

DSN_VARIABLE = "AGENTLOOP_PG_DSN"


def pg_dsn() -> str:
    """The PostgreSQL DSN; skips (or fails under ``CI=true``) when unset.

    Call it from sync code only (a sync fixture or test).

    Raises:
        RuntimeError: it would skip inside a trio run, where the reason is lost.
    """
    dsn = os.environ.get(DSN_VARIABLE, "")
    if dsn:
        return dsn
    if trio.lowlevel.in_trio_run():
        raise RuntimeError(
            "pg_dsn() would skip inside a trio run, where pytest loses the reason: "
            "take the postgres_dsn or sql_target fixture instead"
        )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{DSN_VARIABLE} is unset but CI=true: the PostgreSQL tests must run in CI")
    pytest.skip(f"PostgreSQL tests need {DSN_VARIABLE} (e.g. postgresql://postgres@127.0.0.1/test)")


@attrs.frozen
class SqlTarget:
    """Which SQL store a test opens: ``kind`` is ``"sqlite"`` or ``"postgres"`` (with its DSN)."""

    kind: str
    dsn: str | None = None


@pytest.fixture(params=["sqlite", "postgres"])
def sql_target(request: pytest.FixtureRequest) -> SqlTarget:
    """Each SQL store in turn; sync, so a PostgreSQL skip shows its reason."""
    if request.param == "sqlite":
        return SqlTarget("sqlite")
    return SqlTarget("postgres", pg_dsn())


@pytest.fixture
def postgres_dsn() -> str:
    """The PostgreSQL DSN; sync, so a skip shows its reason."""
    return pg_dsn()


def new_schema_name() -> str:
    """A schema name no other test run uses."""
    return f"agentloop_t_{os.getpid()}_{secrets.token_hex(5)}"


def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` and everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def fresh_schema(dsn: str) -> AsyncIterator[str]:
    """A new schema name, dropped (with whatever was created in it) on exit."""
    schema = new_schema_name()
    try:
        yield schema
    finally:
        drop_schema(dsn, schema)


@asynccontextmanager
async def open_sql_store(
    target: SqlTarget, path: Path, *, pool_size: int
) -> AsyncIterator[SqliteStore | PostgresStore]:
    """A fresh ``SqliteStore`` at ``path`` or ``PostgresStore`` in its own schema."""
    if target.dsn is None:
        async with await SqliteStore.open(str(path)) as lite:
            yield lite
        return
    dsn = target.dsn
    async with (
        fresh_schema(dsn) as schema,
        await PostgresStore.open(dsn, schema=schema, pool_size=pool_size) as pg,
    ):
        yield pg


async def occupy_worker(
    store: SqliteStore | PostgresStore,
    nursery: trio.Nursery | anyio.abc.TaskGroup,
    gate: threading.Event,
) -> None:
    """Keep one of the store's worker threads busy until ``gate`` is set; returns once it is.

    Under trio or asyncio (``nursery`` is a trio nursery or an anyio task group).
    """
    started = threading.Event()

    def hold(conn: object) -> None:
        started.set()
        gate.wait()

    nursery.start_soon(partial(store._workers.call, Read(hold)))
    await anyio.to_thread.run_sync(started.wait)


async def expect_queued_append_cancelled(store: SqliteStore | PostgresStore) -> None:
    """Cancel an append queued behind a busy worker: it raises Cancelled and never happens.

    ``store`` must have a single worker, so the append stays queued. The store
    is still usable afterwards.
    """
    gate = threading.Event()
    scope = trio.CancelScope()
    outcomes: list[str] = []

    async def call() -> None:
        with scope:
            try:
                await store.append(RunStep("s", 0, "tool_result"))
            except trio.Cancelled:
                outcomes.append("cancelled")
                raise
            outcomes.append("returned")

    async with trio.open_nursery() as nursery:
        await occupy_worker(store, nursery, gate)
        try:
            nursery.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            assert len(store._workers._queue) == 1
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert outcomes == ["cancelled"]
            assert len(store._workers._queue) == 0
        finally:
            gate.set()
    assert scope.cancelled_caught
    assert await store.all("s") == []
    await store.append(RunStep("s", 1, "tool_result"))
    assert [s.step_index for s in await store.all("s")] == [1]


# What undoes the lifecycle schema version (SQLite 4, PostgreSQL 6), for tests that
# take a store back to an earlier version by dropping what later versions added.
SQLITE_UNDO_LIFECYCLE = (
    "DROP TRIGGER session_labels_follow",
    "DROP TABLE session_labels",
    "DROP TABLE meta",
    "DROP INDEX sessions_by_created",
    "ALTER TABLE sessions DROP COLUMN labels",
    "ALTER TABLE sessions DROP COLUMN created_seq",
)
PG_UNDO_LIFECYCLE = (
    "DROP TABLE {s}.session_labels",
    "DROP TABLE {s}.meta",
    "DROP INDEX {s}.sessions_by_updated",
    "DROP FUNCTION {s}.session_created() CASCADE",
    "DROP FUNCTION {s}.session_labels_follow() CASCADE",
    "ALTER TABLE {s}.sessions DROP COLUMN labels, DROP COLUMN created_seq",
)


def undo_lifecycle_pg(dsn: str, schema: str) -> None:
    """Take a PostgreSQL schema at the lifecycle version back to the version before it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        quoted = sql.Identifier(schema).as_string(conn)
        for statement in PG_UNDO_LIFECYCLE:
            conn.execute(statement.format(s=quoted))
        conn.execute(f"UPDATE {quoted}.schema_version SET version = 5")
