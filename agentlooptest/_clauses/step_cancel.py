"""``step.cancel.*``: a cancelled call has wholly happened or not at all."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from agentloop import RunStep
from agentloop._shared import on_trio
from agentlooptest._cancel import Points, cancel_at, native_cancel_at, still_usable
from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, mismatch, same_steps, step
from agentlooptest._stores import Steps, open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


async def _after_cancel(s: Steps, sid: str, before: list[RunStep], extra: RunStep) -> None:
    """The store still takes an append after a cancelled call, and returns it last."""
    await still_usable(f"append to {sid!r}", lambda: s.append(extra))
    got = await still_usable(f"last_n({sid!r}, 100)", lambda: s.last_n(sid, 100))
    expect(
        same_steps([*before, extra], got),
        did=f"appended to {sid!r} after a cancelled call, then last_n",
        expected=describe([*before, extra]),
        got=describe(got),
        why="a store left inconsistent by one cancelled call corrupts every later run",
    )


@clause(
    "step.cancel.append",
    "append cancelled at each checkpoint: the step is wholly there or wholly absent",
    why=(
        "the loop is cancelled routinely (timeouts, user aborts); a half-written step "
        "replays as a corrupt turn, and a lost lock wedges the store"
    ),
)
async def _cancel_append(h: Harness) -> None:
    async with open_steps(h) as s:
        # The first append to a session often takes another path (it creates the row).
        for first in (True, False):
            points = Points()
            for point in points:
                sid = f"cancel-{'first' if first else 'append'}-{point}"
                before = [] if first else [step(sid, 0)]
                await s.ensure(sid)
                await s.append_all(before)
                new = step(
                    sid, len(before), content="the step being cancelled", tool_args='{"k": [1, 2]}'
                )
                done = await cancel_at(partial(s.store.append, new), point)
                points.finished(done)
                got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
                what = "the first step" if first else "a step"
                did = f"appended {what} to {sid!r}, cancelled after {point} checkpoint(s), "
                did += "then last_n"
                if done:
                    expect(
                        same_steps([*before, new], got),
                        did=did + " (the append returned)",
                        expected=describe([*before, new]),
                        got=mismatch([*before, new], got),
                    )
                else:
                    expect(
                        same_steps(before, got) or same_steps([*before, new], got),
                        did=did,
                        expected=f"either {describe(before)} or {describe([*before, new])}, whole",
                        got=mismatch([*before, new], got),
                    )
                await _after_cancel(s, sid, got, step(sid, 2, content="after the cancel"))
        await _cancel_amid_appends(s)
        if not on_trio():
            await _task_cancel_append(s)


async def _task_cancel_append(s: Steps) -> None:
    """Under asyncio, the same with a native ``Task.cancel()`` (no anyio scope re-delivers it)."""
    points = Points()
    for point in points:
        sid = f"task-cancel-{point}"
        before = [step(sid, 0)]
        await s.append_all(before)
        new = step(sid, 1, content="the step being cancelled")
        did = f"appended a step to {sid!r}"
        done = await native_cancel_at(partial(s.store.append, new), point, did)
        points.finished(done)
        got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
        allowed = [[*before, new]] if done else [before, [*before, new]]
        expect(
            any(same_steps(want, got) for want in allowed),
            did=f"{did}, Task.cancel() at its suspension #{point + 1}, then last_n",
            expected=" or ".join(describe(want) for want in allowed) + ", whole",
            got=mismatch([*before, new], got),
        )


BIG_ARGS = json.dumps({"blob": "x" * 200_000})
"""Tool arguments past 128 KiB: a write that takes more than one round trip or page."""


async def _cancel_amid_appends(s: Steps) -> None:
    """Cancel a large append while another task appends to the same session.

    The rules: the other task's steps are all kept, in their order; the
    cancelled step is there once (wherever it landed among them) or not at
    all, and surely there when its append returned.
    """
    points = Points()
    for point in points:
        sid = f"cancel-busy-{point}"
        await s.ensure(sid)
        others = [step(sid, k, content=f"other #{k}") for k in range(3)]
        new = step(sid, 9, content="the large step being cancelled", tool_args=BIG_ARGS)

        async def other_task(others: list[RunStep] = others) -> None:
            for other in others:
                await s.append(other)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(other_task)
            done = await cancel_at(partial(s.store.append, new), point)
        points.finished(done)
        got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
        kept = [g for g in got if g.content != new.content]
        mine = [g for g in got if g.content == new.content]
        expect(
            same_steps(others, kept) and (same_steps([new], mine) or (not done and not mine)),
            did=f"appended a step with {len(BIG_ARGS):,} characters of tool_args to {sid!r}, "
            f"cancelled after {point} checkpoint(s), while another task appended 3 steps "
            "to it; then last_n",
            expected=f"the other task's {describe(others)} in order, and the large step "
            + ("once (its append returned)" if done else "once or not at all"),
            got=describe(got),
            hint="a cancelled write undone by truncating to the length it saw, or by deleting "
            "the newest row: that erases another task's append",
        )


async def _cancel_read(
    s: Steps, what: str, read: Callable[[], Awaitable[Any]], want: list[RunStep]
) -> None:
    points = Points()
    for point in points:
        points.finished(await cancel_at(read, point))
        got = await still_usable(f"{what} again", read)
        expect(
            same_steps(want, got),
            did=f"cancelled {what} after {point} checkpoint(s), then called it again",
            expected=describe(want),
            got=describe(got),
        )


@clause(
    "step.cancel.reads",
    "last_n cancelled at each checkpoint leaves the store unchanged and usable",
    why=(
        "reads are cancelled as often as writes; a read that leaks a lock or a connection "
        "when cancelled wedges every later run"
    ),
)
async def _cancel_reads(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = [step("r", k) for k in range(5)]
        await s.append_all(sent)
        await _cancel_read(s, "last_n('r', 3)", lambda: s.last_n("r", 3), sent[-3:])
        if hasattr(s.store, "all"):
            await _cancel_read(s, "all('r')", lambda: s.store.all("r"), sent)
        await _after_cancel(s, "r", sent, step("r", 9))


@clause(
    "step.cancel.delete",
    "delete_session cancelled at each checkpoint: the steps are all there or all gone",
    capability="delete_session",
    why=(
        "an erasure cut short must not leave a trace with holes: a half-deleted history "
        "replays as a conversation that never happened"
    ),
)
async def _cancel_delete(h: Harness) -> None:
    async with open_steps(h) as s:
        points = Points()
        for point in points:
            sid = f"cancel-delete-{point}"
            sent = [step(sid, k) for k in range(5)]
            await s.append_all(sent)
            done = await cancel_at(partial(s.store.delete_session, sid), point)
            points.finished(done)
            got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
            expect(
                got == [] if done else (got == [] or same_steps(sent, got)),
                did=f"delete_session({sid!r}) on 5 steps, cancelled after {point} checkpoint(s), "
                "then last_n",
                expected="[]" if done else f"[] or all of {describe(sent)}",
                got=describe(got),
            )
            await _after_cancel(s, sid, got, step(sid, 9, content="after the cancel"))
