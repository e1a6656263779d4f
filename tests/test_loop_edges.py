"""The loop's edges: exceptions that cannot describe themselves, on_event on Finalized, int32."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from _loop_helpers import call

import agentloopmem
from agentloop import (
    Compaction,
    CompactionCheckpoint,
    EventCollector,
    Finalized,
    Loop,
    LoopConfig,
    LoopWarning,
    Message,
    ModelRequest,
    RunStatus,
    RunStep,
    ScriptedModel,
    StepAppended,
    StepType,
    StoreError,
    Tool,
    ToolContext,
)
from agentloop._shared import INT32_MAX

TOP = INT32_MAX


class BadRepr(Exception):
    """An exception whose ``repr`` (and ``str``) raise."""

    def __repr__(self) -> str:
        raise RuntimeError("repr is broken")

    def __str__(self) -> str:
        raise RuntimeError("str is broken")


class SurrogateRepr(Exception):
    """An exception whose ``repr`` (and ``str``) hold a lone surrogate."""

    def __repr__(self) -> str:
        return "SurrogateRepr('\ud800')"

    def __str__(self) -> str:
        return "\ud800"


def _raising_tool(exc: Exception) -> Tool:
    async def fn(args: dict[str, object], ctx: ToolContext) -> str:
        raise exc

    return Tool(name="boom", description="Raises.", parameters={"type": "object"}, fn=fn)


async def _steps(loop: Loop, session_id: str = "s") -> list[tuple[StepType, str]]:
    return [(s.step_type, s.content) for s in await loop.steps.last_n(session_id, 100)]


class RaisingModel:
    """Raises ``exc`` on every call."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def complete(self, request: ModelRequest) -> object:
        raise self.exc


class TestUndescribableExceptions:
    @pytest.mark.parametrize("exc", [BadRepr(), SurrogateRepr()], ids=["raises", "surrogate"])
    async def test_tool_exception_falls_back_to_its_type_name(self, exc: Exception) -> None:
        """The tool_call gets its tool_result, naming the exception type; the run completes."""
        loop = Loop(model=ScriptedModel([call("boom"), "done"]), tools=[_raising_tool(exc)])
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.completed
        kinds = [kind for kind, _ in await _steps(loop)]
        assert kinds == [StepType.user, StepType.tool_call, StepType.tool_result, StepType.response]
        name = type(exc).__name__
        assert (await _steps(loop))[2][1] == f"Error: tool 'boom' failed: {name}"

    @pytest.mark.parametrize("exc", [BadRepr(), SurrogateRepr()], ids=["raises", "surrogate"])
    async def test_model_exception_propagates_after_its_error_step(self, exc: Exception) -> None:
        """The model's own exception reaches the caller; the error step names its type."""
        loop = Loop(model=RaisingModel(exc))  # type: ignore[arg-type]
        with pytest.raises(type(exc)) as caught:
            await loop.run("s", "hi")
        assert caught.value is exc
        assert (await _steps(loop))[-1] == (StepType.error, f"model error: {type(exc).__name__}")
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert final.status is RunStatus.error

    async def test_store_exception_that_cannot_be_printed_is_still_a_store_error(self) -> None:
        """A store exception whose str raises becomes a StoreError naming the operation."""

        class Broken(agentloopmem.StepStore):
            async def append(self, step: RunStep) -> None:
                raise BadRepr()

        loop = Loop(model=ScriptedModel(["x"]), steps=Broken())
        with pytest.raises(StoreError, match=r"^append failed for session 's': BadRepr$"):
            await loop.run("s", "hi")

    async def test_compactor_exception_that_cannot_be_printed_is_a_warning(self) -> None:
        """A compactor raising an undescribable exception is a LoopWarning; the run goes on."""

        class Compactor:
            async def compact(self, messages: Sequence[Message]) -> Compaction:
                raise BadRepr()

        events = EventCollector()
        loop = Loop(model=ScriptedModel(["x"]), compactor=Compactor(), on_event=events)
        assert (await loop.run("s", "hi")).status is RunStatus.completed
        warnings = [w.message for w in events.of_type(LoopWarning)]
        assert warnings == ["compaction failed; history kept whole: BadRepr"]


