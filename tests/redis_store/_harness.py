"""Harnesses for the contract: fresh stores under one random prefix, deleted by ``cleanup``."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import redis.asyncio

from agentlooptest import Harness

from ._base import REDIS_URL
from ._sessions import RedisSessionStore
from ._steps import RedisStepStore


async def delete_prefix(prefix: str, url: str = REDIS_URL) -> int:
    """Delete every key starting with ``prefix + ":"``; how many there were."""
    client: Any = redis.asyncio.Redis.from_url(url)
    try:
        found = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for start in range(0, len(found), 500):
            await client.unlink(*found[start : start + 500])
        return len(found)
    finally:
        await client.aclose()


def make_harness(step_store: Callable[[str], Any] = RedisStepStore) -> Harness:
    """A ``Harness`` whose every store gets its own prefix under one random run prefix.

    ``reopen(store)`` opens a second handle on the store's prefix; ``cleanup``
    deletes every key of the run, so a failed or killed run leaves nothing.
    ``step_store(prefix)`` builds the step stores (the broken twin swaps it).
    """
    run = f"agentloop-example:{secrets.token_hex(6)}"
    count = iter(range(1 << 62))

    def prefix() -> str:
        return f"{run}:{next(count)}"

    async def new_step_store() -> Any:
        return step_store(prefix())

    async def new_session_store() -> RedisSessionStore:
        return RedisSessionStore(prefix())

    async def reopen(store: Any) -> Any:
        return type(store)(store.prefix, store.url)

    async def cleanup() -> None:
        await delete_prefix(run)

    return Harness(
        new_step_store=new_step_store,
        new_session_store=new_session_store,
        reopen=reopen,
        cleanup=cleanup,
    )


def harness() -> Harness:
    """The CLI target ``tests.redis_store:harness``: both Redis stores, a fresh run prefix."""
    return make_harness()
