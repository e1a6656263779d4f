"""Session leases on the SQL stores: the lease calls and how a stored lease row is judged.

Each backend keeps one row per session ever leased (``leases``: owner, token
and expiry, the expiry ``NULL`` once released) and never deletes it, so a
session's tokens strictly increase over the database's life. Its
:class:`LeaseOps` run each call as one transaction; the rules they share
(what is lost, released or never granted) are ``agentloop``'s
(``check_granted``, ``check_fence``, ``check_renewable``), so both backends
judge a lease exactly as ``agentloopmem`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from agentloop import Lease, StoreClosedError, validate_session_id
from agentloop._shared import check_seconds, preview, validate_owner
from agentloopsql._jobs import IdempotentWrite
from agentloopsql._worker import Workers

ConnT = TypeVar("ConnT")
ConnT_contra = TypeVar("ConnT_contra", contravariant=True)
R = TypeVar("R")


class Held(NamedTuple):
    """A session's lease row as stored: its latest grant (an ``agentloop`` ``Grant``)."""

    owner: str
    token: int
    released: bool


class LeaseOps(Protocol[ConnT_contra]):
    """The lease SQL of one backend; each call is one transaction's work."""

    def acquire_lease(
        self, conn: ConnT_contra, session_id: str, owner: str, ttl: float
    ) -> tuple[int, datetime] | None:
        """The granted token and expiry, or ``None`` if another owner holds a live lease."""
        ...

    def renew_lease(self, conn: ConnT_contra, lease: Lease, ttl: float) -> datetime:
        """The new expiry; raises as ``agentloop._lease_rules.check_renewable`` says."""
        ...

    def release_lease(self, conn: ConnT_contra, lease: Lease) -> None:
        """Mark ``lease`` released if it is still the session's.

        Raises as ``agentloop._lease_rules.check_granted`` says.
        """
        ...

    def fenced_write(self, conn: ConnT_contra, lease: Lease, write: Callable[[Any], R]) -> R:
        """``write(conn)`` in the transaction that checked ``lease`` (``check_fence``).

        ``write`` takes the same ``conn`` (typed ``Any``: a protocol's
        contravariant connection type cannot appear in a callback's arguments).
        """
        ...


def check_lease(lease: object) -> Lease:
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, got {preview(lease)}")
    return lease


class LeaseMethods(Generic[ConnT]):
    """``SupportsLease`` for a SQL store: argument checks, then one transaction per call.

    Each call queues to the store's workers as an idempotent write (repeating
    one after a lost connection gives the same outcome: the holder
    re-acquiring keeps its token), so cancellation follows the store's rule:
    a cancelled call granted, extended or released nothing, or happened whole.
    """

    _ops: LeaseOps[ConnT]
    _workers: Workers[ConnT]
    _closed: bool

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    def _fence(
        self, fence: Lease | None, session_id: str, write: Callable[[ConnT], R]
    ) -> Callable[[ConnT], R]:
        """``write``, checked against ``fence`` in its transaction if it covers ``session_id``."""
        if fence is None or fence.session_id != session_id:
            return write
        ops = self._ops
        return lambda conn: ops.fenced_write(conn, fence, write)

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

        **Cancellation handling**: all-or-nothing (see ``SqlStoreBase``).
        """
        validate_session_id(session_id)
        validate_owner(owner)
        seconds = check_seconds(ttl, "ttl")
        ops = self._ops
        granted = await self._workers.call(
            IdempotentWrite(lambda conn: ops.acquire_lease(conn, session_id, owner, seconds))
        )
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

        **Cancellation handling**: all-or-nothing (see ``SqlStoreBase``).
        """
        check_lease(lease)
        seconds = check_seconds(ttl, "ttl")
        ops = self._ops
        expires_at = await self._workers.call(
            IdempotentWrite(lambda conn: ops.renew_lease(conn, lease, seconds))
        )
        return Lease(lease.session_id, lease.owner, lease.token, expires_at)

    async def release_lease(self, lease: Lease) -> None:
        """Free ``lease`` so the next ``acquire_lease`` succeeds at once.

        Idempotent, and a no-op for a lease acquired again since. A later
        acquire (by any owner, this one too) gets a new, larger token.

        Raises:
            TypeError, ValueError: ``lease`` is not a ``Lease`` this store granted.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; the lease is still held.

        **Cancellation handling**: all-or-nothing (see ``SqlStoreBase``).
        """
        check_lease(lease)
        ops = self._ops
        await self._workers.call(IdempotentWrite(lambda conn: ops.release_lease(conn, lease)))
