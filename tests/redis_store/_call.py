"""How every public call of the Redis stores runs under asyncio: cancelled before, or whole.

A store call does its checks, then reaches :func:`run_call`, which hands the
Redis round trip to :func:`agentloop.run_whole`: a cancellation of any
source lands at its first schedule point, *before* anything is sent (the
call did nothing); once sent, the round trip runs to its end and the
cancellation lands at the caller's next suspension. So a call that returns
has wholly happened, a call that raises the cancellation did nothing, and no
command is ever left half-read on a pooled connection (redis-py swallows a
cancellation that lands mid-read). Every round trip is bounded by the
client's socket timeout, and by :data:`CALL_TIMEOUT` whatever it does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.exceptions
import trio

from agentloop import StoreClosedError, StoreUnavailableError, run_whole

T = TypeVar("T")

CALL_TIMEOUT = 30.0
"""Seconds one call may take in all (a wait for a pooled connection, then the round trip)."""


def check_backend(what: str) -> None:
    """``RuntimeError`` under trio: redis.asyncio needs a running asyncio loop."""
    if trio.lowlevel.in_trio_run():
        raise RuntimeError(f"{what} is asyncio-native (redis.asyncio): run it under asyncio")


async def run_call(closed: Callable[[], bool], what: str, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work()`` (one Redis round trip) as described in the module docstring.

    Raises:
        StoreClosedError: ``closed()`` was true at the start; nothing was sent.
        StoreUnavailableError: Redis could not be reached or timed out.
    """

    async def unless_closed() -> T:
        if closed():
            raise StoreClosedError(f"{what} is closed")
        return await work()

    try:
        return await run_whole(unless_closed, seconds=CALL_TIMEOUT)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, TimeoutError) as exc:
        raise StoreUnavailableError(f"{what}: Redis unavailable: {exc}", exc) from exc
