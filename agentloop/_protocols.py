"""What the loop needs from storage: two small protocols, the optional capabilities,
and the helpers that use a capability when a store has it.

All protocols are ``runtime_checkable``: ``isinstance(store, SupportsFinal)``
tells whether a store has that capability (it checks method names, not
signatures). ``append_all`` and ``get_all`` give a store without the batch
capabilities (``SupportsAppendMany``, ``SupportsGetMany``) a working default:
one call at a time, in order. Only the capability is atomic; the fallback is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio

from agentloop._types import check_steps
from agentloop._validate import check_session_ids

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from agentloop._types import FinalizeSummary, RunStep, Session, SessionInfo, SessionPage


@runtime_checkable
class StepStore(Protocol):
    """Append-only traces of steps, one per session, in insertion order."""

    async def append(self, step: RunStep) -> None:
        """Store ``step`` after every step of its session appended before it returned."""
        ...

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The most recent ``n`` steps of the session, oldest first (``[]`` when unknown)."""
        ...


@runtime_checkable
class SessionStore(Protocol):
    """Per-session settings, working memory and the latest run summary."""

    async def get(self, session_id: str) -> Session:
        """The session, or a fresh ``Session(id=session_id)`` when unknown (creating nothing)."""
        ...

    async def exists(self, session_id: str) -> bool:
        """Whether any write has brought the session into being; creates nothing."""
        ...

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """Replace the session's working memory (JSON text or ``None``)."""
        ...

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """Record how the latest run ended; keeps the data snapshot."""
        ...


@runtime_checkable
class SupportsPut(Protocol):
    """Seeds or replaces a session's model, system prompt and data."""

    async def put(self, session: Session) -> None:
        """Store ``session`` whole; ``get`` then returns it."""
        ...


@runtime_checkable
class SupportsFinal(Protocol):
    """Reads back the latest ``finalize``."""

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """The latest summary of the session, or ``None`` if it never finalized."""
        ...


@runtime_checkable
class SupportsAll(Protocol):
    """Reads a session's whole trace."""

    async def all(self, session_id: str) -> list[RunStep]:
        """Every step of the session, in insertion order."""
        ...


@runtime_checkable
class SupportsListSessions(Protocol):
    """Lists sessions, most recently updated first."""

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """At most ``limit`` sessions, most recently written first."""
        ...


@runtime_checkable
class SupportsDeleteSession(Protocol):
    """Forgets a session."""

    async def delete_session(self, session_id: str) -> bool:
        """Drop what this store holds for the session; ``True`` if it held anything."""
        ...


@runtime_checkable
class SupportsAclose(Protocol):
    """Releases the store's resources."""

    async def aclose(self) -> None:
        """Close the store; later calls raise ``StoreClosedError``. Idempotent."""
        ...


@runtime_checkable
class SupportsAppendMany(Protocol):
    """Appends a batch of steps in one call, all or nothing (on a ``StepStore``)."""

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Store every step of ``steps`` in the given order, or none of them.

        The batch may span sessions; ``[]`` is a no-op. A bad step anywhere
        refuses the whole batch, naming its position.
        """
        ...


@runtime_checkable
class SupportsGetMany(Protocol):
    """Reads many sessions in one call (on a ``SessionStore``)."""

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """One session per id, in the order asked (duplicates too); an unknown id gives
        ``Session(id)``; creates nothing."""
        ...


@runtime_checkable
class SupportsRevisions(Protocol):
    """Revision-checked session writes (on a ``SessionStore``).

    A revision is opaque: only order and equality mean anything. It is 0 for a
    session never written; every session write (``put``, ``update_data``,
    ``finalize``, ``update_data_if``) makes it larger; ``delete_session`` never
    makes it smaller; lease calls leave it alone.
    """

    async def revision(self, session_id: str) -> int:
        """The session's current revision (0 if it was never written); creates nothing."""
        ...

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """Replace the session's data only if its revision still equals ``revision``;
        the new revision. Otherwise ``RevisionConflictError``, nothing changed."""
        ...


@runtime_checkable
class SupportsPaging(Protocol):
    """Pages through sessions with opaque cursors (on a ``SessionStore``).

    Also reads one session's info (``session_info``), labels included.
    """

    async def page_sessions(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        labels: Mapping[str, str] | None = None,
        order: str = "updated",
    ) -> SessionPage:
        """At most ``limit`` sessions, then a cursor for the rest (``None`` on the last page).

        ``order="updated"``: most recently written first, as ``list_sessions``;
        ``order="created"``: oldest first, by first write (stable while the store
        is written to; export and copy page this way). A session not written while
        paging comes back exactly once across the pages. One page costs O(limit)
        (an index, never a scan of every session) without ``labels`` or with one
        pair. ``labels``: only sessions carrying every given pair. A cursor is
        valid on any handle onto the same backend, for the same ``labels`` and
        ``order``; any other cursor is a ``ValueError``.
        """
        ...

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """The session's info and labels, or ``None`` if no session write created it."""
        ...


