"""PostgresStore's lone appends run on the event loop thread; everything else as before."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
import pytest
import sniffio
import trio
import trio.testing
from _pg_fast_kit import (
    fast_pid,
    fast_store,
    raw,
    step,
    steps_locked,
    stored,
    until_waiting,
)
from _pg_private import CuttingProxy, cutting_proxy
from _sql_anyio import until
from _sql_support import fresh_schema, pg_dsn
from _sql_support import occupy_worker as occupy

from agentloop import LeaseLostError, StoreClosedError, StoreError, StoreUnavailableError
from agentloopsql import PostgresStore, _pg_fast

pytestmark = pytest.mark.anyio


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[PostgresStore]:
    async with fast_store(dsn, pool_size=2) as opened:
        yield opened


async def test_lone_appends_take_the_fast_path(store: PostgresStore, dsn: str) -> None:
    before = store._fast.calls
    for index in range(5):
        await store.append(step(index))
    assert store._fast.calls == before + 5
    assert stored(dsn, store.schema) == [0, 1, 2, 3, 4]


async def test_a_fenced_append_takes_the_fast_path(store: PostgresStore, dsn: str) -> None:
    lease = await store.acquire_lease("s", "me", 60)
    assert lease is not None
    before = store._fast.calls
    await store.fenced(lease).append(step(0))
    await store.fenced(lease).append(step(1, "other"))  # another session: a plain append
    assert store._fast.calls == before + 2
    assert stored(dsn, store.schema) == [0]
    assert stored(dsn, store.schema, "other") == [1]


async def test_a_fenced_fast_append_of_a_lost_lease_stores_nothing(store: PostgresStore) -> None:
    lease = await store.acquire_lease("s", "me", 0.05)
    assert lease is not None
    await anyio.sleep(0.1)
    assert await store.acquire_lease("s", "you", 60) is not None
    before = store._fast.calls
    with pytest.raises(LeaseLostError):
        await store.fenced(lease).append(step(0))
    never = lease.__class__(lease.session_id, "me", lease.token + 7, lease.expires_at)
    with pytest.raises(ValueError, match="granted"):
        await store.fenced(never).append(step(1))
    assert store._fast.calls == before + 2
    assert await store.all("s") == []
    kept = store._fast._conn
    await store.append(step(2))
    assert store._fast._conn is kept  # a refused lease is no reason to drop the connection


async def test_fast_appends_are_prepared_on_first_use(store: PostgresStore) -> None:
    lease = await store.acquire_lease("s", "me", 60)
    assert lease is not None
    await store.append(step(0))
    await store.fenced(lease).append(step(1))
    conn = store._fast.take()
    assert conn is not None
    try:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%INSERT INTO%'"
        )
        assert await cursor.fetchone() == (2,)
    finally:
        store._fast._give_back(conn, keep=True)


async def test_a_held_fast_connection_sends_appends_to_the_workers(store: PostgresStore) -> None:
    conn = store._fast.take()
    assert conn is not None
    try:
        before = store._fast.calls
        await store.append(step(0))
        assert store._fast.calls == before
    finally:
        store._fast._give_back(conn, keep=True)
    await store.append(step(1))
    assert store._fast.calls == before + 1
    assert [s.step_index for s in await store.all("s")] == [0, 1]


async def test_appends_join_busy_workers(store: PostgresStore) -> None:
    """While a worker runs a call, an append takes the worker path (group commit there)."""
    gate = threading.Event()
    before = store._fast.calls
    async with anyio.create_task_group() as group:
        await occupy(store, group, gate)  # one of the two workers
        try:
            await store.append(step(0))  # the other one
        finally:
            gate.set()
    assert store._fast.calls == before
    assert [s.step_index for s in await store.all("s")] == [0]


async def test_an_append_made_while_another_call_is_under_way_takes_the_workers(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted per store, not only by busy workers: callers woken together by one group
    commit (workers idle, none returned yet) must not split off one fast append."""
    monkeypatch.setattr(type(store._workers), "idle", property(lambda self: True))
    gate = threading.Event()
    before = store._fast.calls
    async with anyio.create_task_group() as group:
        await occupy(store, group, gate)  # a call under way
        try:
            await store.append(step(0))
        finally:
            gate.set()
    assert store._fast.calls == before
    await store.append(step(1))  # alone again
    assert store._fast.calls == before + 1
    assert [s.step_index for s in await store.all("s")] == [0, 1]


