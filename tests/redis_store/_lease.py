"""Session leases in Redis: the lease methods of ``RedisSessionStore``.

Each session's latest grant is a hash judged by one Lua script per call, on
the Redis server's clock (``TIME``), so every handle and process agrees on
expiry. The grant is never deleted: tokens grow over the session's whole life.
"""

from __future__ import annotations

import attrs

from agentloop import Lease, LeaseLostError, validate_session_id

from ._base import REDIS_URL, RedisBase
from ._checks import Grant, check_lease, check_owner, check_ttl, granted, preview, renewable
from ._codec import from_micros
from ._scripts import ACQUIRE, RELEASE, RENEW


def grant(owner: str, token: str, released: str) -> Grant | None:
    """The grant from a script's strings; ``None`` when the session was never leased."""
    if token == "":
        return None
    return Grant(owner, int(token), released == "1")


def _micros(ttl: float) -> int:
    return max(1, round(check_ttl(ttl) * 1_000_000))


class LeaseMethods(RedisBase):
    """``acquire_lease``, ``renew_lease`` and ``release_lease``; each one atomic script.

    Lease calls touch only ``<prefix>:lease:<id>``: no session is created, no
    revision or write order moves. A cancelled lease call did not happen.
    """

    def __init__(self, prefix: str, url: str = REDIS_URL) -> None:
        super().__init__(prefix, url)
        self._acquire = self._redis.register_script(ACQUIRE)
        self._renew = self._redis.register_script(RENEW)
        self._release = self._redis.register_script(RELEASE)

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """The session's lease for ``owner``, expiring ``ttl`` seconds from now.

        Free, released or expired: granted with a larger token. Live and held by
        ``owner``: same token, new expiry. Held live by another owner: ``None``.

        Raises:
            TypeError, ValueError: a bad session id, owner or ttl.
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        check_owner(owner)
        keys, args = [self._key("lease", session_id)], [owner, _micros(ttl)]
        token, expires = await self._call(lambda: self._acquire(keys=keys, args=args))
        if int(token) == 0:
            return None
        return Lease(session_id, owner, int(token), from_micros(expires))

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """``lease`` with the same token, expiring ``ttl`` seconds from now.

        Raises:
            LeaseLostError: the lease was acquired again since, or released.
            TypeError, ValueError: not a ``Lease`` this store granted, or a bad ttl.
            StoreClosedError: the store was closed.
        """
        check_lease(lease)
        keys = [self._key("lease", lease.session_id)]
        args = [lease.owner, str(lease.token), _micros(ttl)]
        got = await self._call(lambda: self._renew(keys=keys, args=args))
        if got[0] == "ok":
            return attrs.evolve(lease, expires_at=from_micros(got[1]))
        renewable(lease, grant(*got[1:]))
        raise LeaseLostError(f"lease {lease.token} of {preview(lease.session_id)} is not held")

    async def release_lease(self, lease: Lease) -> None:
        """Free ``lease`` so the next acquire succeeds at once; idempotent; a no-op
        for a lease acquired again since.

        Raises:
            TypeError, ValueError: not a ``Lease`` this store granted.
            StoreClosedError: the store was closed.
        """
        check_lease(lease)
        keys = [self._key("lease", lease.session_id)]
        args = [lease.owner, str(lease.token)]
        got = await self._call(lambda: self._release(keys=keys, args=args))
        granted(lease, grant(*got))
