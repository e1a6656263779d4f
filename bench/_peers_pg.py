"""PostgresStore vs the PostgreSQL peers: one server, one run, each side in its own schema.

Sides, each configured as its documentation shows a new user, with only a
``search_path`` added so that each keeps its tables in a schema of its own:

- ours: ``PostgresStore.open(dsn, schema=...)`` (its default pool of 8), under trio;
- LangGraph's ``AsyncPostgresSaver.from_conn_string`` (one connection) holding
  the conversation as a graph does (``bench._peers_mem.MessagesChannel``);
- OpenAI Agents' ``SQLAlchemySession`` with ``create_tables=True`` on one
  shared SQLAlchemy async engine (``postgresql+asyncpg://``, its default pool);
- ADK's ``DatabaseSessionService(db_url="postgresql+asyncpg://...")``,
  ``append_event`` and ``get_session`` with ``num_recent_events=20``;
- the reference: raw psycopg (async, autocommit) running one INSERT of the same
  row, or one indexed SELECT of the newest 20, on our schema's tables; as many
  connections as our pool (``RAW_CONNECTIONS``).

Ours runs in one trio run kept for the whole comparison, the peers and the
reference under asyncio, each on an event loop of its own kept likewise. Every
measure is timed per round on each side, the order of the sides reversed every
other round; items are built before the clock starts.

Histories are filled before the first round, the cheapest faithful way: ours
with ``append_many``, the reference with ``COPY``, OpenAI's with one
``add_items`` of them all; ADK's ``StorageEvent`` rows (what ``append_event``
adds) in one transaction, since each ``append_event`` is several round trips;
LangGraph's filler checkpoints with its own ``UPSERT_CHECKPOINTS_SQL`` in one
``executemany``, carrying no list but the newest (stored by ``aput``), as in
memory. Appends at a history go onto a session filled to it, which takes at
most a tenth of that history in appends (or one round's) before the next
round gets a fresh one. Each concurrent appender appends to a session of its
own (of ``Sizes.small`` steps, kept for every round); its row is the group's
time over its appends. Every schema made here is dropped at the end, whatever
happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import sys
from collections import defaultdict
from collections.abc import Callable
from contextlib import AsyncExitStack
from functools import partial
from typing import Any, Protocol

from agentloop import RunStep, StepType
from agentloopsql import PostgresStore
from bench import _peers_load as load
from bench._peers_mem import (
    CONTENT,
    WINDOW,
    Handle,
    MessagesChannel,
    adk_events,
    new_session_id,
)
from bench._peers_timing import AsyncioLoop, Series, Sizes, TrioLoop, per_op_us, speedup_row
from bench._raw_sql import drop_pg_schema, pg_copy, pg_insert, pg_last_n, pg_row, pg_schema
from bench._report import Row

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
RAW_CONNECTIONS = 8  # PostgresStore.open's default pool_size
ITEM = {"role": "user", "content": CONTENT}  # OpenAI's step
APP, USER = "bench", "bench-user"  # ADK's
REFERENCE = 0.0  # the reference line has no target: it is printed, never judged
READ_FLOOR = 0.7  # except for reads: ours at least 0.7x raw psycopg's read of the same rows
Loop = TrioLoop | AsyncioLoop


class Side(Protocol):
    """One store under comparison; each method runs on ``loop``."""

    label: str
    schema: str
    loop: Loop

    async def open(self) -> None: ...
    async def aclose(self) -> None: ...
    async def session(self, history: int) -> Handle: ...
    def prepare(self, handle: Handle, count: int) -> None: ...
    async def append(self, handle: Handle) -> None: ...
    async def read(self, handle: Handle) -> object: ...


def _steps(handle: Handle, count: int) -> list[RunStep]:
    """The session's next ``count`` steps (its length grows by them)."""
    first, handle.length = handle.length, handle.length + count
    return [
        RunStep(handle.session, first + i, StepType.tool_result, content=CONTENT)
        for i in range(count)
    ]


