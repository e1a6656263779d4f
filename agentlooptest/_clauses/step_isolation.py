"""``step.isolation``: one session's steps never appear in another's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import LONG_HINT, LONG_IDS, short_id
from agentlooptest._data import describe, same_steps, steps
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "step.isolation",
    "steps of one session never appear in another's, prefixes included",
    why=(
        "sessions are separate users and conversations: a leak feeds one user's history "
        "into another's model context"
    ),
)
async def _isolation(h: Harness) -> None:
    async with open_steps(h) as s:
        ids = ("a", "ab", "a/b", "b", "a.", "conversation-1", "conversation-2")
        sent = {sid: steps(sid, 3, start=10 * k) for k, sid in enumerate(ids)}
        for k in range(3):
            for sid in ids:
                await s.append(sent[sid][k])
        for sid in ids:
            got = await s.last_n(sid, 10)
            expect(
                same_steps(sent[sid], got),
                did=f"appended 3 steps to each of sessions {list(ids)}, then last_n({sid!r}, 10)",
                expected=f"only that session's steps: {describe(sent[sid])}",
                got=describe(got),
            )
        long_sent = {sid: steps(sid, 2, start=100 * k) for k, sid in enumerate(LONG_IDS)}
        for sid in LONG_IDS:
            await s.append_all(long_sent[sid])
        for sid in LONG_IDS:
            got = await s.last_n(sid, 10)
            expect(
                same_steps(long_sent[sid], got),
                did=f"appended 2 steps to each of {len(LONG_IDS)} sessions with ids of 301 to "
                f"1,024 bytes differing only at the end, then last_n({short_id(sid)}, 10)",
                expected=f"only that session's steps: {describe(long_sent[sid])}",
                got=describe(got),
                hint=LONG_HINT,
            )
