"""``session.bad-input.*``: bad ids and argument types are refused, changing nothing."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from agentlooptest._clause import clause, expect, expect_refused
from agentlooptest._clauses._shared import DONE, expect_data
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.bad-input.refused",
    "empty ids, ids with NUL and wrong argument types are refused; nothing changes",
    why=(
        "bad input must fail loudly and change nothing: a store that keeps a session under "
        "an empty id, or half-applies a bad call, corrupts the state later runs read"
    ),
)
async def _bad_input(h: Harness) -> None:
    async with open_sessions(h) as store:
        prior = '{"kept": true}'
        await store.update_data("s", prior)
        await store.finalize("s", DONE)
        calls: list[tuple[str, Any, tuple[type[Exception], ...]]] = []
        for sid, error in (("", ValueError), ("a\x00b", ValueError), (None, TypeError)):
            calls += [
                (f"get({sid!r})", partial(store.get, sid), (error,)),
                (f"exists({sid!r})", partial(store.exists, sid), (error,)),
                (f"update_data({sid!r}, '{{}}')", partial(store.update_data, sid, "{}"), (error,)),
                (f"finalize({sid!r}, <summary>)", partial(store.finalize, sid, DONE), (error,)),
            ]
        for summary in (None, "completed", {"status": "completed"}):
            calls.append(
                (f"finalize('s', {summary!r})", partial(store.finalize, "s", summary), (TypeError,))
            )
        if hasattr(store, "put"):
            for session in (None, "s", {"id": "s"}):
                calls.append((f"put({session!r})", partial(store.put, session), (TypeError,)))
        for did, call, errors in calls:
            await expect_refused(f"called {did}", call, *errors)
        await expect_data(store, "s", prior, "after the refused calls, get('s')")
        if hasattr(store, "final"):
            final = await store.final("s")
            expect(
                final == DONE,
                did="after the refused calls, final('s')",
                expected=repr(DONE),
                got=final,
            )
