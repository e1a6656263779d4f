"""Both SQL stores under trio and asyncio: open/close, group commit, inline reads, checkpoints."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _sql_anyio import cancelling, until
from _sql_support import SqlTarget, open_sql_store
from _sql_support import occupy_worker as occupy

from agentloop import RunStep, Session, StoreClosedError
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql._store import SHORT_WINDOW
from agentloopsql._workers import IdempotentWrite

pytestmark = pytest.mark.anyio

Store = SqliteStore | PostgresStore


@pytest.fixture
async def store(sql_target: SqlTarget, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_sql_store(sql_target, tmp_path / "both.db", pool_size=1) as opened:
        yield opened


def step(session: str, index: int, content: str = "") -> RunStep:
    return RunStep(session, index, "tool_result", content=content)


async def test_open_use_close(sql_target: SqlTarget, tmp_path: Path) -> None:
    """A store opens, writes, reads and closes on either backend; closed, it refuses calls."""
    async with open_sql_store(sql_target, tmp_path / "use.db", pool_size=2) as store:
        await store.append(step("s", 0, "a"))
        await store.append_many([step("s", 1, "b"), step("t", 0)])
        await store.put(Session("s", model="m"))
        assert [s.content for s in await store.all("s")] == ["a", "b"]
        assert [s.content for s in await store.last_n("s", 1)] == ["b"]
        assert (await store.get("s")).model == "m"
        assert [s.id for s in await store.get_many(["t", "s"])] == ["t", "s"]
        assert await store.revision("s") > 0
    assert "closed" in repr(store)
    await store.aclose()  # idempotent
    with pytest.raises(StoreClosedError):
        await store.append(step("s", 2))
    with pytest.raises(StoreClosedError):
        await store.get("s")


async def test_many_tasks_share_a_commit(store: Store) -> None:
    """20 callers queued behind a busy worker run as one batch, in queue order."""
    executor: Any = store._workers._executor
    sizes: list[int] = []
    run_batch = executor.run_batch

    def recording(state: object, jobs: list[object]) -> None:
        sizes.append(len(jobs))
        run_batch(state, jobs)

    executor.run_batch = recording
    gate = threading.Event()
    async with anyio.create_task_group() as group:
        await occupy(store, group, gate)
        for index in range(20):
            group.start_soon(store.append, step("s", index))
            await until(lambda n=index + 1: len(store._workers._queue) == n)  # type: ignore[misc]
        gate.set()
    assert [s.step_index for s in await store.all("s")] == list(range(20))
    assert max(sizes) > 1  # a shared batch: one transaction, one commit


async def test_concurrent_appends_and_reads(store: Store) -> None:
    """64 tasks writing and reading at once: every write lands, every read sees its own."""

    async def writer(task: int) -> None:
        for index in range(5):
            await store.append(step(f"w{task}", index))
            assert len(await store.last_n(f"w{task}", 10)) == index + 1

    async with anyio.create_task_group() as group:
        for task in range(64):
            group.start_soon(writer, task)
    found = await store.get_many([f"w{task}" for task in range(64)])
    assert len(found) == 64
    for task in range(64):
        assert len(await store.all(f"w{task}")) == 5


async def test_a_cancelled_scope_stops_every_call_before_it_acts(store: Store) -> None:
    """Every public call is a checkpoint: in a cancelled anyio scope it raises and does nothing."""
    await store.append(step("s", 0))
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.append(step("s", 1)),
        lambda: store.append_many([]),
        lambda: store.last_n("s", 5),
        lambda: store.get("s"),
        lambda: store.all("s"),
        lambda: store.put(Session("s", model="new")),
    ]
    for call in calls:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await call()
        assert scope.cancelled_caught
    assert [s.step_index for s in await store.all("s")] == [0]
    assert (await store.get("s")).model == ""
    assert cancelling() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_native_cancel_before_the_call_does_nothing(store: Store) -> None:
    """Under asyncio, a pending ``Task.cancel()`` lands at the call's first suspension."""
    task = asyncio.current_task()
    assert task is not None
    for call in (lambda: store.append(step("s", 0)), lambda: store.get("s")):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call()
        assert task.uncancel() == 0
    assert await store.all("s") == []


