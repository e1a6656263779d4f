"""Broken session stores: each keeps one promise badly."""

from __future__ import annotations

import contextlib
import json
import re
import unicodedata
from typing import Any, ClassVar

import anyio

from agentloop import FinalizeSummary, Session, SessionInfo, StoreError

from ._good import GoodBoth, GoodSessions, _Record


class GetCreates(GoodSessions):
    """get of an unknown id inserts it (an upsert on read)."""

    async def get(self, session_id: str) -> Session:
        await self.enter()
        record = self.write(session_id)
        await self.leave()
        return record.session


class GetRaises(GoodSessions):
    """get of an unknown id raises KeyError."""

    async def get(self, session_id: str) -> Session:
        if session_id not in self.records:
            raise KeyError(session_id)
        return await super().get(session_id)


class FinalizeDoesNotCreate(GoodSessions):
    """finalize keeps summaries apart; exists only looks at data rows."""

    def __init__(self) -> None:
        super().__init__()
        self.summaries: dict[str, FinalizeSummary] = {}

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        await self.enter()
        self.summaries[session_id] = summary
        await self.leave()

    async def final(self, session_id: str) -> FinalizeSummary | None:
        await self.enter()
        await self.leave()
        return self.summaries.get(session_id)


class FirstDataWins(GoodSessions):
    """update_data inserts or ignores: only the first snapshot is kept."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        record = self.records.get(session_id)
        if record is not None and record.session.data is not None:
            await self.enter()
            await self.leave()
            return
        await super().update_data(session_id, snapshot)


class NoneIgnored(GoodSessions):
    """update_data(id, None) keeps the old snapshot (COALESCE)."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        record = self.records.get(session_id)
        if snapshot is None and record is not None:
            snapshot = record.session.data
        await super().update_data(session_id, snapshot)


class NullBecomesNone(GoodSessions):
    """Stores the JSON document 'null' as no data at all."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        await super().update_data(session_id, None if snapshot == "null" else snapshot)


class TruncatesData(GoodSessions):
    """Keeps at most 65,535 characters of data; invalid JSON is stored as is."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        await super().update_data(session_id, snapshot)
        record = self.records[session_id]
        if record.session.data is not None and len(record.session.data) > 65535:
            record.session = Session(session_id, data='{"truncated": true}')


class AcceptsNonJson(GoodSessions):
    """Never validates snapshots (bypasses Session's validator too)."""

    async def update_data(self, session_id: str, snapshot: Any) -> None:
        await self.enter()
        record = self.write(session_id)
        object.__setattr__(record.session, "data", snapshot)
        await self.leave()


class FinalizeOnce(GoodSessions):
    """A unique summary row per session: the second finalize fails."""

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        record = self.records.get(session_id)
        if record is not None and record.final is not None:
            raise StoreError(f"duplicate key: summary for {session_id!r}")
        await super().finalize(session_id, summary)


class FinalizeResetsData(GoodSessions):
    """finalize rewrites the whole session row, data included."""

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        await super().finalize(session_id, summary)
        record = self.records[session_id]
        record.session = Session(session_id, record.session.model, record.session.system_prompt)


class LikeIds(GoodSessions):
    """Looks sessions up with LIKE semantics: % and _ are wildcards; first match wins."""

    async def get(self, session_id: str) -> Session:
        pattern = re.escape(session_id).replace("%", ".*").replace("_", ".")
        for sid, record in self.records.items():
            if re.fullmatch(pattern, sid):
                await self.enter()
                await self.leave()
                return record.session
        return await super().get(session_id)


class CaseFolds(GoodSessions):
    """Case-folds ids (a NOCASE collation)."""

    def key(self, session_id: str) -> str:
        return session_id.casefold()


class TrimsIds(GoodSessions):
    """Trims and NFC-normalizes ids."""

    def key(self, session_id: str) -> str:
        return unicodedata.normalize("NFC", session_id.strip())


class TruncatedKeys(GoodSessions):
    """Keys sessions by the first 8 characters of the id (a CHAR(8) column)."""

    def key(self, session_id: str) -> str:
        return session_id[:8]


