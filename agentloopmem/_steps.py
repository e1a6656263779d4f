"""The in-memory ``StepStore``: one list of steps per session."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop import RunStep, validate_n, validate_session_id
from agentloop._shared import call_ends, call_starts, check_steps, preview

if TYPE_CHECKING:
    from collections.abc import Sequence
from agentloopmem._base import MemoryStoreBase


class StepStore(MemoryStoreBase):
    """Steps kept in a dict of per-session lists; safe from trio and asyncio tasks and OS threads.

    Implements ``StepStore`` and the ``append_many``, ``all``,
    ``delete_session`` and ``aclose`` capabilities. Steps are immutable values;
    every returned list is a fresh copy, so mutating it cannot reach the store.
    ``last_n`` costs O(n), however long the history.

    **Cancellation**, under trio and asyncio alike: a cancelled call raises before
    touching the store; a call that returns has fully happened and was a checkpoint.
    """

    def __init__(self) -> None:
        super().__init__()
        self._steps: dict[str, list[RunStep]] = {}

    def _clear(self) -> None:
        self._steps.clear()

    async def append(self, step: RunStep) -> None:
        """Append ``step`` to its session's trace.

        Raises:
            TypeError: ``step`` is not a ``RunStep``.
            StoreClosedError: the store was closed.
        """
        if not isinstance(step, RunStep):
            raise TypeError(f"step must be a RunStep, got {preview(step)}")
        await call_starts()
        with self._lock:
            self._check_open()
            steps = self._steps.get(step.session_id)
            if steps is None:
                self._steps[step.session_id] = [step]
            else:
                steps.append(step)
        await call_ends()

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
        await call_starts()
        with self._lock:
            self._check_open()
            self._extend(batch)
        await call_ends()

    def _extend(self, batch: list[RunStep]) -> None:
        """Append the checked ``batch``; call with ``_lock`` held (cannot fail part way)."""
        traces = self._steps
        for step in batch:
            trace = traces.get(step.session_id)
            if trace is None:
                traces[step.session_id] = [step]
            else:
                trace.append(step)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps of the session, oldest first; ``[]`` for an unknown session.

        Raises:
            TypeError: ``n`` is not an int (``bool`` included), or the id is not a str.
            ValueError: ``n`` < 1, or the id is empty or holds NUL.
            StoreClosedError: the store was closed.
        """
        validate_n(n)
        validate_session_id(session_id)
        await call_starts()
        with self._lock:
            self._check_open()
            steps = self._steps.get(session_id)
            window = steps[-n:] if steps is not None else []
        await call_ends()
        return window

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step of the session in insertion order; ``[]`` for an unknown session.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        await call_starts()
        with self._lock:
            self._check_open()
            steps = list(self._steps.get(session_id, ()))
        await call_ends()
        return steps

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's steps; ``True`` if it had any.

        Raises:
            StoreClosedError: the store was closed.
        """
        validate_session_id(session_id)
        await call_starts()
        with self._lock:
            self._check_open()
            existed = self._steps.pop(session_id, None) is not None
        await call_ends()
        return existed
