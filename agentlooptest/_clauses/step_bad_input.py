"""``step.bad-input.*``: ``append`` refuses bad steps and ids."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect, expect_refused
from agentlooptest._data import describe, same_steps, step, steps
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.bad-input.refused",
    "a non-RunStep, an empty id or an id with NUL is refused with TypeError/ValueError",
    why=(
        "bad input must fail loudly and leave the trace as it was: a store that stores "
        "garbage or half of it corrupts the history every later run replays"
    ),
)
async def _bad_input(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 2)
        await s.append_all(sent)
        good = step("s", 5)
        bad_steps: list[object] = [
            None,
            "not a step",
            {f: getattr(good, f) for f in ("session_id", "step_index", "step_type")},
            (good,),
        ]
        for bad in bad_steps:
            await expect_refused(
                f"called append({bad!r:.60})", partial(s.store.append, bad), TypeError, ValueError
            )
        bad_ids: list[tuple[object, type[Exception]]] = [
            ("", ValueError),
            ("a\x00b", ValueError),
            (None, TypeError),
            (b"s", TypeError),
        ]
        for sid, error in bad_ids:
            await expect_refused(
                f"called last_n({sid!r}, 1)", partial(s.store.last_n, sid, 1), error
            )
            if hasattr(s.store, "all"):
                await expect_refused(f"called all({sid!r})", partial(s.store.all, sid), error)
        got = await s.last_n("s", 10)
        expect(
            same_steps(sent, got),
            did="after the refused calls, last_n('s', 10)",
            expected=describe(sent),
            got=describe(got),
        )
