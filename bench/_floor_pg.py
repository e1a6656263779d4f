"""PostgresStore's reads against raw psycopg's read of the same rows, under trio and asyncio.

The floor any store on this driver pays at least: raw psycopg (async,
autocommit, one connection, under asyncio) running the one indexed SELECT a
read needs on our tables (``bench._raw_sql``), returning bare tuples. Ours is
``PostgresStore`` (its default pool of 8) under trio and, in a schema of its
own, under asyncio, returning checked values (``RunStep``, ``Session``,
``SessionInfo``). Four reads, each at ``Sizes.history`` steps or
:data:`LOOKUPS` sessions:

- ``last_n(id, 20)`` of a session of ``Sizes.history`` steps;
- ``get(id)`` of one session;
- ``get_many`` of :data:`LOOKUPS` sessions;
- ``list_sessions(limit=LOOKUPS)``.

Each row is raw time / our time (at least :data:`READ_FLOOR`), the median of
``Sizes.pg_rounds`` rounds of ``Sizes.pg_floor_ops`` reads a block, with the
order of the sides reversed every other round. Every schema made here is
dropped at the end, whatever happened.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from agentloop import RunStep, Session, StepType
from agentloopsql import PostgresStore
from bench._peers_mem import CONTENT, WINDOW, new_session_id
from bench._peers_pg import READ_FLOOR
from bench._peers_timing import AsyncioLoop, Series, Sizes, TrioLoop, per_op_us, speedup_row
from bench._raw_sql import (
    drop_pg_schema,
    pg_get,
    pg_get_many,
    pg_last_n,
    pg_list_sessions,
)
from bench._report import Row

LOOKUPS = 20  # sessions per get_many and per listing
READS = ("newest-20 read", "get", f"get_many of {LOOKUPS}", f"list_sessions(limit={LOOKUPS})")
Loop = TrioLoop | AsyncioLoop


class Ours:
    """``PostgresStore`` on ``loop``'s backend, with the sessions the reads ask for."""

    def __init__(self, dsn: str, schema: str, loop: Loop, label: str) -> None:
        self.dsn, self.schema, self.loop, self.label = dsn, schema, loop, label

    async def open(self) -> None:
        self.store = await PostgresStore.open(self.dsn, schema=self.schema)

    async def fill(self, history: int) -> None:
        """A session of ``history`` steps, and :data:`LOOKUPS` sessions with a row each."""
        self.history_id = new_session_id()
        steps = [
            RunStep(self.history_id, i, StepType.tool_result, content=CONTENT)
            for i in range(history)
        ]
        await self.store.append_many(steps)
        self.ids = [new_session_id() for _ in range(LOOKUPS)]
        for sid in self.ids:
            await self.store.put(Session(sid, model="bench-model", data='{"turn": 1}'))

    async def aclose(self) -> None:
        await self.store.aclose()

    def reads(self) -> list[Callable[[], Awaitable[object]]]:
        """The four reads, in :data:`READS` order."""
        store = self.store
        return [
            partial(store.last_n, self.history_id, WINDOW),
            partial(store.get, self.ids[0]),
            partial(store.get_many, self.ids),
            partial(store.list_sessions, limit=LOOKUPS),
        ]


class Raw:
    """Raw psycopg under asyncio on a schema filled by :class:`Ours` (the filling is not
    timed)."""

    label = "raw psycopg (floor: raw time / ours)"

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.loop: Loop = AsyncioLoop()
        self.filler = Ours(dsn, schema, self.loop, "filler")

    async def open(self) -> None:
        import psycopg

        await self.filler.open()
        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def fill(self, history: int) -> None:
        await self.filler.fill(history)
        await self.filler.aclose()

    async def aclose(self) -> None:
        await self.conn.close()

    def reads(self) -> list[Callable[[], Awaitable[object]]]:
        filler = self.filler
        return [
            partial(self._fetch, pg_last_n(self.schema), (filler.history_id, WINDOW)),
            partial(self._fetch, pg_get(self.schema), (filler.ids[0],)),
            partial(self._fetch, pg_get_many(self.schema), (filler.ids,)),
            partial(self._fetch, pg_list_sessions(self.schema), (LOOKUPS,)),
        ]

    async def _fetch(self, query: str, params: tuple[Any, ...]) -> list[Any]:
        cursor = await self.conn.execute(query, params)
        return await cursor.fetchall()


Side = Ours | Raw


def rows(sizes: Sizes, dsn: str) -> list[Row]:
    """Each read under trio and under asyncio against the raw floor, measured here.

    Raises whatever a side raised; every schema made here is dropped all the same.
    """
    base = f"agentloop_floor_{secrets.token_hex(4)}"
    schemas = [f"{base}_{tag}" for tag in ("trio", "asyncio", "raw")]
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(drop_pg_schema, dsn, *schemas)
        sides: list[Side] = [
            Ours(dsn, schemas[0], TrioLoop(), "ours (PostgresStore, trio)"),
            Ours(dsn, schemas[1], AsyncioLoop(), "ours (PostgresStore, asyncio)"),
            Raw(dsn, schemas[2]),
        ]
        for side in sides:
            cleanup.callback(side.loop.close)
            side.loop.run(side.open)
            cleanup.callback(side.loop.run, side.aclose)
            side.loop.run(partial(side.fill, sizes.history))
        print("  PostgreSQL: reads against the raw floor ...", file=sys.stderr, flush=True)
        timings = _measure(sides, sizes)
    return _rows(sizes, timings, sides)


Timings = dict[tuple[int, str], list[float]]  # (read's position in READS, side label)


def _measure(sides: list[Side], sizes: Sizes) -> Timings:
    """Every read on every side: a warm-up, then ``sizes.pg_rounds`` interleaved rounds."""
    reads = {side.label: side.reads() for side in sides}
    for side in sides:
        for read in reads[side.label]:
            side.loop.run(partial(per_op_us, 6, read))
    timings: Timings = defaultdict(list)
    for r in range(sizes.pg_rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            for i, read in enumerate(reads[side.label]):
                block = partial(per_op_us, sizes.pg_floor_ops, read)
                timings[i, side.label].append(side.loop.run(block))
    return timings


def _rows(sizes: Sizes, timings: Timings, sides: list[Side]) -> list[Row]:
    """Per read, a row for ours under trio then under asyncio, each against the raw floor."""
    *ours, raw = sides
    out: list[Row] = []
    for i, read in enumerate(READS):
        at = f" @{sizes.history:,}" if i == 0 else ""
        for side in ours:
            backend = side.label.rsplit(", ", 1)[-1].rstrip(")")
            name = f"postgres {read}{at}, {backend}"
            mine, floor = Series(timings[i, side.label]), Series(timings[i, raw.label])
            out.append(speedup_row(name, raw.label, mine, floor, READ_FLOOR))
    return out
