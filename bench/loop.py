"""The loop's own overhead per iteration, against a bare loop calling the same model.

The model is a :class:`ScriptedModel` that answers instantly and the stores are
``agentloopmem``, so what is measured is the loop itself: building requests,
recording steps, replaying history, finalizing, holding the session's lease.
The floor calls the same model the same number of times and appends each reply
to a list.

The step row puts one step of a ten-step run (four tool calls and the response,
on a default ``Loop``: in memory, holding the session's lease) against one
``agentloopmem.StepStore.append`` timed in the same rounds. It guards against
regressions only (at most 25 appends a step): the loop's own cost is a tiny
fraction of one model call, so it is not a target to optimise towards.

Every limit here is a regression guard, not a goal (set with room above what
the code measures since it runs on public APIs only: a task group and a
shielded release per leased run, validators on every value the loop builds).

The lease rows time ten-step runs (four tool calls and the response) holding
the session's lease against the same runs on the same store with its lease
capability hidden (so the loop writes unfenced and takes no lease), on
``agentloopmem``, a SQLite file and (with ``AGENTLOOP_PG_DSN``) PostgreSQL.

Every row runs under trio; the overhead rows, the step row and the in-memory
lease row are measured under asyncio too (rows marked ``asyncio``), each
ratio against a floor timed under the same backend. Each side's clock starts
after its setup's garbage was collected (``settle``).
"""

from __future__ import annotations

import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import trio

import agentloopmem
from agentloop import (
    Loop,
    LoopConfig,
    Message,
    ModelReply,
    ModelRequest,
    RunStep,
    ScriptedModel,
    SessionStore,
    StepStore,
    StepType,
    SupportsLease,
    Tool,
    ToolCall,
    ToolContext,
)
from agentloopsql import PostgresStore, SqliteStore
from bench._report import Row, SpreadRow, best_of, settle

RUNS = 400
REPEATS = 5


