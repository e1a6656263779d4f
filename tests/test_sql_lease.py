"""Leases on the SQL stores only: several handles, races with a takeover, group commit, schema.

Everything here runs on a real SQLite file and the real PostgreSQL server.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
import trio.testing
from _lease_kit import Backend, Kit, backend_of, open_kit
from _sql_support import occupy_worker, undo_lifecycle_pg

from agentloop import (
    FinalizeSummary,
    Lease,
    LeaseLostError,
    RunStatus,
    RunStep,
    Session,
    StepType,
    StoreError,
)
from agentloopsql import SqliteStore


@pytest.fixture(params=["sqlite", "postgres"])
def sql_backend(request: pytest.FixtureRequest) -> Backend:
    """Each SQL store in turn; sync, so a PostgreSQL skip shows its reason."""
    return backend_of(request.param)


@pytest.fixture
async def kit(sql_backend: Backend, tmp_path: Path) -> AsyncIterator[Kit]:
    async with open_kit(sql_backend, tmp_path) as opened:
        yield opened


def step(i: int, sid: str = "s", content: str | None = None) -> RunStep:
    return RunStep(sid, i, StepType.user, content=content if content is not None else f"{i}")


async def lease_of(store: Any, owner: str, sid: str = "s") -> Lease:
    lease: Lease | None = await store.acquire_lease(sid, owner, 60)
    assert lease is not None
    return lease


def raw_state(kit: Kit, sid: str = "s") -> tuple[object, ...]:
    """The session's rows as the database holds them, read past the store."""
    if kit.path is not None:
        session = kit.raw(
            "SELECT model, data, final_status, step_total FROM sessions WHERE id = ?", sid
        )
        steps = kit.raw("SELECT content FROM steps WHERE session_id = ? ORDER BY seq", sid)
    else:
        session = kit.raw(
            "SELECT model, data::text, final_status, step_total FROM {s}.sessions WHERE id = %s",
            sid,
        )
        steps = kit.raw("SELECT content FROM {s}.steps WHERE session_id = %s ORDER BY seq", sid)
    return session, steps


async def test_tokens_increase_across_reopen(kit: Kit) -> None:
    """Tokens keep growing after the store is closed and opened again (lease rows persist)."""
    first = await lease_of(kit.store, "a")
    await kit.store.release_lease(first)
    await kit.store.aclose()
    async with kit.second_handle() as reopened:
        second = await lease_of(reopened, "a")
        assert second.token > first.token
        await reopened.fenced(second).append(step(0))
        assert await reopened.delete_session("s") is True
        await kit.expire()
        assert (await lease_of(reopened, "b")).token > second.token


async def test_takeover_through_second_handle_refuses_every_old_write(kit: Kit) -> None:
    """A takeover on another handle: each write of the old view raises, the rows unchanged."""
    await kit.store.put(Session("s", model="m", data="[1]"))
    await kit.store.append(step(0))
    old = await lease_of(kit.store, "a")
    view = kit.store.fenced(old)
    await kit.expire()
    async with kit.second_handle() as other:
        new = await lease_of(other, "b")
        before = raw_state(kit)
        writes = [
            view.append(step(1)),
            view.update_data("s", "[2]"),
            view.put(Session("s", model="late")),
            view.finalize("s", FinalizeSummary(RunStatus.error, step_count=5)),
            view.delete_session("s"),
        ]
        for write in writes:
            with pytest.raises(LeaseLostError, match=rf"now token {new.token}\); nothing was"):
                await write
        assert raw_state(kit) == before
        await other.fenced(new).append(step(1))
        assert raw_state(kit)[1] == [("0",), ("1",)]


async def test_fenced_appends_racing_a_takeover(kit: Kit) -> None:
    """Every fenced append lands before the takeover or is refused; none after the new
    holder's first read."""
    landed: list[int] = []
    started = trio.Event()

    async def old_holder(lease: Lease) -> None:
        view = kit.store.fenced(lease)
        for i in range(100_000):
            try:
                await view.append(step(i, content=f"old {i}"))
            except LeaseLostError:
                return
            landed.append(i)
            if i == 20:
                started.set()
        raise AssertionError("the old holder's appends were never refused")

    async with kit.second_handle() as other, trio.open_nursery() as nursery:
        nursery.start_soon(old_holder, await lease_of(kit.store, "a"))
        await started.wait()
        await kit.expire()
        new = await lease_of(other, "b")
        seen = await other.all("s")  # the new holder's first read
        await other.fenced(new).append(step(0, content="takeover"))
    trace = [s.content for s in await kit.store.all("s")]
    assert trace == [s.content for s in seen] + ["takeover"]
    assert trace == [f"old {i}" for i in landed] + ["takeover"]


