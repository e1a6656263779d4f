"""A row the database refuses (a trigger, a CHECK) is a permanent ``StoreError`` on both stores.

A refusal is the schema's own rule: the same call is refused again however
often it is retried, so neither store may call it ``StoreUnavailableError``
("retrying later may succeed").
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _sql_support import SqlTarget, open_sql_store

from agentloop import RunStep, StepType, StoreError, StoreUnavailableError
from agentloopsql import PostgresStore, SqliteStore

_SQLITE_TRIGGER = """
CREATE TRIGGER no_forbidden BEFORE INSERT ON steps
WHEN NEW.content = 'forbidden'
BEGIN SELECT RAISE(ABORT, 'content "forbidden" is not allowed here'); END
"""

_PG_TRIGGER = """
CREATE FUNCTION {s}.no_forbidden() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.content = 'forbidden' THEN
        RAISE EXCEPTION 'content "forbidden" is not allowed here';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER no_forbidden BEFORE INSERT ON {s}.steps
FOR EACH ROW EXECUTE FUNCTION {s}.no_forbidden();
"""


def step(index: int, content: str) -> RunStep:
    return RunStep(session_id="s", step_index=index, step_type=StepType.user, content=content)


def add_rule(store: SqliteStore | PostgresStore, dsn: str | None, sql: str) -> None:
    """Run ``sql`` (a trigger or a constraint) on the store's database, outside the store."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.executescript(sql)
        return
    import psycopg

    assert dsn is not None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.format(s=f'"{store.schema}"'))  # type: ignore[arg-type]


async def expect_refused(store: SqliteStore | PostgresStore, content: str) -> StoreError:
    """The append of ``content`` is refused, and refused again when retried."""
    for _ in range(2):
        with pytest.raises(StoreError, match=r"refused append: it breaks .*will not help$") as got:
            await store.append(step(1, content))
    return got.value


class TestRefusals:
    async def test_trigger_refusal_is_permanent(
        self, sql_target: SqlTarget, tmp_path: Path
    ) -> None:
        """A trigger's RAISE is a StoreError saying retrying will not help, on both stores."""
        async with open_sql_store(sql_target, tmp_path / "db.sqlite", pool_size=2) as store:
            await store.append(step(0, "fine"))
            trigger = _SQLITE_TRIGGER if sql_target.dsn is None else _PG_TRIGGER
            add_rule(store, sql_target.dsn, trigger)
            error = await expect_refused(store, "forbidden")
            assert not isinstance(error, StoreUnavailableError)
            assert "not allowed here" in str(error)
            await store.append(step(1, "also fine"))  # the store is still usable
            assert [s.content for s in await store.last_n("s", 5)] == ["fine", "also fine"]

    async def test_check_refusal_is_permanent(self, postgres_dsn: str, tmp_path: Path) -> None:
        """A CHECK the server enforces is a StoreError naming the constraint (SQLite cannot
        add a CHECK to an existing table; its CHECK failures are the same IntegrityError
        as a trigger's RAISE, covered above)."""
        target = SqlTarget("postgres", postgres_dsn)
        async with open_sql_store(target, tmp_path / "unused", pool_size=2) as store:
            add_rule(
                store,
                postgres_dsn,
                "ALTER TABLE {s}.steps ADD CONSTRAINT short_content CHECK (length(content) < 10)",
            )
            error = await expect_refused(store, "far too long for the check")
            assert not isinstance(error, StoreUnavailableError)
            assert "short_content" in str(error)
            assert await store.last_n("s", 5) == []
