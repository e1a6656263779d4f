"""Session leases in memory: the lease table and the lease methods of ``SessionStore``."""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from agentloop import Lease, validate_session_id
from agentloop._shared import (
    call_ends,
    call_starts,
    check_fence,
    check_granted,
    check_renewable,
    check_seconds,
    preview,
    trusted_builder,
    validate_owner,
)
from agentloopmem._base import MemoryStoreBase

# A lease the store grants is built from values it checked: the caller's session id
# and owner, its own token, and an expiry on its UTC clock.
_grant = trusted_builder(Lease)


@attrs.define
class _Held:
    """The latest grant of one session's lease; kept after release and expiry for its token."""

    owner: str
    token: int
    expires_at: datetime
    released: bool


class LeaseTable:
    """Each session's latest lease grant; every method runs with the store's lock held.

    An entry is never dropped (not by release, expiry or ``delete_session``), so
    a session's tokens strictly increase over the store's whole life.
    """

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def clear(self) -> None:
        self._held.clear()

    def acquire(self, session_id: str, owner: str, expires_at: datetime, now: datetime) -> int:
        """The granted token, or -1 if another owner holds a live lease."""
        held = self._held.get(session_id)
        if held is None:
            self._held[session_id] = _Held(owner, 1, expires_at, released=False)
            return 1
        if not held.released and now < held.expires_at:
            if held.owner != owner:
                return -1
            held.expires_at = expires_at
            return held.token
        held.owner, held.token, held.expires_at = owner, held.token + 1, expires_at
        held.released = False
        return held.token

    def renew(self, lease: Lease, expires_at: datetime) -> None:
        """Extend ``lease``; ``LeaseLostError`` if it was acquired again since or released."""
        held = self._held.get(lease.session_id)
        check_renewable(lease, held)
        assert held is not None
        held.expires_at = expires_at

    def release(self, lease: Lease) -> None:
        """Free ``lease`` unless it was acquired again since (then a no-op)."""
        held = self.check_granted(lease)
        if held.token == lease.token:
            held.released = True

    def latest(self, session_id: str) -> _Held | None:
        """The session's entry (its latest grant), or ``None`` before the first one."""
        return self._held.get(session_id)

    def check_granted(self, lease: Lease) -> _Held:
        """The session's entry; ``ValueError`` if this store never granted ``lease``."""
        held = self._held.get(lease.session_id)
        check_granted(lease, held)
        assert held is not None
        return held

    def check_fence(self, lease: Lease) -> _Held:
        """The session's entry; ``LeaseLostError`` if its lease was acquired again since."""
        held = self._held.get(lease.session_id)
        # The latest grant itself passes every check (every fenced write asks this).
        if held is None or held.token != lease.token or held.owner != lease.owner:
            check_fence(lease, held)
            assert held is not None
        return held


def _expiry(now: datetime, ttl: float) -> datetime:
    return now + timedelta(seconds=ttl)


class LeaseMethods(MemoryStoreBase):
    """``acquire_lease``, ``renew_lease`` and ``release_lease`` over a ``LeaseTable``.

    Expiry is judged on the store's clock (``_now``). Lease calls touch only the
    lease table: no session is created and no write order moves.
    """

    def __init__(self) -> None:
        super().__init__()
        self._leases = LeaseTable()

    def _now(self) -> datetime:
        raise NotImplementedError

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """The session's lease for ``owner``, expiring ``ttl`` seconds from now.

        A free, released or expired lease is granted with a token larger than
        any the session had; a live lease already held by ``owner`` keeps its
        token and gets the new expiry. ``None`` if another owner holds a live one.

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
        await call_starts()
        # Read before the lock (the clock is user code); a stale `now` only makes
        # a lease look live a moment longer, never frees it early.
        now = self._now()
        expires_at = _expiry(now, seconds)
        with self._lock:
            self._check_open()
            token = self._leases.acquire(session_id, owner, expires_at, now)
        await call_ends()
        if token < 0:
            return None
        return _grant(session_id, owner, token, expires_at)

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
        await call_starts()
        expires_at = _expiry(self._now(), seconds)
        with self._lock:
            self._check_open()
            self._leases.renew(lease, expires_at)
        await call_ends()
        return _grant(lease.session_id, lease.owner, lease.token, expires_at)

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
        await call_starts()
        with self._lock:
            self._check_open()
            self._leases.release(lease)
        await call_ends()


def _check_lease(lease: object) -> None:
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, got {preview(lease)}")
