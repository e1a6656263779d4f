"""How runs end badly: tool errors, budgets, timeout, cancellation, store and model failures."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing
from _loop_helpers import (
    CountingSessions,
    FailingGet,
    FailingSteps,
    SlowFinalize,
    SlowGet,
    SlowLastN,
    SlowModel,
    UnfencedWrites,
    call,
)

import agentloopmem
from agentloop import (
    EventCollector,
    FinalizeSummary,
    Loop,
    LoopConfig,
    LoopWarning,
    ModelReply,
    ModelRequest,
    RunStatus,
    RunStep,
    ScriptedModel,
    Session,
    StepType,
    StoreError,
    StoreUnavailableError,
    Tool,
    ToolCall,
    ToolContext,
    tool,
)


@tool
async def divide(a: float, b: float) -> str:
    """Divide a by b."""
    return str(a / b)


async def _steps(loop: Loop, session_id: str = "s") -> list[tuple[StepType, str]]:
    return [(s.step_type, s.content) for s in await loop.steps.last_n(session_id, 100)]


async def _final_status(loop: Loop, session_id: str = "s") -> RunStatus | None:
    final = await loop.sessions.final(session_id)  # type: ignore[attr-defined]
    return None if final is None else final.status  # type: ignore[no-any-return]


class TestToolErrors:
    async def test_tool_exception_becomes_error_result_and_run_continues(self) -> None:
        """A raising tool yields an 'Error:' tool_result the model sees; the run completes."""
        model = ScriptedModel([call("divide", a=1, b=0), "cannot divide by zero"])
        loop = Loop(model=model, tools=[divide])
        result = await loop.run("s", "1/0?")
        assert (result.status, result.text) == (RunStatus.completed, "cannot divide by zero")
        tool_result = (await _steps(loop))[2]
        assert tool_result[0] is StepType.tool_result
        assert tool_result[1].startswith("Error: tool 'divide' failed: ZeroDivisionError")
        assert model.requests[1].messages[-1].content == tool_result[1]

    async def test_unknown_tool(self) -> None:
        """A call to a tool that does not exist is an 'Error:' result naming the tools."""
        loop = Loop(model=ScriptedModel([call("nope"), "sorry"]), tools=[divide])
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.completed
        assert (await _steps(loop))[2][
            1
        ] == "Error: unknown tool 'nope'; available tools: ['divide']"

    async def test_malformed_arguments(self) -> None:
        """Arguments that are not JSON are an 'Error:' result; the raw text survives replay."""
        bad = ModelReply(tool_calls=(ToolCall("c1", "divide", "{a: 1"),))
        model = ScriptedModel([bad, "oops", "again"])
        loop = Loop(model=model, tools=[divide])
        assert (await loop.run("s", "hi")).status is RunStatus.completed
        assert (await _steps(loop))[2][1].startswith("Error: malformed arguments for tool 'divide'")
        await loop.run("s", "next")
        assert model.requests[2].messages[1].tool_calls[0].args == "{a: 1"

    async def test_arguments_not_an_object(self) -> None:
        """JSON arguments that are not an object are an 'Error:' result."""
        bad = ModelReply(tool_calls=(ToolCall("c1", "divide", "[1, 2]"),))
        loop = Loop(model=ScriptedModel([bad, "oops"]), tools=[divide])
        await loop.run("s", "hi")
        assert (await _steps(loop))[2][1].startswith(
            "Error: arguments for tool 'divide' must be a JSON object"
        )

    async def test_wrong_argument_type_from_tool_decorator(self) -> None:
        """@tool's argument check reaches the model as an 'Error:' result."""
        loop = Loop(model=ScriptedModel([call("divide", a="x", b=2), "oops"]), tools=[divide])
        await loop.run("s", "hi")
        assert "argument 'a' must be number" in (await _steps(loop))[2][1]

    async def test_non_str_output_is_an_error(self) -> None:
        """A tool returning something other than str is an 'Error:' result."""

        async def number(args: dict[str, object], ctx: ToolContext) -> str:
            return 42  # type: ignore[return-value]

        tools = [Tool("number", "", {}, number)]
        loop = Loop(model=ScriptedModel([call("number"), "oops"]), tools=tools)
        await loop.run("s", "hi")
        assert (await _steps(loop))[2][1].startswith("Error: tool 'number' failed: TypeError")

    async def test_failed_tool_leaves_no_data_change(self) -> None:
        """Data a tool changed before raising is rolled back and never persisted."""

        async def half_done(args: dict[str, object], ctx: ToolContext) -> str:
            ctx.data["partial"] = True
            raise RuntimeError("crashed midway")

        async def peek(args: dict[str, object], ctx: ToolContext) -> str:
            return json.dumps(ctx.data)

        tools = [Tool("half", "", {}, half_done), Tool("peek", "", {}, peek)]
        model = ScriptedModel([call("half"), call("peek", call_id="c2"), "done"])
        loop = Loop(model=model, tools=tools)
        await loop.run("s", "hi")
        assert (await _steps(loop))[4][1] == "{}"
        assert (await loop.sessions.get("s")).data is None

    async def test_non_json_data_is_refused(self) -> None:
        """A tool leaving non-JSON data gets an 'Error:' result and data is not written."""

        async def set_data(args: dict[str, object], ctx: ToolContext) -> str:
            ctx.data = {"s": {1, 2}}
            return "ok"

        loop = Loop(
            model=ScriptedModel([call("set"), "oops"]), tools=[Tool("set", "", {}, set_data)]
        )
        await loop.run("s", "hi")
        assert (await _steps(loop))[2][1].startswith(
            "Error: tool 'set' left working memory that is not JSON"
        )
        assert (await loop.sessions.get("s")).data is None

    async def test_data_nested_too_deeply_is_an_error_result(self) -> None:
        """Data too deep to encode is an 'Error:' result (not a crash) and is not stored."""

        async def deep(args: dict[str, object], ctx: ToolContext) -> str:
            nested: list[object] = []
            for _ in range(100_000):
                nested = [nested]
            ctx.data = nested
            return "ok"

        async def peek(args: dict[str, object], ctx: ToolContext) -> str:
            return json.dumps(ctx.data)

        tools = [Tool("deep", "", {}, deep), Tool("peek", "", {}, peek)]
        loop = Loop(model=ScriptedModel([call("deep"), call("peek", "c2"), "ok"]), tools=tools)
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.completed
        steps = await _steps(loop)
        assert steps[2][1].startswith("Error: tool 'deep' left working memory that is not JSON")
        assert steps[4][1] == "{}"
        assert (await loop.sessions.get("s")).data is None


