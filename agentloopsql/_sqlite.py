"""``SqliteStore``: both protocols over one SQLite file, one connection thread.

This module holds the store, the SQL of every operation (leases included),
how ``steps`` and ``sessions`` rows become values (each checked against its
checksum first), and the inline reader.

**Rows back into values** follow one rule for both stores, on what each row
holds (``_codec.step_of``); here ``created_us`` is range-checked and turned into
a UTC ``datetime`` first.

**Inline reads** (the one exception to "no blocking I/O on the event-loop
thread"; measured in ``docs/decisions.md``). A hop to the worker thread and
back costs more than reading the newest steps of a session. So ``last_n``
(windows up to ``SHORT_WINDOW`` steps) and ``get`` run on a second
connection, opened read-only (``mode=ro``) on the same WAL file, directly on
the event-loop thread, only when they cannot wait: the connection's
``busy_timeout`` is 0, so a read that would wait for a lock (exclusive
locking mode, WAL recovery) fails at once and the call goes to the worker
thread instead; both reads walk an index; any other SQLite error, or the
connection being in use by another thread (a store shared between event
loops in several threads), also sends the call to the worker, which reports
failures as usual. A WAL reader never waits for the writer and sees every
commit made before it starts, so a caller reads its own acknowledged writes.
``":memory:"`` databases have no second connection: every call goes to the
worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import trio

from agentloop import FinalizeSummary, Lease, RunStep, Session, SessionInfo, StoreError
from agentloop._shared import (
    check_fence,
    check_granted,
    check_renewable,
    check_seconds,
    on_trio,
    preview,
)
from agentloopsql import _codec
from agentloopsql._sqlite_exec import SqliteExecutor
from agentloopsql._sqlite_schema import (
    SESSION_COLUMNS,
    SYNCHRONOUS,
    SessionRow,
    checked_path,
    connect,
    session_sum,
    step_sum,
)
from agentloopsql._store import Grant, SqlStore, taken, unknown_source
from agentloopsql._workers import Read, Workers, to_thread_shielded

R = TypeVar("R")

_MICROSECOND = timedelta(microseconds=1)  # times an int: cheaper than timedelta(0, 0, n)
MICROS_MIN = _codec.to_micros(datetime.min.replace(tzinfo=UTC))
MICROS_MAX = _codec.to_micros(datetime.max.replace(tzinfo=UTC))


READ_COLUMNS = (
    "step_index, step_type, content, tool_args, duration_ms, prompt_tokens, "
    "completion_tokens, created_us, checksum, seq"
)
"""What a read selects, in the order :func:`steps_of` takes: the fields but the session id,
the row's checksum and its position."""


def damaged(table: str, session_id: str | None, where: str, why: str) -> StoreError:
    """The permanent error of a stored row that is not what was written; never its content.

    ``session_id`` is ``None`` for a read of many sessions that cannot tell whose row failed.
    """
    whose = f" of session {session_id!r}" if session_id is not None else ""
    return StoreError(
        f"SQLite {table} row{whose} ({where}) is damaged: {why}; "
        "the file was changed outside agentloopsql (a failing disk, a stray write); "
        "retrying will not help"
    )


def steps_of(session_id: str, rows: list[tuple[Any, ...]]) -> list[RunStep]:
    """The ``RunStep`` of each row of :data:`READ_COLUMNS`, in order, of the session asked for.

    Each row's checksum is checked against its fields and the session asked
    for, so a damaged row, or one moved to another session, is never returned.

    Raises:
        StoreError: a row's checksum does not match, or the row breaks
            ``RunStep``'s rules; the message names the session, the step
            index and the row's position (``seq``), never the content.
    """
    found = []
    for index, kind, content, args, duration, prompt, completion, micros, stored, seq in rows:
        try:
            in_range = micros.__class__ is int and MICROS_MIN <= micros <= MICROS_MAX
            created = (
                _codec.EPOCH + _MICROSECOND * micros if in_range else _codec.from_micros(micros)
            )
            step = _codec.step_of(
                session_id, index, kind, content, args, duration, prompt, completion, created
            )
        except (TypeError, ValueError, OverflowError) as exc:
            error = damaged(
                "steps", session_id, _at(index, seq), "its fields break RunStep's rules"
            )
            raise error from exc
        fields = (index, kind, content, args, duration, prompt, completion, micros)
        if step_sum(session_id, *fields) != stored:
            raise damaged("steps", session_id, _at(index, seq), "its checksum does not match")
        found.append(step)
    return found


