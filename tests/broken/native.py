"""Correct stores tied to one backend: asyncio's own primitives, or trio's.

Each is the reference store with its checkpoints written in one library, the
way a store on ``redis.asyncio`` or on trio sockets is. The contract
certifies each under its backend and, under the other, fails once saying
which backend to use.
"""

from __future__ import annotations

import asyncio

import trio

from agentlooptest import Harness
from broken._good import GoodBoth, harness_for


class AsyncioOnly(GoodBoth):
    """Needs a running asyncio loop for every call (its checkpoints are asyncio's)."""

    async def enter(self) -> None:
        asyncio.get_running_loop()
        await asyncio.sleep(0)
        await super().enter()

    async def aclose(self) -> None:
        await asyncio.sleep(0)
        self.closed = True


class AsyncioFactory(AsyncioOnly):
    """Binds itself to the running asyncio loop as it is made, like a connection pool."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.get_running_loop()


class TrioOnly(GoodBoth):
    """Calls trio directly for every call."""

    async def enter(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        await super().enter()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        self.closed = True


def asyncio_harness() -> Harness:
    """The asyncio-only store; ``reopen`` is the store itself (one in-memory backend)."""
    return harness_for(AsyncioOnly)


def asyncio_factory_harness() -> Harness:
    """A store whose factory already needs the asyncio loop."""
    return harness_for(AsyncioFactory)


def trio_harness() -> Harness:
    """The trio-only store."""
    return harness_for(TrioOnly)
