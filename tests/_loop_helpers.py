"""Models and stores with scripted behaviour, shared by the loop tests (trio and asyncio)."""

from __future__ import annotations

import json
import math

import anyio

import agentloopmem
from agentloop import (
    FinalizeSummary,
    Lease,
    ModelReply,
    ModelRequest,
    RunStep,
    Session,
    StoreUnavailableError,
    ToolCall,
)


async def _sleep(seconds: float) -> None:
    """Sleep under either backend; ``inf`` sleeps until cancelled."""
    if seconds == math.inf:
        await anyio.sleep_forever()
    await anyio.sleep(seconds)


def call(name: str, call_id: str = "c1", **args: object) -> ModelReply:
    """A reply asking for one tool call with ``args`` as its JSON arguments."""
    return ModelReply(tool_calls=(ToolCall(call_id, name, json.dumps(args)),))


class SlowModel:
    """Sleeps ``delay`` seconds per call (forever by default), then echoes the last user turn."""

    def __init__(self, delay: float = math.inf) -> None:
        self.delay = delay
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        await _sleep(self.delay)
        return ModelReply(content=f"echo: {request.messages[-1].content}")


class UnfencedWrites(agentloopmem.SessionStore):
    """A session store whose overridden write methods a leased run must still call.

    ``agentloopmem``'s fenced views write under the store's own lock, past any
    override of ``update_data``/``finalize``; these test stores inject faults
    through such overrides, so their "fenced view" is the store itself
    (leases are still acquired, renewed and released; writes are not fenced).
    """

    def fenced(self, lease: Lease) -> UnfencedWrites:  # type: ignore[override]
        return self


class FailingSteps(agentloopmem.StepStore):
    """Appends normally until ``fail_at`` appends have succeeded, then raises."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.appends = 0

    async def append(self, step: RunStep) -> None:
        if self.appends >= self.fail_at:
            raise StoreUnavailableError("disk on fire", cause=OSError(5, "EIO"))
        await super().append(step)
        self.appends += 1


class FailingGet(agentloopmem.SessionStore):
    """``get`` always fails; everything else works."""

    async def get(self, session_id: str) -> Session:
        raise StoreUnavailableError("database unreachable")


class SlowFinalize(UnfencedWrites):
    """``finalize`` sleeps ``delay`` seconds first (forever by default)."""

    def __init__(self, delay: float = math.inf) -> None:
        super().__init__()
        self.delay = delay
        self.finalize_calls = 0

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        self.finalize_calls += 1
        await _sleep(self.delay)
        await super().finalize(session_id, summary)


class SlowLastN(agentloopmem.StepStore):
    """``last_n`` sleeps ``delay`` seconds first (0 by default: set it between runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.0

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        await _sleep(self.delay)
        return await super().last_n(session_id, n)


class SlowGet(agentloopmem.SessionStore):
    """``get`` sleeps forever."""

    async def get(self, session_id: str) -> Session:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


class CountingSessions(UnfencedWrites):
    """Counts ``finalize`` calls per session."""

    def __init__(self) -> None:
        super().__init__()
        self.finalize_calls: dict[str, int] = {}

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        self.finalize_calls[session_id] = self.finalize_calls.get(session_id, 0) + 1
        await super().finalize(session_id, summary)
