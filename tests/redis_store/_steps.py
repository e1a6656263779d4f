"""``RedisStepStore``: one Redis list per session, appended with ``RPUSH``."""

from __future__ import annotations

from collections.abc import Sequence

from agentloop import RunStep, validate_n, validate_session_id

from ._base import RedisBase
from ._checks import check_steps, preview
from ._codec import decode_step, encode_step


class RedisStepStore(RedisBase):
    """Steps in a Redis list per session (key ``<prefix>:steps:<session id>``).

    Implements ``StepStore`` and the ``append_many``, ``all``,
    ``delete_session`` and ``aclose`` capabilities, under asyncio only. Order
    is the list's order, which is insertion order; ``last_n`` is one
    ``LRANGE -n -1``, O(n) however long the history. ``append_many`` is one
    ``MULTI``/``EXEC`` transaction: all or nothing, nothing interleaved.

    **Cancellation**: a cancelled call did nothing; a call that returns did
    everything (see ``_call``).
    """

    async def append(self, step: RunStep) -> None:
        """Append ``step`` to its session's trace.

        Raises:
            TypeError: ``step`` is not a ``RunStep``.
            StoreClosedError: the store was closed.
            StoreUnavailableError: Redis could not be reached.
        """
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        key, value = self._key("steps", step.session_id), encode_step(step)
        await self._call(lambda: self._redis.rpush(key, value))

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Append every step of ``steps`` in order in one transaction: all or nothing.

        Raises:
            TypeError: ``steps`` is not a sequence of ``RunStep`` (naming the
                first bad position); nothing is appended.
            StoreClosedError: the store was closed.
        """
        batch = [(self._key("steps", s.session_id), encode_step(s)) for s in check_steps(steps)]

        async def work() -> None:
            if not batch:
                return
            async with self._redis.pipeline(transaction=True) as pipe:
                for key, value in batch:
                    pipe.rpush(key, value)
                await pipe.execute()

        await self._call(work)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps of the session, oldest first; ``[]`` when unknown.

        Raises:
            TypeError, ValueError: ``n`` is not an int >= 1, or a bad session id.
            StoreClosedError: the store was closed.
        """
        validate_n(n)
        validate_session_id(session_id)
        key = self._key("steps", session_id)
        start = -min(n, 2**62)  # LRANGE takes signed 64-bit indexes; no list is that long
        raw: list[str] = await self._call(lambda: self._redis.lrange(key, start, -1))
        return [decode_step(session_id, text) for text in raw]

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step of the session in insertion order; ``[]`` when unknown."""
        validate_session_id(session_id)
        key = self._key("steps", session_id)
        raw: list[str] = await self._call(lambda: self._redis.lrange(key, 0, -1))
        return [decode_step(session_id, text) for text in raw]

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's steps; ``True`` if it had any."""
        validate_session_id(session_id)
        key = self._key("steps", session_id)
        deleted: int = await self._call(lambda: self._redis.delete(key))
        return deleted > 0
