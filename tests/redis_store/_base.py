"""What both Redis stores share: the client, the key prefix, the closed flag, ``aclose``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio

from agentloop import StoreUnavailableError, run_whole

from ._call import CALL_TIMEOUT, check_backend, run_call

T = TypeVar("T")

REDIS_URL = "redis://127.0.0.1:6379/0"
"""The Redis server the example stores and their tests use."""

SOCKET_TIMEOUT = 10.0
"""Seconds one Redis round trip may take before the call raises ``StoreUnavailableError``."""


MAX_CONNECTIONS = 32
"""Connections one store handle opens at most; more concurrent calls wait for one."""


class RedisBase:
    """One ``redis.asyncio`` client (its own connection pool) and the keys under ``prefix``.

    Every key the store writes starts with ``prefix + ":"``; two stores with the
    same prefix are two handles onto the same data. ``aclose`` closes the
    client only: the data stays for other handles (the harness deletes it).

    Raises:
        RuntimeError: constructed under trio (redis.asyncio is asyncio-only).
    """

    def __init__(self, prefix: str, url: str = REDIS_URL) -> None:
        check_backend(type(self).__name__)
        self.prefix = prefix
        self.url = url
        self._closed = False
        # A blocking pool: a burst of concurrent calls queues for a connection
        # (up to SOCKET_TIMEOUT) instead of failing with "Too many connections".
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=SOCKET_TIMEOUT,
            decode_responses=True,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
        )
        self._redis: Any = redis.asyncio.Redis.from_pool(pool)

    def _key(self, kind: str, session_id: str = "") -> str:
        return f"{self.prefix}:{kind}:{session_id}"

    def _is_closed(self) -> bool:
        return self._closed

    async def _call(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run one round trip by the store-call convention (``_call.run_call``)."""
        return await run_call(self._is_closed, type(self).__name__, work)

    async def aclose(self) -> None:
        """Close the client; every later call raises ``StoreClosedError``. Idempotent.

        The keys stay (another handle may read them). Closing runs through
        :func:`agentloop.run_whole`: a cancellation before it starts leaves the
        store open; once started, the client's connections are all closed
        whatever cancels the caller (an anyio shield would not stop
        ``Task.cancel()``, which cut the pool's disconnect short and left its
        sockets open, closed only by the garbage collector).

        Raises:
            StoreUnavailableError: closing took longer than ``CALL_TIMEOUT``.
        """

        async def close() -> None:
            if self._closed:
                return
            self._closed = True
            await self._redis.aclose()

        try:
            await run_whole(close, seconds=CALL_TIMEOUT)
        except TimeoutError as exc:
            raise StoreUnavailableError(f"{type(self).__name__}: aclose timed out", exc) from exc
