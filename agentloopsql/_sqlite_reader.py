"""Short reads of a ``SqliteStore`` on the event loop thread: DESIGN §6's one inline exception.

A hop to the store's worker thread and back costs more than reading the
newest steps of a session. So ``last_n`` (for windows up to
:data:`INLINE_MAX` steps) and ``get`` run on a second connection, opened
read-only (``mode=ro``) on the same WAL file, directly on the loop's thread —
only when they cannot wait:

- the connection's ``busy_timeout`` is 0, so SQLite never sleeps for a
  lock there: a read that would wait (another connection holds the file in
  exclusive locking mode, WAL recovery) fails at once and the call goes to
  the worker thread instead, which waits in cancellable slices;
- both reads walk an index (``last_n`` backwards from the newest step);
- any other SQLite error, or the connection being in use by another thread
  (a store shared between event loops in other threads), also sends the call to the worker,
  which reports failures exactly as before.

A WAL reader never waits for the writer and sees every commit made before it
starts, so a caller reads its own acknowledged writes. ``":memory:"``
databases have no second connection: every call goes to the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

import trio

from agentloop import Session, validate_n, validate_session_id
from agentloop._shared import on_trio
from agentloopsql._jobs import Read

if TYPE_CHECKING:
    from agentloop import RunStep
    from agentloopsql._sqlite import SqliteOps
    from agentloopsql._worker import Workers

R = TypeVar("R")

INLINE_MAX = 256
"""The widest ``last_n`` window read inline; wider ones go to the worker thread."""


class _Miss:
    """The read could not run inline; the worker thread will run it."""


MISS: Final = _Miss()


class InlineReader:
    """A read-only connection used on the event loop thread; see the module docstring."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str) -> InlineReader | None:
        """A reader on ``path``, or ``None`` when none can be opened (then reads use the worker).

        Blocking: call it from a worker thread.
        """
        if path == ":memory:":
            return None
        uri = Path(path).absolute().as_uri() + "?mode=ro"
        try:
            conn = sqlite3.connect(
                uri, uri=True, timeout=0, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error:
            return None
        return cls(conn)

    def read(self, fn: Callable[[sqlite3.Connection], R]) -> R | _Miss:
        """``fn`` on the read-only connection, or :data:`MISS` if it cannot run now.

        Raises:
            Exception: whatever ``fn`` raises other than ``sqlite3.Error``
                (a row that breaks ``RunStep``'s rules).
        """
        if not self._lock.acquire(blocking=False):
            return MISS
        try:
            if self._conn is None:
                return MISS
            return fn(self._conn)
        except sqlite3.Error:
            return MISS
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close the connection (waiting for a read another thread runs on it); idempotent."""
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()
                self._conn = None


class InlineReads:
    """``last_n`` and ``get`` that run inline when they can (see the module docstring)."""

    _ops: SqliteOps
    _workers: Workers[sqlite3.Connection]
    _reader: InlineReader | None
    _closed: bool

    async def _read(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        reader = self._reader
        if reader is not None and not self._closed and not self._workers.dead:
            # _backend's call_starts/call_ends, inlined: this is the hottest read path.
            if trio_run := on_trio():
                await trio.lowlevel.checkpoint_if_cancelled()
            else:
                await asyncio.sleep(0)
            found = reader.read(fn)
            if not isinstance(found, _Miss):
                if trio_run:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return found
        return await self._workers.call(Read(fn))

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps of the session, oldest first; ``[]`` for an unknown session.

        Reads an index backwards: the cost grows with ``n``, not with the
        history. Windows up to :data:`INLINE_MAX` usually run inline (see
        :class:`SqliteStore`).

        Raises:
            TypeError: ``n`` is not an int (``bool`` included), or the id is not a str.
            ValueError: ``n`` < 1, or the id is empty or holds NUL.
            StoreClosedError: the store was closed.
            StoreUnavailableError: SQLite failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        validate_n(n)
        validate_session_id(session_id)
        ops = self._ops
        if n > INLINE_MAX:
            window = min(n, 2**62)  # SQL LIMITs are signed 64-bit
            return await self._workers.call(Read(lambda conn: ops.last_n(conn, session_id, window)))
        return await self._read(lambda conn: ops.last_n(conn, session_id, n))

    async def get(self, session_id: str) -> Session:
        """The stored session, or ``Session(id=session_id)`` when unknown; creates nothing.

        Usually runs inline (see :class:`SqliteStore`).

        Raises:
            TypeError, ValueError: the id is not a non-empty str without NUL.
            StoreClosedError: the store was closed.
            StoreUnavailableError: SQLite failed.

        **Cancellation handling**: all-or-nothing (see :class:`SqlStoreBase`).
        """
        validate_session_id(session_id)
        ops = self._ops
        found = await self._read(lambda conn: ops.get(conn, session_id))
        return found if found is not None else Session(id=session_id)
