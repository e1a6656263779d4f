"""``step.append-many.*``: the optional ``append_many`` is one all-or-nothing, ordered call."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import anyio

from agentloop import RunStep, SupportsAppendMany
from agentlooptest._cancel import Points, cancel_at, still_usable
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._data import describe, mismatch, same_steps, step, steps
from agentlooptest._stores import Steps, open_steps, reopened

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

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
async def _order(h: Harness) -> None:
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


async def _refused(s: Steps, batch: list[object], did: str) -> None:
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
async def _atomic(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append(step("s", 0))
        await s.ensure("t")
        for position in (0, 2, 4):
            batch: list[object] = [step("s", 1), step("t", 2), step("s", 3), step("t", 4)]
            batch.insert(position, "not a step")
            did = f"append_many with a str at position {position} of 5 steps of 's' and 't'"
            await _refused(s, batch, did)
            await _expect_trace(s, "s", [step("s", 0)], did + ", then last_n('s')")
            await _expect_trace(s, "t", [], did + ", then last_n('t')")
        # Batches side by side (group commit may merge them): a refused one fails alone.
        good = [[step(f"g{k}", i) for i in range(3)] for k in range(4)]
        async with anyio.create_task_group() as tasks:
            for batch_ok in good:
                tasks.start_soon(_batch, s, batch_ok)
            bad: list[object] = [step("s", 5), None]
            tasks.start_soon(_refused, s, bad, "a bad batch beside 4 good ones")
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
async def _cancel(h: Harness) -> None:
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


@clause(
    "step.append-many.durable",
    "a batch appended through one handle is all visible through a second (reopen)",
    capability="reopen",
    why="a batch acknowledged by one handle and missing on restart loses a whole reply",
)
async def _durable(h: Harness) -> None:
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
