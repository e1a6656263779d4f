"""Correct stores built unusually, which the contract must pass whole.

Each stands for a real store the contract once rejected, or could have: one
whose calls never suspend, one that commits a long batch in chunks inside one
transaction.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import datetime

import anyio
import anyio.lowlevel
import sniffio

from agentloop import RunStep, StoreClosedError

from ._good import GoodSteps
from .lifecycle import Lifecycle


async def raise_if_cancelled() -> None:
    """Raise a cancellation already requested; otherwise return without suspending."""
    pending = anyio.current_effective_deadline() == -math.inf
    if not pending and sniffio.current_async_library() == "asyncio":
        task = asyncio.current_task()
        pending = task is not None and task.cancelling() > 0
    if pending:
        await anyio.lowlevel.checkpoint()


class _QuietSteps(GoodSteps):
    async def enter(self) -> None:
        await raise_if_cancelled()
        if self.closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    async def leave(self) -> None:
        """Nothing: the call never suspends."""


class NeverSuspends(Lifecycle):
    """Every call does its work without suspending (an in-process store, a synchronous
    driver): a cancellation already requested raises at the start, nothing else yields.

    No rule asks a store call to suspend; a clause that needs other tasks to run
    must let them run itself.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(clock)
        self.trace = _QuietSteps()

    async def enter(self) -> None:
        await raise_if_cancelled()
        if self.closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    async def leave(self) -> None:
        """Nothing: the call never suspends."""

    async def aclose(self) -> None:
        """Close; idempotent; never suspends."""
        await raise_if_cancelled()
        self.closed = True


CHUNK = 64
"""Steps :class:`ChunkedBatches` writes per round trip of one batch."""


class ChunkedBatches(Lifecycle):
    """append_many sends a long batch in chunks of 64 steps, yielding between chunks,
    inside one transaction: the batch is applied whole once every chunk went out, and
    a cancellation between chunks rolls the transaction back (nothing of it stored)."""

    async def append_many(self, steps: list[RunStep]) -> None:
        """Append every step, in order, or none, in chunks."""
        batch = list(steps)
        for position, step in enumerate(batch):
            if not isinstance(step, RunStep):
                raise TypeError(f"steps[{position}] must be a RunStep, got {step!r}")
        await self.enter()
        staged: list[RunStep] = []  # the open transaction
        for first in range(0, len(batch), CHUNK):
            staged += batch[first : first + CHUNK]
            if first + CHUNK < len(batch):
                await anyio.lowlevel.checkpoint()  # a cancellation here: rollback
        rows = self.trace.steps
        for step in staged:  # commit: no checkpoint between the first row and the last
            rows.setdefault(self.trace.key(step.session_id), []).append(self.trace.stored(step))
        await self.leave()
