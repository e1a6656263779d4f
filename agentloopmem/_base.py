"""What both in-memory stores share: one lock, the closed flag, ``aclose``."""

from __future__ import annotations

import threading

from agentloop import StoreClosedError
from agentloop._shared import call_ends, call_starts


class MemoryStoreBase:
    """A lock held only around dict/list work, and the closed state.

    Every public coroutine of a subclass follows the store-call checkpoint
    convention of ``agentloop._backend``: ``call_starts()`` before touching
    state (a cancelled call does nothing), the work under ``_lock`` (never
    awaiting), then ``call_ends()``. Each call is a checkpoint and a completed
    call is never reported as cancelled, under trio and asyncio alike: trio
    schedules once after the work, shielded; asyncio schedules once before it
    (``sleep(0)``, where every asyncio cancellation source lands) and never
    suspends after it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False

    def _check_open(self) -> None:
        """Raise ``StoreClosedError`` after ``aclose``; call with ``_lock`` held."""
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    def _clear(self) -> None:
        """Drop every entry; called once, under ``_lock``, by ``aclose``."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the store and free its contents; every later call raises ``StoreClosedError``.

        Idempotent. A cancelled call leaves the store open.
        """
        await call_starts()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._clear()
        await call_ends()