async def test_appends_started_together_all_take_the_workers(store: PostgresStore) -> None:
    """A burst of tasks on a store that was not appending in sequence: the first does
    not go fast alone (it would commit out of step with the others' group commits)."""
    before = store._fast.calls
    async with anyio.create_task_group() as group:
        for task in range(8):
            group.start_soon(store.append, step(0, f"t{task}"))
    assert store._fast.calls == before
    await store.append(step(1, "t0"))
    assert store._fast.calls == before + 1


async def test_a_burst_after_appends_in_sequence_all_take_the_workers(
    store: PostgresStore,
) -> None:
    """One task's appends in sequence skip the schedule point before deciding; the
    tasks of a burst that follows are other tasks: each still counts itself in first."""
    for index in range(3):
        await store.append(step(index, "seq"))
    before = store._fast.calls
    async with anyio.create_task_group() as group:
        for task in range(8):
            group.start_soon(_append_five, store, f"t{task}")
    assert store._fast.calls == before


async def _append_five(store: PostgresStore, session: str) -> None:
    for index in range(5):
        await store.append(step(index, session))


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


async def test_appends_in_sequence_are_each_a_checkpoint(store: PostgresStore) -> None:
    before = store._fast.calls
    for index in range(6):
        async with _lets_others_run():
            await store.append(step(index))
    assert store._fast.calls == before + 6


