"""SQL store calls cancelled by every source: anyio scopes (trio, asyncio), Task.cancel, timeout.

A call cancelled while queued did nothing and raises; once a worker took it,
the caller waits: interrupted, it did nothing and raises; completed, it
returns and the cancellation lands at the caller's next checkpoint, with the
task's cancel count as its source left it.
"""

from __future__ import annotations

import random
import socket
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _sql_anyio import SOURCES, Caller, count_futures, raised, until
from _sql_support import SqlTarget, open_sql_store
from _sql_support import occupy_worker as occupy

from agentloop import RunStep
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql._workers import IdempotentWrite, Read

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize(("anyio_backend", "source"), SOURCES)]

Store = SqliteStore | PostgresStore


@pytest.fixture
async def store(sql_target: SqlTarget, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_sql_store(sql_target, tmp_path / "cancel.db", pool_size=1) as opened:
        yield opened


def step(index: int) -> RunStep:
    return RunStep("s", index, "tool_result")


def record_interrupts(store: Store) -> list[object]:
    """The jobs the store's executor is asked to interrupt, from now on."""
    executor: Any = store._workers._executor
    asked: list[object] = []
    interrupt = executor.interrupt

    def recording(job: object) -> None:
        asked.append(job)
        interrupt(job)

    executor.interrupt = recording
    return asked


async def test_cancelled_while_queued_did_nothing(store: Store, source: str) -> None:
    caller = Caller(source, lambda: store.append(step(0)))
    asked = record_interrupts(store)
    gate = threading.Event()
    async with anyio.create_task_group() as group:
        await occupy(store, group, gate)
        try:
            caller.start(group)
            await until(lambda: len(store._workers._queue) == 1)
            caller.cancel()
            await until(lambda: caller.done)
            assert len(store._workers._queue) == 0
        finally:
            gate.set()
    assert caller.events == raised(source)
    assert asked == []  # removed from the queue, never taken
    assert await store.all("s") == []
    await store.append(step(1))  # the store is still usable
    assert [s.step_index for s in await store.all("s")] == [1]


async def test_taken_and_completed_returns(store: Store, source: str) -> None:
    """A taken call the executor lets finish returns its result; the cancellation comes next."""
    started, gate = threading.Event(), threading.Event()
    ops: Any = store._ops

    def append_then_wait(conn: Any) -> str:
        ops.append(conn, step(3), 1)
        started.set()
        gate.wait()  # taken: the window between the write and the answer
        return "done"

    caller = Caller(source, lambda: store._workers.call(IdempotentWrite(append_then_wait)))
    asked = record_interrupts(store)
    async with anyio.create_task_group() as group:
        caller.start(group)
        try:
            await anyio.to_thread.run_sync(started.wait)
            caller.cancel()
            await until(lambda: len(asked) == 1)
            with count_futures() as made:
                await anyio.sleep(0.05)  # more loop passes: a cancelled scope keeps cancelling
            assert made[0] < 10  # the waiting caller is not woken on every pass (no spinning)
            assert caller.events == []  # still waiting for the worker
        finally:
            gate.set()
    assert caller.events == ["returned done", *raised(source)]
    assert [s.step_index for s in await store.all("s")] == [3]


async def test_sqlite_call_waiting_for_a_lock_is_interrupted(tmp_path: Path, source: str) -> None:
    """A taken SQLite write waiting for another connection's lock is dropped: it did nothing."""
    path = tmp_path / "locked.db"
    async with await SqliteStore.open(path) as store:
        caller = Caller(source, lambda: store.append(step(0)))
        asked = record_interrupts(store)
        locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            locker.execute("BEGIN IMMEDIATE")
            async with anyio.create_task_group() as group:
                caller.start(group)
                await until(lambda: store._workers._busy == 1)  # taken: waiting for the lock
                caller.cancel()
                await until(lambda: caller.done)
        finally:
            locker.rollback()
            locker.close()
        assert caller.events == raised(source)
        assert len(asked) == 1
        assert await store.all("s") == []


async def test_postgres_statement_cancelled_on_the_server(
    postgres_dsn: str, tmp_path: Path, source: str
) -> None:
    """A taken PostgreSQL statement blocked on a row lock is cancelled on the server."""
    import psycopg

    target = SqlTarget("postgres", postgres_dsn)
    async with open_sql_store(target, tmp_path, pool_size=1) as store:
        assert isinstance(store, PostgresStore)
        await store.update_data("x", '"before"')
        caller = Caller(source, lambda: store.update_data("x", '"during"'))
        asked = record_interrupts(store)
        locker = psycopg.connect(postgres_dsn)
        release = threading.Timer(10, locker.rollback)  # if the cancel failed: fail, not hang
        try:
            locker.execute(
                f'SELECT 1 FROM "{store.schema}".sessions WHERE id = %s FOR UPDATE', ("x",)
            )
            release.start()
            async with anyio.create_task_group() as group:
                caller.start(group)
                await until(lambda: store._workers._busy == 1)
                await anyio.sleep(0.1)  # the statement reaches the lock
                caller.cancel()
                await until(lambda: caller.done)
            assert caller.events == raised(source)
            assert len(asked) == 1
            locker.rollback()
        finally:
            release.cancel()
            locker.close()
        assert (await store.get("x")).data == '"before"'
        assert (await store.revision("x")) > 0
        assert (await store._workers.call(Read(lambda conn: 1))) == 1  # the connection still works


async def test_random_cancellation_is_all_or_nothing(store: Store, source: str) -> None:
    """8 tasks x 25 appends, each cancelled after a random delay: returned iff stored."""
    rng = random.Random(7)
    returned: dict[int, list[int]] = {task: [] for task in range(8)}

    async def writer(task: int) -> None:
        for index in range(25):

            async def append(task: int = task, index: int = index) -> None:
                await store.append(RunStep(f"t{task}", index, "tool_result"))
                returned[task].append(index)  # no checkpoint in between: it returned

            async with anyio.create_task_group() as group:
                caller = Caller(source, append)
                caller.start(group)
                for _ in range(rng.randrange(1, 6)):
                    await anyio.lowlevel.checkpoint()
                await anyio.sleep(rng.choice([0, 0, 0.002, 0.02]))
                if not caller.events:  # the call has not returned yet
                    caller.cancel()

    async with anyio.create_task_group() as group:
        for task in range(8):
            group.start_soon(writer, task)
    total = 0
    for task, indices in returned.items():
        assert [s.step_index for s in await store.all(f"t{task}")] == indices
        total += len(indices)
    assert 0 < total < 8 * 25  # both outcomes happened


async def test_cancelled_close_still_finishes(tmp_path: Path, source: str) -> None:
    """``aclose`` is shielded: cancelled, it still waits for the busy worker, then the
    cancellation lands at the closer's next checkpoint; the store ends closed."""
    store = await SqliteStore.open(tmp_path / "close.db")
    caller = Caller(source, store.aclose)
    gate = threading.Event()
    async with anyio.create_task_group() as group:
        await occupy(store, group, gate)
        try:
            caller.start(group)
            await anyio.sleep(0.05)  # the closer waits for the worker thread
            caller.cancel()
            await anyio.sleep(0.05)
            assert not caller.done
        finally:
            gate.set()
    assert caller.events == ["returned None", *raised(source)]
    assert not any(thread.is_alive() for thread in store._workers._threads)
    assert "closed" in repr(store)


async def test_cancelled_postgres_open_returns_promptly(source: str) -> None:
    """An open still connecting (to a server that never answers) is cancelled at once."""
    with socket.create_server(("127.0.0.1", 0)) as sock:  # accepts (backlog), never answers
        port = sock.getsockname()[1]
        caller = Caller(
            source,
            lambda: PostgresStore.open(
                f"postgresql://nobody@127.0.0.1:{port}/none?connect_timeout=60"
            ),
        )
        async with anyio.create_task_group() as group:
            caller.start(group)
            await anyio.sleep(0.2)
            caller.cancel()
            with anyio.fail_after(20):  # not the 60 s the connection attempt may take
                await until(lambda: caller.done)
    assert caller.events == raised(source)
