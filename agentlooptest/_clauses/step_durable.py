"""``step.durable``: appended steps survive into a second handle (``reopen``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, same_steps, step, steps
from agentlooptest._stores import open_steps, reopened

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
