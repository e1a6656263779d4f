"""What a ``PostgresStore`` schema must look like, checked before ``open`` changes anything.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop import StoreError
from agentloop._shared import preview

if TYPE_CHECKING:
    import psycopg

_TSTZ = "timestamp with time zone"
_SESSIONS = (
    ("id", "text"),
    ("model", "text"),
    ("system_prompt", "text"),
    ("system_prompt_nul", "bytea"),
    ("data", "jsonb"),
    ("final_status", "text"),
    ("final_prompt_tokens", "integer"),
    ("final_completion_tokens", "integer"),
    ("final_step_count", "integer"),
    ("final_duration_ms", "integer"),
    ("final_data_bytes", "bigint"),
    ("final_key", "bigint"),
    ("step_total", "bigint"),
    ("created_at", _TSTZ),
    ("updated_at", _TSTZ),
    ("write_seq", "bigint"),
)
_STEPS = (
    ("seq", "bigint"),
    ("session_id", "text"),
    ("step_index", "integer"),
    ("step_type", "text"),
    ("content", "text"),
    ("content_nul", "bytea"),
    ("tool_args", "jsonb"),
    ("duration_ms", "integer"),
    ("prompt_tokens", "integer"),
    ("completion_tokens", "integer"),
    ("created_at", _TSTZ),
    ("append_key", "bigint"),
)
_FINALIZE_KEYS = (("session_id", "text"), ("key", "bigint"))
_LEASES = (("session_id", "text"), ("owner", "text"), ("token", "bigint"), ("expires_at", _TSTZ))
_REVISION_FLOORS = (("session_id", "text"), ("revision", "bigint"))
_VERSION_TABLE = (("version", "integer"),)

# The tables (with their columns, in order) each schema version added; version
# 3 changed only indexes. A version missing here has the previous one's.
_TABLES_FROM: dict[int, dict[str, tuple[tuple[str, str], ...]]] = {
    1: {"schema_version": _VERSION_TABLE, "sessions": _SESSIONS, "steps": _STEPS},
    2: {"finalize_keys": _FINALIZE_KEYS},
    4: {"leases": _LEASES},
    5: {"revision_floors": _REVISION_FLOORS},
}
_OURS = (
    "schema_version",
    "sessions",
    "steps",
    "finalize_keys",
    "leases",
    "revision_floors",
    "session_writes",
)
SYSTEM_SCHEMAS = ("information_schema",)  # and every name starting with pg_

_COLUMNS = (
    "SELECT c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod) "
    "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
    "AND NOT a.attisdropped WHERE n.nspname = %s AND c.relname = ANY(%s) "
    "ORDER BY c.relname, a.attnum"
)


def is_system_schema(name: str) -> bool:
    """Whether ``name`` is one of PostgreSQL's own schemas, never a home for a store."""
    return name in SYSTEM_SCHEMAS or name.startswith("pg_")


def expected_tables(version: int) -> dict[str, tuple[tuple[str, str], ...]]:
    """Every table a schema at ``version`` has, with its ``(column, type)`` pairs in order."""
    tables: dict[str, tuple[tuple[str, str], ...]] = {}
    for since, added in _TABLES_FROM.items():
        if since <= version:
            tables.update(added)
    return tables


def inspect(conn: psycopg.Connection[Any], schema: str, newest: int) -> int | None:
    """The version of the store in ``schema``, or ``None`` if no store is there; read-only.

    Raises:
        StoreError: ``schema`` holds tables of the store's names but of another
            shape, a ``schema_version`` that is not one version in 1..``newest``
            (a newer one says so), or store tables without a version.
    """
    found: dict[str, list[tuple[str, str]]] = {}
    kinds: dict[str, str] = {}
    for name, kind, column, type_ in conn.execute(_COLUMNS, (schema, list(_OURS))).fetchall():
        kinds[name] = kind
        if column is not None and kind != "S":
            found.setdefault(name, []).append((column, type_))
    if not kinds:
        return None
    if "schema_version" not in kinds:
        names = ", ".join(sorted(kinds))
        raise StoreError(
            f"schema {schema!r} has {names} but no schema_version table: not an agentloopsql "
            "store (or a damaged one); refusing to change it"
        )
    version = _read_version(conn, schema, found.get("schema_version", []), newest)
    expected = expected_tables(version)
    for table in sorted(set(kinds) - set(expected) - {"session_writes"}):
        raise StoreError(
            f"schema {schema!r} is version {version} but already has {table!r}, which "
            "that version does not have (another application's?); refusing to change it"
        )
    for table, columns in expected.items():
        if kinds.get(table) != "r" or tuple(found.get(table, [])) != columns:
            raise StoreError(
                f"schema {schema!r}: table {table!r} is missing or not of the shape "
                f"agentloopsql version {version} created; refusing to change it"
            )
    if kinds.get("session_writes") != "S":
        raise StoreError(f"schema {schema!r}: sequence 'session_writes' is missing")
    return version


def _read_version(
    conn: psycopg.Connection[Any], schema: str, columns: list[tuple[str, str]], newest: int
) -> int:
    from psycopg import sql

    if tuple(columns) != _VERSION_TABLE:
        raise StoreError(
            f"schema {schema!r}: table 'schema_version' is not of agentloopsql's shape "
            f"(one integer column 'version'), has {preview(columns)}; refusing to change it"
        )
    query = sql.SQL("SELECT version FROM {}.schema_version").format(sql.Identifier(schema))
    rows = conn.execute(query).fetchall()
    if len(rows) != 1 or rows[0][0] is None or rows[0][0] < 1:
        held = preview([row[0] for row in rows])
        raise StoreError(
            f"schema {schema!r}: schema_version must hold one version >= 1, holds {held} "
            "(damaged or not agentloopsql's); refusing to change it"
        )
    version = int(rows[0][0])
    if version > newest:
        raise StoreError(
            f"schema {schema!r} is version {version}, newer than this agentloopsql "
            f"supports ({newest}); upgrade agentloop"
        )
    return version
