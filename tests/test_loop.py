"""The loop's ordinary runs: conversation, replay, working memory, indices, events, results."""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import sys

import pytest
import trio
from _loop_helpers import CountingSessions, SlowModel, call

import agentloopmem
from agentloop import (
    EventCollector,
    Finalized,
    Loop,
    LoopConfig,
    Message,
    ModelReply,
    ModelRequest,
    RunStarted,
    RunStatus,
    ScriptedModel,
    Session,
    StepAppended,
    StepType,
    Tool,
    ToolCall,
    ToolContext,
    tool,
)


@tool
async def remember(ctx: ToolContext, key: str, value: str) -> str:
    """Store a value in working memory."""
    ctx.data[key] = value
    return f"stored {key}"


@tool
async def recall(ctx: ToolContext, key: str) -> str:
    """Read a value from working memory."""
    return str(ctx.data.get(key, "nothing"))


class TestDefaults:
    async def test_runs_out_of_the_box_with_memory_stores(self) -> None:
        """Loop(model=m) completes a run on fresh agentloopmem stores it exposes."""
        loop = Loop(model=ScriptedModel(["hello"]))
        assert isinstance(loop.steps, agentloopmem.StepStore)
        assert isinstance(loop.sessions, agentloopmem.SessionStore)
        result = await loop.run("s", "hi")
        assert (result.status, result.text, result.steps) == (RunStatus.completed, "hello", 2)

    async def test_each_store_can_be_swapped_alone(self) -> None:
        """Passing only one store keeps it and defaults the other."""
        steps = agentloopmem.StepStore()
        sessions = agentloopmem.SessionStore()
        only_steps = Loop(model=ScriptedModel([]), steps=steps)
        only_sessions = Loop(model=ScriptedModel([]), sessions=sessions)
        assert only_steps.steps is steps
        assert only_steps.sessions is not sessions
        assert only_sessions.sessions is sessions
        assert only_sessions.steps is not steps

    def test_packages_import_alone(self) -> None:
        """`import agentloop` and `import agentloopmem` each work in a fresh interpreter."""
        for module in ("agentloop", "agentloopmem"):
            subprocess.run([sys.executable, "-c", f"import {module}"], check=True)


class TestConversation:
    async def test_second_run_sees_first_runs_turns_and_data(self) -> None:
        """Run 2's first request replays run 1's turns in order, with run 1's tool-stored data."""
        model = ScriptedModel(
            [
                call("remember", key="colour", value="teal"),
                ModelReply("noted", prompt_tokens=3, completion_tokens=1),
                call("recall", call_id="c2", key="colour"),
                "it was teal",
            ]
        )
        loop = Loop(model=model, tools=[remember, recall])
        first = await loop.run("s", "remember teal")
        second = await loop.run("s", "what colour?")
        assert (first.status, second.status) == (RunStatus.completed, RunStatus.completed)
        run1_last = model.requests[1]
        run2_first = model.requests[2]
        assert run2_first.messages == (
            *run1_last.messages,
            Message(role="assistant", content="noted"),
            Message(role="user", content="what colour?"),
        )
        assert [m.role for m in run2_first.messages] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
        ]
        assert run2_first.messages[1].tool_calls[0].name == "remember"
        assert run2_first.messages[2] == Message(
            role="tool", content="stored colour", tool_call_id="c1"
        )
        assert json.loads(run2_first.data or "null") == {"colour": "teal"}
        assert model.requests[3].messages[-1].content == "teal"  # the tool read run 1's data

    async def test_steps_record_the_run_in_order(self) -> None:
        """A tool-using run appends user, tool_call, tool_result, response with indices 0..3."""
        loop = Loop(
            model=ScriptedModel([call("remember", key="k", value="v"), "done"]), tools=[remember]
        )
        await loop.run("s", "go")
        steps = await loop.steps.last_n("s", 10)
        assert [s.step_type for s in steps] == [
            StepType.user,
            StepType.tool_call,
            StepType.tool_result,
            StepType.response,
        ]
        assert [s.step_index for s in steps] == [0, 1, 2, 3]
        assert json.loads(steps[1].content) == {"id": "c1", "name": "remember"}
        assert json.loads(steps[1].tool_args) == {"key": "k", "value": "v"}
        assert steps[2].content == "stored k"

    async def test_request_carries_session_settings(self) -> None:
        """The request uses the session's model and system prompt, else the config's model."""
        model = ScriptedModel(["a", "b"])
        loop = Loop(model=model, config=LoopConfig(model="default-model"))
        await loop.run("plain", "hi")
        assert (model.requests[0].model, model.requests[0].system_prompt) == ("default-model", "")
        await loop.sessions.put(Session("seeded", model="m2", system_prompt="be brief"))  # type: ignore[attr-defined]
        await loop.run("seeded", "hi")
        assert (model.requests[1].model, model.requests[1].system_prompt) == ("m2", "be brief")

    async def test_request_lists_tool_specs(self) -> None:
        """Every tool's spec is in the request, in the order given."""
        model = ScriptedModel(["ok"])
        await Loop(model=model, tools=[remember, recall]).run("s", "hi")
        assert [spec.name for spec in model.requests[0].tools] == ["remember", "recall"]

    async def test_a_model_cannot_change_a_tool_for_later_requests(self) -> None:
        """Tool parameters in a request are read-only, so later requests see the tool as built."""
        seen: list[dict[str, object]] = []

        class Meddler:
            async def complete(self, request: ModelRequest) -> ModelReply:
                seen.append(copy.deepcopy(request.tools[0].parameters))
                with contextlib.suppress(TypeError):
                    request.tools[0].parameters["properties"]["key"] = {"type": "integer"}
                return ModelReply("ok")

        loop = Loop(model=Meddler(), tools=[recall])
        await loop.run("s", "one")
        await loop.run("s", "two")
        assert seen[0] == seen[1] == recall.parameters
        assert recall.parameters["properties"]["key"] == {"type": "string"}

    async def test_multiple_calls_in_one_reply_replay_as_one_message(self) -> None:
        """A reply with two calls is one assistant message in-run and after replay."""
        reply = ModelReply(
            content="checking both",
            tool_calls=(
                ToolCall("a", "recall", '{"key": "x"}'),
                ToolCall("b", "recall", '{"key": "y"}'),
            ),
        )
        model = ScriptedModel([reply, "done", "again"])
        loop = Loop(model=model, tools=[recall])
        await loop.run("s", "one")
        await loop.run("s", "two")
        in_run = model.requests[1].messages
        replayed = model.requests[2].messages
        assert replayed[: len(in_run)] == in_run
        assert in_run[1] == Message(
            role="assistant", content="checking both", tool_calls=reply.tool_calls
        )


