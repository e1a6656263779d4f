"""Broken lease stores, each keeping one lease promise badly, and ``Leased``, the correct one.

``Leased`` adds a lease table and fenced views to ``GoodBoth``, so the reference
store passes every clause, lease clauses included. Its lease logic is a few
overridable steps (``live``, ``next_token``, ``grant``, ``fence``); each broken
store changes one of them the way a real store gets it wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import attrs

from agentloop import Lease, LeaseLostError, RunStep, Session, validate_session_id
from agentloop._shared import check_seconds, validate_owner

from ._good import GoodBoth, unused


def _wall_clock() -> datetime:
    return datetime.now(UTC)


@attrs.define
class _Held:
    owner: str
    token: int
    expires_at: datetime
    released: bool = False


def _check_lease(lease: object) -> Lease:
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, got {lease!r:.60}")
    return lease


class Fenced:
    """A view of a ``Leased`` store: writes to the leased session check the lease first.

    The check and the write run with no checkpoint between them, so on one
    event-loop thread nothing can take the lease in between. Everything else passes
    straight to the store.
    """

    def __init__(self, store: Leased, lease: Lease) -> None:
        self.store = store
        self.lease = lease

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def guard(self, session_id: str) -> None:
        """Refuse a write to the leased session once its lease was acquired again."""
        if session_id == self.lease.session_id:
            self.store.fence(self.lease)

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """As the store's, fenced."""
        await self.guard(session_id)
        await self.store.update_data(session_id, snapshot)

    async def finalize(self, session_id: str, summary: Any) -> None:
        """As the store's, fenced."""
        await self.guard(session_id)
        await self.store.finalize(session_id, summary)

    async def put(self, session: Session) -> None:
        """As the store's, fenced."""
        await self.guard(getattr(session, "id", ""))
        await self.store.put(session)

    async def append(self, step: RunStep) -> None:
        """As the store's, fenced."""
        await self.guard(getattr(step, "session_id", ""))
        await self.store.append(step)

    async def append_many(self, steps: list[RunStep]) -> None:
        """As the store's, fenced whole when any step is the leased session's."""
        for step in list(steps) if isinstance(steps, list | tuple) else []:
            await self.guard(getattr(step, "session_id", ""))
        await self.store.append_many(steps)

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """As the store's, fenced (the lease is checked before the revision)."""
        await self.guard(session_id)
        return await self.store.update_data_if(session_id, snapshot, revision)

    async def delete_session(self, session_id: str) -> bool:
        """As the store's, fenced."""
        await self.guard(session_id)
        return await self.store.delete_session(session_id)


