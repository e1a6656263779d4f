"""``step.unknown-session-empty``: ``last_n`` of an unknown session is ``[]``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._data import steps
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.unknown-session-empty",
    "last_n of an unknown session returns [] (not an error, not None)",
    why=(
        "every new conversation starts with last_n of an id never seen: an error or None "
        "there fails the first run of every session"
    ),
)
async def _unknown(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append_all(steps("known", 2))
        for sid in ("never-seen", "know", "known ", "KNOWN"):
            got = await s.last_n(sid, 10)
            expect(
                got == [] and isinstance(got, list),
                did=f"appended to session 'known' only, then last_n({sid!r}, 10)",
                expected="[] (an empty list)",
                got=got,
            )
