"""The loop's main behaviours on both backends: each test runs under trio and under asyncio.

Real (short) time here, no ``MockClock``: the trio-only tests elsewhere pin
exact timings. The asyncio-only cancellation sources (``Task.cancel()``,
``asyncio.timeout``) are in ``test_loop_asyncio.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
import trio
from _loop_helpers import SlowFinalize, SlowModel, call

import agentloopmem
from agentloop import (
    Compacted,
    Compaction,
    EventCollector,
    Finalized,
    Lease,
    LeaseLostError,
    Loop,
    LoopConfig,
    Message,
    ModelReply,
    ModelRequest,
    RunStarted,
    RunStatus,
    ScriptedModel,
    StepAppended,
    StepType,
    StoreError,
    Tool,
    ToolContext,
)

pytestmark = pytest.mark.anyio

BASE = datetime(2026, 1, 1, tzinfo=UTC)


class StoreClock:
    """The store's clock: the event loop's plus ``offset`` seconds a test can jump."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> datetime:
        return BASE + timedelta(seconds=anyio.current_time() + self.offset)


def _shared() -> tuple[StoreClock, agentloopmem.StepStore, agentloopmem.SessionStore]:
    clock = StoreClock()
    steps = agentloopmem.StepStore()
    return clock, steps, agentloopmem.SessionStore(clock, steps=steps)


async def _remember(args: dict[str, Any], ctx: ToolContext) -> str:
    ctx.data["seen"] = args["n"]
    return f"seen {args['n']}"


REMEMBER = Tool("remember", "keeps n", {"type": "object"}, _remember)


async def _kinds(loop: Loop, session_id: str) -> list[StepType]:
    return [step.step_type for step in await loop.steps.last_n(session_id, 50)]


async def _final_status(loop: Loop, session_id: str = "s") -> RunStatus | None:
    final = await loop.sessions.final(session_id)  # type: ignore[attr-defined]
    return None if final is None else final.status  # type: ignore[no-any-return]


class _Gate:
    """A model that signals when it is called, then waits forever (until cancelled)."""

    def __init__(self) -> None:
        self.called = anyio.Event()

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.called.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_plain_run() -> None:
    """A run without tools appends user and response and finalizes completed."""
    loop = Loop(model=ScriptedModel(["hello"]))
    result = await loop.run("s", "hi")
    assert (result.status, result.text, result.steps) == (RunStatus.completed, "hello", 2)
    assert await _kinds(loop, "s") == [StepType.user, StepType.response]
    assert await _final_status(loop) is RunStatus.completed


async def test_tools_and_working_memory() -> None:
    """Tool calls and their results are stored, and the tool's memory write persists."""
    model = ScriptedModel([call("remember", n=3), "done"])
    loop = Loop(model=model, tools=[REMEMBER])
    result = await loop.run("s", "go")
    assert result.text == "done"
    kinds = [StepType.user, StepType.tool_call, StepType.tool_result, StepType.response]
    assert await _kinds(loop, "s") == kinds
    assert (await loop.sessions.get("s")).data == '{"seen":3}'
    assert model.requests[1].messages[-1] == Message("tool", "seen 3", (), "c1")


async def test_events() -> None:
    """Every event is emitted in order, ending with Finalized."""
    events = EventCollector()
    loop = Loop(
        model=ScriptedModel([call("remember", n=1), "ok"]), tools=[REMEMBER], on_event=events
    )
    await loop.run("s", "go")
    kinds = [type(event) for event in events.events]
    assert kinds == [RunStarted, *[StepAppended] * 4, Finalized]


async def test_runs_of_one_session_serialize() -> None:
    """Two concurrent runs of one session never interleave: the second starts after the first."""
    first_in = anyio.Event()
    release = anyio.Event()
    order: list[str] = []

    class Model:
        async def complete(self, request: ModelRequest) -> ModelReply:
            text = request.messages[-1].content
            order.append(f"start {text}")
            if text == "one":
                first_in.set()
                await release.wait()
            order.append(f"end {text}")
            return ModelReply(content=text)

    loop = Loop(model=Model())
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run, "s", "one")
        await first_in.wait()
        tg.start_soon(loop.run, "s", "two")
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        release.set()
    assert order == ["start one", "end one", "start two", "end two"]
    assert len(await loop.steps.last_n("s", 10)) == 4


