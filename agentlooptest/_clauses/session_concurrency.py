"""``session.concurrency.*``: concurrent writes and reads on one or many sessions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio

from agentloop import FinalizeSummary, RunStatus, Session, SupportsPut
from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import DONE, expect_data
from agentlooptest._data import json_equal
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


def _writer_doc(k: int) -> str:
    """Writer ``k``'s document; odd writers list its keys in reverse.

    A store that applies a document key by key then ends with keys from two
    writers even when the tasks run in lockstep (asyncio's FIFO scheduling):
    the last writer of the first key is not the last writer of the last one.
    """
    items = [("writer", k), ("copy", k), ("a", k), ("b", [k]), ("c", {"k": k})]
    return json.dumps(dict(items if k % 2 == 0 else reversed(items)))


@clause(
    "session.concurrency.same-session",
    "concurrent update_data on one session ends with exactly one of the written values",
    why=(
        "parallel tool calls write working memory concurrently; a store that merges or "
        "tears concurrent writes leaves a snapshot nobody wrote"
    ),
)
async def _same_session(h: Harness) -> None:
    async with open_sessions(h) as store:
        for storm in range(6):
            sid = f"shared-{storm}"
            written = [_writer_doc(k) for k in range(60)]
            async with anyio.create_task_group() as tasks:
                for doc in written:
                    tasks.start_soon(store.update_data, sid, doc)
            got = await store.get(sid)
            expect(
                any(json_equal(doc, got.data) for doc in written),
                did=f"60 tasks called update_data({sid!r}, <their own document>) concurrently, "
                f"then get({sid!r})",
                expected="data equal to one of the 60 written documents",
                got=got,
            )


@clause(
    "session.concurrency.many-sessions",
    "concurrent writes to hundreds of sessions each land on their own session",
    why=(
        "a server runs many sessions at once; a store that crosses concurrent writes "
        "hands one user's working memory to another"
    ),
)
async def _many(h: Harness) -> None:
    async with open_sessions(h) as store:
        ids = [f"m{k}" for k in range(200)]

        async def write(k: int, sid: str) -> None:
            await store.update_data(sid, json.dumps({"owner": sid}))
            await store.finalize(sid, FinalizeSummary(RunStatus.completed, step_count=k))

        async with anyio.create_task_group() as tasks:
            for k, sid in enumerate(ids):
                tasks.start_soon(write, k, sid)
        for sid in ids:
            await expect_data(
                store,
                sid,
                json.dumps({"owner": sid}),
                f"200 tasks each wrote update_data + finalize to their session, then get({sid!r})",
            )


@clause(
    "session.concurrency.first-writes",
    "racing first writes (update_data and finalize) on a new session both survive",
    why=(
        "the first run of a session writes data and finalizes close together; a "
        "check-then-insert store lets one first write overwrite the other and memory is lost"
    ),
)
async def _first_writes(h: Harness) -> None:
    async with open_sessions(h) as store:
        ids = [f"new{k}" for k in range(60)]
        async with anyio.create_task_group() as tasks:
            for k, sid in enumerate(ids):  # either may start first, also under FIFO scheduling
                if k % 2:
                    tasks.start_soon(store.finalize, sid, DONE)
                tasks.start_soon(store.update_data, sid, json.dumps({"first": sid}))
                if not k % 2:
                    tasks.start_soon(store.finalize, sid, DONE)
        for sid in ids:
            await expect_data(
                store,
                sid,
                json.dumps({"first": sid}),
                f"raced update_data({sid!r}, <doc>) against finalize({sid!r}, ...) on a new "
                f"session, then get({sid!r})",
            )
            if hasattr(store, "final"):
                final = await store.final(sid)
                expect(final == DONE, did=f"then final({sid!r})", expected=repr(DONE), got=final)


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
            while not done:  # a get that never yields must not starve the writer
                await store.get(sid)
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(reader)
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
    "finalize racing update_data (and put) on an existing session: no write discards another's",
    why=(
        "the loop finalizes while tools may still persist working memory; a write that "
        "loads the row and saves it back whole silently rolls back the memory or the summary"
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
        written = [0]  # the step counts every finalize that returned added up

        async def finalizer() -> None:
            k = 0
            while not done:
                k += 1
                await store.finalize(sid, FinalizeSummary(RunStatus.completed, step_count=k))
                written[0] += k
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tasks:
            for _ in range(2):
                tasks.start_soon(finalizer)
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
        await _summary_kept(store, sid, written[0])


async def _summary_kept(store: Any, sid: str, written: int) -> None:
    """After the race, the summary and total are every finalize's: no data write undid one."""
    did = f"2 tasks finalized {sid!r} in a loop while update_data and put wrote it; then "
    hint = "update_data or put saving back a whole row it read before a finalize committed"
    if hasattr(store, "final"):
        final = await store.final(sid)
        expect(
            isinstance(final, FinalizeSummary) and final.status is RunStatus.completed,
            did=did + f"final({sid!r})",
            expected="a completed summary, one the finalize tasks wrote",
            got=final,
            hint=hint,
        )
    if hasattr(store, "list_sessions"):
        infos = [i for i in await store.list_sessions(limit=1000) if i.id == sid]
        expect(
            [(i.status, i.step_count) for i in infos] == [(RunStatus.completed, written)],
            did=did + "list_sessions()",
            expected=f"{sid!r} listed once, completed, step_count {written} (the sum of "
            "every finalize that returned)",
            got=infos,
            hint=hint,
        )
