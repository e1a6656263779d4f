"""``session.cancel.*``: a cancelled call has wholly happened or not at all."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from agentloop import FinalizeSummary, RunStatus, Session, StepStore
from agentloop._shared import on_trio
from agentlooptest._cancel import Points, cancel_at, native_cancel_at, still_usable
from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import expect_data, seed_session
from agentlooptest._data import step
from agentlooptest._stores import Steps, open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


Rule = dict[str, Any]
"""A session as the rules say it must be: exists, model, prompt, data, final, status, total."""

NEW: Rule = {
    "exists": False,
    "model": "",
    "system_prompt": "",
    "data": None,
    "final": None,
    "status": None,
    "total": 0,
}
SEEDED: Rule = {  # what seed_session writes
    **NEW,
    "exists": True,
    "data": {"before": 1},
    "final": FinalizeSummary(RunStatus.error, step_count=1),
    "status": RunStatus.error,
    "total": 1,
}


def shown(store: Any, rule: Rule) -> dict[str, object]:
    """What :func:`session_state` must read for a session in the state ``rule``."""
    state: dict[str, object] = {k: rule[k] for k in ("exists", "model", "system_prompt", "data")}
    if hasattr(store, "final"):
        state["final"] = rule["final"]
    if hasattr(store, "list_sessions"):
        state["listed"] = [(rule["status"], rule["total"])] if rule["exists"] else []
    return state


async def _cancel_write(
    h: Harness,
    what: str,
    on: str,
    setup: Callable[[Any, str], Awaitable[None]],
    write: Callable[[Any, str], Awaitable[None]],
    rule: Callable[[Any, Rule], Rule],
) -> None:
    """Cancel ``write`` at each checkpoint; the session must then be wholly before or after.

    Before and after are the states the rules give (``rule`` turns the one
    into the other), never what this store did with an uncancelled call.
    Under asyncio each point is tried again with a native ``Task.cancel()``.
    """
    async with open_sessions(h) as store:
        prefix = f"{what.partition('(')[0]}-{setup.__name__.strip('_')}"
        start = SEEDED if setup is seed_session else NEW
        before, after = shown(store, start), shown(store, rule(store, start))
        for points, point, native in _points():
            sid = f"{prefix}-{'task-' if native else ''}{point}"
            await setup(store, sid)
            if native:
                done = await native_cancel_at(partial(write, store, sid), point, f"{what} {sid!r}")
            else:
                done = await cancel_at(partial(write, store, sid), point)
            points.finished(done)
            got = await still_usable(f"reading {sid!r} back", partial(session_state, store, sid))
            allowed = [after] if done else [before, after]
            expect(
                got in allowed,
                did=f"{what} on {on} {sid!r}, cancelled after {point} checkpoint(s), "
                "then read the session back",
                expected=_clip(" or ".join(repr(a) for a in allowed)) + " (whole)",
                got=_clip(repr(got)),
                hint="two round trips without a transaction, or a cache updated before the "
                "write committed",
            )
            await still_usable(
                f"update_data({sid!r}, ...)", partial(store.update_data, sid, '{"after": "cancel"}')
            )
            await expect_data(
                store,
                sid,
                '{"after": "cancel"}',
                f"cancelled {what} on {sid!r}, wrote again, then get",
            )


def _points() -> Iterator[tuple[Points, int, bool]]:
    """Each point with an anyio scope, then (asyncio only) again with ``Task.cancel()``.

    Yields the :class:`Points` to tell whether the call returned, the point, and
    whether to cancel with ``Task.cancel()``.
    """
    for native in (False,) if on_trio() else (False, True):
        points = Points()
        for point in points:
            yield points, point, native


async def session_state(store: Any, sid: str) -> dict[str, object]:
    """Everything the base protocol (and the capabilities present) shows of a session."""
    got: Session = await store.get(sid)
    state: dict[str, object] = {
        "exists": await store.exists(sid),
        "model": got.model,
        "system_prompt": got.system_prompt,
        "data": None if got.data is None else json.loads(got.data),
    }
    if hasattr(store, "final"):
        state["final"] = await store.final(sid)
    if hasattr(store, "list_sessions"):
        info = [i for i in await store.list_sessions(limit=1000) if i.id == sid]
        state["listed"] = [(i.status, i.step_count) for i in info]
    return state


BIG_DATA = json.dumps({"blob": "y" * 150_000})
"""Data past 128 KiB: a write that may take more than one round trip, page or chunk."""


def _clip(text: str) -> str:
    return text if len(text) <= 800 else f"{text[:800]}... ({len(text):,} chars)"


@clause(
    "session.cancel.writes",
    "update_data, finalize and put cancelled at each checkpoint: all or nothing",
    why=(
        "the loop finalizes under cancellation (shielded, with a short deadline); a "
        "half-applied write leaves a summary without its data or a row nobody wrote"
    ),
)
async def _cancel_writes(h: Harness) -> None:
    summary = FinalizeSummary(RunStatus.completed, 5, 6, 7, 8, 9)

    async def update(store: Any, sid: str) -> None:
        await store.update_data(sid, '{"after": [1, 2, 3]}')

    def updated(store: Any, s: Rule) -> Rule:
        return {**s, "exists": True, "data": {"after": [1, 2, 3]}}

    async def finalize(store: Any, sid: str) -> None:
        await store.finalize(sid, summary)

    def finalized(store: Any, s: Rule) -> Rule:
        return {**s, "exists": True, "final": summary, "status": summary.status,
                "total": s["total"] + summary.step_count}  # fmt: skip

    async def put(store: Any, sid: str) -> None:
        if hasattr(store, "put"):
            await store.put(Session(sid, "model-x", "prompt-x", '{"put": true}'))

    def was_put(store: Any, s: Rule) -> Rule:  # put keeps the run summary and the total
        if not hasattr(store, "put"):
            return s
        return {**s, "exists": True, "model": "model-x", "system_prompt": "prompt-x",
                "data": {"put": True}}  # fmt: skip

    async def new(store: Any, sid: str) -> None:
        pass

    async def update_big(store: Any, sid: str) -> None:
        await store.update_data(sid, BIG_DATA)

    def updated_big(store: Any, s: Rule) -> Rule:
        return {**s, "exists": True, "data": json.loads(BIG_DATA)}

    what = f"update_data(<id>, <{len(BIG_DATA):,} characters of JSON>)"
    await _cancel_write(h, what, "the written session", seed_session, update_big, updated_big)
    for setup, on in ((new, "the new session"), (seed_session, "the written session")):
        what = "update_data(<id>, '{\"after\": [1, 2, 3]}')"
        await _cancel_write(h, what, on, setup, update, updated)
        await _cancel_write(
            h, "finalize(<id>, <completed summary>)", on, setup, finalize, finalized
        )
        await _cancel_write(h, "put(Session(<id>, 'model-x', ...))", on, setup, put, was_put)


@clause(
    "session.cancel.reads",
    "get, exists, final and list_sessions cancelled at each checkpoint leave the store usable",
    why="a read that leaks a lock or connection when cancelled wedges every later run",
)
async def _cancel_reads(h: Harness) -> None:
    async with open_sessions(h) as store:
        await seed_session(store, "r")
        want = shown(store, SEEDED)
        reads: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("get('r')", partial(store.get, "r")),
            ("exists('r')", partial(store.exists, "r")),
        ]
        if hasattr(store, "final"):
            reads.append(("final('r')", partial(store.final, "r")))
        if hasattr(store, "list_sessions"):
            reads.append(("list_sessions()", partial(store.list_sessions, limit=10)))
        for what, read in reads:
            points = Points()
            for point in points:
                points.finished(await cancel_at(read, point))
                got = await still_usable("reading 'r' back", partial(session_state, store, "r"))
                expect(
                    got == want,
                    did=f"cancelled {what} after {point} checkpoint(s), then read",
                    expected=repr(want),
                    got=got,
                )


@clause(
    "session.cancel.delete",
    "delete_session cancelled at each checkpoint: the session is wholly there or wholly gone",
    capability="delete_session",
    why=(
        "an erasure cut short must not leave a session half deleted: data gone but the "
        "summary listed (or steps left behind) is state no later call can explain"
    ),
)
async def _cancel_delete(h: Harness) -> None:
    async with open_sessions(h) as store:
        steps = Steps(h, store) if isinstance(store, StepStore) else None

        async def state(sid: str) -> dict[str, object]:
            seen = await session_state(store, sid)
            if steps is not None:
                seen["steps"] = [s.content for s in await steps.last_n(sid, 10)]
            return seen

        async def seed(sid: str) -> None:
            if steps is not None:
                await steps.append_all([step(sid, k, content=f"seeded #{k}") for k in range(2)])
            await seed_session(store, sid)

        before, after = shown(store, SEEDED), shown(store, NEW)  # as the rules say
        if steps is not None:
            before["steps"], after["steps"] = ["seeded #0", "seeded #1"], []
        points = Points()
        for point in points:
            sid = f"delete-{point}"
            await seed(sid)
            done = await cancel_at(partial(store.delete_session, sid), point)
            points.finished(done)
            got = await still_usable(f"reading {sid!r} back", partial(state, sid))
            allowed = [after] if done else [before, after]
            expect(
                got in allowed,
                did=f"delete_session({sid!r}), cancelled after {point} checkpoint(s), then read",
                expected=" or ".join(repr(a) for a in allowed) + " (whole)",
                got=got,
            )
