"""SqliteStore: opening, schema, durability settings, group commit, cancellation."""

from __future__ import annotations

import sqlite3
import threading
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing
from _sql_support import expect_queued_append_cancelled, occupy_worker

from agentloop import (
    FinalizeSummary,
    RunStep,
    Session,
    SessionStore,
    StepStore,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    SupportsAclose,
    SupportsAll,
    SupportsDeleteSession,
    SupportsFinal,
    SupportsListSessions,
    SupportsPut,
)
from agentloopsql import SqliteStore
from agentloopsql._sqlite_schema import SCHEMA_VERSION
from agentloopsql._workers import IdempotentWrite, Read


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "store.db")


def step(session: str, index: int, content: str = "") -> RunStep:
    return RunStep(session, index, "tool_result", content=content)


class TestOpen:
    async def test_implements_every_protocol(self, db: str) -> None:
        """One object is a StepStore, a SessionStore and has every optional capability."""
        async with await SqliteStore.open(db) as store:
            for protocol in (
                StepStore,
                SessionStore,
                SupportsPut,
                SupportsFinal,
                SupportsAll,
                SupportsListSessions,
                SupportsDeleteSession,
                SupportsAclose,
            ):
                assert isinstance(store, protocol)

    async def test_memory_database(self) -> None:
        """':memory:' opens a private database that works like a file."""
        async with await SqliteStore.open(":memory:") as store:
            await store.append(step("s", 0))
            assert [s.step_index for s in await store.last_n("s", 5)] == [0]
            assert store.path == ":memory:"

    async def test_pragmas(self, db: str) -> None:
        """The file is in WAL mode, at the current schema version."""
        store = await SqliteStore.open(db)
        await store.aclose()
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION

    async def test_synchronous_setting(self, db: str) -> None:
        """The connection runs with the synchronous level asked for (FULL by default)."""
        for asked, level in ((None, 2), ("normal", 1), ("EXTRA", 3)):
            store = await (
                SqliteStore.open(db) if asked is None else SqliteStore.open(db, synchronous=asked)
            )
            got = await store._workers.call(
                Read(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0])
            )
            await store.aclose()
            assert got == level

    async def test_bad_arguments(self, db: str) -> None:
        """Bad open arguments raise TypeError/ValueError naming the argument."""
        with pytest.raises(TypeError, match=r"^path must be"):
            await SqliteStore.open(3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^path must name a file"):
            await SqliteStore.open("")
        with pytest.raises(ValueError, match=r"^synchronous must be one of"):
            await SqliteStore.open(db, synchronous="off")
        for bad in (-1, 0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=r"^busy_timeout must be a finite number"):
                await SqliteStore.open(db, busy_timeout=bad)

    async def test_unopenable_file(self, tmp_path: Path) -> None:
        """A path SQLite cannot open surfaces as StoreError (not 'retry later') with the cause."""
        with pytest.raises(StoreError) as info:
            await SqliteStore.open(str(tmp_path / "missing-dir" / "x.db"))
        assert isinstance(info.value.__cause__, sqlite3.Error)

    async def test_not_a_database(self, tmp_path: Path) -> None:
        """A file that is not SQLite is refused, not overwritten."""
        path = tmp_path / "junk.db"
        path.write_bytes(b"this is not a database" * 100)
        with pytest.raises(StoreError, match=r"it is not a SQLite database"):
            await SqliteStore.open(str(path))
        assert path.read_bytes().startswith(b"this is not a database")

    async def test_newer_schema_refused(self, db: str) -> None:
        """A file migrated by a newer agentloopsql is refused with StoreError, untouched."""
        with sqlite3.connect(db) as conn:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        with pytest.raises(StoreError, match=r"newer than this agentloopsql supports"):
            await SqliteStore.open(db)

    async def test_reopen_is_idempotent(self, db: str) -> None:
        """Opening an existing file again keeps its contents and migrates nothing."""
        async with await SqliteStore.open(db) as store:
            await store.append(step("s", 0, "kept"))
            await store.put(Session("s", model="m"))
        async with await SqliteStore.open(db) as again:
            assert [s.content for s in await again.all("s")] == ["kept"]
            assert (await again.get("s")).model == "m"

    async def test_concurrent_first_opens(self, tmp_path: Path) -> None:
        """Six stores opening one new file at once all succeed (one migrates); 10 files."""
        for round_ in range(10):
            db = str(tmp_path / f"new-{round_}.db")
            stores: list[SqliteStore] = []

            async def open_one(db: str = db, stores: list[SqliteStore] = stores) -> None:
                stores.append(await SqliteStore.open(db))

            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(open_one)
            for store in stores:
                await store.aclose()
            with sqlite3.connect(db) as conn:
                assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


class TestLocking:
    async def test_write_lock_held_too_long(self, db: str) -> None:
        """A write lock held past busy_timeout: StoreUnavailableError, nothing written."""
        async with await SqliteStore.open(db, busy_timeout=0.05) as store:
            other = sqlite3.connect(db, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            try:
                with pytest.raises(
                    StoreUnavailableError, match=r"^SQLite failed: database is locked"
                ):
                    await store.append(step("s", 0))
            finally:
                other.execute("ROLLBACK")
                other.close()
            assert await store.all("s") == []
            await store.append(step("s", 1))
            assert [s.step_index for s in await store.all("s")] == [1]


class TestClose:
    async def test_closed_store_raises(self, db: str) -> None:
        """After aclose every call raises StoreClosedError; aclose is idempotent."""
        store = await SqliteStore.open(db)
        await store.aclose()
        await store.aclose()
        with pytest.raises(StoreClosedError):
            await store.append(step("s", 0))
        with pytest.raises(StoreClosedError):
            await store.get("s")
        with pytest.raises(StoreClosedError):
            await store.update_data("s", "{}")

    async def test_close_finishes_queued_calls(self, db: str) -> None:
        """Appends still queued (the worker busy) when aclose starts run and commit."""
        store = await SqliteStore.open(db)
        gate = threading.Event()
        async with trio.open_nursery() as nursery:
            await occupy_worker(store, nursery, gate)
            for i in range(20):
                nursery.start_soon(store.append, step("s", i))
            await trio.testing.wait_all_tasks_blocked()
            assert len(store._workers._queue) == 20
            nursery.start_soon(store.aclose)
            await trio.testing.wait_all_tasks_blocked()
            gate.set()
        async with await SqliteStore.open(db) as again:
            assert len(await again.all("s")) == 20


class TestGroupCommit:
    async def test_concurrent_appends_lose_nothing(self, db: str) -> None:
        """16 tasks x 50 appends: all 800 land, each task's steps in its order."""
        async with await SqliteStore.open(db) as store:

            async def writer(task: int) -> None:
                for i in range(50):
                    await store.append(step("shared", i, f"{task}"))

            async with trio.open_nursery() as nursery:
                for task in range(16):
                    nursery.start_soon(writer, task)
            steps = await store.all("shared")
        assert len(steps) == 800
        for task in range(16):
            mine = [s.step_index for s in steps if s.content == f"{task}"]
            assert mine == list(range(50))

    async def test_failing_job_does_not_sink_the_batch(self, db: str) -> None:
        """A write that fails inside a shared transaction fails alone; the others commit."""
        async with await SqliteStore.open(db) as store:
            gate = threading.Event()

            def blocker(conn: sqlite3.Connection) -> None:
                gate.wait()

            def broken(conn: sqlite3.Connection) -> None:
                conn.execute("INSERT INTO no_such_table VALUES (1)")

            errors: list[BaseException] = []

            async def run_broken() -> None:
                try:
                    await store._workers.call(IdempotentWrite(broken))
                except StoreUnavailableError as exc:
                    errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(store._workers.call, Read(blocker)))
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(store.append, step("s", 0))
                nursery.start_soon(run_broken)
                nursery.start_soon(store.append, step("s", 1))
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
            assert len(errors) == 1
            # the two appends were concurrent: both land, in whichever order trio ran them
            assert sorted(s.step_index for s in await store.all("s")) == [0, 1]


class TestCancellation:
    async def test_every_method_is_a_checkpoint(self, db: str) -> None:
        """Each public method yields to trio (trio's checkpoint convention)."""
        async with await SqliteStore.open(db) as store:
            calls = [
                lambda: store.append(step("s", 0)),
                lambda: store.last_n("s", 1),
                lambda: store.all("s"),
                lambda: store.get("s"),
                lambda: store.exists("s"),
                lambda: store.update_data("s", "{}"),
                lambda: store.finalize("s", FinalizeSummary("completed")),
                lambda: store.put(Session("s")),
                lambda: store.final("s"),
                lambda: store.list_sessions(),
                lambda: store.delete_session("s"),
            ]
            for call in calls:
                with trio.testing.assert_checkpoints():
                    await call()

    async def test_cancelled_while_queued_does_nothing(self, db: str) -> None:
        """An append cancelled while it waits in the queue raises Cancelled and never happens."""
        async with await SqliteStore.open(db) as store:
            await expect_queued_append_cancelled(store)

    async def test_cancelled_before_start_does_nothing(self, db: str) -> None:
        """An append cancelled before it is queued never happens."""
        async with await SqliteStore.open(db) as store:
            gate = threading.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(store._workers.call, Read(lambda conn: gate.wait())))
                await trio.testing.wait_all_tasks_blocked()
                with trio.move_on_after(0) as scope:
                    await store.append(step("s", 0))
                assert scope.cancelled_caught
                gate.set()
            assert await store.all("s") == []
            await store.append(step("s", 1))
            assert [s.step_index for s in await store.all("s")] == [1]

    async def test_cancelled_while_running_completes(self, db: str) -> None:
        """A call cancelled after the thread took it finishes and returns normally."""
        async with await SqliteStore.open(db) as store:
            started = threading.Event()
            gate = threading.Event()

            def slow_append(conn: sqlite3.Connection) -> str:
                started.set()
                gate.wait()
                store._ops.append(conn, step("s", 7), 0)
                return "done"

            results: list[str] = []
            scope = trio.CancelScope()

            async def call() -> None:
                with scope:
                    results.append(await store._workers.call(IdempotentWrite(slow_append)))
                    await trio.lowlevel.checkpoint()  # the cancellation lands here
                    results.append("not cancelled")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await trio.to_thread.run_sync(started.wait)
                scope.cancel()
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
            assert results == ["done"]
            assert [s.step_index for s in await store.all("s")] == [7]