class TestWorkingMemory:
    async def test_unchanged_data_is_not_written(self) -> None:
        """A run whose tools leave data alone never calls update_data (session stays absent)."""
        loop = Loop(model=ScriptedModel([call("recall", key="k"), "done"]), tools=[recall])
        await loop.run("s", "hi")
        steps = await loop.steps.last_n("s", 10)
        assert steps[2].content == "nothing"
        assert (await loop.sessions.get("s")).data is None

    async def test_reassigned_data_is_persisted(self) -> None:
        """A tool that reassigns ctx.data has the new value persisted."""

        async def replace(args: dict[str, object], ctx: ToolContext) -> str:
            ctx.data = ["a", 1]
            return "ok"

        tools = [Tool("replace", "replace data", {"type": "object"}, replace)]
        loop = Loop(model=ScriptedModel([call("replace"), "done"]), tools=tools)
        await loop.run("s", "hi")
        assert json.loads((await loop.sessions.get("s")).data or "") == ["a", 1]

    async def test_data_bytes_carried_is_utf8_size(self) -> None:
        """finalize's data_bytes_carried is the UTF-8 size of the data carried out."""
        loop = Loop(
            model=ScriptedModel([call("remember", key="k", value="é"), "ok"]), tools=[remember]
        )
        await loop.run("s", "hi")
        data = (await loop.sessions.get("s")).data
        assert data is not None
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert final.data_bytes_carried == len(data.encode("utf-8")) > len(data)

    async def test_tool_context_names_the_session(self) -> None:
        """ctx.session_id is the id of the session the run is for."""
        seen: list[str] = []

        async def who(args: dict[str, object], ctx: ToolContext) -> str:
            seen.append(ctx.session_id)
            return ctx.session_id

        loop = Loop(model=ScriptedModel([call("who"), "ok"]), tools=[Tool("who", "", {}, who)])
        await loop.run("Session-Ä", "hi")
        assert seen == ["Session-Ä"]

    async def test_stored_null_is_none_not_an_empty_dict(self) -> None:
        """A stored JSON null reaches tools as None; a tool storing None keeps it null."""
        seen: list[object] = []

        async def peek(args: dict[str, object], ctx: ToolContext) -> str:
            seen.append(ctx.data)
            return "ok"

        async def clear(args: dict[str, object], ctx: ToolContext) -> str:
            ctx.data = None
            return "ok"

        tools = [Tool("peek", "", {}, peek), Tool("clear", "", {}, clear)]
        model = ScriptedModel([call("peek"), "a", call("clear"), call("peek", "c2"), "b"])
        loop = Loop(model=model, tools=tools)
        await loop.sessions.update_data("s", "null")
        await loop.run("s", "first")
        await loop.run("new", "second")
        assert seen == [None, None]
        assert (await loop.sessions.get("new")).data == "null"

    async def test_in_run_view_is_what_was_stored(self) -> None:
        """After a write, later tools in the run see the stored value (keys become strings)."""
        seen: list[object] = []

        async def set_keys(args: dict[str, object], ctx: ToolContext) -> str:
            ctx.data = {1: "a", "t": (1, 2)}
            return "ok"

        async def peek(args: dict[str, object], ctx: ToolContext) -> str:
            seen.append(ctx.data)
            return "ok"

        tools = [Tool("set", "", {}, set_keys), Tool("peek", "", {}, peek)]
        loop = Loop(model=ScriptedModel([call("set"), call("peek", "c2"), "done"]), tools=tools)
        await loop.run("s", "hi")
        stored = (await loop.sessions.get("s")).data
        assert stored is not None
        assert seen == [json.loads(stored)] == [{"1": "a", "t": [1, 2]}]


