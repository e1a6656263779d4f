"""PostgresStore's short reads on the event-loop thread (``agentloopsql._pg_inline``):
the same answers as the workers, served while every worker is busy, and every way the
inline connection can fail (lost, cancelled, locked out, refused, timed out) leaves a
correct answer or the workers' error, never a hang."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import psycopg
import pytest
from _sql_support import fresh_schema, occupy_worker

from agentloop import RunStep, Session, StepType, StoreUnavailableError
from agentloopsql import PostgresStore

pytestmark = pytest.mark.anyio

HOSTILE = ["plain", "nul \x00 inside", "é 😀 \u202e", "x" * 70_000, ""]


@pytest.fixture
async def schema(postgres_dsn: str) -> AsyncIterator[str]:
    async with fresh_schema(postgres_dsn) as name:
        yield name


@pytest.fixture
async def store(postgres_dsn: str, schema: str) -> AsyncIterator[PostgresStore]:
    async with await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1) as pg:
        yield pg


def inline_pid(store: PostgresStore) -> int | None:
    conn = store._inline._conn
    return None if conn is None else conn.pgconn.backend_pid


async def fill(store: PostgresStore) -> None:
    steps = [
        RunStep("s", i, StepType.tool_call, content=text, tool_args='{"q": [1, "\\u00e9"]}')
        for i, text in enumerate(HOSTILE)
    ]
    await store.append_many(steps)
    await store.put(Session("s", model="m", system_prompt="p\x00q", data='{"a": "é"}'))
    await store.put(Session("t", model="mödel", data=None))
    await store.finalize("t", _summary())


def _summary() -> Any:
    from agentloop import FinalizeSummary, RunStatus

    return FinalizeSummary(status=RunStatus.completed, step_count=3)


def reads(store: PostgresStore) -> list[Callable[[], Awaitable[object]]]:
    return [
        lambda: store.last_n("s", 3),
        lambda: store.last_n("s", 256),
        lambda: store.get("s"),
        lambda: store.get("never"),
        lambda: store.get_many(["t", "s", "never", "s"]),
        lambda: store.list_sessions(limit=5),
    ]


async def test_inline_answers_equal_the_workers_answers(store: PostgresStore) -> None:
    """Each short read, inline and (with the inline connection taken) on the workers,
    returns equal values: NUL, astral and bidi text, 70 kB contents, JSON, labels."""
    await fill(store)
    await store.set_labels("t", {"team": "a"})
    inline = [await read() for read in reads(store)]
    assert inline_pid(store) is not None
    with store._inline._lock:  # busy: every read misses and runs on the workers
        on_workers = [await read() for read in reads(store)]
    assert inline == on_workers
    assert [s.content for s in await store.last_n("s", 256)] == HOSTILE  # type: ignore[union-attr]


async def test_short_reads_are_answered_while_every_worker_is_busy(store: PostgresStore) -> None:
    """With the store's one worker held, every short read still answers (inline)."""
    await fill(store)
    gate = threading.Event()
    async with anyio.create_task_group() as group:
        await occupy_worker(store, group, gate)
        try:
            with anyio.fail_after(5):
                got = [await read() for read in reads(store)]
        finally:
            gate.set()
    assert got[2] == await store.get("s")


