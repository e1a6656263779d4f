"""The whole conformance contract, every capability and reopen, against both SQL stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _sql_support import pg_dsn

from agentloopsql import testing
from agentlooptest import Harness, SessionStoreContract, StepStoreContract


@pytest.fixture(scope="module")
def sqlite_harness() -> Harness:
    """One harness (one temporary directory, a new file per store) for the module."""
    return testing.sqlite()


@pytest.fixture(scope="module")
def postgres_harness() -> Iterator[Harness]:
    """One harness (a new schema per store) for the module; its schemas dropped at the end."""
    harness = testing.postgres(pg_dsn())
    yield harness
    testing.drop_test_schemas()


class TestSqliteStore(StepStoreContract, SessionStoreContract):
    """Every clause against SqliteStore."""

    @pytest.fixture
    def harness(self, sqlite_harness: Harness) -> Harness:
        """The module's SQLite harness."""
        return sqlite_harness


class TestPostgresStore(StepStoreContract, SessionStoreContract):
    """Every clause against PostgresStore."""

    @pytest.fixture
    def harness(self, postgres_harness: Harness) -> Harness:
        """The module's PostgreSQL harness."""
        return postgres_harness
