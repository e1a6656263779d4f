"""agentloopsql: each store against the raw driver doing the same statements.

SQLite appends are compared with two floors: raw ``sqlite3`` running the
same ``BEGIN IMMEDIATE; INSERT; COMMIT`` in the calling thread (the physical
floor), and the same raw statements behind one ``trio.to_thread`` hop (what
any off-thread store must pay per call). ``last_n`` is timed at a 10^5-step
history against a 10^2-step one in the same table. The PostgreSQL rows
(``bench._sql_pg``) need ``AGENTLOOP_PG_DSN``; they are left out without it.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable

import trio

from agentloop import RunStep
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql._sqlite import _INSERT_STEP, step_params
from bench._report import Row

NO_TARGET = float("inf")
_STEP = RunStep("bench", 0, "tool_result", content="x" * 200, tool_args='{"k": 1}')
_SEQ_OPS = 400
_TASKS = 16
_REPEATS = 5


async def _per_op_us(ops: int, run: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await run()
    return (time.perf_counter() - start) / ops * 1e6


async def _best(make: Callable[[], Awaitable[float]]) -> float:
    return min([await make() for _ in range(_REPEATS)])


# -- SQLite -----------------------------------------------------------------


def _raw_sqlite(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    return conn


def _raw_append(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(_INSERT_STEP, step_params(_STEP))
    conn.execute("COMMIT")


async def _sqlite_appends(directory: str, synchronous: str) -> list[Row]:
    floor_path = os.path.join(directory, f"floor-{synchronous}.db")
    store_path = os.path.join(directory, f"store-{synchronous}.db")
    await (await SqliteStore.open(floor_path)).aclose()  # the same schema for the floor
    raw = _raw_sqlite(floor_path, synchronous)
    store = await SqliteStore.open(store_path, synchronous=synchronous)

    async def in_thread() -> None:
        for _ in range(_SEQ_OPS):
            _raw_append(raw)

    async def one_hop() -> None:
        for _ in range(_SEQ_OPS):
            await trio.to_thread.run_sync(_raw_append, raw)

    async def ours() -> None:
        for _ in range(_SEQ_OPS):
            await store.append(_STEP)

    async def ours_concurrent() -> None:
        async def writer() -> None:
            for _ in range(_SEQ_OPS // _TASKS * 4):
                await store.append(_STEP)

        async with trio.open_nursery() as nursery:
            for _ in range(_TASKS):
                nursery.start_soon(writer)

    one_connection = trio.CapacityLimiter(1)

    async def per_call_concurrent() -> None:
        # The alternative design: every call its own to_thread hop, one at a time
        # on the one connection, one commit per append.
        async def writer() -> None:
            for _ in range(_SEQ_OPS // _TASKS * 4):
                await trio.to_thread.run_sync(_raw_append, raw, limiter=one_connection)

        async with trio.open_nursery() as nursery:
            for _ in range(_TASKS):
                nursery.start_soon(writer)

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
            "sqlite append, sequential",
            f"vs raw sqlite3 + one to_thread hop ({seq:.0f} vs {hop:.0f} us; {mode})",
            seq / hop,
            1.2,
        ),
        Row(
            "sqlite append, sequential",
            f"vs raw sqlite3 in-thread, info only ({seq:.0f} vs {floor:.0f} us; {mode})",
            seq / floor,
            NO_TARGET,
        ),
        Row(
            f"sqlite append, {_TASKS} tasks",
            f"throughput vs raw in-thread ({1e6 / conc:.0f} vs {1e6 / floor:.0f}/s; {mode})",
            floor / conc,
            0.5,
            at_least=True,
        ),
        Row(
            f"sqlite append, {_TASKS} tasks",
            f"vs to_thread per call + CapacityLimiter(1) ({1e6 / conc:.0f} vs "
            f"{1e6 / per_call:.0f}/s; {mode})",
            per_call / conc,
            1.0,
            at_least=True,
        ),
    ]


def fill_sqlite(path: str, sizes: dict[str, int]) -> None:
    """Insert ``sizes[session]`` steps per session straight into a SqliteStore's file."""
    conn = _raw_sqlite(path, "normal")
    conn.execute("BEGIN")
    for session, count in sizes.items():
        rows = (
            step_params(RunStep(session, i, "tool_result", content="y" * 200)) for i in range(count)
        )
        conn.executemany(_INSERT_STEP, rows)
    conn.execute("COMMIT")
    conn.close()


async def _sqlite_last_n(directory: str) -> Row:
    path = os.path.join(directory, "history.db")
    await (await SqliteStore.open(path)).aclose()
    await trio.to_thread.run_sync(fill_sqlite, path, {"big": 100_000, "small": 100})
    async with await SqliteStore.open(path) as store:
        big, small = await _last_n_pair(store)
    return Row(
        "sqlite last_n(50)",
        f"10^5 vs 10^2 steps of history ({big:.0f} vs {small:.0f} us)",
        big / small,
        1.5,
    )


async def _last_n_pair(store: SqliteStore | PostgresStore) -> tuple[float, float]:
    ops = 200

    def timed(session: str) -> Callable[[], Awaitable[float]]:
        async def run() -> None:
            for _ in range(ops):
                await store.last_n(session, 50)

        return lambda: _per_op_us(ops, run)

    big = small = float("inf")
    for _ in range(_REPEATS):  # interleaved, so drift hits both alike
        big = min(big, await timed("big")())
        small = min(small, await timed("small")())
    return big, small


# -- the section ----------------------------------------------------------------


async def _all_rows() -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="agentloopsql-bench-") as directory:
        for synchronous in ("full", "normal"):
            rows.extend(await _sqlite_appends(directory, synchronous))
        rows.append(await _sqlite_last_n(directory))
    dsn = os.environ.get("AGENTLOOP_PG_DSN", "")
    if dsn:
        from bench._sql_pg import postgres_rows

        rows.extend(await postgres_rows(dsn))
    return rows


def rows() -> list[Row]:
    """SQLite and (with ``AGENTLOOP_PG_DSN``) PostgreSQL ratios, all measured in this run."""
    return trio.run(_all_rows)
