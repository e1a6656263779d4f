"""Helpers the clause modules of more than one family share (not a clause module)."""

from __future__ import annotations

from typing import Any

from agentloop import FinalizeSummary, RunStatus, Session
from agentlooptest._clause import expect
from agentlooptest._data import json_equal

REPLAY = (
    "the loop replays last_n straight into the model's context; a wrong window or order "
    "silently corrupts every multi-turn conversation"
)


SENTINEL = "agentlooptest-sentinel"


DONE = FinalizeSummary(RunStatus.completed, 10, 20, 3, 400, 17)


async def expect_data(store: Any, sid: str, want: str | None, did: str, **kw: Any) -> Session:
    """``get(sid)`` and check it returns ``sid`` with data JSON-equal to ``want``."""
    got = await store.get(sid)
    expect(
        isinstance(got, Session) and got.id == sid and json_equal(want, got.data),
        did=did,
        expected=f"Session(id={sid!r}, data={want!r:.200})",
        got=got,
        **kw,
    )
    return got  # type: ignore[no-any-return]


async def expect_exists(store: Any, sid: str, want: bool, did: str, **kw: Any) -> None:
    """``exists(sid)`` is exactly ``want``."""
    got = await store.exists(sid)
    expect(got is want, did=did, expected=f"exists({sid!r}) is {want}", got=got, **kw)


async def seed_session(store: Any, sid: str) -> None:
    """Give ``sid`` data and an error summary, so a later call has something to lose."""
    await store.update_data(sid, '{"before": 1}')
    await store.finalize(sid, FinalizeSummary(RunStatus.error, step_count=1))


def same_session(want: Session, got: object) -> bool:
    """Whether ``got`` is a Session with ``want``'s id, model, system prompt and data."""
    return (
        isinstance(got, Session)
        and (got.id, got.model, got.system_prompt) == (want.id, want.model, want.system_prompt)
        and json_equal(want.data, got.data)
    )


LONG_IDS = ("x" * 300 + "1", "x" * 300 + "2", "é" * 511 + "a", "é" * 511 + "b", "é" * 512)
"""Ids past 255 and 512 characters that differ only at the end, up to the 1,024-byte maximum."""

LONG_HINT = "an id column or index key cut at a fixed length (VARCHAR(255), a key prefix)"


def short_id(sid: str) -> str:
    """A long id shown as its start, length and end."""
    if len(sid) <= 40:
        return repr(sid)
    return f"{sid[:6]!r}...<{len(sid)} chars>...{sid[-4:]!r}"
