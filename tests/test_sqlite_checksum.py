"""A SQLite file damaged inside a steps or sessions row never returns the damaged data."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from agentloop import (
    FinalizeSummary,
    RunStatus,
    RunStep,
    Session,
    StepType,
    StoreError,
    StoreUnavailableError,
)
from agentloopsql import SqliteStore
from agentloopsql._sqlite_schema import SCHEMA_VERSION, SESSION_COLUMNS

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


# -- sessions rows (schema version 6) -----------------------------------------

SECRET = "Z9" * 40  # the damaged session's system prompt and data, easy to find in the file


async def _sessions(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        for sid in ("hurt", "fine", "other"):
            await store.put(Session(sid, "model-m", f"{SECRET}{sid}", f'"{SECRET}{sid}"'))
            await store.set_labels(sid, {"team": "t"})
            await store.append(RunStep(sid, 0, StepType.tool_result, content=f"c-{sid}"))
            await store.finalize(sid, FinalizeSummary(RunStatus.completed, 1, 2, 1, 5, 7))


def _refused(caught: pytest.ExceptionInfo[StoreError], sid: str) -> None:
    assert not isinstance(caught.value, StoreUnavailableError)
    assert f"sessions row of session {sid!r} (" in str(caught.value)
    assert SECRET[:4] not in str(caught.value)


async def _check_session_is_refused(path: Path, sid: str = "hurt") -> None:
    """Every read returning ``sid``'s row, and every write keeping part of it, is refused;
    the other sessions read and write as before; deleting ``sid`` clears the lists."""
    async with await SqliteStore.open(path) as store:
        for call in (
            lambda: store.get(sid),
            lambda: store.get_many(["fine", sid]),
            lambda: store.final(sid),
            lambda: store.session_info(sid),
            lambda: store.list_sessions(limit=20),
            lambda: store.page_sessions(limit=20),
            lambda: store.page_sessions(order="created", labels={"team": "t"}),
            lambda: store.revision(sid),
            lambda: store.fork_session(sid, "copy"),
            lambda: store.update_data(sid, "1"),
            lambda: store.put(Session(sid, "m2")),
            lambda: store.set_labels(sid, {"a": "b"}),
            lambda: store.finalize(sid, FinalizeSummary(RunStatus.error, 0, 0, 0, 0, 0)),
        ):
            with pytest.raises(StoreError) as caught:
                await call()
            _refused(caught, sid)
        assert not await store.exists("copy")
        fine = await store.get("fine")
        assert fine is not None
        assert fine.system_prompt == f"{SECRET}fine"
        assert (await store.final("fine")) == FinalizeSummary(RunStatus.completed, 1, 2, 1, 5, 7)
        await store.update_data("fine", "[2]")
        await store.put(Session("new", "m"))
        assert (await store.get_many(["fine", "new"]))[0].data == "[2]"
        assert sid not in await store.expire_sessions(idle_for=1e-6)  # skips the damaged row
        assert await store.delete_session(sid)
        assert await store.list_sessions(limit=20) == []
        await store.put(Session(sid, "again"))
        assert (await store.get(sid)) == Session(sid, "again")


_CHANGES = [
    ("model", "'forged'"),
    ("system_prompt", "'forged'"),
    ("data", "'\"forged\"'"),
    ("data", "NULL"),
    ("labels", '\'{"team":"u"}\''),
    ("final_status", "'error'"),
    ("final_status", "NULL"),
    ("final_prompt_tokens", "final_prompt_tokens + 1"),
    ("final_completion_tokens", "final_completion_tokens + 1"),
    ("final_step_count", "final_step_count + 1"),
    ("final_duration_ms", "final_duration_ms + 1"),
    ("final_data_bytes", "final_data_bytes + 1"),
    ("step_total", "step_total + 1"),
    ("created_us", "created_us + 1"),
    ("updated_us", "updated_us - 1"),
    ("write_seq", "write_seq + 100"),
    ("created_seq", "created_seq + 100"),
    ("model", "x'41'"),  # a blob where text belongs
    ("step_total", "1.5"),  # a float where an integer belongs
]


@pytest.mark.parametrize(("column", "value"), _CHANGES)
async def test_a_sessions_column_changed_by_sql_is_refused(
    tmp_path: Path, column: str, value: str
) -> None:
    path = tmp_path / "s.db"
    await _sessions(path)
    with sqlite3.connect(path) as raw:
        raw.execute(f"UPDATE sessions SET {column} = {value} WHERE id = 'hurt'")
    await _check_session_is_refused(path)


async def test_a_renamed_session_row_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _sessions(path)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE sessions SET id = 'hurX' WHERE id = 'hurt'")
    async with await SqliteStore.open(path) as store:
        with pytest.raises(StoreError) as caught:
            await store.get("hurX")
        _refused(caught, "hurX")
        with pytest.raises(StoreError) as caught:
            await store.list_sessions()
        _refused(caught, "hurX")
        assert await store.get("hurt") == Session("hurt")
        assert (await store.get("fine")) is not None


async def test_session_rows_swapped_are_refused(tmp_path: Path) -> None:
    """Two rows' ids exchanged (each row keeps its own checksum), or one row's every other
    column, checksum included, copied over another's: both refused."""
    path = tmp_path / "s.db"
    await _sessions(path)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE sessions SET id = '~' WHERE id = 'hurt'")
        raw.execute("UPDATE sessions SET id = 'hurt' WHERE id = 'other'")
        raw.execute("UPDATE sessions SET id = 'other' WHERE id = '~'")
    async with await SqliteStore.open(path) as store:
        for sid in ("hurt", "other"):
            for read in (store.get, store.final, store.session_info, store.revision):
                with pytest.raises(StoreError) as caught:
                    await read(sid)
                _refused(caught, sid)
        assert (await store.get("fine")).system_prompt == f"{SECRET}fine"
    path = tmp_path / "t.db"
    await _sessions(path)
    columns = ", ".join((*SESSION_COLUMNS[1:], "checksum"))
    with sqlite3.connect(path) as raw:
        raw.execute(
            f"UPDATE sessions SET ({columns}) = (SELECT {columns} FROM sessions "
            "WHERE id = 'other') WHERE id = 'hurt'"
        )
    await _check_session_is_refused(path)


