"""Both SQL stores: hostile ids, case, huge and odd content all round-trip untouched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _sql_support import SqlTarget, open_sql_store

from agentloop import FinalizeSummary, RunStep, Session
from agentloopsql import PostgresStore, SqliteStore

Store = SqliteStore | PostgresStore

ODD_IDS = [
    "'; DROP TABLE steps; --",
    '"; DROP TABLE sessions; --',
    "Robert'); DELETE FROM sessions WHERE ('1'='1",
    "%s %(id)s ? ?1 :name $1",
    "\\x00 not a nul",
    "  padded  ",
    "🙂 emoji id 🚀",
    "\u0131 \u0130 \u00df \u1e9e",  # dotless i, dotted I, sharp s both cases
]


@pytest.fixture
async def store(sql_target: SqlTarget, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_sql_store(sql_target, tmp_path / "odd.db", pool_size=2) as opened:
        yield opened


@pytest.mark.parametrize("session_id", ODD_IDS)
async def test_injection_ids_round_trip(store: Store, session_id: str) -> None:
    """SQL-looking and odd ids are stored as data: steps, session and delete all work."""
    await store.append(RunStep(session_id, 0, "user", content=session_id))
    await store.put(Session(session_id, model=session_id, system_prompt=session_id, data="[1]"))
    assert [s.content for s in await store.last_n(session_id, 3)] == [session_id]
    got = await store.get(session_id)
    assert (got.id, got.model, got.system_prompt) == (session_id, session_id, session_id)
    assert [info.id for info in await store.list_sessions()] == [session_id]
    assert await store.delete_session(session_id)
    assert await store.all(session_id) == []
    assert not await store.exists(session_id)


async def test_ids_differing_in_case_are_distinct(store: Store) -> None:
    """'Agent', 'agent' and 'AGENT' are three sessions (no case folding)."""
    for index, sid in enumerate(["Agent", "agent", "AGENT", "straße", "STRASSE"]):
        await store.append(RunStep(sid, index, "user"))
        await store.update_data(sid, json.dumps({"who": sid}))
    for index, sid in enumerate(["Agent", "agent", "AGENT", "straße", "STRASSE"]):
        assert [s.step_index for s in await store.all(sid)] == [index]
        data = (await store.get(sid)).data
        assert data is not None
        assert json.loads(data) == {"who": sid}


async def test_megabyte_content(store: Store) -> None:
    """1 MiB of content (multi-byte text included) comes back byte for byte."""
    content = ("x" * 1023 + "é") * 1024
    await store.append(RunStep("big", 0, "tool_result", content=content))
    [back] = await store.last_n("big", 1)
    assert back.content == content


@pytest.mark.parametrize(
    "content", ["\x00", "a\x00b", "\x00\x00end", "nul \x00 and emoji 🦀 and 𝄞", "🙂" * 1000]
)
async def test_nul_and_emoji_content(store: Store, content: str) -> None:
    """NUL characters and astral-plane emoji in content and system prompt round-trip."""
    await store.append(RunStep("odd", 0, "response", content=content))
    await store.put(Session("odd", system_prompt=content))
    [back] = await store.all("odd")
    assert back.content == content
    assert (await store.get("odd")).system_prompt == content


async def test_json_documents_are_json_equal(store: Store) -> None:
    """tool_args and data come back JSON-equal (a store may re-serialize them)."""
    doc = (
        '{"b": [1, 2.5, null, true], "a": {"nested": "🙂 \\" \\\\ \\n"}, "big": 12345678901234567}'
    )
    await store.append(RunStep("j", 0, "summary", tool_args=doc))
    await store.update_data("j", doc)
    [back] = await store.all("j")
    assert json.loads(back.tool_args) == json.loads(doc)
    data = (await store.get("j")).data
    assert data is not None
    assert json.loads(data) == json.loads(doc)


async def test_extreme_numbers_and_times(store: Store) -> None:
    """int32/int64 maxima and far-past/far-future microsecond timestamps survive."""
    from datetime import UTC, datetime, timedelta, timezone

    top = 2**31 - 1
    moments = [
        datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=timezone(timedelta(hours=-7))),
    ]
    for index, moment in enumerate(moments):
        await store.append(
            RunStep(
                "n",
                top,
                "tool_call",
                duration_ms=top,
                prompt_tokens=top,
                completion_tokens=index,
                created_at=moment,
            )
        )
    back = await store.all("n")
    assert [s.created_at for s in back] == moments
    assert all(s.created_at.utcoffset() == timedelta(0) for s in back)
    summary = FinalizeSummary("completed", top, top, top, top, 2**63 - 1)
    await store.finalize("n", summary)
    assert await store.final("n") == summary


async def test_huge_windows_mean_everything(store: Store) -> None:
    """last_n and list_sessions accept any int >= 1, even beyond 64 bits."""
    await store.append(RunStep("w", 0, "user"))
    await store.put(Session("w"))
    assert len(await store.last_n("w", 10**30)) == 1
    assert len(await store.list_sessions(limit=2**63)) == 1
