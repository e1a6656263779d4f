"""SqliteStore reads: rows rebuilt without re-validation only when valid; inline short reads."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from _sql_support import occupy_worker
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import RunStep, Session, StepType, StoreClosedError, StoreError
from agentloopsql import SqliteStore
from agentloopsql import _codec as codec
from agentloopsql import _sqlite as rows
from agentloopsql._codec import from_micros
from agentloopsql._sqlite import MISS, InlineReader
from agentloopsql._sqlite_schema import MIGRATIONS, add_functions
from agentloopsql._store import SHORT_WINDOW

VALID = {
    "step_index": 3,
    "step_type": "tool_call",
    "content": "hello",
    "tool_args": '{"q": 1}',
    "duration_ms": 5,
    "prompt_tokens": 7,
    "completion_tokens": 9,
    "created_us": 1_700_000_000_000_000,
}
COLUMNS = tuple(VALID)
SELECT = f"SELECT {rows.READ_COLUMNS} FROM steps WHERE session_id = ? ORDER BY seq"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "store.db")


@pytest.fixture
def raw() -> Iterator[sqlite3.Connection]:
    """An in-memory database with the store's schema, written to directly."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    add_functions(conn)
    for statements in MIGRATIONS:
        for statement in statements:
            conn.execute(statement)
    yield conn
    conn.close()


def insert(conn: sqlite3.Connection, values: dict[str, Any], session: str = "s") -> None:
    conn.execute(
        f"INSERT INTO steps (session_id, {', '.join(COLUMNS)}) VALUES (?, {', '.join('?' * 8)})",
        (session, *(values[column] for column in COLUMNS)),
    )
    # The checksum of the values as stored (a column's affinity may have converted them).
    conn.execute(
        f"UPDATE steps SET checksum = agentloop_step_sum(session_id, {', '.join(COLUMNS)}) "
        "WHERE seq = last_insert_rowid()"
    )


def by_validators(session: str, values: dict[str, Any]) -> RunStep:
    """What RunStep's own validators make of a row (the reference)."""
    return RunStep(
        session_id=session,
        step_index=values["step_index"],
        step_type=values["step_type"],
        content=values["content"],
        tool_args=values["tool_args"],
        duration_ms=values["duration_ms"],
        prompt_tokens=values["prompt_tokens"],
        completion_tokens=values["completion_tokens"],
        created_at=from_micros(values["created_us"]),
    )


