"""Short PostgreSQL reads on the event-loop thread, on one connection of their own.

A read through the workers waits for two thread hand-offs (to a worker, and
back to the event loop), which cost more than the read itself on a nearby
server. So ``PostgresStore`` keeps one extra connection for short reads
(``last_n`` of at most ``SHORT_WINDOW`` steps, ``get``, ``get_many``,
``list_sessions``) and drives it from the event loop through libpq's
non-blocking calls, which psycopg documents as its ``pq`` module
(``Connection.pgconn``): send the statement, then wait for the socket with
the backend's own ``wait_readable`` (trio) or ``add_reader`` (asyncio).

The rules:

- **Same statements, same rows.** The SQL is the one the workers run
  (``PgOps.q``), with numbered parameters; results come in binary and are
  decoded here to the values psycopg gives (text, bytes, ints, bools, UTC
  datetimes), so the one row rule of ``_codec`` builds them. A column of
  another type is a miss.
- **A miss runs on the workers.** The connection busy with another read, not
  there (opening, or lost), or lost during this read: the read runs on the
  workers as any call does, with their retries and error classes. Nothing
  is lost: a read changes nothing.
- **Errors are the workers' errors.** A statement the server refuses
  (``statement_timeout`` included) raises what ``classify`` says, as on a
  worker, and the connection stays.
- **Bounded.** The wait for the server is bounded by ``wait_timeout`` (past it
  the connection is dropped and the read raises ``StoreUnavailableError``,
  nothing done) and by cancellation: a cancelled read drops the connection
  (its statement is ended by the server when the socket closes) and raises
  the backend's cancellation.
- **Reopened in the background.** A dropped connection is opened again on a
  short-lived thread, at most once every ``reconnect_interval``, each attempt
  bounded by ``connect_timeout``; meanwhile reads use the workers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import psycopg
import trio
from psycopg import pq

from agentloop import StoreUnavailableError
from agentloop._shared import on_trio
from agentloopsql._pg_exec import classify

Conn = psycopg.Connection[Any]
Row = tuple[Any, ...]

_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _int(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


def _timestamptz(data: bytes) -> datetime:
    return _PG_EPOCH + timedelta(microseconds=_int(data))


# Binary decoders by type OID, giving what psycopg gives for the same column.
_DECODE: dict[int, Callable[[bytes], object]] = {
    16: lambda data: data == b"\x01",  # bool
    17: bytes,  # bytea
    20: _int,  # int8
    21: _int,  # int2
    23: _int,  # int4
    25: lambda data: data.decode("utf-8"),  # text
    1043: lambda data: data.decode("utf-8"),  # varchar
    1184: _timestamptz,  # timestamptz
}


def _text(value: object) -> bytes:
    """A parameter in text format: the server types it from the statement."""
    return value.encode("utf-8") if isinstance(value, str) else str(value).encode("ascii")


class Miss(Exception):
    """The read cannot run on the inline connection now: run it on the workers."""


class InlineReads:
    """The store's connection for short reads on the event-loop thread (see the module)."""

    def __init__(
        self,
        conn: Conn,
        connect: Callable[[], Conn],
        wait_timeout: float | None,
        reconnect_interval: float,
    ) -> None:
        self._conn: Conn | None = None
        self._prepared: set[str] = set()  # the reads prepared on self._conn
        self._install(conn)
        self._connect = connect
        self._bound = wait_timeout
        self._interval = reconnect_interval
        self._lock = threading.Lock()  # held by the read in flight, and while closing
        self._opening = False
        self._next_open = 0.0
        self._closed = False

    async def rows(self, query: bytes, params: Sequence[object], op: str) -> list[Row] | None:
        """The rows ``query`` (read ``op``) returns for ``params``, read on the event-loop
        thread, or ``None``: run the read on the workers instead. ``query`` is
        prepared on the connection the first time, as psycopg prepares a
        statement the workers repeat.

        Raises:
            StoreError, StoreUnavailableError: the server refused the statement,
                or did not answer within ``wait_timeout``.
        """
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._conn is None:
                self._reopen_soon()
                return None
            return await self._read(self._conn, query, params, op)
        except Miss:
            return None
        finally:
            self._lock.release()

    async def _read(self, conn: Conn, query: bytes, params: Sequence[object], op: str) -> list[Row]:
        """:meth:`rows` on ``conn``, the lock held; ``conn`` is dropped unless it ends idle.

        Raises:
            Miss: run the read on the workers instead.
        """
        kept = False
        try:
            pgconn, name = conn.pgconn, f"agentloopsql_{op}".encode("ascii")
            if op not in self._prepared:
                _send(pgconn.send_prepare, name, query)
                kept, prepared = await self._answer(pgconn, op)
                _decoded(prepared, op)
                self._prepared.add(op)
            kept = False
            _send(pgconn.send_query_prepared, name, [_text(p) for p in params], result_format=1)
            kept, result = await self._answer(pgconn, op)
            return _decoded(result, op)
        finally:
            if not kept or self._closed:
                self._drop()

    async def _answer(self, pgconn: pq.abc.PGconn, op: str) -> tuple[bool, pq.abc.PGresult]:
        """:func:`_answer` within ``wait_timeout``, and whether the connection may be
        kept (idle, not lost).

        Raises:
            Miss: the connection was lost (the workers reconnect and retry).
            StoreUnavailableError: no answer within ``wait_timeout``.
        """
        try:
            if self._bound is None:
                result = await _answer(pgconn)
            else:
                kept = False
                with anyio.move_on_after(self._bound):
                    result = await _answer(pgconn)
                    kept = True
                if not kept:
                    raise StoreUnavailableError(
                        f"PostgreSQL did not answer {op} within wait_timeout "
                        f"({self._bound} s); nothing was done"
                    )
        except psycopg.OperationalError:
            raise Miss from None
        if pgconn.status != pq.ConnStatus.OK:
            raise Miss  # lost with its answer (a terminated backend): as above
        return pgconn.transaction_status == pq.TransactionStatus.IDLE, result

    def close(self) -> None:
        """Close the connection now, or a read in flight closes it when it ends; idempotent.

        Never waits: the read in flight may be a task of this event loop.
        """
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._lock.release()

    def _install(self, conn: Conn) -> None:
        """Read on ``conn`` from now on (the lock is held, or nobody else has this yet)."""
        conn.pgconn.nonblocking = 1  # a send never blocks: _answer flushes what is left
        self._conn, self._prepared = conn, set()

    def _drop(self) -> None:
        """Close the connection (the lock is held): its state is unknown."""
        conn, self._conn = self._conn, None
        self._prepared = set()
        if conn is not None:
            conn.close()
        self._next_open = time.monotonic() + self._interval

    def _reopen_soon(self) -> None:
        """Start opening a connection on a thread, unless one is opening or it is too soon."""
        if self._closed or self._opening or time.monotonic() < self._next_open:
            return
        self._opening = True
        self._next_open = time.monotonic() + self._interval
        threading.Thread(target=self._open, name="agentloopsql-inline", daemon=True).start()

    def _open(self) -> None:
        try:
            conn: Conn | None = self._connect()
        except Exception:  # the workers report the server's state; try again later
            conn = None
        with self._lock:
            self._opening = False
            if conn is not None and not self._closed and self._conn is None:
                self._install(conn)
                conn = None
        if conn is not None:
            conn.close()
        if self._closed:
            self.close()  # a close() that found the lock held here closes it now