def _at(index: object, seq: object) -> str:
    shown = index if index.__class__ is int else "unreadable"
    return f"step index {shown}, row seq {seq}"


def fetch_rows(
    conn: sqlite3.Connection,
    sql: str,
    params: tuple[object, ...],
    session_id: str | None,
    table: str = "steps",
) -> list[tuple[Any, ...]]:
    """The rows of a read of ``table``; text SQLite cannot decode, or a damaged page, is
    :func:`damaged` (permanent), never the raw ``sqlite3`` error quoting the text."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorname", None) or "decode"  # decode errors carry none
        if not (code.startswith("SQLITE_CORRUPT") or "decode" in str(exc)):
            raise
        where = "one of its rows" if session_id is not None else "one of the rows read"
        error = damaged(table, session_id, where, f"SQLite read failed ({code})")
    raise error from None


SESSION_READ = "rowid, " + ", ".join(SESSION_COLUMNS) + ", checksum"
"""What a sessions read selects, in the order :func:`checked_session` takes."""


def checked_session(row: tuple[Any, ...]) -> SessionRow:
    """The columns of a row of :data:`SESSION_READ`, once its checksum matches them.

    Raises:
        StoreError: the checksum does not match (:func:`damaged`, naming the
            session's stored id and the row's ``rowid``, never its content).
    """
    fields = SessionRow(*row[1:-1])
    if session_sum(*fields) != row[-1]:
        shown = fields.id if fields.id.__class__ is str else "unreadable"
        raise damaged("sessions", shown, f"rowid {row[0]}", "its checksum does not match")
    return fields


def _decoded(row: tuple[Any, ...], build: Callable[[SessionRow], R]) -> R:
    """``build`` of the checked row; a row breaking the value types' rules is :func:`damaged`."""
    fields = checked_session(row)
    try:
        return build(fields)
    except (TypeError, ValueError, OverflowError) as exc:
        why = "its fields break the session types' rules"
        raise damaged("sessions", fields.id, f"rowid {row[0]}", why) from exc


def _session(row: SessionRow) -> Session:
    return _codec.session_of(row.id, row.model, row.system_prompt, row.data)


def _final(row: SessionRow) -> FinalizeSummary | None:
    return _codec.final_from_row(row[4:10])


def _info(row: SessionRow) -> SessionInfo:
    created, updated = _codec.from_micros(row.created_us), _codec.from_micros(row.updated_us)
    return _codec.info(row.id, row.final_status, row.step_total, created, updated, row.labels)


_STEP_COLUMNS = (
    "session_id, step_index, step_type, content, tool_args, "
    "duration_ms, prompt_tokens, completion_tokens, created_us"
)
_INSERT_STEP = (
    f"INSERT INTO steps ({_STEP_COLUMNS}, checksum) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_LAST_N = f"SELECT {READ_COLUMNS} FROM steps WHERE session_id = ? ORDER BY seq DESC LIMIT ?"
_ALL = f"SELECT {READ_COLUMNS} FROM steps WHERE session_id = ? ORDER BY seq"
# Above every write_seq stored and every deleted session's (so revisions never repeat).
_NEXT_WRITE = (
    "(SELECT max(coalesce((SELECT max(write_seq) FROM sessions), 0), "
    "coalesce((SELECT max(revision) FROM revision_floors), 0)) + 1)"
)
_S_READ = ", ".join(f"s.{c}" for c in SESSION_READ.split(", "))
_SESSION = f"SELECT {SESSION_READ} FROM sessions WHERE id = ?"
# The session's row (all NULL when it has none) and the write number a write of it takes.
_FOR_WRITE = f"SELECT {_NEXT_WRITE}, {_S_READ} FROM (SELECT 1) LEFT JOIN sessions AS s ON s.id = ?"
_SAVE = (
    f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}, checksum) "
    f"VALUES ({', '.join('?' * (len(SESSION_COLUMNS) + 1))}) ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*SESSION_COLUMNS[1:], "checksum"))
)
_PAGE = {
    # (order, filtered by one label pair): the page query, walking one index.
    ("updated", False): f"SELECT write_seq, {SESSION_READ} FROM sessions WHERE write_seq < ?1 "
    "ORDER BY write_seq DESC LIMIT ?2",
    ("created", False): f"SELECT created_seq, {SESSION_READ} FROM sessions "
    "WHERE created_seq > ?1 ORDER BY created_seq LIMIT ?2",
    ("updated", True): f"SELECT l.write_seq, {_S_READ} "
    "FROM session_labels AS l JOIN sessions AS s ON s.id = l.session_id "
    "WHERE l.key = ?3 AND l.value = ?4 AND l.write_seq < ?1 ORDER BY l.write_seq DESC LIMIT ?2",
    ("created", True): f"SELECT l.created_seq, {_S_READ} "
    "FROM session_labels AS l JOIN sessions AS s ON s.id = l.session_id "
    "WHERE l.key = ?3 AND l.value = ?4 AND l.created_seq > ?1 ORDER BY l.created_seq LIMIT ?2",
}
# The session's label rows, rebuilt from its labels column.
_LABEL_ROWS = (
    "INSERT INTO session_labels (session_id, key, value, write_seq, created_seq) "
    "SELECT s.id, j.key, j.value, s.write_seq, s.created_seq FROM sessions AS s, "
    "json_each(s.labels) AS j WHERE s.id = ?"
)
# The skipped steps are counted in the (session_id, seq) index alone, never read: a range
# deep into a long session costs about what one near its start does.
_STEPS_AFTER = (
    f"SELECT {READ_COLUMNS} FROM steps WHERE session_id = ?1 AND seq >= (SELECT seq FROM steps "
    "WHERE session_id = ?1 ORDER BY seq LIMIT 1 OFFSET ?3) ORDER BY seq LIMIT ?2"
)
# Everything but the newest ?2 + 1 steps... of the session: the seq of its (?2 + 1)-th newest.
_PRUNE = (
    "DELETE FROM steps WHERE session_id = ?1 AND seq < (SELECT seq FROM steps "
    "WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)"
)
_COPY_STEPS = f"SELECT {READ_COLUMNS} FROM steps WHERE session_id = ?1 ORDER BY seq LIMIT ?2"


