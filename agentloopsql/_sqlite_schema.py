"""The SQLite schema, its versions, and the connection setup every store runs on open."""

from __future__ import annotations

import sqlite3
import time

from agentloop import StoreError

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
)

SCHEMA_VERSION = len(MIGRATIONS)

SYNCHRONOUS = ("normal", "full", "extra")


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the file to :data:`SCHEMA_VERSION`; idempotent and safe across processes.

    The version is re-read under ``BEGIN IMMEDIATE`` (SQLite's write lock), so
    of several processes opening a new file at once exactly one migrates and
    the others find the work done.

    Raises:
        StoreError: the file's schema is newer than this version of agentloopsql.
        sqlite3.Error: SQLite failed; nothing was changed.
    """
    if _user_version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _user_version(conn)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the database schema is version {version}, newer than this agentloopsql "
                f"supports ({SCHEMA_VERSION}); upgrade agentloop"
            )
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


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL, waiting out other connections as ``busy_timeout`` allows.

    Switching needs a moment of exclusive access, and SQLite answers "database
    is locked" at once, without its busy handler, when another connection is
    opening the same new file; so retry with a short backoff.
    """
    deadline = time.monotonic() + busy_timeout
    pause = 0.001
    while True:
        try:
            # ":memory:" answers "memory": there is no file to journal.
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            locked = "locked" in str(exc) or "busy" in str(exc)
            if not locked or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def connect(path: str, synchronous: str, busy_timeout: float) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode with WAL and the given durability, then migrate.

    ``synchronous`` must be one of :data:`SYNCHRONOUS` (checked by the caller).
    """
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000):d}")
        _enable_wal(conn, busy_timeout)
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn
