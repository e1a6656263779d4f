"""Compaction inside a run: the checkpoint is written once and honoured by the next run."""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from agentloop import (
    Compacted,
    Compaction,
    CompactionCheckpoint,
    EventCollector,
    Loop,
    LoopWarning,
    Message,
    ModelReply,
    RunStatus,
    ScriptedModel,
    StepType,
    Tool,
    ToolCall,
)
from agentloop._rehydrate import replay


class ThresholdCompactor:
    """Summarizes all but the last message once the history holds more than ``limit`` messages."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: list[tuple[Message, ...]] = []

    async def compact(self, messages: Sequence[Message]) -> Compaction:
        self.seen.append(tuple(messages))
        if len(messages) <= self.limit:
            return Compaction("", 0)
        text = " / ".join(m.content for m in messages[:-1])
        return Compaction(
            f"summary: {text}", len(messages) - 1, prompt_tokens=5, completion_tokens=7
        )


@attrs.define
class FixedCompactor:
    """Returns the same result (or raises it) every time."""

    result: Compaction | Exception

    async def compact(self, messages: Sequence[Message]) -> Compaction:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


class TestCompaction:
    async def test_checkpoint_written_once_and_honoured(self) -> None:
        """Run 3 writes one summary step; run 4 replays it first and does not re-summarize."""
        compactor = ThresholdCompactor(limit=4)
        model = ScriptedModel(["a1", "a2", "a3", "a4"])
        loop = Loop(model=model, compactor=compactor)
        for message in ("u1", "u2", "u3", "u4"):
            assert (await loop.run("s", message)).status is RunStatus.completed
        steps = await loop.steps.all("s")  # type: ignore[attr-defined]
        summaries = [s for s in steps if s.step_type is StepType.summary]
        assert len(summaries) == 1
        assert summaries[0].content == "summary: u1 / a1 / u2 / a2"
        user3 = next(s for s in steps if s.content == "u3")
        assert (
            CompactionCheckpoint.from_json(summaries[0].tool_args).retain_from_step
            == user3.step_index
        )
        summary_message = Message(role="system", content="summary: u1 / a1 / u2 / a2")
        assert model.requests[2].messages == (summary_message, Message(role="user", content="u3"))
        assert [m.content for m in model.requests[3].messages] == [
            summary_message.content,
            "u3",
            "a3",
            "u4",
        ]
        assert compactor.seen[3][0] == summary_message

    async def test_runs_once_per_run(self) -> None:
        """The compactor is called once per run, however many model calls the run makes."""
        compactor = ThresholdCompactor(limit=100)
        replies = [
            ModelReply(tool_calls=(ToolCall("a", "missing", "{}"),)),
            ModelReply(tool_calls=(ToolCall("b", "missing", "{}"),)),
            "done",
            "again",
        ]
        loop = Loop(model=ScriptedModel(replies), compactor=compactor)
        await loop.run("s", "one")
        await loop.run("s", "two")
        assert [len(seen) for seen in compactor.seen] == [1, 7]

    async def test_compaction_tokens_count_toward_the_run(self) -> None:
        """Compaction tokens are added to the run's totals and carried on the summary step."""
        compactor = FixedCompactor(Compaction("sum", 1, prompt_tokens=5, completion_tokens=7))
        loop = Loop(model=ScriptedModel(["a"]), compactor=compactor)
        result = await loop.run("s", "hi")
        assert (result.prompt_tokens, result.completion_tokens, result.steps) == (5, 7, 3)
        summary = (await loop.steps.last_n("s", 3))[1]
        assert (summary.step_type, summary.prompt_tokens, summary.completion_tokens) == (
            StepType.summary,
            5,
            7,
        )

    async def test_empty_summary_writes_nothing(self) -> None:
        """An empty summary means nothing to compact: no summary step, messages untouched."""
        loop = Loop(model=ScriptedModel(["a"]), compactor=FixedCompactor(Compaction("", 0)))
        await loop.run("s", "hi")
        kinds = [s.step_type for s in await loop.steps.last_n("s", 5)]
        assert kinds == [StepType.user, StepType.response]

    async def test_summarizing_everything(self) -> None:
        """retained_from == len(messages) keeps nothing: the model sees the summary alone."""
        model = ScriptedModel(["a"])
        loop = Loop(model=model, compactor=FixedCompactor(Compaction("all of it", 1)))
        await loop.run("s", "hi")
        assert model.requests[0].messages == (Message(role="system", content="all of it"),)
        summary = (await loop.steps.last_n("s", 3))[1]
        assert json.loads(summary.tool_args) == {"retain_from_step": 2}

    async def test_failure_is_a_warning(self) -> None:
        """A raising compactor is a LoopWarning; the run completes uncompacted."""
        events = EventCollector()
        loop = Loop(
            model=ScriptedModel(["a"]),
            compactor=FixedCompactor(RuntimeError("summarizer down")),
            on_event=events,
        )
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.completed
        [warning] = events.of_type(LoopWarning)
        assert warning.message.startswith("compaction failed; history kept whole: RuntimeError")
        assert events.of_type(Compacted) == []

    async def test_out_of_range_retained_from_is_a_warning(self) -> None:
        """retained_from past the end of the messages is refused with a warning."""
        events = EventCollector()
        loop = Loop(
            model=ScriptedModel(["a"]),
            compactor=FixedCompactor(Compaction("sum", 5)),
            on_event=events,
        )
        assert (await loop.run("s", "hi")).status is RunStatus.completed
        assert "retained_from must be <= 1" in events.of_type(LoopWarning)[0].message
        assert [s.step_type for s in await loop.steps.last_n("s", 5)] == [
            StepType.user,
            StepType.response,
        ]

    async def test_compacted_event(self) -> None:
        """A compaction emits Compacted with the summary and retain_from_step."""
        events = EventCollector()
        loop = Loop(
            model=ScriptedModel(["a"]),
            compactor=FixedCompactor(Compaction("sum", 0, 1, 2)),
            on_event=events,
        )
        await loop.run("s", "hi")
        assert events.of_type(Compacted) == [Compacted("s", "sum", 0, 1, 2)]

    async def test_in_run_view_matches_the_next_replay(self) -> None:
        """Keeping everything (retained_from=0) supersedes the old summary in-run as on replay."""
        model = ScriptedModel(["a", "b", "c"])
        loop = Loop(model=model, compactor=FixedCompactor(Compaction("NEW", 0)))
        for run in range(3):
            await loop.run("s", f"u{run}")
            replayed, _ = replay(await loop.steps.all("s"))  # type: ignore[attr-defined]
            assert tuple(replayed[:-1]) == model.requests[run].messages
        assert [(m.role, m.content) for m in model.requests[2].messages] == [
            ("system", "NEW"),
            ("user", "u0"),
            ("assistant", "a"),
            ("user", "u1"),
            ("assistant", "b"),
            ("user", "u2"),
        ]

    async def test_results_cut_off_from_their_call_are_dropped_in_run(self) -> None:
        """A kept tool result whose call was summarized away is dropped, as replay drops it."""

        class CutAfterCall:
            async def compact(self, messages: Sequence[Message]) -> Compaction:
                cut = next(i for i, m in enumerate(messages) if m.role == "tool")
                return Compaction("S", cut) if len(messages) > 2 else Compaction("", 0)

        async def ok(args: dict[str, object], ctx: object) -> str:
            return "ok"

        call = ModelReply(tool_calls=(ToolCall("c1", "ok"),))
        model = ScriptedModel([call, "a0", "a1"])
        loop = Loop(model=model, tools=[Tool("ok", "", {}, ok)], compactor=CutAfterCall())
        await loop.run("s", "u0")
        await loop.run("s", "u1")
        replayed, _ = replay(await loop.steps.all("s"))  # type: ignore[attr-defined]
        assert tuple(replayed[:-1]) == model.requests[2].messages
        assert [m.role for m in model.requests[2].messages] == ["system", "assistant", "user"]
