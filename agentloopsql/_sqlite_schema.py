"""The SQLite schema, its versions, and the connection setup every store runs on open."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from agentloop import StoreError
from agentloopsql._sqlite_inspect import check_schema, quick_check
from agentloopsql._sqlite_paths import open_error, path_problem, show_path

if TYPE_CHECKING:
    from collections.abc import Callable

# Each entry migrates from version i to i + 1; the schema version is the list's length.
# Statements are executed one by one inside one transaction (``executescript`` would commit).
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            system_prompt TEXT NOT NULL DEFAULT '',
            data TEXT,
            final_status TEXT,
            final_prompt_tokens INTEGER,
            final_completion_tokens INTEGER,
            final_step_count INTEGER,
            final_duration_ms INTEGER,
            final_data_bytes INTEGER,
            step_total INTEGER NOT NULL DEFAULT 0,
            created_us INTEGER NOT NULL,
            updated_us INTEGER NOT NULL,
            write_seq INTEGER NOT NULL
        )
        """,
        "CREATE INDEX sessions_by_write ON sessions (write_seq)",
        """
        CREATE TABLE steps (
            seq INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            step_index INTEGER NOT NULL,
            step_type TEXT NOT NULL,
            content TEXT NOT NULL,
            tool_args TEXT NOT NULL,
            duration_ms INTEGER NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            created_us INTEGER NOT NULL
        )
        """,
        "CREATE INDEX steps_by_session ON steps (session_id, seq)",
    ),
    (
        # One row per session ever leased, never deleted (so tokens only grow);
        # expires_us (microseconds since the epoch, this machine's clock) is
        # NULL once the lease is released.
        """
        CREATE TABLE leases (
            session_id TEXT PRIMARY KEY NOT NULL,
            owner TEXT NOT NULL,
            token INTEGER NOT NULL,
            expires_us INTEGER
        ) WITHOUT ROWID
        """,
    ),
    (
        # A deleted session's last revision (its write_seq), never deleted: its
        # revision never gets smaller, and the next write_seq goes above it.
        """
        CREATE TABLE revision_floors (
            session_id TEXT PRIMARY KEY NOT NULL,
            revision INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX revision_floors_by_revision ON revision_floors (revision)",
    ),
)


SCHEMA_VERSION = len(MIGRATIONS)

SYNCHRONOUS = ("normal", "full", "extra")


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the file to :data:`SCHEMA_VERSION`; idempotent and safe across processes.

    The version and tables are re-checked under ``BEGIN IMMEDIATE`` (SQLite's
    write lock), so of several processes opening a new file at once exactly
    one migrates and the others find the work done.

    Raises:
        StoreError: the file is not agentloopsql's (see :func:`check_schema`),
            or its schema is newer than this version of agentloopsql.
        sqlite3.Error: SQLite failed; nothing was changed.
    """
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = check_schema(conn, path, MIGRATIONS)
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        # PRAGMA takes no parameters; the value is our own int constant.
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _retrying_locked(action: Callable[[], object], busy_timeout: float) -> None:
    """Run ``action``, retrying with a short backoff while SQLite says the file is locked.

    Some steps of opening (switching to WAL, reading a file another
    connection is just opening) answer "database is locked" at once, without
    SQLite's busy handler, so ``busy_timeout`` is honoured here.
    """
    deadline = time.monotonic() + busy_timeout
    pause = 0.001
    while True:
        try:
            action()
            return
        except sqlite3.OperationalError as exc:
            locked = "locked" in str(exc) or "busy" in str(exc)
            if not locked or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _inspect(conn: sqlite3.Connection, path: str, verify: bool) -> None:
    """Refuse a file that is not ours (or, with ``verify``, is damaged); only reads."""
    conn.execute("BEGIN")  # one read snapshot for the version and the tables
    try:
        check_schema(conn, path, MIGRATIONS)
        if verify:
            quick_check(conn, path)
    finally:
        if conn.in_transaction:  # some errors end the transaction themselves
            conn.execute("ROLLBACK")


def _setup(
    conn: sqlite3.Connection, path: str, synchronous: str, timeout: float, verify: bool
) -> None:
    # Before the first read: reading a WAL file creates its -wal and -shm files,
    # which a connection that may not write would leave behind.
    if path != ":memory:" and (problem := path_problem(path)) is not None:
        raise StoreError(f"cannot open SQLite database {show_path(path)}: {problem}")
    _retrying_locked(lambda: _inspect(conn, path, verify), timeout)
    # Only now, with the file known to be ours (or new), may anything in it change.
    # ":memory:" answers "memory" to WAL: there is no file to journal.
    _retrying_locked(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone(), timeout)
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    migrate(conn, path)


def connect(
    path: str, synchronous: str, busy_timeout: float, verify: bool = False
) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode, check it is ours, switch on WAL and migrate.

    ``synchronous`` must be one of :data:`SYNCHRONOUS` (checked by the
    caller). Nothing in the file changes before it is known to be an
    agentloopsql database (or empty, or holding only other applications'
    tables) and, with ``verify``, to pass ``PRAGMA quick_check``.

    Raises:
        StoreError: the path cannot be opened for reading and writing (the
            message says why), or the file is not ours, damaged or too new.
        StoreUnavailableError: SQLite failed in a way that may pass (locked, I/O).
    """
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    except sqlite3.Error as exc:
        raise open_error(path, exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000):d}")
        _setup(conn, path, synchronous, busy_timeout, verify)
    except sqlite3.Error as exc:
        conn.close()
        raise open_error(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn
