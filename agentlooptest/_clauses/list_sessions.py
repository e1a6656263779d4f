"""``session.list.*`` (capability ``list_sessions``): the optional ``list_sessions`` orders,
limits and describes sessions."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import anyio

from agentloop import FinalizeSummary, RunStatus, Session, SessionInfo
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._data import DONE
from agentlooptest._harness import Harness, open_sessions


async def _listed(store: Any, limit: int = 100) -> list[SessionInfo]:
    got = await store.list_sessions(limit=limit)
    if not isinstance(got, list) or not all(isinstance(i, SessionInfo) for i in got):
        raise Violation(f"list_sessions(limit={limit})", "a list of SessionInfo", repr(got))
    return got


@clause(
    "session.list.order",
    "list_sessions orders by write recency, most recent first, whatever the clock says",
    capability="list_sessions",
    why=(
        "apps show 'recent conversations' from list_sessions; a wrong order hides the "
        "session the user was just in"
    ),
)
async def _list_order(h: Harness) -> None:
    async with open_sessions(h) as store:
        empty = await _listed(store)
        expect(empty == [], did="list_sessions() on a fresh store", expected="[]", got=empty)
        await store.update_data("a", "{}")
        await store.finalize("b", DONE)
        await store.update_data("c", "{}")
        await store.finalize("a", DONE)  # a is now the most recent
        await store.get("b")  # reads do not count as writes
        await store.exists("c")
        await store.get("never")
        got = [i.id for i in await _listed(store)]
        expect(
            got == ["a", "c", "b"],
            did="wrote a, b, c, then a again (only reading b, c and 'never'), then list_sessions()",
            expected="['a', 'c', 'b'] (most recently written first)",
            got=got,
        )


@clause(
    "session.list.limit",
    "list_sessions honours limit and refuses a bad one",
    capability="list_sessions",
    why=(
        "limit bounds what a listing page loads; a store that ignores it loads every "
        "session, and one that accepts 0 or -1 hides a caller bug"
    ),
)
async def _list_limit(h: Harness) -> None:
    async with open_sessions(h) as store:
        # Past 100 (the default limit, and a usual page size) and past 128.
        count = LISTED
        for k in range(count):
            await store.update_data(f"s{k:03d}", json.dumps({"k": k}))
        newest = [f"s{k:03d}" for k in reversed(range(count))]
        for limit in (1, 5, 100, 101, count, count + 1, 1000):
            got = [i.id for i in await _listed(store, limit)]
            expect(
                got == newest[:limit],
                did=f"wrote {count} sessions, then list_sessions(limit={limit})",
                expected=_ids(newest[:limit]),
                got=_ids(got),
                hint="a listing read as one page of a fixed size, or a LIMIT capped silently",
            )
        listed = await _listed(store)
        listed.clear()
        default = [i.id for i in await store.list_sessions()]
        expect(
            default == newest[:100],
            did="cleared a list list_sessions() returned, then list_sessions() (default limit)",
            expected=f"the newest 100: {_ids(newest[:100])}",
            got=_ids(default),
        )
        bad: list[tuple[object, type[Exception]]] = [
            (0, ValueError),
            (-1, ValueError),
            (True, TypeError),
            (2.0, TypeError),
            ("5", TypeError),
        ]
        for bad_limit, error in bad:
            try:
                got_bad: object = await store.list_sessions(limit=bad_limit)
            except error:
                continue
            except Exception as exc:
                raise Violation(
                    f"list_sessions(limit={bad_limit!r})",
                    error.__name__,
                    f"{type(exc).__name__}: {exc}",
                ) from None
            raise Violation(
                f"list_sessions(limit={bad_limit!r})",
                error.__name__,
                f"no error; it returned {got_bad!r:.100}",
            )


LISTED = 131
"""Sessions the limit clause writes: past the default limit of 100 and past 128."""


def _ids(ids: list[str]) -> str:
    """A long id list kept readable: its length, first and last ids."""
    if len(ids) <= 6:
        return repr(ids)
    return f"{len(ids)} ids [{ids[0]!r}, {ids[1]!r}, ..., {ids[-1]!r}]"


@clause(
    "session.list.fields",
    "SessionInfo: latest status, total step count, aware UTC times; created_at fixed, "
    "updated_at moving forward",
    capability="list_sessions",
    why=(
        "dashboards read status, step totals and times from list_sessions; wrong values "
        "misreport which runs failed and how much work they did"
    ),
)
async def _list_fields(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("fresh", "{}")
        await store.finalize("ran", FinalizeSummary(RunStatus.completed, step_count=3))
        await store.finalize("ran", FinalizeSummary(RunStatus.timeout, step_count=4))
        infos = {i.id: i for i in await _listed(store)}
        expect(
            set(infos) == {"fresh", "ran"},
            did="wrote 'fresh' and 'ran', then list_sessions()",
            expected="ids {'fresh', 'ran'}",
            got=sorted(infos),
        )
        fresh, ran = infos["fresh"], infos["ran"]
        expect(
            (fresh.status, fresh.step_count) == (None, 0),
            did="update_data('fresh', '{}') only, then its SessionInfo",
            expected="status None, step_count 0",
            got=fresh,
        )
        expect(
            (ran.status, ran.step_count) == (RunStatus.timeout, 7),
            did="finalize('ran') with step_count 3 (completed), then 4 (timeout), its SessionInfo",
            expected="status timeout (the latest), step_count 7 (the total)",
            got=ran,
        )
        for info in (fresh, ran):
            expect(
                info.created_at.utcoffset() == timedelta(0) and info.created_at <= info.updated_at,
                did=f"read SessionInfo of {info.id!r}",
                expected="created_at and updated_at aware UTC, created_at <= updated_at",
                got=info,
            )
        await _times_move(store)


async def _times_move(store: Any) -> None:
    """Every kind of write keeps created_at and moves updated_at forward (once the clock has)."""
    writes: list[tuple[str, Callable[[str, int], Awaitable[None]]]] = [
        ("update_data", lambda sid, k: store.update_data(sid, json.dumps({"v": k}))),
        ("finalize", lambda sid, k: store.finalize(sid, FinalizeSummary(RunStatus.error, 1))),
    ]
    if hasattr(store, "put"):
        writes.append(("put", lambda sid, k: store.put(Session(sid, "m", "p", f'{{"v": {k}}}'))))
    for name, write in writes:
        await _one_write_moves(store, f"timed-{name}", name, write)


async def _one_write_moves(
    store: Any, sid: str, name: str, write: Callable[[str, int], Awaitable[None]]
) -> None:
    await store.finalize(sid, FinalizeSummary(RunStatus.completed, step_count=2))
    first = _info(await _listed(store), sid)
    # Real time, not trio's clock: the store's clock is the wall clock. A coarse clock
    # (whole seconds) gets longer pauses, up to one second, before a frozen updated_at fails.
    waited = 0.0
    for k, pause in enumerate((0.002, 0.02, 0.2, 1.0)):
        await anyio.to_thread.run_sync(time.sleep, pause)
        waited += pause
        await write(sid, k)
        later = _info(await _listed(store), sid)
        if later.updated_at != first.updated_at:
            break
    did = f"finalize({sid!r}), then {name}({sid!r}, ...) up to {waited * 1000:g} ms later "
    did += "(list_sessions after each write)"
    expect(
        later.created_at == first.created_at,
        did=did,
        expected=f"created_at unchanged ({first.created_at.isoformat()}): it is when the "
        "session was created",
        got=f"created_at {later.created_at.isoformat()}",
        why="a created_at that moves on every write misdates every session in a listing",
    )
    expect(
        later.updated_at > first.updated_at,
        did=did,
        expected=f"updated_at later than the first write's ({first.updated_at.isoformat()})",
        got=f"updated_at {later.updated_at.isoformat()}",
        why="a frozen or backward updated_at hides which sessions are active",
        hint=f"{name} writing its columns but not updated_at",
    )
    if name != "finalize":
        expect(
            (later.status, later.step_count) == (RunStatus.completed, 2),
            did=did,
            expected=f"status completed, step_count 2: {name} keeps the latest run summary "
            "and the step total",
            got=later,
            hint=f"{name} rewriting the whole row",
        )


def _info(infos: list[SessionInfo], sid: str) -> SessionInfo:
    found = [i for i in infos if i.id == sid]
    if len(found) != 1:
        raise Violation(
            f"wrote {sid!r}, then list_sessions()", f"one entry for {sid!r}", repr(infos)
        )
    return found[0]