class UnreadableData(agentloopmem.SessionStore):
    """A buggy store: ``get`` hands back data text that bypassed validation."""

    def __init__(self, raw: str) -> None:
        super().__init__()
        self.raw = raw

    async def get(self, session_id: str) -> Session:
        session = await super().get(session_id)
        if session.data is None:
            object.__setattr__(session, "data", self.raw)  # what a broken store could return
        return session


class TestUnreadableData:
    @pytest.mark.parametrize("raw", ['{"x": 1e400}', "not json", "[" * 100_000 + "]" * 100_000])
    async def test_does_not_brick_the_session(self, raw: str) -> None:
        """Stored data that cannot be read back is a warning; runs still complete."""
        seen: list[object] = []

        async def peek(args: dict[str, object], ctx: ToolContext) -> str:
            seen.append(ctx.data)
            return "ok"

        sessions = UnreadableData(raw)
        events = EventCollector()
        model = ScriptedModel([call("peek"), "a", "b"])
        tools = [Tool("peek", "", {}, peek)]
        loop = Loop(model=model, sessions=sessions, tools=tools, on_event=events)
        for message in ("first", "second"):
            assert (await loop.run("s", message)).status is RunStatus.completed
        assert seen == [{}]
        assert [r.data for r in model.requests] == [None, None, None]
        warnings = [w.message for w in events.of_type(LoopWarning)]
        assert len(warnings) == 2
        assert warnings[0].startswith("session data cannot be loaded (")
        assert (await sessions.get("s")).data == raw  # left as it is
        final = await sessions.final("s")
        assert final is not None
        assert final.data_bytes_carried == len(raw.encode("utf-8"))

    async def test_a_tool_write_replaces_it(self) -> None:
        """A tool that writes working memory stores it over the unreadable data."""
        loop = Loop(
            model=ScriptedModel([call("write"), "a"]),
            sessions=UnreadableData('{"x": 1e400}'),
            tools=[write_k],
            on_event=EventCollector(),
        )
        await loop.run("s", "hi")
        assert (await loop.sessions.get("s")).data == '{"k":1}'


