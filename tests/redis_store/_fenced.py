"""``FencedRedisSessionStore``: a session store view whose writes a lease fences."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentloop import FinalizeSummary, Lease, Session, SessionInfo

from ._checks import check_revision

if TYPE_CHECKING:
    from ._sessions import RedisSessionStore


class FencedRedisSessionStore:
    """Made by ``RedisSessionStore.fenced(lease)``: every protocol and capability of
    the store; ``put``, ``update_data``, ``update_data_if``, ``finalize`` and
    ``delete_session`` of ``lease.session_id`` raise ``LeaseLostError`` and change
    nothing once the lease was acquired again since (checked inside the write's
    script). Reads, lease calls and ``aclose`` pass straight to the store.
    """

    def __init__(self, store: RedisSessionStore, lease: Lease) -> None:
        self._store = store
        self.lease = lease

    async def get(self, session_id: str) -> Session:
        """As ``RedisSessionStore.get``."""
        return await self._store.get(session_id)

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """As ``RedisSessionStore.get_many``."""
        return await self._store.get_many(session_ids)

    async def exists(self, session_id: str) -> bool:
        """As ``RedisSessionStore.exists``."""
        return await self._store.exists(session_id)

    async def revision(self, session_id: str) -> int:
        """As ``RedisSessionStore.revision``."""
        return await self._store.revision(session_id)

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """As ``RedisSessionStore.final``."""
        return await self._store.final(session_id)

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """As ``RedisSessionStore.list_sessions``."""
        return await self._store.list_sessions(limit=limit)

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """As ``RedisSessionStore.update_data``, fenced."""
        await self._store._update_data(session_id, snapshot, self.lease)

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """As ``RedisSessionStore.update_data_if``, fenced (lease first, then revision)."""
        check_revision(revision)
        return await self._store._update_data(session_id, snapshot, self.lease, revision)

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """As ``RedisSessionStore.finalize``, fenced."""
        await self._store._finalize(session_id, summary, self.lease)

    async def put(self, session: Session) -> None:
        """As ``RedisSessionStore.put``, fenced."""
        await self._store._put(session, self.lease)

    async def delete_session(self, session_id: str) -> bool:
        """As ``RedisSessionStore.delete_session``, fenced."""
        return await self._store._delete_session(session_id, self.lease)

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """As ``RedisSessionStore.acquire_lease``."""
        return await self._store.acquire_lease(session_id, owner, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """As ``RedisSessionStore.renew_lease``."""
        return await self._store.renew_lease(lease, ttl)

    async def release_lease(self, lease: Lease) -> None:
        """As ``RedisSessionStore.release_lease``."""
        await self._store.release_lease(lease)

    def fenced(self, lease: Lease) -> FencedRedisSessionStore:
        """As ``RedisSessionStore.fenced``."""
        return self._store.fenced(lease)

    async def aclose(self) -> None:
        """Close the store this view wraps."""
        await self._store.aclose()
