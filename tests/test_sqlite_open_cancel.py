"""A ``SqliteStore.open`` cancelled while its inline reader opens closes what it opened."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest
from _sql_anyio import SOURCES, Caller, until

from agentloopsql import SqliteStore, _sqlite

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize(("anyio_backend", "source"), SOURCES)]


async def test_open_cancelled_while_the_reader_opens_closes_reader_and_writer(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancellation reaches the caller, and the reader that finished opening in its
    thread is closed, as is the writer's worker thread: nothing is left open."""
    real_open = _sqlite.InlineReader.open
    opening, release = threading.Event(), threading.Event()
    opened: list[_sqlite.InlineReader] = []
    closed: list[_sqlite.InlineReader] = []

    def slow_open(path: str) -> _sqlite.InlineReader | None:
        opening.set()
        release.wait(10)
        reader = real_open(path)
        assert reader is not None
        real_close = reader.close
        reader.close = lambda: (closed.append(reader), real_close())[-1]  # type: ignore[method-assign]
        opened.append(reader)
        return reader

    monkeypatch.setattr(_sqlite.InlineReader, "open", staticmethod(slow_open))
    caller = Caller(source, lambda: SqliteStore.open(str(tmp_path / "open.db")))
    async with anyio.create_task_group() as group:
        caller.start(group)
        await anyio.to_thread.run_sync(opening.wait, 10)
        caller.cancel()
        await anyio.sleep(0.05)
        assert not caller.done  # the reader's thread is still opening: the caller waits
        release.set()
        await until(lambda: caller.done)
    assert caller.events[0] == "cancelled", caller.events
    assert opened
    assert closed == opened
    await until(lambda: not [t for t in threading.enumerate() if t.name.startswith("SqliteStore")])
