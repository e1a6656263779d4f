"""What both in-memory stores share: one lock, the closed flag, ``aclose``."""

from __future__ import annotations

import threading

import trio

from agentloop import StoreClosedError


class MemoryStoreBase:
    """A lock held only around dict/list work, and the closed state.

    Every public coroutine of a subclass follows trio's checkpoint convention:
    ``checkpoint_if_cancelled()`` before touching state (a cancelled call does
    nothing), the work under ``_lock``, then ``cancel_shielded_checkpoint()``
    (a completed call yields once and is never reported as cancelled).
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
        await trio.lowlevel.checkpoint_if_cancelled()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._clear()
        await trio.lowlevel.cancel_shielded_checkpoint()
