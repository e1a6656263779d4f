"""PostgresStore: schemas, migration, NUL and jsonb storage, connection loss, cancellation."""

from __future__ import annotations

import datetime
import secrets
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from _sql_support import (
    drop_schema,
    expect_queued_append_cancelled,
    fresh_schema,
    new_schema_name,
    occupy_worker,
    pg_dsn,
    undo_lifecycle_pg,
)

from agentloop import (
    FinalizeSummary,
    RunStep,
    Session,
    SessionStore,
    StepStore,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    SupportsAclose,
    SupportsAll,
    SupportsDeleteSession,
    SupportsFinal,
    SupportsListSessions,
    SupportsPut,
)
from agentloopsql import PostgresStore
from agentloopsql._workers import IdempotentWrite, KeyedWrite


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[PostgresStore]:
    async with fresh_schema(dsn) as schema:
        pg = await PostgresStore.open(dsn, schema=schema, pool_size=2)
        try:
            yield pg
        finally:
            await pg.aclose()


def raw(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def step(session: str, index: int, content: str = "") -> RunStep:
    return RunStep(session, index, "tool_result", content=content)


class TestOpen:
    async def test_implements_every_protocol(self, store: PostgresStore) -> None:
        """One object is a StepStore, a SessionStore and has every optional capability."""
        for protocol in (
            StepStore,
            SessionStore,
            SupportsPut,
            SupportsFinal,
            SupportsAll,
            SupportsListSessions,
            SupportsDeleteSession,
            SupportsAclose,
        ):
            assert isinstance(store, protocol)

    @pytest.mark.parametrize(
        "schema",
        ["Public", "a-b", "x; DROP SCHEMA public", "", "1abc", "a" * 64, 'q"uote', "pg_x"],
    )
    async def test_bad_schema_names_refused(self, dsn: str, schema: str) -> None:
        """Names outside [a-z_][a-z0-9_]{0,62}, or reserved pg_*, are refused before connecting."""
        with pytest.raises(ValueError, match=r"^schema must (be|not start with 'pg_')"):
            await PostgresStore.open(dsn, schema=schema)

    async def test_bad_arguments(self, dsn: str) -> None:
        """Bad dsn/pool arguments raise TypeError/ValueError naming the argument."""
        with pytest.raises(TypeError, match=r"^dsn must be"):
            await PostgresStore.open(b"postgresql://x")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^pool_size must be"):
            await PostgresStore.open(dsn, pool_size=0)
        for bad in (0, -1, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=r"^pool_timeout must be a finite number"):
                await PostgresStore.open(dsn, pool_timeout=bad)
        with pytest.raises(TypeError, match=r"^schema must be"):
            await PostgresStore.open(dsn, schema=5)  # type: ignore[arg-type]

    async def test_unreachable_server(self) -> None:
        """A server that cannot be reached surfaces as StoreUnavailableError."""
        with pytest.raises(StoreUnavailableError):
            await PostgresStore.open(
                "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1", pool_timeout=0.5
            )

    async def test_cancelled_open_returns_promptly(self) -> None:
        """Cancelling an open that is still connecting raises Cancelled at once, no pool left."""
        with socket.create_server(("127.0.0.1", 0)) as sock:  # accepts (backlog), never answers
            port = sock.getsockname()[1]
            before = {t for t in threading.enumerate() if t.name.startswith("agentloopsql")}
            started = time.monotonic()
            with trio.move_on_after(0.5) as scope:
                await PostgresStore.open(
                    f"postgresql://nobody@127.0.0.1:{port}/none", pool_timeout=30
                )
            assert scope.cancelled_caught
            assert time.monotonic() - started < 1.5
            after = {t for t in threading.enumerate() if t.name.startswith("agentloopsql")}
            assert not {t for t in after - before if t.is_alive()}

    async def test_without_psycopg(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without psycopg installed, open fails with one line naming the extra."""
        monkeypatch.setitem(sys.modules, "psycopg", None)
        with pytest.raises(
            ImportError, match=r"^PostgresStore needs psycopg .*agentloop-seam\[postgres\]"
        ):
            await PostgresStore.open("postgresql://x")

    async def test_schemas_isolate(self, dsn: str) -> None:
        """Two stores in two schemas of one database never see each other's rows."""
        async with (
            fresh_schema(dsn) as one,
            fresh_schema(dsn) as two,
            await PostgresStore.open(dsn, schema=one, pool_size=1) as a,
            await PostgresStore.open(dsn, schema=two, pool_size=1) as b,
        ):
            await a.append(step("s", 0))
            await a.put(Session("s", model="a"))
            assert await b.all("s") == []
            assert not await b.exists("s")
            assert await b.list_sessions() == []
            assert a.schema == one
            assert b.schema == two

    async def test_default_schema_is_current_schema(self, dsn: str) -> None:
        """schema=None puts the tables in the connection's current schema."""
        async with fresh_schema(dsn) as schema:
            raw(dsn, f'CREATE SCHEMA "{schema}"')
            sep = "&" if "?" in dsn else "?"
            scoped = f"{dsn}{sep}options=-csearch_path%3D{schema}"
            async with await PostgresStore.open(scoped, pool_size=1) as pg:
                assert pg.schema == schema
                await pg.append(step("s", 0))
            rows = raw(dsn, f'SELECT count(*) FROM "{schema}".steps')
            assert rows == [(1,)]

    async def test_concurrent_first_opens(self, dsn: str) -> None:
        """Six stores creating one new schema at once all succeed (advisory lock)."""
        async with fresh_schema(dsn) as schema:
            stores: list[PostgresStore] = []

            async def open_one() -> None:
                stores.append(await PostgresStore.open(dsn, schema=schema, pool_size=1))

            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(open_one)
            for pg in stores:
                await pg.aclose()
            from agentloopsql._pg_schema import SCHEMA_VERSION

            version = raw(dsn, f'SELECT version FROM "{schema}".schema_version')
            assert version == [(SCHEMA_VERSION,)]

    async def test_version_1_schema_is_migrated(self, dsn: str) -> None:
        """A schema left at version 1 gains finalize_keys, seeded with each session's final_key."""
        from agentloopsql._pg_schema import SCHEMA_VERSION

        async with fresh_schema(dsn) as schema:
            async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg:
                await pg.finalize("s", FinalizeSummary("completed", step_count=2))
            key = raw(dsn, f'SELECT final_key FROM "{schema}".sessions')[0][0]
            undo_lifecycle_pg(dsn, schema)
            raw(dsn, f'DROP TABLE "{schema}".finalize_keys')
            raw(dsn, f'DROP INDEX "{schema}".steps_append_once')
            raw(dsn, f'DROP TABLE "{schema}".leases')
            raw(dsn, f'DROP TABLE "{schema}".revision_floors')
            raw(dsn, f'UPDATE "{schema}".schema_version SET version = 1')
            async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg:
                version = raw(dsn, f'SELECT version FROM "{schema}".schema_version')
                assert version == [(SCHEMA_VERSION,)]
                assert raw(dsn, f'SELECT session_id, key FROM "{schema}".finalize_keys') == [
                    ("s", key)
                ]
                await pg.finalize("s", FinalizeSummary("error", step_count=1))
                [info] = await pg.list_sessions()
                assert (info.id, info.step_count) == ("s", 3)

    async def test_newer_schema_refused(self, dsn: str) -> None:
        """A schema migrated by a newer agentloopsql is refused with StoreError."""
        async with fresh_schema(dsn) as schema:
            await (await PostgresStore.open(dsn, schema=schema, pool_size=1)).aclose()
            raw(dsn, f'UPDATE "{schema}".schema_version SET version = 99')
            with pytest.raises(StoreError, match=r"newer than this agentloopsql supports"):
                await PostgresStore.open(dsn, schema=schema, pool_size=1)

    async def test_dml_only_role_opens_a_migrated_schema(self, dsn: str) -> None:
        """A role with USAGE and DML on a migrated schema (no CREATE anywhere) opens and works."""
        import psycopg

        role = f"agentloop_r_{secrets.token_hex(5)}"
        async with fresh_schema(dsn) as schema:
            await (await PostgresStore.open(dsn, schema=schema, pool_size=1)).aclose()
            raw(dsn, f"CREATE ROLE {role} LOGIN")
            try:
                raw(dsn, f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
                raw(
                    dsn,
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES "
                    f'IN SCHEMA "{schema}" TO {role}',
                )
                raw(
                    dsn,
                    f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA "{schema}" TO {role}',
                )
                assert raw(
                    dsn, "SELECT has_database_privilege(%s, current_database(), 'CREATE')", role
                ) == [(False,)]
                role_dsn = psycopg.conninfo.make_conninfo(dsn, user=role)
                async with await PostgresStore.open(role_dsn, schema=schema, pool_size=1) as pg:
                    await pg.append(step("s", 0, "hi"))
                    await pg.update_data("s", '{"a": 1}')
                    await pg.finalize("s", FinalizeSummary("completed"))
                    assert [x.content for x in await pg.last_n("s", 5)] == ["hi"]
                    assert [i.id for i in await pg.list_sessions()] == ["s"]
                    assert await pg.delete_session("s")
            finally:
                raw(dsn, f"DROP OWNED BY {role}")
                raw(dsn, f"DROP ROLE {role}")


class TestStorage:
    async def test_nul_content_uses_bytea_twin(self, store: PostgresStore, dsn: str) -> None:
        """Text with NUL goes to the bytea column; other text stays queryable TEXT."""
        await store.append(step("s", 0, "plain"))
        await store.append(step("s", 1, "with\x00nul"))
        rows = raw(dsn, f'SELECT content, content_nul FROM "{store.schema}".steps ORDER BY seq')
        assert rows == [("plain", None), (None, b"with\x00nul")]
        assert [s.content for s in await store.all("s")] == ["plain", "with\x00nul"]

    async def test_json_columns_are_jsonb(self, store: PostgresStore, dsn: str) -> None:
        """tool_args and data are jsonb, queryable with JSON operators."""
        await store.append(RunStep("s", 0, "summary", tool_args='{"retain_from_step": 4}'))
        await store.update_data("s", '{"k": [1, 2]}')
        q = f"SELECT (tool_args->>'retain_from_step')::int FROM \"{store.schema}\".steps"
        assert raw(dsn, q) == [(4,)]
        q = f"SELECT data->'k'->>1 FROM \"{store.schema}\".sessions"
        assert raw(dsn, q) == [("2",)]

    async def test_last_n_uses_the_index(self, store: PostgresStore, dsn: str) -> None:
        """last_n's plan walks the (session_id, seq) index backwards."""
        plan = raw(
            dsn,
            f"EXPLAIN SELECT seq FROM \"{store.schema}\".steps WHERE session_id = 'x' "
            "ORDER BY seq DESC LIMIT 5",
        )
        assert "steps_by_session" in "\n".join(line for (line,) in plan)

    async def test_closed_store_raises(self, dsn: str) -> None:
        """After aclose every call raises StoreClosedError; aclose is idempotent."""
        async with fresh_schema(dsn) as schema:
            pg = await PostgresStore.open(dsn, schema=schema, pool_size=1)
            await pg.aclose()
            await pg.aclose()
            with pytest.raises(StoreClosedError):
                await pg.append(step("s", 0))
            with pytest.raises(StoreClosedError):
                await pg.list_sessions()


def _backends(dsn: str, app: str) -> list[int]:
    rows = raw(dsn, "SELECT pid FROM pg_stat_activity WHERE application_name = %s", app)
    return [pid for (pid,) in rows]


class TestConnectionLoss:
    @pytest.fixture
    async def app_store(self, dsn: str) -> AsyncIterator[tuple[PostgresStore, str]]:
        app = new_schema_name()
        sep = "&" if "?" in dsn else "?"
        async with fresh_schema(dsn) as schema:
            pg = await PostgresStore.open(
                f"{dsn}{sep}application_name={app}", schema=schema, pool_size=3
            )
            try:
                yield pg, app
            finally:
                await pg.aclose()

    async def test_terminated_connections_are_retried(
        self, app_store: tuple[PostgresStore, str], dsn: str
    ) -> None:
        """After pg_terminate_backend kills every pooled connection, calls still succeed."""
        pg, app = app_store
        for round_ in range(3):
            await pg.append(step("s", round_))
            pids = _backends(dsn, app)
            assert pids
            for pid in pids:
                raw(dsn, "SELECT pg_terminate_backend(%s)", pid)
            await pg.update_data("s", f"[{round_}]")
        assert [s.step_index for s in await pg.all("s")] == [0, 1, 2]
        assert (await pg.get("s")).data == "[2]"

    async def test_lost_commit_is_not_repeated(self, app_store: tuple[PostgresStore, str]) -> None:
        """An append that committed just before its connection died is not stored twice."""
        pg, _ = app_store
        ops = pg._ops
        the_step = step("s", 0, "once")

        def append_then_die(conn: Any) -> None:
            ops.append(conn, the_step, 42)
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

        await pg._workers.call(
            KeyedWrite(append_then_die, lambda conn: ops.append_landed(conn, "s", 42))
        )
        assert [s.content for s in await pg.all("s")] == ["once"]

    async def test_lost_finalize_retry_counts_once(
        self, app_store: tuple[PostgresStore, str], dsn: str
    ) -> None:
        """A finalize that committed, was overtaken by another finalize, then lost its
        connection is not applied again: step counts add up once, the later finalize wins."""
        import psycopg

        pg, _ = app_store
        ops = pg._ops
        attempts: list[int] = []

        def finalize_overtaken_then_die(conn: Any) -> None:
            attempts.append(1)
            ops.finalize(conn, "s", FinalizeSummary("completed", step_count=5), 42)
            if len(attempts) > 1:
                return
            with psycopg.connect(dsn, autocommit=True) as other:
                ops.finalize(other, "s", FinalizeSummary("error", step_count=1), 43)
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

        await pg._workers.call(
            KeyedWrite(finalize_overtaken_then_die, lambda conn: ops.finalize_landed(conn, "s", 42))
        )
        [info] = await pg.list_sessions()
        assert info.step_count == 6
        final = await pg.final("s")
        assert final is not None
        assert final.status.value == "error"

    async def test_repeated_finalize_key_is_applied_once(self, store: PostgresStore) -> None:
        """Running one finalize statement twice with its key (a blind retry) counts once."""
        ops = store._ops

        def twice(conn: Any) -> None:
            for _ in range(2):
                ops.finalize(conn, "s", FinalizeSummary("completed", step_count=4), 7)

        await store._workers.call(IdempotentWrite(twice))
        [info] = await store.list_sessions()
        assert info.step_count == 4
        assert await store.delete_session("s")
        assert await store.list_sessions() == []

    async def test_lost_twice_surfaces(self, app_store: tuple[PostgresStore, str]) -> None:
        """A call whose connection dies on the retry too raises StoreUnavailableError."""
        pg, _ = app_store

        def die(conn: Any) -> None:
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

        with pytest.raises(
            StoreUnavailableError, match=r"^PostgreSQL connection lost twice"
        ) as info:
            await pg._workers.call(IdempotentWrite(die))
        assert info.value.__cause__ is not None
        with pytest.raises(StoreUnavailableError, match=r"lost twice; nothing was written"):
            await pg._workers.call(KeyedWrite(die, lambda conn: False))
        await pg.append(step("s", 0))  # and the store is still usable
        assert len(await pg.all("s")) == 1

    async def test_concurrent_appends_batch_in_order(self, store: PostgresStore) -> None:
        """16 tasks x 30 appends to one session: all land, each task's steps in its order."""

        async def writer(task: int) -> None:
            for i in range(30):
                await store.append(step("shared", i, f"{task}"))

        async with trio.open_nursery() as nursery:
            for task in range(16):
                nursery.start_soon(writer, task)
        steps = await store.all("shared")
        assert len(steps) == 480
        for task in range(16):
            assert [s.step_index for s in steps if s.content == f"{task}"] == list(range(30))


class TestCancellation:
    async def test_every_method_is_a_checkpoint(self, store: PostgresStore) -> None:
        """Each public method yields to trio (trio's checkpoint convention)."""
        calls = [
            lambda: store.append(step("s", 0)),
            lambda: store.last_n("s", 1),
            lambda: store.all("s"),
            lambda: store.get("s"),
            lambda: store.exists("s"),
            lambda: store.update_data("s", "{}"),
            lambda: store.finalize("s", FinalizeSummary("completed")),
            lambda: store.put(Session("s")),
            lambda: store.final("s"),
            lambda: store.list_sessions(),
            lambda: store.delete_session("s"),
        ]
        for call in calls:
            with trio.testing.assert_checkpoints():
                await call()

    async def test_cancelled_while_queued_does_nothing(self, dsn: str) -> None:
        """An append cancelled while queued behind a busy worker raises Cancelled, never happens."""
        async with (
            fresh_schema(dsn) as schema,
            await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg,
        ):
            await expect_queued_append_cancelled(pg)

    async def test_close_finishes_queued_calls(self, dsn: str) -> None:
        """Appends still queued (the worker busy) when aclose starts run and commit."""
        async with fresh_schema(dsn) as schema:
            pg = await PostgresStore.open(dsn, schema=schema, pool_size=1)
            gate = threading.Event()
            async with trio.open_nursery() as nursery:
                await occupy_worker(pg, nursery, gate)
                for i in range(20):
                    nursery.start_soon(pg.append, step("s", i))
                await trio.testing.wait_all_tasks_blocked()
                assert len(pg._workers._queue) == 20
                nursery.start_soon(pg.aclose)
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
            async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as again:
                assert len(await again.all("s")) == 20

    async def test_cancelled_after_commit_completes(self, store: PostgresStore) -> None:
        """A call whose statement committed before its caller was cancelled returns normally."""
        started = threading.Event()
        gate = threading.Event()
        ops = store._ops

        def append_then_wait(conn: Any) -> str:
            ops.append(conn, step("s", 3), 1)
            started.set()
            gate.wait()  # the window between the commit and the answer
            return "done"

        results: list[str] = []
        scope = trio.CancelScope()

        async def call() -> None:
            with scope:
                results.append(await store._workers.call(IdempotentWrite(append_then_wait)))
                await trio.lowlevel.checkpoint()
                results.append("not cancelled")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.to_thread.run_sync(started.wait)
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0.5)  # let cancel requests reach the idle connection
            gate.set()
        assert results == ["done"]
        assert [s.step_index for s in await store.all("s")] == [3]

    async def test_statement_timeout_ends_a_blocked_call(self, dsn: str) -> None:
        """With statement_timeout, a call blocked on a lock fails with StoreUnavailableError,
        writes nothing, and aclose does not wait on the lock."""
        import psycopg

        with pytest.raises(ValueError, match=r"^statement_timeout must be a finite number"):
            await PostgresStore.open(dsn, statement_timeout=float("inf"))
        with pytest.raises(TypeError, match=r"^statement_timeout must be a number"):
            await PostgresStore.open(dsn, statement_timeout="1")  # type: ignore[arg-type]
        async with fresh_schema(dsn) as schema:
            pg = await PostgresStore.open(dsn, schema=schema, pool_size=1, statement_timeout=0.3)
            await pg.update_data("x", '"before"')
            locker = psycopg.connect(dsn)
            release = threading.Timer(10, locker.rollback)
            try:
                locker.execute(
                    f'SELECT 1 FROM "{schema}".sessions WHERE id = %s FOR UPDATE', ("x",)
                )
                release.start()
                started = time.monotonic()
                with pytest.raises(StoreUnavailableError, match=r"statement_timeout"):
                    await pg.update_data("x", '"during"')
                assert time.monotonic() - started < 5
                locker.rollback()
                assert (await pg.get("x")).data == '"before"'
            finally:
                release.cancel()
                locker.close()
                await pg.aclose()

    @pytest.mark.parametrize("cancelled", [3, 2])
    async def test_blocked_batch_is_cancelled_only_with_all_its_callers(
        self, dsn: str, cancelled: int
    ) -> None:
        """A blocked batched append is cancelled on the server only once all its callers are."""
        import psycopg

        async with (
            fresh_schema(dsn) as schema,
            await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg,
        ):
            await pg.append(step("s", 0))
            locker = psycopg.connect(dsn)
            release = threading.Timer(10, locker.rollback)
            scopes = [trio.CancelScope() for _ in range(3)]
            returned: list[int] = []

            async def call(index: int) -> None:
                with scopes[index - 1]:
                    await pg.append(step("s", index))
                    returned.append(index)

            try:
                locker.execute(f'LOCK TABLE "{schema}".steps IN EXCLUSIVE MODE')
                release.start()
                gate = threading.Event()
                async with trio.open_nursery() as nursery:
                    await occupy_worker(pg, nursery, gate)
                    for index in (1, 2, 3):
                        nursery.start_soon(call, index)
                    await trio.testing.wait_all_tasks_blocked()
                    gate.set()
                    await trio.sleep(0.3)  # the batch is now waiting for the lock
                    for scope in scopes[:cancelled]:
                        scope.cancel()
                    if cancelled < 3:
                        await trio.sleep(0.5)
                        locker.rollback()
            finally:
                release.cancel()
                locker.close()
            stored = [s.step_index for s in await pg.all("s")]
            if cancelled == 3:
                assert all(scope.cancelled_caught for scope in scopes)
                assert returned == []
                assert stored == [0]
            else:
                assert sorted(returned) == [1, 2, 3]
                assert sorted(stored) == [0, 1, 2, 3]

    async def test_cancelled_while_blocked_on_a_row_lock(
        self, store: PostgresStore, dsn: str
    ) -> None:
        """A statement blocked by another connection's lock is cancelled on the server:
        the caller gets Cancelled promptly, nothing was written, the store stays usable."""
        import psycopg

        await store.update_data("x", '"before"')
        locker = psycopg.connect(dsn)
        release = threading.Timer(10, locker.rollback)  # without the fix: fail, don't hang
        try:
            locker.execute(
                f'SELECT 1 FROM "{store.schema}".sessions WHERE id = %s FOR UPDATE', ("x",)
            )
            release.start()
            started = time.monotonic()
            with trio.move_on_after(0.5) as scope:
                await store.update_data("x", '"during"')
            elapsed = time.monotonic() - started
            assert scope.cancelled_caught
            assert elapsed < 5
            locker.rollback()
            assert (await store.get("x")).data == '"before"'
            await store.update_data("x", '"after"')
            assert (await store.get("x")).data == '"after"'
        finally:
            release.cancel()
            locker.close()


def test_drop_schema_helper_is_idempotent() -> None:
    """Dropping a schema that does not exist is harmless (cleanup never fails a run)."""
    drop_schema(pg_dsn(), new_schema_name())


async def test_rows_read_on_a_connection_in_another_time_zone_come_back_in_utc(
    store: PostgresStore, dsn: str
) -> None:
    """The store's own connections read in UTC; a connection set to another zone (no
    reused cursor there) gets the same steps and sessions, times converted to UTC."""
    import psycopg

    await store.append_many([step("tz", i, f"c{i}") for i in range(3)])
    await store.put(Session("tz", model="m", system_prompt="p\x00q", data='{"a": 1}'))
    expected = await store.last_n("tz", 3)
    ops = store._ops
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'Asia/Kathmandu'")
        steps = await trio.to_thread.run_sync(ops.last_n, conn, "tz", 3)
        session = await trio.to_thread.run_sync(ops.get, conn, "tz")
        listed = await trio.to_thread.run_sync(ops.list_sessions, conn, 5)
    assert steps == expected
    assert all(s.created_at.utcoffset() == datetime.timedelta(0) for s in steps)
    assert session == Session("tz", model="m", system_prompt="p\x00q", data='{"a": 1}')
    assert [info.id for info in listed] == ["tz"]
    assert listed[0].updated_at.utcoffset() == datetime.timedelta(0)


async def test_get_many_keeps_every_id_exactly(store: PostgresStore) -> None:
    """The ids travel to the server as one JSON array: quotes, backslashes, escapes,
    non-ASCII (astral too), look-alike Unicode forms and a 1,024-byte id each come
    back as exactly the session asked for, in order, duplicates too."""
    ids = [
        'a"b',
        "back\\slash",
        "\\u0041",
        "tab\tnew\nline",
        "é",
        "e\u0301",
        "😀 emoji",
        "x" * 1024,
        "[1]",
    ]
    for i, sid in enumerate(ids):
        await store.put(Session(sid, model=f"m{i}", data=f'{{"i": {i}}}'))
    asked = [*ids, ids[0], "never-written"]
    got = await store.get_many(asked)
    assert [s.id for s in got] == asked
    assert [s.model for s in got] == [*(f"m{i}" for i in range(len(ids))), "m0", ""]
    assert got[-1] == Session("never-written")
