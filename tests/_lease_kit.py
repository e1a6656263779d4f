"""One lease-test setup over the in-memory, SQLite and PostgreSQL stores (not a test module).

A :class:`Kit` holds a store with leases and fenced appends, the step store
its fenced views cover, and ways to move a lease through time that work the
same on each: ``expire`` (every live lease is now past its expiry),
``expiry`` (a session's stored expiry, read past the store) and ``tick`` (the
store's clock moves on). On SQL stores, ``expire`` and ``expiry`` go to the
database directly, so tests never wait for a real TTL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import trio
from _sql_support import drop_schema, new_schema_name, pg_dsn

from agentloopmem import SessionStore as MemSessions
from agentloopmem import StepStore as MemSteps
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql._codec import from_micros, to_micros

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KINDS = ["memory", "sqlite", "postgres"]


class FakeClock:
    """A store clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@attrs.define
class Backend:
    """Which store a kit opens; ``dsn`` for PostgreSQL."""

    kind: str
    dsn: str | None = None


def backend_of(kind: str) -> Backend:
    """The backend for ``kind``; call from sync code (a PostgreSQL skip keeps its reason)."""
    return Backend(kind, pg_dsn() if kind == "postgres" else None)


def pg_raw(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def lite_raw(path: Path, query: str, *params: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


@attrs.define
class Kit:
    """A store with leases (``store``) and the steps its fenced views cover (``steps``)."""

    kind: str
    store: Any
    steps: Any
    clock: FakeClock | None = None
    path: Path | None = None
    dsn: str | None = None
    schema: str | None = None

    @property
    def sql(self) -> bool:
        return self.kind != "memory"

    def now(self) -> datetime:
        """The store's clock now (the machine's for SQL: the server runs here too)."""
        return self.clock() if self.clock is not None else datetime.now(UTC)

    async def tick(self) -> None:
        """Let the store's clock move on a little."""
        if self.clock is not None:
            self.clock.advance(1)
        else:
            await trio.sleep(0.002)

    def raw(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        """Run ``query`` on the database past the store (``{s}``: the PostgreSQL schema)."""
        if self.path is not None:
            return lite_raw(self.path, query, *params)
        assert self.dsn is not None
        return pg_raw(self.dsn, query.replace("{s}", f'"{self.schema}"'), *params)

    async def expire(self) -> None:
        """Every live lease of the store is now past its expiry (none is taken over)."""
        if self.clock is not None:
            self.clock.advance(86_400)
        elif self.path is not None:
            past = to_micros(datetime.now(UTC)) - 1_000_000
            await trio.to_thread.run_sync(
                lite_raw,
                self.path,
                "UPDATE leases SET expires_us = ? WHERE expires_us IS NOT NULL",
                past,
            )
        else:
            await trio.to_thread.run_sync(
                self.raw,
                "UPDATE {s}.leases SET expires_at = now() - interval '1 second' "
                "WHERE expires_at IS NOT NULL",
            )

    async def expiry(self, session_id: str) -> datetime | None:
        """The session's stored lease expiry (``None``: released or never leased)."""
        if self.clock is not None:
            held = self.store._grants.get(session_id)
            return None if held is None or held.released else held.expires_at
        if self.path is not None:
            rows = lite_raw(
                self.path, "SELECT expires_us FROM leases WHERE session_id = ?", session_id
            )
            return from_micros(rows[0][0]) if rows and rows[0][0] is not None else None
        rows = self.raw("SELECT expires_at FROM {s}.leases WHERE session_id = %s", session_id)
        return rows[0][0].astimezone(UTC) if rows and rows[0][0] is not None else None

    @asynccontextmanager
    async def second_handle(self) -> AsyncIterator[Any]:
        """Another handle onto the same backend (in memory: the same store)."""
        if self.kind == "memory":
            yield self.store
        elif self.path is not None:
            async with await SqliteStore.open(self.path) as other:
                yield other
        else:
            assert self.dsn is not None
            async with await PostgresStore.open(self.dsn, schema=self.schema, pool_size=2) as other:
                yield other


@asynccontextmanager
async def open_kit(backend: Backend, directory: Path, *, pool_size: int = 4) -> AsyncIterator[Kit]:
    """A fresh, empty store of ``backend`` (a new file under ``directory``, or a new schema)."""
    if backend.kind == "memory":
        clock = FakeClock()
        steps = MemSteps()
        yield Kit("memory", MemSessions(clock=clock, steps=steps), steps, clock=clock)
    elif backend.kind == "sqlite":
        path = directory / f"lease-{new_schema_name()}.db"
        async with await SqliteStore.open(path) as lite:
            yield Kit("sqlite", lite, lite, path=path)
    else:
        dsn = backend.dsn
        assert dsn is not None
        schema = new_schema_name()
        try:
            async with await PostgresStore.open(dsn, schema=schema, pool_size=pool_size) as pg:
                yield Kit("postgres", pg, pg, dsn=dsn, schema=schema)
        finally:
            drop_schema(dsn, schema)