@runtime_checkable
class SupportsLabels(Protocol):
    """Labels: short key/value pairs on a session, to filter listings by (on a ``SessionStore``)."""

    async def set_labels(self, session_id: str, labels: Mapping[str, str]) -> None:
        """Replace the session's labels (``{}`` clears them); a session write.

        At most 32 pairs of non-empty text of at most 256 UTF-8 bytes each
        (``validate_labels``). Like every session write it creates the session,
        makes its revision larger and moves it to the front of the listing;
        ``put`` keeps labels.
        """
        ...


@runtime_checkable
class SupportsPrune(Protocol):
    """Bounded retention of a session's steps (on a ``StepStore``)."""

    async def prune_steps(self, session_id: str, *, keep_last: int) -> int:
        """Remove all but the newest ``keep_last`` (an int >= 1) steps of the session, in
        insertion order; how many were removed.

        What remains keeps its order and every field, so the loop's next step
        index is unchanged (it follows the last step kept). Other sessions are
        untouched. A cancelled call removed nothing.
        """
        ...


@runtime_checkable
class SupportsStepsAfter(Protocol):
    """Reads a session's trace in ranges (on a ``StepStore``): what export streams with."""

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        """At most ``limit`` (>= 1) of the session's steps in insertion order, skipping the
        first ``after`` (>= 0) it holds now: ``all(session_id)[after:after + limit]``."""
        ...


@runtime_checkable
class SupportsExpire(Protocol):
    """Deletes sessions nobody wrote for a while (on a ``SessionStore``)."""

    async def expire_sessions(self, *, idle_for: float, limit: int = 1000) -> list[str]:
        """Delete, as ``delete_session`` does, up to ``limit`` sessions whose last write is
        older than ``idle_for`` seconds on the store's clock and that hold no live
        lease; their ids.

        Idleness is judged on a write time the store stamps (a session with steps
        but no session row: its newest step's). A session whose lease expired
        but was never released is taken over (a new, larger token) before it is
        deleted, so its old holder's fenced writes fail. Several processes may
        run it at once (each session is deleted once); it never waits for a lease.
        """
        ...


@runtime_checkable
class SupportsFork(Protocol):
    """Forks a conversation into a new session (on one object holding steps and sessions)."""

    async def fork_session(
        self, source_id: str, new_id: str, *, keep_first: int | None = None
    ) -> None:
        """In one atomic step: ``new_id`` gets the source's model, system prompt, data and
        labels, and copies of its first ``keep_first`` (an int >= 0) steps, all when
        ``None``, in order, every field kept but ``session_id``; no run summaries, a
        fresh revision (above any kept for ``new_id``), no lease; the source unchanged.

        Raises ``SessionExistsError`` if ``new_id`` exists (a session row or
        steps), a ``LookupError`` if the source has neither, ``ValueError`` if
        ``new_id == source_id``; nothing changed then.
        """
        ...


@runtime_checkable
class SupportsRestore(Protocol):
    """Writes a session as an export recorded it (on a ``SessionStore``): what import uses."""

    async def restore_session(
        self, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        """Create the session ``session.id`` as recorded: its settings and data (``session``),
        labels, run total and ``created_at`` / ``updated_at`` (``info``, of the same id)
        and latest run summary (``final``, whose status is ``info.status``).

        A session write (the revision grows; the session moves to the front of
        the listing). Raises ``SessionExistsError`` if the session exists (a
        session row or, on a store holding both, steps): nothing changed.
        """
        ...


async def append_all(store: StepStore, steps: Sequence[RunStep]) -> None:
    """Append ``steps`` in order: one ``append_many`` call when the store has it.

    With ``SupportsAppendMany`` the batch is all or nothing, as the store
    guarantees. Without it, the steps are appended one call at a time, in
    order, and this is **not atomic**: an error or a cancellation part way
    leaves the steps before it stored and the rest not. Every step is checked
    before the first call either way.

    Raises:
        TypeError: ``steps`` is not a sequence of ``RunStep`` (naming the
            position of the first bad item); nothing was written.
        Whatever the store's ``append``/``append_many`` raises.

    **Cancellation**: with the capability, as the store's ``append_many`` (all or
    nothing); without it, a prefix of the steps may have been appended.
    """
    batch = check_steps(steps)
    if isinstance(store, SupportsAppendMany):
        await store.append_many(batch)
        return
    if not batch:
        await anyio.lowlevel.checkpoint()
    for step in batch:
        await store.append(step)


async def get_all(store: SessionStore, session_ids: Sequence[str]) -> list[Session]:
    """The sessions asked for, in order (duplicates too): one ``get_many`` call when the
    store has it, else one ``get`` per id.

    Unknown ids give ``Session(id)`` and create nothing either way. Without
    ``SupportsGetMany`` the reads are separate calls, so they may see
    different moments of a store being written to (not a snapshot).

    Raises:
        TypeError, ValueError: ``session_ids`` is not a sequence of valid
            session ids (naming the position of the first bad one).
        Whatever the store's ``get``/``get_many`` raises.
    """
    ids = check_session_ids(session_ids)
    if isinstance(store, SupportsGetMany):
        return await store.get_many(ids)
    if not ids:
        await anyio.lowlevel.checkpoint()
    return [await store.get(session_id) for session_id in ids]