async def test_refused_fenced_append_fails_alone_in_group_commit(
    sql_backend: Backend, tmp_path: Path
) -> None:
    """Appends queued together with a refused fenced append commit; only it raises."""
    async with open_kit(sql_backend, tmp_path, pool_size=1) as kit:
        store = kit.store
        old = await lease_of(store, "a")
        await kit.expire()
        new = await lease_of(store, "b")
        results: dict[str, str] = {}

        async def call(name: str, write: Any) -> None:
            try:
                await write
            except LeaseLostError:
                results[name] = "refused"
            else:
                results[name] = "ok"

        gate = threading.Event()
        async with trio.open_nursery() as nursery:
            await occupy_worker(store, nursery, gate)
            nursery.start_soon(call, "before", store.append(step(0, "x")))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(call, "old", store.fenced(old).append(step(0)))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(call, "new", store.fenced(new).append(step(1)))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(call, "after", store.append(step(1, "x")))
            await trio.testing.wait_all_tasks_blocked()
            assert len(store._workers._queue) == 4  # all queued together behind the busy worker
            gate.set()
        assert results == {"before": "ok", "old": "refused", "new": "ok", "after": "ok"}
        assert [s.step_index for s in await store.all("x")] == [0, 1]
        assert [s.step_index for s in await store.all("s")] == [1]


async def test_sqlite_lease_calls_share_a_commit(tmp_path: Path) -> None:
    """On SQLite, lease calls and fenced writes queued together run in one batch, correctly."""
    async with await SqliteStore.open(tmp_path / "batch.db") as store:
        gate = threading.Event()
        results: list[object] = []
        async with trio.open_nursery() as nursery:
            await occupy_worker(store, nursery, gate)

            async def acquire(owner: str) -> None:
                results.append(await store.acquire_lease("s", owner, 60))

            for owner in ("a", "b", "c"):
                nursery.start_soon(acquire, owner)
            await trio.testing.wait_all_tasks_blocked()
            gate.set()
        granted = [r for r in results if r is not None]
        assert len(granted) == 1
        assert len(results) == 3


def _nothing() -> None:
    return None


class _OpenTransaction:
    """A transaction on another connection, past the store, left open until ``commit``."""

    _commit: Callable[[], object]
    _close: Callable[[], object]

    def __init__(self, kit: Kit, statement: str) -> None:
        if kit.path is not None:
            lite = sqlite3.connect(kit.path, isolation_level=None, check_same_thread=False)
            lite.execute("BEGIN IMMEDIATE")
            lite.execute(statement.replace("{s}.", "").replace("expires_at", "expires_us"))
            self._commit = lambda: lite.execute("COMMIT")
            self._close = lite.close
        else:
            assert kit.dsn is not None
            pg = psycopg.connect(kit.dsn)
            pg.execute(statement.replace("{s}", f'"{kit.schema}"'))
            self._commit = pg.commit
            self._close = pg.close

    def commit(self) -> None:
        """Commit and close; idempotent."""
        commit, self._commit = self._commit, _nothing
        commit()
        self._close()


async def finishes_within(seconds: float, task: Any, nursery: trio.Nursery) -> trio.Event:
    done = trio.Event()

    async def run() -> None:
        await task
        done.set()

    nursery.start_soon(run)
    with trio.move_on_after(seconds):
        await done.wait()
    return done


async def test_fenced_write_waits_for_a_takeover_in_flight_then_is_refused(kit: Kit) -> None:
    """A takeover committing while a fenced write checks: the write waits for it and is
    refused, never checking the row as it was before the takeover (the check is locked)."""
    old = await lease_of(kit.store, "a")
    await kit.store.append(step(0))
    takeover = _OpenTransaction(
        kit, "UPDATE {s}.leases SET owner = 'b', token = token + 1 WHERE session_id = 's'"
    )
    outcome: list[str] = []

    async def write() -> None:
        try:
            await kit.store.fenced(old).append(step(1))
            outcome.append("landed")
        except LeaseLostError:
            outcome.append("refused")

    try:
        async with trio.open_nursery() as nursery:
            done = await finishes_within(0.3, write(), nursery)
            assert not done.is_set()  # the write waits for the takeover's transaction
            await trio.to_thread.run_sync(takeover.commit)
    finally:
        takeover.commit()
    assert outcome == ["refused"]
    assert raw_state(kit)[1] == [("0",)]


