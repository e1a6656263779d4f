"""The tool calls of one model reply are written as one batch: ``append_many``, all or nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
import trio

import agentloopmem
from agentloop import (
    EventCollector,
    LeaseLostError,
    Loop,
    ModelReply,
    ModelRequest,
    RunStatus,
    RunStep,
    ScriptedModel,
    StepAppended,
    StepType,
    StoreError,
    Tool,
    ToolCall,
    ToolContext,
)
from agentloop._shared import INT32_MAX

BASE = datetime(2026, 1, 1, tzinfo=UTC)


async def _echo(args: dict[str, object], ctx: ToolContext) -> str:
    return json.dumps(args)


ECHO = Tool("echo", "Echoes its arguments.", {"type": "object"}, _echo)


def three_calls(text: str = "") -> ModelReply:
    """A reply asking for three calls of ``echo``."""
    calls = tuple(ToolCall(f"c{i}", "echo", json.dumps({"i": i})) for i in range(3))
    return ModelReply(content=text, tool_calls=calls, prompt_tokens=7, completion_tokens=3)


class RecordingSteps(agentloopmem.StepStore):
    """Records every ``append`` and ``append_many`` call; ``after_batch`` runs after a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[RunStep] = []
        self.batches: list[list[RunStep]] = []
        self.after_batch = lambda: None

    async def append(self, step: RunStep) -> None:
        await super().append(step)
        self.appends.append(step)

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        await super().append_many(steps)
        self.batches.append(list(steps))
        self.after_batch()


