"""``Harness(cleanup=...)``: run after each clause's stores are closed, and once at the end."""

from __future__ import annotations

import asyncio
import itertools
import os
from functools import partial
from typing import Any, ClassVar

import anyio
import psycopg
import pytest
import trio
from _sql_support import pg_dsn
from broken._good import GoodBoth
from broken.steps import NewestFirst

from agentloopsql import testing
from agentlooptest import Harness, certify, memory_harness


class _Tracked(GoodBoth):
    opened: ClassVar[list[_Tracked]] = []

    def __init__(self) -> None:
        super().__init__()
        _Tracked.opened.append(self)


def _harness(cleanup: Any) -> Harness:
    async def new() -> _Tracked:
        return _Tracked()

    async def same(store: Any) -> Any:
        return store

    return Harness(new_step_store=new, new_session_store=new, reopen=same, cleanup=cleanup)


@pytest.mark.anyio
async def test_cleanup_runs_after_every_clause_with_its_stores_closed() -> None:
    """Once per clause, each time with every store opened so far closed; once more at the end."""
    _Tracked.opened.clear()
    calls: list[bool] = []

    async def cleanup() -> None:
        calls.append(all(s.closed for s in _Tracked.opened))

    report = await certify(_harness(cleanup), pattern="step.order")
    ran = [r for r in report.results if r.outcome != "skipped"]
    assert len(calls) == len(ran) + 1
    assert all(calls)


@pytest.mark.anyio
async def test_cleanup_runs_when_a_clause_fails_or_is_cancelled() -> None:
    """A failing clause and a cancelled certify() still clean up."""
    calls: list[str] = []

    async def cleanup() -> None:
        await anyio.lowlevel.checkpoint()
        calls.append("clean")

    async def new() -> NewestFirst:
        return NewestFirst()

    harness = Harness(new_step_store=new, cleanup=cleanup)
    report = await certify(harness, pattern="step.order.oldest-first")
    assert report.failed
    assert calls == ["clean", "clean"]
    calls.clear()
    with anyio.move_on_after(0.01):
        await certify(harness, pattern="step.model-based")
    assert calls[-1:] == ["clean"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("source", ["asyncio.timeout", "Task.cancel"])
async def test_cleanup_runs_when_asyncio_cancels_natively(source: str) -> None:
    """asyncio's own cancellation sources interrupt certify() and still leave it cleaned up."""
    calls: list[str] = []
    loop = asyncio.get_running_loop()
    cancel: list[Any] = []
    opened = itertools.count()

    async def cleanup() -> None:
        await asyncio.sleep(0)
        calls.append("clean")

    async def new() -> _Tracked:
        if next(opened) == 1:  # the clause's store (the first is the probe's): cancel now
            cancel[0]()
        return _Tracked()

    harness = Harness(new_step_store=new, cleanup=cleanup)
    run = certify(harness, pattern="step.order.oldest-first")
    if source == "asyncio.timeout":

        async def timed() -> None:
            async with asyncio.timeout(None) as timeout:
                cancel.append(lambda: timeout.reschedule(loop.time()))
                await run

        with pytest.raises(TimeoutError):
            await timed()
    else:
        task = asyncio.ensure_future(run)
        cancel.append(task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await task
    assert calls == ["clean", "clean"]  # after the clause, and at the end


@pytest.mark.anyio
async def test_a_failing_cleanup_fails_the_clause_saying_so() -> None:
    """A cleanup that raises turns a passing clause into a failure naming the cleanup."""

    async def cleanup() -> None:
        raise OSError("backend gone")

    report = await certify(_harness(cleanup), pattern="step.order.oldest-first")
    message = report.result("step.order.oldest-first").message
    assert "the harness's cleanup() raised OSError: backend gone" in message
    assert report.notes == ("at the end: the harness's cleanup() raised OSError: backend gone",)


def test_cleanup_must_be_callable() -> None:
    """A cleanup that is not callable is refused by field name."""
    with pytest.raises(TypeError, match="cleanup must be an async callable"):
        Harness(new_step_store=memory_harness().new_step_store, cleanup="drop")  # type: ignore[arg-type]


def test_the_sqlite_harness_leaves_no_files() -> None:
    """The SQLite harness's cleanup deletes each clause's database files."""
    harness = testing.sqlite()
    report = trio.run(partial(certify, harness, pattern="durable"))
    assert report.ok, report.verdict
    [directory] = [
        cell.cell_contents
        for cell in harness.new_step_store.__closure__ or ()  # type: ignore[union-attr]
        if isinstance(cell.cell_contents, str)
    ]
    assert os.listdir(directory) == []


@pytest.fixture
def dsn() -> str:
    """The PostgreSQL DSN, or a skip with its reason."""
    return pg_dsn()


def _test_schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE %s",
            (f"agentloop\\_test\\_{os.getpid()}\\_%",),
        ).fetchall()
    return {r[0] for r in rows}


def test_the_postgres_harness_drops_its_schemas_per_clause(dsn: str) -> None:
    """The PostgreSQL harness's cleanup drops the schemas its stores made, clause by clause."""
    before = _test_schemas(dsn)
    report = trio.run(partial(certify, testing.postgres(dsn), pattern="session.durable"))
    assert report.ok, report.verdict
    assert _test_schemas(dsn) - before == set()
