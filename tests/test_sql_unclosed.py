"""A SQL store collected without ``aclose``: its threads are released and it warns like a file."""

from __future__ import annotations

import contextlib
import gc
import re
import threading
import time
import warnings
from pathlib import Path

import trio
from _sql_support import SqlTarget, fresh_schema, open_sql_store

from agentloop import RunStep, StepType
from agentloopsql import PostgresStore, SqliteStore

_OURS = ("SqliteStore", "PostgresStore", "agentloopsql")


def store_threads() -> list[str]:
    """The names of the live threads a SQL store (or its pool) started."""
    return [t.name for t in threading.enumerate() if t.name.startswith(_OURS)]


def until_threads_are(baseline: list[str]) -> None:
    """Wait (at most 10 s) until the store threads alive are ``baseline`` again."""
    deadline = time.monotonic() + 10
    while store_threads() != baseline:
        assert time.monotonic() < deadline, f"still running: {store_threads()}"
        time.sleep(0.01)


async def drop_unclosed(target: SqlTarget, path: Path, schema: str) -> None:
    """Open a store, use it, and drop every reference to it without closing it."""
    if target.dsn is None:
        store: SqliteStore | PostgresStore = await SqliteStore.open(str(path))
    else:
        store = await PostgresStore.open(target.dsn, schema=schema, pool_size=3)
    await store.append(RunStep(session_id="s", step_index=0, step_type=StepType.user, content="x"))
    assert len(store_threads()) > 0
    del store


class TestUnclosed:
    async def test_collected_store_warns_and_releases_its_threads(
        self, sql_target: SqlTarget, tmp_path: Path
    ) -> None:
        """A store dropped unclosed gives a ResourceWarning and its threads all end."""
        baseline = store_threads()
        async with contextlib.AsyncExitStack() as stack:
            schema = ""
            if sql_target.dsn is not None:
                schema = await stack.enter_async_context(fresh_schema(sql_target.dsn))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                await drop_unclosed(sql_target, tmp_path / "db.sqlite", schema)
                gc.collect()
            said = [str(w.message) for w in caught if w.category is ResourceWarning]
            assert len(said) == 1, said
            assert re.match(r"^unclosed (SqliteStore|PostgresStore) .*: call aclose\(\)", said[0])
            await trio.to_thread.run_sync(until_threads_are, baseline)

    async def test_closed_store_gives_no_warning(
        self, sql_target: SqlTarget, tmp_path: Path
    ) -> None:
        """A store closed with aclose gives no ResourceWarning when it is collected."""
        async with open_sql_store(sql_target, tmp_path / "db.sqlite", pool_size=2) as store:
            assert await store.final("nobody") is None
        del store
        gc.collect()  # warnings are errors in this suite: a warning would fail the test