@tool(name="write")
async def write_k(ctx: ToolContext) -> str:
    """Write k."""
    ctx.data["k"] = 1
    return "ok"


class TestBudgets:
    async def test_max_iterations(self) -> None:
        """A model that never stops calling tools ends with an error step and max_iterations."""
        replies = [call("divide", call_id=f"c{i}", a=1, b=1) for i in range(3)]
        loop = Loop(
            model=ScriptedModel(replies), tools=[divide], config=LoopConfig(max_iterations=3)
        )
        result = await loop.run("s", "loop forever")
        assert (result.status, result.text, result.steps) == (
            RunStatus.max_iterations,
            "",
            1 + 3 * 2 + 1,
        )
        last = (await _steps(loop))[-1]
        assert last[0] is StepType.error
        assert last[1].startswith("max_iterations reached: 3 model calls")
        assert await _final_status(loop) is RunStatus.max_iterations

    async def test_token_budget(self) -> None:
        """Once the run's tokens reach token_budget no further model call is made."""
        costly = ModelReply(
            tool_calls=(ToolCall("c", "divide", '{"a": 1, "b": 1}'),),
            prompt_tokens=60,
            completion_tokens=40,
        )
        model = ScriptedModel([costly, "never reached"])
        loop = Loop(model=model, tools=[divide], config=LoopConfig(token_budget=100))
        result = await loop.run("s", "hi")
        assert (result.status, result.prompt_tokens, result.completion_tokens) == (
            RunStatus.budget_exhausted,
            60,
            40,
        )
        assert len(model.requests) == 1
        assert (await _steps(loop))[-1] == (
            StepType.error,
            "token_budget exhausted: 100 of 100 tokens used",
        )
        assert await _final_status(loop) is RunStatus.budget_exhausted

    async def test_final_reply_completes_even_over_budget(self) -> None:
        """A final response that crosses the budget still completes the run."""
        model = ScriptedModel([ModelReply("answer", prompt_tokens=500)])
        loop = Loop(model=model, config=LoopConfig(token_budget=100))
        assert (await loop.run("s", "hi")).status is RunStatus.completed

    async def test_run_timeout(self, autojump_clock: trio.testing.MockClock) -> None:
        """A run past run_timeout stops with an error step and status timeout."""
        loop = Loop(model=SlowModel(), config=LoopConfig(run_timeout=30))
        start = trio.current_time()
        result = await loop.run("s", "hi")
        assert trio.current_time() - start == pytest.approx(30)
        assert (result.status, result.duration_ms, result.steps) == (RunStatus.timeout, 30000, 2)
        assert (await _steps(loop))[-1] == (StepType.error, "run_timeout expired after 30s")
        assert await _final_status(loop) is RunStatus.timeout

    async def test_timeout_before_history_loaded_appends_nothing(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A timeout while last_n runs records timeout but no step (its index is unknown)."""
        steps = SlowLastN()
        loop = Loop(model=ScriptedModel(["a", "b"]), steps=steps, config=LoopConfig(run_timeout=5))
        await loop.run("s", "first")
        steps.delay = 10
        result = await loop.run("s", "second")
        assert (result.status, result.steps) == (RunStatus.timeout, 0)
        assert await _final_status(loop) is RunStatus.timeout
        steps.delay = 0
        await loop.run("s", "third")
        assert [s.step_index for s in await steps.all("s")] == [0, 1, 2, 3]

    async def test_timeout_during_get_is_recorded(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A get that outlasts run_timeout ends the run as timeout, with no step."""
        loop = Loop(model=ScriptedModel([]), sessions=SlowGet(), config=LoopConfig(run_timeout=5))
        result = await loop.run("s", "hi")
        assert (result.status, result.steps) == (RunStatus.timeout, 0)
        assert await loop.steps.last_n("s", 5) == []
        assert await _final_status(loop) is RunStatus.timeout

    async def test_timeout_recording_is_bounded_once(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A finalize(timeout) that hangs is tried once, bounded once, and named in the error."""
        sessions = SlowFinalize()
        config = LoopConfig(run_timeout=10, finalize_timeout=2)
        loop = Loop(model=SlowModel(), sessions=sessions, config=config)
        start = trio.current_time()
        with pytest.raises(
            StoreError,
            match=r"^finalize failed for session 's': recording the run_timeout did not finish "
            r"within finalize_timeout \(2s\)",
        ) as info:
            await loop.run("s", "hi")
        assert isinstance(info.value.__cause__, trio.TooSlowError)
        assert trio.current_time() - start == pytest.approx(12)
        assert sessions.finalize_calls == 1
        assert (await _steps(loop))[-1] == (StepType.error, "run_timeout expired after 10s")

    async def test_timeout_error_step_that_hangs_is_named(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """An error-step append that outlasts finalize_timeout is named; no finalize follows."""

        class HangingAppend(agentloopmem.StepStore):
            hang = False

            async def append(self, step: RunStep) -> None:
                if self.hang:
                    await trio.sleep_forever()
                await super().append(step)

        class HangAfterUser(SlowModel):
            async def complete(self, request: ModelRequest) -> ModelReply:
                steps.hang = True
                return await super().complete(request)

        steps = HangingAppend()
        sessions = CountingSessions()
        config = LoopConfig(run_timeout=10, finalize_timeout=2)
        loop = Loop(model=HangAfterUser(), steps=steps, sessions=sessions, config=config)
        start = trio.current_time()
        with pytest.raises(StoreError, match=r"^append failed for session 's': recording"):
            await loop.run("s", "hi")
        assert trio.current_time() - start == pytest.approx(12)
        assert sessions.finalize_calls == {}

    async def test_failing_timeout_finalize_is_not_retried(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A finalize(timeout) that raises is reported once, never tried a second time."""

        class NoFinalize(CountingSessions):
            async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
                await super().finalize(session_id, summary)
                raise StoreUnavailableError("gone")

        sessions = NoFinalize()
        loop = Loop(model=SlowModel(), sessions=sessions, config=LoopConfig(run_timeout=10))
        with pytest.raises(StoreError, match=r"^finalize failed for session 's'"):
            await loop.run("s", "hi")
        assert sessions.finalize_calls == {"s": 1}


class TestCancellation:
    async def test_cancelled_during_get_records_cancelled(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A run cancelled while get waits is finalized as cancelled with no step."""
        loop = Loop(model=ScriptedModel([]), sessions=SlowGet())
        with trio.move_on_after(1) as scope:
            await loop.run("s", "hi")
        assert scope.cancelled_caught
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.cancelled, 0)
        assert await loop.steps.last_n("s", 5) == []

    async def test_outside_cancellation_records_cancelled(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Cancelling a run finalizes it as cancelled and lets the cancellation propagate."""
        loop = Loop(model=SlowModel())
        returned = False
        with trio.move_on_after(5) as scope:
            await loop.run("s", "hi")
            returned = True
        assert scope.cancelled_caught
        assert not returned
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.cancelled, 1)

    async def test_cancelled_inside_a_tool_nursery(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A cancellation surfacing as a tool nursery's exception group is still cancelled."""

        async def fan_out(args: dict[str, object], ctx: ToolContext) -> str:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                nursery.start_soon(trio.sleep_forever)
            return "never"

        tools = [Tool("fan_out", "", {}, fan_out)]
        loop = Loop(model=ScriptedModel([call("fan_out")]), tools=tools)
        with trio.move_on_after(1) as scope:
            await loop.run("s", "hi")
        assert scope.cancelled_caught
        assert await _final_status(loop) is RunStatus.cancelled

    async def test_cancelled_finalize_is_shielded(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A finalize that needs to wait still completes after the run was cancelled."""
        sessions = SlowFinalize(delay=1)
        loop = Loop(model=SlowModel(), sessions=sessions)
        with trio.move_on_after(5):
            await loop.run("s", "hi")
        assert (await sessions.final("s")).status is RunStatus.cancelled  # type: ignore[union-attr]

    async def test_cancelled_finalize_is_bounded(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A hanging finalize is abandoned after finalize_timeout; the cancellation propagates."""
        sessions = SlowFinalize()
        events = EventCollector()
        loop = Loop(
            model=SlowModel(),
            sessions=sessions,
            config=LoopConfig(finalize_timeout=2),
            on_event=events,
        )
        start = trio.current_time()
        with trio.move_on_after(5) as scope:
            await loop.run("s", "hi")
        assert scope.cancelled_caught
        assert trio.current_time() - start == pytest.approx(7)
        assert sessions.finalize_calls == 1
        assert await sessions.final("s") is None
        warnings = [w.message for w in events.of_type(LoopWarning)]
        assert warnings == ["finalize(cancelled) abandoned after 2s (finalize_timeout)"]

    async def test_cancelled_during_normal_finalize_records_cancelled(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A cancellation that interrupts the closing finalize is still recorded, as cancelled."""
        sessions = SlowFinalize(delay=10)
        config = LoopConfig(finalize_timeout=20)
        loop = Loop(model=ScriptedModel(["done"]), sessions=sessions, config=config)
        with trio.move_on_after(5):
            await loop.run("s", "hi")
        final = await sessions.final("s")
        assert final is not None
        assert final.status is RunStatus.cancelled


class TestStoreFailures:
    async def test_append_failure_raises_store_error_and_finalizes_error(self) -> None:
        """A store that raises on append stops the run: StoreError, then finalize(error)."""
        steps = FailingSteps(fail_at=1)
        loop = Loop(model=ScriptedModel(["x"]), steps=steps)
        with pytest.raises(
            StoreError, match=r"^append failed for session 's': StoreUnavailableError"
        ) as info:
            await loop.run("s", "hi")
        assert isinstance(info.value.__cause__, StoreUnavailableError)
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.error, 1)

    async def test_failing_get_writes_nothing(self) -> None:
        """A failing get raises StoreError; no step is appended and nothing is finalized."""
        sessions = FailingGet()
        model = ScriptedModel(["x"])
        loop = Loop(model=model, sessions=sessions)
        with pytest.raises(StoreError, match=r"^get failed for session 's'"):
            await loop.run("s", "hi")
        assert await loop.steps.last_n("s", 10) == []
        assert await sessions.final("s") is None
        assert not await sessions.exists("s")
        assert model.requests == []

    async def test_update_data_failure(self) -> None:
        """A failing update_data is a StoreError naming it, and the run is finalized as error."""

        class NoData(UnfencedWrites):
            async def update_data(self, session_id: str, snapshot: str | None) -> None:
                raise StoreUnavailableError("read-only replica")

        @tool
        async def write(ctx: ToolContext) -> str:
            """Write something."""
            ctx.data["x"] = 1
            return "ok"

        sessions = NoData()
        loop = Loop(model=ScriptedModel([call("write"), "done"]), sessions=sessions, tools=[write])
        with pytest.raises(StoreError, match=r"^update_data failed for session 's'"):
            await loop.run("s", "hi")
        assert (await sessions.final("s")).status is RunStatus.error  # type: ignore[union-attr]

    async def test_failing_finalize_raises_store_error(self) -> None:
        """A finalize that fails is a StoreError naming finalize."""

        class NoFinalize(UnfencedWrites):
            async def finalize(self, session_id: str, summary: object) -> None:  # type: ignore[override]
                raise StoreUnavailableError("gone")

        events = EventCollector()
        loop = Loop(model=ScriptedModel(["done"]), sessions=NoFinalize(), on_event=events)
        with pytest.raises(StoreError, match=r"^finalize failed for session 's'"):
            await loop.run("s", "hi")
        assert any("finalize(error) failed" in w.message for w in events.of_type(LoopWarning))


class TestModelFailures:
    async def test_script_running_out_fails_the_run(self) -> None:
        """An exhausted ScriptedModel's error propagates after an error step and finalize(error)."""
        loop = Loop(model=ScriptedModel([]))
        with pytest.raises(RuntimeError, match=r"^ScriptedModel ran out of replies"):
            await loop.run("s", "hi")
        last = (await _steps(loop))[-1]
        assert last[0] is StepType.error
        assert last[1].startswith("model error: RuntimeError('ScriptedModel ran out")
        assert await _final_status(loop) is RunStatus.error

    async def test_model_returning_wrong_type(self) -> None:
        """A model returning something other than a ModelReply fails the run with TypeError."""

        class Broken:
            async def complete(self, request: object) -> object:
                return "text"

        loop = Loop(model=Broken())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^the model must return a ModelReply"):
            await loop.run("s", "hi")
        assert await _final_status(loop) is RunStatus.error
