"""Broken session-lifecycle stores, each keeping one lifecycle promise badly, and
``Lifecycle``, the correct one.

``Lifecycle`` adds paging, labels, prune, ranged reads, expiry, forks and
restores to ``Leased``, so the reference store passes every clause. Its
lifecycle logic is a few overridable steps (``ordered``, ``position``,
``matches``, ``kept``, ``idle``, ``copy_steps``...); each broken store changes
one of them the way a real store gets it wrong.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from agentloop import (
    FinalizeSummary,
    RunStep,
    Session,
    SessionExistsError,
    SessionInfo,
    SessionPage,
    validate_labels,
    validate_n,
    validate_session_id,
)
from agentloop._shared import check_seconds

from ._good import _Record
from .leases import Leased


def _int(value: object, field: str, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{field} must be an int >= {low}, got {value!r:.60}")
    if value < low:
        raise ValueError(f"{field} must be an int >= {low}, got {value!r}")
    return value


class Lifecycle(Leased):
    """A correct store with every capability, the session lifecycle included."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)  # a store built on a given clock passes it on
        self.labels: dict[str, dict[str, str]] = {}
        self.born: dict[str, int] = {}  # first-write order, what order="created" pages by
        self.token = secrets.token_hex(8)  # shared by second handles: the backend's
        self.appended: dict[str, datetime] = {}  # what judges a session with steps only

    async def append(self, step: RunStep) -> None:
        """As ``GoodBoth.append``, stamping the session's latest append."""
        await super().append(step)
        self.appended[step.session_id] = datetime.now(UTC)

    async def append_many(self, steps: list[RunStep]) -> None:
        """As ``GoodBoth.append_many``, stamping each session's latest append."""
        await super().append_many(steps)
        for step in steps:
            self.appended[step.session_id] = datetime.now(UTC)

    # -- the record-keeping every write goes through ----------------------------------------

    def write(self, session_id: str) -> _Record:
        """As ``GoodSessions.write``, remembering the session's first write."""
        record = super().write(session_id)
        self.born.setdefault(session_id, record.seq)
        return record

    def forget(self, session_id: str) -> bool:
        """Drop the session's row, labels and steps (no checkpoint inside)."""
        had_row = self.records.pop(session_id, None) is not None
        self.labels.pop(session_id, None)
        self.born.pop(session_id, None)
        had_steps = self.trace.steps.pop(session_id, None) is not None
        if had_row:
            self.bump(session_id)
        return had_row or had_steps

    async def delete_session(self, session_id: str) -> bool:
        """Forget the session whole: row, labels and steps."""
        validate_session_id(session_id)
        await self.enter()
        existed = self.forget(session_id)
        await self.leave()
        return existed

    def info(self, r: _Record) -> SessionInfo:
        """One listing row, labels included."""
        plain = super().info(r)
        return SessionInfo(
            plain.id,
            plain.status,
            plain.step_count,
            plain.created_at,
            plain.updated_at,
            labels=self.labels.get(r.session.id, {}),
        )

    # -- paging -----------------------------------------------------------------------------

    def position(self, r: _Record, order: str) -> int:
        """Where ``r`` sits in ``order``: the key a cursor carries."""
        return r.seq if order == "updated" else self.born[r.session.id]

    def ordered(self, order: str) -> list[_Record]:
        """Every record in ``order``: newest write first, or oldest first write first."""
        if order == "updated":
            return self.order()
        return sorted(self.records.values(), key=lambda r: self.born[r.session.id])

    def after(self, rows: list[_Record], start: int | None, order: str) -> list[_Record]:
        """The rows past the cursor's position (keyset paging)."""
        if start is None:
            return rows
        if order == "updated":
            return [r for r in rows if self.position(r, order) < start]
        return [r for r in rows if self.position(r, order) > start]

    def matches(self, r: _Record, wanted: dict[str, str]) -> bool:
        """Whether the session carries every wanted pair."""
        have = self.labels.get(r.session.id, {})
        return all(have.get(k) == v for k, v in wanted.items())

    def encode(self, query: str, position: int) -> str:
        """A cursor: this backend's token, what it pages, and where it stopped."""
        raw = json.dumps([self.token, query, position]).encode()
        return base64.urlsafe_b64encode(raw).decode()

    def decode(self, cursor: object, query: str) -> int:
        """The position of a cursor this backend made for ``query``; ``ValueError`` otherwise."""
        if not isinstance(cursor, str):
            raise TypeError(f"cursor must be a str or None, got {cursor!r:.60}")
        try:
            token, made_for, position = json.loads(base64.urlsafe_b64decode(cursor))
        except (ValueError, TypeError):
            token = made_for = position = None
        if token != self.token or made_for != query or not isinstance(position, int):
            raise ValueError(f"cursor must be one page_sessions returned here, got {cursor!r:.60}")
        return position

    async def page_sessions(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        labels: Mapping[str, str] | None = None,
        order: str = "updated",
    ) -> SessionPage:
        """A page of sessions, then a cursor for the rest."""
        validate_n(limit, "limit")
        if order not in ("updated", "created"):
            raise ValueError(f"order must be 'updated' or 'created', got {order!r:.60}")
        wanted = validate_labels(labels) if labels is not None else {}
        query = f"{order}:{sorted(wanted.items())}"
        start = self.decode(cursor, query) if cursor is not None else None
        await self.enter()
        rows = [r for r in self.after(self.ordered(order), start, order) if self.matches(r, wanted)]
        page = rows[:limit]
        await self.leave()
        more = len(rows) > limit
        following = self.encode(query, self.position(page[-1], order)) if more else None
        return SessionPage(tuple(self.info(r) for r in page), following)

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """The session's info and labels, or None."""
        validate_session_id(session_id)
        await self.enter()
        record = self.records.get(session_id)
        await self.leave()
        return self.info(record) if record is not None else None

    # -- labels -----------------------------------------------------------------------------

    def checked_labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The labels as they will be kept (``validate_labels``)."""
        return validate_labels(labels)

    async def set_labels(self, session_id: str, labels: Mapping[str, str]) -> None:
        """Replace the labels: a session write."""
        validate_session_id(session_id)
        checked = self.checked_labels(labels)
        await self.enter()
        self.write(session_id)
        self.labels[session_id] = checked
        await self.leave()

    # -- steps: prune and ranges ------------------------------------------------------------

    def kept(self, rows: list[RunStep], keep_last: int) -> list[RunStep]:
        """What a prune keeps of ``rows``: the newest ``keep_last``."""
        return rows[-keep_last:]

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        """Keep the newest ``keep_last`` steps; how many went."""
        validate_session_id(session_id)
        _int(keep_last, "keep_last", 1)
        await self.enter()
        rows = self.trace.steps.get(session_id, [])
        kept = self.kept(rows, keep_last)
        removed = len(rows) - len(kept)
        if rows:
            self.trace.steps[session_id] = kept
        await self.leave()
        return removed

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        """``all(session_id)[after:after + limit]``."""
        validate_session_id(session_id)
        _int(after, "after", 0)
        _int(limit, "limit", 1)
        await self.enter()
        rows = list(self.trace.steps.get(session_id, [])[after : after + limit])
        await self.leave()
        return rows

    # -- expiry -----------------------------------------------------------------------------

    def idle(self, r: _Record, cutoff: datetime) -> bool:
        """Whether the session was last written before ``cutoff``."""
        return r.updated < cutoff

    def lease_now(self) -> datetime:
        """The time leases are judged by: the store's clock when it has one."""
        clock = getattr(self, "clock", None)
        return clock() if callable(clock) else datetime.now(UTC)

    def may_expire(self, session_id: str, now: datetime) -> bool:
        """No live lease; a lapsed one is taken over (a larger token) first."""
        now = self.lease_now()
        held = self.leases.get(session_id)
        if held is None or held.released:
            return True
        if self.live(held, now):
            return False
        held.token += 1
        held.released = True
        return True

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        """Delete up to ``limit`` idle, unleased sessions; their ids."""
        seconds = check_seconds(idle_for, "idle_for")
        validate_n(limit, "limit")
        await self.enter()
        now = datetime.now(UTC)
        cutoff = now - timedelta(seconds=seconds)
        gone: list[str] = []
        for r in reversed(self.order()):
            if len(gone) == limit:
                break
            sid = r.session.id
            if self.idle(r, cutoff) and self.may_expire(sid, now):
                self.forget(sid)
                gone.append(sid)
        for sid in self.orphans(cutoff):
            if len(gone) < limit and self.may_expire(sid, now):
                self.forget(sid)
                gone.append(sid)
        await self.leave()
        return gone

    def orphans(self, cutoff: datetime) -> list[str]:
        """Sessions with steps but no row whose newest step is older than ``cutoff``."""
        return [
            sid
            for sid, rows in self.trace.steps.items()
            if rows and sid not in self.records and self.appended[sid] < cutoff
        ]

    # -- forks and restores -----------------------------------------------------------------

    def present(self, session_id: str) -> bool:
        """A session row or steps."""
        return session_id in self.records or bool(self.trace.steps.get(session_id))

    def copy_steps(self, rows: list[RunStep], new_id: str, keep: int | None) -> list[RunStep]:
        """Copies of the first ``keep`` rows (all when None) for ``new_id``."""
        return [_moved(row, new_id) for row in rows[:keep]]

    async def fork_session(
        self, source_id: str, new_id: str, *, keep_first: int | None = None
    ) -> None:
        """``new_id`` as a copy of the source and its first steps, in one step."""
        validate_session_id(source_id, "source_id")
        validate_session_id(new_id, "new_id")
        keep = None if keep_first is None else _int(keep_first, "keep_first", 0)
        if new_id == source_id:
            raise ValueError(f"new_id must differ from source_id, got {new_id!r} for both")
        await self.enter()
        try:
            self.fork_held(source_id, new_id, keep)
        finally:
            await self.leave()

    def fork_held(self, source_id: str, new_id: str, keep: int | None) -> None:
        """The fork itself (no checkpoint inside)."""
        if not self.present(source_id):
            raise KeyError(f"session {source_id!r} does not exist")
        if self.present(new_id):
            raise SessionExistsError(f"session {new_id!r} exists; nothing was written")
        copies = self.copy_steps(self.trace.steps.get(source_id, []), new_id, keep)
        source = self.records.get(source_id)
        record = self.write(new_id)
        if source is not None:
            old = source.session
            record.session = Session(new_id, old.model, old.system_prompt, old.data)
            self.labels[new_id] = dict(self.labels.get(source_id, {}))
        if copies:
            self.trace.steps[new_id] = copies

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """Create the session as an export recorded it."""
        if not isinstance(session, Session) or not isinstance(info, SessionInfo):
            raise TypeError("restore_session needs a Session and a SessionInfo")
        if info.id != session.id:
            raise ValueError(f"info is of {info.id!r}, not {session.id!r}")
        await self.enter()
        try:
            if self.present(session.id):
                raise SessionExistsError(f"session {session.id!r} exists; nothing was written")
            self.restore_held(session, info, final)
        finally:
            await self.leave()

    def restore_held(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """Write the restored session (no checkpoint inside)."""
        record = self.write(session.id)
        record.session, record.final, record.total = session, final, info.step_count
        record.created, record.updated = info.created_at, info.updated_at
        self.labels[session.id] = dict(info.labels)


def _moved(row: RunStep, new_id: str) -> RunStep:
    return RunStep(
        session_id=new_id,
        step_index=row.step_index,
        step_type=row.step_type,
        content=row.content,
        tool_args=row.tool_args,
        duration_ms=row.duration_ms,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        created_at=row.created_at,
    )


# -- the broken ones ----------------------------------------------------------------------


class OffsetPaging(Lifecycle):
    """page_sessions' cursor is an OFFSET into the current order: writes shift the pages."""

    def position(self, r: _Record, order: str) -> int:
        return self.ordered(order).index(r) + 1

    def after(self, rows: list[_Record], start: int | None, order: str) -> list[_Record]:
        return rows if start is None else rows[start:]


class CreatedByUpdate(Lifecycle):
    """order="created" pages by the latest write, oldest first (the wrong column)."""

    def position(self, r: _Record, order: str) -> int:
        return r.seq

    def ordered(self, order: str) -> list[_Record]:
        rows = self.order()
        return rows if order == "updated" else rows[::-1]


class CursorFromAnywhere(Lifecycle):
    """A cursor is the bare position: any store's cursor, for any filter, is accepted."""

    def encode(self, query: str, position: int) -> str:
        return str(position)

    def decode(self, cursor: object, query: str) -> int:
        return int(str(cursor))


class LabelsUnchecked(Lifecycle):
    """set_labels keeps whatever it is given: no limits, no validation."""

    def checked_labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        return dict(labels)


class LabelsOutOfBand(Lifecycle):
    """set_labels writes a side table: no revision bump, no move to the front."""

    async def set_labels(self, session_id: str, labels: Mapping[str, str]) -> None:
        validate_session_id(session_id)
        checked = validate_labels(labels)
        await self.enter()
        if session_id not in self.records:
            self.write(session_id)
        self.labels[session_id] = checked
        await self.leave()


class PutClearsLabels(Lifecycle):
    """put rewrites the whole row, labels included."""

    async def put(self, session: Session) -> None:
        await super().put(session)
        if isinstance(session, Session):
            self.labels.pop(session.id, None)


class FilterAnyPair(Lifecycle):
    """A label filter matches sessions carrying any one of the pairs, not all of them."""

    def matches(self, r: _Record, wanted: dict[str, str]) -> bool:
        have = self.labels.get(r.session.id, {})
        return not wanted or any(have.get(k) == v for k, v in wanted.items())


class PruneWrongEnd(Lifecycle):
    """prune_steps keeps the oldest steps (ORDER BY id ASC LIMIT keep_last)."""

    def kept(self, rows: list[RunStep], keep_last: int) -> list[RunStep]:
        return rows[:keep_last]


class PruneRenumbers(Lifecycle):
    """prune_steps renumbers what it keeps from 0: the loop's next index goes back."""

    def kept(self, rows: list[RunStep], keep_last: int) -> list[RunStep]:
        return [
            RunStep(
                session_id=r.session_id,
                step_index=k,
                step_type=r.step_type,
                content=r.content,
                tool_args=r.tool_args,
                duration_ms=r.duration_ms,
                prompt_tokens=r.prompt_tokens,
                completion_tokens=r.completion_tokens,
                created_at=r.created_at,
            )
            for k, r in enumerate(rows[-keep_last:])
        ]


class PruneCountsShort(Lifecycle):
    """prune_steps reports count - keep_last as removed: negative for a short session (the
    model-based programs prune sessions of every length)."""

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        held = len(self.trace.steps.get(session_id, []))
        await super().prune_steps(session_id, keep_last=keep_last)
        return held - keep_last


class PruneZeroClears(Lifecycle):
    """prune_steps(keep_last=0) is taken at its word: every step goes."""

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        if keep_last == 0:
            await self.enter()
            removed = len(self.trace.steps.pop(session_id, []))
            await self.leave()
            return removed
        return await super().prune_steps(session_id, keep_last=keep_last)


class PruneEveryone(Lifecycle):
    """prune_steps applies keep_last to every session (a DELETE missing its WHERE)."""

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        removed = 0
        for sid in list(self.trace.steps):
            removed += await super().prune_steps(sid, keep_last=keep_last)
        return removed


class PruneOneByOne(Lifecycle):
    """prune_steps deletes the oldest steps one round trip at a time (no transaction)."""

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        validate_session_id(session_id)
        _int(keep_last, "keep_last", 1)
        await self.enter()
        rows = self.trace.steps.get(session_id, [])
        removed = 0
        while len(rows) > keep_last:
            del rows[0]
            removed += 1
            await anyio.lowlevel.checkpoint()
        await self.leave()
        return removed


class StepsAfterOffByOne(Lifecycle):
    """steps_after skips one step too many (OFFSET after + 1)."""

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        rows = await super().steps_after(session_id, after + 1 if after else 0, limit)
        return rows


class ExpireByCreation(Lifecycle):
    """expire_sessions judges idleness by created_at, not the latest write."""

    def idle(self, r: _Record, cutoff: datetime) -> bool:
        return r.created < cutoff


class ExpireRowsOnly(Lifecycle):
    """expire_sessions walks the session rows only: steps without a row stay forever."""

    def orphans(self, cutoff: datetime) -> list[str]:
        return []


class ExpireLeased(Lifecycle):
    """expire_sessions deletes idle sessions whatever their lease."""

    def may_expire(self, session_id: str, now: datetime) -> bool:
        return True


class ExpireTwice(Lifecycle):
    """expire_sessions selects idle sessions, then deletes them in a second round trip and
    reports all it selected, also those a concurrent call deleted meanwhile."""

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        seconds = check_seconds(idle_for, "idle_for")
        validate_n(limit, "limit")
        await self.enter()
        now = datetime.now(UTC)
        cutoff = now - timedelta(seconds=seconds)
        chosen = [r.session.id for r in reversed(self.order()) if self.idle(r, cutoff)][:limit]
        await self.leave()
        await anyio.lowlevel.checkpoint()  # the DELETE's own round trip
        for sid in chosen:
            self.forget(sid)
        return chosen


class ForkKeepsSummary(Lifecycle):
    """fork_session copies the row whole, run summary and total included."""

    def fork_held(self, source_id: str, new_id: str, keep: int | None) -> None:
        super().fork_held(source_id, new_id, keep)
        source = self.records.get(source_id)
        if source is not None:
            self.records[new_id].final = source.final
            self.records[new_id].total = source.total


class ForkSharesSteps(Lifecycle):
    """fork_session shares the source's step list (a shallow copy): appends show in both."""

    def copy_steps(self, rows: list[RunStep], new_id: str, keep: int | None) -> list[RunStep]:
        return rows


class ForkOverwrites(Lifecycle):
    """fork_session into an existing id replaces it (INSERT OR REPLACE)."""

    def fork_held(self, source_id: str, new_id: str, keep: int | None) -> None:
        self.forget(new_id)
        super().fork_held(source_id, new_id, keep)


class ForkStepByStep(Lifecycle):
    """fork_session writes the row, then copies steps one round trip at a time."""

    async def fork_session(
        self, source_id: str, new_id: str, *, keep_first: int | None = None
    ) -> None:
        await super().fork_session(source_id, new_id, keep_first=0)
        for row in (await self.all(source_id))[:keep_first]:
            await anyio.lowlevel.checkpoint()
            await self.append(_moved(row, new_id))


class RestoreFreshTimes(Lifecycle):
    """restore_session writes the session as new: times and run total start afresh."""

    def restore_held(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        record = self.write(session.id)
        record.session, record.final = session, final
        self.labels[session.id] = dict(info.labels)


class RestoreOverwrites(Lifecycle):
    """restore_session writes first and checks for an existing session after."""

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        await self.enter()
        existed = self.present(session.id)
        self.restore_held(session, info, final)
        await self.leave()
        if existed:
            raise SessionExistsError(f"session {session.id!r} exists")
