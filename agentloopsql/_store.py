"""The public API both SQL stores share, their fenced view, and how a lease row is judged.

A backend supplies an :class:`Ops` (one synchronous function per operation,
run against a driver connection, each one transaction's work) and the
:class:`~agentloopsql._workers.Workers` that run each call off the event-loop
thread; :class:`SqlStore` checks arguments and makes one call to them.

**Leases.** Each backend keeps one row per session ever leased (owner, token
and expiry, the expiry ``NULL`` once released) and never deletes it, so a
session's tokens strictly increase over the database's life. The row is read
back as a :class:`Grant` and judged by ``agentloop``'s rules
(``check_granted``, ``check_fence``, ``check_renewable``), so both backends
judge a lease exactly as ``agentloopmem`` does.

**Revisions.** A session's revision is its ``write_seq``: every session write
(``put``, ``update_data``, ``finalize``, ``update_data_if``) sets it from a
store-wide counter that only grows, and lease calls never touch it.
``delete_session`` stores a fresh counter value for the deleted session in
``revision_floors``, so its revision grows with the delete (a stale
``update_data_if`` fails) and a later write goes above it.
"""

from __future__ import annotations

import random
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

import anyio

from agentloop import (
    FinalizeSummary,
    Lease,
    RevisionConflictError,
    RunStep,
    Session,
    SessionExistsError,
    SessionInfo,
    SessionPage,
    StoreClosedError,
    validate_labels,
    validate_n,
    validate_session_id,
)
from agentloop._shared import (
    check_idle_for,
    check_revision,
    check_seconds,
    check_session_ids,
    check_steps,
    preview,
    validate_owner,
)
from agentloopsql._codec import labels_text
from agentloopsql._cursor import ORDERS, decode, encode, query_tag
from agentloopsql._workers import (
    Append,
    AppendRow,
    FencedAppend,
    IdempotentWrite,
    KeyedWrite,
    Read,
    Workers,
)

if TYPE_CHECKING:
    from typing import Self

ConnT = TypeVar("ConnT")
ConnT_contra = TypeVar("ConnT_contra", contravariant=True)
R = TypeVar("R")

# Windows wider than this are "everything": SQL LIMITs are signed 64-bit.
_MAX_WINDOW = 2**62

SHORT_WINDOW = 256
"""The widest ``last_n`` window that is a short read (see :meth:`SqlStore._read_short`)."""

_keys = random.Random()


def new_key() -> int:
    """A random 63-bit key: after a lost connection, it tells whether a write landed."""
    return _keys.getrandbits(63)


def taken(session_id: str, hint: str = "nothing was written") -> SessionExistsError:
    """The error for a session id that already has a session row or steps."""
    return SessionExistsError(
        f"session {preview(session_id)} exists (a session row or steps); {hint}"
    )


def unknown_source(session_id: str) -> KeyError:
    """The error for a fork source with no session row and no steps."""
    return KeyError(f"session {session_id!r} does not exist: no session row and no steps")


def _collected_unclosed(workers: Workers[Any], what: str, release: Callable[[], object]) -> None:
    """A store was collected without ``aclose``: end its threads, then warn (as a file does)."""
    workers.abandon(release)
    warnings.warn(
        f"unclosed {what}: call aclose() (or use 'async with'); its threads were released",
        ResourceWarning,
        stacklevel=2,
    )


class Grant(NamedTuple):
    """A session's latest lease grant as stored (``agentloop``'s ``Grant``)."""

    owner: str
    token: int
    released: bool


def check_lease(lease: object) -> Lease:
    """``lease`` if it is a ``Lease``; ``TypeError`` otherwise."""
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, got {preview(lease)}")
    return lease


