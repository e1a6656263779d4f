"""A SQLite file damaged inside a steps row never returns the damaged text as a step."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from agentloop import RunStep, StepType, StoreError, StoreUnavailableError
from agentloopsql import SqliteStore

pytestmark = pytest.mark.anyio

MARK = "Q7" * 40  # the damaged step's content, easy to find in the file


async def _filled(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        for i in range(3):
            await store.append(RunStep("hurt", i, StepType.tool_result, content=f"{MARK}{i}"))
            await store.append(RunStep("fine", i, StepType.tool_result, content=f"ok{i}"))


async def _check_damage_is_refused(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        for read in (
            lambda: store.last_n("hurt", 20),
            lambda: store.all("hurt"),
            lambda: store.steps_after("hurt", 0, 10),
            lambda: store.fork_session("hurt", "copy"),
        ):
            with pytest.raises(StoreError) as caught:
                await read()
            assert not isinstance(caught.value, StoreUnavailableError)
            assert "steps row of session 'hurt' (step index " in str(caught.value)
            assert MARK[:4] not in str(caught.value)
        assert [s.content for s in await store.all("fine")] == ["ok0", "ok1", "ok2"]
        await store.append(RunStep("hurt", 3, StepType.tool_result, content="new"))
        await store.append(RunStep("fine", 3, StepType.tool_result, content="ok3"))
        assert len(await store.last_n("fine", 20)) == 4


async def test_a_content_changed_by_sql_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _filled(path)
    with sqlite3.connect(path) as raw:
        raw.execute(
            "UPDATE steps SET content = 'forged' WHERE session_id = 'hurt' AND step_index = 1"
        )
    await _check_damage_is_refused(path)


async def test_a_row_moved_to_another_session_or_index_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _filled(path)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE steps SET step_index = 7 WHERE session_id = 'hurt' AND step_index = 1")
        raw.execute(
            "UPDATE steps SET session_id = 'hurt' WHERE session_id = 'fine' AND step_index = 9"
        )
    await _check_damage_is_refused(path)


async def test_a_row_breaking_runstep_rules_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _filled(path)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE steps SET step_type = 'nonsense' WHERE session_id = 'hurt'")
    await _check_damage_is_refused(path)


@pytest.mark.parametrize("seed", range(24))
async def test_bytes_flipped_in_the_file_never_read_back_silently(
    tmp_path: Path, seed: int
) -> None:
    path = tmp_path / "s.db"
    await _filled(path)
    data = bytearray(path.read_bytes())
    start = data.index(f"{MARK}1".encode())
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 3)):
        where = start + rng.randrange(len(MARK))
        data[where] = rng.choice([data[where] ^ 0x01, rng.randrange(256)])
    path.write_bytes(bytes(data))
    try:
        store = await SqliteStore.open(path)
    except StoreError:
        return  # damage in SQLite's own structure, refused at open
    async with store:
        for read in (lambda: store.last_n("hurt", 20), lambda: store.all("hurt")):
            try:
                got = await read()
            except StoreError:
                continue
            assert [s.content for s in got] == [f"{MARK}{i}" for i in range(3)]


async def test_migrated_rows_read_back_identically(tmp_path: Path) -> None:
    from tests.test_sql_migrate import sqlite_at

    path = tmp_path / "v4.db"
    sqlite_at(path, 4)
    with sqlite3.connect(path) as raw:
        before = raw.execute("SELECT * FROM steps ORDER BY seq").fetchall()
    async with await SqliteStore.open(path) as store:
        assert await store.all("a")
    with sqlite3.connect(path) as raw:
        after = raw.execute("SELECT * FROM steps ORDER BY seq").fetchall()
        assert [row[:-1] for row in after] == before
        assert all(row[-1] != 0 for row in after)


async def test_rows_written_by_the_documented_checksum_read_back(tmp_path: Path) -> None:
    """The raw-driver floor writes the checksum from docs/stores.md alone; the store accepts it."""
    from bench._raw_sql import fill_sqlite

    path = tmp_path / "floor.db"
    await (await SqliteStore.open(path)).aclose()
    fill_sqlite(str(path), {"a": 3, "é✓": 2})
    async with await SqliteStore.open(path) as store:
        assert [s.step_index for s in await store.all("a")] == [0, 1, 2]
        assert len(await store.last_n("é✓", 20)) == 2
