"""Review findings for the SQL stores under asyncio: loops that come and go, cancellation storms."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import trio

from agentloop import RunStep
from agentloopsql import SqliteStore


def step(session: str, index: int, content: str = "") -> RunStep:
    return RunStep(session, index, "tool_result", content=content)


def test_finished_loops_are_not_kept_alive(tmp_path: Path) -> None:
    """A store used from many ``asyncio.run`` calls in turn keeps none of their loops alive.

    A job holds its caller's event loop only while the caller waits; nothing
    caches a loop beyond that.
    """
    store = trio.run(SqliteStore.open, str(tmp_path / "loops.db"))
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def use() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        await store.append(step("s", len(loops)))
        await store.last_n("s", 300)  # through the worker

    try:
        for _ in range(10):
            asyncio.run(use())
        gc.collect()
        # The worker's last batch may still name the last loop until its next job.
        assert sum(ref() is not None for ref in loops) <= 1
    finally:
        trio.run(store.aclose)
