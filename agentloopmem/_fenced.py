"""Fenced views of the in-memory stores: writes to the leased session checked by its lease."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop import RunStep
from agentloop._shared import call_ends, call_starts, check_revision, check_steps, preview

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop import FinalizeSummary, Lease, Session, SessionInfo
    from agentloopmem._sessions import SessionStore
    from agentloopmem._steps import StepStore


class FencedSessionStore:
    """A ``SessionStore`` view whose writes to ``lease.session_id`` are fenced.

    Made by ``agentloopmem.SessionStore.fenced(lease)``. Each of its writes to
    the leased session (``put``, ``update_data``, ``update_data_if``,
    ``finalize``, ``delete_session``) raises ``LeaseLostError`` and changes nothing once the
    session's lease was acquired again since ``lease`` was granted; the check
    and the write happen under the store's one lock. Everything else passes
    straight to the store, including its lease calls and ``aclose`` (which
    closes the store itself: a view owns nothing of its own).
    """

    def __init__(self, sessions: SessionStore, lease: Lease) -> None:
        self._sessions = sessions
        self._lease = lease
        # The session's lease entry, changed in place by every grant and never replaced
        # while the store is open: a fenced append compares it with ``lease`` directly
        # (the latest grant passes every rule of ``check_fence``, which judges the rest).
        self._grant = sessions._leases.latest(lease.session_id)

    def _check_fence(self) -> None:
        """``check_fence`` of the lease, the latest grant passing by two comparisons;
        call with the session store's lock held."""
        grant, lease = self._grant, self._lease
        if grant is None or grant.token != lease.token or grant.owner != lease.owner:
            self._sessions._leases.check_fence(lease)

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
        await self._sessions._update_data(session_id, snapshot, self._lease)

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """As ``SessionStore.update_data_if``, fenced: the lease is checked first, then
        the revision, under the one lock of the write.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
            RevisionConflictError: the session is at another revision.
        """
        check_revision(revision)
        return await self._sessions._update_data(session_id, snapshot, self._lease, revision)

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """As ``SessionStore.finalize``, fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
        """
        await self._sessions._finalize(session_id, summary, self._lease)

    async def put(self, session: Session) -> None:
        """As ``SessionStore.put``, fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was written.
        """
        await self._sessions._put(session, self._lease)

    async def delete_session(self, session_id: str) -> bool:
        """As ``SessionStore.delete_session`` (session data only), fenced.

        Raises:
            LeaseLostError: as for :meth:`update_data`; nothing was deleted.
        """
        return await self._sessions._delete_session(session_id, self._lease)

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

    Besides the session writes, appends to the leased session are fenced: the
    lease check and the append run under the session store's lock with the
    step store's lock taken inside it. Nothing takes them in the other order,
    so they cannot deadlock. ``last_n`` and ``all`` pass straight through.
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
            return
        sessions, steps = self._sessions, self._steps
        await call_starts()
        # Inline checks (the same, in the same order): every step of a leased run comes here.
        with sessions._lock:
            if sessions._closed:
                sessions._check_open()
            self._check_fence()
            with steps._lock:
                if steps._closed:
                    steps._check_open()
                trace = steps._steps.get(step.session_id)
                if trace is None:
                    steps._steps[step.session_id] = [step]
                else:
                    trace.append(step)
        await call_ends()

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
        leased = self._lease.session_id
        for step in batch:  # a plain loop: a generator per batch costs more than the test
            if step.session_id == leased:
                break
        else:
            await self._steps.append_many(batch)
            return
        sessions, steps_store = self._sessions, self._steps
        await call_starts()
        with sessions._lock:
            if sessions._closed:
                sessions._check_open()
            self._check_fence()
            with steps_store._lock:
                if steps_store._closed:
                    steps_store._check_open()
                steps_store._extend(batch)
        await call_ends()

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """As ``StepStore.last_n``; not fenced."""
        return await self._steps.last_n(session_id, n)

    async def all(self, session_id: str) -> list[RunStep]:
        """As ``StepStore.all``; not fenced."""
        return await self._steps.all(session_id)
