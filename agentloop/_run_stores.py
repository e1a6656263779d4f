"""The one seam between a run and its stores: every call named, every failure a ``StoreError``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from agentloop._describe import describe_message
from agentloop._errors import StoreError

if TYPE_CHECKING:
    from agentloop._protocols import SessionStore, StepStore
    from agentloop._types import FinalizeSummary, RunStep, Session

T = TypeVar("T")


@attrs.frozen
class RunStores:
    """The store calls of one run on ``session_id``, each named for its failure message.

    This is the only place a run touches a store. A run that must write
    through another view of the stores (e.g. a fenced one) is handed a
    ``RunStores`` built on that view; nothing else changes.

    Every method raises ``StoreError("<operation> failed for session '<id>':
    <Type>: <message>")`` for any exception of the store, with that exception
    as ``__cause__``; cancellation propagates unchanged.
    """

    steps: StepStore
    sessions: SessionStore
    session_id: str

    async def _named(self, operation: str, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        try:
            return await call(*args)
        except Exception as exc:
            raise StoreError(
                f"{operation} failed for session {self.session_id!r}: {describe_message(exc)}"
            ) from exc

    async def get(self) -> Session:
        """The session (a fresh one when the store has none)."""
        return await self._named("get", self.sessions.get, self.session_id)

    async def last_n(self, count: int) -> Sequence[RunStep]:
        """The last ``count`` steps, oldest first."""
        return await self._named("last_n", self.steps.last_n, self.session_id, count)

    async def append(self, step: RunStep) -> None:
        """Append ``step`` (already built for this session)."""
        await self._named("append", self.steps.append, step)

    async def update_data(self, data: str) -> None:
        """Replace the session's working memory with the JSON text ``data``."""
        await self._named("update_data", self.sessions.update_data, self.session_id, data)

    async def finalize(self, summary: FinalizeSummary) -> None:
        """Record the end of the run."""
        await self._named("finalize", self.sessions.finalize, self.session_id, summary)
