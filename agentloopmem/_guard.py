"""One in-memory store's lock, closed state and clock, and the store-call convention
around them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

from agentloop import StoreClosedError
from agentloop._shared import call_ends, call_starts, preview

T = TypeVar("T")


class Guard:
    """A lock held only around dict/list work (never across an ``await``), and the closed flag.

    Every public coroutine of an in-memory store runs its work through
    :meth:`call`: ``call_starts()`` before touching state (a cancelled call does
    nothing), the work under the lock, then ``call_ends()``. Each call is a
    checkpoint and a completed call is never reported as cancelled, under trio
    and asyncio alike: trio schedules once after the work, shielded; asyncio
    schedules once before it (``sleep(0)``, where every asyncio cancellation
    source lands) and never suspends after it. A ``threading.Lock`` makes the
    stores safe from OS threads as well as tasks.
    """

    __slots__ = ("_closed", "_lock", "_name")

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._name = name

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock for synchronous work on an open store.

        Raises:
            StoreClosedError: the store was closed.
        """
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"{self._name} is closed")
            yield

    async def call(self, work: Callable[[], T]) -> T:
        """``work()`` under the lock, as one store call (see the class docstring).

        Raises:
            StoreClosedError: the store was closed.
            Whatever ``work`` raises (it must change nothing when it raises).
        """
        await call_starts()
        with self.held():
            result = work()
        await call_ends()
        return result

    async def close(self, clear: Callable[[], None]) -> None:
        """Mark the store closed and ``clear()`` its contents, once; idempotent.

        A cancelled call leaves the store open.
        """
        await call_starts()
        self.close_now(clear)
        await call_ends()

    def close_now(self, clear: Callable[[], None]) -> None:
        """:meth:`close`'s work, synchronously: for a store closing another with itself."""
        with self._lock:
            if not self._closed:
                self._closed = True
                clear()


Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """The wall clock, in UTC: the default clock of the in-memory stores."""
    return datetime.now(UTC)


def checked_clock(clock: object) -> Clock:
    """``clock`` (a zero-argument callable returning an aware ``datetime``), or the
    system clock for ``None``.

    Raises:
        TypeError: ``clock`` is not callable.
    """
    if clock is None:
        return system_clock
    if not callable(clock):
        raise TypeError(f"clock must be a callable returning a datetime, got {preview(clock)}")
    return clock


def read_clock(clock: Clock) -> datetime:
    """The clock's time in UTC; called outside the lock, since a clock is user code.

    Raises:
        ValueError: the clock returned something else than an aware ``datetime``.
    """
    now = clock()
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise ValueError(f"clock must return a timezone-aware datetime, got {preview(now)}")
    return now.astimezone(UTC)
