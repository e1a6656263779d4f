"""PostgresStore never applies a write twice: a retry racing its lost attempt; the migration."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import psycopg
import pytest
import trio
from _pg_private import CuttingProxy, cutting_proxy
from _sql_support import fresh_schema, pg_dsn, undo_lifecycle_pg

from agentloop import FinalizeSummary, RunStep
from agentloopsql import PostgresStore
from agentloopsql._pg_ops import PgOps
from agentloopsql._pg_schema import SCHEMA_VERSION
from agentloopsql._workers import IdempotentWrite, KeyedWrite


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


@pytest.fixture
def proxy(dsn: str) -> Iterator[CuttingProxy]:
    with cutting_proxy(dsn) as cutter:
        yield cutter


@pytest.fixture
async def via_proxy(dsn: str, proxy: CuttingProxy) -> AsyncIterator[PostgresStore]:
    routed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    async with (
        fresh_schema(dsn) as schema,
        await PostgresStore.open(routed, schema=schema, pool_size=1) as pg,
    ):
        yield pg


def raw(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def waiting_on(dsn: str, schema: str, table: str) -> int:
    """How many backends wait for a lock on ``schema.table``."""
    rows = raw(
        dsn,
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = to_regclass(%s)",
        f'"{schema}".{table}',
    )
    return int(rows[0][0])


async def until(check: Callable[[], bool], what: str) -> None:
    with trio.fail_after(5):
        while not await trio.to_thread.run_sync(check):  # noqa: ASYNC110 (polls the server)
            await trio.sleep(0.02)
    assert check(), what


async def race_lost_attempt(
    pg: PostgresStore, dsn: str, proxy: CuttingProxy, table: str, write: Callable[[], Any]
) -> None:
    """Run ``write`` while ``table`` is locked; cut the client side while the server holds
    the statement, let the retry queue behind it too, then release the lock."""
    locker = psycopg.connect(dsn)
    try:
        locker.execute(f'LOCK TABLE "{pg.schema}".{table} IN SHARE MODE')
        done = threading.Event()

        async def writer() -> None:
            await write()
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            await until(lambda: waiting_on(dsn, pg.schema, table) == 1, "first attempt blocked")
            proxy.cut_clients()
            # The retry (after its "did it land?" check said no) blocks behind the lock too,
            # while the lost attempt is still waiting on the server.
            await until(lambda: waiting_on(dsn, pg.schema, table) == 2, "retry blocked")
            assert not done.is_set()
            await trio.to_thread.run_sync(locker.commit)
    finally:
        locker.close()


async def test_append_cut_on_client_side_is_stored_once(
    via_proxy: PostgresStore, dsn: str, proxy: CuttingProxy
) -> None:
    """A lost append still running on the server and its retry: the step is stored once."""
    pg = via_proxy
    await race_lost_attempt(
        pg, dsn, proxy, "steps", lambda: pg.append(RunStep("s", 0, "user", content="once"))
    )
    assert [s.content for s in await pg.all("s")] == ["once"]
    await pg.append(RunStep("s", 1, "user", content="next"))  # and the store goes on
    assert [s.content for s in await pg.all("s")] == ["once", "next"]


async def test_group_append_cut_on_client_side_is_stored_once(
    via_proxy: PostgresStore, dsn: str, proxy: CuttingProxy
) -> None:
    """The multi-row INSERT of a group commit, retried under the same race, stores each row once."""
    pg = via_proxy
    ops = cast("PgOps", pg._ops)
    items = [(RunStep(f"s{i % 2}", i, "user", content=f"{i}"), 1000 + i) for i in range(4)]

    def append_group() -> Any:
        return pg._workers.call(
            KeyedWrite(
                lambda conn: ops.append_many(conn, items),
                lambda conn: ops.append_landed(conn, "s0", 1000),
            )
        )

    await race_lost_attempt(pg, dsn, proxy, "steps", append_group)
    assert [s.content for s in await pg.all("s0")] == ["0", "2"]
    assert [s.content for s in await pg.all("s1")] == ["1", "3"]


async def test_finalize_cut_on_client_side_counts_once(
    via_proxy: PostgresStore, dsn: str, proxy: CuttingProxy
) -> None:
    """A lost finalize still running on the server and its retry: its steps count once."""
    pg = via_proxy
    await race_lost_attempt(
        pg,
        dsn,
        proxy,
        "finalize_keys",
        lambda: pg.finalize("s", FinalizeSummary("completed", step_count=3)),
    )
    [info] = await pg.list_sessions()
    assert (info.status, info.step_count) == ("completed", 3)
    assert raw(dsn, f'SELECT count(*) FROM "{pg.schema}".finalize_keys') == [(1,)]


async def test_repeated_append_key_is_a_no_op(dsn: str) -> None:
    """Running one append statement twice with its key (a blind retry) stores it once,
    in either form of the statement; other steps may repeat a step index freely."""
    async with fresh_schema(dsn) as schema, await PostgresStore.open(dsn, schema=schema) as pg:
        ops = cast("PgOps", pg._ops)
        first, second = RunStep("s", 0, "user", content="a"), RunStep("s", 0, "user", content="b")

        def twice(conn: Any) -> None:
            for _ in range(2):
                ops.append(conn, first, 7)
                ops.append_many(conn, [(first, 7), (second, 8)])

        await pg._workers.call(IdempotentWrite(twice))
        await pg.append(RunStep("s", 0, "user", content="c"))  # same index, new append
        assert [(s.step_index, s.content) for s in await pg.all("s")] == [
            (0, "a"),
            (0, "b"),
            (0, "c"),
        ]


def _make_version_2_with_duplicates(dsn: str, schema: str) -> None:
    s = f'"{schema}"'
    raw(dsn, f"DROP INDEX {s}.steps_append_once")
    columns = "session_id, step_index, step_type, content, tool_args, duration_ms, "
    columns += "prompt_tokens, completion_tokens, created_at, append_key"
    for content, key in [("a", 1), ("b", 2), ("a-again", 1), ("n1", None), ("n2", None)]:
        raw(
            dsn,
            f"INSERT INTO {s}.steps ({columns}) VALUES ('s', 0, 'user', %s, '{{}}', 0, 0, 0, "
            "now(), %s)",
            content,
            key,
        )
    undo_lifecycle_pg(dsn, schema)
    raw(dsn, f"DROP TABLE {s}.leases")
    raw(dsn, f"DROP TABLE {s}.revision_floors")
    raw(dsn, f"UPDATE {s}.schema_version SET version = 2")


async def test_version_2_with_duplicates_migrates(dsn: str) -> None:
    """A version-2 schema holding an append stored twice (the old race) migrates: the
    later copy by seq is deleted, steps without a key are kept, later retries are no-ops."""
    async with fresh_schema(dsn) as schema:
        await (await PostgresStore.open(dsn, schema=schema, pool_size=1)).aclose()
        _make_version_2_with_duplicates(dsn, schema)
        async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg:
            assert [s.content for s in await pg.all("s")] == ["a", "b", "n1", "n2"]
            version = raw(dsn, f'SELECT version FROM "{schema}".schema_version')
            assert version == [(SCHEMA_VERSION,)]
            ops = cast("PgOps", pg._ops)
            await pg._workers.call(
                IdempotentWrite(lambda c: ops.append(c, RunStep("s", 1, "user", content="x"), 2))
            )
            assert len(await pg.all("s")) == 4


async def test_concurrent_opens_migrate_duplicates_once(dsn: str) -> None:
    """Six processes' worth of opens at once on a version-2 schema with duplicates all succeed."""
    async with fresh_schema(dsn) as schema:
        await (await PostgresStore.open(dsn, schema=schema, pool_size=1)).aclose()
        _make_version_2_with_duplicates(dsn, schema)
        stores: list[PostgresStore] = []

        async def open_one() -> None:
            stores.append(await PostgresStore.open(dsn, schema=schema, pool_size=1))

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(open_one)
        for pg in stores:
            await pg.aclose()
        assert raw(dsn, f'SELECT content FROM "{schema}".steps ORDER BY seq') == [
            ("a",),
            ("b",),
            ("n1",),
            ("n2",),
        ]
