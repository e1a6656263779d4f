"""Broken stores only a varied dimension catches: size, concurrency under cancellation,
every kind of write, and a second handle with a cache of its own.

Each would pass the contract as it was before that variation; the good
stores in ``_good`` pass with it.
"""

from __future__ import annotations

from typing import Any

import anyio

from agentloop import RunStep, Session, SessionInfo

from ._good import GoodBoth, GoodSessions, GoodSteps


class ListOnePage(GoodSessions):
    """list_sessions reads one page of 100 rows, whatever limit asks for."""

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        return (await super().list_sessions(limit=limit))[:100]


class PutKeepsUpdatedAt(GoodSessions):
    """put writes the row but leaves updated_at where it was."""

    async def put(self, session: Session) -> None:
        record = self.records.get(self.key(session.id)) if isinstance(session, Session) else None
        was = record.updated if record is not None else None
        await super().put(session)
        if record is not None and was is not None:
            record.updated = was


class RollbackTruncates(GoodSteps):
    """A cancelled append is undone by cutting the session back to the length it saw."""

    async def append(self, step: RunStep) -> None:
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {step!r}")
        await self.enter()
        rows = self.steps.setdefault(step.session_id, [])
        seen = len(rows)
        rows.append(step)
        try:
            await anyio.lowlevel.checkpoint()  # the round trip that commits
        except anyio.get_cancelled_exc_class():
            del rows[seen:]  # also whatever another task appended meanwhile
            raise


class CachedGet(GoodBoth):
    """get serves from a cache of this handle's own; its writes invalidate it, others' do not."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[str, Any] = {}

    async def get(self, session_id: str) -> Session:
        if session_id not in self.cache:
            self.cache[session_id] = await super().get(session_id)
        else:
            await self.enter()
            await self.leave()
        got: Session = self.cache[session_id]
        return got

    async def exists(self, session_id: str) -> bool:
        key = ("exists", session_id)
        if key not in self.cache:
            self.cache[key] = await super().exists(session_id)  # type: ignore[index]
        else:
            await self.enter()
            await self.leave()
        return bool(self.cache[key])  # type: ignore[index]

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        self.cache.clear()
        await super().update_data(session_id, snapshot)

    async def finalize(self, session_id: str, summary: Any) -> None:
        self.cache.clear()
        await super().finalize(session_id, summary)

    async def put(self, session: Session) -> None:
        self.cache.clear()
        await super().put(session)

    async def delete_session(self, session_id: str) -> bool:
        self.cache.clear()
        return await super().delete_session(session_id)


class CachedWindow(GoodBoth):
    """last_n serves from a cache of this handle's own, invalidated by its own appends only."""

    def __init__(self) -> None:
        super().__init__()
        self.windows: dict[tuple[str, int], list[RunStep]] = {}

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        if (session_id, n) not in self.windows:
            self.windows[session_id, n] = await super().last_n(session_id, n)
        else:
            await self.enter()
            await self.leave()
        return list(self.windows[session_id, n])

    async def append(self, step: RunStep) -> None:
        self.windows.clear()
        await super().append(step)

    async def delete_session(self, session_id: str) -> bool:
        self.windows.clear()
        return await super().delete_session(session_id)


async def second_handle(store: Any) -> Any:
    """A second handle onto ``store``'s backend: shared rows, its own cache and closed flag."""
    other = type(store).__new__(type(store))
    other.__dict__.update(store.__dict__)
    other.closed = False
    if isinstance(store, GoodBoth):
        other.trace = type(store.trace).__new__(type(store.trace))
        other.trace.__dict__.update(store.trace.__dict__)
        other.trace.closed = False
    for name in ("cache", "windows"):
        if name in vars(other):
            setattr(other, name, {})
    return other


class StepIdsCut255(GoodSteps):
    """Keys sessions by the first 255 characters of the id (a VARCHAR(255) column)."""

    def key(self, session_id: str) -> str:
        return session_id[:255]


class SessionIdsCut255(GoodSessions):
    """Keys sessions by the first 255 characters of the id (a VARCHAR(255) column)."""

    def key(self, session_id: str) -> str:
        return session_id[:255]


class ChunksLargeData(GoodSessions):
    """Data past 64 KiB is written in two round trips (clear, then fill) without a transaction."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        if isinstance(snapshot, str) and len(snapshot) > 65536:
            await super().update_data(session_id, None)
            await anyio.lowlevel.checkpoint()
        await super().update_data(session_id, snapshot)


class UpdateRestoresSummary(GoodSessions):
    """update_data reads the row, yields, then saves it back whole: a finalize meanwhile is lost."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        record = self.records.get(self.key(session_id))
        read = (record.final, record.total) if record is not None else None
        await anyio.lowlevel.checkpoint()  # the round trip between the read and the write
        await super().update_data(session_id, snapshot)
        if record is not None and read is not None:
            record.final, record.total = read
