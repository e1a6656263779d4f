"""The loop's own overhead per iteration, against a bare loop calling the same model.

The model is a :class:`ScriptedModel` that answers instantly and the stores are
``agentloopmem``, so what is measured is the loop itself: building requests,
recording steps, replaying history, finalizing. The floor calls the same model
the same number of times and appends each reply to a list.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from agentloop import (
    Loop,
    LoopConfig,
    Message,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    Tool,
    ToolCall,
    ToolContext,
)
from bench._report import Row, best_of

RUNS = 400
REPEATS = 5


async def _ok(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


TOOL = Tool("ok", "answers ok", {"type": "object"}, _ok)


def _script(runs: int, calls_per_run: int) -> list[ModelReply]:
    """Per run: ``calls_per_run - 1`` tool-call replies, then a final response."""
    replies: list[ModelReply] = []
    for run in range(runs):
        for i in range(calls_per_run - 1):
            call = ToolCall(f"c{run}-{i}", "ok", '{"n": 1}')
            replies.append(ModelReply(tool_calls=(call,), prompt_tokens=10, completion_tokens=2))
        replies.append(ModelReply(content=f"answer {run}", prompt_tokens=10, completion_tokens=2))
    return replies


def _timed(work: Callable[[], Awaitable[None]]) -> float:
    """Seconds ``work`` takes inside a fresh ``trio.run`` (setup excluded)."""

    async def main() -> float:
        start = time.perf_counter()
        await work()
        return time.perf_counter() - start

    return trio.run(main)


def _loop_seconds(calls_per_run: int, sessions: int) -> float:
    model = ScriptedModel(_script(RUNS, calls_per_run))
    loop = Loop(model=model, tools=[TOOL], config=LoopConfig(max_iterations=calls_per_run))

    async def work() -> None:
        for run in range(RUNS):
            await loop.run(f"s{run % sessions}", f"question {run}")

    return _timed(work)


def _bare_seconds(calls_per_run: int) -> float:
    model = ScriptedModel(_script(RUNS, calls_per_run))
    request = ModelRequest("", "", (Message("user", "question"),), (TOOL.spec,), None)

    async def work() -> None:
        replies: list[ModelReply] = []
        for _ in range(RUNS * calls_per_run):
            replies.append(await model.complete(request))

    return _timed(work)


def _row(name: str, calls_per_run: int, sessions: int, limit: float) -> Row:
    iterations = RUNS * calls_per_run
    steps = RUNS * (2 * calls_per_run)  # user + response, and a call/result pair per tool call
    ours = best_of(REPEATS, lambda: _loop_seconds(calls_per_run, sessions))
    floor = best_of(REPEATS, lambda: _bare_seconds(calls_per_run))
    detail = (
        f"{ours / iterations * 1e6:.1f} us/iteration, {ours / steps * 1e6:.1f} us/step "
        f"vs bare {floor / iterations * 1e6:.2f} us/iteration"
    )
    return Row(name, detail, ours / floor, limit)


def rows() -> list[Row]:
    """Loop overhead per iteration: one call per run, ten per run, and with a full history."""
    return [
        _row("loop: 1 model call/run, new sessions", 1, RUNS, 60),
        _row("loop: 10 model calls/run, new sessions", 10, RUNS, 40),
        _row("loop: 10 model calls/run, 80-step history", 10, 1, 60),
    ]
