"""``PostgresStore``: both protocols over a PostgreSQL schema, via a psycopg pool.

psycopg is imported lazily: ``import agentloopsql`` works without it, and
``PostgresStore.open`` then names the extra to install.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeVar, overload

import anyio
import trio

from agentloop import StoreUnavailableError
from agentloop._backend import checkpoint_step, raise_pending_cancel
from agentloop._shared import check_seconds, on_trio, preview
from agentloopsql._base import SqlStoreBase
from agentloopsql._jobs import AnyWork, Append, FencedAppend, IdempotentWrite, KeyedWrite, Read
from agentloopsql._park import to_thread_shielded
from agentloopsql._worker import Workers

if TYPE_CHECKING:
    from collections.abc import Awaitable

    import psycopg
    import psycopg_pool

    from agentloopsql._pg_ops import PgOps

    Conn = psycopg.Connection[Any]

R = TypeVar("R")


def _task_id() -> int:
    """``id()`` of the calling trio task; 0 under asyncio (which keeps its checkpoint)."""
    return id(trio.lowlevel.current_task()) if on_trio() else 0


_MISSING = "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'agentloop-seam[postgres]'"


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

    **A lone append runs on the event loop thread**: an ``append`` (or a fenced
    ``append`` of the leased session) made while no other call is under way uses one more
    connection the store keeps for it (so plan for ``pool_size + 1``), driven
    without blocking by the calling loop, trio or asyncio, with no thread hop.
    It has the pool's settings and serves one call at a time; appends made
    while other calls are under way take the worker path. It is opened in the
    background when an append first finds none, and again after it was dropped.
    Errors, cancellation and the retry after a lost connection are as below.

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
    A statement the server cancelled rolled back, so the call raises the
    backend's cancellation; one that had already committed returns normally. A
    call being retried after a lost connection is not cancelled on the server
    (its first attempt's outcome is still being settled). A lone append on the
    event loop thread is cancelled on the server the same way once sent (before,
    it did nothing); its caller waits, shielded, up to 10 s for the statement's
    end, then counts the connection as lost (the retry above settles the call).
    After a cancel request that connection is closed, never reused.
    """

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[Any],
        ops: PgOps,
        schema: str,
        size: int,
        connect: tuple[str, dict[str, Any], int | None],
    ) -> None:
        """Use :meth:`open`. ``connect`` is the DSN, connection keywords and statement timeout."""
        from agentloopsql._pg_errors import waited_error
        from agentloopsql._pg_exec import PgExecutor
        from agentloopsql._pg_fast import FastAppends

        self._pool = pool
        self._ops = ops
        self._schema = schema
        expired = (pool.timeout, lambda waited: waited_error(waited, pool.timeout))
        executor = PgExecutor(pool, ops)
        self._workers: Workers[Conn] = Workers(
            executor, size, "PostgresStore", queue_timeout=expired
        )
        self._fast = FastAppends(*connect, ops, executor)
        # Calls under way (any thread): the fast path serves an append made alone.
        # One that ends while others wait for a worker has not returned to its caller
        # yet, so callers woken together by one group commit find each other here.
        self._counting = threading.Lock()
        self._under_way = 0
        # id() of the trio task whose lone fast append was the store's last call, else 0
        # (an id, not the task: a finished task is not kept; a new task given a reused
        # id may skip the burst checkpoint once, never the cancellation point)
        self._in_sequence = 0
        self._closed = False

    @overload
    async def _run(self, work: Read[Conn, R] | IdempotentWrite[Conn, R]) -> R: ...
    @overload
    async def _run(self, work: KeyedWrite[Conn] | Append[Conn]) -> None: ...
    async def _run(self, work: AnyWork[Conn]) -> object:
        """An append made while no other call is under way runs on the event loop thread
        (``_pg_fast``) if its connection is free; everything else on the worker threads,
        where appends made together share a commit."""
        with self._counting:
            self._under_way += 1
            alone = self._under_way == 1
        try:
            if alone and isinstance(work, Append | FencedAppend) and len(work.rows) == 1:
                await self._fast_checkpoint()
                alone = self._under_way == 1 and self._workers.idle
                conn = self._fast.take() if alone else None
                if conn is not None:
                    self._in_sequence = 0
                    await self._fast.append(conn, work)
                    self._in_sequence = _task_id()
                    return None
            self._in_sequence = 0
            return await self._workers.call(work)
        finally:
            with self._counting:
                self._under_way -= 1

    def _fast_checkpoint(self) -> Awaitable[None]:
        """The cancellation point (and schedule point) before a lone append decides its path.

        Normally a full checkpoint: callers started together (a burst of tasks) all
        count themselves in before this one decides it is alone. Under trio, when
        the store's last call was this same task's lone fast append (one task
        appending in sequence), only the cancellation point: the wait for the
        server's answer is the call's schedule point (``FastAppends.append`` makes
        one if it never waited).
        """
        if self._in_sequence and self._in_sequence == _task_id():
            return raise_pending_cancel()
        return checkpoint_step()

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
        from agentloopsql import _pg_connect as connect

        kwargs = connect.connection_kwargs(dsn)
        name, ops = await connect.first_connection(dsn, kwargs, schema, statement_ms)
        pool = connect.new_pool(dsn, kwargs, pool_size, timeout, statement_ms)
        await _fill_or_close(pool, dsn, kwargs, pool_size, timeout)
        return cls(pool, ops, name, pool_size, (dsn, kwargs, statement_ms))

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
        await self._fast.aclose()  # first: a call it lost settles on the pool
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
    from agentloopsql import _pg_connect as connect

    try:
        pool.open(wait=False)  # only starts the pool's connecting threads
        with anyio.move_on_after(pool_timeout) as waiting:
            await connect.fill(pool, dsn, kwargs, size)
        if waiting.cancelled_caught:
            raise StoreUnavailableError(
                f"could not connect to PostgreSQL: {size} connection(s) not ready "
                f"after {pool_timeout} s (pool_timeout)"
            )
    except BaseException:
        await to_thread_shielded(connect.close_pool, pool, kwargs)
        raise
