"""Session clauses under stress: fresh stores, concurrency, cancellation, closing."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from agentloop import FinalizeSummary, RunStatus, Session, StepStore
from agentlooptest._cancel import Points, cancel_at, still_usable
from agentlooptest._clause import Violation, clause, expect, expect_closed
from agentlooptest._data import json_equal, step
from agentlooptest._sessions_core import DONE, expect_data, expect_exists
from agentlooptest._stores import Steps, open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

SENTINEL = "agentlooptest-sentinel"


@clause(
    "session.fresh-store",
    "each new_session_store() call gives an empty store, not one sharing another's state",
    why=(
        "eval suites count on fresh stores starting empty; state shared between "
        "instances leaks one suite's (or tenant's) working memory into another"
    ),
)
async def _fresh(h: Harness) -> None:
    async with open_sessions(h) as first:
        await expect_exists(first, SENTINEL, False, "opened a store, then exists(<sentinel>)")
        await first.update_data(SENTINEL, '{"sentinel": true}')
        async with open_sessions(h) as second:
            await expect_exists(
                second,
                SENTINEL,
                False,
                "wrote the sentinel session in one store, opened a second with "
                "new_session_store(), then exists(<sentinel>) on it",
            )
            await expect_data(second, SENTINEL, None, "then get(<sentinel>) on the second store")


@clause(
    "session.concurrency.same-session",
    "concurrent update_data on one session ends with exactly one of the written values",
    why=(
        "parallel tool calls write working memory concurrently; a store that merges or "
        "tears concurrent writes leaves a snapshot nobody wrote"
    ),
)
async def _same_session(h: Harness) -> None:
    async with open_sessions(h) as store:
        for storm in range(6):
            sid = f"shared-{storm}"
            written = [
                json.dumps({"writer": k, "copy": k, "a": k, "b": [k], "c": {"k": k}})
                for k in range(60)
            ]
            async with trio.open_nursery() as nursery:
                for doc in written:
                    nursery.start_soon(store.update_data, sid, doc)
            got = await store.get(sid)
            expect(
                any(json_equal(doc, got.data) for doc in written),
                did=f"60 tasks called update_data({sid!r}, <their own document>) concurrently, "
                f"then get({sid!r})",
                expected="data equal to one of the 60 written documents",
                got=got,
            )


@clause(
    "session.concurrency.many-sessions",
    "concurrent writes to hundreds of sessions each land on their own session",
    why=(
        "a server runs many sessions at once; a store that crosses concurrent writes "
        "hands one user's working memory to another"
    ),
)
async def _many(h: Harness) -> None:
    async with open_sessions(h) as store:
        ids = [f"m{k}" for k in range(200)]

        async def write(k: int, sid: str) -> None:
            await store.update_data(sid, json.dumps({"owner": sid}))
            await store.finalize(sid, FinalizeSummary(RunStatus.completed, step_count=k))

        async with trio.open_nursery() as nursery:
            for k, sid in enumerate(ids):
                nursery.start_soon(write, k, sid)
        for sid in ids:
            await expect_data(
                store,
                sid,
                json.dumps({"owner": sid}),
                f"200 tasks each wrote update_data + finalize to their session, then get({sid!r})",
            )


@clause(
    "session.concurrency.first-writes",
    "racing first writes (update_data and finalize) on a new session both survive",
    why=(
        "the first run of a session writes data and finalizes close together; a "
        "check-then-insert store lets one first write overwrite the other and memory is lost"
    ),
)
async def _first_writes(h: Harness) -> None:
    async with open_sessions(h) as store:
        ids = [f"new{k}" for k in range(60)]
        async with trio.open_nursery() as nursery:
            for sid in ids:
                nursery.start_soon(store.update_data, sid, json.dumps({"first": sid}))
                nursery.start_soon(store.finalize, sid, DONE)
        for sid in ids:
            await expect_data(
                store,
                sid,
                json.dumps({"first": sid}),
                f"raced update_data({sid!r}, <doc>) against finalize({sid!r}, ...) on a new "
                f"session, then get({sid!r})",
            )
            if hasattr(store, "final"):
                final = await store.final(sid)
                expect(final == DONE, did=f"then final({sid!r})", expected=repr(DONE), got=final)


async def _cancel_write(
    h: Harness,
    what: str,
    on: str,
    setup: Callable[[Any, str], Awaitable[None]],
    write: Callable[[Any, str], Awaitable[None]],
) -> None:
    """Cancel ``write`` at each checkpoint; the session must then be wholly before or after."""
    async with open_sessions(h) as store:
        prefix = f"{what.partition('(')[0]}-{setup.__name__.strip('_')}"
        ref = f"{prefix}-reference"
        await setup(store, ref)
        before = await session_state(store, ref)
        await write(store, ref)
        after = await session_state(store, ref)
        points = Points()
        for point in points:
            sid = f"{prefix}-{point}"
            await setup(store, sid)
            done = await cancel_at(partial(write, store, sid), point)
            points.finished(done)
            got = await still_usable(f"reading {sid!r} back", partial(session_state, store, sid))
            allowed = [after] if done else [before, after]
            expect(
                got in allowed,
                did=f"{what} on {on} {sid!r}, cancelled after {point} checkpoint(s), "
                "then read the session back",
                expected=" or ".join(repr(a) for a in allowed) + " (whole)",
                got=got,
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


async def _seed(store: Any, sid: str) -> None:
    await store.update_data(sid, '{"before": 1}')
    await store.finalize(sid, FinalizeSummary(RunStatus.error, step_count=1))


@clause(
    "session.cancel.writes",
    "update_data, finalize and put cancelled at each checkpoint: all or nothing",
    why=(
        "the loop finalizes under cancellation (shielded, with a short deadline); a "
        "half-applied write leaves a summary without its data or a row nobody wrote"
    ),
)
async def _cancel_writes(h: Harness) -> None:
    async def update(store: Any, sid: str) -> None:
        await store.update_data(sid, '{"after": [1, 2, 3]}')

    async def finalize(store: Any, sid: str) -> None:
        await store.finalize(sid, FinalizeSummary(RunStatus.completed, 5, 6, 7, 8, 9))

    async def put(store: Any, sid: str) -> None:
        if hasattr(store, "put"):
            await store.put(Session(sid, "model-x", "prompt-x", '{"put": true}'))

    async def new(store: Any, sid: str) -> None:
        pass

    for setup, on in ((new, "the new session"), (_seed, "the written session")):
        await _cancel_write(h, "update_data(<id>, '{\"after\": [1, 2, 3]}')", on, setup, update)
        await _cancel_write(h, "finalize(<id>, <completed summary>)", on, setup, finalize)
        await _cancel_write(h, "put(Session(<id>, 'model-x', ...))", on, setup, put)


@clause(
    "session.cancel.reads",
    "get, exists, final and list_sessions cancelled at each checkpoint leave the store usable",
    why="a read that leaks a lock or connection when cancelled wedges every later run",
)
async def _cancel_reads(h: Harness) -> None:
    async with open_sessions(h) as store:
        await _seed(store, "r")
        want = await session_state(store, "r")
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
    "session.closed",
    "after aclose, every call raises StoreClosedError; aclose is idempotent",
    capability="aclose",
    why=(
        "a closed store that keeps answering (or fails with some other error) hides "
        "shutdown-ordering bugs: writes after close are silently lost"
    ),
)
async def _closed(h: Harness) -> None:
    async with open_sessions(h) as store:
        await _seed(store, "s")
        await store.aclose()
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("get('s')", partial(store.get, "s")),
            ("exists('s')", partial(store.exists, "s")),
            ("update_data('s', '{}')", partial(store.update_data, "s", "{}")),
            ("finalize('s', ...)", partial(store.finalize, "s", DONE)),
        ]
        optional: list[tuple[str, str, Callable[[], Awaitable[object]]]] = [
            ("put", "put(Session('s'))", lambda: store.put(Session("s"))),
            ("final", "final('s')", lambda: store.final("s")),
            ("list_sessions", "list_sessions()", lambda: store.list_sessions()),
            ("delete_session", "delete_session('s')", lambda: store.delete_session("s")),
        ]
        calls += [(what, call) for name, what, call in optional if hasattr(store, name)]
        for what, call in calls:
            await expect_closed(what, call)
        try:
            await store.aclose()
        except Exception as exc:
            raise Violation(
                "closed the store with aclose(), then called aclose() again",
                "no error (aclose is idempotent)",
                f"{type(exc).__name__}: {exc}",
            ) from None


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

        async def state(sid: str) -> object:
            seen = await session_state(store, sid)
            if steps is not None:
                seen["steps"] = [s.content for s in await steps.last_n(sid, 10)]
            return seen

        async def seed(sid: str) -> None:
            if steps is not None:
                await steps.append_all([step(sid, k, content=f"seeded #{k}") for k in range(2)])
            await _seed(store, sid)

        await seed("reference")
        before = await state("reference")
        await store.delete_session("reference")
        after = await state("reference")
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