def terminate(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_a_terminated_inline_connection_is_replaced_and_no_read_fails(
    store: PostgresStore, postgres_dsn: str
) -> None:
    """The server ends the inline connection's backend: the next read is answered by the
    workers, and a new inline connection is opened after reconnect_interval."""
    await fill(store)
    pid = inline_pid(store)
    assert pid is not None
    await anyio.to_thread.run_sync(terminate, postgres_dsn, pid)
    await anyio.sleep(0.1)
    for read in reads(store):
        assert await read() is not None
    with anyio.fail_after(10):
        while inline_pid(store) in (None, pid):
            await anyio.sleep(0.05)
            await store.get("s")
    assert (await store.get("s")).model == "m"


async def locked(dsn: str, schema: str) -> psycopg.Connection[Any]:
    locker = await anyio.to_thread.run_sync(psycopg.connect, dsn)
    await anyio.to_thread.run_sync(
        locker.execute, f'LOCK TABLE "{schema}".sessions IN ACCESS EXCLUSIVE MODE'
    )
    return locker


async def test_a_cancelled_inline_read_returns_at_once_and_drops_its_connection(
    store: PostgresStore, postgres_dsn: str, schema: str
) -> None:
    """A read waiting on the server behind a lock is cancelled promptly; its connection
    (its statement's state unknown) is closed, and reads go on once the lock goes."""
    await fill(store)
    pid = inline_pid(store)
    locker = await locked(postgres_dsn, schema)
    try:
        with anyio.fail_after(5):
            with anyio.move_on_after(0.3) as scope:
                await store.get("s")
        assert scope.cancelled_caught
        assert inline_pid(store) is None
    finally:
        await anyio.to_thread.run_sync(locker.close)
    assert (await store.get("s")).model == "m"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
        assert row.fetchone() == (0,)


async def test_an_inline_read_past_wait_timeout_fails_and_did_nothing(
    postgres_dsn: str, schema: str
) -> None:
    """wait_timeout bounds the inline wait: StoreUnavailableError, saying so."""
    async with await PostgresStore.open(
        postgres_dsn, schema=schema, pool_size=1, wait_timeout=0.3
    ) as pg:
        await fill(pg)
        locker = await locked(postgres_dsn, schema)
        try:
            with anyio.fail_after(5):
                with pytest.raises(StoreUnavailableError, match="wait_timeout"):
                    await pg.get("s")
        finally:
            await anyio.to_thread.run_sync(locker.close)
        assert (await pg.get("s")).model == "m"


async def test_statement_timeout_on_an_inline_read_is_the_workers_error(
    postgres_dsn: str, schema: str
) -> None:
    """The server cancels an inline read at statement_timeout: the error is the one the
    workers raise (StoreUnavailableError naming the read), and the connection stays."""
    async with await PostgresStore.open(
        postgres_dsn, schema=schema, pool_size=1, statement_timeout=0.2, wait_timeout=5
    ) as pg:
        await fill(pg)
        pid = inline_pid(pg)
        locker = await locked(postgres_dsn, schema)
        try:
            with anyio.fail_after(5):
                with pytest.raises(StoreUnavailableError, match=r"could not run get now.*57014"):
                    await pg.get("s")
        finally:
            await anyio.to_thread.run_sync(locker.close)
        assert inline_pid(pg) == pid
        assert (await pg.get("s")).model == "m"


async def test_aclose_closes_the_inline_connection(postgres_dsn: str, schema: str) -> None:
    pg = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)
    await pg.get("s")
    pid = inline_pid(pg)
    await pg.aclose()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
        assert row.fetchone() == (0,)


async def test_the_longest_short_get_many_is_read_inline_and_longer_ones_on_the_workers(
    store: PostgresStore,
) -> None:
    """256 ids of 1,024 bytes (past a socket buffer's first size) go out through the inline
    connection's non-blocking sends with every worker held; 257 ids need the workers."""
    ids = [f"{i:06d}" + "i" * 1_018 for i in range(257)]
    await store.put(Session(ids[7], model="seven"))
    gate = threading.Event()
    async with anyio.create_task_group() as group:
        await occupy_worker(store, group, gate)
        try:
            with anyio.fail_after(5):
                got = await store.get_many(ids[:256])
            with anyio.move_on_after(0.3) as scope:
                await store.get_many(ids)
            assert scope.cancelled_caught  # queued for the held worker
        finally:
            gate.set()
    assert [s.id for s in got] == ids[:256]
    assert got[7].model == "seven"
    assert [s.id for s in await store.get_many(ids)] == ids
