"""How every public call of the Redis stores runs under asyncio: cancelled before, or whole.

A store call does its checks, then reaches :func:`run_call`, which

1. yields once (``asyncio.sleep(0)``): a cancellation of any source lands
   here, *before* anything is sent, so a call cancelled there did nothing;
2. checks the store is open;
3. runs the Redis round trip to completion in its own task, shielded twice:
   from anyio cancel scopes (``anyio.CancelScope(shield=True)``, which
   re-delivers the scope's cancellation at the caller's next checkpoint) and
   from native cancellation (``Task.cancel()``, ``asyncio.timeout()``:
   ``asyncio.shield``; a swallowed request is re-armed with ``uncancel()`` +
   ``cancel()``, so the task's cancel count is unchanged and the request
   lands at its next suspension).

So a call that returns has wholly happened, a call that raises the
cancellation did nothing, and no command is ever left half-read on a pooled
connection. Every round trip is bounded by the client's socket timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import redis.exceptions
import trio

from agentloop import StoreClosedError, StoreUnavailableError

T = TypeVar("T")


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
    await asyncio.sleep(0)
    if closed():
        raise StoreClosedError(f"{what} is closed")
    try:
        with anyio.CancelScope(shield=True):  # never cancelled itself: swallows nothing
            result = await _to_completion(work)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise StoreUnavailableError(f"{what}: Redis unavailable: {exc}", exc) from exc
    return result


async def _to_completion(work: Callable[[], Awaitable[T]]) -> T:
    inner = asyncio.ensure_future(work())
    swallowed = False
    try:
        while True:
            try:
                return await asyncio.shield(inner)
            except asyncio.CancelledError:
                if inner.cancelled():  # the loop itself is shutting down
                    swallowed = False
                    raise
                swallowed = True
    finally:
        if swallowed:
            me = asyncio.current_task()
            assert me is not None
            me.uncancel()
            me.cancel()
