"""A fast-path append cancelled by every source, at each point it can be: all or nothing.

Before its statement is sent it did nothing. Once sent, the server is asked to
cancel it and the caller waits for its end: rolled back, the caller gets the
cancellation; committed anyway, the call returns and the cancellation lands
at the caller's next checkpoint. Either way the connection is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
import pytest
from _pg_fast_kit import fast_store, step, steps_locked, stored, until_waiting
from _sql_anyio import SOURCES, Caller, count_futures, raised, until
from _sql_support import pg_dsn

from agentloopsql import PostgresStore, _pg_fast, _pg_wait

pytestmark = pytest.mark.anyio


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[PostgresStore]:
    async with fast_store(dsn, pool_size=1) as opened:
        yield opened


@pytest.mark.parametrize("before", [0, 2], ids=["first", "in-sequence"])
async def test_a_pending_cancellation_sends_nothing(
    store: PostgresStore, dsn: str, before: int
) -> None:
    """Also between appends in sequence, which skip the schedule point before sending,
    not the cancellation point."""
    for index in range(before):
        await store.append(step(index))
    kept = store._fast._conn
    calls = store._fast.calls
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.append(step(before))
    assert scope.cancelled_caught
    assert store._fast.calls == calls  # landed at the call's checkpoint: nothing taken
    assert store._fast._conn is kept  # so the connection is kept
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


async def _cancel_while_blocked(store: PostgresStore, dsn: str, caller: Caller) -> None:
    """Start ``caller`` (a fast append), let it block on the locked table, cancel it."""
    before = store._fast.calls
    async with anyio.create_task_group() as group:
        caller.start(group)
        await until_waiting(dsn, store.schema, 1)
        assert store._fast.calls == before + 1
        caller.cancel()
        await until(lambda: caller.done)


@pytest.mark.parametrize(("anyio_backend", "source"), SOURCES)
async def test_cancelled_on_the_server_stores_nothing(
    store: PostgresStore, dsn: str, source: str
) -> None:
    conn = store._fast._conn
    assert conn is not None
    caller = Caller(source, lambda: store.append(step(0)))
    with steps_locked(dsn, store.schema):
        await _cancel_while_blocked(store, dsn, caller)
    assert caller.events == raised(source)
    assert stored(dsn, store.schema) == []
    await until(lambda: conn.closed)  # dropped: a late cancel request must hit nothing
    await store.append(step(1))
    assert stored(dsn, store.schema) == [1]


@pytest.mark.parametrize(("anyio_backend", "source"), SOURCES)
async def test_committed_despite_the_cancel_returns(
    store: PostgresStore, dsn: str, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server never gets the cancel request: the statement commits once the lock is
    released; the call returns and the cancellation lands after it."""
    monkeypatch.setattr(_pg_fast, "_cancel_safe", lambda conn: None)
    conn = store._fast._conn
    assert conn is not None
    caller = Caller(source, lambda: store.append(step(0)))
    with steps_locked(dsn, store.schema) as locker:
        before = store._fast.calls
        async with anyio.create_task_group() as group:
            caller.start(group)
            await until_waiting(dsn, store.schema, 1)
            assert store._fast.calls == before + 1
            caller.cancel()
            with count_futures() as made:
                await anyio.sleep(0.05)  # a cancelled scope keeps cancelling: no spinning
            assert made[0] < 10
            assert caller.events == []  # still waiting for the statement
            locker.commit()
            await until(lambda: caller.done)
    assert caller.events == ["returned None", *raised(source)]
    assert stored(dsn, store.schema) == [0]
    await until(lambda: conn.closed)


@pytest.mark.parametrize(("anyio_backend", "source"), SOURCES)
async def test_a_cancelled_statement_that_never_ends_is_settled_by_its_key(
    store: PostgresStore, dsn: str, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the settle bound the connection counts as lost: the retry on the pool finds
    the row not stored, inserts it again (queued behind the lost attempt), and it is
    stored once; the call returns, the cancellation lands after it."""
    monkeypatch.setattr(_pg_fast, "_cancel_safe", lambda conn: None)
    monkeypatch.setattr(_pg_wait, "SETTLE_BOUND", 0.2)
    caller = Caller(source, lambda: store.append(step(0)))
    with steps_locked(dsn, store.schema) as locker:
        async with anyio.create_task_group() as group:
            caller.start(group)
            await until_waiting(dsn, store.schema, 1)
            caller.cancel()
            await until_waiting(dsn, store.schema, 2)  # the retry queues behind the first
            assert caller.events == []
            locker.commit()
            await until(lambda: caller.done)
    assert caller.events == ["returned None", *raised(source)]
    assert stored(dsn, store.schema) == [0]
