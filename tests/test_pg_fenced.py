"""PostgresStore's fenced appends: one statement that keeps every guarantee.

The lease check and the INSERT of a fenced append are one autocommit statement
(one round trip, not ``BEGIN``, the lease read, the INSERT and ``COMMIT``). It
judges the lease exactly as ``check_fence`` does, keeps its retry key (a lost
attempt is never applied twice), and a refused row fails with a message
naming ``append``. One-row appends are prepared from their first run. A fenced
write that is still a transaction is ended by the server once its client is
gone, so the lease row it locked is freed.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from _pg_private import CuttingProxy, cutting_proxy
from _sql_support import fresh_schema, pg_dsn
from test_pg_retry import race_lost_attempt, raw

from agentloop import Lease, LeaseLostError, RunStep, StoreError
from agentloop._shared import check_fence
from agentloopsql import PostgresStore
from agentloopsql._store import Grant
from agentloopsql._workers import Read


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


@pytest.fixture
async def pg(dsn: str) -> AsyncIterator[PostgresStore]:
    async with fresh_schema(dsn) as schema, await PostgresStore.open(dsn, schema=schema) as store:
        yield store


@pytest.fixture
def proxy(dsn: str) -> Iterator[CuttingProxy]:
    with cutting_proxy(dsn) as cutter:
        yield cutter


def step(i: int, sid: str = "s") -> RunStep:
    return RunStep(sid, i, "user", content=f"{sid}{i}")


def contents(dsn: str, pg: PostgresStore) -> list[str]:
    rows = raw(dsn, f'SELECT content FROM "{pg.schema}".steps ORDER BY seq')
    return [row[0] for row in rows]


class _Statements:
    """Counts, per kind, what the store's connections send while :attr:`on` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.executes = 0
        self.transactions = 0
        self._lock = threading.Lock()
        execute, transaction = psycopg.Connection.execute, psycopg.Connection.transaction

        def counted_execute(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self._count("executes")
            return execute(conn, *args, **kwargs)

        def counted_transaction(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self._count("transactions")
            return transaction(conn, *args, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", counted_execute)
        monkeypatch.setattr(psycopg.Connection, "transaction", counted_transaction)

    def _count(self, kind: str) -> None:
        if self.on:
            with self._lock:
                setattr(self, kind, getattr(self, kind) + 1)


async def test_fenced_append_is_one_statement(
    pg: PostgresStore, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fenced append and a fenced append_many (spanning sessions) each send one
    statement and open no transaction; their rows are stored in order."""
    lease = await pg.acquire_lease("s", "a", 60)
    assert lease is not None
    view = pg.fenced(lease)
    counted = _Statements(monkeypatch)
    counted.on = True
    await view.append(step(0))
    assert (counted.executes, counted.transactions) == (1, 0)
    await view.append_many([step(1), step(0, "other"), step(2)])
    assert (counted.executes, counted.transactions) == (2, 0)
    counted.on = False
    assert contents(dsn, pg) == ["s0", "s1", "other0", "s2"]


def _set_lease(dsn: str, pg: PostgresStore, owner: str, token: int, released: bool) -> None:
    until = "NULL" if released else "now() + interval '1 hour'"
    raw(
        dsn,
        f'INSERT INTO "{pg.schema}".leases VALUES (%s, %s, %s, {until}) '
        "ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, "
        "token = EXCLUDED.token, expires_at = EXCLUDED.expires_at",
        "s",
        owner,
        token,
    )


GRANTED = Grant("a", 5, False)


@pytest.mark.parametrize(
    ("stored", "owner", "token"),
    [
        (GRANTED, "a", 5),  # the latest grant: lands
        (GRANTED, "a", 4),  # taken over since: LeaseLostError
        (GRANTED, "b", 4),  # an older grant of another owner: LeaseLostError
        (GRANTED, "a", 6),  # never granted (above the latest): ValueError
        (GRANTED, "b", 5),  # never granted (the latest token, another owner): ValueError
        (Grant("a", 5, True), "a", 5),  # released, nobody acquired since: lands
        (Grant("a", 5, True), "a", 4),  # released, an older grant: LeaseLostError
        (None, "a", 1),  # the session was never leased: ValueError
    ],
)
async def test_fenced_append_is_judged_as_check_fence(
    pg: PostgresStore, dsn: str, stored: Grant | None, owner: str, token: int
) -> None:
    """The one statement inserts exactly when ``check_fence`` passes, and raises what it raises."""
    if stored is not None:
        _set_lease(dsn, pg, stored.owner, stored.token, stored.released)
    lease = Lease("s", owner, token, datetime.now(UTC))
    expected: type[Exception] | None = None
    try:
        check_fence(lease, stored)
    except (LeaseLostError, ValueError) as exc:
        expected = type(exc)
    view = pg.fenced(lease)
    if expected is None:
        await view.append(step(0))
        await view.append_many([step(1), step(2)])
        assert contents(dsn, pg) == ["s0", "s1", "s2"]
    else:
        with pytest.raises(expected):
            await view.append(step(0))
        with pytest.raises(expected):
            await view.append_many([step(1), step(0, "other")])
        assert contents(dsn, pg) == []


async def test_fenced_append_past_one_statement_keeps_the_fence(
    pg: PostgresStore, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More rows than one statement takes: the check and every chunk in one transaction."""
    monkeypatch.setattr("agentloopsql._pg_ops.ROWS_PER_STATEMENT", 2)
    old = await pg.acquire_lease("s", "a", 60)
    assert old is not None
    await pg.fenced(old).append_many([step(i) for i in range(5)])
    assert contents(dsn, pg) == [f"s{i}" for i in range(5)]
    _set_lease(dsn, pg, "b", old.token + 1, False)
    with pytest.raises(LeaseLostError):
        await pg.fenced(old).append_many([step(i) for i in range(5, 10)])
    assert len(contents(dsn, pg)) == 5


async def test_fenced_append_cut_on_client_side_is_stored_once(
    dsn: str, proxy: CuttingProxy
) -> None:
    """A lost fenced append still running on the server and its retry: stored once, and
    the session's lease can still be released and taken over.

    The lost attempt commits on its own (one autocommit statement). As a
    transaction it would stay open on the server, its client gone, holding its
    share lock on the lease row (every release or takeover then waits, here
    until statement_timeout) and perhaps an uncommitted row the retry waits on.
    """
    routed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    async with fresh_schema(dsn) as schema:
        try:
            async with await PostgresStore.open(
                routed, schema=schema, pool_size=1, statement_timeout=10
            ) as pg:
                lease = await pg.acquire_lease("s", "a", 60)
                assert lease is not None
                view = pg.fenced(lease)
                await race_lost_attempt(pg, dsn, proxy, "steps", lambda: view.append(step(0)))
                assert contents(dsn, pg) == ["s0"]
                await view.append(step(1))  # and the store goes on
                assert contents(dsn, pg) == ["s0", "s1"]
                await pg.release_lease(lease)
                taken = await pg.acquire_lease("s", "b", 60)
                assert taken is not None
                assert taken.token == lease.token + 1
        finally:
            proxy.close()  # ends any session a lost attempt left open, before the drop


async def test_refused_fenced_append_names_append(pg: PostgresStore, dsn: str) -> None:
    """A row the server refuses in a fenced append: StoreError naming ``append``, nothing stored."""
    raw(dsn, f'ALTER TABLE "{pg.schema}".steps ADD CONSTRAINT short CHECK (length(content) < 9)')
    lease = await pg.acquire_lease("s", "a", 60)
    assert lease is not None
    with pytest.raises(StoreError, match=r"^PostgreSQL refused append: .*'short'"):
        await pg.fenced(lease).append(RunStep("s", 0, "user", content="y" * 20))
    assert contents(dsn, pg) == []


def _prepared_inserts(conn: Any) -> int:
    rows = conn.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ("%INSERT INTO%",)
    ).fetchall()
    return int(rows[0][0])


async def test_one_row_appends_are_prepared_on_first_use(dsn: str) -> None:
    """A plain and a fenced one-row append are server-side prepared statements from their
    first run on a connection (psycopg would wait for the fifth)."""
    async with (
        fresh_schema(dsn) as schema,
        await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg,
    ):
        await pg.append(step(0))
        assert await pg._workers.call(Read(_prepared_inserts)) == 1
        lease = await pg.acquire_lease("s", "a", 60)
        assert lease is not None
        await pg.fenced(lease).append(step(1))
        assert await pg._workers.call(Read(_prepared_inserts)) == 2
        assert contents(dsn, pg) == ["s0", "s1"]


async def test_lost_fenced_write_frees_the_lease_row(
    dsn: str, proxy: CuttingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fenced write (a transaction) cut on the client side only: the server ends the
    abandoned transaction once idle, so its retry lands and the lease can be taken over."""
    monkeypatch.setattr("agentloopsql._pg_ops.FENCE_IDLE_MS", 300)
    routed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    async with fresh_schema(dsn) as schema:
        try:
            async with await PostgresStore.open(
                routed, schema=schema, pool_size=1, statement_timeout=10
            ) as pg:
                lease = await pg.acquire_lease("s", "a", 60)
                assert lease is not None
                view = pg.fenced(lease)
                await view.update_data("s", "[0]")
                await race_lost_attempt(
                    pg, dsn, proxy, "sessions", lambda: view.update_data("s", "[1]")
                )
                assert (await pg.get("s")).data == "[1]"
                await pg.release_lease(lease)
                taken = await pg.acquire_lease("s", "b", 60)
                assert taken is not None
                assert taken.token == lease.token + 1
        finally:
            proxy.close()


@pytest.mark.anyio
async def test_fenced_append_on_each_backend(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under trio and asyncio: one statement, stored when the lease holds, refused whole
    (nothing stored) once the lease was taken over."""
    async with fresh_schema(dsn) as schema, await PostgresStore.open(dsn, schema=schema) as pg:
        old = await pg.acquire_lease("s", "a", 60)
        assert old is not None
        counted = _Statements(monkeypatch)
        counted.on = True
        await pg.fenced(old).append_many([step(0), step(1)])
        assert (counted.executes, counted.transactions) == (1, 0)
        counted.on = False
        _set_lease(dsn, pg, "b", old.token + 1, False)
        with pytest.raises(LeaseLostError):
            await pg.fenced(old).append(step(2))
        assert contents(dsn, pg) == ["s0", "s1"]
