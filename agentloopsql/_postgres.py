"""``PostgresStore``: both protocols over a PostgreSQL schema, via a psycopg pool.

**How ``open`` connects.** One connection is made first, directly (not by the
pool's threads), bounded by libpq's ``connect_timeout`` (2 s unless the DSN or
``PGCONNECT_TIMEOUT`` sets one), so a server that refuses, is missing, rejects
the login or never answers is reported at once, with the server's own
message, and no pool thread or socket is ever started for it. That connection
checks and migrates the schema and is closed; only then is the pool filled.

psycopg is imported lazily: ``import agentloopsql`` works without it, and
``PostgresStore.open`` then names the extra to install.
"""

from __future__ import annotations

import os
import threading
import traceback
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from agentloop import StoreError, StoreUnavailableError
from agentloop._shared import check_seconds, preview
from agentloopsql._store import SqlStore
from agentloopsql._workers import Workers, to_thread_shielded

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    from agentloopsql._pg_ops import PgOps

    Conn = psycopg.Connection[Any]

_MISSING = "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'agentloop-seam[postgres]'"

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


def _import_driver() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise ImportError(_MISSING) from None


class PostgresStore(SqlStore["Conn"]):
    """A durable, shared ``StepStore`` and ``SessionStore`` in one PostgreSQL schema.

    Open with ``await PostgresStore.open(dsn)``. Implements both protocols and
    every optional capability (``put``, ``final``, ``all``, ``list_sessions``,
    ``delete_session``, ``aclose``, leases, revisions, and the session
    lifecycle: ``page_sessions``, ``session_info``, ``set_labels``,
    ``prune_steps``, ``steps_after``, ``fork_session``, ``restore_session``,
    ``expire_sessions``); also an async context manager. Many
    processes and machines may share one schema. Use it from trio or asyncio
    (through anyio or directly), in the event loop that opened it or later ones.

    Calls queue to ``pool_size`` worker threads, each borrowing a connection
    from a ``psycopg_pool.ConnectionPool``; more calls wait their turn, for at
    most ``pool_timeout`` (then ``StoreUnavailableError``, nothing done). Every
    operation is one autocommit statement, so it commits whole or not at all;
    appends waiting together become one multi-row ``INSERT`` (one commit for
    all of them, each caller answered after it). A row the server refuses for a
    reason of its own (a constraint, a size limit) fails its own call only, with
    a ``StoreError`` naming the rule; ``StoreUnavailableError`` means retrying
    later may succeed (a lost connection, a timeout, a server going away).

    **Session lifecycle**: session writes are stamped by the server's clock
    (``now()``), which also judges idleness for ``expire_sessions``. Several
    processes may expire at once: each call is one transaction that locks the
    idle sessions it picks ``FOR UPDATE SKIP LOCKED`` (and their lease rows the
    same way), so no session is deleted twice and no call waits for another's
    rows or for a lease. ``set_labels``, ``fork_session`` and
    ``restore_session`` are one transaction each; ``prune_steps`` one
    statement. Space freed by prune and expire is reused by the table once
    (auto)vacuum has run; it goes back to the OS only after ``VACUUM FULL``.

    **Durable when it returns** means PostgreSQL acknowledged the commit: with
    the server's default ``synchronous_commit = on`` its WAL was flushed to
    disk (and to synchronous standbys, if configured). A server running with
    ``synchronous_commit = off`` or ``fsync = off`` weakens this; the store
    cannot strengthen it.

    **Connection loss** (a server restart, ``pg_terminate_backend``, a network
    drop): the pool's idle connections are checked and the call is retried
    once on a fresh connection. ``append`` and ``finalize`` first look, by
    their random key, whether the lost attempt committed, so neither is ever
    applied twice. If the retry fails too, the call raises
    ``StoreUnavailableError``; an ``append`` or ``finalize`` is then "outcome
    unknown" only if the connection was lost a third time while checking (a
    retried ``delete_session`` may report ``False`` for what the lost attempt
    deleted). Nothing is lost silently.

    **Cancellation handling** (the rule is ``SqlStore``'s): once a
    worker has taken a call, the server is asked to cancel its statement
    (for batched appends, only once every caller in the batch is cancelled).
    A statement the server cancelled rolled back, so the call raises the
    backend's cancellation; one that had already committed returns normally. A
    call being retried after a lost connection is not cancelled on the server
    (its first attempt's outcome is still being settled). After a cancel
    request that connection is closed, never reused.
    """

    def __init__(
        self, pool: psycopg_pool.ConnectionPool[Any], ops: PgOps, schema: str, size: int
    ) -> None:
        """Use :meth:`open`."""
        from agentloopsql._pg_exec import PgExecutor, waited_error

        expired = (pool.timeout, lambda waited: waited_error(waited, pool.timeout))
        workers: Workers[Conn] = Workers(
            PgExecutor(pool, ops), size, "PostgresStore", queue_timeout=expired
        )
        super().__init__(workers, ops)
        self._pool = pool
        self._schema = schema

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        pool_timeout: float = 30.0,
        statement_timeout: float | None = None,
    ) -> PostgresStore:
        """Connect to ``dsn``, then create or migrate the store's tables in ``schema``.

        ``schema`` (``[a-z_][a-z0-9_]*``, at most 63 characters) isolates
        this store's tables, so several apps or test runs can share one
        database; ``None`` uses the connection's current schema (usually
        ``public``). ``pool_size`` connections are opened; ``pool_timeout`` is how
        long, in seconds, a call waits for a worker and a connection before giving up.
        ``statement_timeout`` (seconds, ``None`` for the server's setting) makes
        the server cancel any of the store's statements that runs longer, for
        example one waiting on another connection's lock; that call then
        raises ``StoreUnavailableError`` and its statement rolled back. It
        bounds how long a call, and so ``aclose``, can wait on the server.

        One connection is made first, directly, bounded by libpq's
        ``connect_timeout`` (2 s per server address unless the DSN or
        ``PGCONNECT_TIMEOUT`` sets it; it also bounds the pool's connections):
        a refused, unknown, silent or refusing server fails the open within that
        bound, naming the reason. It checks the schema read-only, then migrates it.

        Raises:
            ImportError: psycopg is not installed (``pip install 'agentloop-seam[postgres]'``).
            TypeError, ValueError: a bad ``dsn``, ``schema`` (or a PostgreSQL system
                schema), ``pool_size``, ``pool_timeout`` or ``statement_timeout``.
            StoreError: a refusal retrying cannot fix: a missing database or role,
                failed authentication, a schema that is newer, damaged (garbage
                ``schema_version``) or holds tables of the store's names in another
                shape (left untouched), a current schema that cannot hold a store,
                or a migration the server refused (e.g. no ``CREATE`` privilege).
                The driver's exception is the ``__cause__``.
            StoreUnavailableError: the server could not be reached, did not answer
                within ``connect_timeout``, had no free connection ("too many
                clients"), or the pool did not fill within ``pool_timeout``;
                ``cause`` is the driver's exception.

        **Cancellation handling**: while connecting, a cancelled open raises
        the backend's cancellation promptly (the abandoned connection attempt ends within
        ``connect_timeout`` and closes what it opened); while the pool fills, it
        closes the pool first. Once the migration has started it runs to its end
        (it commits or rolls back whole) before the cancellation is delivered.
        """
        _import_driver()
        timeout, statement_ms = _checked_options(
            dsn, schema, pool_size, pool_timeout, statement_timeout
        )
        kwargs = connection_kwargs(dsn)
        name, ops = await first_connection(dsn, kwargs, schema, statement_ms)
        pool = new_pool(dsn, kwargs, pool_size, timeout, statement_ms)
        await _fill_or_close(pool, dsn, kwargs, pool_size, timeout)
        return cls(pool, ops, name, pool_size)

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    async def aclose(self) -> None:
        """Wait for calls under way, then close every connection; idempotent.

        Later calls raise ``StoreClosedError``.

        **Cancellation handling**: shielded; once called, the store ends closed.
        """
        self._closed = True
        await self._workers.close()  # every call under way finishes first
        await to_thread_shielded(self._pool.close)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<PostgresStore schema={self._schema!r} ({state})>"


