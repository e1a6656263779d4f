"""Backend-neutral helpers for SQL store tests run under trio and asyncio (anyio).

:class:`Caller` runs a store call in its own task and cancels it by one of the
cancellation sources the stores must honour: an anyio cancel scope (both
backends), and under asyncio a native ``Task.cancel()`` or an expiring
``asyncio.timeout()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

from agentloop._shared import on_trio

SOURCES = [
    pytest.param("trio", "scope", id="trio-scope"),
    pytest.param("asyncio", "scope", id="asyncio-scope"),
    pytest.param("asyncio", "task", id="asyncio-task.cancel"),
    pytest.param("asyncio", "timeout", id="asyncio-timeout"),
]
"""``(anyio_backend, source)`` pairs: every cancellation source on each backend."""


async def until(check: Callable[[], bool]) -> None:
    """Wait (polling; at most 10 s) until ``check()`` holds."""
    with anyio.fail_after(10):
        while not check():  # noqa: ASYNC110 (state other threads set)
            await anyio.sleep(0.001)


def cancelling() -> int:
    """The current asyncio task's count of cancellation requests (0 under trio)."""
    if on_trio():
        return 0
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling()


class Caller:
    """Runs ``call()`` as its own task, cancellable by ``source``; ``events`` says what happened.

    ``events``: ``"returned <result>"`` when the call returned, then
    ``"checkpoint passed"`` if the next checkpoint did not raise, then
    ``"cancelled"`` if the cancellation reached the caller, then
    ``"count <n>"``: the task's cancel count once its source handled it.
    """

    def __init__(self, source: str, call: Callable[[], Awaitable[object]]) -> None:
        self.source = source
        self.call = call
        self.events: list[str] = []
        self.done = False
        self._scope: anyio.CancelScope | None = None
        self._timeout: asyncio.Timeout | None = None
        self._task: asyncio.Task[object] | None = None

    def start(self, group: anyio.abc.TaskGroup) -> None:
        """Start the caller's task in ``group``."""
        group.start_soon(self._run)

    def cancel(self) -> None:
        """Cancel the caller by its source."""
        if self._scope is not None:
            self._scope.cancel()
        elif self._timeout is not None:
            self._timeout.reschedule(asyncio.get_running_loop().time())
        else:
            assert self._task is not None
            self._task.cancel()

    async def _run(self) -> None:
        try:
            if self.source == "scope":
                with anyio.CancelScope() as scope:
                    self._scope = scope
                    await self._body()
                if scope.cancelled_caught:
                    self.events.append("cancelled")
            elif self.source == "timeout":
                try:
                    async with asyncio.timeout(None) as timeout:
                        self._timeout = timeout
                        await self._body()
                except TimeoutError:
                    self.events.append("cancelled")
            else:
                self._task = asyncio.current_task()
                try:
                    await self._body()
                except asyncio.CancelledError:
                    self.events.append("cancelled")
            self.events.append(f"count {cancelling()}")
            await anyio.lowlevel.checkpoint()  # nothing left over to deliver
        finally:
            self.done = True

    async def _body(self) -> None:
        result = await self.call()
        self.events.append(f"returned {result}")
        await anyio.lowlevel.checkpoint()
        self.events.append("checkpoint passed")


RAISED = ["cancelled", "count 0"]
"""A caller whose call raised the cancellation (the source then settled its count)."""


def raised(source: str) -> list[str]:
    # A native Task.cancel() is one request the caller caught: its count stays 1.
    return ["cancelled", "count 1"] if source == "task" else RAISED


@contextmanager
def count_futures() -> Iterator[list[int]]:
    """How many futures the running asyncio loop makes in the block (``[0]`` under trio)."""
    made = [0]
    if on_trio():
        yield made
        return
    loop: Any = asyncio.get_running_loop()
    create = loop.create_future

    def counting() -> object:
        made[0] += 1
        return create()

    loop.create_future = counting
    try:
        yield made
    finally:
        del loop.create_future
