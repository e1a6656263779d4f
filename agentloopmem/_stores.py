"""The in-memory stores: ``StepStore``, ``SessionStore`` and the fenced views over them.

A ``StepStore`` keeps one list of steps per session. A ``SessionStore`` keeps
sessions (settings, working memory, run summaries), the revision of each and
the latest lease grant of each; its fenced views check a lease and write under
one hold of its lock, and a ``FencedStore`` fences the appends of the
``StepStore`` it was made with under that same hold.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import attrs

from agentloop import (
    FinalizeSummary,
    Lease,
    RevisionConflictError,
    RunStep,
    Session,
    SessionInfo,
    validate_json,
    validate_n,
    validate_session_id,
)
from agentloop._shared import (
    check_fence,
    check_granted,
    check_renewable,
    check_revision,
    check_seconds,
    check_session_ids,
    check_steps,
    preview,
    trusted_builder,
    validate_owner,
)
from agentloopmem._guard import Guard

# ``update_data`` parses the snapshot before taking the lock, so a big one never
# stalls other threads; the session is then rebuilt from fields checked already.
_session_with_data = trusted_builder(Session)


@attrs.define
class _Record:
    """One session's state; only ever touched under the store's lock."""

    session: Session
    final: FinalizeSummary | None
    created_at: datetime
    updated_at: datetime
    step_total: int
    write_seq: int


@attrs.define
class _Grant:
    """The latest grant of one session's lease; kept after release and expiry for its token."""

    owner: str
    token: int
    expires_at: datetime
    released: bool


_by_write_seq = operator.attrgetter("write_seq")


def _system_clock() -> datetime:
    return datetime.now(UTC)


def _check_lease(lease: object) -> Lease:
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, got {preview(lease)}")
    return lease


