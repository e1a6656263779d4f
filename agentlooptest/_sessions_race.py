"""Session clauses for reads and summaries racing data writes on one session."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import trio

from agentloop import FinalizeSummary, RunStatus, Session, SupportsPut
from agentlooptest._clause import clause
from agentlooptest._sessions_core import expect_data
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

ROUNDS = 40


def _doc(k: int) -> str:
    return json.dumps({"version": k, "plan": ["step"] * (k % 3)})


@clause(
    "session.concurrency.read-your-writes",
    "once update_data returns, get sees it, even with other tasks calling get meanwhile",
    why=(
        "the loop persists working memory and the next run (or a tool) reads it back; a "
        "cache that re-fills with the old value while the write is in flight serves stale "
        "working memory forever after"
    ),
)
async def _read_your_writes(h: Harness) -> None:
    async with open_sessions(h) as store:
        sid = "ryw"
        await store.update_data(sid, _doc(0))
        done = False

        async def reader() -> None:
            while not done:
                await store.get(sid)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(reader)
            try:
                for k in range(1, ROUNDS + 1):
                    await store.update_data(sid, _doc(k))
                    await expect_data(
                        store,
                        sid,
                        _doc(k),
                        did=f"update_data({sid!r}, <version {k}>) returned while 3 other tasks "
                        f"called get({sid!r}) in a loop; then get({sid!r})",
                    )
            finally:
                done = True


@clause(
    "session.concurrency.finalize-keeps-data",
    "finalize racing update_data (and put) on an existing session never discards their data",
    why=(
        "the loop finalizes while tools may still persist working memory; a finalize that "
        "loads the row and saves it back whole silently rolls that memory back"
    ),
)
async def _finalize_keeps_data(h: Harness) -> None:
    async with open_sessions(h) as store:
        sid = "racing"
        can_put = isinstance(store, SupportsPut)
        if can_put:
            await store.put(Session(sid, "model-x", "prompt-x", _doc(0)))
        else:
            await store.update_data(sid, _doc(0))
        done = False

        async def finalizer() -> None:
            k = 0
            while not done:
                k += 1
                await store.finalize(sid, FinalizeSummary(RunStatus.completed, step_count=k))

        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(finalizer)
            try:
                for k in range(1, ROUNDS + 1):
                    by_put = can_put and k % 4 == 0
                    if by_put:
                        await store.put(Session(sid, "model-x", "prompt-x", _doc(k)))
                    else:
                        await store.update_data(sid, _doc(k))
                    write = "put(<same session, version" if by_put else "update_data(<version"
                    await expect_data(
                        store,
                        sid,
                        _doc(k),
                        did=f"{write} {k}>) on the existing session {sid!r} returned while 2 "
                        f"other tasks called finalize({sid!r}, ...) in a loop; then get({sid!r})",
                    )
            finally:
                done = True
        await expect_data(
            store,
            sid,
            _doc(ROUNDS),
            did=f"after the finalize tasks stopped, get({sid!r})",
        )
