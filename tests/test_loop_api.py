"""The loop's public face: exports, LoopConfig, RunResult and Loop's argument checks."""

from __future__ import annotations

from typing import Any

import pytest

import agentloop
from agentloop import (
    EventCollector,
    Loop,
    LoopConfig,
    RunResult,
    RunStatus,
    ScriptedModel,
    Tool,
    ToolContext,
)

LOOP_NAMES = {
    "Compacted",
    "Compaction",
    "Compactor",
    "Event",
    "EventCollector",
    "Finalized",
    "Loop",
    "LoopConfig",
    "LoopWarning",
    "Message",
    "Model",
    "ModelReply",
    "ModelRequest",
    "RunResult",
    "RunStarted",
    "ScriptedModel",
    "StepAppended",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolSpec",
    "tool",
}


async def noop(args: dict[str, Any], ctx: ToolContext) -> str:
    return ""


class TestExports:
    def test_loop_names_exported(self) -> None:
        """Every loop name is in agentloop.__all__ and importable; __all__ stays sorted."""
        assert set(agentloop.__all__) >= LOOP_NAMES
        assert agentloop.__all__ == sorted(agentloop.__all__)
        for name in agentloop.__all__:
            assert getattr(agentloop, name) is not None
        assert not any(name.startswith("_") for name in agentloop.__all__)

    def test_public_names_have_docstrings(self) -> None:
        """Every exported loop class and function documents itself."""
        for name in LOOP_NAMES - {"Event"}:
            assert getattr(agentloop, name).__doc__, name


class TestLoopConfig:
    def test_defaults(self) -> None:
        """The defaults are the documented ones."""
        assert LoopConfig() == LoopConfig("", 20, 80, None, None, 5.0)

    @pytest.mark.parametrize(
        ("kwargs", "error", "pattern"),
        [
            ({"max_iterations": 0}, ValueError, r"^max_iterations must be an int in \[1,"),
            ({"max_iterations": True}, TypeError, r"^max_iterations must be an int"),
            ({"history_window": 0}, ValueError, r"^history_window must be an int in \[1,"),
            ({"token_budget": 0}, ValueError, r"^token_budget must be an int in \[1,"),
            (
                {"run_timeout": 0},
                ValueError,
                r"^run_timeout must be a finite number of seconds > 0",
            ),
            ({"run_timeout": float("nan")}, ValueError, r"^run_timeout must be a finite number"),
            ({"run_timeout": 2147483.648}, ValueError, r"and <= 2147483.647 or None"),
            ({"finalize_timeout": "5"}, TypeError, r"^finalize_timeout must be a number"),
            (
                {"finalize_timeout": float("inf")},
                ValueError,
                r"^finalize_timeout must be a finite number of seconds > 0 and <= 2147483.647, "
                r"got inf$",
            ),
            (
                {"run_timeout": float("inf")},
                ValueError,
                r"^run_timeout must be a finite number of seconds > 0 and <= 2147483.647 "
                r"or None \(no limit\), got inf$",
            ),
            ({"run_timeout": -float("inf")}, ValueError, r"^run_timeout must be a finite number"),
            ({"model": 3}, TypeError, r"^model must be a str"),
        ],
    )
    def test_invalid(self, kwargs: dict[str, Any], error: type[Exception], pattern: str) -> None:
        """Bad settings raise at construction, naming the field."""
        with pytest.raises(error, match=pattern):
            LoopConfig(**kwargs)


class TestRunResult:
    def test_checks_fields(self) -> None:
        """RunResult refuses a status that is not a RunStatus and negative counts."""
        with pytest.raises(TypeError, match=r"^status must be a RunStatus"):
            RunResult(5, "", 0, 0, 0, 0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^steps must be an int in"):
            RunResult(RunStatus.completed, "", -1, 0, 0, 0)


class TestLoopArguments:
    def test_refuses_non_model(self) -> None:
        """A model without complete() is a TypeError."""
        with pytest.raises(TypeError, match=r"^model must have an async complete"):
            Loop(model=object())  # type: ignore[arg-type]

    def test_refuses_duplicate_tool_names(self) -> None:
        """Two tools with one name are a ValueError."""
        tools = [Tool("t", "", {}, noop), Tool("t", "", {}, noop)]
        with pytest.raises(ValueError, match=r"^tools must have distinct names, got 't' twice"):
            Loop(model=ScriptedModel([]), tools=tools)

    def test_refuses_wrong_types(self) -> None:
        """Stores, config, tools, on_event and compactor are type-checked."""
        model = ScriptedModel([])
        with pytest.raises(TypeError, match=r"^steps must be a StepStore"):
            Loop(model=model, steps=object())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^sessions must be a SessionStore"):
            Loop(model=model, sessions=object())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^config must be a LoopConfig"):
            Loop(model=model, config={})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^tools must hold only Tool values"):
            Loop(model=model, tools=[noop])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"^on_event must be a callable"):
            Loop(model=model, on_event=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^on_event must be a plain \(sync\) callable"):
            Loop(model=model, on_event=noop)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^compactor must have an async compact"):
            Loop(model=model, compactor=object())  # type: ignore[arg-type]

    def test_refuses_an_object_with_async_call(self) -> None:
        """An on_event object whose __call__ is async is refused (its events would be lost)."""

        class AsyncHandler:
            async def __call__(self, event: object) -> None:
                pass

        with pytest.raises(TypeError, match=r"^on_event must be a plain \(sync\) callable"):
            Loop(model=ScriptedModel([]), on_event=AsyncHandler())  # type: ignore[arg-type]
        Loop(model=ScriptedModel([]), on_event=EventCollector())  # a sync __call__ is fine

    def test_exposes_config(self) -> None:
        """loop.config is the config it was given."""
        config = LoopConfig(max_iterations=3)
        assert Loop(model=ScriptedModel([]), config=config).config is config
