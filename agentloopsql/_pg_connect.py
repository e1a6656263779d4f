"""How ``PostgresStore.open`` connects: one direct connection first, then the pool.

The first connection is made directly (not by the pool's threads), bounded by
libpq's ``connect_timeout`` (2 s unless the DSN or ``PGCONNECT_TIMEOUT`` sets
one), so a server that refuses, is missing, rejects the login or never answers
is reported at once, with the server's own message, and no pool thread or
socket is ever started for it. That connection checks and migrates the schema
and is closed; only then is the pool filled. Imported only once psycopg is
known to be installed.
"""

from __future__ import annotations

import os
import threading
import traceback
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import psycopg
import psycopg_pool

from agentloop import StoreError, StoreUnavailableError
from agentloopsql._park import to_thread_shielded

if TYPE_CHECKING:
    from agentloopsql._pg_ops import PgOps

    Conn = psycopg.Connection[Any]

DEFAULT_CONNECT_TIMEOUT = 2  # libpq's smallest: the first connection's bound, in seconds

# Fragments of libpq's and the server's messages for failures retrying cannot fix.
_PERMANENT = (
    "password authentication failed",
    "no password supplied",
    "authentication failed",
    "no pg_hba.conf entry",
    "does not exist",  # database "x" / role "x"
    "permission denied for database",
    "not permitted to log in",
)


def connection_kwargs(dsn: str) -> dict[str, Any]:
    """The keyword arguments every connection of the store is made with.

    Raises:
        ValueError: ``dsn`` is not a valid connection string.
    """
    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"dsn is not a valid PostgreSQL connection string: {exc}") from None
    kwargs: dict[str, Any] = {"autocommit": True}
    if "application_name" not in given and not os.environ.get("PGAPPNAME"):
        kwargs["application_name"] = "agentloopsql"
    if "connect_timeout" not in given and not os.environ.get("PGCONNECT_TIMEOUT"):
        kwargs["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
    return kwargs


def connect_error(exc: psycopg.Error) -> StoreError:
    """The store error for a failed connection: permanent ones (missing database or
    role, a refused login) are ``StoreError``, the rest ``StoreUnavailableError``."""
    # The driver's frames still hold the failed connection's socket; drop them
    # now rather than when the garbage collector next finds the cycle.
    traceback.clear_frames(exc.__traceback__)
    message = f"could not connect to PostgreSQL: {exc}".strip()
    lowered = message.lower()
    if any(fragment in lowered for fragment in _PERMANENT):
        error = StoreError(f"{message} (retrying will not help)")
        error.__cause__ = exc
        return error
    return StoreUnavailableError(message, exc)


def configure(conn: Conn, *, statement_ms: int | None) -> None:
    """Session settings every connection of the store runs with."""
    conn.execute("SET TIME ZONE 'UTC'")
    if statement_ms is not None:
        conn.execute(f"SET statement_timeout = {statement_ms:d}")


async def first_connection(
    dsn: str, kwargs: dict[str, Any], schema: str | None, statement_ms: int | None
) -> tuple[str, PgOps]:
    """Connect once, check and migrate the schema, close.

    Raises:
        StoreError: a permanent refusal, or a foreign, damaged or newer schema.
        StoreUnavailableError: the server could not be reached or failed.

    **Cancellation handling**: while connecting, returns at once (the thread
    finishes within the connect timeout and closes what it opened); once the
    migration has started it runs to its end first.
    """
    attempt = _Attempt()
    try:
        conn = await anyio.to_thread.run_sync(attempt.connect, dsn, kwargs, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        attempt.abandon()
        raise
    return await to_thread_shielded(_prepare, conn, schema, statement_ms)


class _Attempt:
    """One connection attempt a cancelled caller may walk away from."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._conn: Conn | None = None

    def connect(self, dsn: str, kwargs: dict[str, Any]) -> Conn:
        try:
            conn = psycopg.connect(dsn, **kwargs)
        except psycopg.Error as exc:
            raise connect_error(exc) from exc
        with self._lock:
            self._conn = conn
            if self._abandoned:
                conn.close()
        return conn

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            if self._conn is not None:
                self._conn.close()


def _prepare(conn: Conn, schema: str | None, statement_ms: int | None) -> tuple[str, PgOps]:
    """Check and migrate the schema on ``conn``, then close it; runs in a worker thread."""
    from agentloopsql._pg_ops import PgOps
    from agentloopsql._pg_schema import migrate

    try:
        with conn:
            configure(conn, statement_ms=statement_ms)
            name = schema if schema is not None else current_schema(conn)
            migrate(conn, name)
            return name, PgOps(conn, name)
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(
            f"PostgreSQL failed while opening the store: {exc}", exc
        ) from exc
    except psycopg.Error as exc:
        error = StoreError(f"PostgreSQL refused to create or migrate the store's schema: {exc}")
        raise error from exc


def current_schema(conn: Conn) -> str:
    """The connection's current schema, if it may hold a store.

    Raises:
        StoreError: there is none, or it is a system schema or not a valid name.
    """
    from agentloopsql._pg_schema import validate_schema

    row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise StoreError("the connection has no current schema; pass schema=")
    try:
        return validate_schema(row[0])
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"the connection's current schema cannot hold a store ({exc}); pass schema="
        ) from None


def new_pool(
    dsn: str, kwargs: dict[str, Any], size: int, timeout: float, statement_ms: int | None
) -> psycopg_pool.ConnectionPool[Any]:
    """A closed pool of exactly ``size`` connections."""
    return psycopg_pool.ConnectionPool(
        dsn,
        min_size=size,
        max_size=size,
        kwargs=kwargs,
        configure=partial(configure, statement_ms=statement_ms),
        open=False,
        timeout=timeout,
        name="agentloopsql",
    )


async def fill(
    pool: psycopg_pool.ConnectionPool[Any], dsn: str, kwargs: dict[str, Any], size: int
) -> None:
    """Wait, cancellably, until the pool holds ``size`` idle connections.

    Polled from the event loop rather than ``pool.wait()`` in a thread: that call cannot
    be interrupted. When the pool's threads fail to connect, one direct attempt
    finds out why: if it fails too, its error is raised at once.

    Raises:
        StoreError, StoreUnavailableError: as :func:`connect_error`.
    """
    errors = 0
    # The pool's own threads fill it and offer no loop-side wake-up: poll.
    while (stats := pool.get_stats()).get("pool_available", 0) < size:
        if stats.get("connections_errors", 0) > errors:
            errors = stats["connections_errors"]
            await anyio.to_thread.run_sync(partial(_try_connect, dsn, kwargs))
        await anyio.sleep(0.005)


def _try_connect(dsn: str, kwargs: dict[str, Any]) -> None:
    try:
        psycopg.connect(dsn, **kwargs).close()
    except psycopg.Error as exc:
        raise connect_error(exc) from exc


def close_pool(pool: psycopg_pool.ConnectionPool[Any], kwargs: dict[str, Any]) -> None:
    """Close ``pool``, waiting for its threads (a connecting one ends within its timeout)."""
    limit = kwargs.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    pool.close(timeout=float(limit) + 1.0)
