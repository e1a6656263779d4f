"""Broken batch and revision capabilities, one defect each (the catalogue names their clauses)."""

from __future__ import annotations

from typing import Any

import anyio

from agentloop import RevisionConflictError, RunStep, Session, validate_session_id

from ._good import GoodSessions, GoodSteps, unused


class PartialBatch(GoodSteps):
    """append_many appends item by item and stops at the first bad one, keeping the rest."""

    async def append_many(self, steps: list[RunStep]) -> None:
        await self.enter()
        for position, step in enumerate(steps):
            if not isinstance(step, RunStep):
                raise TypeError(f"steps[{position}] must be a RunStep")
            self.steps.setdefault(step.session_id, []).append(step)
        await self.leave()


class ReorderedBatch(GoodSteps):
    """append_many stores the batch sorted by step index (as a multi-row INSERT might)."""

    async def append_many(self, steps: list[RunStep]) -> None:
        await super().append_many(sorted(steps, key=lambda s: s.step_index))


class KeepsCallerBatch(GoodSteps):
    """append_many keeps the caller's list and reads it back lazily (a write-behind buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[list[RunStep]] = []

    async def append_many(self, steps: list[RunStep]) -> None:
        await self.enter()
        self.chunks.append(steps)  # the caller's own list
        await self.leave()

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        for chunk in self.chunks:
            for step in chunk:
                self.steps.setdefault(step.session_id, []).append(step)
        self.chunks.clear()
        return await super().last_n(session_id, n)


class BatchPartialOnCancel(GoodSteps):
    """append_many yields between its steps, so a cancellation there leaves half the batch."""

    async def append_many(self, steps: list[RunStep]) -> None:
        await self.enter()
        for step in steps:
            self.steps.setdefault(step.session_id, []).append(step)
            await anyio.lowlevel.checkpoint()
        await self.leave()


class BatchNotDurable(GoodSteps):
    """append_many buffers batches in the handle; another handle never sees them."""

    def __init__(self, shared: dict[str, list[RunStep]] | None = None) -> None:
        super().__init__()
        self.buffered: dict[str, list[RunStep]] = {}
        if shared is not None:
            self.steps = shared

    async def append_many(self, steps: list[RunStep]) -> None:
        await self.enter()
        for step in steps:
            self.buffered.setdefault(step.session_id, []).append(step)
        await self.leave()

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        got = await super().last_n(session_id, 10**6)
        return [*got, *self.buffered.get(session_id, [])][-n:]


async def reopen_sharing_steps(store: Any) -> Any:
    """A second handle onto the same step dict (not the handle's own buffers)."""
    return BatchNotDurable(store.steps)


class GetManyDedupes(GoodSessions):
    """get_many answers each distinct id once (a dict keyed by id)."""

    async def get_many(self, session_ids: list[str]) -> list[Session]:
        return await super().get_many(list(dict.fromkeys(session_ids)))


class GetManySkipsUnknown(GoodSessions):
    """get_many leaves unknown ids out (an inner join)."""

    async def get_many(self, session_ids: list[str]) -> list[Session]:
        got = await super().get_many(session_ids)
        return [s for s, sid in zip(got, session_ids, strict=True) if sid in self.records]


class GetManyCachesList(GoodSessions):
    """get_many hands every caller the same cached list for the same ids."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[tuple[str, ...], list[Session]] = {}

    async def get_many(self, session_ids: list[str]) -> list[Session]:
        key = tuple(session_ids)
        if key not in self.cache:
            self.cache[key] = await super().get_many(session_ids)
        return self.cache[key]


class GetManySkipsBadIds(GoodSessions):
    """get_many drops ids it cannot use instead of refusing the call."""

    async def get_many(self, session_ids: list[str]) -> list[Session]:
        good = [s for s in session_ids if isinstance(s, str) and s and "\x00" not in s]
        return await super().get_many(good)


class GetManyLeaksOnCancel(GoodSessions):
    """get_many marks the store busy across a checkpoint; cancelled there, it stays busy."""

    busy = False

    async def get_many(self, session_ids: list[str]) -> list[Session]:
        if self.busy:
            raise RuntimeError("store busy: a previous get_many never finished")
        self.busy = True
        await anyio.lowlevel.checkpoint()
        got = await super().get_many(session_ids)
        self.busy = False
        return got


class FinalizeKeepsRevision(GoodSessions):
    """finalize does not bump the revision (only data writes do)."""

    async def finalize(self, session_id: str, summary: Any) -> None:
        before = self.revisions.get(session_id, 0)
        await super().finalize(session_id, summary)
        self.revisions[session_id] = before


class NoRevisionCheck(GoodSessions):
    """update_data_if writes whatever revision it is given (last writer wins)."""

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        unused(revision)
        await self.update_data(session_id, snapshot)
        return self.revisions[session_id]


class CheckThenWrite(GoodSessions):
    """update_data_if checks the revision, yields, then writes: the check is not with the write."""

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        if await self.revision(session_id) != revision:
            raise RevisionConflictError("stale")
        await self.update_data(session_id, snapshot)
        return self.revisions[session_id]


class BumpsBeforeWrite(GoodSessions):
    """update_data_if bumps the revision, yields, then writes the data."""

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        validate_session_id(session_id)
        await self.enter()
        if self.revisions.get(session_id, 0) != revision:
            raise RevisionConflictError("stale")
        self.bump(session_id)
        await anyio.lowlevel.checkpoint()
        self.set_data(session_id, snapshot)
        await self.leave()
        return self.revisions[session_id]


class RevisionsPerHandle(GoodSessions):
    """Revisions live in the handle, not the backend: a second handle starts from 0."""

    def __init__(self, records: dict[str, Any] | None = None) -> None:
        super().__init__()
        if records is not None:
            self.records = records


async def reopen_sharing_records(store: Any) -> Any:
    """A second handle onto the same session records (with its own revisions)."""
    return RevisionsPerHandle(store.records)
