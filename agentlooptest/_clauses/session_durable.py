"""``session.durable``: data, settings and summaries survive into a second handle (``reopen``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop import FinalizeSummary, RunStatus, Session
from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import expect_data, expect_exists, same_session
from agentlooptest._stores import open_sessions, reopened

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.durable",
    "data, settings and summaries are visible through a second handle (reopen)",
    capability="reopen",
    why=(
        "a system of record must keep every write it acknowledged: working memory visible "
        "only to the handle that wrote it is lost on restart or on another worker"
    ),
)
async def _durable(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("d", '{"memory": [1, 2]}')
        summary = FinalizeSummary(RunStatus.max_iterations, 1, 2, 3, 4, 5)
        await store.finalize("d", summary)
        if hasattr(store, "put"):
            await store.put(Session("p", "model-p", "prompt-p", '{"p": 1}'))
        async with reopened(h, store) as other:
            await expect_data(
                other,
                "d",
                '{"memory": [1, 2]}',
                "wrote 'd' with one handle, then get('d') on reopen()",
            )
            await expect_exists(other, "d", True, "then exists('d') on the reopened handle")
            if hasattr(other, "final"):
                got = await other.final("d")
                expect(
                    got == summary,
                    did="then final('d') on the reopened handle",
                    expected=repr(summary),
                    got=got,
                )
            if hasattr(store, "put"):
                got_p = await other.get("p")
                want = Session("p", "model-p", "prompt-p", '{"p": 1}')
                expect(
                    same_session(want, got_p),
                    did="put('p') on one handle, get('p') on the other",
                    expected=repr(want),
                    got=got_p,
                )
            await other.update_data("d", '{"memory": [3]}')
        await expect_data(
            store,
            "d",
            '{"memory": [3]}',
            "update_data('d') through the reopened handle, then get('d') on the first",
        )
