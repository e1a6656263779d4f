"""The fenced view of a SQL store: writes to the leased session checked in their own transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from agentloop._shared import check_steps

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop import FinalizeSummary, Lease, RunStep, Session, SessionInfo
    from agentloopsql._base import SqlStoreBase

ConnT = TypeVar("ConnT")


class FencedSqlStore(Generic[ConnT]):
    """A SQL store's view whose writes to ``lease.session_id`` are fenced by ``lease``.

    Made by the store's ``fenced(lease)``. It implements everything the store
    does. Each write to the leased session (``append``, ``append_many``,
    ``put``, ``update_data``, ``update_data_if``, ``finalize``,
    ``delete_session``) first reads the
    session's lease row inside the write's transaction (on PostgreSQL with a
    share lock, so a takeover waits for the write to commit and the write
    never commits after a takeover) and raises ``LeaseLostError``, having
    changed nothing, if the lease was acquired again since ``lease`` was
    granted (``ValueError`` if the store never granted it). In group commit
    a refused write fails only its own call. Reads, writes to other sessions
    and the lease calls pass straight to the store; ``aclose`` closes the
    store itself (a view owns nothing of its own).
    """

    def __init__(self, store: SqlStoreBase[ConnT], lease: Lease) -> None:
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
        await self._store._append(step, self._lease)

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
        await self._store._append_many(check_steps(steps), self._lease)

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

    # -- reads and the rest, passed through --------------------------------

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
