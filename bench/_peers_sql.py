"""SqliteStore vs OpenAI Agents' ``SQLiteSession``, each on its own file.

Reads: our ``last_n(session, 20)`` vs its ``get_items(limit=20)`` at
``sizes.history`` steps, and each one's growth from ``sizes.small`` to
``sizes.big``. Durable appends are measured paired: blocks of
``sizes.durable_ops`` appends alternate between the two stores, kept open,
because fsync latency drifts over seconds; ours at ``synchronous="full"`` vs
``SQLiteSession`` as shipped (WAL, SQLite's default ``synchronous``; it has no
public way to choose another level, so there is no row with both at
``"normal"``). Last, ``sizes.tasks`` concurrent appenders on one file (each
its own session; for the peer one ``SQLiteSession`` per appender, as its
per-file lock intends). Our histories are filled with raw ``executemany``.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections import defaultdict
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio

from agentloop import RunStep, StepType
from agentloopsql import SqliteStore
from bench import _peers_load as load
from bench._peers_timing import (
    INFO_ONLY,
    Series,
    Sizes,
    growth_row,
    per_op_us,
    run_asyncio,
    run_trio,
    speedup_row,
)
from bench._raw_sql import fill_sqlite
from bench._report import Row

CONTENT = "x" * 200
ITEM = {"role": "user", "content": CONTENT}
WINDOW = 20
READ_TARGET = 1.5
OUR_GROWTH = 1.5  # an indexed newest-first read: flat however long the history
LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _peer_class() -> Any:
    """``SQLiteSession`` as shipped."""
    return load.load(load.OPENAI).SQLiteSession


def _default_synchronous(path: str) -> str:
    """The ``synchronous`` level a fresh connection to ``path`` gets (what the peer runs at)."""
    conn = sqlite3.connect(path)
    try:
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        conn.close()
    return LEVELS.get(level, str(level))


def _steps(session: str, count: int) -> list[RunStep]:
    return [RunStep(session, i, StepType.tool_result, content=CONTENT) for i in range(count)]


def _ours_appends(store: SqliteStore, session: str, ops: int) -> Callable[[], Awaitable[float]]:
    async def block() -> float:
        pending = iter(_steps(session, ops))
        return await per_op_us(ops, lambda: store.append(next(pending)))

    return block


def _peer_appends(peer: Any, ops: int) -> Callable[[], Awaitable[float]]:
    return lambda: per_op_us(ops, lambda: peer.add_items([ITEM]))


def _read_rows(directory: str, sizes: Sizes) -> list[Row]:
    histories = (sizes.small, sizes.history, sizes.big)
    ours_path = os.path.join(directory, "ours-read.db")
    run_trio(lambda: _open_close(ours_path))
    fill_sqlite(ours_path, {f"h{h}": h for h in histories})
    store = run_trio(lambda: SqliteStore.open(ours_path))
    peer_class = _peer_class()
    peers = {h: peer_class(f"h{h}", os.path.join(directory, "peer-read.db")) for h in histories}
    for h, peer in peers.items():
        run_asyncio(partial(peer.add_items, [ITEM] * h))
    ours: dict[int, list[float]] = defaultdict(list)
    theirs: dict[int, list[float]] = defaultdict(list)
    try:
        for _ in range(sizes.rounds):
            for h in histories:
                read = partial(store.last_n, f"h{h}", WINDOW)
                ours[h].append(run_trio(partial(per_op_us, sizes.ops, read)))
                peer_read = partial(peers[h].get_items, limit=WINDOW)
                theirs[h].append(run_asyncio(partial(per_op_us, sizes.ops, peer_read)))
    finally:
        run_trio(store.aclose)
        for peer in peers.values():
            peer.close()
    name = f"sqlite newest-20 read @{sizes.history:,}"
    growth = f"sqlite newest-20 read {sizes.big:,} vs {sizes.small:,}"
    label = load.labelled(load.OPENAI)
    return [
        speedup_row(
            name, label, Series(ours[sizes.history]), Series(theirs[sizes.history]), READ_TARGET
        ),
        growth_row(
            growth,
            "ours (SqliteStore)",
            Series(ours[sizes.small]),
            Series(ours[sizes.big]),
            OUR_GROWTH,
        ),
        growth_row(
            growth,
            load.labelled(load.OPENAI),
            Series(theirs[sizes.small]),
            Series(theirs[sizes.big]),
            INFO_ONLY,
        ),
    ]


async def _open_close(path: str) -> None:
    await (await SqliteStore.open(path)).aclose()


def _durable_row(directory: str, sizes: Sizes) -> Row:
    ours_path = os.path.join(directory, "ours-durable-full.db")
    peer_path = os.path.join(directory, "peer-durable-shipped.db")
    store = run_trio(lambda: SqliteStore.open(ours_path, synchronous="full"))
    peer = _peer_class()("durable", peer_path)
    peer_level = _default_synchronous(peer_path)
    ours: list[float] = []
    theirs: list[float] = []
    try:
        for _ in range(sizes.durable_pairs):
            ours.append(run_trio(_ours_appends(store, "durable", sizes.durable_ops)))
            theirs.append(run_asyncio(_peer_appends(peer, sizes.durable_ops)))
    finally:
        run_trio(store.aclose)
        peer.close()
    label = f"{load.labelled(load.OPENAI)} as shipped at {peer_level}; ours at FULL"
    return speedup_row("sqlite durable append, paired", label, Series(ours), Series(theirs), 1.0)


def _concurrent_row(directory: str, sizes: Sizes) -> Row:
    store = run_trio(lambda: SqliteStore.open(os.path.join(directory, "ours-tasks.db")))
    peer_class = _peer_class()
    path = os.path.join(directory, "peer-tasks.db")
    peers = [peer_class(f"task-{i}", path) for i in range(sizes.tasks)]
    total = sizes.tasks * sizes.task_ops

    async def ours_block() -> float:
        batches = [_steps(f"task-{i}", sizes.task_ops) for i in range(sizes.tasks)]

        async def writer(steps: list[RunStep]) -> None:
            for step in steps:
                await store.append(step)

        async def all_writers() -> None:
            async with trio.open_nursery() as nursery:
                for steps in batches:
                    nursery.start_soon(writer, steps)

        return await per_op_us(1, all_writers) / total

    async def peer_block() -> float:
        import asyncio

        async def writer(peer: Any) -> None:
            for _ in range(sizes.task_ops):
                await peer.add_items([ITEM])

        async def all_writers() -> None:
            await asyncio.gather(*(writer(peer) for peer in peers))

        return await per_op_us(1, all_writers) / total

    ours: list[float] = []
    theirs: list[float] = []
    try:
        for _ in range(sizes.rounds):
            ours.append(run_trio(ours_block))
            theirs.append(run_asyncio(peer_block))
    finally:
        run_trio(store.aclose)
        for peer in peers:
            peer.close()
    label = f"{load.labelled(load.OPENAI)} as shipped; ours at FULL"
    return speedup_row(
        f"sqlite {sizes.tasks} concurrent appenders", label, Series(ours), Series(theirs), 1.0
    )


def rows(sizes: Sizes) -> list[Row]:
    """Every SQLite comparison, each on fresh files in one temporary directory."""
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-peers-") as directory:
        out = _read_rows(directory, sizes)
        out.append(_durable_row(directory, sizes))
        out.append(_concurrent_row(directory, sizes))
    return out
