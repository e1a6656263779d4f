"""Session ids are at most 1,024 UTF-8 bytes, equal in every store (DESIGN §1).

Ids at the limit are multi-byte random mixes (2-, 3- and 4-byte characters),
which compress badly: a store whose index or column holds only compressed or
ASCII-sized keys would fail on them.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from _sql_support import drop_schema, new_schema_name, pg_dsn

import agentloopmem
from agentloop import FinalizeSummary, RunStep, Session, SessionInfo, validate_session_id
from agentloop._validate import SESSION_ID_MAX_BYTES
from agentloopsql import PostgresStore, SqliteStore

# code point ranges of 2-, 3- and 4-byte UTF-8 characters (Latin, CJK, emoji)
_WIDE = [(0x00C0, 0x017F), (0x4E00, 0x9FFF), (0x1F300, 0x1F5FF)]
_BY_SIZE = {1: (0x61, 0x7A), 2: _WIDE[0], 3: _WIDE[1]}


def random_id(size: int, seed: int) -> str:
    """A random id of exactly ``size`` UTF-8 bytes, mostly 2-4 byte characters."""
    rng = random.Random(seed)
    chars: list[str] = []
    left = size
    while left >= 4:
        char = chr(rng.randint(*rng.choice(_WIDE)))
        chars.append(char)
        left -= len(char.encode())
    while left:
        width = min(left, 3)
        chars.append(chr(rng.randint(*_BY_SIZE[width])))
        left -= width
    text = "".join(chars)
    assert len(text.encode()) == size
    return text


AT_LIMIT = [random_id(SESSION_ID_MAX_BYTES, seed) for seed in range(3)] + [
    "a" * SESSION_ID_MAX_BYTES,
    "é" * (SESSION_ID_MAX_BYTES // 2),
]
OVER_LIMIT = random_id(SESSION_ID_MAX_BYTES + 1, 7)
_NOW = datetime.now(UTC)
TOO_LONG = r"^session_id must be at most 1024 UTF-8 bytes, got (\d+) bytes: '"


def test_ids_at_limit_compress_badly() -> None:
    """The random ids keep over 60% of their size compressed; a repeated id keeps under 5%."""
    for text in AT_LIMIT[:3]:
        assert len(zlib.compress(text.encode(), 9)) > 0.6 * SESSION_ID_MAX_BYTES
    assert len(zlib.compress(AT_LIMIT[3].encode(), 9)) < 0.05 * SESSION_ID_MAX_BYTES


class TestValidation:
    @pytest.mark.parametrize("text", AT_LIMIT)
    def test_limit_accepted(self, text: str) -> None:
        """Exactly 1,024 bytes passes, whatever the characters."""
        assert validate_session_id(text) is text

    @pytest.mark.parametrize(
        "text", [OVER_LIMIT, "a" * 1025, "a" * 1023 + "é", "x" * 10_000, "中" * 342]
    )
    def test_over_limit_refused(self, text: str) -> None:
        """One byte more is a ValueError naming the limit, the size, and at most ~60 chars."""
        with pytest.raises(ValueError, match=TOO_LONG) as caught:
            validate_session_id(text)
        message = str(caught.value)
        assert f"got {len(text.encode())} bytes" in message
        assert len(message) < 160

    def test_value_types_refuse(self) -> None:
        """Session, RunStep and SessionInfo check the same limit."""
        with pytest.raises(ValueError, match=r"^id must be at most 1024 UTF-8 bytes"):
            Session(OVER_LIMIT)
        with pytest.raises(ValueError, match=TOO_LONG):
            RunStep(OVER_LIMIT, 0, "user")
        with pytest.raises(ValueError, match=r"^id must be at most 1024 UTF-8 bytes"):
            SessionInfo(OVER_LIMIT, None, 0, _NOW, _NOW)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        pg_dsn()  # skips here, with its reason, when no server is configured
    return str(request.param)


@pytest.fixture
async def stores(kind: str, tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """(step store, session store) of each kind; one object for the SQL stores."""
    if kind == "memory":
        yield agentloopmem.StepStore(), agentloopmem.SessionStore()
    elif kind == "sqlite":
        async with await SqliteStore.open(str(tmp_path / "ids.db")) as lite:
            yield lite, lite
    else:
        dsn, schema = pg_dsn(), new_schema_name()
        try:
            async with await PostgresStore.open(dsn, schema=schema, pool_size=2) as pg:
                yield pg, pg
        finally:
            drop_schema(dsn, schema)


class TestStores:
    async def test_ids_at_limit_round_trip(self, stores: tuple[Any, Any]) -> None:
        """Every store keeps ids of exactly 1,024 bytes and gives them back unchanged."""
        steps, sessions = stores
        for number, text in enumerate(AT_LIMIT):
            await sessions.put(Session(text, model="m"))
            await sessions.update_data(text, f'{{"n": {number}}}')
            await steps.append(RunStep(text, 0, "user", content=text))
            await sessions.finalize(text, FinalizeSummary("completed", step_count=1))
        for number, text in enumerate(AT_LIMIT):
            got = await sessions.get(text)
            assert (got.id, got.model) == (text, "m")
            assert got.data is not None
            assert got.data.replace(" ", "") == f'{{"n":{number}}}'
            assert await sessions.exists(text)
            [step] = await steps.last_n(text, 5)
            assert (step.session_id, step.content) == (text, text)
            assert [s.session_id for s in await steps.all(text)] == [text]
            final = await sessions.final(text)
            assert final is not None
            assert final.status == "completed"
        listed = {info.id for info in await sessions.list_sessions(limit=100)}
        assert listed == set(AT_LIMIT)
        assert await sessions.delete_session(AT_LIMIT[0])
        assert not await sessions.exists(AT_LIMIT[0])

    async def test_over_limit_refused_by_every_entry_point(self, stores: tuple[Any, Any]) -> None:
        """Every call taking an id refuses 1,025 bytes with ValueError and stores nothing."""
        steps, sessions = stores
        calls: list[Callable[[str], Awaitable[object]]] = [
            sessions.get,
            sessions.exists,
            lambda text: sessions.update_data(text, "{}"),
            lambda text: sessions.finalize(text, FinalizeSummary("completed")),
            sessions.final,
            sessions.delete_session,
            lambda text: steps.last_n(text, 1),
            steps.all,
            steps.delete_session,
        ]
        for call in calls:
            with pytest.raises(ValueError, match=TOO_LONG):
                await call(OVER_LIMIT)
        assert await sessions.list_sessions() == []
