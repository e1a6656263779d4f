"""``step.durable``: appended steps survive into a second handle (``reopen``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop import RunStep
from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, same_steps, step, steps
from agentlooptest._stores import Steps, open_steps, reopened

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.durable",
    "appended steps are visible, in order, through a second handle (reopen)",
    capability="reopen",
    why=(
        "a system of record must keep every append it acknowledged: a step visible only "
        "to the handle that wrote it is lost on restart or on another worker"
    ),
)
async def _durable(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("d", 12)
        await s.append_all(sent)
        await s.append_all(steps("e", 2))
        async with reopened(h, s.store) as other:
            got = await other.last_n("d", 20)
            expect(
                same_steps(sent, got),
                did="appended 12 steps to 'd' with one handle, then last_n('d', 20) on reopen()",
                expected=describe(sent),
                got=describe(got),
            )
            more = step("d", 12, content="written through the second handle")
            await other.append(more)
        got = await s.last_n("d", 2)
        expect(
            same_steps([sent[-1], more], got),
            did="appended one more step through the reopened handle, then last_n('d', 2) "
            "on the first",
            expected=describe([sent[-1], more]),
            got=describe(got),
        )
        async with reopened(h, s.store) as other:
            await _stale_caches(s, other, more)


STALE = "a per-process or per-handle cache that another handle's writes never invalidate"


async def _stale_caches(s: Steps, other: Any, more: RunStep) -> None:
    """The second handle reads first, so a cache has something to serve stale; then one writes."""
    await other.last_n("d", 2)
    extra = step("d", 13, content="appended on the first handle after the second one read")
    await s.append(extra)
    got = await other.last_n("d", 2)
    expect(
        same_steps([more, extra], got),
        did="last_n('d', 2) on the second handle, one append on the first, then last_n('d', 2) "
        "on the second again",
        expected=describe([more, extra]),
        got=describe(got),
        hint=STALE,
    )
    if hasattr(s.store, "delete_session"):
        await other.last_n("e", 5)
        await s.store.delete_session("e")
        gone = await other.last_n("e", 5)
        expect(
            gone == [],
            did="last_n('e', 5) on the second handle, delete_session('e') on the first, then "
            "last_n('e', 5) on the second again",
            expected="[]",
            got=describe(gone),
            hint=STALE,
        )
