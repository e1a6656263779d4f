"""The in-memory ``SessionStore``: settings, working memory and run summaries per session."""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import attrs

from agentloop import (
    FinalizeSummary,
    Lease,
    Session,
    SessionInfo,
    validate_json,
    validate_n,
    validate_session_id,
)
from agentloop._shared import call_ends, call_starts, check_session_ids, preview, trusted_builder
from agentloopmem._fenced import FencedSessionStore, FencedStore
from agentloopmem._revisions import RevisionMethods
from agentloopmem._steps import StepStore

_trusted_session = trusted_builder(Session)  # for data already checked outside the lock


@attrs.define
class _Record:
    """One session's state; only ever touched under the store's lock."""

    session: Session
    final: FinalizeSummary | None
    created_at: datetime
    updated_at: datetime
    step_total: int
    write_seq: int


_by_write_seq = operator.attrgetter("write_seq")


def _system_clock() -> datetime:
    return datetime.now(UTC)


class SessionStore(RevisionMethods):
    """Sessions kept in a dict; safe from trio and asyncio tasks and OS threads.

    Implements ``SessionStore`` and every optional capability: ``put``,
    ``final``, ``list_sessions``, ``delete_session``, ``aclose``, leases
    (``SupportsLease``), ``get_many`` and revisions (``SupportsRevisions``).
    ``clock`` (a zero-argument callable returning an aware ``datetime``) stamps
    ``created_at``/``updated_at`` for ``list_sessions`` and judges lease expiry;
    it defaults to UTC wall-clock time. ``list_sessions`` orders by write
    recency, so a clock that ties or steps backwards cannot reorder it.

    ``steps`` (kept as :attr:`steps`): an in-memory ``StepStore`` whose appends
    ``fenced(lease)`` views also fence; without it they are not (:meth:`fenced`).

    **Cancellation**, under trio and asyncio alike: a cancelled call raises before
    touching the store; a call that returns has fully happened and was a checkpoint.
    """

    def __init__(
        self, clock: Callable[[], datetime] | None = None, *, steps: StepStore | None = None
    ) -> None:
        super().__init__()
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning a datetime, got {preview(clock)}")
        if steps is not None and not isinstance(steps, StepStore):
            raise TypeError(f"steps must be an agentloopmem.StepStore, got {preview(steps)}")
        self._steps = steps
        self._clock = clock if clock is not None else _system_clock
        self._records: dict[str, _Record] = {}
        self._write_seq = itertools.count()

    @property
    def steps(self) -> StepStore | None:
        """The ``steps=`` store, or ``None``: the step store whose appends fenced views cover."""
        return self._steps

    def _clear(self) -> None:
        self._records.clear()
        self._leases.clear()
        self._revisions.clear()

    def _now(self) -> datetime:
        """The clock's time in UTC; called outside the lock, since the clock is user code."""
        if self._clock is _system_clock:
            return datetime.now(UTC)  # _system_clock's body: a call less on every write
        now = self._clock()
        if not isinstance(now, datetime) or now.utcoffset() is None:
            raise ValueError(f"clock must return a timezone-aware datetime, got {preview(now)}")
        return now.astimezone(UTC)

    def _write(
        self, session_id: str, now: datetime, fence: Lease | None, expected: int | None = None
    ) -> _Record:
        """The record to write into, created on first write, its revision bumped; call
        with the lock held.

        Raises ``StoreClosedError`` after ``aclose``; then ``LeaseLostError``,
        changing nothing, if ``fence`` covers the session and its lease was acquired
        again since; then ``RevisionConflictError`` if ``expected`` is given and is
        not the session's revision.
        """
        if self._closed:
            self._check_open()
        if fence is not None and fence.session_id == session_id:
            self._leases.check_fence(fence)
        if expected is not None:
            self._revisions.check(session_id, expected)
        self._revisions.bump(session_id)
        seq = next(self._write_seq)
        record = self._records.get(session_id)
        if record is None:
            record = _Record(_trusted_session(session_id), None, now, now, 0, seq)
            self._records[session_id] = record
        else:
            record.updated_at = now
            record.write_seq = seq
        return record

    async def get(self, session_id: str) -> Session:
        """The stored session, or ``Session(id=session_id)`` when unknown; creates nothing.

        Raises:
            TypeError, ValueError: the id is not a non-empty str without NUL.
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        await call_starts()
        with self._lock:
            self._check_open()
            record = self._records.get(session_id)
        await call_ends()
        return record.session if record is not None else _trusted_session(session_id)

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """One session per id, in the order asked (duplicates too), read under one lock
        hold; an unknown id gives ``Session(id)``. Creates nothing.

        Raises:
            TypeError, ValueError: ``session_ids`` is not a sequence of session
                ids (the message names the position of the first bad one).
            StoreClosedError: the store was closed.
        """
        ids = check_session_ids(session_ids)
        await call_starts()
        with self._lock:
            self._check_open()
            records = self._records
            found = [records.get(session_id) for session_id in ids]
            sessions = [record.session if record is not None else None for record in found]
        await call_ends()
        return [
            session if session is not None else _trusted_session(session_id)
            for session, session_id in zip(sessions, ids, strict=True)
        ]

    async def exists(self, session_id: str) -> bool:
        """Whether a write (``put``, ``update_data``, ``finalize``) brought the session into being.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        await call_starts()
        with self._lock:
            self._check_open()
            found = session_id in self._records
        await call_ends()
        return found

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """Replace the session's data with ``snapshot`` (JSON text, or ``None`` to clear it).

        Raises:
            TypeError: ``snapshot`` is neither ``str`` nor ``None``.
            ValueError: ``snapshot`` is not JSON text; nothing is written.
            StoreClosedError: the store was closed.
        """
        await self._update_data(session_id, snapshot, None)

    async def _update_data(
        self,
        session_id: str,
        snapshot: str | None,
        fence: Lease | None,
        expected: int | None = None,
    ) -> int:
        """Write the data (if the session is at revision ``expected``, when given); the
        new revision."""
        validate_session_id(session_id)
        if snapshot is not None:
            if not isinstance(snapshot, str):
                raise TypeError(f"snapshot must be JSON text or None, got {preview(snapshot)}")
            # Parsed before the lock, so a big snapshot never stalls other threads.
            validate_json(snapshot, "data")
        await call_starts()
        now = self._now()
        with self._lock:
            record = self._write(session_id, now, fence, expected)
            session = record.session
            record.session = _trusted_session(
                session.id, session.model, session.system_prompt, snapshot
            )
            revision = self._revisions.current(session_id)
        await call_ends()
        return revision

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """Record ``summary`` as the session's latest run; data is kept.

        Raises:
            TypeError: ``summary`` is not a ``FinalizeSummary``.
            StoreClosedError: the store was closed.
        """
        await self._finalize(session_id, summary, None)

    async def _finalize(
        self, session_id: str, summary: FinalizeSummary, fence: Lease | None
    ) -> None:
        validate_session_id(session_id)
        if not isinstance(summary, FinalizeSummary):
            raise TypeError(f"summary must be a FinalizeSummary, got {preview(summary)}")
        await call_starts()
        now = self._now()
        with self._lock:
            record = self._write(session_id, now, fence)
            record.final = summary
            record.step_total += summary.step_count
        await call_ends()

    async def put(self, session: Session) -> None:
        """Store ``session`` whole (model, system prompt, data); its summaries are kept.

        Raises:
            TypeError: ``session`` is not a ``Session``.
            StoreClosedError: the store was closed.
        """
        await self._put(session, None)

    async def _put(self, session: Session, fence: Lease | None) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"session must be a Session, got {preview(session)}")
        await call_starts()
        now = self._now()
        with self._lock:
            self._write(session.id, now, fence).session = session
        await call_ends()

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """The latest ``finalize`` summary, or ``None`` if the session never finalized.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        await call_starts()
        with self._lock:
            self._check_open()
            record = self._records.get(session_id)
        await call_ends()
        return record.final if record is not None else None

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """At most ``limit`` sessions, the most recently written first.

        Raises:
            TypeError, ValueError: ``limit`` is not an int >= 1.
            StoreClosedError: the store was closed.
        """
        validate_n(limit, "limit")
        await call_starts()
        with self._lock:
            self._check_open()
            newest = heapq.nlargest(limit, self._records.values(), key=_by_write_seq)
            rows = [
                (r.session.id, r.final, r.step_total, r.created_at, r.updated_at) for r in newest
            ]
        await call_ends()
        return [
            SessionInfo(
                id=sid,
                status=final.status if final is not None else None,
                step_count=total,
                created_at=created,
                updated_at=updated,
            )
            for sid, final, total, created, updated in rows
        ]

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's data and summaries; ``True`` if it existed.

        Its lease and token stay: a later acquire still gets a larger token.
        Its revision grows (when it existed) and is never reset.

        Raises:
            StoreClosedError: the store was closed.
        """
        return await self._delete_session(session_id, None)

    async def _delete_session(self, session_id: str, fence: Lease | None) -> bool:
        validate_session_id(session_id)
        await call_starts()
        with self._lock:
            self._check_open()
            if fence is not None and fence.session_id == session_id:
                self._leases.check_fence(fence)
            existed = self._records.pop(session_id, None) is not None
            if existed:  # a stale update_data_if must not bring it back
                self._revisions.bump(session_id)
        await call_ends()
        return existed

    def fenced(self, lease: Lease) -> FencedSessionStore:
        """A view of this store whose writes to ``lease.session_id`` are fenced by ``lease``.

        ``put``, ``update_data``, ``finalize`` and ``delete_session`` through the
        view check, under the same lock as the write, that the session's lease
        was not acquired again since ``lease`` was granted, else raise
        ``LeaseLostError`` and change nothing. An expired or released lease
        that nobody acquired since still writes: no other writer exists.
        Reads, and writes to other sessions, pass straight through.

        With ``steps`` given at construction the view is a ``FencedStore``: it is
        also that ``StepStore`` (``append``, ``last_n``, ``all``), and appends to
        the leased session are fenced the same way. Without it, a holder that
        lost its lease can still append steps to its step store unchecked;
        only its session writes are refused.

        Raises:
            TypeError, ValueError: ``lease`` is not a ``Lease`` this store granted.
            StoreClosedError: the store was closed.
        """
        if not isinstance(lease, Lease):
            raise TypeError(f"lease must be a Lease, got {preview(lease)}")
        with self._lock:
            self._check_open()
            self._leases.check_granted(lease)
        if self._steps is None:
            return FencedSessionStore(self, lease)
        return FencedStore(self, self._steps, lease)
