"""The public API both SQL stores share: argument checks, then one backend call each.

A backend supplies an :class:`Ops` (one synchronous function per operation,
run against a driver connection) and the :class:`~agentloopsql._worker.Workers`
that run each call's typed work (``_jobs``) off the event loop thread.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, overload

from agentloop import (
    FinalizeSummary,
    Lease,
    RunStep,
    Session,
    SessionInfo,
    validate_n,
    validate_session_id,
)
from agentloop._shared import preview
from agentloopsql._batches import BatchMethods
from agentloopsql._fenced import FencedSqlStore
from agentloopsql._jobs import (
    AnyWork,
    Append,
    AppendRow,
    FencedAppend,
    IdempotentWrite,
    KeyedWrite,
    Read,
)
from agentloopsql._leases import check_lease
from agentloopsql._ops import Ops, new_key
from agentloopsql._worker import Workers

if TYPE_CHECKING:
    from typing import Self

ConnT = TypeVar("ConnT")
R = TypeVar("R")

# Windows wider than this are "everything": SQL LIMITs are signed 64-bit.
_MAX_WINDOW = 2**62


class SqlStoreBase(BatchMethods[ConnT]):
    """Both protocols and every optional capability over one SQL backend.

    Every method checks its arguments on the event loop thread (``TypeError``,
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

    **Leases**: see ``LeaseMethods`` and :meth:`fenced`. **Batches and
    revisions**: see ``BatchMethods``.
    """

    _ops: Ops[ConnT]
    _workers: Workers[ConnT]
    _closed: bool

    @overload
    async def _run(self, work: Read[ConnT, R] | IdempotentWrite[ConnT, R]) -> R: ...
    @overload
    async def _run(self, work: KeyedWrite[ConnT] | Append[ConnT]) -> None: ...
    async def _run(self, work: AnyWork[ConnT]) -> object:
        """Queue ``work`` for the worker threads and return its result."""
        return await self._workers.call(work)

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

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        await self._append(step, None)

    async def _append(self, step: RunStep, fence: Lease | None) -> None:
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        key = new_key()
        ops = self._ops
        rows = (AppendRow(step, key),)

        def insert(conn: ConnT) -> None:
            ops.append(conn, step, key)

        def committed(conn: ConnT) -> bool:
            return ops.append_landed(conn, step.session_id, key)

        if fence is None or fence.session_id != step.session_id:
            await self._run(Append(rows=rows, run=insert, committed=committed))
        else:
            run = self._fence(fence, step.session_id, insert)
            await self._run(FencedAppend(run=run, committed=committed, rows=rows, lease=fence))

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps of the session, oldest first; ``[]`` for an unknown session.

        Reads an index backwards: the cost grows with ``n``, not with the history.

        Raises:
            TypeError: ``n`` is not an int (``bool`` included), or the id is not a str.
            ValueError: ``n`` < 1, or the id is empty or holds NUL.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        validate_n(n)
        validate_session_id(session_id)
        window = min(n, _MAX_WINDOW)
        ops = self._ops
        return await self._run(Read(lambda conn: ops.last_n(conn, session_id, window)))

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step of the session in insertion order; ``[]`` for an unknown session.

        Raises:
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        validate_session_id(session_id)
        ops = self._ops
        return await self._run(Read(lambda conn: ops.all(conn, session_id)))

    # -- SessionStore ------------------------------------------------------

    async def get(self, session_id: str) -> Session:
        """The stored session, or ``Session(id=session_id)`` when unknown; creates nothing.

        Raises:
            TypeError, ValueError: the id is not a non-empty str without NUL.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        validate_session_id(session_id)
        ops = self._ops
        found = await self._run(Read(lambda conn: ops.get(conn, session_id)))
        return found if found is not None else Session(id=session_id)

    async def exists(self, session_id: str) -> bool:
        """Whether a write (``put``, ``update_data``, ``finalize``) brought the session into being.

        Appending steps alone does not. Creates nothing.

        Raises:
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        validate_session_id(session_id)
        ops = self._ops
        return await self._run(Read(lambda conn: ops.exists(conn, session_id)))

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """Replace the session's data with ``snapshot`` (JSON text, or ``None`` to clear it).

        Raises:
            TypeError: ``snapshot`` is neither ``str`` nor ``None``.
            ValueError: ``snapshot`` is not JSON text; nothing is written.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        await self._update_data(session_id, snapshot, None)

    async def _update_data(
        self, session_id: str, snapshot: str | None, fence: Lease | None
    ) -> None:
        validate_session_id(session_id)
        if snapshot is not None and not isinstance(snapshot, str):
            raise TypeError(f"snapshot must be JSON text or None, got {preview(snapshot)}")
        self._check_open()
        Session(session_id, data=snapshot)  # validates the JSON, naming the field "data"
        ops = self._ops
        write = self._fence(fence, session_id, lambda c: ops.update_data(c, session_id, snapshot))
        await self._run(IdempotentWrite(write))

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """Record ``summary`` as the session's latest run; the data snapshot is kept.

        Raises:
            TypeError: ``summary`` is not a ``FinalizeSummary``.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written, unless the
                message says the outcome is unknown.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
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
        await self._run(
            KeyedWrite(
                run=self._fence(
                    fence, session_id, lambda c: ops.finalize(c, session_id, summary, key)
                ),
                committed=lambda conn: ops.finalize_landed(conn, session_id, key),
            )
        )

    # -- optional capabilities ---------------------------------------------

    async def put(self, session: Session) -> None:
        """Store ``session`` whole (model, system prompt, data); its summaries are kept.

        Raises:
            TypeError: ``session`` is not a ``Session``.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        await self._put(session, None)

    async def _put(self, session: Session, fence: Lease | None) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"session must be a Session, got {preview(session)}")
        ops = self._ops
        await self._run(
            IdempotentWrite(self._fence(fence, session.id, lambda c: ops.put(c, session)))
        )

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """The latest ``finalize`` summary, or ``None`` if the session never finalized.

        Raises:
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        validate_session_id(session_id)
        ops = self._ops
        return await self._run(Read(lambda conn: ops.final(conn, session_id)))

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """At most ``limit`` sessions, the most recently written first.

        Recency is a store-assigned write sequence, so clocks that tie or step
        backwards cannot reorder it.

        Raises:
            TypeError, ValueError: ``limit`` is not an int >= 1.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        validate_n(limit, "limit")
        window = min(limit, _MAX_WINDOW)
        ops = self._ops
        return await self._run(Read(lambda conn: ops.list_sessions(conn, window)))

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session, its steps and its summaries in one transaction.

        Returns ``True`` if the store held anything for the session. Its lease
        row stays: a later acquire still gets a larger token. Its revision is
        kept too (a later write goes above it).

        Raises:
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was deleted.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        return await self._delete_session(session_id, None)

    async def _delete_session(self, session_id: str, fence: Lease | None) -> bool:
        validate_session_id(session_id)
        ops = self._ops
        write = self._fence(fence, session_id, lambda c: ops.delete_session(c, session_id))
        return await self._run(IdempotentWrite(write))

    def fenced(self, lease: Lease) -> FencedSqlStore[ConnT]:
        """A view of this store whose writes to ``lease.session_id`` are fenced by ``lease``.

        See :class:`~agentloopsql._fenced.FencedSqlStore`. An expired or
        released lease that nobody acquired since still writes (no other
        writer exists). Whether this store granted ``lease`` is checked by each
        fenced write (``ValueError``, nothing written): this call does no I/O.

        Raises:
            TypeError: ``lease`` is not a ``Lease``.
            StoreClosedError: the store was closed.
        """
        check_lease(lease)
        self._check_open()
        return FencedSqlStore(self, lease)
