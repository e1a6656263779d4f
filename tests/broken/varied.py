"""Broken stores only contract v3's varied dimensions catch: sizes past a threshold,
identity compared loosely, a fence by owner, update_data_if written apart.

Each passes the clauses as they were before that variation.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from agentloop import (
    Lease,
    LeaseLostError,
    RunStep,
    Session,
    StoreClosedError,
    validate_session_id,
)

from ._good import GoodSessions, GoodSteps
from .leases import Fenced, Leased, _Held

CHUNK = 64


class ChunkCommits(GoodSteps):
    """append_many commits each chunk of 64 steps as it goes: a cancellation between
    chunks leaves the first chunks of the batch stored."""

    async def append_many(self, steps: list[RunStep]) -> None:
        batch = list(steps)
        for position, step in enumerate(batch):
            if not isinstance(step, RunStep):
                raise TypeError(f"steps[{position}] must be a RunStep, got {step!r}")
        await self.enter()
        for first in range(0, len(batch), CHUNK):
            for step in batch[first : first + CHUNK]:
                self.steps.setdefault(self.key(step.session_id), []).append(self.stored(step))
            if first + CHUNK < len(batch):
                await anyio.lowlevel.checkpoint()  # the next chunk's round trip
        await self.leave()


class LimitOverflows(GoodSteps):
    """last_n binds n as a signed 64-bit LIMIT: past 2**63 - 1 it raises OverflowError."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        if n > 2**63 - 1:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return super().window(steps, n)


PAGE = 250


class GetManyOnePage(GoodSessions):
    """get_many looks up the first 250 ids only (one page of an IN list): the rest come
    back as never-written sessions."""

    async def get_many(self, session_ids: list[str]) -> list[Session]:
        ids = list(session_ids)
        got = await super().get_many(ids[:PAGE])
        return got + [Session(sid) for sid in ids[PAGE:]]


def _folded(owner: str) -> str:
    return unicodedata.normalize("NFC", owner).strip().casefold()


