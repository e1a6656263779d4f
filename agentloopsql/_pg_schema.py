"""The PostgreSQL schema of a ``PostgresStore``: its versions, its expected shape, migrating it.

What a schema holds is checked before ``open`` changes anything (:func:`inspect`):
a schema with tables of the store's names in another shape, or a garbage
``schema_version``, is refused unchanged.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import psycopg
from psycopg import sql

from agentloop import StoreError
from agentloop._shared import preview

# Lower-case, unquoted-safe names only: the schema name is spliced into SQL
# (as a quoted identifier), so it must never be arbitrary input.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# Each entry migrates from version i to i + 1; ``{s}`` is the quoted schema.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE {s}.sessions (
            id text COLLATE "C" PRIMARY KEY,
            model text NOT NULL DEFAULT '',
            system_prompt text,
            system_prompt_nul bytea,
            data jsonb,
            final_status text,
            final_prompt_tokens integer,
            final_completion_tokens integer,
            final_step_count integer,
            final_duration_ms integer,
            final_data_bytes bigint,
            final_key bigint,
            step_total bigint NOT NULL DEFAULT 0,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            write_seq bigint NOT NULL,
            CHECK ((system_prompt IS NULL) <> (system_prompt_nul IS NULL))
        )
        """,
        "CREATE INDEX sessions_by_write ON {s}.sessions (write_seq)",
        "CREATE SEQUENCE {s}.session_writes",
        """
        CREATE TABLE {s}.steps (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id text COLLATE "C" NOT NULL,
            step_index integer NOT NULL,
            step_type text NOT NULL,
            content text,
            content_nul bytea,
            tool_args jsonb NOT NULL,
            duration_ms integer NOT NULL,
            prompt_tokens integer NOT NULL,
            completion_tokens integer NOT NULL,
            created_at timestamptz NOT NULL,
            append_key bigint,
            CHECK ((content IS NULL) <> (content_nul IS NULL))
        )
        """,
        "CREATE INDEX steps_by_session ON {s}.steps (session_id, seq)",
    ),
    (
        # Every finalize's random key, so a retried finalize is applied at most
        # once even when a concurrent finalize has since replaced final_key.
        """
        CREATE TABLE {s}.finalize_keys (
            session_id text COLLATE "C" NOT NULL,
            key bigint NOT NULL,
            PRIMARY KEY (session_id, key)
        )
        """,
        # Sessions finalized before this version: their current key, for the same check.
        "INSERT INTO {s}.finalize_keys SELECT id, final_key FROM {s}.sessions "
        "WHERE final_key IS NOT NULL",
    ),
    (
        # A retried append (after its connection was lost on the client side
        # only) may run while its lost attempt is still running on the server:
        # a unique key makes the second insert of one append a no-op. Rows the
        # old race already doubled are removed first, keeping the earliest. Key
        # first, so the planner never mistakes it for the by-session index.
        "LOCK TABLE {s}.steps IN SHARE ROW EXCLUSIVE MODE",
        "DELETE FROM {s}.steps AS later USING {s}.steps AS earlier "
        "WHERE later.session_id = earlier.session_id AND later.append_key = earlier.append_key "
        "AND later.seq > earlier.seq",
        "CREATE UNIQUE INDEX steps_append_once ON {s}.steps (append_key, session_id)",
    ),
    (
        # One row per session ever leased, never deleted (so tokens only grow);
        # expires_at (the server's clock) is NULL once the lease is released.
        """
        CREATE TABLE {s}.leases (
            session_id text COLLATE "C" PRIMARY KEY,
            owner text NOT NULL,
            token bigint NOT NULL,
            expires_at timestamptz
        )
        """,
    ),
    (
        # A deleted session's last revision (its write_seq), never deleted: its
        # revision never gets smaller (write_seq comes from a sequence, so later
        # writes go above it anyway).
        """
        CREATE TABLE {s}.revision_floors (
            session_id text COLLATE "C" PRIMARY KEY,
            revision bigint NOT NULL
        )
        """,
    ),
    (
        # The session lifecycle. labels: canonical JSON text; created_seq: the
        # write_seq of the session's first write (the "created" paging order;
        # sessions from before keep their latest write's), set by a trigger.
        "ALTER TABLE {s}.sessions ADD COLUMN labels text NOT NULL DEFAULT '{{}}', "
        "ADD COLUMN created_seq bigint NOT NULL DEFAULT 0",
        "UPDATE {s}.sessions SET created_seq = write_seq",
        "CREATE INDEX sessions_by_created ON {s}.sessions (created_seq)",
        "CREATE INDEX sessions_by_updated ON {s}.sessions (updated_at)",
        """
        CREATE TABLE {s}.session_labels (
            session_id text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            value text COLLATE "C" NOT NULL,
            write_seq bigint NOT NULL,
            created_seq bigint NOT NULL,
            PRIMARY KEY (session_id, key)
        )
        """,
        "CREATE INDEX session_labels_by_write ON {s}.session_labels (key, value, write_seq)",
        "CREATE INDEX session_labels_by_created ON {s}.session_labels (key, value, created_seq)",
        """
        CREATE FUNCTION {s}.session_created() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.created_seq := NEW.write_seq; RETURN NEW; END $$
        """,
        "CREATE TRIGGER session_created BEFORE INSERT ON {s}.sessions "
        "FOR EACH ROW EXECUTE FUNCTION {s}.session_created()",
        # Every session write moves write_seq: the label rows follow it.
        """
        CREATE FUNCTION {s}.session_labels_follow() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE {s}.session_labels SET write_seq = NEW.write_seq WHERE session_id = NEW.id;
            RETURN NULL;
        END $$
        """,
        "CREATE TRIGGER session_labels_follow AFTER UPDATE OF write_seq ON {s}.sessions "
        "FOR EACH ROW WHEN (OLD.write_seq IS DISTINCT FROM NEW.write_seq) "
        "EXECUTE FUNCTION {s}.session_labels_follow()",
        # Per-schema values; cursor_secret signs page_sessions cursors.
        'CREATE TABLE {s}.meta (key text COLLATE "C" PRIMARY KEY, value text NOT NULL)',
        "INSERT INTO {s}.meta VALUES ('cursor_secret', "
        "md5(gen_random_uuid()::text) || md5(gen_random_uuid()::text))",
    ),
)


