"""The in-memory ``SessionStore`` and the fenced views over it.

A ``SessionStore`` keeps sessions (settings, working memory, labels, run
summaries), the revision of each and the latest lease grant of each, and the
orders paging and expiry walk; its fenced views check a lease and write under
one hold of its lock, and a ``FencedStore`` fences the appends of the
``StepStore`` it was made with under that same hold.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

import attrs

from agentloop import (
    FinalizeSummary,
    Lease,
    RevisionConflictError,
    RunStatus,
    RunStep,
    Session,
    SessionExistsError,
    SessionInfo,
    SessionPage,
    validate_json,
    validate_labels,
    validate_n,
    validate_session_id,
)
from agentloop._shared import (
    check_fence,
    check_granted,
    check_idle_for,
    check_renewable,
    check_revision,
    check_seconds,
    check_session_ids,
    check_steps,
    preview,
    trusted_builder,
    validate_owner,
)
from agentloopmem._guard import Guard, checked_clock, read_clock
from agentloopmem._index import KeyOrder
from agentloopmem._steps import StepStore

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
    labels: dict[str, str] = attrs.Factory(dict)

    def snapshot(self) -> _Shown:
        """What listings show of the session, read under the lock (built outside it)."""
        status = self.final.status if self.final is not None else None
        times = self.created_at, self.updated_at
        return self.session.id, status, self.step_total, *times, self.labels


_Shown = tuple[str, RunStatus | None, int, datetime, datetime, dict[str, str]]


def _info(shown: _Shown) -> SessionInfo:
    session_id, status, total, created, updated, labels = shown
    return SessionInfo(session_id, status, total, created, updated, labels=labels)


@attrs.define
class _Grant:
    """The latest grant of one session's lease; kept after release and expiry for its token."""

    owner: str
    token: int
    expires_at: datetime
    released: bool


ORDERS = ("updated", "created")


def _labels_key(labels: Mapping[str, str]) -> str:
    return json.dumps(sorted(labels.items()), ensure_ascii=False, separators=(",", ":"))


def _check_lease(lease: object) -> Lease:
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, got {preview(lease)}")
    return lease