class SharedState(GoodSessions):
    """Keeps sessions in a class attribute: every instance sees the same store."""

    shared: ClassVar[dict[str, _Record]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.records = self.shared


class TornWrites(GoodSessions):
    """Applies a snapshot one key at a time, yielding in between: concurrent writes merge."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        import json

        await self.enter()
        record = self.write(session_id)
        if snapshot is None or not snapshot.startswith("{"):
            await super().update_data(session_id, snapshot)
            return
        merged: dict[str, Any] = {}
        for key, value in json.loads(snapshot).items():
            current = record.session.data
            merged = json.loads(current) if current and current.startswith("{") else {}
            merged[key] = value
            record.session = Session(session_id, data=json.dumps(merged))
            await anyio.lowlevel.checkpoint()


class CrossedWrites(GoodSessions):
    """Stages a write in one slot shared by all sessions, then commits whatever is staged."""

    staged: tuple[str, str | None] | None = None

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        await self.enter()
        self.staged = (session_id, snapshot)
        await anyio.lowlevel.checkpoint()
        assert self.staged is not None
        await super().update_data(*self.staged)


class CheckThenInsert(GoodSessions):
    """finalize checks whether the session exists, yields, then inserts a fresh row."""

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        await self.enter()
        known = session_id in self.records
        await anyio.lowlevel.checkpoint()
        if not known:
            self.records[session_id] = _Record(Session(session_id), next(self.seq))
        await super().finalize(session_id, summary)


class PartialOnCancel(GoodSessions):
    """update_data clears the old snapshot, yields, then writes the new one."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        await super().update_data(session_id, None)
        await anyio.lowlevel.checkpoint()
        await super().update_data(session_id, snapshot)


class LeaksLockOnCancel(GoodSessions):
    """Takes a lock around get and does not release it when cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = anyio.Lock()

    async def get(self, session_id: str) -> Session:
        await self.lock.acquire()
        got = await super().get(session_id)
        await anyio.lowlevel.checkpoint()
        self.lock.release()
        return got

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        async with self.lock:
            await super().update_data(session_id, snapshot)


class IgnoresClose(GoodSessions):
    """aclose does nothing: the store keeps answering."""

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()


class PutDropsPrompt(GoodSessions):
    """put forgets the system prompt."""

    async def put(self, session: Session) -> None:
        await super().put(Session(session.id, session.model, "", session.data))


class UpdateRewritesRow(GoodSessions):
    """update_data replaces the whole row: model and system prompt are lost."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        await super().update_data(session_id, snapshot)
        self.records[session_id].session = Session(session_id, data=snapshot)


class FinalKeepsFirst(GoodSessions):
    """final returns the first summary ever recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[str, FinalizeSummary] = {}

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        self.first.setdefault(session_id, summary)
        await super().finalize(session_id, summary)

    async def final(self, session_id: str) -> FinalizeSummary | None:
        await super().final(session_id)
        return self.first.get(session_id)


class ListsByClock(GoodSessions):
    """Orders list_sessions by a coarse updated_at clock (whole minutes) that ties, then by id."""

    def order(self) -> list[_Record]:
        return sorted(
            self.records.values(),
            key=lambda r: (r.updated.replace(second=0, microsecond=0), r.session.id),
            reverse=True,
        )


class ListIgnoresLimit(GoodSessions):
    """list_sessions returns every session and accepts any limit."""

    async def list_sessions(self, *, limit: Any = 100) -> list[SessionInfo]:
        return await super().list_sessions(limit=10**6)


class ListLatestCount(GoodSessions):
    """SessionInfo.step_count is the latest run's count, not the total."""

    def info(self, r: _Record) -> SessionInfo:
        info = super().info(r)
        count = r.final.step_count if r.final is not None else 0
        return SessionInfo(info.id, info.status, count, info.created_at, info.updated_at)


class DeleteKeepsSummary(GoodSessions):
    """delete_session drops the data but keeps the latest summary."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[str, FinalizeSummary] = {}

    async def delete_session(self, session_id: str) -> bool:
        record = self.records.get(session_id)
        if record is not None and record.final is not None:
            self.kept[session_id] = record.final
        return await super().delete_session(session_id)

    async def final(self, session_id: str) -> FinalizeSummary | None:
        got = await super().final(session_id)
        return got if got is not None else self.kept.get(session_id)


class PutKeepsRecency(GoodSessions):
    """put does not count as a write for list_sessions' recency order."""

    async def put(self, session: Session) -> None:
        record = self.records.get(session.id)
        seq = record.seq if record is not None else None
        await super().put(session)
        if seq is not None:
            self.records[session.id].seq = seq


class DeleteLeavesSteps(GoodBoth):
    """One object for both protocols whose delete_session forgets the session but not its steps."""

    async def delete_session(self, session_id: str) -> bool:
        self.trace.closed = self.closed
        return await GoodSessions.delete_session(self, session_id)


class FinalizeTrustsInput(GoodSessions):
    """finalize stores whatever it is given as the summary, under whatever id."""

    async def finalize(self, session_id: str, summary: Any) -> None:
        await self.enter()
        record = self.records.setdefault(session_id, _Record(Session("placeholder"), 0))
        record.final = summary
        await self.leave()


class PartialDelete(GoodSessions):
    """delete_session clears the data, yields, then drops the rest."""

    async def delete_session(self, session_id: str) -> bool:
        record = self.records.get(session_id)
        if record is not None:
            await self.enter()
            record.session = Session(session_id)
            await anyio.lowlevel.checkpoint()
        return await super().delete_session(session_id)


class ExistsMeansData(GoodSessions):
    """exists checks for a data snapshot, so a session written with None data does not exist."""

    async def exists(self, session_id: str) -> bool:
        record = self.records.get(session_id)
        await self.enter()
        await self.leave()
        return record is not None and record.session.data is not None


class ClipsBytesCarried(GoodSessions):
    """Keeps data_bytes_carried in an int32 column, clipping larger values."""

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        import attrs

        clipped = (
            min(summary.data_bytes_carried, 2**31 - 1)
            if isinstance(summary, FinalizeSummary)
            else 0
        )
        await super().finalize(session_id, attrs.evolve(summary, data_bytes_carried=clipped))


class SummaryByPrefix(GoodSessions):
    """final finds a summary by id prefix (LIKE 'id%'), so 'ab' sees the summary of 'a'."""

    async def final(self, session_id: str) -> FinalizeSummary | None:
        got = await super().final(session_id)
        if got is None:
            for sid, record in self.records.items():
                if session_id.startswith(sid) and record.final is not None:
                    return record.final
        return got


class CacheAsideSessions(GoodSessions):
    """A get cache dropped before each write's round trip: a get in between re-fills it stale."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[str, Session] = {}

    async def get(self, session_id: str) -> Session:
        cached = self.cache.get(session_id)
        if cached is not None:
            await anyio.lowlevel.checkpoint()
            return cached
        got = await super().get(session_id)
        self.cache[session_id] = got
        return got

    async def invalidate(self, session_id: str) -> None:
        """Drop the cached row, then pay the write's round trip."""
        self.cache.pop(session_id, None)
        await anyio.lowlevel.checkpoint()

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        await self.invalidate(session_id)
        await super().update_data(session_id, snapshot)

    async def put(self, session: Session) -> None:
        await self.invalidate(session.id)
        await super().put(session)

    async def delete_session(self, session_id: str) -> bool:
        await self.invalidate(session_id)
        return await super().delete_session(session_id)


class FinalizeStaleRow(GoodSessions):
    """finalize on an existing session loads the row, awaits a round trip, then saves it whole."""

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        record = self.records.get(session_id)
        if record is None:
            await super().finalize(session_id, summary)
            return
        loaded = record.session
        await anyio.sleep(0.002)
        await super().finalize(session_id, summary)
        record.session = loaded


class DropsNullData(GoodSessions):
    """Drops top-level keys whose value is null from the data snapshot (exclude_none)."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        if isinstance(snapshot, str):
            with contextlib.suppress(ValueError):  # left for the store's check, which refuses it
                value = json.loads(snapshot)
                if isinstance(value, dict):
                    snapshot = json.dumps({k: v for k, v in value.items() if v is not None})
        await super().update_data(session_id, snapshot)


class TruncatesPrompt(GoodSessions):
    """put keeps 64 KiB of the system prompt and 64 characters of the model name."""

    async def put(self, session: Session) -> None:
        if isinstance(session, Session):
            session = Session(
                session.id, session.model[:64], session.system_prompt[:65535], session.data
            )
        await super().put(session)


class CreatedAtResets(GoodSessions):
    """created_at is reset to the time of every write."""

    def info(self, r: _Record) -> SessionInfo:
        got = super().info(r)
        return SessionInfo(got.id, got.status, got.step_count, got.updated_at, got.updated_at)


class UpdatedAtFrozen(GoodSessions):
    """updated_at stays at the creation time: it never moves."""

    def info(self, r: _Record) -> SessionInfo:
        got = super().info(r)
        return SessionInfo(got.id, got.status, got.step_count, got.created_at, got.created_at)


class NfcData(GoodSessions):
    """NFC-normalizes the data snapshot's text before keeping it."""

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        if isinstance(snapshot, str):
            snapshot = unicodedata.normalize("NFC", snapshot)
        await super().update_data(session_id, snapshot)
