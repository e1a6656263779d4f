"""agentloopsql's PostgreSQL rows: the store against raw psycopg inserting the same rows.

Appends are compared with raw ``psycopg`` running an INSERT of the same row
(written in ``bench._raw_sql`` from the documented schema) on its own
connection(s) (the issue's floor) and, for one session, with that INSERT
behind one ``trio.to_thread`` hop (what any store that keeps the blocking
driver off the trio thread pays at least; info only). A fenced append (the
lease check and the INSERT in one statement) is timed against a plain one.
"""

from __future__ import annotations

import secrets
import threading
import time
from functools import partial
from typing import Any

import attrs
import trio

from agentloop import RunStep, StepType
from agentloopsql import PostgresStore
from bench._raw_sql import drop_pg_schema, fill_pg, new_key, pg_insert, pg_row
from bench._report import Row
from bench.sql import _REPEATS, _TASKS, _best, _last_n_pair, _per_op_us

_FLOOR_STEP = RunStep("floor", 0, StepType.tool_result, content="x" * 200, tool_args='{"k": 1}')


def _floor_params(session: str) -> list[object]:
    """One INSERT's parameters for ``session``; the caller sets a fresh key (the last one)."""
    return pg_row(attrs.evolve(_FLOOR_STEP, session_id=session))


def _pg_floor(dsn: str, insert: str, sessions: int, ops: int) -> float:
    """Raw psycopg: one autocommit connection per session, each in its own thread.

    Every INSERT carries a fresh append key, as the store's do (see ``bench._raw_sql``).
    """
    import psycopg

    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(sessions)]
    params = [_floor_params(f"floor-{n}") for n in range(sessions)]
    for conn, p in zip(conns, params, strict=True):
        conn.execute(insert, p)  # connect and warm up before the clock starts
    barrier = threading.Barrier(sessions + 1)

    def worker(conn: Any, p: list[object]) -> None:
        barrier.wait()
        for _ in range(ops):
            p[-1] = new_key()
            conn.execute(insert, p)

    threads = [
        threading.Thread(target=worker, args=(c, p)) for c, p in zip(conns, params, strict=True)
    ]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for conn in conns:
        conn.close()
    return sessions * ops / elapsed


def _pg_connection(dsn: str, insert: str) -> tuple[Any, list[object]]:
    """A raw autocommit connection, warmed up, and the parameters of one INSERT on it."""
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    params = _floor_params("floor-hop")
    for _ in range(6):  # psycopg prepares a statement on its 5th run
        params[-1] = new_key()
        conn.execute(insert, params)
    return conn, params


async def _pg_floor_hop(dsn: str, insert: str, ops: int) -> float:
    """Raw psycopg, one connection, each INSERT behind one ``trio.to_thread`` hop: per op, us.

    What any store that keeps the blocking driver off the trio thread pays at least.
    """
    conn, params = await trio.to_thread.run_sync(_pg_connection, dsn, insert)

    def one() -> None:
        params[-1] = new_key()
        conn.execute(insert, params)

    async def run() -> None:
        for _ in range(ops):
            await trio.to_thread.run_sync(one)

    try:
        return await _per_op_us(ops, run)
    finally:
        conn.close()


async def _pg_fenced_row(store: PostgresStore, ops: int) -> Row:
    """A fenced append (the lease check and the INSERT in one statement) vs a plain one."""
    lease = await store.acquire_lease("fenced", "bench", 3600)
    assert lease is not None
    view = store.fenced(lease)
    fenced = RunStep("fenced", 0, "tool_result", content="x" * 200, tool_args='{"k": 1}')
    plain = RunStep("plain", 0, "tool_result", content="x" * 200, tool_args='{"k": 1}')

    async def run_fenced() -> None:
        for _ in range(ops):
            await view.append(fenced)

    async def run_plain() -> None:
        for _ in range(ops):
            await store.append(plain)

    best_fenced = best_plain = float("inf")
    for _ in range(_REPEATS):  # interleaved, so drift hits both alike
        best_fenced = min(best_fenced, await _per_op_us(ops, run_fenced))
        best_plain = min(best_plain, await _per_op_us(ops, run_plain))
    return Row(
        "postgres fenced append, 1 session",
        f"vs plain append ({best_fenced:.0f} vs {best_plain:.0f} us)",
        best_fenced / best_plain,
        1.4,  # four round trips (before it was one statement) measured 1.6-1.9
    )


async def _pg_ours(store: PostgresStore, sessions: int, ops: int) -> float:
    steps = [
        RunStep(f"ours-{n}", 0, "tool_result", content="x" * 200, tool_args='{"k": 1}')
        for n in range(sessions)
    ]

    async def writer(step: RunStep) -> None:
        for _ in range(ops):
            await store.append(step)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for step in steps:
            nursery.start_soon(writer, step)
    return sessions * ops / (time.perf_counter() - start)


async def postgres_rows(dsn: str) -> list[Row]:
    """The PostgreSQL rows of the ``sql`` section, all measured in this run."""
    schema = f"agentloop_bench_{secrets.token_hex(4)}"
    store = await PostgresStore.open(dsn, schema=schema, pool_size=_TASKS)
    insert = pg_insert(schema)
    rows: list[Row] = []
    try:
        for sessions, ops in ((1, 300), (_TASKS, 60)):
            await _pg_ours(store, sessions, 5)  # warm every pooled connection
            floor = ours = 0.0
            for _ in range(_REPEATS):
                floor = max(
                    floor, await trio.to_thread.run_sync(_pg_floor, dsn, insert, sessions, ops)
                )
                ours = max(ours, await _pg_ours(store, sessions, ops))
            rows.append(
                Row(
                    f"postgres appends/s, {sessions} session{'s' if sessions > 1 else ''}",
                    f"vs raw psycopg, same INSERT ({ours:.0f} vs {floor:.0f}/s)",
                    ours / floor,
                    0.7 if sessions > 1 else 0.8,
                    at_least=True,
                )
            )
            if sessions == 1:
                hop = await _best(partial(_pg_floor_hop, dsn, insert, ops))
                rows.append(
                    Row(
                        "postgres appends/s, 1 session",
                        f"vs raw psycopg + one to_thread hop, info only ({ours:.0f} vs "
                        f"{1e6 / hop:.0f}/s)",
                        ours * hop / 1e6,
                        0.0,
                        at_least=True,
                    )
                )
        rows.append(await _pg_fenced_row(store, 300))
        await trio.to_thread.run_sync(fill_pg, dsn, schema, {"big": 100_000, "small": 100})
        big, small = await _last_n_pair(store)
        rows.append(
            Row(
                "postgres last_n(50)",
                f"10^5 vs 10^2 steps of history ({big:.0f} vs {small:.0f} us)",
                big / small,
                1.5,
            )
        )
    finally:
        try:
            await store.aclose()
        finally:
            drop_pg_schema(dsn, schema)
    return rows