@pytest.mark.parametrize("seed", range(24))
async def test_bytes_flipped_in_a_sessions_row_never_read_back_silently(
    tmp_path: Path, seed: int
) -> None:
    path = tmp_path / "s.db"
    await _sessions(path)
    raw = sqlite3.connect(path)
    raw.execute("VACUUM")  # no stale copies of rewritten rows left in free space
    raw.close()  # and back into the file itself: the last close checkpoints the WAL
    data = bytearray(path.read_bytes())
    mark = f"{SECRET}hurt".encode()
    starts = [data.index(mark)]
    starts.append(data.index(mark, starts[0] + 1))  # the system prompt and the data
    assert data.count(mark) == 2
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 3)):
        where = rng.choice(starts) + rng.randrange(len(mark))
        data[where] = rng.choice([data[where] ^ 0x01, rng.randrange(256)])
    path.write_bytes(bytes(data))
    async with await SqliteStore.open(path) as store:
        refused = []
        for read in (
            lambda: store.get("hurt"),
            lambda: store.session_info("hurt"),
            lambda: store.list_sessions(),
        ):
            try:
                got = await read()
            except StoreError as exc:
                refused.append(exc)
                continue
            if isinstance(got, Session):
                assert got == Session("hurt", "model-m", f"{SECRET}hurt", f'"{SECRET}hurt"')
        assert all("SQLite sessions row" in str(exc) for exc in refused)
        assert not any(isinstance(exc, StoreUnavailableError) for exc in refused)
        fine = await store.get("fine")
        assert fine is not None
        assert fine.system_prompt == f"{SECRET}fine"
        await store.update_data("fine", "[3]")
        assert (await store.get_many(["fine"]))[0].data == "[3]"


async def test_migrated_sessions_rows_read_back_identically(tmp_path: Path) -> None:
    from tests.test_sql_migrate import sqlite_at

    path = tmp_path / "v5.db"
    sqlite_at(path, 5)
    with sqlite3.connect(path) as raw:
        before = raw.execute("SELECT * FROM sessions ORDER BY id").fetchall()
    async with await SqliteStore.open(path) as store:
        assert (await store.get("a")) == Session("a", "m", "", "[1]")
        assert [i.id for i in await store.list_sessions()] == ["b", "a"]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        after = raw.execute("SELECT * FROM sessions ORDER BY id").fetchall()
        assert [row[:-1] for row in after] == before
        assert all(row[-1] != 0 for row in after)


async def test_sessions_written_by_the_documented_checksum_read_back(tmp_path: Path) -> None:
    """Rows seeded straight into the file with the docs/stores.md checksum read back."""
    from bench._life_sql import seed_sqlite

    path = tmp_path / "seed.db"
    await (await SqliteStore.open(path)).aclose()
    seed_sqlite(str(path), "é✓", 12, idle_s=60.0)
    async with await SqliteStore.open(path) as store:
        assert (await store.get("é✓0000003")) == Session("é✓0000003")
        infos = await store.list_sessions(limit=20)
        assert len(infos) == 12
        assert dict(infos[-1].labels) == {"team": "a"}
        assert len(await store.expire_sessions(idle_for=30.0)) == 12


async def test_the_sessions_checksum_covers_every_column(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    await (await SqliteStore.open(path)).aclose()
    with sqlite3.connect(path) as raw:
        names = [row[1] for row in raw.execute("PRAGMA table_info(sessions)")]
    assert names == [*SESSION_COLUMNS, "checksum"]
