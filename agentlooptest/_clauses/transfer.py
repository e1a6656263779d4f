"""``session.transfer.*`` (capability ``restore_session``): sessions exported from the store and
imported into a fresh ``agentloopmem`` store, and back into a fresh store under test, export
to the same records; ``restore_session`` refuses an existing session and changes nothing."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio

from agentloop import (
    RunStatus,
    Session,
    SessionExistsError,
    SessionInfo,
    StepStore,
    SupportsLabels,
    SupportsPut,
    SupportsRevisions,
    export_sessions,
    import_sessions,
)
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._clauses.paging import has, labels_of
from agentlooptest._data import DONE, T0, expect_data, expect_exists, steps
from agentlooptest._harness import Harness, Steps, open_sessions, open_steps

MOVING = (
    "sessions move between stores by export and import (an eval run into a file, SQLite "
    "into PostgreSQL, a bug report): a store that loses a field on the way, or restores "
    "over an existing session, corrupts what it was asked to carry"
)


@asynccontextmanager
async def _pair(h: Harness) -> AsyncIterator[tuple[Any, Any] | None]:
    """``(steps, sessions)`` from the harness: one object when the store is both."""
    async with open_sessions(h) as sessions:
        if isinstance(sessions, StepStore):
            yield sessions, sessions
        elif h.new_step_store is None:
            yield None
        else:
            async with open_steps(h) as s:
                yield s.store, sessions


async def _seed(h: Harness, steps_store: Any, sessions: Any) -> None:
    if has(sessions, SupportsPut):
        await sessions.put(Session("t1", "model-t", "prompt\nwith lines", '{"b": 1, "a": [2.5]}'))
    else:
        await sessions.update_data("t1", '{"b": 1, "a": [2.5]}')
    if has(sessions, SupportsLabels):
        await sessions.set_labels("t1", {"team": "a", "é": "ü"})
    await Steps(h, steps_store).append_all(steps("t1", 5))
    await sessions.finalize("t1", DONE)
    await sessions.update_data("t2", None)
    await sessions.finalize("t3", DONE)
    await sessions.finalize("t3", DONE)


async def _records(path: str) -> list[dict[str, Any]]:
    text = await anyio.Path(path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


async def _memory() -> Any:
    from agentloopmem import MemoryStore

    return MemoryStore()


def _first_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    for n, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if x != y:
            return f"line {n} differs: first {x!r:.300}, then {y!r:.300}"
    return f"{len(a)} lines, then {len(b)} lines"


@asynccontextmanager
async def _scratch() -> AsyncIterator[str]:
    """A temporary directory made and removed off the event loop thread (anyio's own
    ``TemporaryDirectory`` needs anyio 4.8; the floor is 4.6)."""
    path = await anyio.to_thread.run_sync(tempfile.mkdtemp)
    try:
        yield path
    finally:
        await anyio.to_thread.run_sync(shutil.rmtree, path, True)


@clause(
    "session.transfer.round-trip",
    "sessions exported, imported into a fresh agentloopmem store, exported, imported into "
    "a fresh store under test and exported again give the same records",
    capability="restore_session",
    why=MOVING,
    hint="restore_session writing the session as new (fresh times, no run total)",
)
async def _round_trip(h: Harness) -> None:
    async with _scratch() as tmp:
        first, second, third = (f"{tmp}/{name}.jsonl" for name in ("a", "b", "c"))
        async with _pair(h) as pair:
            if pair is None:
                return  # no step store to export steps from
            await _seed(h, *pair)
            await export_sessions(*pair, first)
        memory = await _memory()
        try:
            await import_sessions(memory, memory, first)
            await export_sessions(memory, memory, second)
        finally:
            await memory.aclose()
        a, b = await _records(first), await _records(second)
        did = "seeded t1..t3, exported them, imported the file into a fresh agentloopmem "
        did += "MemoryStore and exported that"
        expect(a == b, did=did, expected="the same records", got=_first_difference(a, b))
        async with _pair(h) as pair:
            assert pair is not None
            await import_sessions(*pair, second)
            await export_sessions(*pair, third)
        c = await _records(third)
        did += ", then imported that into a fresh store under test and exported it again"
        expect(a == c, did=did, expected="the same records", got=_first_difference(a, c))


def _recorded(sid: str) -> tuple[Session, SessionInfo]:
    info = SessionInfo(
        sid, RunStatus.completed, 42, T0, T0 + timedelta(seconds=1), labels={"r": "1"}
    )
    return Session(sid, "model-r", "prompt-r", '{"restored": true}'), info


@clause(
    "session.transfer.restore-exists",
    "restore_session of an existing session (a row, or steps) raises SessionExistsError "
    "and changes nothing; an import naming an existing session writes nothing",
    capability="restore_session",
    why=MOVING,
    hint="restore_session writing first and checking for the session after",
)
async def _restore_exists(h: Harness) -> None:
    async with _pair(h) as pair:
        if pair is None:
            return
        steps_store, store = pair
        await store.update_data("here", '{"mine": 1}')
        if has(store, SupportsLabels):
            await store.set_labels("here", {"own": "label"})
        rev = await store.revision("here") if has(store, SupportsRevisions) else None
        session, info = _recorded("here")
        did = "restore_session of 'here', a session with data and labels"
        try:
            await store.restore_session(session, info, DONE)
        except SessionExistsError:
            pass
        else:
            raise Violation(did, "SessionExistsError, nothing changed", "no error")
        await expect_data(store, "here", '{"mine": 1}', did + ", then get('here')")
        labels = await labels_of(store, "here") if has(store, SupportsLabels) else None
        expect(
            labels in (None, {"own": "label"}),
            did=did + ", then its labels",
            expected=repr({"own": "label"}),
            got=labels,
        )
        if rev is not None:
            now = await store.revision("here")
            expect(
                now == rev, did=did + ", then revision('here')", expected=f"revision {rev}", got=now
            )
        if steps_store is store:
            await Steps(h, store).append_all(steps("only-steps", 2))
            session, info = _recorded("only-steps")
            did = "restore_session of 'only-steps', a session with steps and no row"
            try:
                await store.restore_session(session, info, DONE)
            except SessionExistsError:
                pass
            else:
                raise Violation(did, "SessionExistsError, nothing changed", "no error")
            await expect_exists(store, "only-steps", False, did + ", then exists('only-steps')")
        await _import_refused(h, steps_store, store)


async def _import_refused(h: Harness, steps_store: Any, store: Any) -> None:
    async with _scratch() as tmp:
        path = f"{tmp}/two.jsonl"
        memory = await _memory()
        try:
            await memory.update_data("first", '{"one": 1}')
            await memory.update_data("here", '{"theirs": 1}')
            await export_sessions(memory, memory, path)
        finally:
            await memory.aclose()
        did = "import_sessions of a file holding 'first' and 'here' ('here' exists)"
        try:
            await import_sessions(steps_store, store, path)
        except SessionExistsError:
            pass
        else:
            raise Violation(did, "SessionExistsError, nothing imported", "the import went through")
        await expect_exists(store, "first", False, did + ", then exists('first')")
        await expect_data(store, "here", '{"mine": 1}', did + ", then get('here')")
