"""``PostgresStore``: both protocols over a PostgreSQL schema, via a psycopg pool.

psycopg is imported lazily: ``import agentloopsql`` works without it, and
``PostgresStore.open`` then names the extra to install.
"""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from agentloop import StoreError, StoreUnavailableError
from agentloop._validate import check_seconds, preview
from agentloopsql._base import SqlStoreBase
from agentloopsql._worker import Workers

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    from agentloopsql._pg_ops import PgOps

    Conn = psycopg.Connection[Any]

_MISSING = "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'agentloop[postgres]'"


def _import_driver() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise ImportError(_MISSING) from None


class PostgresStore(SqlStoreBase["Conn"]):
    """A durable, shared ``StepStore`` and ``SessionStore`` in one PostgreSQL schema.

    Open with ``await PostgresStore.open(dsn)``. Implements both protocols and
    every optional capability (``put``, ``final``, ``all``, ``list_sessions``,
    ``delete_session``, ``aclose``); also an async context manager. Many
    processes and machines may share one schema.

    Calls queue to ``pool_size`` worker threads, each borrowing a connection
    from a ``psycopg_pool.ConnectionPool``; more calls wait their turn. Every
    operation is one autocommit statement, so it commits whole or not at all;
    appends waiting together become one multi-row ``INSERT`` (one commit for
    all of them, each caller answered after it).

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

    **Cancellation handling** (the rule is :class:`SqlStoreBase`'s): once a
    worker has taken a call, the server is asked to cancel its statement
    (for batched appends, only once every caller in the batch is cancelled).
    A statement the server cancelled rolled back, so the call raises
    ``trio.Cancelled``; one that had already committed returns normally. A
    call being retried after a lost connection is not cancelled on the server
    (its first attempt's outcome is still being settled).
    """

    def __init__(
        self, pool: psycopg_pool.ConnectionPool[Any], ops: PgOps, schema: str, size: int
    ) -> None:
        """Use :meth:`open`."""
        from agentloopsql._pg_exec import PgExecutor

        self._pool = pool
        self._ops = ops
        self._schema = schema
        self._workers: Workers[Conn] = Workers(PgExecutor(pool, ops), size, "PostgresStore")
        self._closed = False

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
        long, in seconds, a call waits for a connection before giving up.
        ``statement_timeout`` (seconds, ``None`` for the server's setting) makes
        the server cancel any of the store's statements that runs longer, for
        example one waiting on another connection's lock; that call then
        raises ``StoreUnavailableError`` and its statement rolled back. It
        bounds how long a call, and so ``aclose``, can wait on the server.

        Raises:
            ImportError: psycopg is not installed (``pip install 'agentloop[postgres]'``).
            TypeError, ValueError: a bad ``dsn``, ``schema``, ``pool_size``, ``pool_timeout``
                or ``statement_timeout``.
            StoreError: the schema is newer than this version supports.
            StoreUnavailableError: the server could not be reached or refused the migration.

        **Cancellation handling**: while it waits for connections, a cancelled
        open closes the pool it started and raises ``trio.Cancelled`` promptly
        (without waiting out ``pool_timeout``). Once the migration has started it
        runs to its end (it commits or rolls back whole) before the cancellation
        is delivered.
        """
        _import_driver()
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
        if statement_timeout is not None:  # the server holds int ms, and 0 means "no limit"
            check_seconds(statement_timeout, "statement_timeout", minimum=0.001, none_allowed=True)
        statement_ms = None if statement_timeout is None else round(statement_timeout * 1000)
        pool = _new_pool(dsn, pool_size, timeout, statement_ms)
        try:
            pool.open(wait=False)  # only starts the pool's connecting threads
            with trio.move_on_after(timeout) as waiting:
                await _wait_ready(pool, pool_size)
            if waiting.cancelled_caught:
                raise StoreUnavailableError(
                    f"could not connect to PostgreSQL: {pool_size} connection(s) not ready "
                    f"after {timeout} s (pool_timeout)"
                )
            name, ops = await trio.to_thread.run_sync(_start, pool, schema)
        except BaseException:
            with trio.CancelScope(shield=True):
                # A pool thread stuck connecting is a daemon; don't wait on it long.
                await trio.to_thread.run_sync(partial(pool.close, timeout=1.0))
            raise
        return cls(pool, ops, name, pool_size)

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    async def aclose(self) -> None:
        """Wait for calls under way, then close every pooled connection; idempotent.

        Later calls raise ``StoreClosedError``.

        **Cancellation handling**: shielded; once called, the store ends closed.
        """
        self._closed = True
        await self._workers.close()  # every call under way finishes first
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._pool.close)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<PostgresStore schema={self._schema!r} ({state})>"


def _new_pool(
    dsn: str, size: int, timeout: float, statement_ms: int | None
) -> psycopg_pool.ConnectionPool[Any]:
    import psycopg
    import psycopg_pool

    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"dsn is not a valid PostgreSQL connection string: {exc}") from None
    kwargs: dict[str, Any] = {"autocommit": True}
    if "application_name" not in given and not os.environ.get("PGAPPNAME"):
        kwargs["application_name"] = "agentloopsql"
    return psycopg_pool.ConnectionPool(
        dsn,
        min_size=size,
        max_size=size,
        kwargs=kwargs,
        configure=partial(_configure, statement_ms=statement_ms),
        open=False,
        timeout=timeout,
        name="agentloopsql",
    )


def _configure(conn: Conn, *, statement_ms: int | None) -> None:
    conn.execute("SET TIME ZONE 'UTC'")
    if statement_ms is not None:
        conn.execute(f"SET statement_timeout = {statement_ms:d}")


async def _wait_ready(pool: psycopg_pool.ConnectionPool[Any], size: int) -> None:
    """Wait, cancellably, until the pool holds ``size`` idle connections.

    Polled from trio rather than ``pool.wait()`` in a thread: that call cannot
    be interrupted, so a cancelled open would sit out the whole ``pool_timeout``.
    """
    # The pool's own threads fill it and offer no trio-side wake-up: poll.
    while pool.get_stats().get("pool_available", 0) < size:  # noqa: ASYNC110
        await trio.sleep(0.005)


def _start(pool: psycopg_pool.ConnectionPool[Any], schema: str | None) -> Any:
    """Migrate on one of the open pool's connections; runs in a worker thread."""
    import psycopg
    import psycopg_pool

    from agentloopsql._pg_ops import PgOps
    from agentloopsql._pg_schema import migrate, validate_schema

    try:
        with pool.connection() as conn:
            if schema is None:
                row = conn.execute("SELECT current_schema()").fetchone()
                if row is None or row[0] is None:
                    raise StoreError("the connection has no current schema; pass schema=")
                schema = validate_schema(row[0])
            migrate(conn, schema)
            return schema, PgOps(conn, schema)
    except psycopg_pool.PoolTimeout as exc:
        raise StoreUnavailableError(f"could not connect to PostgreSQL: {exc}", exc) from exc
    except psycopg.Error as exc:
        raise StoreUnavailableError(f"PostgreSQL refused to open the store: {exc}", exc) from exc
