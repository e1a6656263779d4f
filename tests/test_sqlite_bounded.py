"""SqliteStore on a file another connection keeps locked: every wait stays within its bound.

These tests wait for real SQLite locks, so they run on the real clock; the
bounds they check are generous against a loaded machine but far below the
``busy_timeout`` a call would otherwise wait out.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from _sql_support import occupy_worker

from agentloop import (
    FinalizeSummary,
    Loop,
    LoopConfig,
    Model,
    ModelReply,
    ModelRequest,
    RunStatus,
    RunStep,
    ScriptedModel,
    Session,
    StoreError,
    StoreUnavailableError,
)
from agentloopsql import SqliteStore
from agentloopsql._workers import Read

SLACK = 1.0  # scheduling delay allowed on a loaded machine; every bound below is far from 5 s
LONG_BUSY = 10.0  # a busy_timeout no test may wait out


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "store.db")


def step(session: str, index: int) -> RunStep:
    return RunStep(session, index, "tool_result", content=f"step {index}")


@contextmanager
def write_locked(path: str) -> Iterator[sqlite3.Connection]:
    """Another connection holds ``path``'s write lock (``BEGIN IMMEDIATE``) until the block ends."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield other
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


def release(other: sqlite3.Connection) -> None:
    if other.in_transaction:
        other.execute("ROLLBACK")


WRITES: dict[str, Callable[[SqliteStore], Awaitable[object]]] = {
    "append": lambda store: store.append(step("s", 0)),
    "update_data": lambda store: store.update_data("s", '{"a": 1}'),
    "put": lambda store: store.put(Session("s", model="m")),
    "finalize": lambda store: store.finalize("s", FinalizeSummary(status="completed")),
    "delete_session": lambda store: store.delete_session("s"),
}


async def assert_untouched(store: SqliteStore) -> None:
    assert await store.all("s") == []
    assert not await store.exists("s")


class TestCancelledWhileLocked:
    @pytest.mark.parametrize("name", list(WRITES))
    async def test_returns_promptly_and_writes_nothing(self, db: str, name: str) -> None:
        """A write waiting for another connection's lock, cancelled at 0.2 s, did nothing."""
        async with await SqliteStore.open(db, busy_timeout=LONG_BUSY) as store:
            with write_locked(db):
                started = time.monotonic()
                with trio.move_on_after(0.2) as scope:
                    await WRITES[name](store)
                elapsed = time.monotonic() - started
            assert scope.cancelled_caught
            assert elapsed < 0.2 + SLACK
            await assert_untouched(store)
            await store.append(step("s", 1))  # the store is still usable
            assert [s.step_index for s in await store.all("s")] == [1]

    async def test_only_the_cancelled_caller_leaves_its_batch(self, db: str) -> None:
        """Two appends wait for the lock in one batch: the cancelled one leaves, one commits."""
        async with await SqliteStore.open(db, busy_timeout=LONG_BUSY) as store:
            with write_locked(db) as other:
                gate = threading.Event()
                cancelled_scope = trio.CancelScope()
                outcomes: dict[str, float] = {}
                started = time.monotonic()

                left = trio.Event()

                async def cancelled_append() -> None:
                    with cancelled_scope:
                        await store.append(step("s", 0))
                        outcomes["cancelled returned"] = 0.0
                    outcomes["cancelled"] = time.monotonic() - started
                    left.set()

                async def kept_append() -> None:
                    await store.append(step("s", 1))
                    outcomes["kept"] = time.monotonic() - started

                async with trio.open_nursery() as nursery:
                    await occupy_worker(store, nursery, gate)
                    nursery.start_soon(cancelled_append)
                    nursery.start_soon(kept_append)
                    await trio.testing.wait_all_tasks_blocked()
                    assert len(store._workers._queue) == 2
                    gate.set()  # the worker takes both appends as one batch, which waits
                    for _ in range(1000):
                        if not store._workers._queue:
                            break
                        await trio.sleep(0.005)
                    await trio.sleep(0.05)
                    cancelled_scope.cancel()
                    with trio.fail_after(SLACK):
                        await left.wait()
                    assert "kept" not in outcomes  # still waiting for the lock
                    release(other)
            assert set(outcomes) == {"cancelled", "kept"}
            assert [s.step_index for s in await store.all("s")] == [1]


def busy_error() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database is locked")
    exc.sqlite_errorcode = 5  # as SQLite sets it for SQLITE_BUSY
    return exc


class TestBatchWaitingForALock:
    async def test_jobs_that_ran_are_answered_before_the_wait(self, db: str) -> None:
        """In a batch, a read that ran returns while another read still waits for its lock."""
        async with await SqliteStore.open(db, busy_timeout=LONG_BUSY) as store:
            unlocked = threading.Event()
            tries: list[int] = []

            def locked_read(conn: sqlite3.Connection) -> str:
                tries.append(1)
                if not unlocked.is_set():
                    raise busy_error()
                return "waited"

            answers: list[str] = []
            first = trio.Event()

            async def read(fn: Callable[[sqlite3.Connection], str]) -> None:
                answers.append(await store._workers.call(Read(fn)))
                first.set()

            gate = threading.Event()
            async with trio.open_nursery() as nursery:
                await occupy_worker(store, nursery, gate)
                nursery.start_soon(read, lambda conn: "at once")
                nursery.start_soon(read, locked_read)
                await trio.testing.wait_all_tasks_blocked()
                assert len(store._workers._queue) == 2
                gate.set()
                with trio.fail_after(SLACK):
                    await first.wait()
                await trio.sleep(0.1)
                assert answers == ["at once"]
                assert len(tries) > 1  # retried while locked
                unlocked.set()
            assert answers == ["at once", "waited"]