class Leased(GoodBoth):
    """A correct store with every capability, session leases and fenced views included."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__()
        self.leases: dict[str, _Held] = {}
        self.clock = clock or _wall_clock

    def now(self) -> datetime:
        """The time leases are judged by: the clock given, else the wall clock."""
        return self.clock()

    def live(self, held: _Held, now: datetime) -> bool:
        """Whether ``held`` still blocks other owners."""
        return not held.released and now < held.expires_at

    def next_token(self, held: _Held | None) -> int:
        """The token of the session's next acquisition."""
        return 1 if held is None else held.token + 1

    def grant(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """The lease-table half of ``acquire_lease`` (no checkpoint inside)."""
        now = self.now()
        held = self.leases.get(session_id)
        if held is not None and self.live(held, now):
            if held.owner != owner:
                return None
        else:
            held = self.leases[session_id] = _Held(owner, self.next_token(held), now)
        held.expires_at = now + timedelta(seconds=ttl)
        return Lease(session_id, owner, held.token, held.expires_at)

    def fence(self, lease: Lease) -> _Held:
        """The session's entry; ``LeaseLostError`` if its lease was acquired again since."""
        held = self.leases.get(lease.session_id)
        if held is None or held.token != lease.token:
            raise LeaseLostError(f"lease {lease.token} of {lease.session_id!r} was taken over")
        return held

    def check(self, session_id: str, owner: str, ttl: float) -> None:
        """Argument checks of ``acquire_lease``."""
        validate_session_id(session_id)
        validate_owner(owner)
        check_seconds(ttl, "ttl")

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """A free or expired lease with a larger token, the holder's own, or None."""
        self.check(session_id, owner, ttl)
        await self.enter()
        lease = self.grant(session_id, owner, ttl)
        await self.leave()
        return lease

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """The same lease expiring later; LeaseLostError once acquired again or released."""
        _check_lease(lease)
        check_seconds(ttl, "ttl")
        await self.enter()
        held = self.fence(lease)
        if held.released:
            raise LeaseLostError(f"lease {lease.token} of {lease.session_id!r} was released")
        held.expires_at = self.now() + timedelta(seconds=ttl)
        await self.leave()
        return attrs.evolve(lease, expires_at=held.expires_at)

    async def release_lease(self, lease: Lease) -> None:
        """Free the lease; idempotent; a no-op once acquired again."""
        _check_lease(lease)
        await self.enter()
        held = self.leases.get(lease.session_id)
        if held is not None and held.token == lease.token:
            held.released = True
        await self.leave()

    def fenced(self, lease: Lease) -> Any:
        """A view whose writes to ``lease.session_id`` are checked against ``lease``."""
        return Fenced(self, _check_lease(lease))


class NoFencing(Leased):
    """fenced() returns the store itself: no write is ever checked."""

    def fenced(self, lease: Lease) -> Any:
        unused(lease)
        return self


class TokenReusedAfterRelease(Leased):
    """A released lease's token is handed to the next owner (only expiry bumps it)."""

    def next_token(self, held: _Held | None) -> int:
        if held is not None and held.released:
            return held.token
        return super().next_token(held)


class IgnoresExpiry(Leased):
    """A lease is held until released: an expired one is never taken over."""

    def live(self, held: _Held, now: datetime) -> bool:
        unused(now)
        return not held.released


class _FenceThenAwait(Fenced):
    async def guard(self, session_id: str) -> None:
        await super().guard(session_id)
        await anyio.sleep(0.01)  # the write goes out in another round trip


class FenceOutsideTheWrite(Leased):
    """Fenced writes check, await a round trip, then write: a takeover in between is missed."""

    def fenced(self, lease: Lease) -> Any:
        return _FenceThenAwait(self, lease)


class _SessionOnlyView(Fenced):
    """A fenced view without the step store's methods."""

    def __getattr__(self, name: str) -> Any:
        if name in ("last_n", "all"):
            raise AttributeError(name)
        return super().__getattr__(name)

    @property
    def append(self) -> Any:
        raise AttributeError("append")


class ViewWithoutAppends(Leased):
    """fenced() gives a session-only view: the old holder's appends go to the store unchecked."""

    def fenced(self, lease: Lease) -> Any:
        return _SessionOnlyView(self, lease)


class _LegacyView(Fenced):
    """A fenced view written before batches and revisions: it forgets to fence them."""

    async def append_many(self, steps: list[RunStep]) -> None:
        await self.store.append_many(steps)

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        return await self.store.update_data_if(session_id, snapshot, revision)


class BatchesUnfenced(Leased):
    """The fenced view checks single writes but lets append_many and update_data_if through."""

    def fenced(self, lease: Lease) -> Any:
        return _LegacyView(self, lease)


class RenewAfterTakeover(Leased):
    """renew_lease extends whatever lease the session has, not checking the token."""

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        await self.enter()
        held = self.leases[lease.session_id]
        held.expires_at = datetime.now(UTC) + timedelta(seconds=ttl)
        held.released = False
        await self.leave()
        return attrs.evolve(lease, expires_at=held.expires_at)


class RenewForgets(Leased):
    """renew_lease returns a later expiry but the store keeps the old one."""

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        await self.enter()
        self.fence(lease)
        await self.leave()
        return attrs.evolve(lease, expires_at=datetime.now(UTC) + timedelta(seconds=ttl))


class ReleaseFreesAnyone(Leased):
    """release_lease frees the session's lease whoever holds it now."""

    async def release_lease(self, lease: Lease) -> None:
        await self.enter()
        held = self.leases.get(lease.session_id)
        if held is not None:
            held.released = True
        await self.leave()


class SecondOwner(Leased):
    """acquire_lease checks the lease is free, awaits, then grants: racing owners all win."""

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        self.check(session_id, owner, ttl)
        await self.enter()
        held = self.leases.get(session_id)
        if held is not None and self.live(held, datetime.now(UTC)) and held.owner != owner:
            await self.leave()
            return None
        await anyio.lowlevel.checkpoint()  # the grant goes out in another round trip
        now = datetime.now(UTC)
        token = self.next_token(self.leases.get(session_id))
        self.leases[session_id] = _Held(owner, token, now + timedelta(seconds=ttl))
        await self.leave()
        return Lease(session_id, owner, token, now + timedelta(seconds=ttl))


class LeaseCreatesSession(Leased):
    """acquire_lease upserts the session row (and moves it to the top of list_sessions)."""

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        lease = await super().acquire_lease(session_id, owner, ttl)
        self.write(session_id)
        return lease


class AcceptsAnyTtl(Leased):
    """Never checks ttl: 0 or a negative ttl grants a lease that is already expired."""

    def check(self, session_id: str, owner: str, ttl: float) -> None:
        validate_session_id(session_id)
        validate_owner(owner)
        unused(ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        await self.enter()
        held = self.fence(lease)
        held.expires_at = datetime.now(UTC) + timedelta(seconds=float(ttl))
        await self.leave()
        return attrs.evolve(lease, expires_at=held.expires_at)


class GrantsThenCancels(Leased):
    """acquire_lease grants, then hits a cancellable checkpoint: a cancelled call took the lease."""

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        self.check(session_id, owner, ttl)
        await self.enter()
        lease = self.grant(session_id, owner, ttl)
        await anyio.lowlevel.checkpoint()
        return lease


class RenewByOwner(Leased):
    """renew_lease checks the owner, not the token: the holder's older receipt (from before
    it released and acquired again) renews and comes back with its stale token."""

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        _check_lease(lease)
        check_seconds(ttl, "ttl")
        await self.enter()
        held = self.leases.get(lease.session_id)
        if held is None or held.owner != lease.owner or held.released:
            raise LeaseLostError(f"lease {lease.token} of {lease.session_id!r} was taken over")
        held.expires_at = self.now() + timedelta(seconds=ttl)
        await self.leave()
        return attrs.evolve(lease, expires_at=held.expires_at)


class ReleaseByOwner(Leased):
    """release_lease checks the owner, not the token: the holder's older receipt frees the
    lease it holds now."""

    async def release_lease(self, lease: Lease) -> None:
        _check_lease(lease)
        await self.enter()
        held = self.leases.get(lease.session_id)
        if held is not None and held.owner == lease.owner:
            held.released = True
        await self.leave()
