"""A lone PostgreSQL append, under trio and asyncio, cancelled or cut at each point: all or nothing.

Before its statement is sent a cancelled append did nothing. Once sent, the
server is asked to cancel it and the caller waits for its end: rolled back,
the caller gets the cancellation; committed anyway, the call returns and the
cancellation lands at the caller's next checkpoint. A connection lost under
it is settled by its key; a retry that finds no server is
``StoreUnavailableError``, and a cancellation absorbed meanwhile still lands.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import psycopg
import pytest
import sniffio
import trio
import trio.testing
from _pg_private import CuttingProxy, cutting_proxy
from _sql_anyio import SOURCES, Caller, count_futures, raised, until
from _sql_support import fresh_schema, pg_dsn

from agentloop import RunStep, StoreClosedError, StoreUnavailableError
from agentloopsql import PostgresStore, _pg_exec

pytestmark = pytest.mark.anyio


def step(index: int, session: str = "s") -> RunStep:
    return RunStep(session, index, "tool_result")


def raw(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def stored(dsn: str, schema: str, session: str = "s") -> list[int]:
    """The step indexes stored for ``session``, in order."""
    rows = raw(
        dsn, f'SELECT step_index FROM "{schema}".steps WHERE session_id = %s ORDER BY seq', session
    )
    return [int(row[0]) for row in rows]


async def until_waiting(dsn: str, schema: str, count: int) -> None:
    """Wait until ``count`` statements wait for a lock on ``schema.steps``."""
    query = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = to_regclass(%s)"

    def check() -> bool:
        return int(raw(dsn, query, f'"{schema}".steps')[0][0]) == count

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


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


@asynccontextmanager
async def opened(
    dsn: str, route: str | None = None, **options: Any
) -> AsyncIterator[PostgresStore]:
    async with (
        fresh_schema(dsn) as schema,
        await PostgresStore.open(route or dsn, schema=schema, pool_size=1, **options) as store,
    ):
        yield store


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[PostgresStore]:
    async with opened(dsn) as store:
        yield store


@pytest.fixture
def no_cancel_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server never gets a cancel request: a cancelled statement runs to its end."""
    monkeypatch.setattr(_pg_exec, "cancel_of", lambda conn: lambda: None)


@pytest.mark.parametrize("before", [0, 2], ids=["first", "in-sequence"])
async def test_a_pending_cancellation_sends_nothing(
    store: PostgresStore, dsn: str, before: int
) -> None:
    for index in range(before):
        await store.append(step(index))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.append(step(before))
    assert scope.cancelled_caught
    assert stored(dsn, store.schema) == list(range(before))
    await store.append(step(before + 1))
    assert stored(dsn, store.schema) == [*range(before), before + 1]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_pending_task_cancel_sends_nothing(store: PostgresStore, dsn: str) -> None:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await store.append(step(0))
    task.uncancel()
    assert stored(dsn, store.schema) == []
    await store.append(step(1))
    assert stored(dsn, store.schema) == [1]


@pytest.mark.parametrize(("anyio_backend", "source"), SOURCES)
async def test_cancelled_on_the_server_stores_nothing(
    store: PostgresStore, dsn: str, source: str
) -> None:
    caller = Caller(source, lambda: store.append(step(0)))
    with steps_locked(dsn, store.schema):
        async with anyio.create_task_group() as group:
            caller.start(group)
            await until_waiting(dsn, store.schema, 1)
            caller.cancel()
            await until(lambda: caller.done)
    assert caller.events == raised(source)
    assert stored(dsn, store.schema) == []
    await store.append(step(1))
    assert stored(dsn, store.schema) == [1]