def _infos(rows: list[tuple[Any, ...]]) -> list[tuple[int, SessionInfo]]:
    """``(position, info)`` of each row of ``position, {SESSION_READ}``."""
    return [(row[0], _decoded(row[1:], _info)) for row in rows]


def _stored(conn: sqlite3.Connection, session_id: str) -> SessionRow | None:
    """The session's row, checked, or ``None`` if it has none."""
    rows = fetch_rows(conn, _SESSION, (session_id,), session_id, "sessions")
    return checked_session(rows[0]) if rows else None


def _to_write(conn: sqlite3.Connection, session_id: str, now: int) -> SessionRow:
    """The session's row (checked) or a new row's defaults, stamped with a fresh write at ``now``.

    Every write reads the row it changes and writes it whole with its new
    checksum (:func:`_save`), so a damaged row is refused, never rewritten
    under a fresh checksum that would make its damage pass.
    """
    found = fetch_rows(conn, _FOR_WRITE, (session_id,), session_id, "sessions")[0]
    seq = found[0]
    if found[1] is None:
        return SessionRow(session_id, "", "", None, *(None,) * 6, 0, now, now, seq, "{}", seq)
    return _with(checked_session(found[1:]), updated_us=now, write_seq=seq)


def _finals(summary: FinalizeSummary | None) -> dict[str, Any]:
    """The final_* columns of a row holding ``summary`` (all NULL for ``None``)."""
    values = _codec.final_params(summary) if summary is not None else (None,) * 6
    return dict(zip(_codec.FINAL_COLUMNS, values, strict=True))


def _with(row: SessionRow, **changes: Any) -> SessionRow:
    """``row`` with the columns named in ``changes`` replaced."""
    return SessionRow(**{**dict(zip(SESSION_COLUMNS, row, strict=True)), **changes})


def _save(conn: sqlite3.Connection, row: SessionRow) -> None:
    """Write ``row`` whole, with its checksum (the upsert fires ``session_labels_follow``)."""
    conn.execute(_SAVE, (*row, session_sum(*row)))


def step_params(step: RunStep, session_id: str | None = None) -> tuple[object, ...]:
    """The values of one ``steps`` row (of ``session_id``, default the step's), checksum last."""
    fields = (
        step.session_id if session_id is None else session_id,
        step.step_index,
        step.step_type.value,
        step.content,
        step.tool_args,
        step.duration_ms,
        step.prompt_tokens,
        step.completion_tokens,
        _codec.to_micros(step.created_at),
    )
    return (*fields, step_sum(*fields))


