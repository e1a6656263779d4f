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

import contextlib
import os
import threading
import traceback
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from agentloop import StoreError, StoreUnavailableError
from agentloop._shared import check_seconds, preview
from agentloopsql._store import SqlStore
from agentloopsql._workers import Read, Workers, to_thread_shielded

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    from agentloopsql._pg_exec import PgExecutor, Reconnects
    from agentloopsql._pg_inline import InlineReads
    from agentloopsql._pg_ops import PgOps

    Conn = psycopg.Connection[Any]

R = TypeVar("R")

_MISSING = "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'agentloop-seam[postgres]'"

WAIT_MARGIN = 1.0  # wait_timeout's default past statement_timeout, in seconds
DEFAULT_CONNECT_TIMEOUT = 2  # libpq's smallest: the first connection's bound, in seconds


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
    most ``pool_timeout`` (then ``StoreUnavailableError``, nothing done). Short
    reads (``last_n`` of at most 256 steps, ``get``, ``get_many``,
    ``list_sessions``) run on one more connection of the store's, on the
    event-loop thread, when it is free; otherwise on the workers (see
    ``docs/stores.md``, "PostgreSQL reads on the event loop"). Every
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
    disk (and, if configured, to the synchronous standbys: a write whose wait
    for them was cut short is never reported as a success, see ``open``'s
    ``wait_timeout``). A server running with
    ``synchronous_commit = off`` or ``fsync = off`` weakens this; the store
    cannot strengthen it.

    **Timeouts** (seconds). ``pool_timeout`` is how long a call waits for a
    worker and a connection before giving up (``StoreUnavailableError``,
    nothing done). ``statement_timeout`` (``None`` for the server's setting)
    makes the server cancel any of the store's statements that runs longer,
    for example one waiting on another connection's lock; that call then
    raises ``StoreUnavailableError`` and its statement rolled back. It bounds
    how long a call, and so ``aclose``, can wait on the server, except a
    commit's wait for synchronous standbys, which PostgreSQL exempts from it.
    ``wait_timeout`` (``None`` takes ``statement_timeout`` plus one second; with
    both ``None`` nothing is bounded) is the client's own bound on one
    statement, its commit's wait for synchronous standbys included: past it
    the store asks the server to cancel the statement. Cancelled before its
    commit, it rolled back (``StoreUnavailableError``, nothing done).
    Cancelled while its commit waited for a standby, the server has
    committed it locally only; so has any write whose wait was cut short
    another way (a cancelled caller, an administrator): the store never
    reports such a write as a success but raises ``StoreUnavailableError``
    saying it committed locally and may not be replicated (outcome unknown).
    ``reconnect_interval`` is how often a connection lost after the store
    opened (a restart, a failover) is tried again, each attempt bounded by
    ``connect_timeout``, until the server takes it, refuses the login for
    good, or the store closes; meanwhile calls wait for a connection within
    ``pool_timeout`` as usual. A multi-host DSN with
    ``target_session_attrs=read-write`` makes each attempt look for the
    current primary. See ``docs/postgres-failover.md``.

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
        self,
        pool: psycopg_pool.ConnectionPool[Any],
        ops: PgOps,
        schema: str,
        size: int,
        wait_timeout: float | None,
        reconnects: Reconnects,
        inline: InlineReads,
    ) -> None:
        """Use :meth:`open`."""
        from agentloopsql._pg_exec import PgExecutor, waited_error

        expired = (pool.timeout, lambda waited: waited_error(waited, pool.timeout))
        executor = PgExecutor(pool, ops, wait_timeout, reconnects)
        reconnects.armed.set()
        workers: Workers[Conn] = Workers(executor, size, "PostgresStore", queue_timeout=expired)
        super().__init__(workers, ops)
        self._pool = pool
        self._executor = executor
        self._schema = schema
        self._inline = inline
        self._pg_ops = ops
        release = partial(_close_quietly, pool, executor, inline)
        self._watch_leak(f"PostgresStore schema={schema!r}", release)

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        pool_timeout: float = 30.0,
        statement_timeout: float | None = None,
        wait_timeout: float | None = None,
        reconnect_interval: float = 0.1,
    ) -> PostgresStore:
        """Connect to ``dsn``, then create or migrate the store's tables in ``schema``.

        ``schema`` (``[a-z_][a-z0-9_]*``, at most 63 characters) isolates
        this store's tables, so several apps or test runs can share one
        database; ``None`` uses the connection's current schema (usually
        ``public``). ``pool_size`` connections are opened. The timeouts: see
        the class docstring (**Timeouts**).

        One connection is made first, directly, bounded by libpq's
        ``connect_timeout`` (2 s per server address unless the DSN or
        ``PGCONNECT_TIMEOUT`` sets it; it also bounds the pool's connections):
        a refused, unknown, silent or refusing server fails the open within that
        bound, naming the reason. It checks the schema read-only, then migrates it,
        and stays open for the short reads (``docs/stores.md``).

        Raises:
            ImportError: psycopg is not installed (``pip install 'agentloop-seam[postgres]'``).
            TypeError, ValueError: a bad ``dsn``, ``schema`` (or a PostgreSQL system
                schema), ``pool_size``, ``pool_timeout``, ``statement_timeout``,
                ``wait_timeout`` or ``reconnect_interval``.
            StoreError: a refusal retrying cannot fix: a missing database or role,
                failed authentication, a schema that is newer, damaged (garbage
                ``schema_version``) or holds tables of the store's names in another
                shape (left untouched), a current schema that cannot hold a store,
                or a migration the server refused (e.g. no ``CREATE`` privilege).
                The driver's exception is the ``__cause__``.
            StoreUnavailableError: the server could not be reached, did not answer
                within ``connect_timeout``, was read-only while the schema needed
                creating or migrating (a standby: SQLSTATE 25006), had no free
                connection ("too many clients"), or the pool did not fill within
                ``pool_timeout``;
                ``cause`` is the driver's exception.

        **Cancellation handling**: while connecting, raises the backend's
        cancellation promptly (the abandoned attempt ends within ``connect_timeout``);
        while the pool fills, closes it first; a migration runs to its end first.
        """
        _import_driver()
        timeout, statement_ms = _checked_options(
            dsn, schema, pool_size, pool_timeout, statement_timeout
        )
        wait, every = _checked_timing(statement_ms, wait_timeout, reconnect_interval)
        kwargs = connection_kwargs(dsn)
        name, ops, first = await first_connection(dsn, kwargs, schema, statement_ms)
        inline = inline_reads(first, dsn, kwargs, statement_ms, wait, every)
        timing = (timeout, statement_ms, every)
        reconnects, pool = await filled_pool(dsn, kwargs, pool_size, timing, inline)
        return cls(pool, ops, name, pool_size, wait, reconnects, inline)

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    async def aclose(self) -> None:
        """Wait for calls under way, then close every connection; idempotent.

        Later calls raise ``StoreClosedError``.

        **Cancellation handling**: shielded; once called, the store ends closed.
        """
        self._closing()
        self._inline.close()
        await self._workers.close()  # every call under way finishes first
        self._executor.close()
        await to_thread_shielded(self._pool.close)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<PostgresStore schema={self._schema!r} ({state})>"

    async def _read_short(self, run: Callable[[Conn], R], name: str, args: tuple[Any, ...]) -> R:
        """The read on the inline connection (``agentloopsql._pg_inline``), or on the workers."""
        if not self._closed:
            read = self._pg_ops.short(name, *args)
            rows = await self._inline.rows(read.query, read.params, name)
            if rows is not None:
                return read.build(rows)  # type: ignore[no-any-return]
        return await self._workers.call(Read(run, name=name))

    _read_listing = _read_short  # SqlStore sends only the short ones here


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