def read_back(conn: sqlite3.Connection, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as SQLite stores them (column affinity applied)."""
    found = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM steps ORDER BY seq DESC").fetchone()
    return dict(zip(COLUMNS, found, strict=True))


NEVER_VALID = [
    ("step_index", -1),
    ("step_index", 2**31),
    ("step_index", 1.5),
    ("step_index", "three"),
    ("step_type", "bogus"),
    ("step_type", b"user"),
    ("content", b"bytes"),
    ("tool_args", "not json"),
    ("tool_args", '{"a": NaN}'),
    ("tool_args", "[1e400]"),
    ("tool_args", '"\\u0000"'),
    ("tool_args", b"{}"),
    ("duration_ms", -5),
    ("prompt_tokens", 2**40),
    ("completion_tokens", "abc"),
    ("created_us", 2**62),
    ("created_us", "later"),
]


def wal_files(path: str) -> list[str]:
    return [name for name in (f"{path}-wal", f"{path}-shm") if Path(name).exists()]


class TestTrustedRows:
    @pytest.mark.parametrize(("column", "bad"), NEVER_VALID)
    def test_row_never_valid_is_refused(
        self, raw: sqlite3.Connection, column: str, bad: object
    ) -> None:
        """A row another program wrote, breaking one rule, raises what RunStep says about it."""
        insert(raw, {**VALID, column: bad})
        stored = read_back(raw, VALID)
        with pytest.raises((TypeError, ValueError, OverflowError)) as expected:
            by_validators("s", stored)
        with pytest.raises(StoreError, match="break RunStep") as refused:
            rows.steps_of("s", raw.execute(SELECT, ("s",)).fetchall())
        assert type(refused.value.__cause__) is type(expected.value)
        assert re.fullmatch(re.escape(str(expected.value)), str(refused.value.__cause__))

    def test_valid_rows_skip_the_validators(
        self, raw: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rows meeting every rule are built without RunStep's validators, and equal."""
        insert(raw, VALID)
        insert(raw, {**VALID, "tool_args": "{}", "step_type": "user"})

        def refuse(session_id: str, *fields: object) -> RunStep:
            raise AssertionError("validated again")

        monkeypatch.setattr(codec, "_checked_step", refuse)
        found = rows.steps_of("s", raw.execute(SELECT, ("s",)).fetchall())
        assert found[0] == by_validators("s", VALID)
        assert found[1].step_type is StepType.user
        assert found[1].tool_args == "{}"
        insert(raw, {**VALID, "step_index": -1})
        with pytest.raises(AssertionError, match="validated again"):
            rows.steps_of("s", raw.execute(SELECT, ("s",)).fetchall())

    @settings(max_examples=300, deadline=None)
    @given(
        values=st.fixed_dictionaries(
            {
                "step_index": st.one_of(
                    st.integers(-3, 2**31 + 3), st.floats(allow_nan=False), st.text()
                ),
                "step_type": st.one_of(st.sampled_from([*StepType, "USER", "x"]), st.binary()),
                "content": st.one_of(st.text(), st.binary(), st.integers(-9, 9)),
                "tool_args": st.one_of(
                    st.sampled_from(["{}", "[]", '{"a": [1, 2]}', "1e400", "NaN", '"\\ud800"']),
                    st.text(max_size=8),
                    st.binary(max_size=4),
                ),
                "duration_ms": st.one_of(st.integers(-2, 2**31 + 2), st.text(max_size=3)),
                "prompt_tokens": st.integers(-(2**63), 2**63 - 1),
                "completion_tokens": st.one_of(st.integers(0, 9), st.floats(0, 9)),
                "created_us": st.one_of(
                    st.integers(rows.MICROS_MIN - 2, rows.MICROS_MAX + 2), st.integers(-9, 9)
                ),
            }
        )
    )
    def test_agrees_with_the_validators(self, values: dict[str, Any]) -> None:
        """On any row, the store returns what RunStep(...) builds, or raises what it raises."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        add_functions(conn)
        try:
            for statements in MIGRATIONS:
                for statement in statements:
                    conn.execute(statement)
            values = {k: v.value if isinstance(v, StepType) else v for k, v in values.items()}
            insert(conn, values)
            stored = read_back(conn, values)
            try:
                expected = by_validators("s", stored)
            except (TypeError, ValueError, OverflowError):
                with pytest.raises(StoreError):
                    rows.steps_of("s", conn.execute(SELECT, ("s",)).fetchall())
            else:
                assert rows.steps_of("s", conn.execute(SELECT, ("s",)).fetchall()) == [expected]
        finally:
            conn.close()

    async def test_store_refuses_a_foreign_row(self, db: str) -> None:
        """Through the store: a hand-written bad row makes last_n and all raise, not return it."""
        async with await SqliteStore.open(db) as store:
            await store.append(RunStep("s", 0, "user", content="hi"))
            other = sqlite3.connect(db, isolation_level=None)
            add_functions(other)
            try:
                insert(other, {**VALID, "step_type": "bogus"})
            finally:
                other.close()
            for read in (lambda: store.last_n("s", 5), lambda: store.all("s")):
                with pytest.raises(StoreError, match="break RunStep") as refused:
                    await read()
                assert str(refused.value.__cause__).startswith("step_type must be one of")
            assert [s.content for s in await store.last_n("other", 1)] == []


class TestInlineReads:
    async def test_last_n_and_get_do_not_wait_for_the_worker(self, db: str) -> None:
        """With the connection thread busy, last_n and get still answer (inline)."""
        async with await SqliteStore.open(db) as store:
            await store.append(RunStep("s", 0, "user", content="hi"))
            await store.put(Session("s", model="m"))
            gate = threading.Event()
            async with trio.open_nursery() as nursery:
                await occupy_worker(store, nursery, gate)
                try:
                    with trio.fail_after(5):
                        assert [s.content for s in await store.last_n("s", 20)] == ["hi"]
                        assert (await store.get("s")).model == "m"
                        assert (await store.get("unknown")) == Session("unknown")
                finally:
                    gate.set()

    async def test_wide_window_and_busy_reader_use_the_worker(self, db: str) -> None:
        """A window past SHORT_WINDOW, or a reader in use by another thread, use the worker."""
        async with await SqliteStore.open(db) as store:
            await store.append(RunStep("s", 0, "user"))
            assert store._reader is not None
            gate = threading.Event()
            async with trio.open_nursery() as nursery:
                await occupy_worker(store, nursery, gate)
                got: list[int] = []

                async def read(n: int) -> None:
                    got.append(len(await store.last_n("s", n)))

                nursery.start_soon(read, SHORT_WINDOW + 1)
                await trio.testing.wait_all_tasks_blocked()
                assert len(store._workers._queue) == 1
                with store._reader._lock:  # as if another trio run's thread were reading
                    nursery.start_soon(read, 5)
                    await trio.testing.wait_all_tasks_blocked()
                    assert len(store._workers._queue) == 2
                assert got == []
                gate.set()
            assert got == [1, 1]

    def test_reader_misses_on_sqlite_errors(self, db: str) -> None:
        """A read that SQLite refuses (locked, or any error) is left to the worker."""
        sqlite3.connect(db).close()
        reader = InlineReader.open(db)
        assert reader is not None
        try:

            def locked(conn: sqlite3.Connection) -> None:
                raise sqlite3.OperationalError("database is locked")

            assert reader.read(locked) is MISS
            assert reader.read(lambda conn: conn.execute("SELECT 1").fetchone()) == (1,)
            with pytest.raises(ZeroDivisionError):
                reader.read(lambda conn: 1 // 0)
        finally:
            reader.close()
        assert reader.read(lambda conn: 1) is MISS
        assert InlineReader.open(":memory:") is None

    async def test_reader_is_read_only(self, db: str) -> None:
        """The inline connection cannot write, whatever runs on it."""
        async with await SqliteStore.open(db) as store:
            assert store._reader is not None
            assert store._reader.read(lambda c: c.execute("DELETE FROM steps")) is MISS

    async def test_reads_see_every_acknowledged_write(self, db: str) -> None:
        """Each task reads its own appends back at once, under concurrent appenders."""
        async with await SqliteStore.open(db) as store:

            async def writer(session: str) -> None:
                for index in range(30):
                    await store.append(RunStep(session, index, "user"))
                    newest = await store.last_n(session, 1)
                    assert [s.step_index for s in newest] == [index]

            async with trio.open_nursery() as nursery:
                for n in range(8):
                    nursery.start_soon(writer, f"s{n}")

    async def test_inline_reads_are_checkpoints(self, db: str) -> None:
        """Inline last_n and get are checkpoints; cancelled first, they raise Cancelled."""
        async with await SqliteStore.open(db) as store:
            with trio.testing.assert_checkpoints():
                await store.last_n("s", 3)
            with trio.testing.assert_checkpoints():
                await store.get("s")
            with trio.CancelScope() as scope:
                scope.cancel()
                await store.last_n("s", 3)
                pytest.fail("not cancelled")
            assert scope.cancelled_caught

    async def test_closed_store_and_memory_store(self, db: str) -> None:
        """A closed store refuses inline reads; ':memory:' reads through the worker."""
        store = await SqliteStore.open(db)
        await store.aclose()
        with pytest.raises(StoreClosedError):
            await store.last_n("s", 1)
        with pytest.raises(StoreClosedError):
            await store.get("s")
        async with await SqliteStore.open(":memory:") as memory:
            assert memory._reader is None
            await memory.append(RunStep("s", 0, "user"))
            assert len(await memory.last_n("s", 5)) == 1

    async def test_close_leaves_no_wal_behind(self, db: str) -> None:
        """The read-only connection closes first, so the writer still checkpoints and tidies up."""
        store = await SqliteStore.open(db)
        await store.append(RunStep("s", 0, "user"))
        assert len(await store.last_n("s", 1)) == 1
        await store.aclose()
        assert not wal_files(db)
