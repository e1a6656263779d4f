"""The in-memory ``StepStore``: one list of steps per session."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from datetime import datetime

from agentloop import RunStep, validate_n, validate_session_id
from agentloop._shared import check_steps, preview
from agentloopmem._guard import Guard, checked_clock, read_clock
from agentloopmem._index import KeyOrder


class StepStore:
    """Steps kept in a dict of per-session lists; safe from trio and asyncio tasks and OS threads.

    Implements ``StepStore`` and the ``append_many``, ``all``, ``steps_after``,
    ``prune_steps``, ``delete_session`` and ``aclose`` capabilities. Steps are
    immutable values; every returned list is a fresh copy, so mutating it cannot
    reach the store. ``last_n`` and ``steps_after`` cost O(n), however long the
    history. ``clock`` (as ``SessionStore``'s) stamps each session's latest
    append, which is how a ``MemoryStore`` judges the idleness of a session
    that has steps but no session row.

    **Cancellation**, under trio and asyncio alike: a cancelled call raises before
    touching the store; a call that returns has fully happened and was a checkpoint.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._guard = Guard(type(self).__name__)
        self._clock = checked_clock(clock)
        self._steps: dict[str, list[RunStep]] = {}
        self._appends = KeyOrder()  # sessions by their latest append
        self._appended_at: dict[str, datetime] = {}
        self._append_seq = itertools.count()

    async def append(self, step: RunStep) -> None:
        """Append ``step`` to its session's trace.

        Raises:
            TypeError: ``step`` is not a ``RunStep``.
            StoreClosedError: the store was closed.
        """
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        now = read_clock(self._clock)
        await self._guard.call(lambda: self._extend((step,), now))

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Append every step of ``steps``, in order, under one hold of the lock: all or nothing.

        The batch may span sessions; no other append lands between its steps.
        ``[]`` is a no-op (still a checkpoint).

        Raises:
            TypeError: ``steps`` is not a sequence of ``RunStep``; the message
                names the first bad position and nothing is appended.
            StoreClosedError: the store was closed.

        **Cancellation**: a cancelled call appends nothing.
        """
        batch = check_steps(steps)
        now = read_clock(self._clock)
        await self._guard.call(lambda: self._extend(batch, now))

    def _extend(self, batch: Sequence[RunStep], now: datetime) -> None:
        """Append the checked ``batch``; call with the lock held (it cannot fail part way)."""
        for step in batch:
            session_id = step.session_id
            self._steps.setdefault(session_id, []).append(step)
            if self._appended_at.get(session_id) is not now:
                self._appended_at[session_id] = now
                self._appends.put(session_id, next(self._append_seq))

    def _extend_held(self, batch: Sequence[RunStep]) -> None:
        """Append the checked ``batch`` now, taking the lock (for a fenced view's append).

        Raises:
            StoreClosedError: the store was closed.
        """
        now = read_clock(self._clock)
        with self._guard.held():
            self._extend(batch, now)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps of the session, oldest first; ``[]`` for an unknown session.

        Raises:
            TypeError: ``n`` is not an int (``bool`` included), or the id is not a str.
            ValueError: ``n`` < 1, or the id is empty or holds NUL.
            StoreClosedError: the store was closed.
        """
        validate_n(n)
        validate_session_id(session_id)
        return await self._guard.call(lambda: self._steps.get(session_id, [])[-n:])

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step of the session in insertion order; ``[]`` for an unknown session.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        return await self._guard.call(lambda: list(self._steps.get(session_id, ())))

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        """``all(session_id)[after:after + limit]``: a range of the trace, in insertion order.

        Raises:
            TypeError, ValueError: ``after`` is not an int >= 0, or ``limit`` not an int >= 1.
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        skip = _check_after(after)
        count = validate_n(limit, "limit")
        return await self._guard.call(lambda: self._steps.get(session_id, [])[skip : skip + count])

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        """Remove all but the newest ``keep_last`` steps of the session; how many were removed.

        What remains keeps its order and every field. A cancelled call removed nothing.

        Raises:
            TypeError, ValueError: ``keep_last`` is not an int >= 1, or a bad session id.
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        keep = validate_n(keep_last, "keep_last")
        return await self._guard.call(lambda: self._prune(session_id, keep))

    def _prune(self, session_id: str, keep: int) -> int:
        """Drop the oldest steps past ``keep``; call with the lock held."""
        trace = self._steps.get(session_id)
        if trace is None or len(trace) <= keep:
            return 0
        removed = len(trace) - keep
        del trace[:removed]
        return removed

    def _prune_held(self, session_id: str, keep: int) -> int:
        """:meth:`_prune`, taking the lock (for a fenced view's prune)."""
        with self._guard.held():
            return self._prune(session_id, keep)

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's steps; ``True`` if it had any.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        return await self._guard.call(lambda: self._drop(session_id))

    def _drop(self, session_id: str) -> bool:
        """Forget the session's steps; call with the lock held."""
        self._appends.discard(session_id)
        self._appended_at.pop(session_id, None)
        return self._steps.pop(session_id, None) is not None

    async def aclose(self) -> None:
        """Close the store and free its contents; every later call raises ``StoreClosedError``.

        Idempotent. A cancelled call leaves the store open.
        """
        await self._guard.close(self._clear)

    def _close_now(self) -> None:
        """Close at once, without a checkpoint: for ``MemoryStore.aclose``, which closes both
        halves in one step so a cancellation never leaves one of them open."""
        self._guard.close_now(self._clear)

    def _clear(self) -> None:
        self._steps.clear()
        self._appends.clear()
        self._appended_at.clear()


def _check_after(after: object) -> int:
    if not isinstance(after, int) or isinstance(after, bool):
        raise TypeError(f"after must be an int >= 0, got {preview(after)}")
    if after < 0:
        raise ValueError(f"after must be an int >= 0, got {after!r}")
    return after