def _sqlalchemy_url(dsn: str) -> Any:
    """``dsn`` as the ``postgresql+asyncpg://`` URL the peers' docs show."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(dsn)
    port = parts.get("port")
    return load.module("sqlalchemy.engine").URL.create(
        "postgresql+asyncpg",
        username=parts.get("user"),
        password=parts.get("password"),
        host=parts.get("host"),
        port=int(port) if port else None,
        database=parts.get("dbname"),
    )


class Ours:
    """``PostgresStore`` under trio, in a fresh schema it creates."""

    label = "ours (PostgresStore)"

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.loop: Loop = TrioLoop()

    async def open(self) -> None:
        self.store = await PostgresStore.open(self.dsn, schema=self.schema)

    async def aclose(self) -> None:
        await self.store.aclose()

    async def session(self, history: int) -> Handle:
        handle = Handle(new_session_id(), iter(()))
        if history:
            await self.store.append_many(_steps(handle, history))
        return handle

    def prepare(self, handle: Handle, count: int) -> None:
        handle.pending = iter(_steps(handle, count))

    async def append(self, handle: Handle) -> None:
        await self.store.append(next(handle.pending))

    async def read(self, handle: Handle) -> object:
        return await self.store.last_n(handle.session, WINDOW)


class Raw:
    """Raw psycopg on our tables, under asyncio: what any store on this driver pays at least.

    Its connections are handed out last-in first-out, so one session's calls
    keep to one connection (and its prepared statements).
    """

    label = "raw psycopg (reference: raw time / ours)"

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.loop: Loop = AsyncioLoop()
        self.insert, self.select = pg_insert(schema), pg_last_n(schema)

    async def open(self) -> None:
        import psycopg

        await (await PostgresStore.open(self.dsn, schema=self.schema)).aclose()  # the tables
        self.conns = [
            await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            for _ in range(RAW_CONNECTIONS)
        ]
        self.free: asyncio.LifoQueue[Any] = asyncio.LifoQueue()
        for conn in self.conns:
            self.free.put_nowait(conn)

    async def aclose(self) -> None:
        for conn in self.conns:
            await conn.close()

    async def session(self, history: int) -> Handle:
        handle = Handle(new_session_id(), iter(()))
        conn = self.conns[0]
        copy_rows = pg_copy(self.schema)
        async with conn.transaction(), conn.cursor() as cur, cur.copy(copy_rows) as copy:
            for step in _steps(handle, history):
                await copy.write_row(pg_row(step))
        return handle

    def prepare(self, handle: Handle, count: int) -> None:
        handle.pending = iter([pg_row(step) for step in _steps(handle, count)])

    async def append(self, handle: Handle) -> None:
        conn = await self.free.get()
        try:
            await conn.execute(self.insert, next(handle.pending))
        finally:
            self.free.put_nowait(conn)

    async def read(self, handle: Handle) -> object:
        conn = await self.free.get()
        try:
            cursor = await conn.execute(self.select, (handle.session, WINDOW))
            return await cursor.fetchall()
        finally:
            self.free.put_nowait(conn)


class LangGraphPg:
    """LangGraph's ``AsyncPostgresSaver`` from its connection string, under asyncio."""

    def __init__(self, dsn: str, schema: str) -> None:
        from psycopg.conninfo import make_conninfo

        self.label = load.labelled(load.LANGGRAPH_PG)
        self.schema = schema
        self.loop: Loop = AsyncioLoop()
        self.conninfo = make_conninfo(dsn, options=f"-c search_path={schema}")
        self.channel = MessagesChannel()

    async def open(self) -> None:
        self.stack = AsyncExitStack()
        saver_class = load.load(load.LANGGRAPH_PG).AsyncPostgresSaver
        self.saver = await self.stack.enter_async_context(
            saver_class.from_conn_string(self.conninfo)
        )
        await self.saver.setup()

    async def aclose(self) -> None:
        await self.stack.aclose()

    async def session(self, history: int) -> Handle:
        """A thread of ``history`` checkpoints (at least one), the newest holding the list."""
        thread = {"configurable": {"thread_id": new_session_id(), "checkpoint_ns": ""}}
        handle = Handle((self.saver, thread), iter(()), head=thread)
        await self._fillers(handle, max(history, 1) - 1)
        newest = self.channel.newest(handle, max(history, 1))
        handle.head = await self.saver.aput(handle.head, *newest)
        return handle

    async def _fillers(self, handle: Handle, count: int) -> None:
        """``count`` checkpoints without a list, as ``aput`` stores them, in one statement."""
        jsonb = load.module("psycopg.types.json").Jsonb
        metadata_of = self.channel.base.get_serializable_checkpoint_metadata
        thread = handle.head["configurable"]["thread_id"]
        rows, parent = [], None
        for step in range(count):
            checkpoint, metadata, _ = self.channel.checkpoint(self.saver, step, None, None)
            metadata = metadata_of(handle.head, metadata)
            rows.append((thread, "", checkpoint["id"], parent, jsonb(checkpoint), jsonb(metadata)))
            parent = checkpoint["id"]
            ids = {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": parent}
            handle.head = {"configurable": ids}
        if rows:
            conn = self.saver.conn
            async with self.saver.lock, conn.transaction(), conn.cursor() as cur:
                await cur.executemany(self.saver.UPSERT_CHECKPOINTS_SQL, rows)

    def prepare(self, handle: Handle, count: int) -> None:
        self.channel.plan(handle, count)

    async def append(self, handle: Handle) -> None:
        await self.channel.append(handle)

    async def read(self, handle: Handle) -> object:
        return await self.channel.read(handle)


class OpenAiPg:
    """OpenAI Agents' ``SQLAlchemySession``, one per session on one async engine, under asyncio."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.label = load.labelled(load.OPENAI_PG)
        self.url, self.schema = _sqlalchemy_url(dsn), schema
        self.loop: Loop = AsyncioLoop()

    async def open(self) -> None:
        create_engine = load.module("sqlalchemy.ext.asyncio").create_async_engine
        settings = {"server_settings": {"search_path": self.schema}}
        self.engine = create_engine(self.url, connect_args=settings)
        self.session_class = load.load(load.OPENAI_PG).SQLAlchemySession

    async def aclose(self) -> None:
        await self.engine.dispose()

    async def session(self, history: int) -> Handle:
        session = self.session_class(new_session_id(), engine=self.engine, create_tables=True)
        await session.add_items([ITEM] * history)  # also creates the tables, the first time
        return Handle(session, iter(()))

    def prepare(self, handle: Handle, count: int) -> None:
        """Nothing to build: every step appends the same item."""

    async def append(self, handle: Handle) -> None:
        await handle.session.add_items([ITEM])

    async def read(self, handle: Handle) -> object:
        return await handle.session.get_items(limit=WINDOW)


class AdkPg:
    """ADK's ``DatabaseSessionService`` from its database URL, under asyncio."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.label = load.labelled(load.ADK_PG)
        self.url, self.schema = _sqlalchemy_url(dsn), schema
        self.loop: Loop = AsyncioLoop()

    async def open(self) -> None:
        service_class = load.load(load.ADK_PG).DatabaseSessionService
        settings = {"server_settings": {"search_path": self.schema}}
        url = self.url.render_as_string(hide_password=False)
        self.service = service_class(db_url=url, connect_args=settings)
        await self.service.prepare_tables()
        sessions = load.module("google.adk.sessions.base_session_service")
        self.config = sessions.GetSessionConfig(num_recent_events=WINDOW)
        self.storage_event = load.module("google.adk.sessions.schemas.v1").StorageEvent

    async def aclose(self) -> None:
        await self.service.close()

    async def session(self, history: int) -> Handle:
        """A session whose events are stored in one transaction, loaded as a runner loads it."""
        sid = new_session_id()
        session = await self.service.create_session(app_name=APP, user_id=USER, session_id=sid)
        if history:
            rows = [self.storage_event.from_event(session, e) for e in adk_events(history)]
            async with self.service.database_session_factory() as db:
                db.add_all(rows)
                await db.commit()
        return Handle(await self._get(sid), iter(()))

    def prepare(self, handle: Handle, count: int) -> None:
        handle.pending = iter(adk_events(count))

    async def append(self, handle: Handle) -> None:
        await self.service.append_event(handle.session, next(handle.pending))

    async def read(self, handle: Handle) -> object:
        return await self._get(handle.session.id)

    async def _get(self, sid: str) -> Any:
        return await self.service.get_session(
            app_name=APP, user_id=USER, session_id=sid, config=self.config
        )


# Each peer's side and the tag of its schema.
PEER_SIDES: dict[load.Peer, tuple[str, Callable[[str, str], Side]]] = {
    load.LANGGRAPH_PG: ("langgraph", LangGraphPg),
    load.OPENAI_PG: ("openai", OpenAiPg),
    load.ADK_PG: ("adk", AdkPg),
}


def unreachable(dsn: str) -> str | None:
    """Why no connection to ``dsn`` can be made, or ``None`` when one can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed: pip install 'agentloop-seam[postgres]'"
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).strip()}"
    return None


def rows(sizes: Sizes, peers: list[load.Peer], dsn: str) -> list[Row]:
    """Ours vs every installed PostgreSQL peer (and the raw reference), measured here.

    Raises whatever a side raised; every schema made here is dropped all the same.
    """
    base = f"agentloop_bench_{secrets.token_hex(4)}"
    made = [(tag, make) for peer, (tag, make) in PEER_SIDES.items() if peer in peers]
    makers = [("ours", Ours), *made, ("raw", Raw)]
    schemas = [f"{base}_{tag}" for tag, _ in makers]
    sides: list[Side] = []
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(drop_pg_schema, dsn, *schemas)
        _create_schemas(dsn, schemas[1:-1])  # ours and the reference's: PostgresStore.open
        for (_, make), schema in zip(makers, schemas, strict=True):
            side = make(dsn, schema)
            sides.append(side)
            cleanup.callback(side.loop.close)
            side.loop.run(side.open)
            cleanup.callback(side.loop.run, side.aclose)
        print("  PostgreSQL: filling histories ...", file=sys.stderr, flush=True)
        timings = _measure(sides, sizes)
    return _rows(sizes, timings, sides[0], sides[1:])


def _create_schemas(dsn: str, schemas: list[str]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"CREATE SCHEMA {pg_schema(schema)}")


Measure = tuple[str, int]  # ("append" | "read" | "tasks", history or appenders)
Timings = dict[tuple[Measure, str], list[float]]


def _histories(sizes: Sizes) -> tuple[int, ...]:
    return (sizes.small, sizes.history, sizes.pg_big)


def _append_sessions(side: Side, history: int, sizes: Sizes) -> list[Handle]:
    """One handle per round: a session takes at most ``history // 10`` appends (or one block)."""
    blocks_each = max(1, history // 10 // sizes.pg_ops)
    count = math.ceil(sizes.pg_rounds / blocks_each)
    sessions = [side.loop.run(partial(side.session, history)) for _ in range(count)]
    return [sessions[r // blocks_each] for r in range(sizes.pg_rounds)]


def _appenders(side: Side, tasks: int, sizes: Sizes) -> list[Handle]:
    """``tasks`` sessions of ``sizes.small`` steps each, one per concurrent appender."""
    return [side.loop.run(partial(side.session, sizes.small)) for _ in range(tasks)]


async def _append_block(side: Side, handle: Handle, ops: int) -> float:
    side.prepare(handle, ops)
    return await per_op_us(ops, partial(side.append, handle))


async def _read_block(side: Side, handle: Handle, ops: int) -> float:
    return await per_op_us(ops, partial(side.read, handle))


async def _tasks_block(side: Side, handles: list[Handle], total: int) -> float:
    """Microseconds per append while every handle's appender runs at once."""
    each = total // len(handles)
    for handle in handles:
        side.prepare(handle, each)

    async def appender(handle: Handle) -> None:
        for _ in range(each):
            await side.append(handle)

    works = [partial(appender, handle) for handle in handles]
    return await per_op_us(1, partial(side.loop.together, works)) / (each * len(handles))


def _measure(sides: list[Side], sizes: Sizes) -> Timings:
    """Every measure on every side, ``sizes.pg_rounds`` interleaved rounds."""
    histories = _histories(sizes)
    reads = {(s.label, h): s.loop.run(partial(s.session, h)) for s in sides for h in histories}
    appends = {(s.label, h): _append_sessions(s, h, sizes) for s in sides for h in histories}
    groups = {(s.label, t): _appenders(s, t, sizes) for s in sides for t in sizes.pg_tasks}
    for side in sides:  # warm every connection and prepared statement
        warm = side.loop.run(partial(side.session, sizes.small))
        side.loop.run(partial(_append_block, side, warm, 6))
        side.loop.run(partial(_read_block, side, warm, 6))
        widest = groups[side.label, max(sizes.pg_tasks)]
        side.loop.run(partial(_tasks_block, side, widest, len(widest)))
    timings: Timings = defaultdict(list)
    for r in range(sizes.pg_rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            run = side.loop.run
            for h in histories:
                block = partial(_append_block, side, appends[side.label, h][r], sizes.pg_ops)
                timings[("append", h), side.label].append(run(block))
                block = partial(_read_block, side, reads[side.label, h], sizes.pg_ops)
                timings[("read", h), side.label].append(run(block))
            for t in sizes.pg_tasks:
                block = partial(_tasks_block, side, groups[side.label, t], sizes.pg_task_appends)
                timings[("tasks", t), side.label].append(run(block))
    return timings


def _rows(sizes: Sizes, timings: Timings, ours: Side, others: list[Side]) -> list[Row]:
    """A "vs" row per measure and peer, then the reference's row, measure by measure."""
    names = {("append", h): f"postgres append @{h:,}" for h in _histories(sizes)}
    names |= {("read", h): f"postgres newest-20 read @{h:,}" for h in _histories(sizes)}
    for t in sizes.pg_tasks:
        each = sizes.pg_task_appends // t
        names["tasks", t] = f"postgres {t} concurrent appenders, {each * t} appends"
    out: list[Row] = []
    for measure, name in names.items():
        mine = Series(timings[measure, ours.label])
        for side in others:
            theirs = Series(timings[measure, side.label])
            limit = 1.0
            if isinstance(side, Raw):
                limit = READ_FLOOR if measure[0] == "read" else REFERENCE
            out.append(speedup_row(name, side.label, mine, theirs, limit))
    return out