SCHEMA_VERSION = len(MIGRATIONS)

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
_SESSIONS_6 = (*_SESSIONS, ("labels", "text"), ("created_seq", "bigint"))
_SESSION_LABELS = (
    ("session_id", "text"),
    ("key", "text"),
    ("value", "text"),
    ("write_seq", "bigint"),
    ("created_seq", "bigint"),
)
_META = (("key", "text"), ("value", "text"))

# The tables (with their columns, in order) each schema version added (6 also
# changed sessions'); version 3 changed only indexes. A version missing here
# has the previous one's.
_TABLES_FROM: dict[int, dict[str, tuple[tuple[str, str], ...]]] = {
    1: {"schema_version": _VERSION_TABLE, "sessions": _SESSIONS, "steps": _STEPS},
    2: {"finalize_keys": _FINALIZE_KEYS},
    4: {"leases": _LEASES},
    5: {"revision_floors": _REVISION_FLOORS},
    6: {"sessions": _SESSIONS_6, "session_labels": _SESSION_LABELS, "meta": _META},
}
_OURS = (
    "schema_version",
    "sessions",
    "steps",
    "finalize_keys",
    "leases",
    "revision_floors",
    "session_labels",
    "meta",
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
    if version >= _TRIGGERS_FROM:
        _check_triggers(conn, schema, version)
    return version


_TRIGGERS_FROM = 6
_TRIGGERS = ("session_created", "session_labels_follow")


def _check_triggers(conn: psycopg.Connection[Any], schema: str, version: int) -> None:
    """Refuse a lifecycle schema whose sessions table lacks one of the store's triggers."""
    rows = conn.execute(
        "SELECT t.tgname FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c "
        "ON c.oid = t.tgrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = 'sessions' AND NOT t.tgisinternal",
        (schema,),
    ).fetchall()
    found = {row[0] for row in rows}
    for name in _TRIGGERS:
        if name not in found:
            raise StoreError(
                f"schema {schema!r} is version {version} but trigger {name!r} on 'sessions' "
                "is missing (damaged or changed by hand); refusing to change it"
            )


def _read_version(
    conn: psycopg.Connection[Any], schema: str, columns: list[tuple[str, str]], newest: int
) -> int:
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


def validate_schema(name: object) -> str:
    """Check a schema name: 1-63 of ``[a-z0-9_]``, not starting with a digit or ``pg_``.

    Raises:
        TypeError: ``name`` is not a ``str``.
        ValueError: ``name`` is not such a name.
    """
    if not isinstance(name, str):
        raise TypeError(f"schema must be a str, got {preview(name)}")
    if not _SCHEMA_NAME.fullmatch(name):
        raise ValueError(
            "schema must be 1-63 characters of a-z, 0-9 and _, not starting with a digit, "
            f"got {preview(name)}"
        )
    if name.startswith("pg_"):  # PostgreSQL refuses to create schemas with this prefix
        raise ValueError(f"schema must not start with 'pg_' (reserved by PostgreSQL), got {name!r}")
    if is_system_schema(name):
        raise ValueError(f"schema must not be a PostgreSQL system schema, got {name!r}")
    return name


def lock_key(schema: str) -> int:
    """The advisory-lock key that serializes migrations of ``schema``."""
    digest = hashlib.blake2b(f"agentloopsql:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def render(conn: psycopg.Connection[Any], schema: str, text: str) -> str:
    """``text`` with ``{s}`` replaced by the quoted schema identifier."""
    return sql.SQL(text).format(s=sql.Identifier(schema)).as_string(conn)


def migrate(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create or upgrade ``schema`` to :data:`SCHEMA_VERSION` in one transaction.

    What is there is checked first, read-only: a schema holding tables of the
    store's names in another shape, or a garbage ``schema_version``, is refused
    unchanged. A schema already at this version is only read (no DDL, no lock),
    so a role with nothing but ``USAGE`` and table/sequence DML privileges can
    open a migrated schema (a check that fails unlocked, perhaps because a
    migration committed while it read, is repeated under the lock before it is
    believed). Otherwise the migration holds a transaction-scoped
    advisory lock keyed on the schema name, so of several processes opening
    at once one migrates and the others wait, then find the work done.
    Idempotent.

    Raises:
        StoreError: the schema is newer than this version of agentloopsql, or
            foreign or damaged (see :func:`inspect`).
        psycopg.Error: PostgreSQL refused; nothing was changed.
    """
    try:
        if inspect(conn, schema, SCHEMA_VERSION) == SCHEMA_VERSION:
            return
    except StoreError:
        # Unlocked, the catalog and schema_version are read by two statements:
        # a migration committing between them looks like a damaged schema.
        # Judged again under the lock, where no migration runs.
        pass
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema),))
        version = inspect(conn, schema, SCHEMA_VERSION)  # another process may have migrated
        if version == SCHEMA_VERSION:
            return
        if version is None:
            conn.execute(render(conn, schema, "CREATE SCHEMA IF NOT EXISTS {s}"))
            conn.execute(render(conn, schema, "CREATE TABLE {s}.schema_version (version integer)"))
            conn.execute(render(conn, schema, "INSERT INTO {s}.schema_version VALUES (0)"))
            version = 0
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(render(conn, schema, statement))
        conn.execute(
            render(conn, schema, "UPDATE {s}.schema_version SET version = %s"), (SCHEMA_VERSION,)
        )
