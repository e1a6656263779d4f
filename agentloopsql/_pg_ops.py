"""The SQL of every ``PostgresStore`` operation, one autocommit statement each.

Each operation is a single statement, so it is its own transaction: it
commits whole or not at all. Appends of several rows are one multi-row
``INSERT`` (all rows or none, in order). A fenced append is one statement too:
it reads the session's lease row ``FOR SHARE`` (a takeover must wait for it
to commit) and inserts its rows only if that row still is the lease's grant,
then returns the row, which ``check_fence`` judges to raise the right error;
a lost attempt thus never leaves a transaction holding the lease row. The
other fenced writes are one transaction holding a share lock on the session's
lease row, then the write. Every appended row carries its random append key; a
row whose key is already stored is skipped (``ON CONFLICT DO NOTHING``), so a
retry never stores it twice.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import attrs
import psycopg

from agentloop import FinalizeSummary, Lease, LeaseLostError, RunStep, Session, SessionInfo
from agentloop._shared import check_fence, check_granted, check_renewable, preview
from agentloopsql import _codec
from agentloopsql._pg_schema import render
from agentloopsql._store import Grant, taken, unknown_source

Conn = psycopg.Connection[Any]

_STEP_COLUMNS = (
    "session_id, step_index, step_type, content, content_nul, tool_args::text, "
    "duration_ms, prompt_tokens, completion_tokens, created_at"
)
_FINAL = ", ".join(_codec.FINAL_COLUMNS)
_UNTIL = "now() + make_interval(secs => %(ttl)s)"

R = TypeVar("R")

# How long a fenced write's transaction may sit idle (its worker thread sends
# the next statement at once, so only a client that is gone comes near it).
FENCE_IDLE_MS = 10_000

_QUERIES = {
    "append_landed": "SELECT 1 FROM {s}.steps WHERE session_id = %s AND append_key = %s LIMIT 1",
    "last_n": (
        f"SELECT {_STEP_COLUMNS} FROM {{s}}.steps WHERE session_id = %s ORDER BY seq DESC LIMIT %s"
    ),
    "all": f"SELECT {_STEP_COLUMNS} FROM {{s}}.steps WHERE session_id = %s ORDER BY seq",
    "get": "SELECT model, system_prompt, system_prompt_nul, data::text FROM {s}.sessions "
    "WHERE id = %s",
    "exists": "SELECT 1 FROM {s}.sessions WHERE id = %s",
    "update_data": (
        "INSERT INTO {s}.sessions (id, system_prompt, data, created_at, updated_at, write_seq) "
        "VALUES (%(id)s, '', %(data)s::jsonb, now(), now(), nextval('{s}.session_writes')) "
        "ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, "
        "updated_at = EXCLUDED.updated_at, write_seq = EXCLUDED.write_seq"
    ),
    "put": (
        "INSERT INTO {s}.sessions (id, model, system_prompt, system_prompt_nul, data, "
        "created_at, updated_at, write_seq) VALUES (%(id)s, %(model)s, %(prompt)s, "
        "%(prompt_nul)s, %(data)s::jsonb, now(), now(), nextval('{s}.session_writes')) "
        "ON CONFLICT (id) DO UPDATE SET model = EXCLUDED.model, "
        "system_prompt = EXCLUDED.system_prompt, system_prompt_nul = EXCLUDED.system_prompt_nul, "
        "data = EXCLUDED.data, updated_at = EXCLUDED.updated_at, write_seq = EXCLUDED.write_seq"
    ),
    # Applied only if its key is new: repeating a finalize (a retry after a lost
    # connection) never counts its steps twice.
    "finalize": (
        "WITH fresh AS (INSERT INTO {s}.finalize_keys (session_id, key) VALUES (%s, %s) "
        "ON CONFLICT DO NOTHING RETURNING 1) "
        f"INSERT INTO {{s}}.sessions (id, system_prompt, {_FINAL}, final_key, step_total, "
        "created_at, updated_at, write_seq) SELECT %s, '', %s, %s, %s, %s, %s, %s, %s, %s, "
        "now(), now(), nextval('{s}.session_writes') WHERE EXISTS (SELECT 1 FROM fresh) "
        "ON CONFLICT (id) DO UPDATE SET "
        + ", ".join(f"{column} = EXCLUDED.{column}" for column in _codec.FINAL_COLUMNS)
        + ", final_key = EXCLUDED.final_key, "
        "step_total = {s}.sessions.step_total + EXCLUDED.step_total, "
        "updated_at = EXCLUDED.updated_at, write_seq = EXCLUDED.write_seq"
    ),
    "finalize_landed": "SELECT 1 FROM {s}.finalize_keys WHERE session_id = %s AND key = %s",
    "final": f"SELECT {_FINAL} FROM {{s}}.sessions WHERE id = %s",
    "list_sessions": (
        "SELECT write_seq, id, final_status, step_total, created_at, updated_at, labels "
        "FROM {s}.sessions ORDER BY write_seq DESC LIMIT %s"
    ),
    # The deleted session's floor is a fresh write number: its revision grows
    # (see agentloopsql._store), so a stale update_data_if fails after a delete.
    "delete_session": (
        "WITH gone_keys AS (DELETE FROM {s}.finalize_keys WHERE session_id = %(id)s), "
        "gone_labels AS (DELETE FROM {s}.session_labels WHERE session_id = %(id)s), "
        "gone_steps AS (DELETE FROM {s}.steps WHERE session_id = %(id)s RETURNING 1), "
        "gone_session AS (DELETE FROM {s}.sessions WHERE id = %(id)s RETURNING id, write_seq), "
        "floor AS (INSERT INTO {s}.revision_floors (session_id, revision) "
        "SELECT id, nextval('{s}.session_writes') FROM gone_session "
        "ON CONFLICT (session_id) DO UPDATE SET revision = EXCLUDED.revision) "
        "SELECT (SELECT count(*) FROM gone_steps) + (SELECT count(*) FROM gone_session)"
    ),
    # The ids travel as one JSON array: json.dumps is one C call, where psycopg
    # dumps a list parameter element by element (a fifth of a get_many of 20).
    "get_many": "SELECT id, model, system_prompt, system_prompt_nul, data::text "
    "FROM {s}.sessions WHERE id = ANY(ARRAY(SELECT jsonb_array_elements_text(%s::jsonb)))",
    "revision": (
        "SELECT coalesce((SELECT write_seq FROM {s}.sessions WHERE id = %(id)s), "
        "(SELECT revision FROM {s}.revision_floors WHERE session_id = %(id)s), 0)"
    ),
    # The check and the write in one statement: racing calls with the same
    # revision queue on the row lock ON CONFLICT takes, and each re-checks the
    # WHERE against the row it waited for, so exactly one matches.
    "update_data_if": (
        "WITH cur AS (SELECT coalesce((SELECT write_seq FROM {s}.sessions WHERE id = %(id)s), "
        "(SELECT revision FROM {s}.revision_floors WHERE session_id = %(id)s), 0) AS rev) "
        "INSERT INTO {s}.sessions AS row (id, system_prompt, data, created_at, updated_at, "
        "write_seq) SELECT %(id)s, '', %(data)s::jsonb, now(), now(), "
        "nextval('{s}.session_writes') FROM cur WHERE cur.rev = %(rev)s "
        "ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, "
        "updated_at = EXCLUDED.updated_at, write_seq = EXCLUDED.write_seq "
        "WHERE row.write_seq = %(rev)s RETURNING row.write_seq"
    ),
    # Leases: judged on the server's clock. now() is the statement's start: a
    # statement that waited for a row lock sees an earlier time, which can only
    # make a lease look live a moment longer, never free it early. The row
    # lock ON CONFLICT DO UPDATE takes makes concurrent acquires queue, and
    # each re-reads the row it waited for. A granted live lease of the same
    # owner keeps its token; anything else granted gets token + 1.
    "lease_acquire": (
        "INSERT INTO {s}.leases AS l (session_id, owner, token, expires_at) "
        f"VALUES (%(id)s, %(owner)s, 1, {_UNTIL}) "
        "ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, "
        "token = CASE WHEN l.expires_at > now() THEN l.token ELSE l.token + 1 END, "
        "expires_at = EXCLUDED.expires_at "
        "WHERE l.expires_at IS NULL OR l.expires_at <= now() OR l.owner = EXCLUDED.owner "
        "RETURNING token, expires_at"
    ),
    "lease_renew": (
        f"UPDATE {{s}}.leases SET expires_at = {_UNTIL} WHERE session_id = %(id)s "
        "AND token = %(token)s AND owner = %(owner)s AND expires_at IS NOT NULL "
        "RETURNING expires_at"
    ),
    "lease_release": (
        "UPDATE {s}.leases SET expires_at = NULL WHERE session_id = %(id)s "
        "AND token = %(token)s AND owner = %(owner)s RETURNING 1"
    ),
    "lease_held": "SELECT owner, token, expires_at IS NULL FROM {s}.leases WHERE session_id = %s",
    # The share lock makes a takeover (which must lock the row to update it)
    # wait until the fenced write's transaction ends, and makes the check
    # read the latest committed row, never a stale one. A transaction whose
    # client is gone would hold that lock forever: past FENCE_IDLE_MS idle,
    # the server ends it (set here, no round trip of its own).
    "lease_fence": (
        "SELECT owner, token, expires_at IS NULL, "
        "set_config('idle_in_transaction_session_timeout', %s, true) "
        "FROM {s}.leases WHERE session_id = %s FOR SHARE"
    ),
}


# -- the session lifecycle ---------------------------------------------------------

_INFO = "id, final_status, step_total, created_at, updated_at, labels"
_S_INFO = ", ".join(f"s.{column}" for column in _INFO.split(", "))
_LIFECYCLE = {
    "cursor_secret": "SELECT value FROM {s}.meta WHERE key = 'cursor_secret'",
    "page_updated": f"SELECT write_seq, {_INFO} FROM {{s}}.sessions WHERE write_seq < %s "
    "ORDER BY write_seq DESC LIMIT %s",
    "page_created": f"SELECT created_seq, {_INFO} FROM {{s}}.sessions WHERE created_seq > %s "
    "ORDER BY created_seq LIMIT %s",
    "page_updated_pair": f"SELECT l.write_seq, {_S_INFO} FROM {{s}}.session_labels AS l "
    "JOIN {s}.sessions AS s ON s.id = l.session_id WHERE l.key = %s AND l.value = %s "
    "AND l.write_seq < %s ORDER BY l.write_seq DESC LIMIT %s",
    "page_created_pair": f"SELECT l.created_seq, {_S_INFO} FROM {{s}}.session_labels AS l "
    "JOIN {s}.sessions AS s ON s.id = l.session_id WHERE l.key = %s AND l.value = %s "
    "AND l.created_seq > %s ORDER BY l.created_seq LIMIT %s",
    "session_info": f"SELECT 0, {_INFO} FROM {{s}}.sessions WHERE id = %s",
    "set_labels": (
        "INSERT INTO {s}.sessions (id, system_prompt, labels, created_at, updated_at, "
        "write_seq) VALUES (%(id)s, '', %(labels)s, now(), now(), "
        "nextval('{s}.session_writes')) ON CONFLICT (id) DO UPDATE SET "
        "labels = EXCLUDED.labels, updated_at = EXCLUDED.updated_at, "
        "write_seq = EXCLUDED.write_seq"
    ),
    "drop_labels": "DELETE FROM {s}.session_labels WHERE session_id = %s",
    "label_rows": (
        "INSERT INTO {s}.session_labels (session_id, key, value, write_seq, created_seq) "
        "SELECT s.id, j.key, j.value, s.write_seq, s.created_seq FROM {s}.sessions AS s, "
        "jsonb_each_text(s.labels::jsonb) AS j WHERE s.id = %s"
    ),
    # The skipped steps are counted in the (session_id, seq) index alone (an index-only
    # scan), never fetched: a range deep into a long session costs about one near its start.
    "steps_after": (
        f"SELECT {_STEP_COLUMNS} FROM {{s}}.steps WHERE session_id = %(id)s AND seq >= "
        "(SELECT seq FROM {s}.steps WHERE session_id = %(id)s ORDER BY seq LIMIT 1 "
        "OFFSET %(after)s) ORDER BY seq LIMIT %(limit)s"
    ),
    "prune": (
        "DELETE FROM {s}.steps WHERE session_id = %(id)s AND seq < (SELECT seq FROM {s}.steps "
        "WHERE session_id = %(id)s ORDER BY seq DESC LIMIT 1 OFFSET %(skip)s)"
    ),
    "held_anything": (
        "SELECT EXISTS (SELECT 1 FROM {s}.sessions WHERE id = %(id)s) "
        "OR EXISTS (SELECT 1 FROM {s}.steps WHERE session_id = %(id)s)"
    ),
    "fork_row": (
        "INSERT INTO {s}.sessions (id, model, system_prompt, system_prompt_nul, data, labels, "
        "created_at, updated_at, write_seq) SELECT %(new)s, coalesce(s.model, ''), "
        "CASE WHEN s.id IS NULL THEN '' ELSE s.system_prompt END, s.system_prompt_nul, s.data, "
        "coalesce(s.labels, '{{}}'), now(), now(), nextval('{s}.session_writes') "
        "FROM (SELECT 1) AS one LEFT JOIN {s}.sessions AS s ON s.id = %(src)s"
    ),
    "fork_steps": (
        "INSERT INTO {s}.steps (session_id, step_index, step_type, content, content_nul, "
        "tool_args, duration_ms, prompt_tokens, completion_tokens, created_at) "
        "SELECT %(new)s, step_index, step_type, content, content_nul, tool_args, duration_ms, "
        "prompt_tokens, completion_tokens, created_at FROM {s}.steps "
        "WHERE session_id = %(src)s ORDER BY seq LIMIT %(keep)s"
    ),
    "restore": (
        "INSERT INTO {s}.sessions (id, model, system_prompt, system_prompt_nul, data, labels, "
        f"{_FINAL}, step_total, created_at, updated_at, write_seq) VALUES (%s, %s, %s, %s, "
        "%s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, nextval('{s}.session_writes'))"
    ),
    # Idle, unleased (or stale-leased) sessions, oldest write first; rows another
    # expiring process holds are skipped, never waited for.
    "expire_pick": (
        "SELECT s.id FROM {s}.sessions AS s WHERE s.updated_at < now() - make_interval("
        "secs => %(idle)s) AND NOT EXISTS (SELECT 1 FROM {s}.leases AS l WHERE "
        "l.session_id = s.id AND l.expires_at > now()) ORDER BY s.updated_at "
        "LIMIT %(limit)s FOR UPDATE OF s SKIP LOCKED"
    ),
    "expire_orphans": (
        "SELECT session_id FROM {s}.steps WHERE session_id NOT IN (SELECT id FROM {s}.sessions) "
        "GROUP BY session_id HAVING max(created_at) < now() - make_interval(secs => %(idle)s) "
        "LIMIT %(limit)s"
    ),
    # The leases of the picked sessions, locked without waiting: a session
    # whose lease row another transaction holds (a fenced write, an acquire)
    # is left for a later call.
    "expire_leases": (
        "SELECT session_id, coalesce(expires_at > now(), false) FROM {s}.leases "
        "WHERE session_id = ANY(%s) FOR UPDATE SKIP LOCKED"
    ),
    "expire_locked_leases": ("SELECT session_id FROM {s}.leases WHERE session_id = ANY(%s)"),
    "expire_delete": (
        "WITH gone_keys AS (DELETE FROM {s}.finalize_keys WHERE session_id = ANY(%(ids)s)), "
        "gone_labels AS (DELETE FROM {s}.session_labels WHERE session_id = ANY(%(ids)s)), "
        "gone_steps AS (DELETE FROM {s}.steps WHERE session_id = ANY(%(ids)s) "
        "RETURNING session_id), "
        "gone_session AS (DELETE FROM {s}.sessions WHERE id = ANY(%(ids)s) RETURNING id), "
        "floor AS (INSERT INTO {s}.revision_floors (session_id, revision) "
        "SELECT id, nextval('{s}.session_writes') FROM gone_session "
        "ON CONFLICT (session_id) DO UPDATE SET revision = EXCLUDED.revision) "
        "SELECT id FROM gone_session UNION SELECT session_id FROM gone_steps"
    ),
    "take_over": (
        "UPDATE {s}.leases SET token = token + 1, expires_at = NULL WHERE session_id = ANY(%s) "
        "AND expires_at IS NOT NULL AND expires_at <= now()"
    ),
}


def _infos(rows: list[tuple[Any, ...]]) -> list[tuple[int, SessionInfo]]:
    """``(position, info)`` of each row of ``position, {_INFO}``."""
    return [
        (int(pos), _codec.info(sid, st, n, _codec.as_utc(c), _codec.as_utc(u), labels))
        for pos, sid, st, n, c, u, labels in rows
    ]


# -- the append statements -------------------------------------------------------

ROWS_PER_STATEMENT = 5_000  # 11 parameters a row, at most 65,535 a statement

_COLUMNS = (
    "session_id, step_index, step_type, content, content_nul, tool_args, duration_ms, "
    "prompt_tokens, completion_tokens, created_at, append_key"
)
_ROW = "(%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s)"
# In a VALUES list that feeds an INSERT ... SELECT, nothing types the parameters
# from the target columns: each one is cast to its column's type.
_TYPED_ROW = (
    "(%s::text, %s::integer, %s::text, %s::text, %s::bytea, %s::jsonb, %s::integer, "
    "%s::integer, %s::integer, %s::timestamptz, %s::bigint)"
)
# check_fence passes exactly when the stored grant has the lease's token and
# owner: the WHERE below is that rule, so a row is inserted iff the check passes.
_FENCED = (
    "WITH fence AS (SELECT owner, token, expires_at IS NULL AS released FROM {s}.leases "
    "WHERE session_id = %s FOR SHARE), "
    "added AS (INSERT INTO {s}.steps (" + _COLUMNS + ") SELECT * FROM (VALUES {rows}) AS v "
    "WHERE EXISTS (SELECT 1 FROM fence WHERE token = %s AND owner = %s) "
    "ON CONFLICT DO NOTHING) "
    "SELECT owner, token, released FROM fence"
)


def step_params(step: RunStep, key: int | None) -> tuple[object, ...]:
    """The parameters of one row of an append statement for ``step``."""
    content, content_nul = _codec.split_nul(step.content)
    return (
        step.session_id,
        step.step_index,
        step.step_type.value,
        content,
        content_nul,
        step.tool_args,
        step.duration_ms,
        step.prompt_tokens,
        step.completion_tokens,
        step.created_at,
        key,
    )


def _plain(schema_sql: str, rows: int) -> str:
    values = ", ".join([_ROW] * rows)
    return f"INSERT INTO {schema_sql}.steps ({_COLUMNS}) VALUES {values} ON CONFLICT DO NOTHING"


def _fenced(schema_sql: str, rows: int) -> str:
    return _FENCED.format(s=schema_sql, rows=", ".join([_TYPED_ROW] * rows))


def _params(items: list[tuple[RunStep, int]]) -> list[object]:
    return [value for step, key in items for value in step_params(step, key)]


def judge_fence(lease: Lease, row: tuple[Any, ...] | None) -> None:
    """Raise what ``check_fence`` says of the lease row a fenced statement returned.

    Raises:
        LeaseLostError, ValueError: as ``check_fence``; the statement inserted nothing.
    """
    check_fence(lease, Grant(row[0], int(row[1]), row[2]) if row is not None else None)


def _reader(conn: Conn) -> psycopg.Cursor[Any]:
    """The cursor of a short read, with results in binary (cheaper to load than text).

    A store's pooled connection keeps one (``reader``) and it is reused: making
    a cursor costs about as much as loading a newest-20 read's rows. Any
    other connection gets a new one.
    """
    reader: psycopg.Cursor[Any] | None = getattr(conn, "reader", None)
    return reader if reader is not None else conn.cursor(binary=True)


def _step(session_id: str, row: tuple[Any, ...]) -> RunStep:
    """The step a ``steps`` row holds, by the one rule both stores read rows with."""
    content = row[3] if row[3] is not None else _codec.join_nul(None, row[4])
    # A time in another zone (a connection set up otherwise) takes step_of's
    # checked path, which converts it to UTC.
    return _codec.step_of(
        session_id, row[1], row[2], content, row[5], row[6], row[7], row[8], row[9]
    )


_PARAMETER = re.compile(r"%s")


def numbered(query: str) -> bytes:
    """``query`` (psycopg's ``%s`` placeholders only) with libpq's ``$1``, ``$2``, ..."""
    count = iter(range(1, 1_000))
    return _PARAMETER.sub(lambda _: f"${next(count)}", query).encode("utf-8")


Args = tuple[Any, ...]  # a short read's arguments, or its statement's parameters
Rows = list[tuple[Any, ...]]


@attrs.frozen
class ShortRead:
    """One short read: its statement (``PgOps.q[name]``, and numbered for libpq), its
    parameters, and how its rows become the result."""

    name: str
    query: bytes
    params: Args
    build: Callable[[Rows], Any]


def _newest(args: Args, rows: Rows) -> list[RunStep]:
    session_id = args[0]
    rows.reverse()
    return [_step(session_id, row) for row in rows]


def _session(args: Args, rows: Rows) -> Session | None:
    if not rows:
        return None
    model, prompt, prompt_nul, data = rows[0]
    return _codec.session_of(args[0], model, _codec.join_nul(prompt, prompt_nul), data)


def _sessions(_: Args, rows: Rows) -> dict[str, Session]:
    return {
        sid: _codec.session_of(sid, model, _codec.join_nul(prompt, prompt_nul), data)
        for sid, model, prompt, prompt_nul, data in rows
    }


def _listed(_: Args, rows: Rows) -> list[SessionInfo]:
    return [info for _, info in _infos(rows)]


def _as_given(args: Args) -> Args:
    return args


def _ids_as_json(args: Args) -> Args:
    return (json.dumps(args[0]),)


SHORT_READS: dict[str, tuple[Callable[[Args], Args], Callable[[Args, Rows], Any]]] = {
    "last_n": (_as_given, _newest),
    "get": (_as_given, _session),
    "get_many": (_ids_as_json, _sessions),
    "list_sessions": (_as_given, _listed),
}
"""The reads ``PostgresStore`` may run on its inline connection (``agentloopsql._pg_inline``):
each one's parameters from its arguments, and its result from the arguments and rows."""


class PgOps:
    """The statements of one schema, rendered once at open."""

    def __init__(self, conn: Conn, schema: str) -> None:
        queries = {**_QUERIES, **_LIFECYCLE}
        self.q = {name: render(conn, schema, text) for name, text in queries.items()}
        self._schema_sql = render(conn, schema, "{s}")
        self.q["append"] = _plain(self._schema_sql, 1)
        self.numbered = {name: numbered(self.q[name]) for name in SHORT_READS}

    def append(self, conn: Conn, step: RunStep, key: int) -> None:
        # The hot statement: prepared on its first run on a connection, not its fifth.
        conn.execute(self.q["append"], step_params(step, key), prepare=True)

    def append_many(self, conn: Conn, items: list[tuple[RunStep, int]]) -> None:
        """All of ``items`` in one multi-row INSERT: one statement, all rows or none, in order.

        Past ``ROWS_PER_STATEMENT`` rows (a statement takes at most 65,535
        parameters) the rows go in several statements inside one transaction.
        """
        if len(items) > ROWS_PER_STATEMENT:
            with conn.transaction():
                for start in range(0, len(items), ROWS_PER_STATEMENT):
                    chunk = items[start : start + ROWS_PER_STATEMENT]
                    conn.execute(_plain(self._schema_sql, len(chunk)), _params(chunk))
            return
        conn.execute(_plain(self._schema_sql, len(items)), _params(items))

    def append_fenced(self, conn: Conn, lease: Lease, items: list[tuple[RunStep, int]]) -> None:
        """``items`` appended only while ``lease`` holds, as :meth:`fenced_write` would.

        One statement (the lease check and the INSERT) up to ``ROWS_PER_STATEMENT``
        rows; past that, :meth:`fenced_write` around :meth:`append_many`.

        Raises:
            LeaseLostError, ValueError: as ``check_fence``; nothing was appended.
        """
        if len(items) > ROWS_PER_STATEMENT:
            self.fenced_write(conn, lease, lambda c: self.append_many(c, items))
            return
        params = [lease.session_id, *_params(items), lease.token, lease.owner]
        # One row is the hot case: prepared on its first run on a connection.
        query = _fenced(self._schema_sql, len(items))
        row = conn.execute(query, params, prepare=len(items) == 1 or None).fetchone()
        judge_fence(lease, row)

    def append_landed(self, conn: Conn, session_id: str, key: int) -> bool:
        return conn.execute(self.q["append_landed"], (session_id, key)).fetchone() is not None

    def last_n(self, conn: Conn, session_id: str, n: int) -> list[RunStep]:
        return self.short_read(conn, self.short("last_n", session_id, n))  # type: ignore[no-any-return]

    def short(self, name: str, *args: Any) -> ShortRead:
        """The statement of short read ``name`` (``last_n``, ``get``, ``get_many``,
        ``list_sessions``) for ``args``, and how its rows become the result."""
        params_of, build = SHORT_READS[name]
        return ShortRead(name, self.numbered[name], params_of(args), lambda rows: build(args, rows))

    def short_read(self, conn: Conn, read: ShortRead) -> Any:
        """``read`` on ``conn`` (a worker's connection)."""
        return read.build(_reader(conn).execute(self.q[read.name], read.params).fetchall())

    def all(self, conn: Conn, session_id: str) -> list[RunStep]:
        rows = conn.execute(self.q["all"], (session_id,), binary=True).fetchall()
        return [_step(session_id, row) for row in rows]

    def get(self, conn: Conn, session_id: str) -> Session | None:
        return self.short_read(conn, self.short("get", session_id))  # type: ignore[no-any-return]

    def exists(self, conn: Conn, session_id: str) -> bool:
        return conn.execute(self.q["exists"], (session_id,)).fetchone() is not None

    def update_data(self, conn: Conn, session_id: str, snapshot: str | None) -> None:
        params = {"id": session_id, "data": snapshot}
        conn.execute(self.q["update_data"], params)

    def put(self, conn: Conn, session: Session) -> None:
        prompt, prompt_nul = _codec.split_nul(session.system_prompt)
        params = {
            "id": session.id,
            "model": session.model,
            "prompt": prompt,
            "prompt_nul": prompt_nul,
            "data": session.data,
        }
        conn.execute(self.q["put"], params)

    def finalize(self, conn: Conn, session_id: str, summary: FinalizeSummary, key: int) -> None:
        params = (
            session_id,
            key,
            session_id,
            *_codec.final_params(summary),
            key,
            summary.step_count,
        )
        conn.execute(self.q["finalize"], params)

    def finalize_landed(self, conn: Conn, session_id: str, key: int) -> bool:
        return conn.execute(self.q["finalize_landed"], (session_id, key)).fetchone() is not None

    def final(self, conn: Conn, session_id: str) -> FinalizeSummary | None:
        row = conn.execute(self.q["final"], (session_id,)).fetchone()
        return _codec.final_from_row(row) if row is not None else None

    def list_sessions(self, conn: Conn, limit: int) -> list[SessionInfo]:
        return self.short_read(conn, self.short("list_sessions", limit))  # type: ignore[no-any-return]

    def delete_session(self, conn: Conn, session_id: str) -> bool:
        row = conn.execute(self.q["delete_session"], {"id": session_id}).fetchone()
        return row is not None and int(row[0]) > 0

    def get_many(self, conn: Conn, session_ids: list[str]) -> dict[str, Session]:
        return self.short_read(conn, self.short("get_many", session_ids))  # type: ignore[no-any-return]

    def revision(self, conn: Conn, session_id: str) -> int:
        row = conn.execute(self.q["revision"], {"id": session_id}).fetchone()
        assert row is not None
        return int(row[0])

    def update_data_if(
        self, conn: Conn, session_id: str, snapshot: str | None, revision: int
    ) -> tuple[bool, int]:
        params = {"id": session_id, "data": snapshot, "rev": revision}
        row = conn.execute(self.q["update_data_if"], params).fetchone()
        if row is not None:
            return True, int(row[0])
        return False, self.revision(conn, session_id)

    # -- the session lifecycle --------------------------------------------------

    def cursor_secret(self, conn: Conn) -> str:
        row = conn.execute(self.q["cursor_secret"]).fetchone()
        assert row is not None
        return str(row[0])

    def page(
        self, conn: Conn, order: str, pair: tuple[str, str] | None, after: int, limit: int
    ) -> list[tuple[int, SessionInfo]]:
        if pair is None:
            rows = _reader(conn).execute(self.q[f"page_{order}"], (after, limit)).fetchall()
        else:
            rows = (
                _reader(conn)
                .execute(self.q[f"page_{order}_pair"], (*pair, after, limit))
                .fetchall()
            )
        return _infos(rows)

    def session_info(self, conn: Conn, session_id: str) -> SessionInfo | None:
        found = _infos(_reader(conn).execute(self.q["session_info"], (session_id,)).fetchall())
        return found[0][1] if found else None

    def set_labels(self, conn: Conn, session_id: str, labels: str) -> None:
        with conn.transaction():
            conn.execute(self.q["set_labels"], {"id": session_id, "labels": labels})
            conn.execute(self.q["drop_labels"], (session_id,))
            conn.execute(self.q["label_rows"], (session_id,))

    def prune_steps(self, conn: Conn, session_id: str, keep: int) -> int:
        return conn.execute(self.q["prune"], {"id": session_id, "skip": keep - 1}).rowcount

    def steps_after(self, conn: Conn, session_id: str, after: int, limit: int) -> list[RunStep]:
        params = {"id": session_id, "after": after, "limit": limit}
        rows = conn.execute(self.q["steps_after"], params, binary=True).fetchall()
        return [_step(session_id, row) for row in rows]

    def _held_anything(self, conn: Conn, session_id: str) -> bool:
        row = conn.execute(self.q["held_anything"], {"id": session_id}).fetchone()
        return bool(row is not None and row[0])

    def fork_session(self, conn: Conn, source_id: str, new_id: str, keep: int | None) -> None:
        with conn.transaction():
            # The new id's row lock (ON CONFLICT would wait for it) is taken by
            # the insert; a racing fork into the same id fails on the key.
            if not self._held_anything(conn, source_id):
                raise unknown_source(source_id)
            if self._held_anything(conn, new_id):
                raise taken(new_id)
            ids = {"new": new_id, "src": source_id, "keep": keep}
            try:
                conn.execute(self.q["fork_row"], ids)
            except psycopg.errors.UniqueViolation as exc:
                raise taken(new_id) from exc
            conn.execute(self.q["label_rows"], (new_id,))
            conn.execute(self.q["fork_steps"], ids)

    def restore_session(
        self, conn: Conn, session: Session, info: SessionInfo, final: FinalizeSummary | None
    ) -> None:
        prompt, prompt_nul = _codec.split_nul(session.system_prompt)
        finals = _codec.final_params(final) if final is not None else (None,) * 6
        params = (
            session.id,
            session.model,
            prompt,
            prompt_nul,
            session.data,
            _codec.labels_text(info.labels),
            *finals,
            info.step_count,
            info.created_at,
            info.updated_at,
        )
        with conn.transaction():
            if self._held_anything(conn, session.id):
                raise taken(session.id, "delete it first to replace it")
            try:
                conn.execute(self.q["restore"], params)
            except psycopg.errors.UniqueViolation as exc:
                raise taken(session.id, "delete it first to replace it") from exc
            conn.execute(self.q["label_rows"], (session.id,))

    def expire_sessions(self, conn: Conn, idle_for: float, limit: int) -> list[str]:
        with conn.transaction():
            query = {"idle": idle_for, "limit": limit}
            picked = [row[0] for row in conn.execute(self.q["expire_pick"], query).fetchall()]
            if len(picked) < limit:
                query["limit"] = limit - len(picked)
                orphans = conn.execute(self.q["expire_orphans"], query).fetchall()
                picked += [row[0] for row in orphans]
            if not picked:
                return []
            leased = {row[0] for row in conn.execute(self.q["expire_locked_leases"], (picked,))}
            locked = conn.execute(self.q["expire_leases"], (picked,)).fetchall()
            free = {sid for sid, live in locked if not live}
            # A lease row another transaction holds, or a live lease: left alone.
            ids = [sid for sid in picked if sid not in leased or sid in free]
            if not ids:
                return []
            conn.execute(self.q["take_over"], (ids,))
            gone = {row[0] for row in conn.execute(self.q["expire_delete"], {"ids": ids})}
            return [sid for sid in ids if sid in gone]

    def acquire_lease(
        self, conn: Conn, session_id: str, owner: str, ttl: float
    ) -> tuple[int, datetime] | None:
        params = {"id": session_id, "owner": owner, "ttl": ttl}
        row = conn.execute(self.q["lease_acquire"], params).fetchone()
        return (int(row[0]), _codec.as_utc(row[1])) if row is not None else None

    def renew_lease(self, conn: Conn, lease: Lease, ttl: float) -> datetime:
        params = {"id": lease.session_id, "token": lease.token, "owner": lease.owner, "ttl": ttl}
        row = conn.execute(self.q["lease_renew"], params).fetchone()
        if row is not None:
            return _codec.as_utc(row[0])
        check_renewable(lease, self._held(conn, lease.session_id))  # says why it was refused
        # Unreachable in practice: a lease refused once stays refused (tokens only grow).
        raise LeaseLostError(
            f"lease {lease.token} of session {preview(lease.session_id)} changed while "
            "being renewed; acquire a new one"
        )

    def release_lease(self, conn: Conn, lease: Lease) -> None:
        params = {"id": lease.session_id, "token": lease.token, "owner": lease.owner}
        if conn.execute(self.q["lease_release"], params).fetchone() is None:
            check_granted(lease, self._held(conn, lease.session_id))  # else: lost, a no-op

    def fenced_write(self, conn: Conn, lease: Lease, write: Callable[[Conn], R]) -> R:
        with conn.transaction():
            params = (str(FENCE_IDLE_MS), lease.session_id)
            row = conn.execute(self.q["lease_fence"], params).fetchone()
            check_fence(lease, Grant(row[0], int(row[1]), row[2]) if row is not None else None)
            return write(conn)

    def _held(self, conn: Conn, session_id: str) -> Grant | None:
        row = conn.execute(self.q["lease_held"], (session_id,)).fetchone()
        return Grant(row[0], int(row[1]), row[2]) if row is not None else None
