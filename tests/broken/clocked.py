"""Broken lease stores only a clock the contract controls catches (``session.lease-clock.*``).

Each is :class:`~broken.leases.Leased` with one expiry rule kept at the wrong
boundary or from the wrong instant; with real time and a short ttl the other
lease clauses cannot tell.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from agentloop import Lease, LeaseLostError

from .leases import Leased, _check_lease, _Held


class LiveAtExpiresAt(Leased):
    """A lease counts as live at expires_at exactly (`now <= expires_at`)."""

    def live(self, held: _Held, now: datetime) -> bool:
        return not held.released and now <= held.expires_at


class RenewRefusesExpired(Leased):
    """renew refuses a lease that merely expired, though nobody acquired it since."""

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        held = self.leases.get(lease.session_id) if isinstance(lease, Lease) else None
        if held is not None and held.token == lease.token and self.now() >= held.expires_at:
            raise LeaseLostError(f"lease {lease.token} of {lease.session_id!r} expired")
        return await super().renew_lease(lease, ttl)


class RenewFromOldExpiry(Leased):
    """renew extends the old expires_at by ttl instead of counting ttl from now."""

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        renewed = await super().renew_lease(lease, ttl)
        held = self.leases[lease.session_id]
        held.expires_at = lease.expires_at + timedelta(seconds=ttl)
        return attrs.evolve(renewed, expires_at=held.expires_at)


class RefusedRenewExtends(Leased):
    """A refused renew (the lease was taken over) still writes the new expiry to the row,
    extending the new holder's lease: the UPDATE runs before the token check."""

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        _check_lease(lease)
        held = self.leases.get(lease.session_id)
        if held is not None and held.token != lease.token:
            held.expires_at = self.now() + timedelta(seconds=ttl)
        return await super().renew_lease(lease, ttl)
