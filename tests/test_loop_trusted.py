"""What the loop builds without re-checking is exactly what the checked constructors build."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC

import attrs
import trio
import trio.testing

from agentloop import (
    Compaction,
    EventCollector,
    Finalized,
    Loop,
    LoopConfig,
    Message,
    ModelReply,
    ModelRequest,
    RunResult,
    RunStatus,
    RunStep,
    ScriptedModel,
    StepAppended,
    StepType,
    Tool,
    ToolCall,
    ToolContext,
)


async def _note(args: dict[str, object], ctx: ToolContext) -> str:
    ctx.data = {"seen": args, "text": "é\x00"}
    return "noted\x00 ünïcode"


NOTE = Tool("note", "Keeps a note.", {"type": "object"}, _note)


class HalfCompactor:
    async def compact(self, messages: Sequence[Message]) -> Compaction:
        return Compaction("so far: ü", len(messages) // 2, prompt_tokens=3, completion_tokens=1)


def _rechecked(value: object) -> object:
    """``value`` rebuilt through its class's validators and converters."""
    return attrs.evolve(value)  # type: ignore[misc]


async def _busy_loop(events: EventCollector) -> Loop:
    calls = (
        ToolCall("c1", "note", '{"x": "é"}'),
        ToolCall("c2", "note", "{not json"),
        ToolCall("c3", "missing", "{}"),
    )
    model = ScriptedModel(
        [
            "first answer",
            ModelReply("thinking ✓", calls, prompt_tokens=5, completion_tokens=2),
            "second answer",
            ModelReply(tool_calls=(ToolCall("c4", "note", "{}"),)),
        ]
    )
    config = LoopConfig(model="m", max_iterations=1)
    return Loop(model, tools=[NOTE], on_event=events, compactor=HalfCompactor(), config=config)


async def test_every_step_request_and_summary_passes_the_checked_constructors() -> None:
    """Steps, model requests, finalize summaries and results equal their validated rebuilds."""
    events = EventCollector()
    loop = await _busy_loop(events)
    await loop.run("s", "hello ü")
    config = attrs.evolve(loop.config, max_iterations=3)
    second = Loop(loop._parts.model, loop.steps, loop.sessions, [NOTE], config, events)
    await second.run("s", "again")
    await loop.run("s", "over budget")  # max_iterations: an error step
    steps = await loop.steps.all("s")  # type: ignore[attr-defined]
    kinds = {step.step_type for step in steps}
    assert kinds == set(StepType)  # every kind of step was built
    for step in steps:
        assert _rechecked(step) == step
        assert step.created_at.tzinfo is UTC
    assert [event.step for event in events.of_type(StepAppended)] == steps
    requests = loop._parts.model.requests  # type: ignore[attr-defined]
    assert requests
    assert all(_rechecked(request) == request for request in requests)
    for event in events.of_type(Finalized):
        assert _rechecked(event.summary) == event.summary
    malformed = next(s for s in steps if "raw_args" in s.content)
    assert json.loads(malformed.content)["raw_args"] == "{not json"
    assert malformed.tool_args == "{}"


async def test_the_result_passes_its_checked_constructor() -> None:
    """The RunResult a run returns equals its validated rebuild."""
    result = await Loop(model=ScriptedModel(["done ✓"])).run("s", "hi")
    assert isinstance(result, RunResult)
    assert _rechecked(result) == result
    assert (result.status, result.text, result.steps) == (RunStatus.completed, "done ✓", 2)


async def test_a_run_is_a_checkpoint_and_a_pending_cancel_records_nothing() -> None:
    """The lock's fast path keeps run a checkpoint; a cancel pending at entry writes nothing."""
    loop = Loop(model=ScriptedModel(["a"]))
    with trio.testing.assert_checkpoints():
        await loop.run("s", "hi")
    with trio.CancelScope() as scope:
        scope.cancel()
        await loop.run("t", "hi")
    assert scope.cancelled_caught
    assert await loop.steps.last_n("t", 10) == []
    assert await loop.sessions.exists("t") is False


async def test_queued_runs_of_one_session_still_wait_their_turn() -> None:
    """The fast path never jumps the queue: runs waiting on a held session run in order."""
    gate = trio.Event()
    replies = iter(["1", "2", "3"])

    class Gated:
        async def complete(self, request: ModelRequest) -> ModelReply:
            await gate.wait()
            return ModelReply(next(replies))

    loop = Loop(model=Gated())
    order: list[str] = []

    async def run(text: str) -> None:
        order.append(f"{text}:{(await loop.run('s', text)).text}")

    async with trio.open_nursery() as nursery:
        for text in ("a", "b", "c"):  # "a" holds the session; "b", then "c" queue
            nursery.start_soon(run, text)
            await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert order == ["a:1", "b:2", "c:3"]
    steps: list[RunStep] = await loop.steps.last_n("s", 10)
    assert [s.content for s in steps] == ["a", "1", "b", "2", "c", "3"]
