"""Our SQL stores' ``steps`` table as the raw-driver floors write and read it.

The statements are written here from the documented schema (docs/stores.md's
"Schema" section), not taken from ``agentloopsql``: a floor is what the bare
driver does with the same table, whatever the store's code looks like inside.
A PostgreSQL row carries a random 63-bit ``append_key`` as the store's rows do
(a repeated key would make each INSERT after the first a no-op that stores nothing).
"""

from __future__ import annotations

import random
import sqlite3
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

from agentloop import RunStep, StepType

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_FIELDS = "session_id, step_index, step_type, content, tool_args, duration_ms, prompt_tokens, "
_keys = random.Random()

# -- SQLite -----------------------------------------------------------------------

SQLITE_INSERT = (
    f"INSERT INTO steps ({_FIELDS}completion_tokens, created_us, checksum) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def sqlite_row(step: RunStep) -> tuple[object, ...]:
    """``step`` as the parameters of :data:`SQLITE_INSERT` (times in microseconds since 1970),
    its checksum as docs/stores.md defines it."""
    fields = (*_common(step), (step.created_at - _EPOCH) // _MICROSECOND)
    return (*fields, sqlite_checksum(fields))


def sqlite_checksum(fields: tuple[object, ...]) -> int:
    """The ``checksum`` of a SQLite ``steps`` or ``sessions`` row holding ``fields`` (its other
    columns in table order), as docs/stores.md defines it."""
    encoded = "".join(
        "~" if value is None else f"{len(value)}:{value}" if isinstance(value, str) else f"{value},"
        for value in fields
    )
    return zlib.crc32(encoded.encode("utf-8"))


def raw_sqlite(path: str, synchronous: str) -> sqlite3.Connection:
    """A raw autocommit connection to the store's file, in WAL mode at ``synchronous``."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    return conn


def fill_sqlite(path: str, sizes: dict[str, int]) -> None:
    """Insert ``sizes[session]`` steps per session straight into a SqliteStore's file."""
    conn = raw_sqlite(path, "normal")
    conn.execute("BEGIN")
    for session, count in sizes.items():
        rows = (
            sqlite_row(RunStep(session, i, StepType.tool_result, content="y" * 200))
            for i in range(count)
        )
        conn.executemany(SQLITE_INSERT, rows)
    conn.execute("COMMIT")
    conn.close()


# -- PostgreSQL ---------------------------------------------------------------------

_PG_COLUMNS = f"{_FIELDS}completion_tokens, created_at, append_key"


def new_key() -> int:
    """A random 63-bit append key."""
    return _keys.getrandbits(63)


def pg_schema(schema: str) -> str:
    """``schema`` quoted as an SQL identifier."""
    return '"' + schema.replace('"', '""') + '"'


def pg_table(schema: str) -> str:
    """The quoted ``steps`` table of ``schema``."""
    return f"{pg_schema(schema)}.steps"


def pg_insert(schema: str) -> str:
    """One step's INSERT, skipped when its key is already stored (as the store's is)."""
    return (
        f"INSERT INTO {pg_table(schema)} ({_PG_COLUMNS}) "
        "VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
    )


def pg_last_n(schema: str) -> str:
    """The newest ``%s`` steps of a session, newest first, on the ``(session_id, seq)`` index."""
    return (
        f"SELECT step_index, step_type, content, content_nul, tool_args::text, duration_ms, "
        f"prompt_tokens, completion_tokens, created_at FROM {pg_table(schema)} "
        "WHERE session_id = %s ORDER BY seq DESC LIMIT %s"
    )


def pg_sessions(schema: str) -> str:
    """The quoted ``sessions`` table of ``schema``."""
    return f"{pg_schema(schema)}.sessions"


_PG_SESSION = "model, system_prompt, system_prompt_nul, data::text"


def pg_get(schema: str) -> str:
    """One session's row by its primary key."""
    return f"SELECT {_PG_SESSION} FROM {pg_sessions(schema)} WHERE id = %s"


def pg_get_many(schema: str) -> str:
    """The rows of a list of session ids, by the primary key."""
    return f"SELECT id, {_PG_SESSION} FROM {pg_sessions(schema)} WHERE id = ANY(%s)"


def pg_list_sessions(schema: str) -> str:
    """The ``%s`` most recently written sessions, on the ``sessions_by_write`` index."""
    return (
        "SELECT write_seq, id, final_status, step_total, created_at, updated_at, labels "
        f"FROM {pg_sessions(schema)} ORDER BY write_seq DESC LIMIT %s"
    )


def pg_copy(schema: str) -> str:
    """``COPY`` into ``schema``'s table, a row as :func:`pg_row` gives it."""
    return f"COPY {pg_table(schema)} ({_PG_COLUMNS}) FROM STDIN"


def pg_row(step: RunStep, key: int | None = None) -> list[Any]:
    """``step`` as the parameters of :func:`pg_insert`, with ``key`` (a fresh one if ``None``)."""
    return [*_common(step), step.created_at, new_key() if key is None else key]


def fill_pg(dsn: str, schema: str, sizes: dict[str, int]) -> None:
    """``COPY`` ``sizes[session]`` steps per session into ``schema``'s table, then ``ANALYZE``."""
    import psycopg

    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(pg_copy(schema)) as out:
            for session, count in sizes.items():
                for i in range(count):
                    out.write_row(pg_row(RunStep(session, i, StepType.tool_result, "y" * 200)))
        cur.execute(f"ANALYZE {pg_table(schema)}")


def drop_pg_schema(dsn: str, *schemas: str) -> None:
    """Drop each of ``schemas`` and everything in it (those that exist)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '30s'")  # never wait forever on a straggling session
        for schema in schemas:
            conn.execute(f"DROP SCHEMA IF EXISTS {pg_schema(schema)} CASCADE")


def _common(step: RunStep) -> tuple[object, ...]:
    return (
        step.session_id,
        step.step_index,
        step.step_type.value,
        step.content,
        step.tool_args,
        step.duration_ms,
        step.prompt_tokens,
        step.completion_tokens,
    )
