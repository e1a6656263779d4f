"""PostgresStore.open racing another process's migration of the same schema."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from _sql_support import fresh_schema, pg_dsn, undo_lifecycle_pg

from agentloop import RunStep
from agentloopsql import PostgresStore, _pg_schema
from agentloopsql._pg_schema import SCHEMA_VERSION, migrate


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


def _downgrade_to_version_4(dsn: str, schema: str) -> None:
    undo_lifecycle_pg(dsn, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{schema}".revision_floors')
        conn.execute(f'UPDATE "{schema}".schema_version SET version = 4')


async def test_a_migration_committing_during_the_unlocked_check_is_not_damage(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process migrates between the check's read of the tables and of the version:
    the open is not refused as "damaged"; it judges the schema again under the lock."""
    assert SCHEMA_VERSION == 6  # the downgrade below undoes exactly versions 6 and 5
    read_version = _pg_schema._read_version
    raced: list[bool] = []

    def migrated_meanwhile(conn: Any, schema: str, *args: Any) -> int:
        if not raced:  # the first check only: another process migrates now
            raced.append(True)
            with psycopg.connect(dsn, autocommit=True) as other:
                migrate(other, schema)
        return read_version(conn, schema, *args)

    async with fresh_schema(dsn) as schema:
        await (await PostgresStore.open(dsn, schema=schema, pool_size=1)).aclose()
        _downgrade_to_version_4(dsn, schema)
        monkeypatch.setattr(_pg_schema, "_read_version", migrated_meanwhile)
        async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg:
            await pg.append(RunStep("s", 0, "user", content="x"))
            assert await pg.revision("s") == 0
        assert raced == [True]
