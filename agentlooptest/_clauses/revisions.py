"""``session.revision.*`` (capability ``revisions``): revisions grow with every session write;
``update_data_if`` is exact."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio

from agentloop import RevisionConflictError, Session, SupportsRevisions
from agentlooptest._cancel import Points, cancel_at, still_usable
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._data import DONE, expect_data, expect_exists
from agentlooptest._harness import Harness, open_sessions, reopened

LOST_UPDATE = (
    "an admin tool or a second service edits working memory with update_data_if so that a "
    "concurrent write is refused, not silently overwritten; a revision that does not move "
    "with every write lets one of the two writes vanish"
)


async def _larger(store: Any, sid: str, before: int, did: str) -> int:
    now = await store.revision(sid)
    expect(
        isinstance(now, int) and now > before,
        did=did,
        expected=f"a revision larger than {before}",
        got=now,
    )
    return int(now)


async def _conflict(store: Any, sid: str, snapshot: str | None, revision: int, did: str) -> None:
    try:
        got = await store.update_data_if(sid, snapshot, revision)
    except RevisionConflictError:
        return
    except Exception as exc:
        raise Violation(did, "RevisionConflictError", f"{type(exc).__name__}: {exc}") from None
    raise Violation(did, "RevisionConflictError, nothing written", f"it wrote: returned {got!r}")


@clause(
    "session.revision.bumps",
    "revision is 0 for a never-written session; put, update_data, finalize, update_data_if "
    "and a write after delete_session each make it larger",
    capability="revisions",
    why=LOST_UPDATE,
)
async def _bumps(h: Harness) -> None:
    async with open_sessions(h) as store:
        first = await store.revision("r")
        expect(first == 0, did="revision('r') of a new session", expected="0", got=first)
        await expect_exists(store, "r", False, "revision('r'), then exists('r')")
        await store.update_data("r", '{"v": 1}')
        rev = await _larger(store, "r", 0, "update_data('r'), then revision('r')")
        await store.finalize("r", DONE)
        rev = await _larger(store, "r", rev, "finalize('r'), then revision('r')")
        if hasattr(store, "put"):
            await store.put(Session("r", "model-r"))
            rev = await _larger(store, "r", rev, "put(Session('r')), then revision('r')")
        returned = await store.update_data_if("r", '{"v": 2}', rev)
        rev = await _larger(store, "r", rev, "update_data_if('r', ..., current), then revision")
        expect(
            returned == rev,
            did="update_data_if('r', ..., current)",
            expected=f"it returns the new revision, {rev}",
            got=returned,
        )
        if hasattr(store, "delete_session"):
            await store.delete_session("r")
            after = await store.revision("r")
            expect(
                isinstance(after, int) and after >= rev,
                did="delete_session('r'), then revision('r')",
                expected=f"a revision no smaller than {rev}",
                got=after,
            )
            await store.update_data("r", "[]")
            await _larger(store, "r", rev, "then update_data('r') and revision('r')")


@clause(
    "session.revision.conflict",
    "update_data_if with a stale revision raises RevisionConflictError and changes nothing",
    capability="revisions",
    why=LOST_UPDATE,
)
async def _conflict_clause(h: Harness) -> None:
    async with open_sessions(h) as store:
        seen = await store.update_data_if("c", '{"v": 1}', 0)
        await store.update_data("c", '{"v": 2}')
        current = await store.revision("c")
        did = "update_data_if('c', ..., 0), update_data('c'), then update_data_if with the "
        did += "revision the first call returned"
        await _conflict(store, "c", '{"v": 3}', seen, did)
        await expect_data(store, "c", '{"v": 2}', did + ", then get('c')")
        now = await store.revision("c")
        expect(now == current, did=did + ", then revision('c')", expected=str(current), got=now)
        did = "update_data_if('unknown', ..., 5) on a session never written"
        await _conflict(store, "unknown", "[]", 5, did)
        await expect_exists(store, "unknown", False, did + ", then exists('unknown')")


@clause(
    "session.revision.same-rules",
    "update_data_if checks what update_data checks, and moves the session up the listing",
    capability="revisions",
    why=(
        "update_data_if is update_data with a guard: a text update_data refuses must not "
        "be stored by it, and its write is a write like any other for list_sessions"
    ),
    hint="update_data_if written apart from update_data: its own SQL, without the checks "
    "or the updated_at of the other",
)
async def _same_rules(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("r", '{"v": 1}')
        base = await store.revision("r")
        for bad in ("{not json", "", '{"a": NaN}', '"\ud800"', "[1,]"):
            did = f"update_data('r', {bad!r}) is refused; update_data_if('r', {bad!r}, {base})"
            try:
                await store.update_data_if("r", bad, base)
            except (TypeError, ValueError):
                pass
            else:
                raise Violation(
                    did, "ValueError, as update_data raises, nothing stored", "no error"
                )
            await expect_data(store, "r", '{"v": 1}', did + ", then get('r')")
        if not hasattr(store, "list_sessions"):
            return
        await store.update_data("other", "[]")
        await store.update_data_if("r", '{"v": 2}', base)
        rows = await store.list_sessions(limit=10)
        expect(
            [i.id for i in rows][:2] == ["r", "other"],
            did="update_data('r'), update_data('other'), update_data_if('r'), then list_sessions",
            expected="['r', 'other', ...]: update_data_if is the newest write",
            got=[i.id for i in rows],
        )


async def _contend(store: Any, snapshot: str, base: int, wins: list[str], lost: list[str]) -> None:
    try:
        await store.update_data_if("w", snapshot, base)
    except RevisionConflictError:
        lost.append(snapshot)
        return
    wins.append(snapshot)


@clause(
    "session.revision.one-winner",
    "of 16 concurrent update_data_if calls naming the same revision, exactly one wins",
    capability="revisions",
    why=LOST_UPDATE,
)
async def _one_winner(h: Harness) -> None:
    async with open_sessions(h) as store:
        base = await store.update_data_if("w", "[]", 0)
        for round_ in range(3):
            wins: list[str] = []
            lost: list[str] = []
            async with anyio.create_task_group() as tasks:
                for k in range(16):
                    snapshot = f'{{"r": {round_}, "k": {k}}}'
                    tasks.start_soon(_contend, store, snapshot, base, wins, lost)
            did = f"16 tasks called update_data_if('w', ..., {base}) at once (round {round_})"
            expect(
                len(wins) == 1 and len(lost) == 15,
                did=did,
                expected="exactly 1 winner and 15 RevisionConflictErrors",
                got=f"{len(wins)} winners: {wins!r:.300}",
            )
            await expect_data(store, "w", wins[0], did + ", then get('w')")
            base = await store.revision("w")


@clause(
    "session.revision.cancel",
    "update_data_if cancelled at each checkpoint: data and revision both moved or neither",
    capability="revisions",
    why=LOST_UPDATE,
)
async def _cancel(h: Harness) -> None:
    async with open_sessions(h) as store:
        points = Points()
        for point in points:
            sid = f"cancel-{point}"
            base = await store.update_data_if(sid, '{"old": 1}', 0)
            op = partial(store.update_data_if, sid, '{"new": 1}', base)
            done = await cancel_at(op, point)
            points.finished(done)
            got = await still_usable(f"get({sid!r})", partial(store.get, sid))
            rev = await still_usable(f"revision({sid!r})", partial(store.revision, sid))
            moved = isinstance(rev, int) and rev > base
            written = got.data is not None and '"new"' in got.data
            did = f"update_data_if({sid!r}, ..., current) cancelled after {point} checkpoint(s)"
            expect(
                moved and written if done else moved == written,
                did=did + ", then get and revision" + (" (the call returned)" if done else ""),
                expected="new data and a larger revision"
                + ("" if done else ", or old data and the same revision"),
                got=f"data {got.data!r}, revision {rev!r} (was {base})",
            )


@clause(
    "session.revision.durable",
    "revisions are the same through a second handle (reopen), and checked across handles",
    capability="reopen",
    why=LOST_UPDATE,
)
async def _durable(h: Harness) -> None:
    async with open_sessions(h) as store:
        if not isinstance(store, SupportsRevisions):
            return  # the store has no revisions: session.durable covers its writes
        rev = await store.update_data_if("d", '{"v": 1}', 0)
        async with reopened(h, store) as other:
            seen = await other.revision("d")
            expect(
                seen == rev,
                did="update_data_if('d') on one handle, then revision('d') on reopen()",
                expected=f"revision {rev}, as on the first handle",
                got=seen,
            )
            await other.update_data_if("d", '{"v": 2}', rev)
        did = "update_data_if('d', ..., rev) on the reopened handle, then again with rev on "
        did += "the first"
        await _conflict(store, "d", '{"v": 3}', rev, did)
        await expect_data(store, "d", '{"v": 2}', did + ", then get('d')")
