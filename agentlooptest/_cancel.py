"""Cancelling one store call at each of its checkpoints, and checking the store afterwards."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from agentlooptest._clause import Violation

T = TypeVar("T")

MAX_POINTS = 24
"""Cancellation points tried per operation before giving up on reaching its end."""

USABLE_TIMEOUT = 10.0
"""Seconds a call after a cancelled one may take before the store counts as wedged."""


async def cancel_at(op: Callable[[], Awaitable[object]], point: int) -> bool:
    """Run ``op`` and cancel it once a sibling task has yielded ``point`` times.

    ``point == 0`` cancels before ``op`` starts. Returns whether ``op``
    returned normally (``False``: it raised ``Cancelled``, which is absorbed).
    A store that finishes blocking work in a thread before honouring the
    cancellation returns ``False`` although the work happened.
    """
    finished = False
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            nonlocal finished
            await op()
            finished = True
            nursery.cancel_scope.cancel()

        async def cancel() -> None:
            for _ in range(point):
                await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()

        if point == 0:
            nursery.cancel_scope.cancel()
        else:
            nursery.start_soon(cancel)
        nursery.start_soon(run)
    return finished


class Points:
    """Cancellation points to try: 0, 1, 2, ... until the op twice ran to the end uncancelled."""

    def __init__(self, limit: int = MAX_POINTS) -> None:
        self.limit = limit
        self._streak = 0
        self._next = 0

    def __iter__(self) -> Points:
        return self

    def __next__(self) -> int:
        if self._streak >= 2 or self._next >= self.limit:
            raise StopIteration
        point = self._next
        self._next += 1
        return point

    def finished(self, done: bool) -> None:
        """Record whether the op at the last point returned normally."""
        self._streak = self._streak + 1 if done else 0


async def still_usable(what: str, op: Callable[[], Awaitable[T]]) -> T:
    """Run ``op`` after a cancelled call; a hang or a ``StoreError`` means the store broke.

    Raises:
        Violation: ``op`` hung for :data:`USABLE_TIMEOUT` seconds or raised.
    """
    why = "a store left unusable by one cancelled call takes every later run down with it"
    try:
        with trio.fail_after(USABLE_TIMEOUT):
            return await op()
    except trio.TooSlowError:
        raise Violation(
            f"cancelled a call, then {what}",
            f"the call to return within {USABLE_TIMEOUT:g}s",
            "it hung: the cancelled call left a lock or connection held",
            why,
        ) from None
    except Exception as exc:
        raise Violation(
            f"cancelled a call, then {what}",
            "the call to work as usual",
            f"{type(exc).__name__}: {exc}",
            why,
        ) from None
