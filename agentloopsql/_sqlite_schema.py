"""A SQLite file for ``SqliteStore``: its path, its schema and versions, and opening it.

**The path.** SQLite says "unable to open database file" for a missing
directory, a directory given as the path and a file it may not read alike,
and falls back to read-only without a word when it may not write. So the path
itself is looked at (``os.stat``/``os.access``, which never change anything)
and the error names the path and the reason.

**Whether a file is ours**, judged by reading it before anything changes: its
``user_version`` is a schema version this release knows (0 to the latest) and
every table and index of ours in it has exactly the shape that version's
migrations create: the same columns (name, declared type, ``NOT NULL``,
default, primary key), the same named indexes and no other unique index on our
tables (one could refuse our writes). The expected shape is not written down
twice: it is read back from a private in-memory database that ran the
migrations, with the same introspection. Other applications' tables, views,
triggers and non-unique indexes are left alone, so a file may hold another
application's tables next to ours, as long as that application does not use
``user_version``.

**Opening**: check the file is ours (and, with ``verify``, undamaged), only
then switch it to WAL and migrate it, idempotently and safely across processes.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import stat
import time
import zlib
from collections.abc import Callable
from typing import NamedTuple

from agentloop import StoreError, StoreUnavailableError
from agentloop._shared import preview

# A path is shown whole up to this length; a longer one keeps its end, which names the file.
_PATH_SHOWN = 200
_PATH_TAIL = 80

# SQLite result codes (and their extended forms) that may pass if retried later.
_TRANSIENT = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_NOMEM")


def show_path(path: str) -> str:
    """``path`` quoted for an error message, its start elided if it is very long."""
    if len(path) <= _PATH_SHOWN:
        return repr(path)
    return f"...{path[-_PATH_TAIL:]!r} ({len(path)} chars)"


def _can(path: str, mode: int) -> bool:
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def _directory_problem(directory: str) -> str | None:
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return f"directory {show_path(directory)} does not exist"
    except PermissionError:
        return f"no permission to reach directory {show_path(directory)}"
    except OSError as exc:
        return f"directory {show_path(directory)} cannot be reached ({exc.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return f"{show_path(directory)} is not a directory"
    if not _can(directory, os.X_OK):
        return f"no permission to enter directory {show_path(directory)}"
    return None


def path_problem(path: str) -> str | None:
    """Why SQLite cannot open ``path`` for reading and writing, or ``None`` if nothing is wrong.

    Checks, in order: the directory exists and can be entered; the path is
    not a directory; the file (if it exists) may be read and written; the
    directory may be written, which SQLite needs to create the file and its
    ``-wal`` and ``-shm`` files (unless both already exist and are writable).
    """
    directory = os.path.dirname(os.path.abspath(path))
    problem = _directory_problem(directory)
    if problem is not None:
        return problem
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path):
        if not _can(path, os.R_OK):
            return "no permission to read the file"
        if not _can(path, os.W_OK):
            return "no permission to write the file"
    elif not _can(directory, os.W_OK):
        return f"no permission to create the file in directory {show_path(directory)}"
    if _can(directory, os.W_OK):
        return None
    if all(_can(path + suffix, os.R_OK | os.W_OK) for suffix in ("-wal", "-shm")):
        return None
    return (
        f"no permission to write directory {show_path(directory)}, which SQLite needs "
        "for the file's -wal and -shm files"
    )


def open_error(path: str, exc: sqlite3.Error) -> StoreError:
    """The error ``open`` raises for ``exc``, naming ``path`` and the reason; ``exc`` is its cause.

    A lock, I/O error, full disk or lack of memory may pass: those are
    ``StoreUnavailableError``. Everything else (the path, permissions, a file
    that is not a database or is damaged) is a plain ``StoreError``.
    """
    code = exc.sqlite_errorname or ""
    where = f"SQLite database {show_path(path)}"
    if code.startswith(_TRANSIENT):
        return StoreUnavailableError(f"cannot open {where} now: {exc}", exc)
    if code == "SQLITE_NOTADB":
        reason = f"it is not a SQLite database ({exc}); nothing was changed"
    elif code.startswith("SQLITE_CORRUPT"):
        reason = f"it is damaged ({exc}); nothing was changed"
    else:
        reason = (path_problem(path) if path != ":memory:" else None) or str(exc)
    error = StoreError(f"cannot open {where}: {reason}")
    error.__cause__ = exc
    return error


def checked_path(path: object) -> str:
    """``path`` as the non-empty ``str`` SQLite opens."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, got {preview(path)}")
    name = os.fspath(path)
    if not isinstance(name, str):
        raise TypeError(f"path must name a file as str, got {preview(name)}")
    if not name:
        raise ValueError("path must name a file (or be ':memory:'), got ''")
    return name