def _checked_timing(
    statement_ms: int | None, wait_timeout: object, reconnect_interval: object
) -> tuple[float | None, float]:
    """Check ``open``'s ``wait_timeout`` and ``reconnect_interval``; the bound on one
    statement (``None``: none) and the interval."""
    every = check_seconds(reconnect_interval, "reconnect_interval", minimum=0.001)
    if wait_timeout is not None:
        return check_seconds(wait_timeout, "wait_timeout", minimum=0.001, none_allowed=True), every
    if statement_ms is not None:
        # Later than the server's own bound, which goes first wherever it applies.
        return statement_ms / 1000 + WAIT_MARGIN, every
    return None, every


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
    from agentloopsql._pg_exec import PERMANENT_CONNECT

    lowered = message.lower()
    if any(fragment in lowered for fragment in PERMANENT_CONNECT):
        error = StoreError(f"{message} (retrying will not help)")
        error.__cause__ = exc
        return error
    return StoreUnavailableError(message, exc)


def configure(conn: Conn, *, statement_ms: int | None) -> None:
    """Session settings every connection of the store runs with."""
    conn.execute("SET TIME ZONE 'UTC'")
    if statement_ms is not None:
        conn.execute(f"SET statement_timeout = {statement_ms:d}")


async def filled_pool(
    dsn: str,
    kwargs: dict[str, Any],
    size: int,
    timing: tuple[float, int | None, float],
    inline: InlineReads,
) -> tuple[Reconnects, psycopg_pool.ConnectionPool[Any]]:
    """The store's pool, filled within the pool timeout, and its reconnect timing.

    ``timing`` is the pool timeout, the statement timeout in ms and the reconnect
    interval. If the pool does not fill (or the caller is cancelled), the pool
    and ``inline`` are closed.
    """
    from agentloopsql._pg_exec import Reconnects

    pool_timeout, statement_ms, every = timing
    try:
        reconnects = Reconnects(every)
        pool = new_pool(dsn, kwargs, size, pool_timeout, statement_ms, reconnects)
        await _fill_or_close(pool, dsn, kwargs, size, pool_timeout)
    except BaseException:
        inline.close()
        raise
    return reconnects, pool