class StepStore:
    """Steps kept in a dict of per-session lists; safe from trio and asyncio tasks and OS threads.

    Implements ``StepStore`` and the ``append_many``, ``all``,
    ``delete_session`` and ``aclose`` capabilities. Steps are immutable values;
    every returned list is a fresh copy, so mutating it cannot reach the store.
    ``last_n`` costs O(n), however long the history.

    **Cancellation**, under trio and asyncio alike: a cancelled call raises before
    touching the store; a call that returns has fully happened and was a checkpoint.
    """

    def __init__(self) -> None:
        self._guard = Guard(type(self).__name__)
        self._steps: dict[str, list[RunStep]] = {}

    async def append(self, step: RunStep) -> None:
        """Append ``step`` to its session's trace.

        Raises:
            TypeError: ``step`` is not a ``RunStep``.
            StoreClosedError: the store was closed.
        """
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        await self._guard.call(lambda: self._extend((step,)))

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Append every step of ``steps``, in order, under one hold of the lock: all or nothing.

        The batch may span sessions; no other append lands between its steps.
        ``[]`` is a no-op (still a checkpoint).

        Raises:
            TypeError: ``steps`` is not a sequence of ``RunStep``; the message
                names the first bad position and nothing is appended.
            StoreClosedError: the store was closed.

        **Cancellation**: a cancelled call appends nothing.
        """
        batch = check_steps(steps)
        await self._guard.call(lambda: self._extend(batch))

    def _extend(self, batch: Sequence[RunStep]) -> None:
        """Append the checked ``batch``; call with the lock held (it cannot fail part way)."""
        for step in batch:
            self._steps.setdefault(step.session_id, []).append(step)

    def _extend_held(self, batch: Sequence[RunStep]) -> None:
        """Append the checked ``batch`` now, taking the lock (for a fenced view's append).

        Raises:
            StoreClosedError: the store was closed.
        """
        with self._guard.held():
            self._extend(batch)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps of the session, oldest first; ``[]`` for an unknown session.

        Raises:
            TypeError: ``n`` is not an int (``bool`` included), or the id is not a str.
            ValueError: ``n`` < 1, or the id is empty or holds NUL.
            StoreClosedError: the store was closed.
        """
        validate_n(n)
        validate_session_id(session_id)
        return await self._guard.call(lambda: self._steps.get(session_id, [])[-n:])

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step of the session in insertion order; ``[]`` for an unknown session.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        return await self._guard.call(lambda: list(self._steps.get(session_id, ())))

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's steps; ``True`` if it had any.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        return await self._guard.call(lambda: self._steps.pop(session_id, None) is not None)

    async def aclose(self) -> None:
        """Close the store and free its contents; every later call raises ``StoreClosedError``.

        Idempotent. A cancelled call leaves the store open.
        """
        await self._guard.close(self._steps.clear)


class SessionStore:
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

    A session's lease grant and revision are never dropped (not by release,
    expiry or ``delete_session``), so its tokens and revisions strictly
    increase over the store's whole life.

    **Cancellation**, under trio and asyncio alike: a cancelled call raises before
    touching the store; a call that returns has fully happened and was a checkpoint.
    """

    def __init__(
        self, clock: Callable[[], datetime] | None = None, *, steps: StepStore | None = None
    ) -> None:
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning a datetime, got {preview(clock)}")
        if steps is not None and not isinstance(steps, StepStore):
            raise TypeError(f"steps must be an agentloopmem.StepStore, got {preview(steps)}")
        self._guard = Guard(type(self).__name__)
        self._steps = steps
        self._clock = clock if clock is not None else _system_clock
        self._records: dict[str, _Record] = {}
        self._grants: dict[str, _Grant] = {}
        self._revisions: dict[str, int] = {}
        self._write_seq = itertools.count()

    @property
    def steps(self) -> StepStore | None:
        """The ``steps=`` store, or ``None``: the step store whose appends fenced views cover."""
        return self._steps

    def _now(self) -> datetime:
        """The clock's time in UTC; called outside the lock, since the clock is user code."""
        now = self._clock()
        if not isinstance(now, datetime) or now.utcoffset() is None:
            raise ValueError(f"clock must return a timezone-aware datetime, got {preview(now)}")
        return now.astimezone(UTC)

    # -- writes, all through _write --------------------------------------------------------

    def _check_fence(self, lease: Lease) -> None:
        """Raise unless ``lease`` is still its session's latest grant; call with the lock held.

        Raises:
            ValueError: this store never granted ``lease``.
            LeaseLostError: the session's lease was acquired again since.
        """
        check_fence(lease, self._grants.get(lease.session_id))

    def _write(
        self, session_id: str, now: datetime, fence: Lease | None, expected: int | None = None
    ) -> _Record:
        """The record to write into, created on first write, its revision bumped; call
        with the lock held.

        Raises ``LeaseLostError``, changing nothing, if ``fence`` covers the session
        and its lease was acquired again since; then ``RevisionConflictError`` if
        ``expected`` is given and is not the session's revision.
        """
        if fence is not None and fence.session_id == session_id:
            self._check_fence(fence)
        if expected is not None:
            current = self._revisions.get(session_id, 0)
            if current != expected:
                raise RevisionConflictError(
                    f"session {preview(session_id)} is at revision {current}, not {expected}; "
                    "nothing was written (read the session again and retry)"
                )
        self._revisions[session_id] = self._revisions.get(session_id, 0) + 1
        seq = next(self._write_seq)
        record = self._records.get(session_id)
        if record is None:
            record = _Record(Session(session_id), None, now, now, 0, seq)
            self._records[session_id] = record
        else:
            record.updated_at = now
            record.write_seq = seq
        return record

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """Replace the session's data with ``snapshot`` (JSON text, or ``None`` to clear it).

        Raises:
            TypeError: ``snapshot`` is neither ``str`` nor ``None``.
            ValueError: ``snapshot`` is not JSON text; nothing is written.
            StoreClosedError: the store was closed.
        """
        await self._write_data(session_id, snapshot, None, None)

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """Replace the session's data if it is still at ``revision``; the new revision.

        The check and the write happen under one hold of the store's lock: of
        several calls naming the same revision, exactly one wins.

        Raises:
            RevisionConflictError: the session is at another revision; nothing
                was written.
            TypeError, ValueError: a bad session id, snapshot (not JSON text or
                ``None``) or revision (not an int in ``[0, 2**63 - 1]``).
            StoreClosedError: the store was closed.

        **Cancellation**: a cancelled call writes nothing and bumps nothing.
        """
        check_revision(revision)
        return await self._write_data(session_id, snapshot, None, revision)

    async def _write_data(
        self, session_id: str, snapshot: str | None, fence: Lease | None, expected: int | None
    ) -> int:
        """``update_data`` (``update_data_if`` when ``expected`` is given), fenced by
        ``fence`` when given; the session's new revision."""
        validate_session_id(session_id)
        if snapshot is not None:
            if not isinstance(snapshot, str):
                raise TypeError(f"snapshot must be JSON text or None, got {preview(snapshot)}")
            validate_json(snapshot, "data")
        now = self._now()

        def write() -> int:
            record = self._write(session_id, now, fence, expected)
            old = record.session
            record.session = _session_with_data(old.id, old.model, old.system_prompt, snapshot)
            return self._revisions[session_id]

        return await self._guard.call(write)

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """Record ``summary`` as the session's latest run; data is kept.

        Raises:
            TypeError: ``summary`` is not a ``FinalizeSummary``.
            StoreClosedError: the store was closed.
        """
        await self._write_final(session_id, summary, None)

    async def _write_final(
        self, session_id: str, summary: FinalizeSummary, fence: Lease | None
    ) -> None:
        """``finalize``, fenced by ``fence`` when given."""
        validate_session_id(session_id)
        if not isinstance(summary, FinalizeSummary):
            raise TypeError(f"summary must be a FinalizeSummary, got {preview(summary)}")
        now = self._now()

        def write() -> None:
            record = self._write(session_id, now, fence)
            record.final = summary
            record.step_total += summary.step_count

        await self._guard.call(write)

    async def put(self, session: Session) -> None:
        """Store ``session`` whole (model, system prompt, data); its summaries are kept.

        Raises:
            TypeError: ``session`` is not a ``Session``.
            StoreClosedError: the store was closed.
        """
        await self._write_session(session, None)

    async def _write_session(self, session: Session, fence: Lease | None) -> None:
        """``put``, fenced by ``fence`` when given."""
        if not isinstance(session, Session):
            raise TypeError(f"session must be a Session, got {preview(session)}")
        now = self._now()

        def write() -> None:
            self._write(session.id, now, fence).session = session

        await self._guard.call(write)

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's data and summaries; ``True`` if it existed.

        Its lease and token stay: a later acquire still gets a larger token.
        Its revision grows (when it existed) and is never reset, so a stale
        ``update_data_if`` fails.

        Raises:
            StoreClosedError: the store was closed.
        """
        return await self._delete(session_id, None)

    async def _delete(self, session_id: str, fence: Lease | None) -> bool:
        """``delete_session``, fenced by ``fence`` when given."""
        validate_session_id(session_id)

        def delete() -> bool:
            if fence is not None and fence.session_id == session_id:
                self._check_fence(fence)
            existed = self._records.pop(session_id, None) is not None
            if existed:  # a stale update_data_if must not bring it back
                self._revisions[session_id] = self._revisions.get(session_id, 0) + 1
            return existed

        return await self._guard.call(delete)

    # -- reads -----------------------------------------------------------------------------

    async def get(self, session_id: str) -> Session:
        """The stored session, or ``Session(id=session_id)`` when unknown; creates nothing.

        Raises:
            TypeError, ValueError: the id is not a non-empty str without NUL.
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        record = await self._guard.call(lambda: self._records.get(session_id))
        return record.session if record is not None else Session(session_id)

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """One session per id, in the order asked (duplicates too), read under one lock
        hold; an unknown id gives ``Session(id)``. Creates nothing.

        Raises:
            TypeError, ValueError: ``session_ids`` is not a sequence of session
                ids (the message names the position of the first bad one).
            StoreClosedError: the store was closed.
        """
        ids = check_session_ids(session_ids)
        found = await self._guard.call(lambda: [self._records.get(i) for i in ids])
        return [
            record.session if record is not None else Session(session_id)
            for record, session_id in zip(found, ids, strict=True)
        ]

    async def exists(self, session_id: str) -> bool:
        """Whether a write (``put``, ``update_data``, ``finalize``) brought the session into being.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        return await self._guard.call(lambda: session_id in self._records)

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """The latest ``finalize`` summary, or ``None`` if the session never finalized.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        record = await self._guard.call(lambda: self._records.get(session_id))
        return record.final if record is not None else None

    async def revision(self, session_id: str) -> int:
        """The session's revision: 0 if never written, larger after every session write.

        Only order and equality mean anything. A deleted session keeps a
        revision larger than any it had, so a stale ``update_data_if`` fails.

        Raises:
            TypeError, ValueError: a bad session id.
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        return await self._guard.call(lambda: self._revisions.get(session_id, 0))

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """At most ``limit`` sessions, the most recently written first.

        Raises:
            TypeError, ValueError: ``limit`` is not an int >= 1.
            StoreClosedError: the store was closed.
        """
        validate_n(limit, "limit")

        def newest() -> list[tuple[str, FinalizeSummary | None, int, datetime, datetime]]:
            records = heapq.nlargest(limit, self._records.values(), key=_by_write_seq)
            return [
                (r.session.id, r.final, r.step_total, r.created_at, r.updated_at) for r in records
            ]

        return [
            SessionInfo(
                id=sid,
                status=final.status if final is not None else None,
                step_count=total,
                created_at=created,
                updated_at=updated,
            )
            for sid, final, total, created, updated in await self._guard.call(newest)
        ]

    # -- leases ----------------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """The session's lease for ``owner``, expiring ``ttl`` seconds from now.

        A free, released or expired lease is granted with a token larger than
        any the session had; a live lease already held by ``owner`` keeps its
        token and gets the new expiry. ``None`` if another owner holds a live one.
        Lease calls touch only the lease grants: no session is created and no
        write order or revision moves.

        Raises:
            TypeError, ValueError: a bad session id, owner (a non-empty str of
                at most 256 UTF-8 bytes without NUL) or ttl (finite seconds > 0,
                at most ``SECONDS_MAX``, ~24.8 days).
            StoreClosedError: the store was closed.

        **Cancellation**: a cancelled call grants and extends nothing.
        """
        validate_session_id(session_id)
        validate_owner(owner)
        seconds = check_seconds(ttl, "ttl")
        # Read before the lock (the clock is user code); a stale `now` only makes
        # a lease look live a moment longer, never frees it early.
        now = self._now()
        expires_at = now + timedelta(seconds=seconds)

        def acquire() -> int | None:
            grant = self._grants.get(session_id)
            if grant is None:
                self._grants[session_id] = _Grant(owner, 1, expires_at, released=False)
                return 1
            if not grant.released and now < grant.expires_at:
                if grant.owner != owner:
                    return None
                grant.expires_at = expires_at
                return grant.token
            grant.owner, grant.token, grant.expires_at = owner, grant.token + 1, expires_at
            grant.released = False
            return grant.token

        token = await self._guard.call(acquire)
        return None if token is None else Lease(session_id, owner, token, expires_at)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """``lease`` with the same token, expiring ``ttl`` seconds from now.

        An expired lease that nobody acquired since is renewed: it was never lost.

        Raises:
            LeaseLostError: the session's lease was acquired again since, or
                ``lease`` was released; nothing changed.
            TypeError, ValueError: ``lease`` is not a ``Lease`` this store
                granted, or a bad ttl.
            StoreClosedError: the store was closed.

        **Cancellation**: a cancelled call leaves the expiry as it was.
        """
        _check_lease(lease)
        seconds = check_seconds(ttl, "ttl")
        expires_at = self._now() + timedelta(seconds=seconds)

        def renew() -> None:
            grant = self._grants.get(lease.session_id)
            check_renewable(lease, grant)
            assert grant is not None
            grant.expires_at = expires_at

        await self._guard.call(renew)
        return Lease(lease.session_id, lease.owner, lease.token, expires_at)

    async def release_lease(self, lease: Lease) -> None:
        """Free ``lease`` so the next ``acquire_lease`` succeeds at once.

        Idempotent, and a no-op for a lease acquired again since. A later acquire
        (by any owner, this one too) gets a new, larger token.

        Raises:
            TypeError, ValueError: ``lease`` is not a ``Lease`` this store granted.
            StoreClosedError: the store was closed.

        **Cancellation**: a cancelled call leaves the lease held.
        """
        _check_lease(lease)

        def release() -> None:
            grant = self._grants.get(lease.session_id)
            check_granted(lease, grant)
            assert grant is not None
            if grant.token == lease.token:
                grant.released = True

        await self._guard.call(release)

    def fenced(self, lease: Lease) -> FencedSessionStore:
        """A view of this store whose writes to ``lease.session_id`` are fenced by ``lease``.

        ``put``, ``update_data``, ``update_data_if``, ``finalize`` and
        ``delete_session`` through the view check, under the same lock as the
        write, that the session's lease was not acquired again since ``lease``
        was granted, else raise ``LeaseLostError`` and change nothing. An expired
        or released lease that nobody acquired since still writes: no other
        writer exists. Reads, and writes to other sessions, pass straight through.

        With ``steps`` given at construction the view is a ``FencedStore``: it is
        also that ``StepStore`` (``append``, ``append_many``, ``last_n``,
        ``all``), and appends to the leased session are fenced the same way.
        Without it, a holder that lost its lease can still append steps to its
        step store unchecked; only its session writes are refused.

        Raises:
            TypeError, ValueError: ``lease`` is not a ``Lease`` this store granted.
            StoreClosedError: the store was closed.
        """
        _check_lease(lease)
        with self._guard.held():
            check_granted(lease, self._grants.get(lease.session_id))
        if self._steps is None:
            return FencedSessionStore(self, lease)
        return FencedStore(self, self._steps, lease)

    async def _append_fenced(
        self, steps: StepStore, batch: Sequence[RunStep], lease: Lease
    ) -> None:
        """Append ``batch`` to ``steps`` if ``lease`` is still its session's latest grant.

        The check and the append run under this store's lock with the step
        store's lock taken inside it; nothing takes them in the other order, so
        they cannot deadlock.

        Raises:
            LeaseLostError: the lease was acquired again since; nothing was appended.
            StoreClosedError: either store was closed.
        """

        def append() -> None:
            self._check_fence(lease)
            steps._extend_held(batch)

        await self._guard.call(append)

    async def aclose(self) -> None:
        """Close the store and free its contents; every later call raises ``StoreClosedError``.

        Idempotent. A cancelled call leaves the store open.
        """
        await self._guard.close(self._clear)

    def _clear(self) -> None:
        self._records.clear()
        self._grants.clear()
        self._revisions.clear()


class FencedSessionStore:
    """A ``SessionStore`` view whose writes to ``lease.session_id`` are fenced.

    Made by ``agentloopmem.SessionStore.fenced(lease)``. Each of its writes to
    the leased session (``put``, ``update_data``, ``update_data_if``,
    ``finalize``, ``delete_session``) raises ``LeaseLostError`` and changes
    nothing once the session's lease was acquired again since ``lease`` was
    granted; the check and the write happen under the store's one lock.
    Everything else passes straight to the store, including its lease calls and
    ``aclose`` (which closes the store itself: a view owns nothing of its own).
    """

    def __init__(self, sessions: SessionStore, lease: Lease) -> None:
        self._sessions = sessions
        self._lease = lease

    @property
    def lease(self) -> Lease:
        """The lease this view's writes are checked against."""
        return self._lease

    async def get(self, session_id: str) -> Session:
        """As ``SessionStore.get``; not fenced (reads are never refused)."""
        return await self._sessions.get(session_id)

    async def exists(self, session_id: str) -> bool:
        """As ``SessionStore.exists``; not fenced."""
        return await self._sessions.exists(session_id)

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """As ``SessionStore.get_many``; not fenced."""
        return await self._sessions.get_many(session_ids)

    async def revision(self, session_id: str) -> int:
        """As ``SessionStore.revision``; not fenced."""
        return await self._sessions.revision(session_id)

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """As ``SessionStore.final``; not fenced."""
        return await self._sessions.final(session_id)

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """As ``SessionStore.list_sessions``; not fenced."""
        return await self._sessions.list_sessions(limit=limit)

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """As ``SessionStore.update_data``, fenced.

        Raises:
            LeaseLostError: the session is the leased one and its lease was
                acquired again since; nothing was written.
        """
        await self._sessions._write_data(session_id, snapshot, self._lease, None)

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """As ``SessionStore.update_data_if``, fenced: the lease is checked first, then
        the revision, under the one lock of the write.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
            RevisionConflictError: the session is at another revision.
        """
        check_revision(revision)
        return await self._sessions._write_data(session_id, snapshot, self._lease, revision)

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """As ``SessionStore.finalize``, fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
        """
        await self._sessions._write_final(session_id, summary, self._lease)

    async def put(self, session: Session) -> None:
        """As ``SessionStore.put``, fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
        """
        await self._sessions._write_session(session, self._lease)

    async def delete_session(self, session_id: str) -> bool:
        """As ``SessionStore.delete_session`` (session data only), fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was deleted.
        """
        return await self._sessions._delete(session_id, self._lease)

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """As ``SessionStore.acquire_lease``."""
        return await self._sessions.acquire_lease(session_id, owner, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """As ``SessionStore.renew_lease``."""
        return await self._sessions.renew_lease(lease, ttl)

    async def release_lease(self, lease: Lease) -> None:
        """As ``SessionStore.release_lease``."""
        await self._sessions.release_lease(lease)

    def fenced(self, lease: Lease) -> FencedSessionStore:
        """As ``SessionStore.fenced``: a view of the store fenced by ``lease``."""
        return self._sessions.fenced(lease)

    async def aclose(self) -> None:
        """Close the store this view wraps (as ``SessionStore.aclose``)."""
        await self._sessions.aclose()


class FencedStore(FencedSessionStore):
    """A fenced view of a ``SessionStore`` and the ``StepStore`` it was made with.

    Besides the session writes, appends to the leased session are fenced
    (``SessionStore._append_fenced``). ``last_n`` and ``all`` pass straight through.
    """

    def __init__(self, sessions: SessionStore, steps: StepStore, lease: Lease) -> None:
        super().__init__(sessions, lease)
        self._steps = steps

    async def append(self, step: RunStep) -> None:
        """As ``StepStore.append``, fenced when ``step`` belongs to the leased session.

        Raises:
            LeaseLostError: the session's lease was acquired again since;
                nothing was appended.
            TypeError: ``step`` is not a ``RunStep``.
            StoreClosedError: either store was closed.

        **Cancellation**: a cancelled call appends nothing.
        """
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        if step.session_id != self._lease.session_id:
            await self._steps.append(step)
        else:
            await self._sessions._append_fenced(self._steps, (step,), self._lease)

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """As ``StepStore.append_many``, fenced when any step belongs to the leased session.

        The lease check and the whole batch happen under both locks: a lost
        lease refuses the whole batch, steps of other sessions included.

        Raises:
            LeaseLostError: the session's lease was acquired again since;
                nothing was appended.
            TypeError: ``steps`` is not a sequence of ``RunStep`` (naming the
                first bad position); nothing was appended.
            StoreClosedError: either store was closed.

        **Cancellation**: a cancelled call appends nothing.
        """
        batch = check_steps(steps)
        if any(step.session_id == self._lease.session_id for step in batch):
            await self._sessions._append_fenced(self._steps, batch, self._lease)
        else:
            await self._steps.append_many(batch)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """As ``StepStore.last_n``; not fenced."""
        return await self._steps.last_n(session_id, n)

    async def all(self, session_id: str) -> list[RunStep]:
        """As ``StepStore.all``; not fenced."""
        return await self._steps.all(session_id)
