"""The one seam between a run and its stores: every call named, every failure a ``StoreError``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentloop._batch import append_all
from agentloop._describe import describe_message
from agentloop._errors import LeaseLostError, StoreError
from agentloop._protocols import SupportsAppendMany

if TYPE_CHECKING:
    from agentloop._protocols import SessionStore, StepStore
    from agentloop._types import FinalizeSummary, RunStep, Session


_BATCHING: dict[type, bool] = {}  # store type -> has ``append_many``, asked once per type


def has_append_many(store: object) -> bool:
    """Whether ``store`` is ``SupportsAppendMany``, decided once per store type.

    ``isinstance`` against a runtime-checkable protocol inspects the class on
    every call (several microseconds); a store's capabilities are its class's.
    """
    kind = type(store)
    known = _BATCHING.get(kind)
    if known is None:
        known = _BATCHING[kind] = isinstance(store, SupportsAppendMany)
    return known


class RunStores:
    """The store calls of one run on ``session_id``, each named for its failure message.

    This is the only place a run touches a store. A leased run is handed a
    ``RunStores`` built on the session store's fenced view (and on that view
    for appends too when it covers the step store); nothing else changes.

    Every method raises ``StoreError("<operation> failed for session '<id>':
    <Type>: <message>")`` for any exception of the store, with that exception
    as ``__cause__``; cancellation propagates unchanged. ``LeaseLostError``
    propagates unwrapped and is kept in ``lease_lost``: from then on every
    write raises ``LeaseLostError`` without calling the store.
    """

    __slots__ = ("atomic_batches", "lease_lost", "session_id", "sessions", "steps")

    def __init__(self, steps: StepStore, sessions: SessionStore, session_id: str) -> None:
        self.steps = steps
        self.sessions = sessions
        self.session_id = session_id
        self.lease_lost: LeaseLostError | None = None  # set once the run's lease is lost
        # Whether the step store has ``append_many`` (``SupportsAppendMany``).
        self.atomic_batches = has_append_many(steps)

    def _refused(self, operation: str) -> LeaseLostError:
        return LeaseLostError(
            f"{operation} refused for session {self.session_id!r}: the run lost its lease; "
            f"nothing was written"
        )

    def _failed(self, operation: str, exc: Exception) -> StoreError:
        return StoreError(
            f"{operation} failed for session {self.session_id!r}: {describe_message(exc)}"
        )

    # Each method catches on its own (no shared wrapper coroutine): these calls are
    # the loop's hottest path, and an extra await layer per call shows in the bench.

    async def get(self) -> Session:
        """The session (a fresh one when the store has none)."""
        try:
            return await self.sessions.get(self.session_id)
        except Exception as exc:
            raise self._failed("get", exc) from exc

    async def last_n(self, count: int) -> Sequence[RunStep]:
        """The last ``count`` steps, oldest first."""
        try:
            return await self.steps.last_n(self.session_id, count)
        except Exception as exc:
            raise self._failed("last_n", exc) from exc

    async def append(self, step: RunStep) -> None:
        """Append ``step`` (already built for this session)."""
        if self.lease_lost is not None:
            raise self._refused("append") from self.lease_lost
        try:
            await self.steps.append(step)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("append", exc) from exc

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Append ``steps`` (built for this session) as ``append_all`` would.

        The loop calls this only when :attr:`atomic_batches`: one
        ``append_many`` call, all or nothing. The steps are the loop's own,
        already checked, and the capability is known: ``append_all`` would
        only check both again (``append_all`` itself serves any other store).
        """
        if self.lease_lost is not None:
            raise self._refused("append_many") from self.lease_lost
        try:
            if self.atomic_batches:
                batching: SupportsAppendMany = self.steps  # type: ignore[assignment]
                await batching.append_many(steps)
            else:
                await append_all(self.steps, steps)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("append_many", exc) from exc

    async def update_data(self, data: str) -> None:
        """Replace the session's working memory with the JSON text ``data``."""
        if self.lease_lost is not None:
            raise self._refused("update_data") from self.lease_lost
        try:
            await self.sessions.update_data(self.session_id, data)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("update_data", exc) from exc

    async def finalize(self, summary: FinalizeSummary) -> None:
        """Record the end of the run."""
        if self.lease_lost is not None:
            raise self._refused("finalize") from self.lease_lost
        try:
            await self.sessions.finalize(self.session_id, summary)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("finalize", exc) from exc