class TestWorkerDeath:
    async def test_callers_are_answered_when_the_worker_dies(
        self, db: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A bug that kills the worker mid-batch answers every caller; later calls fail fast."""
        store = await SqliteStore.open(db)
        executor = store._workers._executor

        def explode(conn: sqlite3.Connection, jobs: list[object]) -> None:
            raise RuntimeError("bug in the executor")

        monkeypatch.setattr(executor, "run_batch", explode)
        with pytest.raises(StoreUnavailableError, match=r"worker thread died"):
            await store.append(step("s", 0))
        with pytest.raises(StoreUnavailableError, match=r"worker thread died"):
            await store.get("s")
        await store.aclose()

    async def test_queued_caller_cancelled_after_the_worker_died(self, db: str) -> None:
        """A queued call answered by a dying worker, then cancelled, gets the error (no crash)."""
        store = await SqliteStore.open(db)
        executor = store._workers._executor
        started = threading.Event()
        gate = threading.Event()

        def explode(conn: sqlite3.Connection, jobs: list[object]) -> None:
            started.set()
            gate.wait()
            raise RuntimeError("bug in the executor")

        executor.run_batch = explode  # type: ignore[method-assign]
        errors: list[str] = []
        scope = trio.CancelScope()

        async def call(index: int, cancel_scope: trio.CancelScope) -> None:
            with cancel_scope:
                try:
                    await store.append(step("s", index))
                except StoreUnavailableError as exc:
                    errors.append(f"{index}: {exc}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, 0, trio.CancelScope())
            await trio.to_thread.run_sync(started.wait)
            nursery.start_soon(call, 1, scope)
            await trio.testing.wait_all_tasks_blocked()
            assert len(store._workers._queue) == 1
            gate.set()
            # Without yielding to trio: the worker dies and hands the queued job its
            # error via run_sync_soon; the caller is cancelled before that arrives.
            store._workers._threads[0].join(5)
            assert not store._workers._threads[0].is_alive()
            scope.cancel()
        assert sorted(e.split(":")[0] for e in errors) == ["0", "1"]
        assert all("worker thread died" in e for e in errors)
        await store.aclose()
