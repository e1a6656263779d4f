"""Shared fixtures' building blocks for the SQL store tests (not a test module)."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agentloopsql import PostgresStore, SqliteStore

DSN_VARIABLE = "AGENTLOOP_PG_DSN"


def pg_dsn() -> str:
    """The PostgreSQL DSN; skips (or fails under ``CI=true``) when unset."""
    dsn = os.environ.get(DSN_VARIABLE, "")
    if dsn:
        return dsn
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{DSN_VARIABLE} is unset but CI=true: the PostgreSQL tests must run in CI")
    pytest.skip(f"PostgreSQL tests need {DSN_VARIABLE} (e.g. postgresql://postgres@127.0.0.1/test)")


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
    kind: str, path: Path, *, pool_size: int
) -> AsyncIterator[SqliteStore | PostgresStore]:
    """A fresh ``SqliteStore`` at ``path`` or ``PostgresStore`` in its own schema, by ``kind``."""
    if kind == "sqlite":
        async with await SqliteStore.open(str(path)) as lite:
            yield lite
        return
    dsn = pg_dsn()
    async with (
        fresh_schema(dsn) as schema,
        await PostgresStore.open(dsn, schema=schema, pool_size=pool_size) as pg,
    ):
        yield pg