def check_restored(session: object, info: object, final: object) -> None:
    """Check ``restore_session``'s arguments.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: ``info`` is another session's, or ``final``'s status is not ``info.status``.
    """
    if not isinstance(session, Session):
        raise TypeError(f"session must be a Session, got {preview(session)}")
    if not isinstance(info, SessionInfo):
        raise TypeError(f"info must be a SessionInfo, got {preview(info)}")
    if final is not None and not isinstance(final, FinalizeSummary):
        raise TypeError(f"final must be a FinalizeSummary or None, got {preview(final)}")
    if info.id != session.id:
        raise ValueError(f"info must be of session {session.id!r}, got one of {info.id!r}")
    status = final.status if final is not None else None
    if status != info.status:
        raise ValueError(f"final's status must be info.status ({info.status}), got {status}")


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
        self._clock = checked_clock(clock)
        if steps is not None and not isinstance(steps, StepStore):
            raise TypeError(f"steps must be an agentloopmem.StepStore, got {preview(steps)}")
        self._guard = Guard(type(self).__name__)
        self._steps = steps
        self._records: dict[str, _Record] = {}
        self._grants: dict[str, _Grant] = {}
        self._revisions: dict[str, int] = {}
        self._write_seq = itertools.count(1)
        # The orders paging and expiry walk: by latest write, by first write, and by
        # latest write per label pair; a cursor carries this store's token.
        self._updated = KeyOrder()
        self._created = KeyOrder()
        self._by_label: dict[tuple[str, str], KeyOrder] = {}
        self._token = secrets.token_hex(8)

    @property
    def steps(self) -> StepStore | None:
        """The ``steps=`` store, or ``None``: the step store whose appends fenced views cover."""
        return self._steps

    def _now(self) -> datetime:
        """The clock's time in UTC; called outside the lock, since the clock is user code."""
        return read_clock(self._clock)

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
            self._created.put(session_id, seq)
        else:
            record.updated_at = now
            record.write_seq = seq
        self._updated.put(session_id, seq)
        for pair in record.labels.items():
            self._label_order(pair).put(session_id, seq)
        return record

    def _label_order(self, pair: tuple[str, str]) -> KeyOrder:
        order = self._by_label.get(pair)
        if order is None:
            order = self._by_label[pair] = KeyOrder()
        return order

    def _relabel(self, session_id: str, record: _Record, labels: dict[str, str]) -> None:
        """Give ``record`` (just written) ``labels``; call with the lock held."""
        for pair in record.labels.items():
            if labels.get(pair[0]) != pair[1]:
                self._unlabel(session_id, pair)
        record.labels = labels
        for pair in labels.items():
            self._label_order(pair).put(session_id, record.write_seq)

    def _unlabel(self, session_id: str, pair: tuple[str, str]) -> None:
        order = self._by_label.get(pair)
        if order is not None:
            order.discard(session_id)
            if not order:
                del self._by_label[pair]

    def _forget(self, session_id: str) -> bool:
        """Delete the session's row (its revision grows); call with the lock held."""
        record = self._records.pop(session_id, None)
        if record is None:
            return False
        self._revisions[session_id] = self._revisions.get(session_id, 0) + 1
        self._updated.discard(session_id)
        self._created.discard(session_id)
        for pair in record.labels.items():
            self._unlabel(session_id, pair)
        return True

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
            return self._forget(session_id)  # a stale update_data_if must not bring it back

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

        def newest() -> list[_Shown]:
            return [self._records[key].snapshot() for _, key in self._updated.older(None, limit)]

        return [_info(shown) for shown in await self._guard.call(newest)]

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """The session's info and labels, or ``None`` if no session write created it.

        Raises:
            TypeError, ValueError: a bad session id.
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)

        def read() -> _Shown | None:
            record = self._records.get(session_id)
            return record.snapshot() if record is not None else None

        shown = await self._guard.call(read)
        return _info(shown) if shown is not None else None

    async def page_sessions(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        labels: Mapping[str, str] | None = None,
        order: str = "updated",
    ) -> SessionPage:
        """At most ``limit`` sessions, then a cursor for the rest (``None`` on the last page).

        ``order="updated"``: most recently written first (``list_sessions``'
        order); ``"created"``: oldest first by first write. ``labels``: only
        sessions carrying every pair. A session not written while paging comes
        back exactly once. A page costs O(limit) without labels or with one pair
        (an order kept per pair), and filters for more.

        Raises:
            TypeError, ValueError: a bad ``limit``, ``labels`` or ``order``; a
                cursor this store did not make, or made for another ``order`` or
                ``labels``.
            StoreClosedError: the store was closed.
        """
        count = validate_n(limit, "limit")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {preview(order)}")
        wanted = validate_labels(labels) if labels is not None else {}
        query = f"{order}:{_labels_key(wanted)}"
        start = self._decode_cursor(cursor, query) if cursor is not None else None
        found = await self._guard.call(lambda: self._page(start, count + 1, order, wanted))
        more = len(found) > count
        page = found[:count]
        next_cursor = self._encode_cursor(query, page[-1][0]) if more else None
        return SessionPage(tuple(_info(shown) for _, shown in page), next_cursor)

    def _page(
        self, start: int | None, count: int, order: str, wanted: dict[str, str]
    ) -> list[tuple[int, _Shown]]:
        """The next ``count`` sessions after position ``start``; call with the lock held."""
        records = self._records
        if order == "created":
            index, walk = self._created, self._created.newer
        elif wanted:
            first = next(iter(wanted.items()))
            index = self._by_label.get(first, KeyOrder())
            walk = index.older
        else:
            index, walk = self._updated, self._updated.older
        keep = None
        if len(wanted) > 1 or (wanted and index is self._created):
            keep = lambda key: all(records[key].labels.get(k) == v for k, v in wanted.items())  # noqa: E731
        return [(number, records[key].snapshot()) for number, key in walk(start, count, keep)]

    def _encode_cursor(self, query: str, position: int) -> str:
        raw = json.dumps([self._token, query, position], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")

    def _decode_cursor(self, cursor: object, query: str) -> int:
        if not isinstance(cursor, str):
            raise TypeError(f"cursor must be a str or None, got {preview(cursor)}")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            token, made_for, position = json.loads(raw)
        except (ValueError, TypeError, binascii.Error):
            token = made_for = position = None
        if token != self._token or not isinstance(position, int):
            raise ValueError(
                f"cursor must be one this store's page_sessions returned, got {preview(cursor)}"
            )
        if made_for != query:
            raise ValueError(
                "cursor was made for another order or label filter; page with the same "
                f"order and labels it came from, got {preview(cursor)}"
            )
        return position

    async def set_labels(self, session_id: str, labels: Mapping[str, str]) -> None:
        """Replace the session's labels (``{}`` clears them); a session write.

        Like every session write it creates the session, makes its revision
        larger and moves it to the front of the listing.

        Raises:
            TypeError, ValueError: a bad session id, or labels breaking
                ``validate_labels``'s rules; nothing changed.
            StoreClosedError: the store was closed.
        """
        await self._write_labels(session_id, labels, None)

    async def _write_labels(
        self, session_id: str, labels: Mapping[str, str], fence: Lease | None
    ) -> None:
        """``set_labels``, fenced by ``fence`` when given."""
        validate_session_id(session_id)
        checked = validate_labels(labels)
        now = self._now()

        def write() -> None:
            self._relabel(session_id, self._write(session_id, now, fence), checked)

        await self._guard.call(write)

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """Create ``session.id`` as an export recorded it: settings and data, labels, run
        total, ``created_at`` / ``updated_at`` and the latest run summary.

        A session write (its revision grows; it moves to the front of the listing).

        Raises:
            TypeError, ValueError: an argument of the wrong type, ``info`` of
                another session, or ``final`` whose status is not ``info.status``.
            SessionExistsError: the session exists; nothing changed.
            StoreClosedError: the store was closed.
        """
        await self._write_restored(session, info, final, None)

    async def _write_restored(
        self,
        session: Session,
        info: SessionInfo,
        final: FinalizeSummary | None,
        fence: Lease | None,
        exists: Callable[[str], bool] | None = None,
    ) -> None:
        """``restore_session``, fenced by ``fence`` when given; ``exists`` also counts as
        the session being there (a combined store's steps)."""
        check_restored(session, info, final)
        now = self._now()

        def write() -> None:
            if session.id in self._records or (exists is not None and exists(session.id)):
                raise SessionExistsError(
                    f"session {preview(session.id)} exists; nothing was written "
                    "(delete it first to replace it)"
                )
            record = self._write(session.id, now, fence)
            record.session, record.final, record.step_total = session, final, info.step_count
            record.created_at, record.updated_at = info.created_at, info.updated_at
            self._relabel(session.id, record, dict(info.labels))

        await self._guard.call(write)

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        """Delete up to ``limit`` sessions whose last write is older than ``idle_for`` seconds
        on the store's clock and that hold no live lease; their ids, oldest first.

        A session whose lease expired but was never released is taken over first
        (a new, larger token), so its old holder's fenced writes fail. Walks the
        sessions from the least recently written and stops at the first one not
        idle: a call costs about what it deletes.

        Raises:
            TypeError, ValueError: ``idle_for`` is not a finite number of seconds
                > 0, or ``limit`` not an int >= 1.
            StoreClosedError: the store was closed.
        """
        seconds = check_idle_for(idle_for)
        count = validate_n(limit, "limit")
        now = self._now()
        cutoff = now - timedelta(seconds=seconds)
        return await self._guard.call(lambda: self._expire(now, cutoff, count, None))

    def _expire(
        self, now: datetime, cutoff: datetime, count: int, also: Callable[[str], None] | None
    ) -> list[str]:
        """Delete idle, unleased sessions (and ``also(id)`` each); call with the lock held."""
        gone: list[str] = []
        after: int | None = None
        while len(gone) < count:
            batch = self._updated.newer(after, 64)
            if not batch:
                break
            for number, key in batch:
                after = number
                if self._records[key].updated_at >= cutoff:
                    return gone
                if self._take_over_idle(key, now):
                    self._forget(key)
                    if also is not None:
                        also(key)
                    gone.append(key)
                    if len(gone) == count:
                        break
        return gone

    def _take_over_idle(self, session_id: str, now: datetime) -> bool:
        """Whether the session may expire (no live lease), its stale lease taken over."""
        grant = self._grants.get(session_id)
        if grant is None or grant.released:
            return True
        if now < grant.expires_at:
            return False
        grant.token += 1  # the old holder's fenced writes now fail
        grant.released = True
        return True

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

    async def _prune_fenced(
        self, steps: StepStore, session_id: str, keep: int, lease: Lease
    ) -> int:
        """Prune ``steps``' trace of the leased session if ``lease`` is still its latest grant
        (the check and the prune under both locks, as a fenced append)."""

        def prune() -> int:
            self._check_fence(lease)
            return steps._prune_held(session_id, keep)

        return await self._guard.call(prune)

    async def aclose(self) -> None:
        """Close the store and free its contents; every later call raises ``StoreClosedError``.

        Idempotent. A cancelled call leaves the store open.
        """
        await self._guard.close(self._clear)

    def _clear(self) -> None:
        self._records.clear()
        self._grants.clear()
        self._revisions.clear()
        self._updated.clear()
        self._created.clear()
        self._by_label.clear()


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

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """As ``SessionStore.session_info``; not fenced."""
        return await self._sessions.session_info(session_id)

    async def page_sessions(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        labels: Mapping[str, str] | None = None,
        order: str = "updated",
    ) -> SessionPage:
        """As ``SessionStore.page_sessions``; not fenced."""
        return await self._sessions.page_sessions(
            limit=limit, cursor=cursor, labels=labels, order=order
        )

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        """As ``SessionStore.expire_sessions`` (store-wide: never a live lease's session)."""
        return await self._sessions.expire_sessions(idle_for=idle_for, limit=limit)

    async def set_labels(self, session_id: str, labels: Mapping[str, str]) -> None:
        """As ``SessionStore.set_labels``, fenced.

        Raises:
            LeaseLostError: the session is the leased one and its lease was
                acquired again since; nothing was written.
        """
        await self._sessions._write_labels(session_id, labels, self._lease)

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """As ``SessionStore.restore_session``, fenced.

        Raises:
            LeaseLostError: as for :meth:`set_labels`; nothing was written.
        """
        await self._sessions._write_restored(session, info, final, self._lease)

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

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        """As ``StepStore.prune_steps``, fenced when ``session_id`` is the leased session.

        Raises:
            LeaseLostError: the session's lease was acquired again since;
                nothing was removed.
        """
        if session_id != self._lease.session_id:
            return await self._steps.prune_steps(session_id, keep_last=keep_last)
        keep = validate_n(keep_last, "keep_last")
        return await self._sessions._prune_fenced(self._steps, session_id, keep, self._lease)

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        """As ``StepStore.steps_after``; not fenced."""
        return await self._steps.steps_after(session_id, after, limit)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """As ``StepStore.last_n``; not fenced."""
        return await self._steps.last_n(session_id, n)

    async def all(self, session_id: str) -> list[RunStep]:
        """As ``StepStore.all``; not fenced."""
        return await self._steps.all(session_id)