class TestInlineReads:
    @pytest.fixture
    async def lite(self, tmp_path: Path) -> AsyncIterator[SqliteStore]:
        async with await SqliteStore.open(tmp_path / "reads.db") as opened:
            yield opened

    async def test_reads_do_not_wait_for_the_worker(self, lite: SqliteStore) -> None:
        """With the connection thread busy, last_n and get still answer (on the loop thread)."""
        await lite.append(step("s", 0, "hi"))
        await lite.put(Session("s", model="m"))
        gate = threading.Event()
        async with anyio.create_task_group() as group:
            await occupy(lite, group, gate)
            try:
                with anyio.fail_after(5):
                    assert [s.content for s in await lite.last_n("s", 20)] == ["hi"]
                    assert (await lite.get("s")).model == "m"
                    assert await lite.get("unknown") == Session("unknown")
            finally:
                gate.set()

    async def test_busy_reader_and_wide_window_use_the_worker(self, lite: SqliteStore) -> None:
        """A reader in use by another thread, or a window past SHORT_WINDOW, use the worker."""
        await lite.append(step("s", 0))
        assert lite._reader is not None
        got: list[int] = []

        async def read(n: int) -> None:
            got.append(len(await lite.last_n("s", n)))

        gate = threading.Event()
        async with anyio.create_task_group() as group:
            await occupy(lite, group, gate)
            group.start_soon(read, SHORT_WINDOW + 1)
            await until(lambda: len(lite._workers._queue) == 1)
            with lite._reader._lock:  # as if another loop's thread were reading
                group.start_soon(read, 5)
                await until(lambda: len(lite._workers._queue) == 2)
            assert got == []
            gate.set()
        assert got == [1, 1]

    async def test_inline_read_runs_on_the_loop_thread(self, lite: SqliteStore) -> None:
        """The inline read is synchronous on the caller's thread (the one inline exception)."""
        await lite.append(step("s", 0))
        assert lite._reader is not None
        threads: list[int] = []
        read = lite._reader.read

        def spying(fn: Any) -> Any:
            threads.append(threading.get_ident())
            return read(fn)

        lite._reader.read = spying  # type: ignore[method-assign]
        assert len(await lite.last_n("s", 1)) == 1
        assert threads == [threading.get_ident()]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("block_ends", [True, False])
async def test_expired_timeout_around_a_completed_call(store: Store, block_ends: bool) -> None:
    """A taken call completes past its ``asyncio.timeout``: it returns; a block that goes on
    raises TimeoutError at its next await; a block that ends right there leaks nothing."""
    started, gate = threading.Event(), threading.Event()
    ops: Any = store._ops

    def append_then_wait(conn: Any) -> str:
        ops.append(conn, step("s", 3), 1)
        started.set()
        gate.wait()
        return "done"

    events: list[str] = []

    async def call() -> None:
        try:
            async with asyncio.timeout(None) as timeout:
                timeouts.append(timeout)
                events.append(await store._workers.call(IdempotentWrite(append_then_wait)))
                if not block_ends:
                    await asyncio.sleep(0)
                    events.append("not cancelled")
        except TimeoutError:
            events.append("timeout")
        await asyncio.sleep(0)  # nothing left over for the task
        await asyncio.sleep(0.01)
        events.append(f"count {cancelling()}")

    timeouts: list[asyncio.Timeout] = []
    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await anyio.to_thread.run_sync(started.wait)
        timeouts[0].reschedule(asyncio.get_running_loop().time())
        await anyio.sleep(0.05)
        gate.set()
    assert events == ["done", "count 0"] if block_ends else ["done", "timeout", "count 0"]


def test_one_store_shared_by_a_trio_run_and_an_asyncio_loop(tmp_path: Path) -> None:
    """Two event loops of different backends, in two threads, share one store: a batch
    may hold both loops' calls, and each caller is woken on its own loop."""
    path = tmp_path / "shared.db"
    store = anyio.run(SqliteStore.open, path, backend="trio")
    errors: list[BaseException] = []

    async def writer(session: str) -> None:
        async with anyio.create_task_group() as group:
            for task in range(8):

                async def write(task: int = task) -> None:
                    for index in range(10):
                        await store.append(step(f"{session}{task}", index))
                        assert len(await store.last_n(f"{session}{task}", 3)) == min(index + 1, 3)

                group.start_soon(write)

    def run(backend: str) -> None:
        try:
            anyio.run(writer, backend, backend=backend)
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("trio", "asyncio")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []

    async def check() -> None:
        for session in ("trio", "asyncio"):
            for task in range(8):
                assert len(await store.all(f"{session}{task}")) == 10
        await store.aclose()

    anyio.run(check, backend="asyncio")
