"""A ``PostgresStore``'s lone appends, run on the caller's event loop thread: no thread hop.

The store keeps one connection of its own for this (not one of the pool's),
a :class:`~agentloopsql._pg_wait.LoopConnection`. It is opened in a
background thread (bounded by the connect timeout) the first time an append
finds none, and again after it was dropped; that append, and every one while
it connects, takes the worker path. An append (``append``, or a fenced
``append`` of the leased session: one statement either way) uses it only when
it is free (:meth:`FastAppends.take`, safe from any thread or loop); when a
call holds it, others take the worker path as before, where concurrent
appends share one multi-row ``INSERT``.

The rules are the worker path's (``_pg_exec``):

- **Cancellation**: a call cancelled before its statement is sent did
  nothing. Once sent, the server is asked to cancel it from a helper thread
  (repeated every ``CANCEL_EVERY`` s) while the caller waits, shielded and
  bounded, for its end: rolled back -> the caller gets its cancellation;
  committed -> it returns normally and the cancellation is delivered after
  (under asyncio re-armed by ``agentloop._backend.redeliver``). That connection is then
  closed, never reused: a late cancel request must not hit a later statement.
- **A lost connection** (or a cancelled statement that did not end within
  ``SETTLE_BOUND``): the connection is dropped and the call handed to
  ``PgExecutor.settle`` in a thread, shielded, which looks up the append key on
  a pooled connection and inserts again only if the lost attempt did not
  commit: never applied twice, ``StoreUnavailableError`` only if that fails.
- **A refused row** fails its own call with ``_pg_errors.classify``'s error.
- The statement is bounded as the pool's are (the same session settings,
  ``statement_timeout`` included).

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg

from agentloop import LeaseLostError
from agentloop._backend import redeliver
from agentloop._shared import call_ends
from agentloopsql._jobs import Append, FencedAppend
from agentloopsql._park import to_thread_shielded
from agentloopsql._pg_append import judge_fence, step_params
from agentloopsql._pg_errors import classify
from agentloopsql._pg_running import send_cancels
from agentloopsql._pg_wait import LoopConnection, Unsettled

if TYPE_CHECKING:
    from agentloopsql._pg_exec import PgExecutor
    from agentloopsql._pg_ops import PgOps

    Conn = psycopg.Connection[Any]

# After a failed connect, the next attempt waits this long (the worker path serves meanwhile).
RECONNECT_AFTER = 1.0


class FastAppends:
    """The fast path of one store; see the module docstring."""

    def __init__(
        self,
        dsn: str,
        kwargs: dict[str, Any],
        statement_ms: int | None,
        ops: PgOps,
        executor: PgExecutor,
    ) -> None:
        self._dsn = dsn
        self._kwargs = kwargs
        self._statement_ms = statement_ms
        self._ops = ops
        self._executor = executor
        self._lock = threading.Lock()
        self._conn: LoopConnection | None = None  # free or held; None while there is none
        self._busy = False
        self._idle = threading.Event()  # clear while a call holds the connection
        self._idle.set()
        self._closed = False
        self._connecting = False
        self._retry_at = 0.0
        self._threads: list[threading.Thread] = []  # connecting, cancelling or closing
        # the held connection's canceller and what stops it, while it runs
        self._cancelling: tuple[threading.Thread, threading.Event] | None = None
        self.calls = 0  # calls that took the fast path (for tests)

    def take(self) -> LoopConnection | None:
        """The connection, now held by the caller, if it is free; else ``None``.

        Starts connecting in the background if there is none.
        """
        with self._lock:
            conn = self._conn
            if conn is None or self._closed:
                self._start_connecting()
                return None
            if self._busy:
                return None
            self._busy = True
            self._idle.clear()
            self.calls += 1
            return conn

    async def append(self, conn: LoopConnection, work: Append[Conn] | FencedAppend[Conn]) -> None:
        """Run ``work`` (one row) on ``conn``, which :meth:`take` gave the caller; give it back.

        The caller made the call's cancellation point just before :meth:`take` (a
        cancellation pending then landed there, before anything was sent); the
        schedule point is the wait for the answer, or one made after it.

        Raises:
            As the worker path for the same work; see the module docstring.
        """
        keep = False
        conn.waited = False
        try:
            keep, refused = await self._run(conn, work)
        finally:
            self._give_back(conn, keep)
        if not conn.waited:  # the answer came before any wait: the call's schedule point
            await call_ends()
        if refused is not None:
            raise refused

    async def _run(
        self, conn: LoopConnection, work: Append[Conn] | FencedAppend[Conn]
    ) -> tuple[bool, BaseException | None]:
        """Run ``work`` on ``conn``: whether ``conn`` may serve another call, and what to
        raise if the server or the lease check refused it."""
        step, key = work.rows[0]
        lease = work.lease if isinstance(work, FencedAppend) else None
        params: Sequence[object]
        if lease is not None:
            query, params = self._ops.fenced_statement(lease, [(step, key)])
        else:
            query, params = self._ops.q["append"], step_params(step, key)
        conn.absorbed = None
        cursor = conn.statements
        try:
            await cursor.execute(query, params, prepare=True)
            row = await cursor.fetchone() if lease is not None else None
        except psycopg.Error as exc:
            if isinstance(exc, Unsettled) or conn.broken or conn.closed:
                await self._lost(work, conn.absorbed)  # the retry judges the lease itself
                return False, None
            error = self._refused(exc, conn.absorbed)
            error.__cause__ = exc
            return conn.absorbed is None, error
        absorbed = conn.absorbed
        if isinstance(absorbed, asyncio.CancelledError):
            redeliver(absorbed)  # it committed: the cancellation lands at the next suspension
        if lease is not None:
            try:
                judge_fence(lease, row)
            except (LeaseLostError, ValueError) as refused:  # nothing was inserted
                return absorbed is None, refused
        return absorbed is None, None

    def _refused(self, exc: psycopg.Error, absorbed: BaseException | None) -> BaseException:
        """What a statement the server ended with ``exc`` raises."""
        if absorbed is not None:
            if isinstance(exc, psycopg.errors.QueryCanceled):
                return absorbed  # one autocommit statement: it rolled back
            if isinstance(absorbed, asyncio.CancelledError):
                redeliver(absorbed)
        return classify(exc, "append")

    async def _lost(self, work: Append[Conn] | FencedAppend[Conn], absorbed: object) -> None:
        """The connection was lost under ``work``: settle it by its key on the pool."""
        write = self._executor.write_of(work)
        try:
            await to_thread_shielded(self._executor.settle, write, work.committed)
        finally:  # a cancellation absorbed earlier is delivered whatever the retry says
            if isinstance(absorbed, asyncio.CancelledError):
                redeliver(absorbed)

    def _give_back(self, conn: LoopConnection, keep: bool) -> None:
        """Free the connection for the next caller, or drop it (closed in a thread)."""
        with self._lock:
            cancelling, self._cancelling = self._cancelling, None
            if not keep or cancelling is not None:  # a cancel request was sent on it
                self._conn = None
                closer = threading.Thread(
                    target=_close,
                    args=(conn, cancelling),
                    name="agentloopsql fast close",
                    daemon=True,
                )
                self._threads.append(closer)
                closer.start()
            self._busy = False
            self._idle.set()

    def _cancel(self, conn: LoopConnection) -> None:
        """``conn``'s caller was cancelled mid-statement: ask the server to cancel it."""
        done = threading.Event()
        thread = threading.Thread(
            target=send_cancels,
            args=(done, partial(_cancel_safe, conn)),
            name="agentloopsql cancel",
            daemon=True,
        )
        with self._lock:
            self._cancelling = (thread, done)
            self._threads.append(thread)
        thread.start()

    def _start_connecting(self) -> None:  # under the lock
        if self._closed or self._connecting or time.monotonic() < self._retry_at:
            return
        self._connecting = True
        self._threads = [thread for thread in self._threads if thread.is_alive()]
        thread = threading.Thread(target=self._connect, name="agentloopsql connect", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _connect(self) -> None:
        conn: LoopConnection | None = None
        with contextlib.suppress(Exception):  # the worker path reports the server's state
            conn = asyncio.run(_open(self._dsn, self._kwargs, self._statement_ms))
        with self._lock:
            self._connecting = False
            if conn is None:
                self._retry_at = time.monotonic() + RECONNECT_AFTER
                return
            if not self._closed:
                conn.on_cancel = partial(self._cancel, conn)
                self._conn = conn
                return
        conn.pgconn.finish()

    def ready(self) -> bool:
        """Whether a connection is open (free or held)."""
        return self._conn is not None

    async def aclose(self) -> None:
        """Wait for a call holding the connection, then close it; end every helper thread."""
        with self._lock:
            self._closed = True
        await to_thread_shielded(self._close_all)

    def _close_all(self) -> None:
        self._idle.wait()  # a call under way is bounded as the worker path's
        with self._lock:
            conn, self._conn = self._conn, None
            threads = list(self._threads)
        if conn is not None:
            conn.pgconn.finish()
        for thread in threads:
            thread.join()  # each bounded: connect_timeout, or a cancel request's 2 s


async def _open(dsn: str, kwargs: dict[str, Any], statement_ms: int | None) -> LoopConnection:
    """A fast-path connection with the pool's session settings (run in a thread's own loop)."""
    conn = await LoopConnection.connect(dsn, **kwargs)
    try:
        await conn.execute("SET TIME ZONE 'UTC'")
        if statement_ms is not None:
            await conn.execute(f"SET statement_timeout = {statement_ms:d}")
    except BaseException:
        conn.pgconn.finish()
        raise
    return conn


def _cancel_safe(conn: LoopConnection) -> None:
    """One cancel request for ``conn``'s statement, bounded (a helper thread's own loop)."""
    asyncio.run(conn.cancel_safe(timeout=2.0))


def _close(
    conn: LoopConnection, cancelling: tuple[threading.Thread, threading.Event] | None
) -> None:
    """Stop ``conn``'s canceller (if any), then close it: no cancel request can outlive it."""
    if cancelling is not None:
        thread, done = cancelling
        done.set()
        thread.join()  # bounded: a cancel request gives up after 2 s
    conn.pgconn.finish()
