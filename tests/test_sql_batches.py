"""SQL batches and revisions: group commit, fencing, racing handles, migration of old sessions."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
import trio
from _sql_support import (
    SQLITE_UNDO_LIFECYCLE,
    SqlTarget,
    fresh_schema,
    open_sql_store,
    undo_lifecycle_pg,
)

from agentloop import (
    FinalizeSummary,
    LeaseLostError,
    RevisionConflictError,
    RunStatus,
    RunStep,
    Session,
    StepType,
    SupportsAppendMany,
    SupportsGetMany,
    SupportsRevisions,
)
from agentloopsql import PostgresStore, SqliteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def step(i: int, sid: str = "s") -> RunStep:
    return RunStep(sid, i, StepType.user, content=f"step {i}", created_at=T0)


async def test_stores_have_the_capabilities(sql_target: SqlTarget, tmp_path: Path) -> None:
    """Both SQL stores and their fenced views have append_many, get_many and revisions."""
    async with open_sql_store(sql_target, tmp_path / "c.db", pool_size=2) as store:
        lease = await store.acquire_lease("s", "a", 30)
        assert lease is not None
        for obj in (store, store.fenced(lease)):
            for protocol in (SupportsAppendMany, SupportsGetMany, SupportsRevisions):
                assert isinstance(obj, protocol), (obj, protocol)


async def test_batch_past_one_statement(sql_target: SqlTarget, tmp_path: Path) -> None:
    """A batch past one PostgreSQL statement (65,535 parameters) is stored whole, in order."""
    async with open_sql_store(sql_target, tmp_path / "b.db", pool_size=2) as store:
        batch = [step(i) for i in range(6_100)]
        await store.append_many(batch)
        assert await store.all("s") == batch


async def test_lost_lease_batch_fails_alone_in_group_commit(
    sql_target: SqlTarget, tmp_path: Path
) -> None:
    """A fenced batch refused for a lost lease appends nothing; batches beside it all land."""
    async with open_sql_store(sql_target, tmp_path / "g.db", pool_size=4) as store:
        old = await store.acquire_lease("s", "a", 30)
        assert old is not None
        await store.release_lease(old)
        assert await store.acquire_lease("s", "b", 30) is not None
        view = store.fenced(old)
        refused: list[BaseException] = []

        async def lost() -> None:
            try:
                await view.append_many([step(0, "t"), step(1)])
            except LeaseLostError as exc:
                refused.append(exc)

        async with trio.open_nursery() as nursery:
            for k in range(6):
                nursery.start_soon(store.append_many, [step(i, f"ok{k}") for i in range(3)])
            nursery.start_soon(lost)
        assert len(refused) == 1
        assert await store.all("s") == []
        assert await store.all("t") == []
        for k in range(6):
            assert await store.all(f"ok{k}") == [step(i, f"ok{k}") for i in range(3)]


async def test_fenced_update_data_if_after_takeover(sql_target: SqlTarget, tmp_path: Path) -> None:
    """After a takeover the old view's update_data_if raises LeaseLostError, changing nothing."""
    async with open_sql_store(sql_target, tmp_path / "f.db", pool_size=2) as store:
        old = await store.acquire_lease("s", "a", 30)
        assert old is not None
        rev = await store.fenced(old).update_data_if("s", "[1]", 0)
        await store.release_lease(old)
        assert await store.acquire_lease("s", "b", 30) is not None
        with pytest.raises(LeaseLostError):
            await store.fenced(old).update_data_if("s", "[2]", rev)
        assert (await store.get("s")).data == "[1]"
        assert await store.revision("s") == rev


async def test_lease_calls_leave_the_revision(sql_target: SqlTarget, tmp_path: Path) -> None:
    """Acquire, renew and release do not bump the revision."""
    async with open_sql_store(sql_target, tmp_path / "l.db", pool_size=2) as store:
        await store.put(Session("s", "m"))
        seen = await store.revision("s")
        lease = await store.acquire_lease("s", "a", 30)
        assert lease is not None
        await store.renew_lease(lease, 30)
        await store.release_lease(lease)
        assert await store.revision("s") == seen


async def test_delete_keeps_revisions_growing(sql_target: SqlTarget, tmp_path: Path) -> None:
    """Deleting the most recently written session never lets a later write reuse a revision."""
    async with open_sql_store(sql_target, tmp_path / "d.db", pool_size=2) as store:
        await store.update_data("other", "[]")
        await store.update_data("s", "[1]")
        before = await store.revision("s")
        assert await store.delete_session("s")
        after = await store.revision("s")
        assert after > before  # a delete makes the revision larger
        with pytest.raises(RevisionConflictError, match=rf"is at revision {after}, not {before};"):
            await store.update_data_if("s", "[2]", before)
        await store.finalize("s", FinalizeSummary(RunStatus.completed))
        assert await store.revision("s") > after


async def test_handles_racing_update_data_if(sql_target: SqlTarget, tmp_path: Path) -> None:
    """Tasks on two handles onto one backend, same revision: exactly one wins each round."""
    path = tmp_path / "r.db"
    async with open_sql_store(sql_target, path, pool_size=4) as first:
        if isinstance(first, SqliteStore):
            second: SqliteStore | PostgresStore = await SqliteStore.open(str(path))
        else:
            assert sql_target.dsn is not None
            second = await PostgresStore.open(sql_target.dsn, schema=first.schema, pool_size=4)
        async with second:
            base = await first.update_data_if("w", "[]", 0)
            for round_ in range(3):
                wins: list[int] = []
                async with trio.open_nursery() as nursery:
                    for k in range(8):
                        nursery.start_soon(_contend, (first, second)[k % 2], k, base, wins)
                assert len(wins) == 1, f"round {round_}: {wins}"
                assert (await second.get("w")).data == f"[{wins[0]}]"
                base = await first.revision("w")


async def _contend(store: SqliteStore | PostgresStore, k: int, rev: int, wins: list[int]) -> None:
    try:
        await store.update_data_if("w", f"[{k}]", rev)
    except RevisionConflictError:
        return
    wins.append(k)


def test_sqlite_sessions_before_revisions_get_one(tmp_path: Path) -> None:
    """A SQLite file from before revisions is migrated: its sessions have a revision > 0."""
    path = tmp_path / "old.db"

    async def write() -> None:
        async with await SqliteStore.open(str(path)) as store:
            await store.update_data("s", '{"v": 1}')

    async def check() -> None:
        async with await SqliteStore.open(str(path)) as store:
            rev = await store.revision("s")
            assert rev > 0
            assert await store.update_data_if("s", '{"v": 2}', rev) > rev

    trio.run(write)
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE sessions DROP COLUMN checksum")  # back to before version 6
    conn.execute("ALTER TABLE steps DROP COLUMN checksum")  # and before version 5
    for statement in SQLITE_UNDO_LIFECYCLE:
        conn.execute(statement)
    conn.execute("DROP TABLE revision_floors")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    trio.run(check)


async def test_pg_sessions_before_revisions_get_one(postgres_dsn: str) -> None:
    """A PostgreSQL schema from before revisions is migrated: its sessions have a revision > 0."""
    import psycopg

    async with fresh_schema(postgres_dsn) as schema:
        async with await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1) as pg:
            await pg.update_data("s", '{"v": 1}')
        undo_lifecycle_pg(postgres_dsn, schema)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{schema}".revision_floors')
            conn.execute(f'UPDATE "{schema}".schema_version SET version = 4')
        async with await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1) as pg:
            rev = await pg.revision("s")
            assert rev > 0
            assert await pg.update_data_if("s", '{"v": 2}', rev) > rev
