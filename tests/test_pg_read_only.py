"""A read-only PostgreSQL (a standby, a demoted primary: SQLSTATE 25006) is transient."""

from __future__ import annotations

import psycopg
import pytest
from _sql_support import fresh_schema

from agentloop import RunStep, StepType, StoreUnavailableError
from agentloopsql import PostgresStore


def step(index: int) -> RunStep:
    return RunStep(session_id="s", step_index=index, step_type=StepType.user, content="x")


class TestReadOnly:
    async def test_read_only_server_is_unavailable_not_refused(self, postgres_dsn: str) -> None:
        """A write to a read-only session is StoreUnavailableError (retry may succeed), and
        the same write succeeds once the store reaches a writable server."""
        read_only = psycopg.conninfo.make_conninfo(
            postgres_dsn, options="-c default_transaction_read_only=on"
        )
        async with (
            fresh_schema(postgres_dsn) as schema,
            await PostgresStore.open(postgres_dsn, schema=schema) as writable,
        ):
            await writable.append(step(0))
            async with await PostgresStore.open(read_only, schema=schema) as standby:
                assert [s.step_index for s in await standby.last_n("s", 5)] == [0]
                with pytest.raises(
                    StoreUnavailableError,
                    match=r"^PostgreSQL could not run append now: the server is read-only",
                ):
                    await standby.append(step(1))
            await writable.append(step(1))
            assert [s.step_index for s in await writable.last_n("s", 5)] == [0, 1]

    async def test_open_on_read_only_server_is_unavailable(self, postgres_dsn: str) -> None:
        """Opening a new schema on a read-only server is StoreUnavailableError, not a refusal."""
        read_only = psycopg.conninfo.make_conninfo(
            postgres_dsn, options="-c default_transaction_read_only=on"
        )
        async with fresh_schema(postgres_dsn) as schema:
            with pytest.raises(StoreUnavailableError, match=r"^PostgreSQL is read-only now"):
                await PostgresStore.open(read_only, schema=schema)
