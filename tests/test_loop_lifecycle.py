"""The loop's strict mode, its retention (keep_steps) and the lease TTL's floor."""

from __future__ import annotations

import pytest
from _loop_helpers import call

import agentloopmem
from agentloop import (
    EventCollector,
    Loop,
    LoopConfig,
    LoopWarning,
    RunStatus,
    RunStep,
    ScriptedModel,
    Session,
    StepType,
    Tool,
    ToolContext,
)

pytestmark = pytest.mark.anyio


async def _boom(args: dict[str, object], ctx: ToolContext) -> str:
    raise RuntimeError("the tool broke")


BOOM = Tool(name="boom", description="Raises.", parameters={"type": "object"}, fn=_boom)


async def _kinds(loop: Loop, session_id: str = "s") -> list[StepType]:
    return [s.step_type for s in await loop.steps.last_n(session_id, 100)]


class TestStrict:
    @pytest.mark.parametrize(
        ("reply", "message"),
        [
            (call("boom"), "strict mode: tool 'boom' failed: RuntimeError('the tool broke')"),
            (call("missing"), "strict mode: unknown tool 'missing'; available tools: ['boom']"),
        ],
    )
    async def test_a_tool_error_ends_the_run(self, reply: object, message: str) -> None:
        """The run stops at the failing call: an error step naming it, status error."""
        model = ScriptedModel([reply, "never"])  # type: ignore[list-item]
        loop = Loop(model=model, tools=[BOOM], config=LoopConfig(strict=True))
        result = await loop.run("s", "hi")
        assert (result.status, result.text) == (RunStatus.error, "")
        steps = await loop.steps.last_n("s", 10)
        assert [s.step_type for s in steps] == [StepType.user, StepType.tool_call, StepType.error]
        assert steps[-1].content == message
        final = await loop.sessions.final("s")  # type: ignore[attr-defined]
        assert final.status is RunStatus.error
        assert len(model.requests) == 1

    async def test_off_a_tool_error_is_replayed_to_the_model(self) -> None:
        loop = Loop(model=ScriptedModel([call("boom"), "done"]), tools=[BOOM])
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.completed
        assert StepType.tool_result in await _kinds(loop)

    async def test_a_loop_warning_of_the_run_ends_it(self) -> None:
        """Unreadable session data is a warning; in strict mode the run then ends."""
        events = EventCollector()
        loop = Loop(
            model=ScriptedModel(["x"]),
            sessions=_UnreadableData(),
            config=LoopConfig(strict=True),
            on_event=events,
        )
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.error
        [warning] = events.of_type(LoopWarning)
        assert "session data cannot be loaded" in warning.message
        assert (await _kinds(loop))[-1] is StepType.error

    def test_strict_must_be_a_bool(self) -> None:
        with pytest.raises(TypeError, match="strict"):
            LoopConfig(strict=1)  # type: ignore[arg-type]


class _UnreadableData(agentloopmem.SessionStore):
    """A buggy store: ``get`` hands back data text that bypassed validation."""

    async def get(self, session_id: str) -> Session:
        session = await super().get(session_id)
        object.__setattr__(session, "data", "not json")  # what a broken store could return
        return session


class TestKeepSteps:
    async def test_a_completed_run_prunes_its_session(self) -> None:
        config = LoopConfig(history_window=4, keep_steps=4)
        loop = Loop(model=ScriptedModel([call("t"), "a", "b", "c", "d"]), config=config)
        for n in range(3):
            await loop.run("s", f"m{n}")
        steps = await loop.steps.all("s")  # type: ignore[attr-defined]
        assert len(steps) == 4
        first = steps[0].step_index
        assert [s.step_index for s in steps] == list(range(first, first + 4))
        await loop.run("s", "next")
        assert (await loop.steps.last_n("s", 1))[0].step_index == steps[-1].step_index + 2

    async def test_a_failed_run_is_not_pruned(self) -> None:
        config = LoopConfig(history_window=1, keep_steps=1, max_iterations=1)
        loop = Loop(model=ScriptedModel([call("t"), call("t")]), config=config)
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.max_iterations
        assert len(await loop.steps.all("s")) > 1  # type: ignore[attr-defined]

    def test_keep_steps_below_the_window_is_refused(self) -> None:
        with pytest.raises(ValueError, match=r"^keep_steps must be >= history_window \(80\)"):
            LoopConfig(keep_steps=10)
        with pytest.raises(ValueError, match=r"^keep_steps must be an int in \[1, "):
            LoopConfig(history_window=1, keep_steps=0)

    async def test_a_store_without_prune_gets_one_warning_per_loop(self) -> None:
        events = EventCollector()
        loop = Loop(
            model=ScriptedModel(["a", "b"]),
            steps=_NoPrune(),
            config=LoopConfig(history_window=2, keep_steps=2),
            on_event=events,
        )
        await loop.run("s", "1")
        await loop.run("s", "2")
        warnings = [w.message for w in events.of_type(LoopWarning)]
        assert warnings == [
            "keep_steps=2 is ignored: the step store has no prune_steps (SupportsPrune)"
        ]


class _NoPrune:
    """A step store with only the two protocol methods."""

    def __init__(self) -> None:
        self.steps: list[RunStep] = []

    async def append(self, step: RunStep) -> None:
        self.steps.append(step)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        return [s for s in self.steps if s.session_id == session_id][-n:]


class TestLeaseTtlFloor:
    @pytest.mark.parametrize("ttl", [0.029, 1e-6])
    def test_below_the_floor_is_refused(self, ttl: float) -> None:
        with pytest.raises(ValueError, match=r"^lease_ttl must be >= 0.03 seconds"):
            LoopConfig(lease_ttl=ttl)

    def test_the_floor_itself_is_accepted(self) -> None:
        assert LoopConfig(lease_ttl=0.03).lease_ttl == 0.03
