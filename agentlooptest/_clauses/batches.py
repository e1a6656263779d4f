"""Batches: one call over many items.

- ``step.append-many.*`` (capability ``append_many``): the optional
  ``append_many`` is one all-or-nothing, ordered call;
- ``session.get-many.*`` (capability ``get_many``): the optional ``get_many``
  answers id by id, in order, and creates nothing.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio

from agentloop import RunStep, Session, SupportsAppendMany
from agentloop._shared import on_trio
from agentlooptest._cancel import (
    Points,
    cancel_at,
    cancel_either,
    each_way,
    native_cancel_at,
    still_usable,
)
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._data import (
    describe,
    expect_exists,
    mismatch,
    same_session,
    same_steps,
    step,
    steps,
)
from agentlooptest._harness import Harness, Steps, open_sessions, open_steps, reopened

ATOMIC = (
    "the loop writes one model reply's tool calls as one batch; a batch cut short leaves "
    "half a reply in the trace, which replays as calls that never got their results"
)


async def _batch(s: Steps, batch: list[RunStep]) -> None:
    """``append_many(batch)`` after making every session in it legal."""
    for sid in dict.fromkeys(x.session_id for x in batch):
        await s.ensure(sid)
    await s.store.append_many(batch)


async def _expect_trace(s: Steps, sid: str, want: list[RunStep], did: str, **kw: str) -> None:
    got = await s.last_n(sid, max(len(want), 1) + 10)
    expect(same_steps(want, got), did=did, expected=describe(want), got=mismatch(want, got), **kw)


@clause(
    "step.append-many.order",
    "append_many keeps the given order across sessions, after earlier steps; [] is a no-op",
    capability="append_many",
    why=ATOMIC,
)
async def _append_many_order(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append(step("a", 0))
        batch = [step("b", 7), step("a", 3), step("b", 1), step("a", 2), step("a", 9)]
        await _batch(s, batch)
        batch.clear()  # the caller's list is the caller's: the store must not keep it
        await s.store.append_many([])
        await s.store.append_many(())
        await s.append(step("a", 1))
        did = "appended a:0, append_many([b:7, a:3, b:1, a:2, a:9]), cleared that list, "
        did += "append_many([]), appended a:1, then last_n"
        want_a = [step("a", 0), step("a", 3), step("a", 2), step("a", 9), step("a", 1)]
        await _expect_trace(s, "a", want_a, did + "('a')")
        await _expect_trace(s, "b", [step("b", 7), step("b", 1)], did + "('b')")
        await _batch(s, steps("long", 100))
        await _expect_trace(s, "long", steps("long", 100), "append_many of 100 steps, last_n")
        twice = [step("r", 0), step("r", 1), step("r", 1), step("r", 0)]  # a retried reply
        await _batch(s, twice)
        await _expect_trace(
            s,
            "r",
            twice,
            "append_many([r:0, r:1, r:1, r:0]) (identical steps repeated), then last_n('r')",
            hint="a batch deduplicated by (session, step_index) or by value: an append is "
            "an event, two identical ones are two",
        )


async def _refused_batch(s: Steps, batch: list[object], did: str) -> None:
    try:
        await s.store.append_many(batch)
    except (TypeError, ValueError):
        return
    except Exception as exc:
        raise Violation(did, "TypeError or ValueError", f"{type(exc).__name__}: {exc}") from None
    raise Violation(did, "TypeError or ValueError, nothing written", "no error")


@clause(
    "step.append-many.atomic",
    "a bad step anywhere refuses the whole batch, writes nothing, fails no other call",
    capability="append_many",
    why=ATOMIC,
)
async def _append_many_atomic(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append(step("s", 0))
        await s.ensure("t")
        for position in (0, 2, 4):
            batch: list[object] = [step("s", 1), step("t", 2), step("s", 3), step("t", 4)]
            batch.insert(position, "not a step")
            did = f"append_many with a str at position {position} of 5 steps of 's' and 't'"
            await _refused_batch(s, batch, did)
            await _expect_trace(s, "s", [step("s", 0)], did + ", then last_n('s')")
            await _expect_trace(s, "t", [], did + ", then last_n('t')")
        # Batches side by side (group commit may merge them): a refused one fails alone.
        good = [[step(f"g{k}", i) for i in range(3)] for k in range(4)]
        async with anyio.create_task_group() as tasks:
            for batch_ok in good:
                tasks.start_soon(_batch, s, batch_ok)
            bad: list[object] = [step("s", 5), None]
            tasks.start_soon(_refused_batch, s, bad, "a bad batch beside 4 good ones")
        for batch_ok in good:
            sid = batch_ok[0].session_id
            did = "4 batches appended beside a refused one, then last_n"
            await _expect_trace(s, sid, batch_ok, did, why="a refused step fails its call only")
        await _expect_trace(s, "s", [step("s", 0)], "then last_n('s') of the refused batch")


@clause(
    "step.append-many.cancel",
    "append_many cancelled at each checkpoint: the whole batch is there or none of it",
    capability="append_many",
    why=ATOMIC,
)
async def _append_many_cancel(h: Harness) -> None:
    async with open_steps(h) as s:
        points = Points()
        for point in points:
            a, b = f"cancel-a-{point}", f"cancel-b-{point}"
            await s.append(step(a, 0))
            await s.ensure(b)
            batch = [step(a, 1), step(b, 1), step(a, 2), step(b, 2)]
            done = await cancel_at(partial(s.store.append_many, batch), point)
            points.finished(done)
            got_a = await still_usable(f"last_n({a!r}, 10)", partial(s.last_n, a, 10))
            got_b = await still_usable(f"last_n({b!r}, 10)", partial(s.last_n, b, 10))
            whole = same_steps([step(a, 0), step(a, 1), step(a, 2)], got_a) and same_steps(
                [step(b, 1), step(b, 2)], got_b
            )
            none = same_steps([step(a, 0)], got_a) and got_b == []
            expect(
                whole if done else (whole or none),
                did=f"append_many of 4 steps over 2 sessions, cancelled after {point} "
                "checkpoint(s), then last_n of both" + (" (the call returned)" if done else ""),
                expected="all 4 steps" if done else "all 4 steps or none of them",
                got=f"{describe(got_a)} and {describe(got_b)}",
            )
        if not on_trio():
            await _task_cancel_batch(s)


async def _task_cancel_batch(s: Steps) -> None:
    """Under asyncio, the same with a native ``Task.cancel()`` (no anyio scope re-delivers it)."""
    points = Points()
    for point in points:
        sid = f"task-cancel-batch-{point}"
        await s.ensure(sid)
        batch = [step(sid, i) for i in range(4)]
        did = f"append_many of 4 steps to {sid!r}"
        done = await native_cancel_at(partial(s.store.append_many, batch), point, did)
        points.finished(done)
        got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
        allowed = [batch] if done else [[], batch]
        expect(
            any(same_steps(want, got) for want in allowed),
            did=f"{did}, Task.cancel() at its suspension #{point + 1}, then last_n",
            expected=" or ".join(describe(want) for want in allowed) + ", whole",
            got=describe(got),
        )


LONG_BATCH = 1500
"""Steps of the long batch: past the chunk sizes (64 to 1,000 rows) stores send batches in."""


@clause(
    "step.append-many.cancel-long",
    f"a batch of {LONG_BATCH} steps cancelled at each checkpoint: all of it is there or none",
    capability="append_many",
    why=ATOMIC,
    hint="a long batch committed chunk by chunk, a cancellation between two chunks "
    "leaving the first ones stored (one transaction around every chunk keeps it whole)",
)
async def _append_many_cancel_long(h: Harness) -> None:
    async with open_steps(h) as s:
        points = Points(limit=40)  # a chunked store has a checkpoint per chunk
        for point in points:
            a, b = f"long-a-{point}", f"long-b-{point}"
            await s.ensure(a)
            await s.ensure(b)
            batch = [step(a if i % 3 else b, i) for i in range(LONG_BATCH)]
            done = await cancel_at(partial(s.store.append_many, batch), point)
            points.finished(done)
            got_a = await still_usable(
                f"last_n({a!r}, {LONG_BATCH})", partial(s.last_n, a, LONG_BATCH)
            )
            got_b = await still_usable(
                f"last_n({b!r}, {LONG_BATCH})", partial(s.last_n, b, LONG_BATCH)
            )
            whole = same_steps([x for x in batch if x.session_id == a], got_a) and same_steps(
                [x for x in batch if x.session_id == b], got_b
            )
            none = got_a == [] and got_b == []
            expect(
                whole if done else (whole or none),
                did=f"append_many of {LONG_BATCH} steps over 2 sessions, cancelled after "
                f"{point} checkpoint(s), then last_n of both"
                + (" (the call returned)" if done else ""),
                expected=f"all {LONG_BATCH} steps" if done else f"all {LONG_BATCH} steps or none",
                got=f"{len(got_a)} steps of {a!r} and {len(got_b)} of {b!r}",
            )


@clause(
    "step.append-many.durable",
    "a batch appended through one handle is all visible through a second (reopen)",
    capability="reopen",
    why="a batch acknowledged by one handle and missing on restart loses a whole reply",
)
async def _append_many_durable(h: Harness) -> None:
    async with open_steps(h) as s:
        if not isinstance(s.store, SupportsAppendMany):
            return  # the store has no batches: step.durable covers its appends
        batch = [step("d", 0), step("e", 0), step("d", 1)]
        await _batch(s, batch)
        async with reopened(h, s.store) as other:
            for sid, want in (("d", [batch[0], batch[2]]), ("e", [batch[1]])):
                got = await other.last_n(sid, 10)
                expect(
                    same_steps(want, got),
                    did=f"append_many on one handle, then last_n({sid!r}) on reopen()",
                    expected=describe(want),
                    got=mismatch(want, got),
                )


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
async def _get_many_aligned(h: Harness) -> None:
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
        await _get_many_past_a_page(store)


MANY = 600
"""Ids of the long ``get_many``: past the page sizes (100 to 500) stores read in."""


async def _get_many_past_a_page(store: Any) -> None:
    for k in range(0, MANY, 2):  # every other id exists, so every page has both kinds
        await store.update_data(f"m{k}", f'{{"k": {k}}}')
    ids = [f"m{k}" for k in reversed(range(MANY))]
    want = [
        Session(sid, data=f'{{"k": {sid[1:]}}}' if int(sid[1:]) % 2 == 0 else None) for sid in ids
    ]
    got = await store.get_many(ids)
    expect(
        _aligned(want, got),
        did=f"update_data of every other id of m0..m{MANY - 1}, then get_many of all {MANY} "
        "ids, newest first",
        expected=f"{MANY} sessions, id by id, half with data",
        got=f"{len(got)} sessions" + _first_wrong(want, got),
        hint="get_many answered from one page of rows (a LIMIT, or one batch of a paged read)",
    )


def _first_wrong(want: list[Session], got: object) -> str:
    if not isinstance(got, list):
        return f": {got!r:.200}"
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if not same_session(w, g):
            return f"; [{i}] is {g!r:.200}, not {w!r:.200}"
    return ""


@clause(
    "session.get-many.bad-input",
    "a bad id anywhere in get_many raises TypeError/ValueError and creates nothing",
    capability="get_many",
    why="a bad id silently skipped shifts every later answer onto the wrong session",
)
async def _get_many_bad_input(h: Harness) -> None:
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
    "get_many cancelled at each checkpoint (and, under asyncio, by Task.cancel()) leaves the "
    "store unchanged and usable",
    capability="get_many",
    why="a read that leaks a lock or a connection when cancelled wedges every later run",
)
async def _get_many_cancel(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("a", "[1]")
        ids = ["a", "unknown", "a"]
        want = [Session("a", data="[1]"), Session("unknown"), Session("a", data="[1]")]
        for points, point, native in each_way():
            did = f"get_many({ids!r})"
            op = partial(store.get_many, ids)
            points.finished(await cancel_either(op, point, native, did))
            got = await still_usable("get_many again", partial(store.get_many, ids))
            how = (
                f"by Task.cancel() at suspension #{point + 1}"
                if native
                else f"after {point} checkpoint(s)"
            )
            expect(
                _aligned(want, got),
                did=f"cancelled {did} {how}, then again",
                expected=repr(want),
                got=got,
            )
        await expect_exists(store, "unknown", False, "then exists('unknown')")