async def test_takeover_waits_for_a_fenced_write_in_flight(
    sql_backend: Backend, tmp_path: Path
) -> None:
    """While a fenced write's transaction is open, a takeover waits for it to end."""
    async with open_kit(sql_backend, tmp_path) as kit:
        old = await lease_of(kit.store, "a")
        await kit.expire()
        # What a fenced write holds between its check and its commit.
        lock = (
            "SELECT token FROM {s}.leases WHERE session_id = 's' FOR SHARE"
            if kit.path is None
            else "UPDATE leases SET token = token WHERE session_id = 's'"
        )
        write = _OpenTransaction(kit, lock)
        try:
            async with trio.open_nursery() as nursery:
                done = await finishes_within(0.3, kit.store.acquire_lease("s", "b", 60), nursery)
                assert not done.is_set()
                await trio.to_thread.run_sync(write.commit)
        finally:
            write.commit()
        new = await kit.store.acquire_lease("s", "b", 60)
        assert new is not None
        assert new.token == old.token + 1


async def test_sqlite_version_1_file_migrates_and_leases(tmp_path: Path) -> None:
    """A file at schema version 1 (before leases) gains the lease table; its data stays."""
    from agentloopsql._sqlite_schema import MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO sessions (id, data, created_us, updated_us, write_seq) "
        "VALUES ('s', '[1]', 0, 0, 1)"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    async with await SqliteStore.open(path) as store:
        assert (await store.get("s")).data == "[1]"
        lease = await lease_of(store, "a")
        await store.fenced(lease).update_data("s", "[2]")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT owner, token FROM leases").fetchall() == [("a", 1)]
    conn.close()


@pytest.mark.parametrize(
    ("version", "ddl", "pattern"),
    [
        (1, "CREATE TABLE leases (x TEXT)", r"it has a table named 'leases', which that schema"),
        (2, "ALTER TABLE leases ADD COLUMN extra TEXT", r"table 'leases' has columns"),
    ],
)
async def test_sqlite_foreign_lease_table_refused(
    tmp_path: Path, version: int, ddl: str, pattern: str
) -> None:
    """A `leases` table the file's schema version does not have, or of another shape: refused."""
    from agentloopsql._sqlite_schema import MIGRATIONS

    path = tmp_path / "foreign.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statements in MIGRATIONS[:version]:
        for statement in statements:
            conn.execute(statement)
    conn.execute(ddl)
    conn.execute(f"PRAGMA user_version = {version:d}")
    conn.close()
    with pytest.raises(StoreError, match=pattern):
        await SqliteStore.open(path)


async def test_postgres_version_3_schema_migrates_and_leases(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """A schema at version 3 (before leases) gains the lease table; its data stays."""
    from agentloopsql._pg_schema import SCHEMA_VERSION

    async with open_kit(Backend("postgres", postgres_dsn), tmp_path, pool_size=1) as kit:
        await kit.store.update_data("s", "[1]")
        await kit.store.aclose()
        undo_lifecycle_pg(postgres_dsn, kit.schema)
        kit.raw("DROP TABLE {s}.leases")
        kit.raw("DROP TABLE IF EXISTS {s}.revision_floors")  # a later version's table
        kit.raw("UPDATE {s}.schema_version SET version = 3")
        async with kit.second_handle() as store:
            assert (await store.get("s")).data == "[1]"
            lease = await lease_of(store, "a")
            await store.fenced(lease).update_data("s", "[2]")
        assert kit.raw("SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]
        assert kit.raw("SELECT owner, token FROM {s}.leases") == [("a", 1)]


async def test_postgres_foreign_lease_table_refused(tmp_path: Path, postgres_dsn: str) -> None:
    """A version-3 schema that already has a `leases` table is refused unchanged."""
    async with open_kit(Backend("postgres", postgres_dsn), tmp_path, pool_size=1) as kit:
        await kit.store.aclose()
        kit.raw("DROP TABLE {s}.leases")
        kit.raw("DROP TABLE IF EXISTS {s}.revision_floors")
        kit.raw("CREATE TABLE {s}.leases (theirs text)")
        kit.raw("UPDATE {s}.schema_version SET version = 3")
        with pytest.raises(StoreError, match=r"is version 3 but already has 'leases'"):
            async with kit.second_handle():
                pass
        assert kit.raw("SELECT version FROM {s}.schema_version") == [(3,)]
