"""Upgrading every earlier schema version, with data in it, to the lifecycle schema.

Each earlier version is built from the schema modules' own migrations
(``MIGRATIONS[:version]``), filled with a session, steps, a lease and (where
the version has them) revision floors, then opened: the data reads back, the
new columns and tables hold what the lifecycle needs, and the shape checks
refuse a lifecycle schema missing one of its parts.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from _sql_support import fresh_schema
from psycopg import sql

from agentloop import Session, StoreError
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql import _pg_schema as pg_schema
from agentloopsql import _sqlite_schema as lite_schema

pytestmark = pytest.mark.anyio

T_US = 1_767_225_600_000_000  # 2026-01-01 in microseconds


def sqlite_at(path: Path, version: int) -> None:
    """A SQLite file at schema ``version`` holding sessions a, b and steps of a and c."""
    conn = sqlite3.connect(path, isolation_level=None)
    lite_schema.add_functions(conn)  # the checksum migrations call them
    try:
        for statements in lite_schema.MIGRATIONS[:version]:
            for statement in statements:
                conn.execute(statement)
        for seq, sid in ((1, "a"), (2, "b")):
            conn.execute(
                "INSERT INTO sessions (id, model, data, created_us, updated_us, write_seq) "
                "VALUES (?, 'm', '[1]', ?, ?, ?)",
                (sid, T_US, T_US + seq, seq),
            )
        for sid, index in (("a", 0), ("a", 1), ("c", 0)):
            conn.execute(
                "INSERT INTO steps (session_id, step_index, step_type, content, tool_args, "
                "duration_ms, prompt_tokens, completion_tokens, created_us) "
                "VALUES (?, ?, 'user', ?, '{}', 0, 0, 0, ?)",
                (sid, index, f"{sid}{index}", T_US),
            )
        if version >= 5:  # as a version-5 store wrote them
            conn.execute(
                "UPDATE steps SET checksum = agentloop_step_sum(session_id, step_index, "
                "step_type, content, tool_args, duration_ms, prompt_tokens, completion_tokens, "
                "created_us)"
            )
        if version >= 2:
            conn.execute("INSERT INTO leases VALUES ('a', 'w', 3, NULL)")
        if version >= 3:
            conn.execute("INSERT INTO revision_floors VALUES ('gone', 9)")
        conn.execute(f"PRAGMA user_version = {version:d}")
    finally:
        conn.close()


def pg_at(dsn: str, schema: str, version: int) -> None:
    """A PostgreSQL schema at ``version`` holding what :func:`sqlite_at` holds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(pg_schema.render(conn, schema, "CREATE SCHEMA {s}"))
        conn.execute(
            pg_schema.render(conn, schema, "CREATE TABLE {s}.schema_version (version integer)")
        )
        with conn.transaction():
            for statements in pg_schema.MIGRATIONS[:version]:
                for statement in statements:
                    conn.execute(pg_schema.render(conn, schema, statement))
        s = sql.Identifier(schema).as_string(conn)
        conn.execute(f"INSERT INTO {s}.schema_version VALUES (%s)", (version,))
        for sid in ("a", "b"):
            conn.execute(
                f"INSERT INTO {s}.sessions (id, model, system_prompt, data, created_at, "
                f"updated_at, write_seq) VALUES (%s, 'm', '', '[1]', now(), now(), "
                f"nextval('{s}.session_writes'))",
                (sid,),
            )
        for sid, index in (("a", 0), ("a", 1), ("c", 0)):
            conn.execute(
                f"INSERT INTO {s}.steps (session_id, step_index, step_type, content, tool_args, "
                "duration_ms, prompt_tokens, completion_tokens, created_at) "
                "VALUES (%s, %s, 'user', %s, '{}', 0, 0, 0, now())",
                (sid, index, f"{sid}{index}"),
            )
        if version >= 4:
            conn.execute(f"INSERT INTO {s}.leases VALUES ('a', 'w', 3, NULL)")
        if version >= 5:
            conn.execute(f"INSERT INTO {s}.revision_floors VALUES ('gone', 9)")