class SqliteOps:
    """The SQL of every operation; each runs inside the connection thread's transaction.

    Every lease call and every fenced write runs inside the ``BEGIN IMMEDIATE``
    transaction the executor opened (each is a write), so no other handle or
    process can come between its read of the lease row and its write. Expiry is
    judged on this machine's clock, read in the connection thread.
    """

    def append(self, conn: sqlite3.Connection, step: RunStep, key: int) -> None:
        conn.execute(_INSERT_STEP, step_params(step))

    def append_landed(self, conn: sqlite3.Connection, session_id: str, key: int) -> bool:
        return False  # SQLite never loses a connection mid-call: no outcome is ever unknown

    def last_n(self, conn: sqlite3.Connection, session_id: str, n: int) -> list[RunStep]:
        rows = fetch_rows(conn, _LAST_N, (session_id, n), session_id)
        rows.reverse()
        return steps_of(session_id, rows)

    def all(self, conn: sqlite3.Connection, session_id: str) -> list[RunStep]:
        return steps_of(session_id, fetch_rows(conn, _ALL, (session_id,), session_id))

    def get(self, conn: sqlite3.Connection, session_id: str) -> Session | None:
        rows = fetch_rows(conn, _SESSION, (session_id,), session_id, "sessions")
        return _decoded(rows[0], _session) if rows else None

    def exists(self, conn: sqlite3.Connection, session_id: str) -> bool:
        row = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return row is not None

    def update_data(self, conn: sqlite3.Connection, session_id: str, snapshot: str | None) -> None:
        row = _to_write(conn, session_id, _codec.to_micros(_codec.now()))
        _save(conn, _with(row, data=snapshot))

    def put(self, conn: sqlite3.Connection, session: Session) -> None:
        row = _to_write(conn, session.id, _codec.to_micros(_codec.now()))
        _save(
            conn,
            _with(row, model=session.model, system_prompt=session.system_prompt, data=session.data),
        )

    def finalize(
        self, conn: sqlite3.Connection, session_id: str, summary: FinalizeSummary, key: int
    ) -> None:
        row = _to_write(conn, session_id, _codec.to_micros(_codec.now()))
        total = row.step_total + summary.step_count
        _save(conn, _with(row, step_total=total, **_finals(summary)))

    def finalize_landed(self, conn: sqlite3.Connection, session_id: str, key: int) -> bool:
        return False  # see append_landed

    def final(self, conn: sqlite3.Connection, session_id: str) -> FinalizeSummary | None:
        rows = fetch_rows(conn, _SESSION, (session_id,), session_id, "sessions")
        return _decoded(rows[0], _final) if rows else None

    def list_sessions(self, conn: sqlite3.Connection, limit: int) -> list[SessionInfo]:
        rows = fetch_rows(
            conn,
            f"SELECT write_seq, {SESSION_READ} FROM sessions ORDER BY write_seq DESC LIMIT ?",
            (limit,),
            None,
            "sessions",
        )
        return [info for _, info in _infos(rows)]

    def delete_session(self, conn: sqlite3.Connection, session_id: str) -> bool:
        # The floor is a fresh write number: the revision grows, so a stale
        # update_data_if fails after the delete.
        conn.execute(
            "INSERT INTO revision_floors (session_id, revision) "
            f"SELECT id, {_NEXT_WRITE} FROM sessions WHERE id = ? "
            "ON CONFLICT (session_id) DO UPDATE SET revision = excluded.revision",
            (session_id,),
        )
        conn.execute("DELETE FROM session_labels WHERE session_id = ?", (session_id,))
        steps = conn.execute("DELETE FROM steps WHERE session_id = ?", (session_id,)).rowcount
        rows = conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount
        return steps + rows > 0

    def get_many(self, conn: sqlite3.Connection, session_ids: list[str]) -> dict[str, Session]:
        rows = fetch_rows(
            conn,
            f"SELECT {SESSION_READ} FROM sessions WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(session_ids),),
            None,
            "sessions",
        )
        found = [_decoded(row, _session) for row in rows]
        return {session.id: session for session in found}

    def revision(self, conn: sqlite3.Connection, session_id: str) -> int:
        row = _stored(conn, session_id)
        if row is not None:
            return row.write_seq
        floor = conn.execute(
            "SELECT revision FROM revision_floors WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(floor[0]) if floor is not None else 0

    def update_data_if(
        self, conn: sqlite3.Connection, session_id: str, snapshot: str | None, revision: int
    ) -> tuple[bool, int]:
        # One transaction on the store's one write connection: nothing lands between.
        current = self.revision(conn, session_id)
        if current != revision:
            return False, current
        self.update_data(conn, session_id, snapshot)
        return True, self.revision(conn, session_id)

    # -- the session lifecycle ------------------------------------------------

    def cursor_secret(self, conn: sqlite3.Connection) -> str:
        return str(conn.execute("SELECT value FROM meta WHERE key = 'cursor_secret'").fetchone()[0])

    def page(
        self,
        conn: sqlite3.Connection,
        order: str,
        pair: tuple[str, str] | None,
        after: int,
        limit: int,
    ) -> list[tuple[int, SessionInfo]]:
        params: tuple[object, ...] = (after, limit) if pair is None else (after, limit, *pair)
        sql = _PAGE[order, pair is not None]
        return _infos(fetch_rows(conn, sql, params, None, "sessions"))

    def session_info(self, conn: sqlite3.Connection, session_id: str) -> SessionInfo | None:
        rows = fetch_rows(conn, _SESSION, (session_id,), session_id, "sessions")
        return _decoded(rows[0], _info) if rows else None

    def set_labels(self, conn: sqlite3.Connection, session_id: str, labels: str) -> None:
        row = _to_write(conn, session_id, _codec.to_micros(_codec.now()))
        _save(conn, _with(row, labels=labels))
        conn.execute("DELETE FROM session_labels WHERE session_id = ?", (session_id,))
        conn.execute(_LABEL_ROWS, (session_id,))

    def prune_steps(self, conn: sqlite3.Connection, session_id: str, keep: int) -> int:
        removed = conn.execute(_PRUNE, (session_id, keep - 1)).rowcount
        if removed:
            _give_back(conn)
        return int(removed)

    def steps_after(
        self, conn: sqlite3.Connection, session_id: str, after: int, limit: int
    ) -> list[RunStep]:
        rows = fetch_rows(conn, _STEPS_AFTER, (session_id, limit, after), session_id)
        return steps_of(session_id, rows)

    def _held_anything(self, conn: sqlite3.Connection, session_id: str) -> bool:
        return (
            self.exists(conn, session_id)
            or conn.execute(
                "SELECT 1 FROM steps WHERE session_id = ? LIMIT 1", (session_id,)
            ).fetchone()
            is not None
        )

    def fork_session(
        self, conn: sqlite3.Connection, source_id: str, new_id: str, keep: int | None
    ) -> None:
        if not self._held_anything(conn, source_id):
            raise unknown_source(source_id)
        if self._held_anything(conn, new_id):
            raise taken(new_id)
        source = _stored(conn, source_id)
        row = _to_write(conn, new_id, _codec.to_micros(_codec.now()))
        if source is not None:
            row = _with(
                row,
                model=source.model,
                system_prompt=source.system_prompt,
                data=source.data,
                labels=source.labels,
            )
        _save(conn, row)
        conn.execute(_LABEL_ROWS, (new_id,))
        # Through the checked reader: a damaged row is refused, never copied with a new checksum.
        rows = fetch_rows(conn, _COPY_STEPS, (source_id, -1 if keep is None else keep), source_id)
        copied = steps_of(source_id, rows)
        conn.executemany(_INSERT_STEP, (step_params(step, new_id) for step in copied))

    def restore_session(
        self,
        conn: sqlite3.Connection,
        session: Session,
        info: SessionInfo,
        final: FinalizeSummary | None,
    ) -> None:
        if self._held_anything(conn, session.id):
            raise taken(session.id, "delete it first to replace it")
        row = _to_write(conn, session.id, _codec.to_micros(info.updated_at))
        _save(
            conn,
            _with(
                row,
                model=session.model,
                system_prompt=session.system_prompt,
                data=session.data,
                step_total=info.step_count,
                created_us=_codec.to_micros(info.created_at),
                labels=_codec.labels_text(info.labels),
                **_finals(final),
            ),
        )
        conn.execute(_LABEL_ROWS, (session.id,))

    def expire_sessions(self, conn: sqlite3.Connection, idle_for: float, limit: int) -> list[str]:
        # One BEGIN IMMEDIATE transaction (the file's write lock): processes
        # expiring at once take turns, so each session is deleted once.
        now = _codec.to_micros(_codec.now())
        cutoff = now - round(idle_for * 1_000_000)
        gone: list[str] = []
        after = -1
        walking = True  # until the walk meets a session written since the cutoff
        while walking and len(gone) < limit:
            rows = fetch_rows(
                conn,
                f"SELECT write_seq, {SESSION_READ} FROM sessions WHERE write_seq > ? "
                "ORDER BY write_seq LIMIT 64",
                (after,),
                None,
                "sessions",
            )
            if not rows:
                break
            for after, *read in rows:  # noqa: B007 - the walk's position
                try:
                    row = checked_session(tuple(read))
                except StoreError:
                    continue  # a damaged row is left for its reads to report, never judged
                session_id, updated = row.id, row.updated_us
                if updated >= cutoff:
                    walking = False
                    break
                if _take_over_idle(conn, session_id, now):
                    self.delete_session(conn, session_id)
                    gone.append(session_id)
                    if len(gone) == limit:
                        break
        if len(gone) < limit:
            # Steps without a session row, judged by their newest step.
            for (session_id,) in conn.execute(
                "SELECT session_id FROM steps WHERE session_id NOT IN (SELECT id FROM sessions) "
                "GROUP BY session_id HAVING max(created_us) < ? LIMIT ?",
                (cutoff, limit - len(gone)),
            ).fetchall():
                if _take_over_idle(conn, session_id, now):
                    self.delete_session(conn, session_id)
                    gone.append(session_id)
        return self._expired(conn, gone)

    def _expired(self, conn: sqlite3.Connection, gone: list[str]) -> list[str]:
        if gone:
            _give_back(conn)
        return gone

    def acquire_lease(
        self, conn: sqlite3.Connection, session_id: str, owner: str, ttl: float
    ) -> tuple[int, datetime] | None:
        now = _codec.to_micros(_codec.now())
        expires = now + round(ttl * 1_000_000)
        row = conn.execute(
            "SELECT owner, token, expires_us FROM leases WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            token = 1
            conn.execute("INSERT INTO leases VALUES (?, ?, ?, ?)", (session_id, owner, 1, expires))
        else:
            held_owner, token, held_until = row
            if held_until is not None and now < held_until:
                if held_owner != owner:
                    return None
            else:
                token += 1  # free, released or expired: a new grant, even for the same owner
            conn.execute(
                "UPDATE leases SET owner = ?, token = ?, expires_us = ? WHERE session_id = ?",
                (owner, token, expires, session_id),
            )
        return token, _codec.from_micros(expires)

    def renew_lease(self, conn: sqlite3.Connection, lease: Lease, ttl: float) -> datetime:
        check_renewable(lease, _held(conn, lease.session_id))
        expires = _codec.to_micros(_codec.now()) + round(ttl * 1_000_000)
        conn.execute(
            "UPDATE leases SET expires_us = ? WHERE session_id = ?", (expires, lease.session_id)
        )
        return _codec.from_micros(expires)

    def release_lease(self, conn: sqlite3.Connection, lease: Lease) -> None:
        held = _held(conn, lease.session_id)
        check_granted(lease, held)
        if held is not None and held.token == lease.token:
            conn.execute(
                "UPDATE leases SET expires_us = NULL WHERE session_id = ?", (lease.session_id,)
            )

    def fenced_write(
        self, conn: sqlite3.Connection, lease: Lease, write: Callable[[sqlite3.Connection], R]
    ) -> R:
        check_fence(lease, _held(conn, lease.session_id))
        return write(conn)


def _held(conn: sqlite3.Connection, session_id: str) -> Grant | None:
    """The session's lease row (one primary-key lookup), or ``None`` if never leased."""
    row = conn.execute(
        "SELECT owner, token, expires_us IS NULL FROM leases WHERE session_id = ?", (session_id,)
    ).fetchone()
    return Grant(row[0], row[1], bool(row[2])) if row is not None else None


def _take_over_idle(conn: sqlite3.Connection, session_id: str, now: int) -> bool:
    """Whether the session may expire (no live lease), its stale lease taken over."""
    row = conn.execute(
        "SELECT expires_us FROM leases WHERE session_id = ?", (session_id,)
    ).fetchone()
    if row is None or row[0] is None:
        return True
    if now < row[0]:
        return False
    # Expired, never released: a new, larger token, released, so the old
    # holder's fenced writes fail from now on.
    conn.execute(
        "UPDATE leases SET token = token + 1, expires_us = NULL WHERE session_id = ?",
        (session_id,),
    )
    return True


_INCREMENTAL = 2  # PRAGMA auto_vacuum's answer in incremental mode


def _give_back(conn: sqlite3.Connection) -> None:
    """Return the pages freed to the file system (a file with ``auto_vacuum=INCREMENTAL``;
    a no-op in any other)."""
    # Each run of the pragma through the driver frees one page: loop over the freelist.
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    if free and conn.execute("PRAGMA auto_vacuum").fetchone()[0] == _INCREMENTAL:
        for _ in range(free):
            conn.execute("PRAGMA incremental_vacuum(1)")


_OPS = SqliteOps()


class _Miss:
    """The read could not run inline; the worker thread will run it."""


MISS: Final = _Miss()


class InlineReader:
    """A read-only connection used on the event-loop thread; see the module docstring."""

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


class SqliteStore(SqlStore[sqlite3.Connection]):
    """A durable ``StepStore`` and ``SessionStore`` in one SQLite file.

    Open with ``await SqliteStore.open(path)``. Implements both protocols and
    every optional capability (``put``, ``final``, ``all``, ``list_sessions``,
    ``delete_session``, ``aclose``, session leases with ``fenced`` views,
    revisions, and the session lifecycle: ``page_sessions``, ``session_info``,
    ``set_labels``, ``prune_steps``, ``steps_after``, ``fork_session``,
    ``restore_session``, ``expire_sessions``); also an async context manager.

    **Session lifecycle**: each lifecycle write is one ``BEGIN IMMEDIATE``
    transaction, so processes expiring at once take turns and each session is
    deleted once. Session writes are stamped by this machine's clock, which
    also judges idleness. A file created by this version is in
    ``auto_vacuum=INCREMENTAL`` mode: prune and expire give the freed pages
    back to the file system in the same transaction (an older file keeps
    its mode until a one-off ``VACUUM`` after ``PRAGMA auto_vacuum = 2``).

    **Leases** hold across every handle and process on the file: each lease
    call and each fenced write is one ``BEGIN IMMEDIATE`` transaction (the
    file's write lock), and expiry is judged on this machine's clock.

    One dedicated thread owns the store's ``sqlite3`` connection (WAL journal,
    a busy timeout so processes sharing the file wait for each other). Writes
    that are waiting when the thread wakes share one transaction and one
    commit (group commit); every caller is answered only after that commit.

    **Durable when it returns** means committed to the WAL with
    ``synchronous=FULL`` (the default): the WAL is fsynced on every commit, so
    a returned write survives a crash of the process, of the OS and a power
    cut. ``synchronous="normal"`` skips that fsync: a returned write survives
    the process being killed, but the last commits may be lost (never torn)
    if the machine itself goes down.

    Use the store from trio or asyncio (through anyio or directly), in the
    event loop that opened it or later ones.

    **Inline reads** (the one exception to "no blocking I/O on the event-loop
    thread"): ``last_n`` (windows up to 256 steps) and ``get`` run on a second,
    read-only connection directly on the event-loop thread, which saves the hop
    to the connection thread and back. That connection never waits for a lock
    (``busy_timeout`` 0): a read that would wait, or fails, goes to the
    connection thread instead. Both
    are short indexed reads; their cost grows with the bytes of the steps
    read (see docs/stores.md for the measured worst case).

    SQLite never loses its connection mid-call, so no outcome is ever unknown.

    **Cancellation handling** (the rule is ``SqlStore``'s): a call
    the connection thread has taken but that waits for another connection's
    lock (another process writing) did nothing yet: when its caller is
    cancelled it is dropped from its batch within a few milliseconds and
    raises the backend's cancellation (``trio.Cancelled`` /
    ``asyncio.CancelledError``), whatever the other callers of its batch do,
    so no cancelled call waits out ``busy_timeout``. Once its transaction
    runs, a call runs to its end (it commits or rolls back whole) and
    returns normally. ``busy_timeout`` still bounds the wait of a call
    nobody cancels: past it, ``StoreUnavailableError`` names the file and
    the lock, and the call did nothing.
    """

    def __init__(
        self,
        path: str,
        workers: Workers[sqlite3.Connection],
        reader: InlineReader | None = None,
    ) -> None:
        """Use :meth:`open`."""
        super().__init__(workers, _OPS)
        self._path = path
        self._reader = reader
        self._watch_leak(f"SqliteStore {path!r}", reader.close if reader is not None else _nothing)

    async def _read_short(
        self, run: Callable[[sqlite3.Connection], R], name: str, args: tuple[Any, ...]
    ) -> R:
        """``run`` inline on the read-only connection if it can run now, else on the worker."""
        reader = self._reader
        if reader is not None and not self._closed and not self._workers.dead:
            # The call's cancellation point, then the read, then its schedule point.
            if trio_run := on_trio():
                await trio.lowlevel.checkpoint_if_cancelled()
            else:
                await asyncio.sleep(0)
            found = reader.read(run)
            if not isinstance(found, _Miss):
                if trio_run:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return found
        return await self._workers.call(Read(run, name=name))

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "full",
        busy_timeout: float = 5.0,
        verify: bool = False,
    ) -> SqliteStore:
        """Open (creating if needed) the database at ``path`` and migrate it to this schema.

        ``":memory:"`` gives a private in-memory database (for tests: nothing
        survives ``aclose``). ``synchronous`` is ``"full"`` (default),
        ``"normal"`` or ``"extra"``; see the class docstring. ``busy_timeout``
        is how long, in seconds, a write waits for another process's lock.

        The file is read before anything in it changes: it must be empty, or
        hold only other applications' tables, or be an agentloopsql database
        whose ``user_version`` is a known schema version and whose tables of
        ours have exactly that version's columns and indexes. Only then is it
        switched to WAL and migrated; a refused file is left byte for byte as
        it was. ``verify=True`` also runs ``PRAGMA quick_check`` first and
        refuses a damaged file; it reads the whole file (about 1 ms per MB
        from the OS page cache, plus the disk reads of a cold file; see the
        docs/stores.md), so it is off by default.

        Raises:
            TypeError: ``path`` is not a str or path; a bad
                ``synchronous``/``busy_timeout``/``verify``.
            ValueError: ``path`` is empty; ``synchronous`` is not one of the choices above;
                ``busy_timeout`` is not finite, > 0 and <= ``SECONDS_MAX`` (2**31 - 1 ms).
            StoreError: naming the path and the reason: its directory is
                missing or may not be entered or written (SQLite needs it for
                the ``-wal`` and ``-shm`` files); the path is a directory; the
                file may not be read or written; it is not a SQLite database;
                its tables or ``user_version`` are not agentloopsql's (or its
                schema is newer than this version supports); ``verify`` found
                damage.
            StoreUnavailableError: SQLite failed in a way that may pass
                (the file stayed locked past ``busy_timeout``, an I/O error).

        **Cancellation handling**: a cancelled open closes what it opened and
        raises the backend's cancellation; a migration already under way finishes or
        rolls back whole.
        """
        name = checked_path(path)
        if not isinstance(verify, bool):
            raise TypeError(f"verify must be a bool, got {preview(verify)}")
        mode = _checked_mode(synchronous)
        timeout = check_seconds(busy_timeout, "busy_timeout")  # SQLite holds int ms
        executor = SqliteExecutor(lambda: connect(name, mode, timeout, verify), name, timeout)
        workers = Workers(executor, 1, "SqliteStore")
        return cls(name, workers, await _start(workers, name))

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``) this store was opened on."""
        return self._path

    async def aclose(self) -> None:
        """Finish every call already started, then close the connection; idempotent.

        Later calls raise ``StoreClosedError``.

        **Cancellation handling**: shielded; once called, the store ends closed.
        """
        self._closing()
        if self._reader is not None:
            # First: the writer, closing last, checkpoints the WAL and removes -wal/-shm.
            self._reader.close()
        await self._workers.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<SqliteStore {self._path!r} ({state})>"


def _nothing() -> None:
    """Nothing to release beyond the worker thread."""


def _ready(conn: sqlite3.Connection) -> None:
    """The first job: reaching it proves the connection opened and migrated."""


def _checked_mode(synchronous: object) -> str:
    """``synchronous`` as one of :data:`SYNCHRONOUS`, lower case."""
    if not isinstance(synchronous, str):
        raise TypeError(f"synchronous must be a str, got {preview(synchronous)}")
    if synchronous.lower() not in SYNCHRONOUS:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, got {synchronous!r}")
    return synchronous.lower()


async def _start(workers: Workers[sqlite3.Connection], name: str) -> InlineReader | None:
    """Migrate through the writer, then open the inline reader; on any failure or
    cancellation (one that came while the reader opened included) close both, then raise."""
    reader: InlineReader | None = None
    try:
        await workers.call(Read(_ready))
        reader = await to_thread_shielded(InlineReader.open, name)
        await anyio.lowlevel.checkpoint()  # a cancellation that came meanwhile lands here
    except BaseException:
        if reader is not None:
            reader.close()
        await workers.close()
        raise
    return reader