class TestIndices:
    async def test_indices_monotonic_across_runs_beyond_the_window(self) -> None:
        """Five tool-using runs with history_window=3 number their steps 0..19 without gaps."""
        replies = [r for i in range(5) for r in (call("recall", call_id=f"c{i}", key="k"), f"r{i}")]
        loop = Loop(
            model=ScriptedModel(replies), tools=[recall], config=LoopConfig(history_window=3)
        )
        for i in range(5):
            assert (await loop.run("s", f"m{i}")).status is RunStatus.completed
        steps = await loop.steps.all("s")  # type: ignore[attr-defined]
        assert [s.step_index for s in steps] == list(range(20))

    async def test_window_limits_replayed_history(self) -> None:
        """Only the last history_window steps are replayed to the model."""
        model = ScriptedModel(["a", "b", "c"])
        loop = Loop(model=model, config=LoopConfig(history_window=2))
        for message in ("one", "two", "three"):
            await loop.run("s", message)
        assert [m.content for m in model.requests[2].messages] == ["two", "b", "three"]


class TestResultAndEvents:
    async def test_result_and_finalize_sum_tokens_and_count_steps(self) -> None:
        """RunResult and finalize agree: steps appended, summed tokens, duration."""
        model = ScriptedModel(
            [
                ModelReply(
                    tool_calls=(ToolCall("c", "recall", "{}"),),
                    prompt_tokens=10,
                    completion_tokens=2,
                ),
                ModelReply("done", prompt_tokens=20, completion_tokens=5),
            ]
        )
        loop = Loop(model=model, tools=[recall])
        result = await loop.run("s", "hi")
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (result.steps, result.prompt_tokens, result.completion_tokens) == (4, 30, 7)
        assert final.step_count == 4
        assert (final.prompt_tokens, final.completion_tokens) == (30, 7)
        assert final.duration_ms == result.duration_ms
        assert final.status is RunStatus.completed

    async def test_finalize_exactly_once_per_run(self) -> None:
        """Every way a run ends calls finalize once: completed, tool error, budget, model error."""
        sessions = CountingSessions()
        model = ScriptedModel(
            ["done", call("missing"), "recovered", call("recall"), call("recall")]
        )
        loop = Loop(
            model=model, sessions=sessions, tools=[recall], config=LoopConfig(max_iterations=2)
        )
        await loop.run("completed", "hi")
        await loop.run("tool-error", "hi")
        await loop.run("max-iterations", "hi")
        with pytest.raises(RuntimeError):
            await loop.run("model-error", "hi")
        assert sessions.finalize_calls == {
            "completed": 1,
            "tool-error": 1,
            "max-iterations": 1,
            "model-error": 1,
        }

    async def test_duration_measured_on_trio_clock(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """duration_ms is the run's time on trio's clock (and the model step's duration)."""
        loop = Loop(model=SlowModel(delay=1.5))
        result = await loop.run("s", "hi")
        assert result.duration_ms == 1500
        response = (await loop.steps.last_n("s", 1))[0]
        assert response.duration_ms == 1500

    async def test_events_in_order(self) -> None:
        """on_event gets RunStarted, a StepAppended per step, then Finalized."""
        events = EventCollector()
        loop = Loop(model=ScriptedModel(["hi back"]), on_event=events)
        await loop.run("s", "hi")
        assert [type(e) for e in events.events] == [
            RunStarted,
            StepAppended,
            StepAppended,
            Finalized,
        ]
        assert events.of_type(RunStarted) == [RunStarted("s", "hi")]
        assert [e.step.content for e in events.of_type(StepAppended)] == ["hi", "hi back"]
        assert events.of_type(Finalized)[0].summary.status is RunStatus.completed
        events.clear()
        assert events.events == []

    async def test_on_event_failure_fails_the_run(self) -> None:
        """An on_event exception propagates and the run is finalized as an error."""

        def explode(event: object) -> None:
            if isinstance(event, StepAppended):
                raise RuntimeError("handler bug")

        loop = Loop(model=ScriptedModel(["x"]), on_event=explode)
        with pytest.raises(RuntimeError, match=r"^handler bug$"):
            await loop.run("s", "hi")
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert final.status is RunStatus.error

    async def test_run_checks_its_arguments(self) -> None:
        """run refuses a bad session id or message before touching the stores."""
        loop = Loop(model=ScriptedModel([]))
        with pytest.raises(ValueError, match=r"^session_id must be a non-empty str"):
            await loop.run("", "hi")
        with pytest.raises(TypeError, match=r"^message must be a str"):
            await loop.run("s", b"hi")  # type: ignore[arg-type]
