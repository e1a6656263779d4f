"""``RedisStore``: one object that is both stores, so deletes and fences cover steps too."""

from __future__ import annotations

from collections.abc import Sequence

from agentloop import Lease, LeaseLostError, RunStep

from ._base import REDIS_URL
from ._checks import check_lease, check_steps, preview, still_latest
from ._codec import encode_step
from ._fenced import FencedRedisSessionStore
from ._lease import grant
from ._scripts import FENCED_APPEND
from ._sessions import RedisSessionStore
from ._steps import RedisStepStore


class RedisStore(RedisSessionStore, RedisStepStore):
    """``RedisSessionStore`` and ``RedisStepStore`` in one object, on one prefix.

    Implements both protocols and every capability of each. ``delete_session``
    drops the session's data, summaries and steps in one script; ``fenced``
    views also fence appends to the leased session, the lease check and the
    append in one script.
    """

    def __init__(self, prefix: str, url: str = REDIS_URL) -> None:
        super().__init__(prefix, url)
        self._fenced_append = self._redis.register_script(FENCED_APPEND)

    def _session_keys(self, session_id: str) -> list[str]:
        return [*super()._session_keys(session_id), self._key("steps", session_id)]

    async def _append_fenced(self, batch: list[RunStep], lease: Lease) -> None:
        """Append ``batch`` in one script if ``lease`` is still its session's latest grant."""
        keys = [self._key("lease", lease.session_id)]
        keys += [self._key("steps", s.session_id) for s in batch]
        args = [lease.owner, str(lease.token), *(encode_step(s) for s in batch)]
        got = await self._call(lambda: self._fenced_append(keys=keys, args=args))
        if got[0] == "fence":
            still_latest(lease, grant(*got[1:]))
            raise LeaseLostError(f"lease {lease.token} of {preview(lease.session_id)} is lost")

    def fenced(self, lease: Lease) -> FencedRedisStore:
        """As ``RedisSessionStore.fenced``; the view's appends to the leased session are
        fenced too."""
        return FencedRedisStore(self, check_lease(lease))


class FencedRedisStore(FencedRedisSessionStore):
    """A fenced view of a ``RedisStore``: session writes and appends to the leased session
    raise ``LeaseLostError`` and change nothing once the lease was acquired again since.

    A batch with any step of the leased session is checked as a whole: a lost
    lease refuses all of it, steps of other sessions included.
    """

    def __init__(self, store: RedisStore, lease: Lease) -> None:
        super().__init__(store, lease)
        self._both = store

    async def append(self, step: RunStep) -> None:
        """As ``RedisStore.append``, fenced when ``step`` is of the leased session."""
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        if step.session_id != self.lease.session_id:
            await self._both.append(step)
        else:
            await self._both._append_fenced([step], self.lease)

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """As ``RedisStore.append_many``, fenced when any step is of the leased session."""
        batch = check_steps(steps)
        if any(s.session_id == self.lease.session_id for s in batch):
            await self._both._append_fenced(batch, self.lease)
        else:
            await self._both.append_many(batch)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """As ``RedisStore.last_n``; not fenced."""
        return await self._both.last_n(session_id, n)

    async def all(self, session_id: str) -> list[RunStep]:
        """As ``RedisStore.all``; not fenced."""
        return await self._both.all(session_id)