async def test_leased_run_takes_renews_and_releases_its_lease() -> None:
    """A leased run longer than its TTL is renewed, completes, and frees the lease."""
    clock, steps, sessions = _shared()
    renewed: list[int] = []

    class Counting(agentloopmem.SessionStore):
        async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
            renewed.append(lease.token)
            return await super().renew_lease(lease, ttl)

    sessions = Counting(clock, steps=steps)
    config = LoopConfig(lease_ttl=0.06)  # renewed every 20 ms; the run takes 150 ms
    loop = Loop(model=SlowModel(0.15), steps=steps, sessions=sessions, config=config)
    result = await loop.run("s", "hi")
    assert result.status is RunStatus.completed
    assert renewed  # else the lease would have expired four times over
    assert await sessions.acquire_lease("s", "next", 10) is not None  # released


async def test_lease_lost_to_a_takeover_stops_the_run() -> None:
    """A renew that finds the lease taken over cancels the run: LeaseLostError, no finalize."""
    clock, steps, sessions = _shared()
    model = _Gate()
    loop = Loop(model=model, steps=steps, sessions=sessions, config=LoopConfig(lease_ttl=0.06))
    outcome: list[BaseException] = []

    async def run() -> None:
        try:
            await loop.run("s", "hi")
        except LeaseLostError as exc:
            outcome.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await model.called.wait()
            clock.offset += 60  # the run's lease expired
            assert await sessions.acquire_lease("s", "intruder", 60) is not None
    assert len(outcome) == 1
    assert await sessions.final("s") is None
    assert await _kinds(loop, "s") == [StepType.user]


async def test_cancelled_by_a_cancel_scope_records_cancelled() -> None:
    """Cancelling a run's scope finalizes it as cancelled; the scope catches the cancellation."""
    model = _Gate()
    loop = Loop(model=model)
    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as scope:
            tg.start_soon(_cancel_when, model.called, scope)
            await loop.run("s", "hi")
    assert scope.cancelled_caught
    final = await loop.sessions.final("s")  # type: ignore[attr-defined]
    assert (final.status, final.step_count) == (RunStatus.cancelled, 1)


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def test_cancelled_leased_run_records_and_releases() -> None:
    """A leased run cancelled by a deadline is finalized cancelled and its lease released."""
    _, steps, sessions = _shared()
    loop = Loop(model=SlowModel(), steps=steps, sessions=sessions)
    with anyio.move_on_after(0.05) as scope:
        await loop.run("s", "hi")
    assert scope.cancelled_caught
    assert await _final_status(loop) is RunStatus.cancelled
    assert await sessions.acquire_lease("s", "next", 10) is not None


async def test_cancelled_finalize_is_shielded() -> None:
    """A finalize that has to wait still completes after the run was cancelled."""
    sessions = SlowFinalize(delay=0.05)
    loop = Loop(model=SlowModel(), sessions=sessions)
    with anyio.move_on_after(0.02):
        await loop.run("s", "hi")
    assert (await sessions.final("s")).status is RunStatus.cancelled  # type: ignore[union-attr]


async def test_run_timeout() -> None:
    """An expired run_timeout ends the run with an error step and status timeout."""
    loop = Loop(model=SlowModel(), config=LoopConfig(run_timeout=0.05))
    result = await loop.run("s", "hi")
    assert result.status is RunStatus.timeout
    assert await _kinds(loop, "s") == [StepType.user, StepType.error]
    assert await _final_status(loop) is RunStatus.timeout


async def test_recording_a_timeout_is_bounded(anyio_backend: str) -> None:
    """A finalize hanging after run_timeout is a StoreError; its cause is the backend's timeout."""
    sessions = SlowFinalize()
    config = LoopConfig(run_timeout=0.02, finalize_timeout=0.05)
    loop = Loop(model=SlowModel(), sessions=sessions, config=config)
    with pytest.raises(StoreError, match=r"^finalize failed for session 's'") as info:
        await loop.run("s", "hi")
    expected = trio.TooSlowError if anyio_backend == "trio" else TimeoutError
    assert type(info.value.__cause__) is expected
    assert sessions.finalize_calls == 1


async def test_compaction() -> None:
    """A compactor's summary is stored as a summary step and replaces the old history."""

    class Summarize:
        async def compact(self, messages: tuple[Message, ...]) -> Compaction:
            return Compaction("earlier: hi", retained_from=len(messages) - 1)

    events = EventCollector()
    model = ScriptedModel(["one", "two"])
    loop = Loop(model=model, compactor=Summarize(), on_event=events)
    await loop.run("s", "hi")
    await loop.run("s", "again")
    kinds = await _kinds(loop, "s")
    assert kinds.count(StepType.summary) == 2
    assert any(isinstance(event, Compacted) for event in events.events)
    assert model.requests[1].messages[0].content.endswith("earlier: hi")
