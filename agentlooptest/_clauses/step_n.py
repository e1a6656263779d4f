"""``step.n.*``: ``last_n`` checks its ``n`` argument."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import Violation, clause, expect
from agentlooptest._data import describe, steps
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.n.validation",
    "n must be an int >= 1: ValueError for 0 or less, TypeError for bool and non-ints",
    why=(
        "a window of 0 or -1 is a caller bug; a store that answers it with all or no "
        "history (steps[-0:] is the whole list) hides the bug and floods or empties the context"
    ),
)
async def _n_validation(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append_all(steps("s", 3))
        bad: list[tuple[object, type[Exception]]] = [
            (0, ValueError),
            (-1, ValueError),
            (-(2**40), ValueError),
            (True, TypeError),
            (False, TypeError),
            (1.0, TypeError),
            ("3", TypeError),
            (None, TypeError),
        ]
        for n, error in bad:
            try:
                got = await s.store.last_n("s", n)
            except error:
                continue
            except Exception as exc:
                raise Violation(
                    f"called last_n('s', {n!r}) on a session with 3 steps",
                    f"{error.__name__}",
                    f"{type(exc).__name__}: {exc}",
                ) from None
            raise Violation(
                f"called last_n('s', {n!r}) on a session with 3 steps",
                f"{error.__name__}",
                f"no error; it returned {describe(got)}",
            )
        got = await s.last_n("s", 3)
        expect(
            len(got) == 3,
            did="after the refused calls, last_n('s', 3)",
            expected="the 3 steps, untouched",
            got=describe(got),
        )