def _send(send: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Send a statement with ``send`` (a ``PGconn`` method).

    Raises:
        Miss: the connection is lost (the workers reconnect and retry).
    """
    try:
        send(*args, **kwargs)
    except psycopg.OperationalError:
        raise Miss from None


async def _answer(pgconn: pq.abc.PGconn) -> pq.abc.PGresult:
    """The result of the statement sent on ``pgconn``: waits for its socket, drains it.

    Raises:
        psycopg.OperationalError: the connection failed.
    """
    while pgconn.flush():
        await _wait(pgconn.socket, readable=False)
    waited = False
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            break
        await _wait(pgconn.socket, readable=True)
        waited = True
    if not waited:
        await anyio.lowlevel.checkpoint()  # every call is a checkpoint
    result = pgconn.get_result()
    if result is None:
        raise psycopg.OperationalError("the server sent no result")
    while pgconn.get_result() is not None:
        pass
    return result


async def _wait(fd: int, *, readable: bool) -> None:
    if on_trio():
        if readable:
            await trio.lowlevel.wait_readable(fd)
        else:
            await trio.lowlevel.wait_writable(fd)
        return
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    add, remove = (
        (loop.add_reader, loop.remove_reader) if readable else (loop.add_writer, loop.remove_writer)
    )
    add(fd, wake)
    try:
        await ready
    finally:
        remove(fd)


def _decoded(result: pq.abc.PGresult, op: str) -> list[Row]:
    """The rows of ``result``, decoded as psycopg decodes them.

    Raises:
        StoreError, StoreUnavailableError: the statement failed (as ``classify`` says).
        Miss: a column of a type this module does not decode.
    """
    if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
        code = result.error_field(pq.DiagnosticField.SQLSTATE)
        said = result.get_error_message() or "the statement failed"
        kind = psycopg.errors.lookup(code.decode()) if code else psycopg.OperationalError
        raise classify(kind(said), op)
    try:
        decoders = [_DECODE[result.ftype(col)] for col in range(result.nfields)]
    except KeyError:
        raise Miss from None
    get = result.get_value
    return [
        tuple(
            None if (value := get(row, col)) is None else decode(value)
            for col, decode in enumerate(decoders)
        )
        for row in range(result.ntuples)
    ]