def _check_count(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int >= 0, got {preview(value)}")
    if value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def _check_keep_first(keep_first: object) -> int | None:
    if keep_first is None:
        return None
    if not isinstance(keep_first, int) or isinstance(keep_first, bool):
        raise TypeError(f"keep_first must be an int >= 0 or None, got {preview(keep_first)}")
    if keep_first < 0:
        raise ValueError(f"keep_first must be an int >= 0 or None, got {keep_first!r}")
    return min(keep_first, _MAX_WINDOW)


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


# Rows a page filtered by several label pairs reads at a time from the first pair's index.
_FILTER_BATCH = 256


def _page(
    ops: Ops[ConnT],
    conn: ConnT,
    order: str,
    wanted: dict[str, str],
    start: int | None,
    count: int,
) -> list[tuple[int, SessionInfo]]:
    """The next ``count`` sessions of the query after ``start`` (its beginning when ``None``)."""
    after = start if start is not None else (2**63 - 1 if order == "updated" else -1)
    pairs = sorted(wanted.items())
    if len(pairs) <= 1:
        return ops.page(conn, order, pairs[0] if pairs else None, after, count)
    found: list[tuple[int, SessionInfo]] = []
    while len(found) < count:
        rows = ops.page(conn, order, pairs[0], after, _FILTER_BATCH)
        for position, info in rows:
            if all(info.labels.get(key) == value for key, value in pairs[1:]):
                found.append((position, info))
                if len(found) == count:
                    break
        if len(rows) < _FILTER_BATCH:
            break
        after = rows[-1][0]
    return found


class Ops(Protocol[ConnT_contra]):
    """One synchronous function per operation; each is a single transaction's work."""

    def append(self, conn: ConnT_contra, step: RunStep, key: int) -> None: ...
    def append_landed(self, conn: ConnT_contra, session_id: str, key: int) -> bool: ...
    def last_n(self, conn: ConnT_contra, session_id: str, n: int) -> list[RunStep]: ...
    def all(self, conn: ConnT_contra, session_id: str) -> list[RunStep]: ...
    def get(self, conn: ConnT_contra, session_id: str) -> Session | None: ...
    def exists(self, conn: ConnT_contra, session_id: str) -> bool: ...
    def update_data(self, conn: ConnT_contra, session_id: str, snapshot: str | None) -> None: ...
    def put(self, conn: ConnT_contra, session: Session) -> None: ...
    def finalize(
        self, conn: ConnT_contra, session_id: str, summary: FinalizeSummary, key: int
    ) -> None: ...
    def finalize_landed(self, conn: ConnT_contra, session_id: str, key: int) -> bool: ...
    def final(self, conn: ConnT_contra, session_id: str) -> FinalizeSummary | None: ...
    def list_sessions(self, conn: ConnT_contra, limit: int) -> list[SessionInfo]: ...
    def delete_session(self, conn: ConnT_contra, session_id: str) -> bool: ...
    def get_many(self, conn: ConnT_contra, session_ids: list[str]) -> dict[str, Session]: ...
    def revision(self, conn: ConnT_contra, session_id: str) -> int: ...
    def update_data_if(
        self, conn: ConnT_contra, session_id: str, snapshot: str | None, revision: int
    ) -> tuple[bool, int]: ...

    def cursor_secret(self, conn: ConnT_contra) -> str: ...
    def page(
        self, conn: ConnT_contra, order: str, pair: tuple[str, str] | None, after: int, limit: int
    ) -> list[tuple[int, SessionInfo]]:
        """At most ``limit`` sessions past position ``after`` in ``order``, with their positions."""
        ...

    def session_info(self, conn: ConnT_contra, session_id: str) -> SessionInfo | None: ...
    def set_labels(self, conn: ConnT_contra, session_id: str, labels: str) -> None: ...
    def prune_steps(self, conn: ConnT_contra, session_id: str, keep: int) -> int: ...
    def steps_after(
        self, conn: ConnT_contra, session_id: str, after: int, limit: int
    ) -> list[RunStep]: ...
    def fork_session(
        self, conn: ConnT_contra, source_id: str, new_id: str, keep: int | None
    ) -> None: ...
    def restore_session(
        self,
        conn: ConnT_contra,
        session: Session,
        info: SessionInfo,
        final: FinalizeSummary | None,
    ) -> None: ...
    def expire_sessions(self, conn: ConnT_contra, idle_for: float, limit: int) -> list[str]: ...

    def acquire_lease(
        self, conn: ConnT_contra, session_id: str, owner: str, ttl: float
    ) -> tuple[int, datetime] | None:
        """The granted token and expiry, or ``None`` if another owner holds a live lease."""
        ...

    def renew_lease(self, conn: ConnT_contra, lease: Lease, ttl: float) -> datetime:
        """The new expiry; raises as ``check_renewable`` says."""
        ...

    def release_lease(self, conn: ConnT_contra, lease: Lease) -> None:
        """Mark ``lease`` released if it is still the session's; raises as ``check_granted``."""
        ...

    def fenced_write(self, conn: ConnT_contra, lease: Lease, write: Callable[[Any], R]) -> R:
        """``write(conn)`` in the transaction that checked ``lease`` (``check_fence``).

        ``write`` takes the same ``conn`` (typed ``Any``: a protocol's
        contravariant connection type cannot appear in a callback's arguments).
        """
        ...


class SqlStore(Generic[ConnT]):
    """Both protocols and every optional capability over one SQL backend.

    Every method checks its arguments on the event-loop thread (``TypeError``,
    ``ValueError``: nothing is sent), then queues one call to the store's
    worker threads, which runs it as one transaction off that thread.
    The rules below hold for every method; each store's class docstring says
    only how it meets them and what it adds.

    **Cancellation handling**: all-or-nothing. A call cancelled while it is
    still queued raises the backend's cancellation (``trio.Cancelled`` /
    ``asyncio.CancelledError``) and did nothing. Once a worker has
    taken it, the caller waits for the worker (a worker is never abandoned
    mid-write): the call either did nothing and raises the cancellation, or
    happened whole and returns normally, the cancellation then delivered at
    the caller's next checkpoint. Which of the two a taken call gets is the
    store's to say.

    **Outcome unknown**: a write that raises ``StoreUnavailableError`` did not
    happen, unless the message says the outcome is unknown. Only ``append``
    and ``finalize`` can be unknown, and only on a store whose connection can
    be lost mid-call; they carry a random key so a retry never applies them
    twice. The other writes are idempotent and may simply be retried.

    **Closing**: close a store with ``aclose`` (or ``async with``). One
    collected without it gives a ``ResourceWarning``, as an unclosed file
    does, and its worker threads still end (after the calls already queued)
    and release its connections.

    **Leases**: each lease call is one transaction (an idempotent write:
    repeating one after a lost connection gives the same outcome, the holder
    re-acquiring keeps its token); see :meth:`fenced` for fenced writes.
    """

    def __init__(self, workers: Workers[ConnT], ops: Ops[ConnT]) -> None:
        self._workers = workers
        self._ops = ops
        self._closed = False
        self._secret: str | None = None

        self._leak: weakref.finalize[Any, Any] | None = None

    def _watch_leak(self, what: str, release: Callable[[], object]) -> None:
        """When this store is collected unclosed: release its threads, warn like a file.

        ``what`` describes the store in the ``ResourceWarning``; ``release``
        frees what the workers used (a pool, a connection) once they ended.
        Neither may refer to the store (it would never be collected).
        """
        self._leak = weakref.finalize(self, _collected_unclosed, self._workers, what, release)

    def _closing(self) -> None:
        """Mark the store closed: later calls raise, the collection watch ends."""
        self._closed = True
        if self._leak is not None:
            self._leak.detach()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    async def _read_short(self, run: Callable[[ConnT], R], name: str, args: tuple[Any, ...]) -> R:
        """A short indexed read (``get``, ``last_n`` of at most :data:`SHORT_WINDOW`):
        ``run`` on a connection, or read ``name`` of ``args`` another way.

        Here it queues for the workers like every call; a store may serve it
        on the event-loop thread instead (``SqliteStore`` and ``PostgresStore``
        do, see their docstrings).
        """
        return await self._workers.call(Read(run, name=name))

    async def _read_listing(self, run: Callable[[ConnT], R], name: str, args: tuple[Any, ...]) -> R:
        """``get_many`` of at most :data:`SHORT_WINDOW` ids or ``list_sessions`` of at
        most that many: as :meth:`_read_short`, but only a store whose reads wait
        without blocking (``PostgresStore``) serves them on the event-loop thread."""
        return await self._workers.call(Read(run, name=name))

    def _fence(
        self, fence: Lease | None, session_id: str, write: Callable[[ConnT], R]
    ) -> Callable[[ConnT], R]:
        """``write``, checked against ``fence`` in its transaction if it covers ``session_id``."""
        if fence is None or fence.session_id != session_id:
            return write
        ops = self._ops
        return lambda conn: ops.fenced_write(conn, fence, write)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store; every later call raises ``StoreClosedError``. Idempotent."""
        raise NotImplementedError

    # -- StepStore ---------------------------------------------------------

    async def append(self, step: RunStep) -> None:
        """Append ``step`` after every step of its session that was appended before.

        Committed when it returns (each store's class docstring says what that survives).

        Raises:
            TypeError: ``step`` is not a ``RunStep``.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; the step was not stored, unless
                the message says the outcome is unknown.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        await self._append([step], None)

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Append every step of ``steps`` in the given order, in one transaction: all or none.

        The batch may span sessions; ``[]`` is a no-op. On PostgreSQL it is one
        multi-row ``INSERT``; on SQLite it may share a commit with other
        appends (group commit), and a refused call never fails another.

        Raises:
            TypeError: ``steps`` is not a sequence of ``RunStep`` (the message
                names the first bad position); nothing was appended.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was appended,
                unless the message says the outcome is unknown (then all or none).

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        await self._append(check_steps(steps), None)

    async def _append(self, batch: list[RunStep], fence: Lease | None) -> None:
        """One ``Append`` of ``batch``, or a ``FencedAppend`` if ``fence`` covers any step."""
        if not batch:
            self._check_open()
            await anyio.lowlevel.checkpoint()
            return
        rows = tuple(AppendRow(step, new_key()) for step in batch)
        ops, first = self._ops, rows[0]

        def insert(conn: ConnT) -> None:
            for step, key in rows:
                ops.append(conn, step, key)

        def committed(conn: ConnT) -> bool:
            return ops.append_landed(conn, first.step.session_id, first.key)

        if fence is None or all(step.session_id != fence.session_id for step in batch):
            await self._workers.call(Append(rows=rows, run=insert, committed=committed))
            return
        run = self._fence(fence, fence.session_id, insert)
        await self._workers.call(
            FencedAppend(run, committed, rows=rows, lease=fence, name="append")
        )

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps of the session, oldest first; ``[]`` for an unknown session.

        Reads an index backwards: the cost grows with ``n``, not with the history.

        Raises:
            TypeError: ``n`` is not an int (``bool`` included), or the id is not a str.
            ValueError: ``n`` < 1, or the id is empty or holds NUL.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_n(n)
        validate_session_id(session_id)
        window = min(n, _MAX_WINDOW)
        ops = self._ops

        def read(conn: ConnT) -> list[RunStep]:
            return ops.last_n(conn, session_id, window)

        if window <= SHORT_WINDOW:
            return await self._read_short(read, "last_n", (session_id, window))
        return await self._workers.call(Read(read, name="last_n"))

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step of the session in insertion order; ``[]`` for an unknown session.

        Raises:
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_session_id(session_id)
        ops = self._ops
        return await self._workers.call(Read(lambda c: ops.all(c, session_id), name="all"))

    # -- SessionStore ------------------------------------------------------

    async def get(self, session_id: str) -> Session:
        """The stored session, or ``Session(id=session_id)`` when unknown; creates nothing.

        Raises:
            TypeError, ValueError: the id is not a non-empty str without NUL.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_session_id(session_id)
        ops = self._ops
        found = await self._read_short(lambda conn: ops.get(conn, session_id), "get", (session_id,))
        return found if found is not None else Session(id=session_id)

    async def exists(self, session_id: str) -> bool:
        """Whether a write (``put``, ``update_data``, ``finalize``) brought the session into being.

        Appending steps alone does not. Creates nothing.

        Raises:
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_session_id(session_id)
        ops = self._ops
        return await self._workers.call(Read(lambda c: ops.exists(c, session_id), name="exists"))

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """Replace the session's data with ``snapshot`` (JSON text, or ``None`` to clear it).

        Raises:
            TypeError: ``snapshot`` is neither ``str`` nor ``None``.
            ValueError: ``snapshot`` is not JSON text; nothing is written.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        await self._update_data(session_id, snapshot, None)

    def _checked_snapshot(self, session_id: str, snapshot: str | None) -> None:
        validate_session_id(session_id)
        if snapshot is not None and not isinstance(snapshot, str):
            raise TypeError(f"snapshot must be JSON text or None, got {preview(snapshot)}")

    async def _update_data(
        self, session_id: str, snapshot: str | None, fence: Lease | None
    ) -> None:
        self._checked_snapshot(session_id, snapshot)
        self._check_open()
        Session(session_id, data=snapshot)  # validates the JSON, naming the field "data"
        ops = self._ops
        write = self._fence(fence, session_id, lambda c: ops.update_data(c, session_id, snapshot))
        await self._workers.call(IdempotentWrite(write, name="update_data"))

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """Record ``summary`` as the session's latest run; the data snapshot is kept.

        Raises:
            TypeError: ``summary`` is not a ``FinalizeSummary``.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written, unless the
                message says the outcome is unknown.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        await self._finalize(session_id, summary, None)

    async def _finalize(
        self, session_id: str, summary: FinalizeSummary, fence: Lease | None
    ) -> None:
        validate_session_id(session_id)
        if not isinstance(summary, FinalizeSummary):
            raise TypeError(f"summary must be a FinalizeSummary, got {preview(summary)}")
        key = new_key()
        ops = self._ops
        run = self._fence(fence, session_id, lambda c: ops.finalize(c, session_id, summary, key))

        def committed(conn: ConnT) -> bool:
            return ops.finalize_landed(conn, session_id, key)

        await self._workers.call(KeyedWrite(run, committed, name="finalize"))

    # -- optional capabilities ---------------------------------------------

    async def put(self, session: Session) -> None:
        """Store ``session`` whole (model, system prompt, data); its summaries are kept.

        Raises:
            TypeError: ``session`` is not a ``Session``.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        await self._put(session, None)

    async def _put(self, session: Session, fence: Lease | None) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"session must be a Session, got {preview(session)}")
        ops = self._ops
        write = self._fence(fence, session.id, lambda c: ops.put(c, session))
        await self._workers.call(IdempotentWrite(write, name="put"))

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """The latest ``finalize`` summary, or ``None`` if the session never finalized.

        Raises:
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_session_id(session_id)
        ops = self._ops
        return await self._workers.call(Read(lambda c: ops.final(c, session_id), name="final"))

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """At most ``limit`` sessions, the most recently written first.

        Recency is a store-assigned write sequence, so clocks that tie or step
        backwards cannot reorder it.

        Raises:
            TypeError, ValueError: ``limit`` is not an int >= 1.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_n(limit, "limit")
        window = min(limit, _MAX_WINDOW)
        ops = self._ops

        def read(conn: ConnT) -> list[SessionInfo]:
            return ops.list_sessions(conn, window)

        if window <= SHORT_WINDOW:
            return await self._read_listing(read, "list_sessions", (window,))
        return await self._workers.call(Read(read, name="list_sessions"))

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session, its steps and its summaries in one transaction.

        Returns ``True`` if the store held anything for the session (labels
        included). Its lease row stays: a later acquire still gets a larger
        token. Its revision grows (a stale ``update_data_if`` fails, a later
        write goes above it).

        Raises:
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was deleted.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        return await self._delete_session(session_id, None)

    async def _delete_session(self, session_id: str, fence: Lease | None) -> bool:
        validate_session_id(session_id)
        ops = self._ops
        write = self._fence(fence, session_id, lambda c: ops.delete_session(c, session_id))
        return await self._workers.call(IdempotentWrite(write, name="delete_session"))

    # -- batches and revisions -----------------------------------------------

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """One session per id, in the order asked (duplicates too), read by one query.

        An unknown id gives ``Session(id)``; creates nothing.

        Raises:
            TypeError, ValueError: ``session_ids`` is not a sequence of session
                ids (the message names the first bad position).
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        ids = check_session_ids(session_ids)
        if not ids:
            self._check_open()
            await anyio.lowlevel.checkpoint()
            return []
        ops, unique = self._ops, list(dict.fromkeys(ids))

        def read(conn: ConnT) -> dict[str, Session]:
            return ops.get_many(conn, unique)

        if len(unique) <= SHORT_WINDOW:
            found = await self._read_listing(read, "get_many", (unique,))
        else:
            found = await self._workers.call(Read(read, name="get_many"))
        return [found.get(sid) or Session(id=sid) for sid in ids]

    async def revision(self, session_id: str) -> int:
        """The session's revision: 0 if never written, larger after every session write.

        Only order and equality mean anything. Deleting a session makes its
        revision larger, so a stale ``update_data_if`` fails; lease calls
        never change it. Creates nothing.

        Raises:
            TypeError, ValueError: a bad session id.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_session_id(session_id)
        ops = self._ops

        def read(conn: ConnT) -> int:
            return ops.revision(conn, session_id)

        return await self._workers.call(Read(read, name="revision"))

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """Replace the session's data if it is still at ``revision``; the new revision.

        The check and the write are one statement (PostgreSQL) or one
        transaction (SQLite): of several calls naming the same revision,
        across every handle onto the backend, exactly one wins.

        Raises:
            RevisionConflictError: the session is at another revision; nothing
                was written.
            TypeError, ValueError: a bad session id, snapshot (not JSON text or
                ``None``) or revision (not an int in ``[0, 2**63 - 1]``).
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written. A
                write retried after a lost connection whose first attempt had
                committed reports ``RevisionConflictError``: read it back.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        return await self._update_data_if(session_id, snapshot, revision, None)

    async def _update_data_if(
        self, session_id: str, snapshot: str | None, revision: int, fence: Lease | None
    ) -> int:
        self._checked_snapshot(session_id, snapshot)
        check_revision(revision)
        self._check_open()
        Session(session_id, data=snapshot)  # validates the JSON, naming the field "data"
        ops = self._ops
        write = self._fence(
            fence, session_id, lambda c: ops.update_data_if(c, session_id, snapshot, revision)
        )
        written, now = await self._workers.call(IdempotentWrite(write, name="update_data_if"))
        if not written:
            raise RevisionConflictError(
                f"session {preview(session_id)} is at revision {now}, not {revision}; "
                "nothing was written (read the session again and retry)"
            )
        return now

    # -- the session lifecycle ----------------------------------------------

    async def _cursor_secret(self) -> str:
        secret = self._secret
        if secret is None:
            ops = self._ops
            secret = await self._workers.call(Read(ops.cursor_secret, name="page_sessions"))
            self._secret = secret
        return secret

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
        sessions carrying every pair. Keyset pagination: a session not written
        while paging comes back exactly once, and a page walks one index from
        the cursor's position (O(limit) at any depth) without labels or with
        one pair; further pairs are checked on the rows that pair's index gives.
        A cursor is valid on any handle onto the same database.

        Raises:
            TypeError, ValueError: a bad ``limit``, ``labels`` or ``order``; a
                cursor this database did not make, or made for another
                ``order`` or ``labels``.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        count = min(validate_n(limit, "limit"), _MAX_WINDOW - 1)
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {preview(order)}")
        wanted = validate_labels(labels) if labels is not None else {}
        if cursor is not None and not isinstance(cursor, str):
            raise TypeError(f"cursor must be a str or None, got {preview(cursor)}")
        self._check_open()
        tag = query_tag(order, wanted)
        secret = await self._cursor_secret()
        start = decode(secret, tag, cursor) if cursor is not None else None
        ops = self._ops

        def read(conn: ConnT) -> list[tuple[int, SessionInfo]]:
            return _page(ops, conn, order, wanted, start, count + 1)

        found = await self._workers.call(Read(read, name="page_sessions"))
        more = len(found) > count
        page = found[:count]
        next_cursor = encode(secret, tag, page[-1][0]) if more else None
        return SessionPage(tuple(info for _, info in page), next_cursor)

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """The session's info and labels, or ``None`` if no session write created it.

        Raises:
            TypeError, ValueError: a bad session id.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_session_id(session_id)
        ops = self._ops

        def read(conn: ConnT) -> SessionInfo | None:
            return ops.session_info(conn, session_id)

        return await self._workers.call(Read(read, name="session_info"))

    async def set_labels(self, session_id: str, labels: Mapping[str, str]) -> None:
        """Replace the session's labels (``{}`` clears them); a session write.

        Like every session write it creates the session, makes its revision
        larger and moves it to the front of the listing; one transaction.

        Raises:
            TypeError, ValueError: a bad session id, or labels breaking
                ``validate_labels``'s rules (at most 32 pairs, keys and values
                non-empty text of at most 256 UTF-8 bytes); nothing changed.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        await self._set_labels(session_id, labels, None)

    async def _set_labels(
        self, session_id: str, labels: Mapping[str, str], fence: Lease | None
    ) -> None:
        validate_session_id(session_id)
        text = labels_text(validate_labels(labels))
        ops = self._ops
        write = self._fence(fence, session_id, lambda c: ops.set_labels(c, session_id, text))
        await self._workers.call(IdempotentWrite(write, name="set_labels"))

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        """Remove all but the newest ``keep_last`` (an int >= 1) steps of the session, in
        insertion order; how many were removed. One statement.

        What remains keeps its order and every field; the loop's next index
        follows the last step kept; other sessions are untouched. The space
        goes back to the file system on a SQLite file made by this version
        (``auto_vacuum=INCREMENTAL``); on PostgreSQL, to the table (see
        ``docs/decisions.md``).

        Raises:
            TypeError, ValueError: ``keep_last`` is not an int >= 1, or a bad
                session id; nothing was removed.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was removed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        return await self._prune_steps(session_id, keep_last, None)

    async def _prune_steps(self, session_id: str, keep_last: int, fence: Lease | None) -> int:
        validate_session_id(session_id)
        keep = validate_n(keep_last, "keep_last")
        keep = min(keep, _MAX_WINDOW)
        ops = self._ops
        write = self._fence(fence, session_id, lambda c: ops.prune_steps(c, session_id, keep))
        return await self._workers.call(IdempotentWrite(write, name="prune_steps"))

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        """``all(session_id)[after:after + limit]``: a range of the trace, in insertion order.

        Walks the session's index from its start: the cost grows with
        ``after + limit``, never with other sessions.

        Raises:
            TypeError, ValueError: ``after`` is not an int >= 0, or ``limit`` not an int >= 1.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_session_id(session_id)
        skip = min(_check_count(after, "after"), _MAX_WINDOW)
        count = min(validate_n(limit, "limit"), _MAX_WINDOW)
        ops = self._ops

        def read(conn: ConnT) -> list[RunStep]:
            return ops.steps_after(conn, session_id, skip, count)

        return await self._workers.call(Read(read, name="steps_after"))

    async def fork_session(
        self, source_id: str, new_id: str, *, keep_first: int | None = None
    ) -> None:
        """In one transaction: ``new_id`` gets the source's model, system prompt, data and
        labels, and copies of its first ``keep_first`` steps (all when ``None``), in order,
        every field kept but ``session_id``; no run summaries, a revision above any kept
        for ``new_id``, no lease; the source unchanged.

        Raises:
            TypeError, ValueError: a bad id, ``new_id == source_id``, or
                ``keep_first`` not an int >= 0 or ``None``.
            KeyError: the source has no session row and no steps (a ``LookupError``).
            SessionExistsError: ``new_id`` has a session row or steps; nothing changed.
                (Retried after a lost connection whose first attempt committed,
                the fork reports this too: read it back.)
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        await self._fork_session(source_id, new_id, keep_first, None)

    async def _fork_session(
        self, source_id: str, new_id: str, keep_first: int | None, fence: Lease | None
    ) -> None:
        validate_session_id(source_id, "source_id")
        validate_session_id(new_id, "new_id")
        if new_id == source_id:
            raise ValueError(f"new_id must differ from source_id, got {new_id!r} for both")
        keep = _check_keep_first(keep_first)
        ops = self._ops

        def write(conn: ConnT) -> None:
            ops.fork_session(conn, source_id, new_id, keep)

        run = self._fence(fence, new_id, write)
        await self._workers.call(IdempotentWrite(run, name="fork_session"))

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """Create ``session.id`` as an export recorded it: settings and data, labels, run
        total, ``created_at`` / ``updated_at`` and the latest run summary; one transaction.

        A session write (its revision grows). The times are kept as recorded.

        Raises:
            TypeError, ValueError: an argument of the wrong type, ``info`` of
                another session, or ``final`` whose status is not ``info.status``.
            SessionExistsError: the session has a session row or steps; nothing changed.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        await self._restore_session(session, info, final, None)

    async def _restore_session(
        self,
        session: Session,
        info: SessionInfo,
        final: FinalizeSummary | None,
        fence: Lease | None,
    ) -> None:
        check_restored(session, info, final)
        ops = self._ops

        def write(conn: ConnT) -> None:
            ops.restore_session(conn, session, info, final)

        run = self._fence(fence, session.id, write)
        await self._workers.call(IdempotentWrite(run, name="restore_session"))

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        """Delete, as ``delete_session`` does, up to ``limit`` sessions whose last session
        write is older than ``idle_for`` seconds on the store's clock and that hold no live
        lease; their ids.

        Sessions that have steps but no session row are judged by their newest
        step. A session whose lease expired unreleased is taken over first (a
        new, larger token, released), so its old holder's fenced writes fail.
        Never waits for a lease; several processes may run it at once, each
        session deleted once (each store's class docstring says how).

        Raises:
            TypeError, ValueError: ``idle_for`` is not finite seconds > 0, or
                ``limit`` not an int >= 1.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was deleted.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        seconds = check_idle_for(idle_for)
        count = min(validate_n(limit, "limit"), _MAX_WINDOW)
        ops = self._ops

        def write(conn: ConnT) -> list[str]:
            return ops.expire_sessions(conn, seconds, count)

        return await self._workers.call(IdempotentWrite(write, name="expire_sessions"))

    # -- leases ------------------------------------------------------------

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """The session's lease for ``owner``, expiring ``ttl`` seconds from the store's now.

        A free, released or expired lease is granted with a token larger than
        any the session had (also after ``delete_session`` and reopening); a
        live lease held by ``owner`` keeps its token and gets the new expiry.
        ``None`` if another owner holds a live one. Creates no session.

        Raises:
            TypeError, ValueError: a bad session id, owner (a non-empty str of
                at most 256 UTF-8 bytes without NUL) or ttl (finite seconds > 0,
                at most ``SECONDS_MAX``).
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was granted.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        validate_session_id(session_id)
        validate_owner(owner)
        seconds = check_seconds(ttl, "ttl")
        ops = self._ops

        def write(conn: ConnT) -> tuple[int, datetime] | None:
            return ops.acquire_lease(conn, session_id, owner, seconds)

        granted = await self._workers.call(IdempotentWrite(write, name="acquire_lease"))
        if granted is None:
            return None
        token, expires_at = granted
        return Lease(session_id, owner, token, expires_at)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """``lease`` with the same token, expiring ``ttl`` seconds from the store's now.

        An expired lease that nobody acquired since is renewed: it was never lost.

        Raises:
            LeaseLostError: the session's lease was acquired again since, or
                ``lease`` was released; nothing changed.
            TypeError, ValueError: ``lease`` is not a ``Lease`` this store
                granted, or a bad ttl.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; the expiry is as it was.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        check_lease(lease)
        seconds = check_seconds(ttl, "ttl")
        ops = self._ops

        def write(conn: ConnT) -> datetime:
            return ops.renew_lease(conn, lease, seconds)

        expires_at = await self._workers.call(IdempotentWrite(write, name="renew_lease"))
        return Lease(lease.session_id, lease.owner, lease.token, expires_at)

    async def release_lease(self, lease: Lease) -> None:
        """Free ``lease`` so the next ``acquire_lease`` succeeds at once.

        Idempotent, and a no-op for a lease acquired again since. A later
        acquire (by any owner, this one too) gets a new, larger token.

        Raises:
            TypeError, ValueError: ``lease`` is not a ``Lease`` this store granted.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; the lease is still held.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStore`).
        """
        check_lease(lease)
        ops = self._ops

        def write(conn: ConnT) -> None:
            ops.release_lease(conn, lease)

        await self._workers.call(IdempotentWrite(write, name="release_lease"))

    def fenced(self, lease: Lease) -> FencedSqlStore[ConnT]:
        """A view of this store whose writes to ``lease.session_id`` are fenced by ``lease``.

        See :class:`FencedSqlStore`. An expired or released lease that nobody
        acquired since still writes (no other writer exists). Whether this
        store granted ``lease`` is checked by each fenced write
        (``ValueError``, nothing written): this call does no I/O.

        Raises:
            TypeError: ``lease`` is not a ``Lease``.
            StoreClosedError: the store was closed.
        """
        check_lease(lease)
        self._check_open()
        return FencedSqlStore(self, lease)


class FencedSqlStore(Generic[ConnT]):
    """A SQL store's view whose writes to ``lease.session_id`` are fenced by ``lease``.

    Made by the store's ``fenced(lease)``. It implements everything the store
    does. Each write to the leased session (``append``, ``append_many``,
    ``put``, ``update_data``, ``update_data_if``, ``finalize``,
    ``delete_session``) first reads the session's lease row inside the write's
    transaction (on PostgreSQL with a share lock, so a takeover waits for the
    write to commit and the write never commits after a takeover) and raises
    ``LeaseLostError``, having changed nothing, if the lease was acquired
    again since ``lease`` was granted (``ValueError`` if the store never
    granted it). In group commit a refused write fails only its own call.
    Reads, writes to other sessions and the lease calls pass straight to the
    store; ``aclose`` closes the store itself (a view owns nothing of its own).
    """

    def __init__(self, store: SqlStore[ConnT], lease: Lease) -> None:
        self._store = store
        self._lease = lease

    @property
    def lease(self) -> Lease:
        """The lease this view's writes are checked against."""
        return self._lease

    def __repr__(self) -> str:
        return f"<fenced {self._store!r} token={self._lease.token}>"

    # -- writes, fenced ----------------------------------------------------

    async def append(self, step: RunStep) -> None:
        """As the store's ``append``, fenced when ``step`` belongs to the leased session.

        A fenced append keeps its retry key: after a lost connection it is
        still applied at most once.

        Raises:
            LeaseLostError: the session's lease was acquired again since;
                nothing was appended.
            ValueError: the store never granted the lease; nothing was appended.
            TypeError, StoreClosedError, StoreUnavailableError: as the store's ``append``.
        """
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        await self._store._append([step], self._lease)

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """As the store's ``append_many``, fenced when any step belongs to the leased session.

        The lease check and the whole batch are one transaction: a lost lease
        refuses the whole batch, steps of other sessions included.

        Raises:
            LeaseLostError: the session's lease was acquired again since;
                nothing was appended.
            ValueError: the store never granted the lease; nothing was appended.
            TypeError, StoreClosedError, StoreUnavailableError: as the store's
                ``append_many``.
        """
        await self._store._append(check_steps(steps), self._lease)

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """As the store's ``update_data_if``, fenced: the lease is checked first, then
        the revision, in the write's transaction.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
            RevisionConflictError: the session is at another revision.
        """
        return await self._store._update_data_if(session_id, snapshot, revision, self._lease)

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """As the store's ``update_data``, fenced.

        Raises:
            LeaseLostError: the session is the leased one and its lease was
                acquired again since; nothing was written.
        """
        await self._store._update_data(session_id, snapshot, self._lease)

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """As the store's ``finalize``, fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
        """
        await self._store._finalize(session_id, summary, self._lease)

    async def put(self, session: Session) -> None:
        """As the store's ``put``, fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
        """
        await self._store._put(session, self._lease)

    async def delete_session(self, session_id: str) -> bool:
        """As the store's ``delete_session`` (session, steps, summaries; never the lease), fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was deleted.
        """
        return await self._store._delete_session(session_id, self._lease)

    async def set_labels(self, session_id: str, labels: Mapping[str, str]) -> None:
        """As the store's ``set_labels``, fenced (the lease check in the write's transaction).

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
        """
        await self._store._set_labels(session_id, labels, self._lease)

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        """As the store's ``prune_steps``, fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was removed.
        """
        return await self._store._prune_steps(session_id, keep_last, self._lease)

    async def fork_session(
        self, source_id: str, new_id: str, *, keep_first: int | None = None
    ) -> None:
        """As the store's ``fork_session``, fenced when ``new_id`` is the leased session.

        Raises:
            LeaseLostError: the leased session's lease was acquired again since;
                nothing was written.
        """
        await self._store._fork_session(source_id, new_id, keep_first, self._lease)

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """As the store's ``restore_session``, fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
        """
        await self._store._restore_session(session, info, final, self._lease)

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        """As the store's ``expire_sessions`` (store-wide: never a live lease's session)."""
        return await self._store.expire_sessions(idle_for=idle_for, limit=limit)

    # -- reads and the rest, passed through --------------------------------

    async def page_sessions(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        labels: Mapping[str, str] | None = None,
        order: str = "updated",
    ) -> SessionPage:
        """As the store's ``page_sessions``; not fenced."""
        return await self._store.page_sessions(
            limit=limit, cursor=cursor, labels=labels, order=order
        )

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """As the store's ``session_info``; not fenced."""
        return await self._store.session_info(session_id)

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        """As the store's ``steps_after``; not fenced."""
        return await self._store.steps_after(session_id, after, limit)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """As the store's ``last_n``; not fenced (reads are never refused)."""
        return await self._store.last_n(session_id, n)

    async def all(self, session_id: str) -> list[RunStep]:
        """As the store's ``all``; not fenced."""
        return await self._store.all(session_id)

    async def get(self, session_id: str) -> Session:
        """As the store's ``get``; not fenced."""
        return await self._store.get(session_id)

    async def exists(self, session_id: str) -> bool:
        """As the store's ``exists``; not fenced."""
        return await self._store.exists(session_id)

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """As the store's ``get_many``; not fenced."""
        return await self._store.get_many(session_ids)

    async def revision(self, session_id: str) -> int:
        """As the store's ``revision``; not fenced."""
        return await self._store.revision(session_id)

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """As the store's ``final``; not fenced."""
        return await self._store.final(session_id)

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """As the store's ``list_sessions``; not fenced."""
        return await self._store.list_sessions(limit=limit)

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """As the store's ``acquire_lease``."""
        return await self._store.acquire_lease(session_id, owner, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """As the store's ``renew_lease``."""
        return await self._store.renew_lease(lease, ttl)

    async def release_lease(self, lease: Lease) -> None:
        """As the store's ``release_lease``."""
        await self._store.release_lease(lease)

    def fenced(self, lease: Lease) -> FencedSqlStore[ConnT]:
        """As the store's ``fenced``: a view of the store fenced by ``lease``."""
        return self._store.fenced(lease)

    async def aclose(self) -> None:
        """Close the store this view wraps (as the store's ``aclose``)."""
        await self._store.aclose()
