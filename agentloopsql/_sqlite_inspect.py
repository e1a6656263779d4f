"""Whether a SQLite file is agentloopsql's, judged by reading it before anything changes.

A file is ours when its ``user_version`` is a schema version this release
knows (0 to the latest) and every table and index of ours in it has exactly
the shape that version's migrations create: the same columns (name,
declared type, ``NOT NULL``, default, primary key), the same named indexes
and no other unique index on our tables (one could refuse our writes). The
expected shape is not written down twice: it is read back from a private
in-memory database that ran the migrations, with the same introspection.

Other applications' tables, views, triggers and non-unique indexes are left
alone and do not matter, so a file may hold another application's tables
next to ours, as long as that application does not use ``user_version``.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import NamedTuple

from agentloop import StoreError
from agentloop._shared import preview
from agentloopsql._sqlite_paths import show_path

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


def _build(migrations: Migrations, version: int) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
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