async def test_a_fast_append_answered_before_any_wait_is_still_a_checkpoint(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the answer be there before the first wait, the call still lets others run."""
    for index in range(2):
        await store.append(step(index))  # appends in sequence: no schedule point before

    async def answered_at_once(conn: Any, work: Any) -> tuple[bool, None]:
        return True, None

    monkeypatch.setattr(store._fast, "_run", answered_at_once)
    before = store._fast.calls
    async with _lets_others_run():
        await store.append(step(2))
    assert store._fast.calls == before + 1


async def test_a_refused_row_fails_alike_on_both_paths(store: PostgresStore, dsn: str) -> None:
    raw(dsn, f"ALTER TABLE \"{store.schema}\".steps ADD CONSTRAINT no_bad CHECK (content <> 'bad')")
    kept = store._fast._conn
    with pytest.raises(StoreError) as fast:
        await store.append(step(0, content="bad"))
    assert store._fast._conn is kept  # the connection is fine: kept
    conn = store._fast.take()
    assert conn is not None
    try:
        with pytest.raises(StoreError) as worker:
            await store.append(step(0, content="bad"))
    finally:
        store._fast._give_back(conn, keep=True)
    assert type(fast.value) is type(worker.value) is StoreError
    assert str(fast.value) == str(worker.value)
    assert "PostgreSQL refused append" in str(fast.value)
    await store.append(step(1))
    assert [s.step_index for s in await store.all("s")] == [1]


async def test_a_terminated_fast_connection_is_settled_and_replaced(
    store: PostgresStore, dsn: str
) -> None:
    pid = fast_pid(store)
    raw(dsn, "SELECT pg_terminate_backend(%s)", pid)
    before = store._fast.calls
    await store.append(step(0))  # lost on the fast path, then stored by the retry
    assert store._fast.calls == before + 1
    assert stored(dsn, store.schema) == [0]
    await store.append(step(1))  # the worker path while the fast connection reconnects
    await until(store._fast.ready)
    assert fast_pid(store) != pid
    await store.append(step(2))
    assert stored(dsn, store.schema) == [0, 1, 2]


@pytest.fixture
def proxy(dsn: str) -> Iterator[CuttingProxy]:
    with cutting_proxy(dsn) as cutter:
        yield cutter


@pytest.fixture
async def via_proxy(dsn: str, proxy: CuttingProxy) -> AsyncIterator[PostgresStore]:
    routed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    async with fast_store(dsn, route=routed, pool_size=1, pool_timeout=2) as opened:
        yield opened


@pytest.mark.parametrize("fenced", [False, True], ids=["plain", "fenced"])
async def test_a_lost_fast_append_racing_its_retry_is_stored_once(
    via_proxy: PostgresStore, dsn: str, proxy: CuttingProxy, fenced: bool
) -> None:
    """Cut while the server still holds the statement: the retry queues behind it; once."""
    store = via_proxy
    lease = await store.acquire_lease("s", "me", 60)
    assert lease is not None
    writer = store.fenced(lease) if fenced else store
    before = store._fast.calls
    with steps_locked(dsn, store.schema) as locker:
        async with anyio.create_task_group() as group:
            group.start_soon(writer.append, step(0))
            await until_waiting(dsn, store.schema, 1)
            assert store._fast.calls == before + 1
            proxy.cut_clients()
            await until_waiting(dsn, store.schema, 2)  # the retry, after "did it land?" said no
            locker.commit()
    assert stored(dsn, store.schema) == [0]
    await writer.append(step(1))  # and the store goes on
    assert stored(dsn, store.schema) == [0, 1]


async def test_a_lost_fast_append_whose_retry_fails_is_unavailable(
    via_proxy: PostgresStore, dsn: str, proxy: CuttingProxy
) -> None:
    store = via_proxy
    proxy.refusing = True  # no new connection,
    proxy.cut_clients()  # and no old one
    with anyio.fail_after(20), pytest.raises(StoreUnavailableError):
        await store.append(step(0))
    assert stored(dsn, store.schema) == []


async def test_close_waits_for_a_fast_append_under_way(store: PostgresStore, dsn: str) -> None:
    conn = store._fast._conn
    assert conn is not None
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
    assert conn.closed
    assert stored(dsn, store.schema) == [0]
    assert not any(thread.is_alive() for thread in store._fast._threads)
    with pytest.raises(StoreClosedError):
        await store.append(step(1))


async def test_a_failed_connect_leaves_appends_on_the_workers(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(*args: Any) -> Any:
        raise psycopg.OperationalError("refused (test)")

    monkeypatch.setattr(_pg_fast, "_open", refuse)
    async with fresh_schema(dsn) as schema, await PostgresStore.open(dsn, schema=schema) as store:
        for index in range(3):
            await store.append(step(index))
        await until(lambda: not store._fast._connecting)
        assert store._fast.calls == 0
        assert not store._fast.ready()
        assert store._fast._retry_at > 0  # the next attempt waits RECONNECT_AFTER
        assert stored(dsn, schema) == [0, 1, 2]


async def test_the_fast_connection_has_the_pool_settings(dsn: str) -> None:
    async with fast_store(dsn, statement_timeout=1.5) as store:
        conn = store._fast.take()
        assert conn is not None
        try:
            shown = []
            for setting in ("statement_timeout", "TimeZone", "application_name"):
                cursor = await conn.execute(f"SHOW {setting}")
                shown.append((await cursor.fetchone() or [None])[0])
        finally:
            store._fast._give_back(conn, keep=True)
        assert shown == ["1500ms", "UTC", "agentloopsql"]
        assert conn.autocommit


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_cancel_absorbed_before_a_failed_retry_still_lands(
    via_proxy: PostgresStore, dsn: str, proxy: CuttingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled mid-statement, the statement never ends, the retry finds no server: the
    call raises StoreUnavailableError and the Task.cancel() it absorbed still lands."""
    import asyncio

    from agentloopsql import _pg_wait

    monkeypatch.setattr(_pg_fast, "_cancel_safe", lambda conn: None)
    monkeypatch.setattr(_pg_wait, "SETTLE_BOUND", 0.2)
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
        await anyio.sleep(0.1)  # past the settle bound: the retry starts
        proxy.cut_clients()
        with anyio.fail_after(20):
            await task
    assert events == ["unavailable", "cancelled"]