class TestBusyTimeoutHonoured:
    async def test_uncancelled_write_fails_after_busy_timeout(self, db: str) -> None:
        """Nobody cancels: the write waits busy_timeout, then names the file and the lock."""
        async with await SqliteStore.open(db, busy_timeout=0.3) as store:
            with write_locked(db):
                started = time.monotonic()
                with pytest.raises(StoreUnavailableError) as caught:
                    await store.append(step("s", 0))
                elapsed = time.monotonic() - started
            message = str(caught.value)
            assert message.startswith("SQLite failed: database is locked: another connection")
            assert repr(db) in message
            assert "busy_timeout (0.3 s)" in message
            assert "did nothing" in message
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            assert 0.3 <= elapsed < 0.3 + SLACK
            await assert_untouched(store)

    async def test_lock_released_within_busy_timeout(self, db: str) -> None:
        """A lock released before busy_timeout passes: the waiting write commits."""
        async with await SqliteStore.open(db, busy_timeout=LONG_BUSY) as store:
            with write_locked(db) as other:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(store.append, step("s", 0))
                    await trio.sleep(0.3)
                    release(other)
            assert [s.step_index for s in await store.all("s")] == [0]


def loop_on(store: SqliteStore, run_timeout: float = 0.5, model: Model | None = None) -> Loop:
    """A one-reply Loop (``lease_wait`` 0.5 s, ``finalize_timeout`` 1 s)."""
    config = LoopConfig(run_timeout=run_timeout, finalize_timeout=1.0, lease_wait=0.5)
    if model is None:
        model = ScriptedModel([ModelReply(content="hello")])
    return Loop(model=model, steps=store, sessions=store, config=config)


class LockingModel:
    """A one-reply model that takes ``path``'s write lock (``BEGIN IMMEDIATE``, another
    connection) before it answers: the run holds its lease and its user step is stored."""

    def __init__(self, path: str) -> None:
        self.inner = ScriptedModel([ModelReply(content="hello")])
        self.other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.other.execute("BEGIN IMMEDIATE")
        return await self.inner.complete(request)


class TestLoopOnLockedStore:
    async def test_run_times_out_within_its_bounds(self, db: str) -> None:
        """Locked past run_timeout, released within finalize_timeout: status timeout, on time."""
        async with await SqliteStore.open(db, busy_timeout=0.8) as store:
            model = LockingModel(db)
            loop = loop_on(store, model=model)
            started = time.monotonic()
            async with trio.open_nursery() as nursery:
                result = None

                async def run() -> None:
                    nonlocal result
                    result = await loop.run("s", "hi")

                nursery.start_soon(run)
                # Past run_timeout and the response append's busy_timeout, well
                # before the recording's: 0.5 + 0.8 s.
                await trio.sleep(0.9)
                release(model.other)
            elapsed = time.monotonic() - started
            assert result is not None
            assert result.status is RunStatus.timeout
            assert elapsed < 1.5 + SLACK
            final = await store.final("s")
            assert final is not None
            assert final.status is RunStatus.timeout
            kinds = [s.step_type.value for s in await store.all("s")]
            assert kinds == ["user", "error"]  # the response step was cancelled whole

    async def test_run_locked_throughout_gives_up_at_its_bound(self, db: str) -> None:
        """Locked for good mid-run: the run ends after run_timeout + finalize_timeout (and the
        lease release's own finalize_timeout), not busy_timeout."""
        async with await SqliteStore.open(db, busy_timeout=LONG_BUSY) as store:
            model = LockingModel(db)
            loop = loop_on(store, model=model)
            started = time.monotonic()
            try:
                with pytest.raises(StoreError, match="did not finish within finalize_timeout"):
                    await loop.run("s", "hi")
                elapsed = time.monotonic() - started
            finally:
                release(model.other)
            assert elapsed < 0.5 + 1.0 + 1.0 + SLACK
            assert [s.step_type.value for s in await store.all("s")] == ["user"]
            assert await store.final("s") is None

    async def test_lease_wait_bounds_acquiring_on_a_locked_store(self, db: str) -> None:
        """Locked before the run: acquiring its lease gives up at lease_wait, not busy_timeout,
        having written nothing."""
        async with await SqliteStore.open(db, busy_timeout=LONG_BUSY) as store:
            with write_locked(db):
                started = time.monotonic()
                with pytest.raises(StoreError, match="did not finish within lease_wait"):
                    await loop_on(store).run("s", "hi")
                elapsed = time.monotonic() - started
            assert elapsed < 0.5 + SLACK
            await assert_untouched(store)

    async def test_cancelled_run_on_store_locked_by_another_process(self, db: str) -> None:
        """A run under move_on_after(0.2), the file locked by another process, is cancelled."""
        async with await SqliteStore.open(db, busy_timeout=LONG_BUSY) as store:
            holder = await trio.lowlevel.open_process(
                [sys.executable, "-c", LOCK_HOLDER, db], stdin=-1, stdout=-1
            )
            try:
                assert holder.stdout is not None
                assert holder.stdin is not None
                assert await holder.stdout.receive_some(7) == b"locked\n"
                started = time.monotonic()
                with trio.move_on_after(0.2) as scope:
                    await loop_on(store, run_timeout=30.0).run("s", "hi")
                elapsed = time.monotonic() - started
            finally:
                if holder.stdin is not None:
                    await holder.stdin.send_all(b"go\n")
                with trio.fail_after(10):
                    await holder.wait()
            assert scope.cancelled_caught
            assert elapsed < 0.2 + 1.0 + SLACK  # the shielded finalize gets finalize_timeout
            await assert_untouched(store)


LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
sys.stdout.write("locked\\n"); sys.stdout.flush()
sys.stdin.readline()
conn.execute("ROLLBACK")
"""
