"""``session.get-many.*``: the optional ``get_many`` answers id by id, in order, creates nothing."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from agentloop import Session
from agentlooptest._cancel import Points, cancel_at, still_usable
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._clauses._shared import expect_exists, same_session
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

ALIGNED = (
    "dashboards and eval reports zip get_many's answer with the ids they asked for; an "
    "answer out of line shows one session's data under another's name"
)


def _aligned(want: list[Session], got: object) -> bool:
    return (
        isinstance(got, list)
        and len(got) == len(want)
        and all(same_session(w, g) for w, g in zip(want, got, strict=True))
    )


@clause(
    "session.get-many.aligned",
    "get_many answers in the order asked, duplicates too; unknown ids give Session(id), "
    "creating nothing; the list returned is the caller's",
    capability="get_many",
    why=ALIGNED,
)
async def _aligned_clause(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("a", '{"a": 1}')
        await store.update_data("b", '{"b": 2}')
        ids = ["b", "new-1", "a", "b", "new-1", "new-2"]
        data = {"a": '{"a": 1}', "b": '{"b": 2}'}
        want = [Session(sid, data=data.get(sid)) for sid in ids]
        got = await store.get_many(ids)
        did = f"update_data('a'), update_data('b'), then get_many({ids!r})"
        expect(_aligned(want, got), did=did, expected=repr(want), got=got)
        for sid in ("new-1", "new-2"):
            await expect_exists(store, sid, False, f"{did}, then exists({sid!r})")
        got.reverse()
        got.clear()
        again = await store.get_many(ids)
        expect(
            _aligned(want, again),
            did=did + ", cleared the list it returned, then get_many again",
            expected=repr(want),
            got=again,
        )
        empty = await store.get_many([])
        expect(empty == [], did="get_many([])", expected="[]", got=empty)


@clause(
    "session.get-many.bad-input",
    "a bad id anywhere in get_many raises TypeError/ValueError and creates nothing",
    capability="get_many",
    why="a bad id silently skipped shifts every later answer onto the wrong session",
)
async def _bad_input(h: Harness) -> None:
    async with open_sessions(h) as store:
        for bad in ("", "nul\x00id", 7):
            ids = ["x", bad, "y"]
            did = f"get_many({ids!r})"
            try:
                got = await store.get_many(ids)
            except (TypeError, ValueError):
                pass
            except Exception as exc:
                got_exc = f"{type(exc).__name__}: {exc}"
                raise Violation(did, "TypeError or ValueError", got_exc) from None
            else:
                raise Violation(did, "TypeError or ValueError", f"no error; it returned {got!r}")
            await expect_exists(store, "x", False, f"{did} was refused, then exists('x')")


@clause(
    "session.get-many.cancel",
    "get_many cancelled at each checkpoint leaves the store unchanged and usable",
    capability="get_many",
    why="a read that leaks a lock or a connection when cancelled wedges every later run",
)
async def _cancel(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("a", "[1]")
        ids = ["a", "unknown", "a"]
        want = [Session("a", data="[1]"), Session("unknown"), Session("a", data="[1]")]
        points = Points()
        for point in points:
            points.finished(await cancel_at(partial(store.get_many, ids), point))
            got = await still_usable("get_many again", partial(store.get_many, ids))
            expect(
                _aligned(want, got),
                did=f"cancelled get_many({ids!r}) after {point} checkpoint(s), then again",
                expected=repr(want),
                got=got,
            )
        await expect_exists(store, "unknown", False, "then exists('unknown')")