# -- whether a file is ours --------------------------------------------------

Migrations = tuple[tuple[str, ...], ...]
_Column = tuple[str, str, int, object, int]
_Index = tuple[int, str, int, tuple[tuple[object, ...], ...]]


class _Object(NamedTuple):
    """One schema object of ours as found: a table's columns and indexes, or what it is on."""

    kind: str
    table: str
    columns: tuple[_Column, ...] = ()
    indexes: dict[str, _Index] = {}  # noqa: RUF012 - never mutated


Shape = dict[str, _Object]


def _columns(conn: sqlite3.Connection, table: str) -> tuple[_Column, ...]:
    rows = conn.execute(
        'SELECT name, upper(type), "notnull", dflt_value, pk FROM pragma_table_xinfo(?) '
        "ORDER BY cid",
        (table,),
    ).fetchall()
    return tuple(
        (str(name), str(kind), notnull, dflt, pk) for name, kind, notnull, dflt, pk in rows
    )


def _indexes(conn: sqlite3.Connection, table: str, owned: frozenset[str]) -> dict[str, _Index]:
    """The table's unique indexes and those named like ours; others are a reader's own."""
    found: dict[str, _Index] = {}
    for name, unique, origin, partial in conn.execute(
        'SELECT name, "unique", origin, partial FROM pragma_index_list(?)', (table,)
    ).fetchall():
        if unique or str(name).lower() in owned:
            keys = conn.execute(
                'SELECT name, "desc", coll FROM pragma_index_xinfo(?) WHERE key ORDER BY seqno',
                (name,),
            ).fetchall()
            found[str(name).lower()] = (unique, str(origin), partial, tuple(map(tuple, keys)))
    return found


def read_shape(conn: sqlite3.Connection, owned: frozenset[str]) -> Shape:
    """The shape of every schema object of ``conn`` named in ``owned``."""
    shape: Shape = {}
    for name, kind, table in conn.execute(
        "SELECT name, type, tbl_name FROM sqlite_master ORDER BY name"
    ).fetchall():
        # SQLite names are case-insensitive: a foreign STEPS would clash with our steps.
        key = str(name).lower()
        if key not in owned:
            continue
        if kind == "table":
            shape[key] = _Object("table", key, _columns(conn, name), _indexes(conn, name, owned))
        else:
            shape[key] = _Object(str(kind), str(table).lower())
    return shape


def row_sum(*fields: object) -> int:
    """The ``checksum`` of a row holding ``fields``, in column order (docs/stores.md says how).

    Each text field is written as its length in code points, ``:`` and the
    text; each integer as its decimal digits and ``,``; a NULL as ``~``; the
    CRC-32 (``zlib.crc32``) of that text's UTF-8. The lengths and marks keep
    field boundaries from shifting, so no two rows share an encoding.

    A row holding any other type (a ``bytes`` or ``float`` agentloopsql
    never writes) gets -1, which no CRC-32 equals: it never passes the check.
    """
    parts = []
    for value in fields:  # spelled out, no call per field: this runs for every row read
        kind = value.__class__
        if kind is str:
            parts.append(f"{len(value)}:{value}")  # type: ignore[arg-type]
        elif kind is int:
            parts.append(f"{value},")
        elif value is None:
            parts.append("~")
        else:
            return -1
    return zlib.crc32("".join(parts).encode("utf-8", "surrogatepass"))


STEP_SUM_ARGS = 9
"""``steps`` columns a step's checksum covers: session_id, step_index, step_type, content,
tool_args, duration_ms, prompt_tokens, completion_tokens, created_us."""