def inline_reads(
    first: Conn,
    dsn: str,
    kwargs: dict[str, Any],
    statement_ms: int | None,
    wait: float | None,
    every: float,
) -> InlineReads:
    """The store's inline reads, starting on ``first`` (the connection ``open`` made)."""
    from agentloopsql._pg_inline import InlineReads

    connect = partial(inline_connection, dsn, kwargs, statement_ms)
    return InlineReads(first, connect, wait, every)


def inline_connection(dsn: str, kwargs: dict[str, Any], statement_ms: int | None) -> Conn:
    """A new connection set up as the pool's are, for the inline reads (blocking)."""
    import psycopg

    conn = psycopg.connect(dsn, **kwargs)
    try:
        configure(conn, statement_ms=statement_ms)
    except BaseException:
        conn.close()
        raise
    return conn


async def first_connection(
    dsn: str, kwargs: dict[str, Any], schema: str | None, statement_ms: int | None
) -> tuple[str, PgOps, Conn]:
    """Connect once, check and migrate the schema; the connection stays open (the
    caller's to close).

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


def _prepare(conn: Conn, schema: str | None, statement_ms: int | None) -> tuple[str, PgOps, Conn]:
    """Check and migrate the schema on ``conn``, kept open for the store's inline reads
    (closed if this fails); runs in a worker thread."""
    import psycopg

    from agentloopsql._pg_ops import PgOps
    from agentloopsql._pg_schema import migrate

    try:
        try:
            configure(conn, statement_ms=statement_ms)
            name = schema if schema is not None else current_schema(conn)
            migrate(conn, name)
            return name, PgOps(conn, name), conn
        except BaseException:
            conn.close()
            raise
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(
            f"PostgreSQL failed while opening the store: {exc}", exc
        ) from exc
    except psycopg.Error as exc:
        if exc.sqlstate == "25006":  # a standby or a demoted primary: may pass
            raise StoreUnavailableError(
                f"PostgreSQL is read-only now (a standby or a demoted primary), so the "
                f"store's schema cannot be created or migrated: {exc}",
                exc,
            ) from exc
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
    dsn: str,
    kwargs: dict[str, Any],
    size: int,
    timeout: float,
    statement_ms: int | None,
    reconnects: Reconnects,
) -> psycopg_pool.ConnectionPool[Any]:
    """A closed pool of exactly ``size`` connections, reconnecting as ``reconnects`` says."""
    import psycopg_pool

    return psycopg_pool.ConnectionPool(
        dsn,
        connection_class=reconnects.connection_class(),
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


def _close_quietly(
    pool: psycopg_pool.ConnectionPool[Any], executor: PgExecutor, inline: InlineReads
) -> None:
    """Close ``pool`` from the thread that released a collected store's workers."""
    inline.close()
    executor.close()
    with contextlib.suppress(Exception):  # nobody is left to report to
        pool.close(timeout=DEFAULT_CONNECT_TIMEOUT + 1.0)


def close_pool(pool: psycopg_pool.ConnectionPool[Any], kwargs: dict[str, Any]) -> None:
    """Close ``pool``, waiting for its threads (a connecting one ends within its timeout)."""
    limit = kwargs.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    pool.close(timeout=float(limit) + 1.0)
