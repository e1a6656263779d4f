"""Session revisions in memory: the revision table and the revision methods of ``SessionStore``."""

from __future__ import annotations

from agentloop import Lease, RevisionConflictError, validate_session_id
from agentloop._shared import call_ends, call_starts, check_revision, preview
from agentloopmem._lease import LeaseMethods


class RevisionTable:
    """Each session's revision; every method runs with the store's lock held.

    An entry is never dropped by ``delete_session`` (a delete bumps it), so a
    session's revisions strictly increase over the store's whole life, as its
    lease tokens do.
    """

    def __init__(self) -> None:
        self._revisions: dict[str, int] = {}

    def clear(self) -> None:
        self._revisions.clear()

    def current(self, session_id: str) -> int:
        """The session's revision; 0 if it was never written."""
        return self._revisions.get(session_id, 0)

    def check(self, session_id: str, expected: int) -> None:
        """``RevisionConflictError`` unless the session is at revision ``expected``."""
        current = self._revisions.get(session_id, 0)
        if current != expected:
            raise RevisionConflictError(
                f"session {preview(session_id)} is at revision {current}, not {expected}; "
                "nothing was written (read the session again and retry)"
            )

    def bump(self, session_id: str) -> int:
        """Make the session's revision larger than any before; the new revision."""
        revision = self._revisions.get(session_id, 0) + 1
        self._revisions[session_id] = revision
        return revision


class RevisionMethods(LeaseMethods):
    """``revision`` and ``update_data_if`` over a ``RevisionTable``.

    The store bumps the table on every session write (``put``, ``update_data``,
    ``finalize``, ``update_data_if``, and ``delete_session`` of a session that
    existed), under the lock that guards the write; lease calls never touch it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._revisions = RevisionTable()

    async def _update_data(
        self,
        session_id: str,
        snapshot: str | None,
        fence: Lease | None,
        expected: int | None = None,
    ) -> int:
        raise NotImplementedError

    async def revision(self, session_id: str) -> int:
        """The session's revision: 0 if never written, larger after every session write.

        Only order and equality mean anything. A deleted session keeps a
        revision larger than any it had, so a stale ``update_data_if`` fails.

        Raises:
            TypeError, ValueError: a bad session id.
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        await call_starts()
        with self._lock:
            self._check_open()
            revision = self._revisions.current(session_id)
        await call_ends()
        return revision

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
        return await self._update_data(session_id, snapshot, None, revision)
