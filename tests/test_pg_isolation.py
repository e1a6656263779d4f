"""PostgresStore: a row the server refuses fails its own call only, with an error that says why.

Group commit puts appends from many sessions into one INSERT. When PostgreSQL
refuses one row for a reason of its own (a size limit, a constraint, a
trigger), that call alone fails with ``StoreError`` (never
``StoreUnavailableError``: retrying cannot help) naming the operation and the
rule and quoting at most ~60 characters of the value; every other call of
the batch commits.
"""

from __future__ import annotations

import secrets
import string
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import psycopg.errors
import pytest
import trio
import trio.testing
from _sql_support import fresh_schema, occupy_worker

from agentloop import RunStep, StoreError, StoreUnavailableError
from agentloopsql import PostgresStore
from agentloopsql._pg_exec import classify
from agentloopsql._pg_ops import PgOps

GOOD = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf")


@pytest.fixture
async def pg(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    async with (
        fresh_schema(postgres_dsn) as schema,
        await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1) as store,
    ):
        yield store


def ddl(dsn: str, pg: PostgresStore, statement: str) -> None:
    """Run ``statement`` with ``{s}`` as the store's schema (what a DBA might add)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement.replace("{s}", f'"{pg.schema}"'))


def noise(length: int) -> str:
    """Text that does not compress (so TOAST cannot shrink it under a size limit)."""
    return "".join(secrets.choice(string.ascii_letters) for _ in range(length))


async def append_together(pg: PostgresStore, steps: list[RunStep]) -> dict[str, BaseException]:
    """Append ``steps`` as separate calls that share one group commit; each call's error."""
    gate = threading.Event()
    errors: dict[str, BaseException] = {}

    async def call(step: RunStep) -> None:
        try:
            await pg.append(step)
        except StoreError as exc:
            errors[step.session_id] = exc

    async with trio.open_nursery() as nursery:
        await occupy_worker(pg, nursery, gate)
        try:
            for step in steps:
                nursery.start_soon(call, step)
                await trio.testing.wait_all_tasks_blocked()
            assert len(pg._workers._queue) == len(steps)  # taken as one batch
        finally:
            gate.set()
    return errors


async def assert_good_committed(pg: PostgresStore, sessions: tuple[str, ...]) -> None:
    for session in sessions:
        assert [s.content for s in await pg.all(session)] == [f"{session} ok"], session


def good_steps(sessions: tuple[str, ...]) -> list[RunStep]:
    return [RunStep(s, 0, "user", content=f"{s} ok") for s in sessions]


async def test_index_row_limit_fails_only_its_call(pg: PostgresStore, postgres_dsn: str) -> None:
    """A row over the btree index row limit (an OperationalError subclass in psycopg) fails
    its own append with StoreError naming the limit; the other sessions' appends commit."""
    ddl(postgres_dsn, pg, "CREATE INDEX steps_by_content ON {s}.steps (content)")
    oversize = noise(10_000)
    steps = good_steps(GOOD[:3])
    steps.insert(1, RunStep("oversize", 0, "user", content=oversize))
    errors = await append_together(pg, steps)
    assert list(errors) == ["oversize"]
    error = errors["oversize"]
    assert type(error) is StoreError
    assert isinstance(error.__cause__, psycopg.errors.ProgramLimitExceeded)
    message = str(error)
    assert message.startswith("PostgreSQL refused append: it breaks a PostgreSQL size limit")
    assert "SQLSTATE 54000" in message
    assert "retrying will not help" in message
    assert oversize[:20] not in message
    assert len(message) < 400
    await assert_good_committed(pg, GOOD[:3])
    assert await pg.all("oversize") == []


async def test_check_constraint_names_the_constraint(pg: PostgresStore, postgres_dsn: str) -> None:
    """A CHECK the schema's owner added refuses one row: StoreError naming the constraint."""
    ddl(
        postgres_dsn,
        pg,
        "ALTER TABLE {s}.steps ADD CONSTRAINT content_short CHECK (length(content) < 100)",
    )
    steps = [*good_steps(GOOD[:2]), RunStep("long", 0, "user", content="y" * 5000)]
    errors = await append_together(pg, steps)
    assert list(errors) == ["long"]
    message = str(errors["long"])
    assert type(errors["long"]) is StoreError
    assert message.startswith("PostgreSQL refused append: it breaks a constraint of the schema")
    assert "'content_short'" in message
    assert "SQLSTATE 23514" in message
    assert "y" * 61 not in message  # the failing row (in the server's DETAIL) is not quoted
    await assert_good_committed(pg, GOOD[:2])


async def test_trigger_message_quoting_the_value_is_trimmed(
    pg: PostgresStore, postgres_dsn: str
) -> None:
    """A trigger that refuses a row and quotes all of it: the message keeps ~60 characters."""
    ddl(
        postgres_dsn,
        pg,
        "CREATE FUNCTION {s}.no_z() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.content LIKE 'z%' THEN RAISE EXCEPTION 'refused \"%\"', NEW.content; END IF; "
        "RETURN NEW; END $$",
    )
    ddl(
        postgres_dsn,
        pg,
        "CREATE TRIGGER no_z BEFORE INSERT ON {s}.steps FOR EACH ROW EXECUTE FUNCTION {s}.no_z()",
    )
    value = "z" + noise(9_999)
    steps = [*good_steps(GOOD), RunStep("zed", 0, "user", content=value)]
    errors = await append_together(pg, steps)
    assert list(errors) == ["zed"]
    message = str(errors["zed"])
    assert message.startswith("PostgreSQL refused append: it breaks a rule a database function")
    assert value[:60] in message
    assert value[:61] not in message
    assert "(10000 chars)" in message
    await assert_good_committed(pg, GOOD)


