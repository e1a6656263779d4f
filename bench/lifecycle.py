"""Session lifecycle: paging deep into a million sessions, prune, expire, export and import.

Each row compares a lifecycle operation with the plain store work it stands
for, on the same store in the same run:

- **paging**: a page deep into 1,000,000 sessions against page 1 (a page is an
  index walk, so depth should cost about nothing), unfiltered and with one
  label pair;
- **prune**: removing N steps against appending them;
- **expire**: expiring N idle sessions against ``delete_session`` of as many,
  and (detail only) the longest append stall while 100,000 idle sessions are
  expired in bounded batches;
- **export / import** of one large session against ``all()`` and
  ``append_many`` of its steps.

The in-memory store is always measured; SQLite and (with ``AGENTLOOP_PG_DSN``)
PostgreSQL are measured where their stores offer the capabilities.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import attrs
import trio

from agentloop import (
    RunStep,
    Session,
    SupportsExpire,
    SupportsPaging,
    SupportsPrune,
    export_sessions,
    import_sessions,
)
from agentloopmem import MemoryStore
from bench._report import Row, settle

SESSIONS = 1_000_000
DEEP_PAGES = 2_000
PAGE = 100
PRUNE_STEPS = 20_000
EXPIRE_SESSIONS = 2_000
STALL_SESSIONS = 100_000
EXPORT_STEPS = 50_000
NO_TARGET = float("inf")

Seeder = Callable[[Any, int], Awaitable[None]]
Opener = Callable[[], Any]


def _step(session_id: str, index: int) -> RunStep:
    return RunStep(session_id, index, "tool_result", content="x" * 200, tool_args='{"k": 1}')


async def _timed(run: Callable[[], Awaitable[object]]) -> float:
    settle()
    start = time.perf_counter()
    await run()
    return time.perf_counter() - start


async def _best(repeats: int, run: Callable[[], Awaitable[object]]) -> float:
    return min([await _timed(run) for _ in range(repeats)])


@attrs.frozen
class Target:
    """A store under measure: how to seed it with sessions, and how idle "idle" is.

    ``seed(prefix, count)`` writes ``count`` sessions (every tenth labelled
    ``team=a``) that are idle for ``idle_for`` seconds once ``wait`` seconds
    have passed.
    """

    name: str
    store: Any
    seed: Callable[[str, int], Awaitable[None]]
    idle_for: float
    wait: float


def memory_target(store: MemoryStore) -> Target:
    """The in-memory store, seeded through its own calls (it has no tables to fill)."""

    async def seed(prefix: str, count: int) -> None:
        for n in range(count):
            if n % 10 == 0:
                await store.set_labels(f"{prefix}{n:07d}", {"team": "a"})
            else:
                await store.update_data(f"{prefix}{n:07d}", None)

    return Target("mem", store, seed, idle_for=0.05, wait=0.1)


async def _deep_cursor(store: SupportsPaging, labels: dict[str, str] | None) -> str | None:
    """The cursor ``DEEP_PAGES`` pages in (walking there is setup, not timed)."""
    cursor = None
    for _ in range(DEEP_PAGES // (10 if labels else 1)):
        cursor = (await store.page_sessions(limit=PAGE, cursor=cursor, labels=labels)).cursor
    return cursor


async def paging_rows(name: str, store: SupportsPaging) -> list[Row]:
    """Page 1 against a page deep into the store, without and with a one-pair filter."""
    rows = []
    for labels, what in ((None, "no filter"), ({"team": "a"}, "label team=a")):
        deep = await _deep_cursor(store, labels)

        def page(at: str | None, filter_: dict[str, str] | None = labels) -> Callable[[], Any]:
            return lambda: store.page_sessions(limit=PAGE, cursor=at, labels=filter_)

        first = await _best(20, page(None))
        later = await _best(20, page(deep))
        rows.append(
            Row(
                f"{name}: deep page / page 1",
                f"{SESSIONS:,} sessions, page {DEEP_PAGES:,} of {PAGE}, {what}",
                later / first,
                3.0,
            )
        )
    return rows


async def prune_row(name: str, store: Any) -> Row:
    """Removing PRUNE_STEPS steps against appending as many, per step."""
    steps = [_step("prune", n) for n in range(2 * PRUNE_STEPS)]
    appended = await _timed(lambda: store.append_many(steps[:PRUNE_STEPS]))
    await store.append_many(steps[PRUNE_STEPS:])
    pruned = await _timed(lambda: store.prune_steps("prune", keep_last=PRUNE_STEPS))
    await store.delete_session("prune")
    return Row(
        f"{name}: prune / append",
        f"{PRUNE_STEPS:,} steps removed vs appended ({pruned / PRUNE_STEPS * 1e6:.1f} us/step)",
        pruned / appended,
        1.0,
    )


async def expire_row(target: Target) -> Row:
    """Expiring EXPIRE_SESSIONS idle sessions against deleting as many one by one."""
    name, store = target.name, target.store
    await target.seed("del", EXPIRE_SESSIONS)
    deleted = await _timed(
        lambda: _each(store.delete_session, [f"del{n:07d}" for n in range(EXPIRE_SESSIONS)])
    )
    await target.seed("exp", EXPIRE_SESSIONS)
    await trio.sleep(target.wait)
    expired = await _timed(lambda: _expire_all(store, target.idle_for))
    return Row(
        f"{name}: expire / delete_session",
        f"{EXPIRE_SESSIONS:,} idle sessions ({expired / EXPIRE_SESSIONS * 1e6:.1f} us/session)",
        expired / deleted,
        2.0,
    )


async def _each(call: Callable[[str], Awaitable[object]], ids: list[str]) -> None:
    for session_id in ids:
        await call(session_id)


async def _expire_all(store: SupportsExpire, idle_for: float) -> int:
    total = 0
    while gone := await store.expire_sessions(idle_for=idle_for, limit=1000):
        total += len(gone)
    return total


async def stall_row(target: Target) -> Row:
    """The longest append while STALL_SESSIONS idle sessions are expired, against the median."""
    name, store = target.name, target.store
    await target.seed("stall", STALL_SESSIONS)
    await trio.sleep(target.wait)
    latencies: list[float] = []
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def expire() -> None:
            await _expire_all(store, target.idle_for)
            done.set()

        nursery.start_soon(expire)
        index = 0
        while not done.is_set():
            start = time.perf_counter()
            await store.append(_step("writer", index))
            latencies.append(time.perf_counter() - start)
            index += 1
    await store.delete_session("writer")
    latencies.sort()
    median, worst = latencies[len(latencies) // 2], latencies[-1]
    return Row(
        f"{name}: longest append stall during expire / median append",
        f"{STALL_SESSIONS:,} idle sessions expired; worst {worst * 1e3:.1f} ms, "
        f"median {median * 1e3:.2f} ms, {len(latencies):,} appends",
        worst / median,
        NO_TARGET,
    )


def _naive_line(step: RunStep) -> str:
    fields = attrs.asdict(step, value_serializer=_plain)
    return json.dumps(fields, ensure_ascii=False) + "\n"


def _plain(_instance: object, _field: object, value: object) -> object:
    return value.isoformat() if isinstance(value, datetime) else value


async def naive_export(store: Any, session_id: str, path: str) -> None:
    """What a user writes without ``export_sessions``: ``all()``, then one JSON line a step."""
    steps = await store.all(session_id)
    text = "".join(_naive_line(step) for step in steps)
    await trio.Path(path).write_text(text, encoding="utf-8")


async def naive_import(store: Any, path: str) -> None:
    """What a user writes without ``import_sessions``: parse every line, one ``append_many``."""
    text = await trio.Path(path).read_text(encoding="utf-8")
    steps = []
    for line in text.splitlines():
        fields = json.loads(line)
        fields["created_at"] = datetime.fromisoformat(fields["created_at"])
        steps.append(RunStep(**fields))
    await store.append_many(steps)


async def transfer_rows(name: str, store: Any, directory: str) -> list[Row]:
    """Export and import of one EXPORT_STEPS-step session against the hand-written loops."""
    steps = [_step("big", n) for n in range(EXPORT_STEPS)]
    await store.put(Session("big", model="m", system_prompt="p"))
    await store.append_many(steps)
    naive = os.path.join(directory, f"{name}-naive.jsonl")
    path = os.path.join(directory, f"{name}-export.jsonl")
    floor_out = await _best(3, lambda: naive_export(store, "big", naive))
    ours_out = await _best(3, lambda: export_sessions(store, store, path, session_ids=["big"]))
    await store.delete_session("big")
    floor_in = await _timed(lambda: naive_import(store, naive))
    await store.delete_session("big")
    ours_in = await _timed(lambda: import_sessions(store, store, path))
    await store.delete_session("big")
    per = f"{EXPORT_STEPS:,} steps"
    return [
        Row(
            f"{name}: export_sessions / all() + json.dumps per step",
            f"{per} ({ours_out / EXPORT_STEPS * 1e6:.1f} us/step, bounded memory)",
            ours_out / floor_out,
            2.0,
        ),
        Row(
            f"{name}: import_sessions / json.loads + append_many",
            f"{per} ({ours_in / EXPORT_STEPS * 1e6:.1f} us/step, whole file checked first)",
            ours_in / floor_in,
            3.0,  # it reads the file twice: every line is checked before anything is written
        ),
    ]


async def store_rows(target: Target, directory: str) -> list[Row]:
    """Every lifecycle row this store supports, measured on it."""
    rows: list[Row] = []
    name, store = target.name, target.store
    if isinstance(store, SupportsPrune):
        rows.append(await prune_row(name, store))
    if isinstance(store, SupportsExpire):
        rows.append(await expire_row(target))
        rows.append(await stall_row(target))
    rows.extend(await transfer_rows(name, store, directory))
    if isinstance(store, SupportsPaging):
        await target.seed("s", SESSIONS)
        rows.extend(await paging_rows(name, store))
    return rows


async def _all_rows() -> list[Row]:
    from bench import _life_sql

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-life-") as directory:
        store = MemoryStore()
        try:
            rows.extend(await store_rows(memory_target(store), directory))
        finally:
            await store.aclose()
        async with _life_sql.sqlite_target(directory) as target:
            rows.extend(await store_rows(target, directory))
        dsn = os.environ.get("AGENTLOOP_PG_DSN", "")
        if dsn:
            async with _life_sql.postgres_target(dsn) as target:
                rows.extend(await store_rows(target, directory))
    return rows


def rows() -> list[Row]:
    """The lifecycle rows, measured in this run."""
    return trio.run(_all_rows)
