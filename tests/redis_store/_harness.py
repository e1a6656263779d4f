"""Harnesses for the contract: fresh stores under one random prefix, deleted by ``cleanup``."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import redis

from agentlooptest import Harness

from ._base import REDIS_URL, SOCKET_TIMEOUT
from ._combined import RedisStore
from ._sessions import RedisSessionStore
from ._steps import RedisStepStore


def _delete_prefix(prefix: str, url: str) -> int:
    client: Any = redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT)
    try:
        found = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(found), 500):
            client.unlink(*found[start : start + 500])
        return len(found)
    finally:
        client.close()


async def delete_prefix(prefix: str, url: str = REDIS_URL) -> int:
    """Delete every key starting with ``prefix + ":"``; how many there were.

    Runs the blocking client in a worker thread, so it works under trio too:
    a run certified under the wrong backend still leaves nothing behind.
    """
    return await anyio.to_thread.run_sync(_delete_prefix, prefix, url)


def new_run() -> str:
    """A fresh, random run prefix (``agentloop-example:<12 hex digits>``)."""
    return f"agentloop-example:{secrets.token_hex(6)}"


def make_harness(
    step_store: Callable[[str], Any] = RedisStepStore,
    run: str | None = None,
    session_store: Callable[[str], Any] = RedisSessionStore,
) -> Harness:
    """A ``Harness`` whose every store gets its own prefix under the run prefix ``run``
    (a fresh :func:`new_run` by default).

    ``reopen(store)`` opens a second handle on the store's prefix; ``cleanup``
    deletes every key of the run, so a failed or killed run leaves nothing.
    ``step_store(prefix)`` and ``session_store(prefix)`` build the stores (the
    broken twin swaps the first; the combined store is both).
    """
    run = new_run() if run is None else run
    count = iter(range(1 << 62))

    def prefix() -> str:
        return f"{run}:{next(count)}"

    async def new_step_store() -> Any:
        return step_store(prefix())

    async def new_session_store() -> Any:
        return session_store(prefix())

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


def harness(run: str | None = None) -> Harness:
    """The CLI target ``tests.redis_store:harness``: the two Redis stores, keys under ``run``
    (a fresh prefix by default)."""
    return make_harness(run=run)


def combined_harness(run: str | None = None) -> Harness:
    """The CLI target ``tests.redis_store:combined_harness``: ``RedisStore`` (one object for
    both protocols) from both factories, so the one-object clauses and fenced appends run."""
    return make_harness(RedisStore, run, RedisStore)