async def test_one_refused_call_costs_few_statements(
    pg: PostgresStore, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding one refused call among 8 halves the batch: fewer INSERTs than one per call."""
    ddl(postgres_dsn, pg, "ALTER TABLE {s}.steps ADD CONSTRAINT no_bad CHECK (content <> 'bad')")
    statements = count_calls(monkeypatch, pg._ops, "append_many", "append")
    steps = good_steps(GOOD)
    steps.insert(5, RunStep("bad", 0, "user", content="bad"))
    errors = await append_together(pg, steps)
    assert list(errors) == ["bad"]
    assert 1 < len(statements) <= 7 < len(steps) + 1  # 1 shared + 2 per halving level
    await assert_good_committed(pg, GOOD)


def count_calls(
    monkeypatch: pytest.MonkeyPatch, ops: Any, *names: str
) -> list[tuple[str, tuple[Any, ...]]]:
    """Record every call of ``ops``'s methods ``names``; the list fills as they run."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    for name in names:
        original: Callable[..., None] = getattr(ops, name)

        def counted(
            *args: Any, _name: str = name, _original: Callable[..., None] = original
        ) -> None:
            calls.append((_name, args))
            _original(*args)

        monkeypatch.setattr(ops, name, counted)
    return calls


class Fenced(StoreError):
    """Stands for a check of the store's own (a lease) refusing one call's row."""


async def test_any_store_error_of_one_row_fails_only_its_call(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A StoreError the store itself raises for one row (as a fenced write's LeaseLostError
    would) reaches that caller unchanged; the other calls of the batch commit."""
    ops: PgOps = pg._ops  # type: ignore[assignment]
    append, append_many = ops.append, ops.append_many

    def refuse(rows: list[tuple[RunStep, int]]) -> None:
        if any(step.session_id == "fenced" for step, _ in rows):
            raise Fenced("fenced out")

    def checked_many(conn: Any, rows: list[tuple[RunStep, int]]) -> None:
        refuse(rows)
        append_many(conn, rows)

    def checked(conn: Any, step: RunStep, key: int) -> None:
        refuse([(step, key)])
        append(conn, step, key)

    monkeypatch.setattr(ops, "append_many", checked_many)
    monkeypatch.setattr(ops, "append", checked)
    steps = good_steps(GOOD[:4])
    steps.insert(2, RunStep("fenced", 0, "user"))
    errors = await append_together(pg, steps)
    assert list(errors) == ["fenced"]
    assert type(errors["fenced"]) is Fenced
    await assert_good_committed(pg, GOOD[:4])


async def test_lock_timeout_is_unavailable(postgres_dsn: str) -> None:
    """A lock wait cut by the server's lock_timeout is StoreUnavailableError (retry later)."""
    sep = "&" if "?" in postgres_dsn else "?"
    dsn = f"{postgres_dsn}{sep}options=-c%20lock_timeout%3D200"
    async with (
        fresh_schema(postgres_dsn) as schema,
        await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg,
    ):
        with psycopg.connect(postgres_dsn) as locker:
            locker.execute(f'LOCK TABLE "{schema}".steps IN SHARE MODE')
            with pytest.raises(StoreUnavailableError, match=r"^PostgreSQL could not run append"):
                await pg.append(RunStep("s", 0, "user"))
            locker.rollback()
        await pg.append(RunStep("s", 0, "user"))
        assert len(await pg.all("s")) == 1


TRANSIENT = [
    psycopg.errors.QueryCanceled,
    psycopg.errors.LockNotAvailable,
    psycopg.errors.AdminShutdown,
    psycopg.errors.CrashShutdown,
    psycopg.errors.CannotConnectNow,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.TooManyConnections,
    psycopg.errors.DiskFull,
    psycopg.OperationalError,  # client side, no SQLSTATE: the connection failed
]
PERMANENT = [
    psycopg.errors.ProgramLimitExceeded,  # an OperationalError subclass
    psycopg.errors.StatementTooComplex,  # an OperationalError subclass
    psycopg.errors.DatabaseDropped,  # an OperationalError subclass
    psycopg.errors.StringDataRightTruncation,
    psycopg.errors.UntranslatableCharacter,
    psycopg.errors.CheckViolation,
    psycopg.errors.UniqueViolation,
    psycopg.errors.InsufficientPrivilege,
    psycopg.errors.UndefinedTable,
    psycopg.errors.FeatureNotSupported,
    psycopg.errors.RaiseException,
    psycopg.errors.InternalError_,
    psycopg.DataError,  # client side, e.g. NUL in text
    psycopg.ProgrammingError,
    psycopg.NotSupportedError,
]


@pytest.mark.parametrize("kind", TRANSIENT, ids=lambda kind: kind.__name__)
def test_transient_errors_are_unavailable(kind: type[psycopg.Error]) -> None:
    """Lost connections, timeouts, shutdowns, conflicts, exhausted resources: retry later."""
    error = classify(kind("went away"), "get")
    assert isinstance(error, StoreUnavailableError)
    assert error.cause is not None
    assert isinstance(error.cause, kind)
    assert str(error).startswith("PostgreSQL could not run get now: ")


@pytest.mark.parametrize("kind", PERMANENT, ids=lambda kind: kind.__name__)
def test_permanent_errors_are_store_errors(kind: type[psycopg.Error]) -> None:
    """Data, constraint, program-limit, privilege and schema errors: StoreError, never
    StoreUnavailableError."""
    error = classify(kind("no"), "put")
    assert type(error) is StoreError
    assert str(error).startswith("PostgreSQL refused put: it breaks ")
    assert str(error).endswith("retrying will not help")
