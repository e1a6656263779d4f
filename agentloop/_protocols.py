"""What the loop needs from storage: two small protocols and the optional capabilities.

All are ``runtime_checkable``: ``isinstance(store, SupportsFinal)`` tells
whether a store has that capability (it checks method names, not signatures).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop._types import FinalizeSummary, RunStep, Session, SessionInfo


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