class OwnersFolded(Leased):
    """Owners compared as a case-insensitive, trimmed, NFC-normalized column does."""

    def grant(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        held = self.leases.get(session_id)
        if held is not None and _folded(held.owner) == _folded(owner):
            owner = held.owner
        return super().grant(session_id, owner, ttl)


class OwnerPrefix(Leased):
    """The holder is matched with LIKE owner || '%': a prefix of the holder's name is it."""

    def grant(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        held = self.leases.get(session_id)
        if held is not None and held.owner.startswith(owner):
            owner = held.owner
        return super().grant(session_id, owner, ttl)


class FenceByOwner(Leased):
    """The fence compares the lease's owner with the holder's, not the tokens: the same
    owner's older lease still writes."""

    def fence(self, lease: Lease) -> _Held:
        held = self.leases.get(lease.session_id)
        if held is None or held.owner != lease.owner:
            raise LeaseLostError(f"lease of {lease.session_id!r} is held by someone else")
        return held


class IfSkipsChecks(GoodSessions):
    """update_data_if stores its text unchecked (update_data checks it)."""

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        validate_session_id(session_id)
        await self.enter()
        current = self.revisions.get(self.key(session_id), 0)
        if current != revision:
            await self.leave()
            return await super().update_data_if(session_id, snapshot, revision)  # raises
        self.set_data(session_id, snapshot)
        await self.leave()
        return self.revisions[self.key(session_id)]


class IfKeepsOrder(GoodSessions):
    """update_data_if writes the data and updated_at, but not the write order the
    listing sorts by."""

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        record = self.records.get(self.key(session_id)) if isinstance(session_id, str) else None
        seq = record.seq if record is not None else None
        got = await super().update_data_if(session_id, snapshot, revision)
        if record is not None and seq is not None:
            record.seq = seq
        return got


class PutCoalesces(GoodSessions):
    """put keeps the old model, prompt or data where the new one is empty
    (COALESCE(NULLIF(new, ''), old))."""

    async def put(self, session: Session) -> None:
        record = self.records.get(self.key(session.id)) if isinstance(session, Session) else None
        if record is not None:
            old = record.session
            session = Session(
                session.id,
                session.model or old.model,
                session.system_prompt or old.system_prompt,
                session.data if session.data is not None else old.data,
            )
        await super().put(session)


class BatchDedupes(GoodSteps):
    """append_many drops a step equal to one earlier in the same batch (a retried reply)."""

    async def append_many(self, steps: list[RunStep]) -> None:
        batch = list(steps)
        if all(isinstance(x, RunStep) for x in batch):
            batch = list(dict.fromkeys(batch))
        await super().append_many(batch)


class AppendManyAfterClose(GoodSteps):
    """append_many, added after aclose was written, never checks the closed flag."""

    async def append_many(self, steps: list[RunStep]) -> None:
        closed, self.closed = self.closed, False
        try:
            await super().append_many(steps)
        finally:
            self.closed = closed


class LeaseCallsAfterClose(Leased):
    """The lease calls, added after aclose was written, never check the closed flag."""

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        self.check(session_id, owner, ttl)
        await anyio.lowlevel.checkpoint()
        return self.grant(session_id, owner, ttl)


class ReopenSortsByTime(GoodSteps):
    """A handle opened onto existing rows loads them ORDER BY created_at, step_index (the
    handle that wrote them keeps insertion order in memory)."""

    sorted_reads = False

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        if self.sorted_reads:
            steps = sorted(steps, key=lambda x: (x.created_at, x.step_index))
        return super().window(steps, n)


async def reopen_sorted(store: ReopenSortsByTime) -> ReopenSortsByTime:
    """A second handle onto ``store``'s rows, reading them as :class:`ReopenSortsByTime` does."""
    other = type(store).__new__(type(store))
    other.__dict__.update(store.__dict__)
    other.closed = False
    other.sorted_reads = True
    return other


class HalfCloses(GoodSessions):
    """aclose closes the writer, then (a checkpoint later) the readers: cancelled in
    between, writes are refused while reads still answer."""

    writes_closed = False

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.writes_closed = True
        await anyio.lowlevel.checkpoint()  # the reader pool's close
        self.closed = True

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        if self.writes_closed:
            await self.enter()
            raise StoreClosedError("the writer is closed")
        await super().update_data(session_id, snapshot)


class ClipsAtOneMiB(GoodSteps):
    """Content is kept to its first 1 MiB of UTF-8 (a byte-sized column or value cap)."""

    def stored(self, step: RunStep) -> RunStep:
        kept = step.content.encode()[: 2**20].decode(errors="ignore")
        return attrs.evolve(step, content=kept)


class AllFirstPage(GoodSteps):
    """all() returns the first page of 1,000 rows of a long session."""

    async def all(self, session_id: str) -> list[RunStep]:
        return (await super().all(session_id))[:1000]


class _NewerWritesFencedApart(Fenced):
    """Fences update_data and append in the write; put, update_data_if and append_many
    check, then send the write in another round trip."""

    async def put(self, session: Session) -> None:
        await self.guard(getattr(session, "id", ""))
        await anyio.sleep(0.01)
        await self.store.put(session)

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        await self.guard(session_id)
        await anyio.sleep(0.01)
        return await self.store.update_data_if(session_id, snapshot, revision)

    async def append_many(self, steps: list[RunStep]) -> None:
        for step in list(steps):
            await self.guard(step.session_id)
        await anyio.sleep(0.01)
        await self.store.append_many(steps)


class FenceApartOnNewerWrites(Leased):
    """The fence and the write are one statement for update_data and append only; the
    newer writes check the lease first and write in a second statement."""

    def fenced(self, lease: Lease) -> Any:
        return _NewerWritesFencedApart(self, lease)
