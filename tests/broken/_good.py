"""Small correct stores that every broken store in the catalogue starts from.

They keep one defect per subclass honest: if these pass every clause, a
broken subclass that fails one has been caught for its own defect.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import anyio

from agentloop import (
    FinalizeSummary,
    RevisionConflictError,
    RunStep,
    Session,
    SessionInfo,
    StoreClosedError,
    validate_json,
    validate_n,
    validate_session_id,
)
from agentloop._shared import call_ends, call_starts
from agentlooptest import Harness
from agentlooptest._data import T0


class _Base:
    def __init__(self) -> None:
        self.closed = False

    async def enter(self) -> None:
        """The store-call convention, first half: raise if cancelled, refuse if closed."""
        await call_starts()
        if self.closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    async def leave(self) -> None:
        """The convention's second half: never report a completed call cancelled."""
        await call_ends()

    async def aclose(self) -> None:
        """Close; idempotent."""
        await anyio.lowlevel.checkpoint()
        self.closed = True


class GoodSteps(_Base):
    """A correct step store with every step capability."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[str, list[RunStep]] = {}

    def key(self, session_id: str) -> str:
        """Where a session's steps live (broken stores change it)."""
        return session_id

    def stored(self, step: RunStep) -> RunStep:
        """What is kept for ``step`` (broken stores lose something here)."""
        return step

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        """The last ``n`` of ``steps``, oldest first."""
        return steps[-n:]

    async def append(self, step: RunStep) -> None:
        """Append ``step`` to its session."""
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {step!r}")
        await self.enter()
        self.steps.setdefault(self.key(step.session_id), []).append(self.stored(step))
        await self.leave()

    async def append_many(self, steps: list[RunStep]) -> None:
        """Append every step, in order, or none (checked first)."""
        batch = list(steps)
        for position, step in enumerate(batch):
            if not isinstance(step, RunStep):
                raise TypeError(f"steps[{position}] must be a RunStep, got {step!r}")
        await self.enter()
        for step in batch:
            self.steps.setdefault(self.key(step.session_id), []).append(self.stored(step))
        await self.leave()

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps, oldest first."""
        validate_n(n)
        validate_session_id(session_id)
        await self.enter()
        got = self.window(self.steps.get(self.key(session_id), []), n)
        await self.leave()
        return list(got)

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step, in insertion order."""
        validate_session_id(session_id)
        await self.enter()
        got = list(self.steps.get(self.key(session_id), []))
        await self.leave()
        return got

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's steps."""
        await self.enter()
        existed = self.steps.pop(self.key(session_id), None) is not None
        await self.leave()
        return existed


class _Record:
    def __init__(self, session: Session, seq: int) -> None:
        self.session = session
        self.final: FinalizeSummary | None = None
        self.total = 0
        self.seq = seq
        self.created = T0
        self.updated = T0


class GoodSessions(_Base):
    """A correct session store with every session capability."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, _Record] = {}
        self.seq = itertools.count()
        self.revisions: dict[str, int] = {}  # never dropped: a delete bumps it

    def key(self, session_id: str) -> str:
        """Where a session lives (broken stores change it)."""
        return session_id

    def write(self, session_id: str) -> _Record:
        """The record to write into, created if needed, moved to the front of the recency order."""
        validate_session_id(session_id)
        record = self.records.get(self.key(session_id))
        if record is None:
            record = self.records[self.key(session_id)] = _Record(Session(session_id), 0)
            record.created = datetime.now(UTC)
        record.seq = next(self.seq)
        record.updated = max(record.updated, datetime.now(UTC))
        self.bump(session_id)
        return record

    def bump(self, session_id: str) -> None:
        """Make the session's revision larger (every write and a delete do)."""
        self.revisions[self.key(session_id)] = self.revisions.get(self.key(session_id), 0) + 1

    async def get_many(self, session_ids: list[str]) -> list[Session]:
        """One session per id, in order."""
        ids = list(session_ids)
        for position, sid in enumerate(ids):
            validate_session_id(sid, f"session_ids[{position}]")
        await self.enter()
        found = [self.records.get(self.key(sid)) for sid in ids]
        await self.leave()
        return [r.session if r else Session(sid) for r, sid in zip(found, ids, strict=True)]

    async def revision(self, session_id: str) -> int:
        """The session's revision."""
        validate_session_id(session_id)
        await self.enter()
        revision = self.revisions.get(self.key(session_id), 0)
        await self.leave()
        return revision

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """Replace the data if the session is at ``revision``."""
        validate_session_id(session_id)
        if snapshot is not None:
            validate_json(snapshot, "snapshot")
        await self.enter()
        current = self.revisions.get(self.key(session_id), 0)
        if current != revision:
            await self.leave()
            raise RevisionConflictError(f"at revision {current}, not {revision}")
        self.set_data(session_id, snapshot)
        await self.leave()
        return self.revisions[self.key(session_id)]

    def set_data(self, session_id: str, snapshot: str | None) -> None:
        """Write the data (a session write)."""
        record = self.write(session_id)
        old = record.session
        record.session = Session(old.id, old.model, old.system_prompt, snapshot)

    async def get(self, session_id: str) -> Session:
        """The session, or a fresh one."""
        validate_session_id(session_id)
        await self.enter()
        record = self.records.get(self.key(session_id))
        await self.leave()
        return record.session if record is not None else Session(session_id)

    async def exists(self, session_id: str) -> bool:
        """Whether a write created the session."""
        validate_session_id(session_id)
        await self.enter()
        found = self.key(session_id) in self.records
        await self.leave()
        return found

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """Replace the data."""
        validate_session_id(session_id)
        if snapshot is not None:
            validate_json(snapshot, "snapshot")
        await self.enter()
        self.set_data(session_id, snapshot)
        await self.leave()

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """Record the latest summary."""
        validate_session_id(session_id)
        if not isinstance(summary, FinalizeSummary):
            raise TypeError(f"summary must be a FinalizeSummary, got {summary!r}")
        await self.enter()
        record = self.write(session_id)
        record.final = summary
        record.total += summary.step_count
        await self.leave()

    async def put(self, session: Session) -> None:
        """Store the session whole."""
        if not isinstance(session, Session):
            raise TypeError(f"session must be a Session, got {session!r}")
        await self.enter()
        self.write(session.id).session = session
        await self.leave()

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """The latest summary."""
        await self.enter()
        record = self.records.get(self.key(session_id))
        await self.leave()
        return record.final if record is not None else None

    def order(self) -> list[_Record]:
        """Records, most recently written first."""
        return sorted(self.records.values(), key=lambda r: r.seq, reverse=True)

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """At most ``limit`` sessions, most recently written first."""
        validate_n(limit, "limit")
        await self.enter()
        rows = self.order()[:limit]
        await self.leave()
        return [self.info(r) for r in rows]

    def info(self, r: _Record) -> SessionInfo:
        """One listing row."""
        status = r.final.status if r.final is not None else None
        return SessionInfo(r.session.id, status, r.total, r.created, r.updated)

    async def delete_session(self, session_id: str) -> bool:
        """Forget the session."""
        await self.enter()
        existed = self.records.pop(self.key(session_id), None) is not None
        if existed:
            self.bump(session_id)
        await self.leave()
        return existed


