"""PostgresStore: no call waits for a worker or a connection longer than ``pool_timeout``.

Another connection holds a table lock for several times ``pool_timeout``;
calls that need a worker while every worker is stuck behind that lock fail
with ``StoreUnavailableError`` saying what they waited for, within about
``pool_timeout``, and nothing happened. The store works once the lock is gone.
These run against the real server, so they take real (sub-second) time.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
import trio
import trio.testing
from _sql_support import fresh_schema, occupy_worker

from agentloop import RunStep, Session, StoreUnavailableError
from agentloopsql import PostgresStore

POOL_TIMEOUT = 0.5
HELD = 8 * POOL_TIMEOUT  # how long the other connection keeps its lock at most
SLACK = 1.0  # a loaded machine's scheduling delay on top of pool_timeout


@pytest.fixture
async def schema(postgres_dsn: str) -> AsyncIterator[str]:
    async with fresh_schema(postgres_dsn) as name:
        yield name


def blocked_on(dsn: str, schema: str, table: str) -> int:
    """How many backends wait for a lock on ``schema.table``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = to_regclass(%s)",
            (f'"{schema}".{table}',),
        ).fetchone()
    return int(row[0]) if row is not None else 0


async def until_blocked(dsn: str, schema: str, count: int) -> None:
    with trio.fail_after(10):
        while await trio.to_thread.run_sync(blocked_on, dsn, schema, "steps") < count:  # noqa: ASYNC110 (polls the server)
            await trio.sleep(0.02)


async def timed_failure(call: Callable[[], Awaitable[Any]]) -> tuple[StoreUnavailableError, float]:
    """Run ``call``, which must raise StoreUnavailableError; the error and how long it took."""
    start = trio.current_time()
    with pytest.raises(StoreUnavailableError) as caught:
        await call()
    return caught.value, trio.current_time() - start


async def with_steps_locked(
    dsn: str, schema: str, pool_size: int, check: Callable[[PostgresStore], Awaitable[None]]
) -> PostgresStore:
    """Open a store, block its ``pool_size`` workers behind a lock on its steps, run ``check``.

    Each worker is stuck in a read of the steps (reads never share a batch).

        The lock is released after ``check``, or after ``HELD`` seconds at the latest
        (so a store that waits unbounded makes ``check`` fail rather than hang).
    """
    pg = await PostgresStore.open(dsn, schema=schema, pool_size=pool_size, pool_timeout=0.5)
    await pg.append(RunStep("blocked", 0, "user"))
    read: list[int] = []

    async def blocked_read() -> None:
        read.append(len(await pg.all("blocked")))

    locker = await trio.to_thread.run_sync(psycopg.connect, dsn)
    try:
        await trio.to_thread.run_sync(
            locker.execute, f'LOCK TABLE "{schema}".steps IN ACCESS EXCLUSIVE MODE'
        )
        async with trio.open_nursery() as nursery:
            for _ in range(pool_size):
                nursery.start_soon(blocked_read)
            await until_blocked(dsn, schema, pool_size)

            async def release_later() -> None:
                await trio.sleep(HELD)
                await trio.to_thread.run_sync(locker.rollback)

            async with trio.open_nursery() as timer:
                timer.start_soon(release_later)
                await check(pg)
                timer.cancel_scope.cancel()
            await trio.to_thread.run_sync(locker.rollback)  # the reads now complete
        assert read == [1] * pool_size
    finally:
        locker.close()
    return pg


def assert_bounded(error: StoreUnavailableError, took: float) -> None:
    message = str(error)
    assert message.startswith("no PostgreSQL connection was free within pool_timeout (0.5 s)")
    assert "nothing was done" in message
    assert POOL_TIMEOUT - 0.05 <= took <= POOL_TIMEOUT + SLACK, took


