"""The step loop on the SQL stores: a conversation survives closing and reopening the store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from _sql_support import SqlTarget, drop_schema, new_schema_name

from agentloop import (
    Loop,
    ModelReply,
    RunStatus,
    ScriptedModel,
    ToolCall,
    ToolContext,
    tool,
)
from agentloopsql import PostgresStore, SqliteStore

Store = SqliteStore | PostgresStore


@tool
async def remember_name(ctx: ToolContext, name: str) -> str:
    """Remember the user's name for later conversations."""
    ctx.data["name"] = name
    return f"remembered {name}"


@pytest.fixture
async def opener(
    sql_target: SqlTarget, tmp_path: Path
) -> AsyncIterator[Callable[[], Awaitable[Store]]]:
    if sql_target.dsn is None:
        path = str(tmp_path / "loop.db")

        async def open_sqlite() -> Store:
            return await SqliteStore.open(path)

        yield open_sqlite
        return
    dsn = sql_target.dsn
    schema = new_schema_name()

    async def open_pg() -> Store:
        return await PostgresStore.open(dsn, schema=schema, pool_size=2)

    try:
        yield open_pg
    finally:
        drop_schema(dsn, schema)


async def test_conversation_survives_reopen(opener: Callable[[], Awaitable[Store]]) -> None:
    """Run 1 on one store handle, run 2 on a fresh handle: history and memory come back."""
    async with await opener() as store:
        first = Loop(
            model=ScriptedModel(
                [
                    ModelReply(tool_calls=[ToolCall("c1", "remember_name", '{"name": "Ada"}')]),
                    "Nice to meet you, Ada.",
                ]
            ),
            steps=store,
            sessions=store,
            tools=[remember_name],
        )
        result = await first.run("user-42", "Hi, I'm Ada.")
        assert result.status is RunStatus.completed

    model = ScriptedModel(["Your name is Ada."])
    async with await opener() as store:
        second = Loop(model=model, steps=store, sessions=store, tools=[remember_name])
        result = await second.run("user-42", "What's my name?")
        assert (result.status, result.text) == (RunStatus.completed, "Your name is Ada.")
        seen = model.requests[-1]
        assert [m.role for m in seen.messages] == ["user", "assistant", "tool", "assistant", "user"]
        assert seen.data is not None
        assert json.loads(seen.data) == {"name": "Ada"}
        assert [s.step_index for s in await store.all("user-42")] == [0, 1, 2, 3, 4, 5]
        final = await store.final("user-42")
        assert final is not None
        assert (final.status, final.step_count) == (RunStatus.completed, 2)
        [info] = await store.list_sessions()
        assert (info.id, info.step_count) == ("user-42", 6)