def _checked_options(
    dsn: object,
    schema: object,
    pool_size: object,
    pool_timeout: object,
    statement_timeout: object,
) -> tuple[float, int | None]:
    """Check ``open``'s arguments; return the pool timeout and the statement timeout in ms."""
    from agentloopsql._pg_schema import validate_schema

    if not isinstance(dsn, str):
        raise TypeError(f"dsn must be a str, got {preview(dsn)}")
    if schema is not None:
        validate_schema(schema)
    if not isinstance(pool_size, int) or isinstance(pool_size, bool):
        raise TypeError(f"pool_size must be an int >= 1, got {preview(pool_size)}")
    if pool_size < 1:
        raise ValueError(f"pool_size must be an int >= 1, got {pool_size!r}")
    timeout = check_seconds(pool_timeout, "pool_timeout")
    if statement_timeout is None:
        return timeout, None
    # the server holds int ms, and 0 means "no limit"
    statement = check_seconds(
        statement_timeout, "statement_timeout", minimum=0.001, none_allowed=True
    )
    return timeout, round(statement * 1000)


async def _fill_or_close(
    pool: psycopg_pool.ConnectionPool[Any],
    dsn: str,
    kwargs: dict[str, Any],
    size: int,
    pool_timeout: float,
) -> None:
    """Start the pool, wait ``pool_timeout`` for ``size`` connections; close it on failure."""
    try:
        pool.open(wait=False)  # only starts the pool's connecting threads
        with anyio.move_on_after(pool_timeout) as waiting:
            await fill(pool, dsn, kwargs, size)
        if waiting.cancelled_caught:
            raise StoreUnavailableError(
                f"could not connect to PostgreSQL: {size} connection(s) not ready "
                f"after {pool_timeout} s (pool_timeout)"
            )
    except BaseException:
        await to_thread_shielded(close_pool, pool, kwargs)
        raise


# -- connecting ------------------------------------------------------------------


def connection_kwargs(dsn: str) -> dict[str, Any]:
    """The keyword arguments every connection of the store is made with.

    Raises:
        ValueError: ``dsn`` is not a valid connection string.
    """
    import psycopg

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
        import psycopg

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
    import psycopg

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
    import psycopg_pool

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
    import psycopg

    try:
        psycopg.connect(dsn, **kwargs).close()
    except psycopg.Error as exc:
        raise connect_error(exc) from exc


def close_pool(pool: psycopg_pool.ConnectionPool[Any], kwargs: dict[str, Any]) -> None:
    """Close ``pool``, waiting for its threads (a connecting one ends within its timeout)."""
    limit = kwargs.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    pool.close(timeout=float(limit) + 1.0)