class AppendOnlySteps:
    """A step store without ``append_many``: ``append`` fails once ``fail_at`` steps landed."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.inner = agentloopmem.StepStore()
        self.fail_at = fail_at
        self.appended = 0

    async def append(self, step: RunStep) -> None:
        if self.appended == self.fail_at:
            raise OSError("disk full")
        await self.inner.append(step)
        self.appended += 1

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        return await self.inner.last_n(session_id, n)


def _kinds(steps: Sequence[RunStep]) -> list[StepType]:
    return [step.step_type for step in steps]


class TestOneBatchPerReply:
    async def test_append_many_is_called_once_with_every_call_of_the_reply(self) -> None:
        """Three tool calls: one append_many of three tool_call steps, never an append of one."""
        steps = RecordingSteps()
        loop = Loop(
            model=ScriptedModel([three_calls("let me see"), "done"]), steps=steps, tools=[ECHO]
        )
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.completed
        [batch] = steps.batches
        assert _kinds(batch) == [StepType.tool_call] * 3
        assert [step.step_index for step in batch] == [1, 2, 3]
        assert [json.loads(step.content)["id"] for step in batch] == ["c0", "c1", "c2"]
        assert json.loads(batch[0].content)["text"] == "let me see"
        assert [(s.prompt_tokens, s.completion_tokens) for s in batch] == [(7, 3), (0, 0), (0, 0)]
        assert StepType.tool_call not in _kinds(steps.appends)
        trace = await steps.all("s")
        assert _kinds(trace) == [
            StepType.user,
            *[StepType.tool_call] * 3,
            *[StepType.tool_result] * 3,
            StepType.response,
        ]
        assert [step.step_index for step in trace] == list(range(8))

    async def test_events_indices_and_step_count_cover_the_batch(self) -> None:
        """Each step of the batch gets its StepAppended, in order; step_count counts them all."""
        events = EventCollector()
        loop = Loop(model=ScriptedModel([three_calls(), "done"]), tools=[ECHO], on_event=events)
        result = await loop.run("s", "hi")
        appended = [event.step for event in events.of_type(StepAppended)]
        assert appended == await loop.steps.last_n("s", 100)  # type: ignore[comparison-overlap]
        assert result.steps == 8
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert final.step_count == 8

    async def test_on_event_raising_inside_the_batch_still_counts_every_stored_step(self) -> None:
        """The batch landed whole: an on_event error on its first event leaves step_count right."""

        def on_event(event: object) -> None:
            if isinstance(event, StepAppended) and event.step.step_type is StepType.tool_call:
                raise RuntimeError("handler broke")

        loop = Loop(model=ScriptedModel([three_calls(), "done"]), tools=[ECHO], on_event=on_event)
        with pytest.raises(RuntimeError, match="handler broke"):
            await loop.run("s", "hi")
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.error, 4)
        assert len(await loop.steps.last_n("s", 100)) == 4


class TestNeverHalfAReply:
    async def test_cancel_requested_before_the_batch_leaves_none_of_the_calls(self) -> None:
        """Cancelled as the reply arrives: no tool_call step at all, and the run is cancelled."""
        scope = trio.CancelScope()

        class CancellingModel:
            async def complete(self, request: ModelRequest) -> ModelReply:
                scope.cancel()
                return three_calls()

        loop = Loop(model=CancellingModel(), tools=[ECHO])
        with scope:
            await loop.run("s", "hi")
        assert scope.cancelled_caught
        assert _kinds(await loop.steps.last_n("s", 100)) == [StepType.user]
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.cancelled, 1)

    async def test_cancel_requested_as_the_first_call_lands_keeps_all_of_them(self) -> None:
        """A cancel arriving once calls are stored finds the whole reply stored, never a part."""
        steps = RecordingSteps()
        loop = Loop(model=ScriptedModel([three_calls(), "never"]), steps=steps, tools=[ECHO])
        with trio.CancelScope() as scope:
            steps.after_batch = scope.cancel
            await loop.run("s", "hi")
        assert scope.cancelled_caught
        assert _kinds(await steps.all("s")) == [StepType.user, *[StepType.tool_call] * 3]
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.cancelled, 4)

    async def test_the_next_run_replays_no_unanswered_call(self) -> None:
        """Calls stored without results (the run stopped) are left out of the next request."""
        steps = RecordingSteps()
        model = ScriptedModel([three_calls(), "never", "fine"])
        loop = Loop(model=model, steps=steps, tools=[ECHO])
        with trio.CancelScope() as scope:
            steps.after_batch = scope.cancel
            await loop.run("s", "hi")
        steps.after_batch = lambda: None
        await loop.run("s", "again")
        assert [(m.role, m.content) for m in model.requests[-1].messages] == [
            ("user", "hi"),
            ("user", "again"),
        ]

    async def test_a_batch_past_the_int32_limit_appends_none_of_it(self) -> None:
        """Three calls needing indices past INT32_MAX: StoreError, not one of them appended."""
        loop = Loop(model=ScriptedModel([three_calls()]), tools=[ECHO])
        await loop.steps.append(RunStep("s", INT32_MAX - 2, StepType.user))
        with pytest.raises(
            StoreError, match=rf"^append_many failed .*step_index {INT32_MAX + 1}, past {INT32_MAX}"
        ):
            await loop.run("s", "hi")
        assert [s.step_index for s in await loop.steps.last_n("s", 10)] == [
            INT32_MAX - 2,
            INT32_MAX - 1,
        ]
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.error, 1)

    async def test_a_failing_batch_is_a_store_error_naming_append_many(self) -> None:
        """append_many raising: StoreError naming the operation, finalize(error), no call stored."""

        class Broken(agentloopmem.StepStore):
            async def append_many(self, steps: Sequence[RunStep]) -> None:
                raise OSError("disk full")

        loop = Loop(model=ScriptedModel([three_calls()]), steps=Broken(), tools=[ECHO])
        with pytest.raises(StoreError, match=r"^append_many failed for session 's': OSError"):
            await loop.run("s", "hi")
        assert _kinds(await loop.steps.last_n("s", 10)) == [StepType.user]
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.error, 1)


class TestLeasedBatch:
    async def test_a_leased_run_batches_through_the_fenced_view(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The default (leased) stores write the batch with the fenced view's append_many."""
        seen: list[int] = []
        original = agentloopmem.FencedStore.append_many

        async def spy(self: agentloopmem.FencedStore, steps: Sequence[RunStep]) -> None:
            seen.append(len(steps))
            await original(self, steps)

        monkeypatch.setattr(agentloopmem.FencedStore, "append_many", spy)
        loop = Loop(model=ScriptedModel([three_calls(), "done"]), tools=[ECHO])
        assert (await loop.run("s", "hi")).status is RunStatus.completed
        assert seen == [3]

    async def test_a_lost_lease_refuses_the_whole_batch(self) -> None:
        """Another owner takes the lease before the batch: LeaseLostError, no call stored."""
        offset = [0.0]
        steps = agentloopmem.StepStore()
        sessions = agentloopmem.SessionStore(
            lambda: BASE + timedelta(seconds=offset[0]), steps=steps
        )

        class TakeOver:
            async def complete(self, request: ModelRequest) -> ModelReply:
                offset[0] += 1000  # the run's lease expires; an intruder takes it
                assert await sessions.acquire_lease("s", "intruder", 5000) is not None
                return three_calls()

        loop = Loop(model=TakeOver(), steps=steps, sessions=sessions, tools=[ECHO])
        with pytest.raises(LeaseLostError):
            await loop.run("s", "hi")
        assert _kinds(await steps.all("s")) == [StepType.user]
        assert await sessions.final("s") is None


class TestStoreWithoutAppendMany:
    async def test_calls_are_appended_one_at_a_time_in_order(self) -> None:
        """Without the capability every step still lands, in order, counted once each."""
        steps = AppendOnlySteps()
        loop = Loop(model=ScriptedModel([three_calls(), "done"]), steps=steps, tools=[ECHO])
        assert (await loop.run("s", "hi")).steps == 8
        trace = await steps.inner.all("s")
        assert [s.step_index for s in trace] == list(range(8))
        assert _kinds(trace)[1:4] == [StepType.tool_call] * 3

    async def test_a_failure_part_way_counts_the_calls_that_landed(self) -> None:
        """Not atomic without the capability: step_count is what was stored, no more, no less."""
        steps = AppendOnlySteps(fail_at=3)  # the user step and two of the three calls
        loop = Loop(model=ScriptedModel([three_calls()]), steps=steps, tools=[ECHO])
        with pytest.raises(StoreError, match=r"^append failed for session 's': OSError"):
            await loop.run("s", "hi")
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.error, 3)
