"""The SQLite rows of the ``sql`` section, measured under trio and under asyncio.

Each backend's rows use its own primitives for the floors and the load (a
:class:`Kit`): trio's ``to_thread``/nursery/``CapacityLimiter`` for the trio
rows (the names they always had), anyio's on asyncio for the rows marked
``(asyncio)``. A ratio compares ours with a floor measured on the same backend.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import attrs
import trio

from agentloopsql import SqliteStore
from bench._raw_sql import fill_sqlite, raw_sqlite
from bench._report import Row
from bench.sql import (
    _SEQ_OPS,
    _STEP,
    _TASKS,
    NO_TARGET,
    _best,
    _last_n_pair,
    _per_op_us,
    _raw_append,
)

__all__ = ["ASYNCIO", "TRIO", "Kit", "asyncio_rows", "sqlite_rows"]


@attrs.frozen
class Kit:
    """One backend's primitives: a thread hop (with an optional limiter), task groups, limiters."""

    suffix: str
    to_thread: Callable[..., Awaitable[Any]]
    group: Callable[[], AbstractAsyncContextManager[Any]]
    limiter: Callable[[int], Any]


TRIO = Kit("", trio.to_thread.run_sync, trio.open_nursery, trio.CapacityLimiter)
ASYNCIO = Kit(
    " (asyncio)", anyio.to_thread.run_sync, anyio.create_task_group, anyio.CapacityLimiter
)


async def sqlite_rows(directory: str, kit: Kit) -> list[Row]:
    """Every SQLite row on ``kit``'s backend (the caller runs that backend)."""
    rows: list[Row] = []
    for synchronous in ("full", "normal"):
        rows.extend(await _sqlite_appends(directory, synchronous, kit))
    rows.append(await _sqlite_last_n(directory, kit))
    return rows


async def _asyncio_rows() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="agentloopsql-bench-") as directory:
        return await sqlite_rows(directory, ASYNCIO)


def asyncio_rows() -> list[Row]:
    """The SQLite rows under asyncio (its own event loop, run here)."""
    return anyio.run(_asyncio_rows, backend="asyncio")


async def _sqlite_appends(directory: str, synchronous: str, kit: Kit) -> list[Row]:
    name = f"{synchronous}{kit.suffix.strip(' ()')}"
    floor_path = os.path.join(directory, f"floor-{name}.db")
    store_path = os.path.join(directory, f"store-{name}.db")
    await (await SqliteStore.open(floor_path)).aclose()  # the same schema for the floor
    raw = raw_sqlite(floor_path, synchronous)
    store = await SqliteStore.open(store_path, synchronous=synchronous)

    async def in_thread() -> None:
        for _ in range(_SEQ_OPS):
            _raw_append(raw)

    async def one_hop() -> None:
        for _ in range(_SEQ_OPS):
            await kit.to_thread(_raw_append, raw)

    async def ours() -> None:
        for _ in range(_SEQ_OPS):
            await store.append(_STEP)

    async def ours_concurrent() -> None:
        async def writer() -> None:
            for _ in range(_SEQ_OPS // _TASKS * 4):
                await store.append(_STEP)

        async with kit.group() as group:
            for _ in range(_TASKS):
                group.start_soon(writer)

    one_connection = kit.limiter(1)

    async def per_call_concurrent() -> None:
        # The alternative design: every call its own to_thread hop, one at a time
        # on the one connection, one commit per append.
        async def writer() -> None:
            for _ in range(_SEQ_OPS // _TASKS * 4):
                await kit.to_thread(_raw_append, raw, limiter=one_connection)

        async with kit.group() as group:
            for _ in range(_TASKS):
                group.start_soon(writer)

    concurrent_ops = _SEQ_OPS // _TASKS * 4 * _TASKS
    try:
        floor = await _best(lambda: _per_op_us(_SEQ_OPS, in_thread))
        hop = await _best(lambda: _per_op_us(_SEQ_OPS, one_hop))
        seq = await _best(lambda: _per_op_us(_SEQ_OPS, ours))
        conc = await _best(lambda: _per_op_us(concurrent_ops, ours_concurrent))
        per_call = await _best(lambda: _per_op_us(concurrent_ops, per_call_concurrent))
    finally:
        await store.aclose()
        raw.close()
    mode = f"synchronous={synchronous.upper()}"
    return [
        Row(
            f"sqlite append, sequential{kit.suffix}",
            f"vs raw sqlite3 + one to_thread hop ({seq:.0f} vs {hop:.0f} us; {mode})",
            seq / hop,
            1.2,
        ),
        Row(
            f"sqlite append, sequential{kit.suffix}",
            f"vs raw sqlite3 in-thread, info only ({seq:.0f} vs {floor:.0f} us; {mode})",
            seq / floor,
            NO_TARGET,
        ),
        Row(
            f"sqlite append, {_TASKS} tasks{kit.suffix}",
            f"throughput vs raw in-thread ({1e6 / conc:.0f} vs {1e6 / floor:.0f}/s; {mode})",
            floor / conc,
            0.5,
            at_least=True,
        ),
        Row(
            f"sqlite append, {_TASKS} tasks{kit.suffix}",
            f"vs to_thread per call + CapacityLimiter(1) ({1e6 / conc:.0f} vs "
            f"{1e6 / per_call:.0f}/s; {mode})",
            per_call / conc,
            1.0,
            at_least=True,
        ),
    ]


async def _sqlite_last_n(directory: str, kit: Kit) -> Row:
    path = os.path.join(directory, f"history{kit.suffix.strip(' ()')}.db")
    await (await SqliteStore.open(path)).aclose()
    await kit.to_thread(fill_sqlite, path, {"big": 100_000, "small": 100})
    async with await SqliteStore.open(path) as store:
        big, small = await _last_n_pair(store)
    return Row(
        f"sqlite last_n(50){kit.suffix}",
        f"10^5 vs 10^2 steps of history ({big:.0f} vs {small:.0f} us)",
        big / small,
        1.5,
    )