async def check_upgraded(
    store: SqliteStore | PostgresStore, version: int, leases_from: int
) -> None:
    """What every upgraded store must show: its data, and the lifecycle working on it."""
    assert await store.get("a") == Session("a", "m", "", "[1]")
    assert [s.content for s in await store.all("a")] == ["a0", "a1"]
    assert [s.content for s in await store.all("c")] == ["c0"]
    info = await store.session_info("b")
    assert info is not None
    assert dict(info.labels) == {}
    page = await store.page_sessions(limit=1)
    assert [i.id for i in page.sessions] == ["b"]
    rest = await store.page_sessions(limit=5, cursor=page.cursor)
    assert [i.id for i in rest.sessions] == ["a"]
    created = await store.page_sessions(order="created")
    assert [i.id for i in created.sessions] == ["a", "b"]
    await store.set_labels("a", {"team": "x"})
    labelled = await store.page_sessions(labels={"team": "x"})
    assert [i.id for i in labelled.sessions] == ["a"]
    assert await store.prune_steps("a", keep_last=1) == 1
    await store.fork_session("a", "fork")
    assert [s.content for s in await store.all("fork")] == ["a1"]
    if version >= leases_from:
        lease = await store.acquire_lease("a", "w", ttl=60)
        assert lease is not None
        assert lease.token == 4  # above the stored grant
    assert await store.revision("gone") >= (9 if version >= leases_from + 1 else 0)


@pytest.mark.parametrize("version", range(1, lite_schema.SCHEMA_VERSION))
async def test_sqlite_upgrades_from(version: int, tmp_path: Path) -> None:
    path = tmp_path / f"v{version}.db"
    sqlite_at(path, version)
    async with await SqliteStore.open(path) as store:
        await check_upgraded(store, version, leases_from=2)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == lite_schema.SCHEMA_VERSION
    finally:
        conn.close()
    async with await SqliteStore.open(path) as again:  # the upgraded shape is ours
        assert await again.exists("fork")


@pytest.mark.parametrize("version", range(1, pg_schema.SCHEMA_VERSION))
async def test_postgres_upgrades_from(version: int, postgres_dsn: str) -> None:
    async with fresh_schema(postgres_dsn) as schema:
        pg_at(postgres_dsn, schema, version)
        async with await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1) as store:
            await check_upgraded(store, version, leases_from=4)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            s = sql.Identifier(schema).as_string(conn)
            row = conn.execute(f"SELECT version FROM {s}.schema_version").fetchone()
            assert row == (pg_schema.SCHEMA_VERSION,)
        async with await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1) as again:
            assert await again.exists("fork")


@pytest.mark.parametrize("part", ["session_labels", "meta"])
async def test_sqlite_lifecycle_schema_missing_a_table_is_refused(
    part: str, tmp_path: Path
) -> None:
    path = tmp_path / "m.db"
    async with await SqliteStore.open(path):
        pass
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"DROP TABLE {part}")
    conn.close()
    with pytest.raises(StoreError, match=rf"table '{part}' is missing.*nothing was changed"):
        await SqliteStore.open(path)


@pytest.mark.parametrize("part", ["session_labels", "meta"])
async def test_postgres_lifecycle_schema_missing_a_table_is_refused(
    part: str, postgres_dsn: str
) -> None:
    async with fresh_schema(postgres_dsn) as schema:
        await (await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)).aclose()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(pg_schema.render(conn, schema, f"DROP TABLE {{s}}.{part}"))
        with pytest.raises(StoreError, match=rf"table '{part}' is missing"):
            await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)


async def test_each_database_gets_its_own_cursor_secret(tmp_path: Path) -> None:
    secrets = set()
    for name in ("one", "two"):
        async with await SqliteStore.open(tmp_path / f"{name}.db") as store:
            await store.update_data("s", "1")
        conn = sqlite3.connect(tmp_path / f"{name}.db")
        secrets.add(conn.execute("SELECT value FROM meta").fetchone()[0])
        conn.close()
    assert len(secrets) == 2
    assert all(len(secret) == 64 for secret in secrets)


async def test_postgres_lifecycle_schema_missing_a_trigger_is_refused(postgres_dsn: str) -> None:
    async with fresh_schema(postgres_dsn) as schema:
        await (await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)).aclose()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                pg_schema.render(conn, schema, "DROP TRIGGER session_labels_follow ON {s}.sessions")
            )
        with pytest.raises(StoreError, match=r"trigger 'session_labels_follow' on 'sessions'"):
            await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)


async def test_sqlite_lifecycle_schema_missing_its_trigger_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with await SqliteStore.open(path):
        pass
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TRIGGER session_labels_follow")
    conn.close()
    with pytest.raises(StoreError, match=r"trigger 'session_labels_follow' is missing"):
        await SqliteStore.open(path)
