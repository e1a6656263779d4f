"""``MemoryStore``: one in-memory object holding steps and sessions, as the SQL stores do.

A ``SessionStore`` that owns its own ``StepStore`` (``SessionStore(steps=...)``),
plus what only a store holding both can do: delete, expire and restore a
session whole (steps included), and fork one. Its locks are always taken in one
order, the session store's first, so no two calls can deadlock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import attrs

from agentloop import (
    FinalizeSummary,
    Lease,
    RunStep,
    Session,
    SessionExistsError,
    SessionInfo,
    validate_n,
    validate_session_id,
)
from agentloop._shared import check_idle_for, preview
from agentloopmem._sessions import FencedStore, SessionStore
from agentloopmem._steps import StepStore


def _check_keep_first(keep_first: object) -> int | None:
    if keep_first is None:
        return None
    if not isinstance(keep_first, int) or isinstance(keep_first, bool):
        raise TypeError(f"keep_first must be an int >= 0 or None, got {preview(keep_first)}")
    if keep_first < 0:
        raise ValueError(f"keep_first must be an int >= 0 or None, got {keep_first!r}")
    return keep_first


class MemoryStore(SessionStore):
    """Steps and sessions in one object: ``StepStore``, ``SessionStore`` and every capability.

    What a ``SessionStore(steps=...)`` does, plus: ``delete_session`` removes the
    session's steps too; ``expire_sessions`` also removes sessions that have
    steps but no session row (judged by their latest append); ``restore_session``
    refuses a session that has steps; ``fork_session`` copies a session and its
    first steps in one atomic step. ``clock`` stamps both stores' writes. Never a
    system of record: nothing survives the process.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(clock, steps=StepStore(clock))
        self._own_steps: StepStore = self.steps  # type: ignore[assignment]

    async def append(self, step: RunStep) -> None:
        """As ``StepStore.append``."""
        await self._own_steps.append(step)

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """As ``StepStore.append_many`` (all or nothing, in order)."""
        await self._own_steps.append_many(steps)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """As ``StepStore.last_n``."""
        return await self._own_steps.last_n(session_id, n)

    async def all(self, session_id: str) -> list[RunStep]:
        """As ``StepStore.all``."""
        return await self._own_steps.all(session_id)

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        """As ``StepStore.steps_after``."""
        return await self._own_steps.steps_after(session_id, after, limit)

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        """As ``StepStore.prune_steps``."""
        return await self._own_steps.prune_steps(session_id, keep_last=keep_last)

    def _has_steps(self, session_id: str) -> bool:
        """Whether the session has steps; call with this store's lock held."""
        with self._own_steps._guard.held():
            return bool(self._own_steps._steps.get(session_id))

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's data, summaries, labels and steps; ``True`` if it had any.

        Its lease and token stay, and its revision grows, as ``SessionStore``'s.
        """
        return await self._delete_whole(session_id, None)

    async def _delete_whole(self, session_id: str, fence: Lease | None) -> bool:
        validate_session_id(session_id)

        def delete() -> bool:
            if fence is not None and fence.session_id == session_id:
                self._check_fence(fence)
            had_row = self._forget(session_id)
            with self._own_steps._guard.held():
                had_steps = self._own_steps._drop(session_id)
            return had_row or had_steps

        return await self._guard.call(delete)

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """As ``SessionStore.restore_session``; a session that has steps exists too."""
        await self._write_restored(session, info, final, None, self._has_steps)

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        """As ``SessionStore.expire_sessions``, deleting steps too, and also sessions that
        have steps but no session row, judged by their latest append."""
        seconds = check_idle_for(idle_for)
        count = validate_n(limit, "limit")
        now = self._now()
        cutoff = now - timedelta(seconds=seconds)
        return await self._guard.call(lambda: self._expire_whole(now, cutoff, count))

    def _expire_whole(self, now: datetime, cutoff: datetime, count: int) -> list[str]:
        steps = self._own_steps

        def drop_steps(session_id: str) -> None:
            with steps._guard.held():
                steps._drop(session_id)

        gone = self._expire(now, cutoff, count, drop_steps)
        with steps._guard.held():
            for _, key in steps._appends.newer(None, len(steps._appends)):
                if len(gone) >= count or steps._appended_at[key] >= cutoff:
                    break
                if key not in self._records and self._take_over_idle(key, now):
                    steps._drop(key)
                    gone.append(key)
        return gone

    async def fork_session(
        self, source_id: str, new_id: str, *, keep_first: int | None = None
    ) -> None:
        """``new_id`` as a copy of ``source_id`` and its first ``keep_first`` steps (all when
        ``None``), in one atomic step; see ``SupportsFork``.

        Raises:
            TypeError, ValueError: a bad id, ``new_id == source_id``, or
                ``keep_first`` not an int >= 0 or ``None``.
            KeyError: the source has no session row and no steps (a ``LookupError``).
            SessionExistsError: ``new_id`` has a session row or steps.
            StoreClosedError: the store was closed.
        """
        await self._fork(source_id, new_id, _check_keep_first(keep_first), None)

    async def _fork(
        self, source_id: str, new_id: str, keep: int | None, fence: Lease | None
    ) -> None:
        validate_session_id(source_id, "source_id")
        validate_session_id(new_id, "new_id")
        if new_id == source_id:
            raise ValueError(f"new_id must differ from source_id, got {new_id!r} for both")
        now = self._now()
        await self._guard.call(lambda: self._fork_held(source_id, new_id, keep, fence, now))

    def _fork_held(
        self, source_id: str, new_id: str, keep: int | None, fence: Lease | None, now: datetime
    ) -> None:
        steps = self._own_steps
        with steps._guard.held():
            source_steps = steps._steps.get(source_id, [])
            new_has_steps = bool(steps._steps.get(new_id))
        source = self._records.get(source_id)
        if source is None and not source_steps:
            raise KeyError(f"session {source_id!r} does not exist: no session row and no steps")
        if new_id in self._records or new_has_steps:
            raise SessionExistsError(f"session {new_id!r} exists; nothing was written")
        copies = [attrs.evolve(step, session_id=new_id) for step in source_steps[:keep]]
        record = self._write(new_id, now, fence)
        if source is not None:
            old = source.session
            record.session = Session(new_id, old.model, old.system_prompt, old.data)
            self._relabel(new_id, record, dict(source.labels))
        with steps._guard.held():
            steps._extend(copies, now)

    def fenced(self, lease: Lease) -> FencedMemoryStore:
        """A view of this store whose writes to ``lease.session_id`` (steps included) are
        fenced by ``lease``; see ``SessionStore.fenced``.

        Raises:
            TypeError, ValueError: ``lease`` is not a ``Lease`` this store granted.
            StoreClosedError: the store was closed.
        """
        super().fenced(lease)  # the checks
        return FencedMemoryStore(self, self._own_steps, lease)

    async def aclose(self) -> None:
        """Close both halves and free their contents, in one step; idempotent.

        A cancelled call leaves both open.
        """
        await self._guard.close(self._clear_both)

    def _clear_both(self) -> None:
        self._clear()
        self._own_steps._close_now()


class FencedMemoryStore(FencedStore):
    """A fenced view of a ``MemoryStore``: ``FencedStore``, whole-session deletes and forks."""

    def __init__(self, store: MemoryStore, steps: StepStore, lease: Lease) -> None:
        super().__init__(store, steps, lease)
        self._store = store

    async def delete_session(self, session_id: str) -> bool:
        """As ``MemoryStore.delete_session``, fenced.

        Raises:
            LeaseLostError: the session is the leased one and its lease was
                acquired again since; nothing was deleted.
        """
        return await self._store._delete_whole(session_id, self._lease)

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """As ``MemoryStore.restore_session``, fenced."""
        await self._store._write_restored(session, info, final, self._lease, self._store._has_steps)

    async def fork_session(
        self, source_id: str, new_id: str, *, keep_first: int | None = None
    ) -> None:
        """As ``MemoryStore.fork_session``, fenced when ``new_id`` is the leased session.

        Raises:
            LeaseLostError: the leased session's lease was acquired again since;
                nothing was written.
        """
        await self._store._fork(source_id, new_id, _check_keep_first(keep_first), self._lease)

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        """As ``MemoryStore.expire_sessions``."""
        return await self._store.expire_sessions(idle_for=idle_for, limit=limit)