@pytest.mark.usefixtures("no_cancel_requests")
@pytest.mark.parametrize(("anyio_backend", "source"), SOURCES)
async def test_committed_despite_the_cancel_returns(
    store: PostgresStore, dsn: str, source: str
) -> None:
    """The statement commits once the lock is released; the call returns and the
    cancellation lands after it."""
    caller = Caller(source, lambda: store.append(step(0)))
    with steps_locked(dsn, store.schema) as locker:
        async with anyio.create_task_group() as group:
            caller.start(group)
            await until_waiting(dsn, store.schema, 1)
            caller.cancel()
            with count_futures() as made:
                await anyio.sleep(0.05)  # a cancelled scope keeps cancelling: no spinning
            assert made[0] < 10
            assert caller.events == []  # still waiting for the statement
            locker.commit()
            await until(lambda: caller.done)
    assert caller.events == ["returned None", *raised(source)]
    assert stored(dsn, store.schema) == [0]


@asynccontextmanager
async def _lets_others_run() -> AsyncIterator[None]:
    """Asserts the block is a checkpoint: trio's own check, or (asyncio, whose ready
    queue is first in, first out) another task ran meanwhile."""
    if sniffio.current_async_library() == "trio":
        with trio.testing.assert_checkpoints():
            yield
        return
    turns = [0]

    async def count() -> None:
        while True:
            turns[0] += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(count)
        await anyio.lowlevel.checkpoint()
        seen = turns[0]
        yield
        assert turns[0] > seen, "no other task ran"
        group.cancel_scope.cancel()


async def test_appends_in_sequence_are_each_a_checkpoint(store: PostgresStore, dsn: str) -> None:
    for index in range(6):
        async with _lets_others_run():
            await store.append(step(index))
    assert stored(dsn, store.schema) == list(range(6))


async def test_close_waits_for_an_append_under_way(store: PostgresStore, dsn: str) -> None:
    closed = threading.Event()

    async def close() -> None:
        await store.aclose()
        closed.set()

    with steps_locked(dsn, store.schema) as locker:
        async with anyio.create_task_group() as group:
            group.start_soon(store.append, step(0))
            await until_waiting(dsn, store.schema, 1)
            group.start_soon(close)
            await anyio.sleep(0.1)
            assert not closed.is_set()
            locker.commit()
    assert closed.is_set()
    assert stored(dsn, store.schema) == [0]
    with pytest.raises(StoreClosedError):
        await store.append(step(1))


@pytest.fixture
def proxy(dsn: str) -> Iterator[CuttingProxy]:
    with cutting_proxy(dsn) as cutter:
        yield cutter


@pytest.fixture
async def via_proxy(dsn: str, proxy: CuttingProxy) -> AsyncIterator[PostgresStore]:
    routed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    async with opened(dsn, routed, pool_timeout=2) as store:
        yield store


async def test_a_lost_append_whose_retry_fails_is_unavailable(
    via_proxy: PostgresStore, dsn: str, proxy: CuttingProxy
) -> None:
    store = via_proxy
    proxy.refusing = True  # no new connection,
    proxy.cut_clients()  # and no old one
    with anyio.fail_after(20), pytest.raises(StoreUnavailableError):
        await store.append(step(0))
    assert stored(dsn, store.schema) == []


@pytest.mark.usefixtures("no_cancel_requests")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_cancel_absorbed_before_a_failed_retry_still_lands(
    via_proxy: PostgresStore, dsn: str, proxy: CuttingProxy
) -> None:
    """Cancelled mid-statement, the connection is then lost and the retry finds no server:
    the call raises StoreUnavailableError and the Task.cancel() it absorbed still lands."""
    store, events = via_proxy, []

    async def call() -> None:
        try:
            await store.append(step(0))
        except StoreUnavailableError:
            events.append("unavailable")
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            events.append("cancelled")

    with steps_locked(dsn, store.schema):
        task = asyncio.get_running_loop().create_task(call())
        await until_waiting(dsn, store.schema, 1)
        proxy.refusing = True
        task.cancel()
        await anyio.sleep(0.1)
        proxy.cut_clients()
        with anyio.fail_after(20):
            await task
    assert events == ["unavailable", "cancelled"]
