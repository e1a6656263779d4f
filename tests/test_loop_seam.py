"""A run touches its stores only through the ``RunStores`` it is handed."""

from __future__ import annotations

import contextlib

import pytest
import trio.testing
from _loop_helpers import SlowModel, call

import agentloopmem
from agentloop import (
    LoopConfig,
    Model,
    RunStatus,
    ScriptedModel,
    StepType,
    ToolContext,
    tool,
)
from agentloop._run import Run, RunParts, RunStores


@tool
async def remember(ctx: ToolContext) -> str:
    """Write working memory."""
    ctx.data["seen"] = True
    return "ok"


def _parts(model: Model, config: LoopConfig) -> RunParts:
    return RunParts(
        model=model,
        steps=agentloopmem.StepStore(),
        sessions=agentloopmem.SessionStore(),
        tools={"remember": remember},
        specs=(remember.spec,),
        config=config,
        on_event=None,
        compactor=None,
    )


@pytest.mark.parametrize(
    ("model", "config", "status"),
    [
        (ScriptedModel([call("remember"), "done"]), LoopConfig(), RunStatus.completed),
        (ScriptedModel([]), LoopConfig(), RunStatus.error),
        (SlowModel(), LoopConfig(run_timeout=1), RunStatus.timeout),
    ],
    ids=["completed", "model-error", "timeout"],
)
async def test_every_read_and_write_goes_through_the_handed_stores(
    model: Model, config: LoopConfig, status: RunStatus, autojump_clock: trio.testing.MockClock
) -> None:
    """The loop's own stores stay empty; the view gets the steps, the data and the finalize."""
    parts = _parts(model, config)
    view = RunStores(agentloopmem.StepStore(), agentloopmem.SessionStore(), "s")
    with pytest.raises(RuntimeError) if status is RunStatus.error else contextlib.nullcontext():
        await Run(parts, view, "hi").execute()
    assert await parts.steps.last_n("s", 10) == []
    assert not await parts.sessions.exists("s")
    final = await view.sessions.final("s")  # type: ignore[attr-defined]
    assert final is not None
    assert final.status is status
    kinds = [s.step_type for s in await view.steps.last_n("s", 10)]
    assert kinds[0] is StepType.user
    if status is RunStatus.completed:
        assert (await view.sessions.get("s")).data == '{"seen":true}'