class SessionRow(NamedTuple):
    """A ``sessions`` row: every column but ``checksum``, in table order (what it covers)."""

    id: str
    model: str
    system_prompt: str
    data: str | None
    final_status: str | None
    final_prompt_tokens: int | None
    final_completion_tokens: int | None
    final_step_count: int | None
    final_duration_ms: int | None
    final_data_bytes: int | None
    step_total: int
    created_us: int
    updated_us: int
    write_seq: int
    labels: str
    created_seq: int


SESSION_COLUMNS = tuple(SessionRow.__annotations__)

step_sum = row_sum
session_sum = row_sum


def add_functions(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL functions ``agentloop_step_sum`` and ``agentloop_session_sum``
    (:func:`row_sum` over a row's columns) the migrations use."""
    conn.create_function("agentloop_step_sum", STEP_SUM_ARGS, row_sum, deterministic=True)
    conn.create_function("agentloop_session_sum", len(SESSION_COLUMNS), row_sum, deterministic=True)


def _build(migrations: Migrations, version: int) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    add_functions(conn)
    for statements in migrations[:version]:
        for statement in statements:
            conn.execute(statement)
    return conn


@functools.cache
def owned_names(migrations: Migrations) -> frozenset[str]:
    """Every table and index name any of ``migrations`` creates."""
    conn = _build(migrations, len(migrations))
    try:
        rows = conn.execute("SELECT name FROM sqlite_master").fetchall()
    finally:
        conn.close()
    return frozenset(name for (name,) in rows if not name.startswith("sqlite_"))


@functools.cache
def expected_shape(migrations: Migrations, version: int) -> Shape:
    """What :func:`read_shape` reads from a file at schema ``version`` (do not modify it)."""
    conn = _build(migrations, version)
    try:
        return read_shape(conn, owned_names(migrations))
    finally:
        conn.close()


def _column_text(column: _Column) -> str:
    _, kind, notnull, default, pk = column
    text = kind or "untyped"
    text += " NOT NULL" if notnull else ""
    text += f" DEFAULT {default}" if default is not None else ""
    return text + (" PRIMARY KEY" if pk else "")


def _table_difference(name: str, got: _Object, want: _Object) -> str:
    got_names = [column[0] for column in got.columns]
    want_names = [column[0] for column in want.columns]
    if got_names != want_names:
        return f"table {name!r} has columns {preview(got_names)}, expected {want_names}"
    for have, need in zip(got.columns, want.columns, strict=True):
        if have != need:
            return (
                f"column {name}.{have[0]} is {preview(_column_text(have))}, "
                f"expected {_column_text(need)!r}"
            )
    for index in sorted(got.indexes.keys() | want.indexes.keys()):
        if index not in got.indexes:
            return f"table {name!r} lacks the index {index!r}"
        if index not in want.indexes:
            return f"table {name!r} has a unique index {preview(index)} that would refuse writes"
        if got.indexes[index] != want.indexes[index]:
            return f"index {index!r} of table {name!r} has another definition"
    return f"table {name!r} differs"  # pragma: no cover - equal parts make equal shapes


def shape_difference(got: Shape, want: Shape) -> str | None:
    """The first way ``got`` differs from ``want``, in words; ``None`` if they are equal.

    An object of another shape is reported before an unexpected one, and
    that before a missing one: the most telling difference comes first.
    """
    for name in sorted(got.keys() & want.keys()):
        have, need = got[name], want[name]
        if have == need:
            continue
        if have.kind != need.kind:
            return f"{name!r} is a {have.kind}, expected a {need.kind}"
        if have.kind == "table":
            return _table_difference(name, have, need)
        return (
            f"{have.kind} {name!r} belongs to table {preview(have.table)}, expected {need.table!r}"
        )
    for name in sorted(got.keys() - want.keys()):
        return f"it has a {got[name].kind} named {name!r}, which that schema version does not have"
    for name in sorted(want.keys() - got.keys()):
        return f"{want[name].kind} {name!r} is missing"
    return None


def _refusal(path: str, problem: str) -> StoreError:
    return StoreError(f"refusing SQLite database {show_path(path)}: {problem}; nothing was changed")


def check_schema(conn: sqlite3.Connection, path: str, migrations: Migrations) -> int:
    """The file's schema version, once its ``user_version`` and tables are known to be ours.

    Only reads. Call it inside one transaction, so the version and the
    tables come from the same snapshot.

    Raises:
        StoreError: ``user_version`` is negative or newer than ``migrations``
            know, or the tables of ours differ from what that version creates.
        sqlite3.Error: SQLite failed (e.g. the file is not a database).
    """
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    latest = len(migrations)
    if version < 0:
        raise _refusal(path, f"its user_version is {version}, which agentloopsql never writes")
    if version > latest:
        raise _refusal(
            path,
            f"the database schema is version {version} (its user_version), newer than this "
            f"agentloopsql supports ({latest}); upgrade agentloop",
        )
    got = read_shape(conn, owned_names(migrations))
    problem = shape_difference(got, expected_shape(migrations, version))
    if problem is None:
        return version
    if version == 0:
        names = ", ".join(repr(name) for name in sorted(got))
        problem = (
            f"it has no agentloopsql schema (user_version 0) but already holds {names}: "
            "another application's tables, or a file whose user_version was reset"
        )
    else:
        problem = f"{problem} (agentloopsql schema version {version}, its user_version)"
    raise _refusal(path, problem)


def quick_check(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a damaged file: ``PRAGMA quick_check``, stopping at the first problem.

    Raises:
        StoreError: the check found a problem; the message quotes the first one.
        sqlite3.Error: SQLite failed (a damaged file may also fail this way).
    """
    rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    if rows != [("ok",)]:
        # SQLite heads the report with "*** in database main ***".
        lines = [line for row in rows for line in str(row[0]).splitlines()]
        first = next((line for line in lines if not line.startswith("***")), "no answer")
        raise _refusal(path, f"it is damaged: PRAGMA quick_check found {first[:200]!r}")


# -- the schema and opening ----------------------------------------------------

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
    (
        # The session lifecycle. labels: the session's labels as canonical JSON
        # text; created_seq: the write_seq of its first write (the "created"
        # paging order; sessions from before keep their latest write's).
        "ALTER TABLE sessions ADD COLUMN labels TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE sessions ADD COLUMN created_seq INTEGER NOT NULL DEFAULT 0",
        "UPDATE sessions SET created_seq = write_seq",
        "CREATE INDEX sessions_by_created ON sessions (created_seq)",
        # One row per label pair of a session, carrying the session's paging
        # positions, so a page filtered by one pair walks an index.
        """
        CREATE TABLE session_labels (
            session_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            write_seq INTEGER NOT NULL,
            created_seq INTEGER NOT NULL,
            PRIMARY KEY (session_id, key)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX session_labels_by_write ON session_labels (key, value, write_seq)",
        "CREATE INDEX session_labels_by_created ON session_labels (key, value, created_seq)",
        # Every session write moves write_seq: the label rows follow it.
        """
        CREATE TRIGGER session_labels_follow AFTER UPDATE OF write_seq ON sessions
        BEGIN
            UPDATE session_labels SET write_seq = NEW.write_seq WHERE session_id = NEW.id;
        END
        """,
        # Per-database values; cursor_secret signs page_sessions cursors.
        """
        CREATE TABLE meta (
            key TEXT PRIMARY KEY NOT NULL,
            value TEXT NOT NULL
        ) WITHOUT ROWID
        """,
        "INSERT INTO meta VALUES ('cursor_secret', lower(hex(randomblob(32))))",
    ),
    (
        # Every steps row carries the CRC-32 of its fields (step_sum), checked
        # on every read: SQLite keeps no checksum of its pages.
        "ALTER TABLE steps ADD COLUMN checksum INTEGER NOT NULL DEFAULT 0",
        "UPDATE steps SET checksum = agentloop_step_sum(session_id, step_index, step_type, "
        "content, tool_args, duration_ms, prompt_tokens, completion_tokens, created_us)",
    ),
    (
        # Every sessions row carries the CRC-32 of every other column (row_sum),
        # written with the row by agentloopsql and checked on every read.
        "ALTER TABLE sessions ADD COLUMN checksum INTEGER NOT NULL DEFAULT 0",
        f"UPDATE sessions SET checksum = agentloop_session_sum({', '.join(SESSION_COLUMNS)})",
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
    # A new file returns the pages prune and expire free (PRAGMA incremental_vacuum);
    # SQLite allows the switch only before the first table exists.
    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
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
        add_functions(conn)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000):d}")
        _setup(conn, path, synchronous, busy_timeout, verify)
    except sqlite3.Error as exc:
        conn.close()
        raise open_error(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn
