"""``session.expire.*`` (capability ``expire_sessions``): expiry deletes idle sessions only,
judged by their latest write, in batches of ``limit``, and never a leased one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio

from agentloop import LeaseLostError, RunStep, StepStore, SupportsLease
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._clauses.paging import has
from agentlooptest._data import expect_data, expect_exists, step
from agentlooptest._harness import Harness, Steps, open_sessions

IDLE = 0.3
"""The ``idle_for`` the clauses expire with, in seconds."""

WAIT = 0.35
"""How long the clauses wait for sessions to become idle: more than :data:`IDLE`."""

RETENTION = (
    "a retention job expires idle sessions while the application runs: a session deleted "
    "while it is being written, or while a run holds its lease, loses a live conversation"
)


async def _expire(store: Any, limit: int, did: str) -> list[str]:
    got = await store.expire_sessions(idle_for=IDLE, limit=limit)
    expect(
        isinstance(got, list) and all(isinstance(i, str) for i in got) and len(got) <= limit,
        did=did,
        expected=f"a list of at most {limit} session ids",
        got=got,
    )
    return list(got)


@clause(
    "session.expire.idle-only",
    "expire_sessions deletes, limit at a time, exactly the sessions not written for "
    "idle_for seconds (judged by the latest write, not the first), steps included; "
    "concurrent calls delete (and report) each once",
    capability="expire_sessions",
    why=RETENTION,
    hint="idleness judged by created_at, or by a clock the writes do not stamp",
)
async def _idle_only(h: Harness) -> None:
    async with open_sessions(h) as store:
        idle = ["old", *(f"l{k}" for k in range(9))]
        for sid in [*idle, "busy"]:
            await store.update_data(sid, '{"v": 1}')
        combined = isinstance(store, StepStore)
        if combined:
            await Steps(h, store).append(step("old", 0))
        await anyio.sleep(WAIT)
        await store.update_data("busy", '{"v": 2}')
        await store.update_data("new", '{"v": 3}')
        did = f"wrote {len(idle)} sessions and 'busy', waited {WAIT}s, wrote 'busy' again and 'new'"
        first = await _expire(store, 2, did + f", then expire_sessions(idle_for={IDLE}, limit=2)")
        rest: list[list[str]] = []

        async def expire_rest() -> None:
            rest.append(await _expire(store, 1000, did + ", then 3 expire_sessions at once"))

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(expire_rest)
        gone = first + [sid for ids in rest for sid in ids]
        did += ", then expired with limit=2, then 3 calls at once with limit=1000"
        expect(
            len(gone) == len(set(gone)),
            did=did,
            expected="each session reported by one call only",
            got=f"{first!r}, then {rest!r}",
            hint="expiry that picks its sessions, then deletes them in a second round trip "
            "without checking it was the one that deleted each",
        )
        expect(
            len(first) == 2 and sorted(gone) == sorted(idle),
            did=did,
            expected=f"2 ids, then the others across the 3 calls: {sorted(idle)}",
            got=f"{first!r}, then {rest!r}",
        )
        for sid in idle:
            await expect_exists(store, sid, False, f"expired {sid!r}, then exists({sid!r})")
        await expect_data(store, "busy", '{"v": 2}', "then get('busy'): written after the wait")
        await expect_data(store, "new", '{"v": 3}', "then get('new')")
        if combined:
            left = await store.last_n("old", 10)
            expect(left == [], did="expired 'old', then last_n('old', 10)", expected="[]", got=left)
        again = await _expire(store, 1000, "then expire_sessions once more")
        expect(again == [], did="then expire_sessions once more", expected="[]", got=again)
        for bad in ({"idle_for": 0}, {"idle_for": -1.0}, {"idle_for": IDLE, "limit": 0}):
            did = f"expire_sessions(**{bad!r})"
            try:
                got = await store.expire_sessions(**bad)
            except (TypeError, ValueError):
                continue
            raise Violation(did, "ValueError, nothing deleted", f"it returned {got!r}")


def _now(session_id: str, index: int) -> RunStep:
    """A step made now, as the loop makes them (its ``created_at`` is the append's time)."""
    return step(session_id, index, created_at=datetime.now(UTC))


@clause(
    "session.expire.steps-only",
    "on a store holding both, a session with steps but no session row expires when its "
    "newest step is older than idle_for, and only then",
    capability="expire_sessions",
    why=RETENTION,
    hint="expiry walking the session rows only (or stopping at the first young row before "
    "it looks at steps), or judging by the oldest step",
)
async def _steps_only(h: Harness) -> None:
    async with open_sessions(h) as store:
        if not has(store, StepStore) or h.ensure_session is not None:
            return  # steps always have a session row here: idle-only covers them
        appends = Steps(h, store)
        await appends.append_all([_now("orphan", 0), _now("orphan-late", 0)])
        await anyio.sleep(WAIT)
        await appends.append(_now("orphan-late", 1))
        await store.update_data("young", "{}")
        did = f"appended to 'orphan' and 'orphan-late' (no session rows), waited {WAIT}s, "
        did += "appended to 'orphan-late' again, wrote the session 'young', then expire_sessions"
        gone = await _expire(store, 1000, did)
        expect(gone == ["orphan"], did=did, expected="['orphan']", got=gone)
        left = await store.last_n("orphan", 10)
        expect(left == [], did=did + ", then last_n('orphan', 10)", expected="[]", got=left)
        late = await store.last_n("orphan-late", 10)
        did += ", then last_n('orphan-late', 10)"
        expect(len(late) == 2, did=did, expected="its 2 steps, kept", got=late)


@clause(
    "session.expire.leased",
    "expire_sessions never deletes a session holding a live lease; a lapsed, unreleased "
    "lease is taken over first, so its holder's fenced writes fail",
    capability="expire_sessions",
    why=RETENTION,
    hint="expiry that checks idleness but not the lease table",
)
async def _leased(h: Harness) -> None:
    async with open_sessions(h) as store:
        if not has(store, SupportsLease):
            return  # no leases: session.expire.idle-only covers expiry
        for sid in ("held", "lapsed", "free"):
            await store.update_data(sid, '{"v": 1}')
        held = await store.acquire_lease("held", "runner-1", 30.0)
        lapsed = await store.acquire_lease("lapsed", "runner-2", 0.1)
        expect(
            held is not None and lapsed is not None,
            did="acquire_lease on 'held' (30s) and 'lapsed' (0.1s)",
            expected="two leases",
            got=(held, lapsed),
        )
        assert held is not None
        assert lapsed is not None
        await anyio.sleep(WAIT)
        did = f"leased 'held' (30s) and 'lapsed' (0.1s, never released), waited {WAIT}s, "
        did += "then expire_sessions"
        gone = await _expire(store, 1000, did)
        expect(
            sorted(gone) == ["free", "lapsed"],
            did=did,
            expected="['free', 'lapsed']: 'held' has a live lease",
            got=gone,
        )
        await expect_data(store, "held", '{"v": 1}', did + ", then get('held')")
        try:
            await store.fenced(lapsed).update_data("lapsed", '{"late": 1}')
        except LeaseLostError:
            pass
        else:
            raise Violation(
                did + ", then a fenced update_data through the lapsed lease",
                "LeaseLostError: the expiry took the lease over first",
                "the write succeeded: the expired session is back, written by a stale holder",
            )
        await store.release_lease(held)
        did = "then released 'held' (idle all along: lease calls are not writes), expired"
        last = await _expire(store, 1000, did)
        expect(last == ["held"], did=did, expected="['held']", got=last)