class TestOnEventAfterTheLastWrite:
    @pytest.mark.parametrize(
        ("script", "config_status"),
        [(["done"], RunStatus.completed), ([call("nope")], RunStatus.max_iterations)],
    )
    async def test_handler_error_on_finalized_keeps_the_recorded_result(
        self, script: list[object], config_status: RunStatus
    ) -> None:
        """The caller gets the result the store holds; the handler error is a LoopWarning."""
        warnings: list[str] = []

        def handler(event: object) -> None:
            if isinstance(event, Finalized):
                raise RuntimeError("handler bug")
            if isinstance(event, LoopWarning):
                warnings.append(event.message)

        loop = Loop(
            model=ScriptedModel(script),  # type: ignore[arg-type]
            config=LoopConfig(max_iterations=1),
            on_event=handler,
        )
        result = await loop.run("s", "hi")
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert result.status is final.status is config_status
        assert warnings == [
            f"on_event raised on Finalized: RuntimeError('handler bug'); "
            f"the run stays recorded as {config_status}"
        ]

    async def test_handler_error_before_finalize_is_raised_after_finalize_error(self) -> None:
        """An error on an earlier event fails the run: finalize(error) is written, then raised."""
        finalized: list[RunStatus] = []

        def handler(event: object) -> None:
            if isinstance(event, Finalized):
                finalized.append(event.summary.status)
            elif isinstance(event, StepAppended):
                raise RuntimeError("handler bug")

        loop = Loop(model=ScriptedModel(["x"]), on_event=handler)
        with pytest.raises(RuntimeError, match=r"^handler bug$"):
            await loop.run("s", "hi")
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert final.status is RunStatus.error
        assert finalized == [RunStatus.error]


class TestStepIndexLimit:
    async def _loop_at(self, last_index: int, **kwargs: object) -> Loop:
        loop = Loop(model=ScriptedModel(["never"]), **kwargs)  # type: ignore[arg-type]
        await loop.steps.append(RunStep(session_id="s", step_index=last_index, step_type="user"))
        return loop

    async def test_a_full_session_fails_with_a_store_error_naming_the_limit(self) -> None:
        """The next index would not fit int32: StoreError, nothing appended, finalize(error)."""
        loop = await self._loop_at(TOP)
        with pytest.raises(StoreError, match=rf"last step_index is {TOP}.*\(int32\)"):
            await loop.run("s", "hi")
        assert len(await loop.steps.last_n("s", 10)) == 1
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert (final.status, final.step_count) == (RunStatus.error, 0)

    async def test_last_index_is_usable(self) -> None:
        """A session one below the limit still takes its last step, INT32_MAX."""
        loop = await self._loop_at(TOP - 1)
        with pytest.raises(StoreError, match=rf"last step_index is {TOP}"):
            await loop.run("s", "hi")  # the user step takes TOP; the response has no index
        steps = await loop.steps.last_n("s", 10)
        assert [s.step_index for s in steps] == [TOP - 1, TOP]

    async def test_summary_at_the_last_index_checkpoints_within_int32(self) -> None:
        """A compaction that summarizes everything at INT32_MAX writes a valid checkpoint."""

        class All:
            async def compact(self, messages: Sequence[Message]) -> Compaction:
                return Compaction("all of it", len(messages))

        loop = await self._loop_at(TOP - 2, compactor=All())
        with pytest.raises(StoreError, match=rf"last step_index is {TOP}"):
            await loop.run("s", "hi")
        summary = (await loop.steps.last_n("s", 1))[0]
        assert (summary.step_type, summary.step_index) == (StepType.summary, TOP)
        assert CompactionCheckpoint.from_json(summary.tool_args).retain_from_step == TOP