async def _ok(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


TOOL = Tool("ok", "answers ok", {"type": "object"}, _ok)


def _script(runs: int, calls_per_run: int) -> list[ModelReply]:
    """Per run: ``calls_per_run - 1`` tool-call replies, then a final response."""
    replies: list[ModelReply] = []
    for run in range(runs):
        for i in range(calls_per_run - 1):
            call = ToolCall(f"c{run}-{i}", "ok", '{"n": 1}')
            replies.append(ModelReply(tool_calls=(call,), prompt_tokens=10, completion_tokens=2))
        replies.append(ModelReply(content=f"answer {run}", prompt_tokens=10, completion_tokens=2))
    return replies


def _named(name: str, backend: str) -> str:
    """The row name: trio rows keep their names, asyncio rows say so."""
    return name if backend == "trio" else f"{name} [asyncio]"


def _timed(work: Callable[[], Awaitable[None]], backend: str = "trio") -> float:
    """Seconds ``work`` takes inside a fresh run of ``backend`` (setup excluded)."""

    async def main() -> float:
        settle()
        start = time.perf_counter()
        await work()
        return time.perf_counter() - start

    return trio.run(main) if backend == "trio" else anyio.run(main, backend=backend)


def _loop_seconds(calls_per_run: int, sessions: int, backend: str) -> float:
    model = ScriptedModel(_script(RUNS, calls_per_run))
    loop = Loop(model=model, tools=[TOOL], config=LoopConfig(max_iterations=calls_per_run))

    async def work() -> None:
        for run in range(RUNS):
            await loop.run(f"s{run % sessions}", f"question {run}")

    return _timed(work, backend)


def _bare_seconds(calls_per_run: int, backend: str) -> float:
    model = ScriptedModel(_script(RUNS, calls_per_run))
    request = ModelRequest("", "", (Message("user", "question"),), (TOOL.spec,), None)

    async def work() -> None:
        replies: list[ModelReply] = []
        for _ in range(RUNS * calls_per_run):
            replies.append(await model.complete(request))

    return _timed(work, backend)


def _row(name: str, calls_per_run: int, sessions: int, limit: float, backend: str) -> Row:
    iterations = RUNS * calls_per_run
    steps = RUNS * (2 * calls_per_run)  # user + response, and a call/result pair per tool call
    ours = best_of(REPEATS, lambda: _loop_seconds(calls_per_run, sessions, backend))
    floor = best_of(REPEATS, lambda: _bare_seconds(calls_per_run, backend))
    detail = (
        f"{ours / iterations * 1e6:.1f} us/iteration, {ours / steps * 1e6:.1f} us/step "
        f"vs bare {floor / iterations * 1e6:.2f} us/iteration"
    )
    return Row(_named(name, backend), detail, ours / floor, limit)


def _overhead_rows(backend: str) -> list[Row]:
    return [
        _row("loop: 1 model call/run, new sessions", 1, RUNS, 250, backend),
        _row("loop: 10 model calls/run, new sessions", 10, RUNS, 100, backend),
        _row("loop: 10 model calls/run, 80-step history", 10, 1, 150, backend),
    ]


def rows() -> list[Row]:
    """Loop overhead per iteration (one call per run, ten per run, with a full history),
    the step row, then the cost of a leased run against an unleased one on each store;
    then the same under asyncio (the SQL lease rows excepted)."""
    return [
        *_overhead_rows("trio"),
        step_row(),
        *lease_rows(),
        *_overhead_rows("asyncio"),
        step_row("asyncio"),
        anyio.run(_memory_lease_row, "asyncio", backend="asyncio"),
    ]


# -- one loop step vs one in-memory append ---------------------------------------------

STEP_RUNS = 200  # ten-step runs per round
STEP_APPENDS = 20_000  # appends per round
# Rounds are short (~0.1 s a side), so one slow stretch of the host moves a round a lot;
# with fifteen the median of repeated rows moved by ±0.1, with seven by ±0.2.
STEP_ROUNDS = 15
# The loop's own cost is guarded against regressions, not optimised (a step is a tiny
# fraction of a model call): a loop step costs at most 25 in-memory appends.
STEP_TARGET = 25.0


async def _step_seconds(runs: int) -> float:
    """Seconds per step of ``runs`` ten-step runs on a default ``Loop``, each a new session."""
    model = ScriptedModel(_script(runs, LEASE_CALLS))
    loop = Loop(model=model, tools=[TOOL], config=LoopConfig(max_iterations=LEASE_CALLS))
    settle()
    start = time.perf_counter()
    for run in range(runs):
        await loop.run(f"s{run}", f"question {run}")
    return (time.perf_counter() - start) / (runs * 2 * LEASE_CALLS)


async def _append_seconds(count: int) -> float:
    """Seconds per ``agentloopmem.StepStore.append`` of ``count`` steps to one session."""
    store = agentloopmem.StepStore()
    steps = [RunStep("s", i, StepType.tool_result, "ok") for i in range(count)]
    settle()
    start = time.perf_counter()
    for step in steps:
        await store.append(step)
    return (time.perf_counter() - start) / count


async def _step_row(backend: str) -> Row:
    """The median of ``STEP_ROUNDS`` per-round ratios, the two sides timed back to back
    in alternating order."""
    ratios: list[float] = []
    seconds: dict[str, list[float]] = {"step": [], "append": []}
    for round_ in range(STEP_ROUNDS):
        sides = [("step", _step_seconds, STEP_RUNS), ("append", _append_seconds, STEP_APPENDS)]
        for kind, measure, count in sides if round_ % 2 == 0 else sides[::-1]:
            seconds[kind].append(await measure(count))
        ratios.append(seconds["step"][-1] / seconds["append"][-1])
    step, append = (statistics.median(seconds[kind]) * 1e6 for kind in ("step", "append"))
    return SpreadRow(
        _named("loop step vs in-memory append (10-step leased run, regression guard)", backend),
        f"{step:.1f} vs {append:.2f} us (medians)",
        statistics.median(ratios),
        STEP_TARGET,
        low=min(ratios),
        high=max(ratios),
    )


def step_row(backend: str = "trio") -> Row:
    """One step of a ten-step run on a default ``Loop`` against one in-memory append."""
    if backend == "trio":
        return trio.run(_step_row, backend)
    return anyio.run(_step_row, backend, backend=backend)


# -- leased vs unleased runs --------------------------------------------------------------

LEASE_RUNS = 20  # per sample on the SQL stores; ten times as many in memory, where runs are short
LEASE_ROUNDS = 7
LEASE_CALLS = 5  # four tool calls and the response: ten steps per run
# A lease costs a run a fixed amount: acquire and release (two more commits on the
# SQL stores) and registering with the renewal task. At most half again, per store.
LEASE_TARGETS = {"memory": 3.0, "sqlite": 1.5, "postgres": 1.5}


class _UnleasedSessions(agentloopmem.SessionStore):
    """The in-memory session store with its lease capability hidden (``SupportsLease`` fails)."""

    acquire_lease = None  # type: ignore[assignment]


class _UnleasedSqlite(SqliteStore):
    """A ``SqliteStore`` the loop sees without leases."""

    acquire_lease = None  # type: ignore[assignment]


class _UnleasedPostgres(PostgresStore):
    """A ``PostgresStore`` the loop sees without leases."""

    acquire_lease = None  # type: ignore[assignment]


Stores = tuple[StepStore, SessionStore]


async def _runs_seconds(stores: Stores, prefix: str, runs: int) -> float:
    """Seconds for ``runs`` ten-step runs, each on a new session."""
    model = ScriptedModel(_script(runs, LEASE_CALLS))
    config = LoopConfig(max_iterations=LEASE_CALLS)
    loop = Loop(model=model, steps=stores[0], sessions=stores[1], tools=[TOOL], config=config)
    settle()
    start = time.perf_counter()
    for run in range(runs):
        await loop.run(f"{prefix}-{run}", f"question {run}")
    return time.perf_counter() - start


async def _lease_row(name: str, leased: Stores, unleased: Stores, backend: str = "trio") -> Row:
    """The median of ``LEASE_ROUNDS`` per-round ratios, each round timing both back to back
    (in alternating order), so a machine that slows down for a while skews no single side."""
    assert isinstance(leased[1], SupportsLease)
    assert not isinstance(unleased[1], SupportsLease)
    runs = LEASE_RUNS * (10 if name == "memory" else 1)
    ratios: list[float] = []
    seconds: dict[str, list[float]] = {"leased": [], "unleased": []}
    for round_ in range(LEASE_ROUNDS):
        order = [("leased", leased), ("unleased", unleased)]
        for kind, stores in order if round_ % 2 == 0 else order[::-1]:
            seconds[kind].append(await _runs_seconds(stores, f"{name}-{kind}-{round_}", runs))
        ratios.append(seconds["leased"][-1] / seconds["unleased"][-1])
    per_run = {kind: statistics.median(s) / runs * 1e6 for kind, s in seconds.items()}
    return SpreadRow(
        _named(f"loop lease: {name}, 10-step run, leased vs unleased", backend),
        f"{per_run['leased']:.0f} vs {per_run['unleased']:.0f} us/run (medians)",
        statistics.median(ratios),
        LEASE_TARGETS[name],
        low=min(ratios),
        high=max(ratios),
    )


async def _memory_lease_row(backend: str = "trio") -> Row:
    steps, plain_steps = agentloopmem.StepStore(), agentloopmem.StepStore()
    return await _lease_row(
        "memory",
        (steps, agentloopmem.SessionStore(steps=steps)),
        (plain_steps, _UnleasedSessions()),
        backend,
    )


async def _sqlite_lease_row(directory: str) -> Row:
    path = os.path.join(directory, "lease.db")
    async with await SqliteStore.open(path) as leased, await _UnleasedSqlite.open(path) as plain:
        return await _lease_row("sqlite", (leased, leased), (plain, plain))


async def _postgres_lease_row(dsn: str) -> Row:
    import psycopg
    from psycopg import sql

    schema = f"agentloop_bench_{secrets.token_hex(4)}"
    try:
        async with (
            await PostgresStore.open(dsn, schema=schema, pool_size=2) as leased,
            await _UnleasedPostgres.open(dsn, schema=schema, pool_size=2) as plain,
        ):
            return await _lease_row("postgres", (leased, leased), (plain, plain))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _lease_rows() -> list[Row]:
    rows = [await _memory_lease_row()]
    with tempfile.TemporaryDirectory(prefix="agentloop-lease-bench-") as directory:
        rows.append(await _sqlite_lease_row(directory))
    dsn = os.environ.get("AGENTLOOP_PG_DSN", "")
    if dsn:
        rows.append(await _postgres_lease_row(dsn))
    return rows


def lease_rows() -> list[Row]:
    """A leased run against an unleased one on each store (PostgreSQL with AGENTLOOP_PG_DSN)."""
    return trio.run(_lease_rows)
