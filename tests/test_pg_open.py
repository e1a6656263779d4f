"""PostgresStore.open fails fast, says why, leaks nothing, and refuses foreign schemas untouched."""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import trio
from _pg_private import can_run_private_server, free_port, private_server
from _sql_support import fresh_schema, pg_dsn

from agentloop import StoreError, StoreUnavailableError
from agentloopsql import PostgresStore

BOUND = 3.0  # seconds: libpq's smallest connect_timeout (2 s) plus slack for a loaded machine


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


def raw(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


async def failed_open(dsn: str, **options: Any) -> tuple[StoreError, float]:
    """The error ``open`` raised and how long it took."""
    started = time.monotonic()
    with pytest.raises(StoreError) as info:
        await PostgresStore.open(dsn, **options)
    return info.value, time.monotonic() - started


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that completes TCP handshakes (the listen backlog) and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=32) as sock:
        yield sock.getsockname()[1]


class TestFailsFast:
    async def test_refused_port(self) -> None:
        """Nothing listening: StoreUnavailableError at once, with the driver's reason."""
        error, took = await failed_open(f"postgresql://postgres@127.0.0.1:{free_port()}/x")
        assert type(error) is StoreUnavailableError
        assert "Connection refused" in str(error)
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert took < BOUND

    async def test_unknown_host(self) -> None:
        """A host name that does not resolve: StoreUnavailableError naming it."""
        error, took = await failed_open("postgresql://postgres@no-such-host.invalid/x")
        assert type(error) is StoreUnavailableError
        assert "no-such-host.invalid" in str(error)
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert took < BOUND + 2  # the resolver's own time

    async def test_silent_server(self, silent_port: int) -> None:
        """A server that accepts and never answers: StoreUnavailableError within ~2 s,
        although pool_timeout is 30 s."""
        error, took = await failed_open(f"postgresql://postgres@127.0.0.1:{silent_port}/x")
        assert type(error) is StoreUnavailableError
        assert "timeout" in str(error).lower()
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert 1.5 < took < BOUND

    async def test_missing_database(self, dsn: str) -> None:
        """A database that does not exist: StoreError (permanent), with the server's message."""
        name = f"agentloop_none_{secrets.token_hex(4)}"
        error, took = await failed_open(psycopg.conninfo.make_conninfo(dsn, dbname=name))
        assert type(error) is StoreError
        assert f'database "{name}" does not exist' in str(error)
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert took < BOUND

    async def test_missing_role(self, dsn: str) -> None:
        """A role that does not exist: StoreError (permanent), with the server's message."""
        name = f"agentloop_none_{secrets.token_hex(4)}"
        error, took = await failed_open(psycopg.conninfo.make_conninfo(dsn, user=name))
        assert type(error) is StoreError
        assert f'role "{name}" does not exist' in str(error)
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert took < BOUND

    async def test_ten_failed_opens_leave_nothing_behind(self, silent_port: int) -> None:
        """Ten opens against a silent server (at once) leave no thread, socket or fd."""
        target = f"postgresql://postgres@127.0.0.1:{silent_port}/x"
        await failed_open(target)  # let trio's thread cache and the driver warm up
        threads = {t.ident for t in threading.enumerate()}
        fds = set(os.listdir("/proc/self/fd"))
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(failed_open, target)
        assert time.monotonic() - started < BOUND + 1
        # Idle workers of trio's thread cache (named "Trio thread N" when idle) end on
        # their own; a thread still connecting or serving a pool would be named otherwise.
        extra = [
            t.name
            for t in threading.enumerate()
            if t.ident not in threads and not t.name.startswith("Trio thread ")
        ]
        assert extra == []
        assert set(os.listdir("/proc/self/fd")) - fds == set()

    async def test_pool_that_cannot_fill_fails_fast(self, dsn: str) -> None:
        """When the first connection works but the pool's cannot (here: the role's
        connection limit), open says why within ~2 s instead of waiting out pool_timeout."""
        role = f"agentloop_r_{secrets.token_hex(5)}"
        async with fresh_schema(dsn) as schema:
            await (await PostgresStore.open(dsn, schema=schema, pool_size=1)).aclose()
            raw(dsn, f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
            try:
                raw(dsn, f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
                raw(dsn, f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
                limited = psycopg.conninfo.make_conninfo(dsn, user=role)
                error, took = await failed_open(limited, schema=schema, pool_size=2)
            finally:
                raw(dsn, f"DROP OWNED BY {role}")
                raw(dsn, f"DROP ROLE {role}")
        assert type(error) is StoreUnavailableError
        assert f'too many connections for role "{role}"' in str(error)
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert took < BOUND + 1


@pytest.fixture(scope="module")
def private_port() -> Iterator[int]:
    """A private PostgreSQL (password auth, max_connections=3) for this module's tests."""
    if not can_run_private_server():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but initdb/postgres or the postgres user is missing")
        pytest.skip("needs PostgreSQL's initdb and a postgres user")
    with private_server(max_connections=3, password="right") as port:
        yield port


class TestPrivateServer:
    async def test_wrong_password(self, private_port: int) -> None:
        """Authentication failure: StoreError (permanent) with the server's message, fast."""
        error, took = await failed_open(
            f"postgresql://postgres:wrong@127.0.0.1:{private_port}/postgres"
        )
        assert type(error) is StoreError
        assert "password authentication failed" in str(error)
        assert "wrong" not in str(error)  # the password is not echoed
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert took < BOUND

    async def test_too_many_clients(self, private_port: int) -> None:
        """Every slot taken: StoreUnavailableError saying so, fast."""
        right = f"postgresql://postgres:right@127.0.0.1:{private_port}/postgres"
        holders = [psycopg.connect(right) for _ in range(3)]
        try:
            error, took = await failed_open(right)
        finally:
            for conn in holders:
                conn.close()
        assert type(error) is StoreUnavailableError
        assert "too many clients" in str(error)
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert took < BOUND
        async with await PostgresStore.open(right, pool_size=2) as pg:  # and once freed, it works
            assert await pg.all("s") == []


def snapshot(dsn: str, schema: str) -> list[tuple[Any, ...]]:
    """Every relation, column and index of ``schema``, and what schema_version holds."""
    shape = raw(
        dsn,
        "SELECT c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE n.nspname = %s ORDER BY 1, a.attnum",
        schema,
    )
    exists = raw(dsn, "SELECT to_regclass(%s) IS NOT NULL", f'"{schema}".schema_version')
    held = raw(dsn, f'SELECT version::text FROM "{schema}".schema_version') if exists[0][0] else []
    return [*shape, ("held", *sorted(str(row[0]) for row in held))]


class TestForeignSchemas:
    @pytest.mark.parametrize("schema", ["information_schema", "pg_catalog", "pg_toast", "pg_x"])
    async def test_system_schemas_refused(self, dsn: str, schema: str) -> None:
        """PostgreSQL's own schemas are refused with ValueError before connecting."""
        with pytest.raises(ValueError, match=r"^schema must not"):
            await PostgresStore.open(dsn, schema=schema)

    async def test_current_system_schema_refused(self, dsn: str) -> None:
        """schema=None on a connection whose current schema is a system one: StoreError,
        and no table was created there."""
        scoped = psycopg.conninfo.make_conninfo(dsn, options="-csearch_path=information_schema")
        before = snapshot(dsn, "information_schema")
        error, _ = await failed_open(scoped)
        assert "information_schema" in str(error)
        assert "pass schema=" in str(error)
        assert snapshot(dsn, "information_schema") == before

    async def test_foreign_tables_refused_untouched(self, dsn: str) -> None:
        """A schema whose `steps` is another application's table, with no schema_version."""
        async with fresh_schema(dsn) as schema:
            raw(dsn, f'CREATE SCHEMA "{schema}"')
            raw(dsn, f'CREATE TABLE "{schema}".steps (id serial PRIMARY KEY, name text)')
            before = snapshot(dsn, schema)
            error, _ = await failed_open(dsn, schema=schema)
            assert type(error) is StoreError
            assert schema in str(error)
            assert "no schema_version" in str(error)
            assert snapshot(dsn, schema) == before

    async def test_unrelated_tables_are_fine(self, dsn: str) -> None:
        """Tables of other names in the schema (an app's own) do not stop the store."""
        async with fresh_schema(dsn) as schema:
            raw(dsn, f'CREATE SCHEMA "{schema}"')
            raw(dsn, f'CREATE TABLE "{schema}".users (id int)')
            async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg:
                assert await pg.all("s") == []

    @pytest.mark.parametrize(
        ("damage", "problem"),
        [
            ("UPDATE {s}.schema_version SET version = NULL", "holds [None]"),
            ("UPDATE {s}.schema_version SET version = -3", "holds [-3]"),
            ("UPDATE {s}.schema_version SET version = 0", "holds [0]"),
            ("INSERT INTO {s}.schema_version VALUES (1)", "holds ["),
            ("DELETE FROM {s}.schema_version", "holds []"),
            (
                "ALTER TABLE {s}.schema_version ALTER COLUMN version TYPE text; "
                "UPDATE {s}.schema_version SET version = 'two'",
                "not of agentloopsql's shape",
            ),
            ("ALTER TABLE {s}.steps DROP COLUMN append_key", "table 'steps'"),
            ("ALTER TABLE {s}.sessions ALTER COLUMN model TYPE varchar(9)", "table 'sessions'"),
            ("DROP TABLE {s}.finalize_keys", "table 'finalize_keys'"),
            ("DROP SEQUENCE {s}.session_writes", "'session_writes'"),
        ],
    )
    async def test_damaged_schema_refused_untouched(
        self, dsn: str, damage: str, problem: str
    ) -> None:
        """A garbage schema_version or a store table of another shape: StoreError naming
        the schema and the problem, and nothing in the schema changes."""
        async with fresh_schema(dsn) as schema:
            await (await PostgresStore.open(dsn, schema=schema, pool_size=1)).aclose()
            with psycopg.connect(dsn, autocommit=True) as conn:
                for statement in damage.split("; "):
                    conn.execute(statement.replace("{s}", f'"{schema}"'))
            before = snapshot(dsn, schema)
            error, took = await failed_open(dsn, schema=schema, pool_size=1)
            assert type(error) is StoreError
            assert repr(schema) in str(error)
            assert problem in str(error)
            assert snapshot(dsn, schema) == before
            assert took < BOUND