def unused(*_: Any) -> None:
    """Keeps linters quiet about deliberately unused arguments in broken stores."""


class GoodBoth(GoodSessions):
    """A correct store that is both protocols in one object, like the SQL stores."""

    def __init__(self) -> None:
        super().__init__()
        self.trace = GoodSteps()

    async def append(self, step: RunStep) -> None:
        """Append ``step`` to its session."""
        self.trace.closed = self.closed
        await self.trace.append(step)

    async def append_many(self, steps: list[RunStep]) -> None:
        """Append every step, in order, or none."""
        self.trace.closed = self.closed
        await self.trace.append_many(steps)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps, oldest first."""
        self.trace.closed = self.closed
        return await self.trace.last_n(session_id, n)

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step, in insertion order."""
        self.trace.closed = self.closed
        return await self.trace.all(session_id)

    async def delete_session(self, session_id: str) -> bool:
        """Forget the session: steps, data and summary, in one step."""
        validate_session_id(session_id)
        await self.enter()
        had_steps = self.trace.steps.pop(session_id, None) is not None
        had_session = self.records.pop(self.key(session_id), None) is not None
        if had_session:
            self.bump(session_id)
        await self.leave()
        return had_steps or had_session


class GoodForeignKey(GoodBoth):
    """Steps need a session row first (a foreign key); delete_session cascades to the row.

    The harness's ``ensure_session`` makes the row, so it must be called again
    after a delete, before the next append to that id.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rows: set[str] = set()

    async def ensure_row(self, session_id: str) -> None:
        """``INSERT ... ON CONFLICT DO NOTHING`` into the parent table."""
        await self.enter()
        self.rows.add(session_id)
        await self.leave()

    async def append(self, step: RunStep) -> None:
        """Append, refusing a step whose session has no row (the foreign key)."""
        if isinstance(step, RunStep) and step.session_id not in self.rows and not self.closed:
            raise ValueError(f"foreign key: no session row for {step.session_id!r}")
        await super().append(step)

    async def delete_session(self, session_id: str) -> bool:
        """Delete the row; its steps go with it (ON DELETE CASCADE)."""
        existed = await super().delete_session(session_id)
        self.rows.discard(session_id)
        return existed


PAGE = 50
"""Rows per page of :class:`GoodPaged`'s reads."""


class GoodPaged(GoodBoth):
    """Reads in pages of 50 rows, yielding between pages, from one snapshot (keyset paging).

    A window or listing is cut at the moment the read starts (the newest step,
    the write order), then fetched page by page: consistent, though not one
    round trip.
    """

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps, oldest first, fetched in pages."""
        validate_n(n)
        validate_session_id(session_id)
        await self.enter()
        rows = self.trace.steps.get(session_id, [])
        end = len(rows)  # the snapshot: later appends are past it
        return await self._pages(rows, max(0, end - n), end)

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step, in insertion order, fetched in pages."""
        validate_session_id(session_id)
        await self.enter()
        rows = self.trace.steps.get(session_id, [])
        return await self._pages(rows, 0, len(rows))

    async def _pages(self, rows: list[RunStep], start: int, end: int) -> list[RunStep]:
        got: list[RunStep] = []
        rows = list(rows[:end])  # a delete meanwhile must not tear the snapshot either
        for first in range(start, end, PAGE):
            got += rows[first : min(first + PAGE, end)]
            await anyio.lowlevel.cancel_shielded_checkpoint()
        if start >= end:
            await self.leave()
        return got

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """At most ``limit`` sessions, most recently written first, fetched in pages."""
        validate_n(limit, "limit")
        await self.enter()
        rows = [self.info(r) for r in self.order()[:limit]]
        got: list[SessionInfo] = []
        for first in range(0, len(rows), PAGE):
            got += rows[first : first + PAGE]
            await anyio.lowlevel.cancel_shielded_checkpoint()
        if not rows:
            await self.leave()
        return got


def harness_for(cls: type) -> Harness:
    """A harness whose stores are fresh ``cls()`` objects; reopening gives the same object."""

    async def new() -> Any:
        return cls()

    async def same(store: Any) -> Any:
        return store

    return Harness(new_step_store=new, new_session_store=new, reopen=same)