@pytest.mark.parametrize("pool_size", [1, 2])
async def test_read_behind_locked_writers_fails_within_pool_timeout(
    postgres_dsn: str, schema: str, pool_size: int
) -> None:
    """Every worker is stuck on the lock: a read the workers run (``exists``) of an
    unlocked table fails after pool_timeout, saying it waited for a worker; nothing
    is lost once the lock goes. A short read (``get``) is still answered, on the
    store's inline connection."""

    async def check(pg: PostgresStore) -> None:
        assert await pg.get("other") == Session("other")
        error, took = await timed_failure(lambda: pg.exists("other"))
        assert "waited" in str(error)
        assert "for a worker" in str(error)
        assert_bounded(error, took)

    async with await with_steps_locked(postgres_dsn, schema, pool_size, check) as pg:
        assert await pg.get("other") == Session("other")


async def test_every_queued_call_fails_within_its_own_bound(postgres_dsn: str, schema: str) -> None:
    """Several calls queued one after another each fail about pool_timeout after they were
    made, not one pool_timeout after another; none of them happened."""

    async def check(pg: PostgresStore) -> None:
        took: dict[str, float] = {}

        async def one(name: str, call: Callable[[], Awaitable[Any]]) -> None:
            error, took[name] = await timed_failure(call)
            assert_bounded(error, took[name])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "put", lambda: pg.put(Session("p", model="m")))
            await trio.sleep(0.1)
            nursery.start_soon(one, "exists", lambda: pg.exists("p"))
            await trio.sleep(0.1)
            nursery.start_soon(one, "update", lambda: pg.update_data("u", "{}"))
        assert sorted(took) == ["exists", "put", "update"]

    async with await with_steps_locked(postgres_dsn, schema, 1, check) as pg:
        assert not await pg.exists("p")
        assert not await pg.exists("u")


async def test_wait_for_a_connection_is_bounded(postgres_dsn: str, schema: str) -> None:
    """A free worker that finds no free connection (the pool's one connection is out, as
    while the pool replaces a broken one) gives up after pool_timeout, saying so (a read
    the workers run: ``exists``)."""
    async with await PostgresStore.open(
        postgres_dsn, schema=schema, pool_size=1, pool_timeout=POOL_TIMEOUT
    ) as pg:
        taken = pg._pool.getconn()
        try:
            error, took = await timed_failure(lambda: pg.exists("s"))
        finally:
            pg._pool.putconn(taken)
        assert "for a connection" in str(error)
        assert isinstance(error.cause, Exception)
        assert_bounded(error, took)
        assert await pg.get("s") == Session("s")


async def watchdog_waiting(pg: PostgresStore) -> None:
    """Return once the store's watchdog thread sleeps in its condition again."""
    watch = pg._workers._watch
    assert watch is not None
    with trio.fail_after(5):
        while not watch._waiters:  # type: ignore[attr-defined]  # noqa: ASYNC110 (a thread)
            await trio.sleep(0.01)


async def test_aclose_is_not_held_by_the_watchdog(postgres_dsn: str, schema: str) -> None:
    """A call queued while aclose starts runs, and aclose ends as soon as it has: the
    watchdog timing that call's wait does not sleep out its pool_timeout."""
    pg = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1, pool_timeout=30)
    gate = threading.Event()
    found: list[bool] = []
    closed = trio.Event()

    async def get() -> None:
        found.append(await pg.exists("s"))  # a read the workers run (get may run inline)

    async def close() -> None:
        await pg.aclose()
        closed.set()

    async with trio.open_nursery() as nursery:
        await occupy_worker(pg, nursery, gate)
        nursery.start_soon(get)
        await trio.testing.wait_all_tasks_blocked()
        assert len(pg._workers._queue) == 1
        nursery.start_soon(close)
        await trio.testing.wait_all_tasks_blocked()
        await watchdog_waiting(pg)  # it has seen the close and waits for the call again
        gate.set()
        with trio.fail_after(5):  # the watchdog's wait would be 30 s
            await closed.wait()
    assert found == [False]
