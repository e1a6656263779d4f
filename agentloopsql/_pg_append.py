"""The INSERTs that append steps on PostgreSQL: several rows in one statement, fenced or not.

A plain append of many rows is one multi-row ``INSERT`` (one autocommit
statement: all rows or none, in order). A fenced append is one statement
too: it reads the session's lease row ``FOR SHARE`` (a takeover must wait for
it to commit) and inserts its rows only if that row still is the lease's grant,
then returns the row, which ``check_fence`` judges to raise the right error.
One round trip instead of four (``BEGIN``, the lease read, the ``INSERT``,
``COMMIT``).

Every row carries its random append key; a row whose key is already stored
is skipped (``ON CONFLICT DO NOTHING``), so a retry never stores it twice.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop import Lease, RunStep
from agentloop._shared import check_fence
from agentloopsql import _codec
from agentloopsql._leases import Held

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[Any]

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


def single_row(schema_sql: str) -> str:
    """The one-row append statement; ``schema_sql`` is the quoted schema."""
    return _plain(schema_sql, 1)


def _plain(schema_sql: str, rows: int) -> str:
    values = ", ".join([_ROW] * rows)
    return f"INSERT INTO {schema_sql}.steps ({_COLUMNS}) VALUES {values} ON CONFLICT DO NOTHING"


class AppendSql:
    """The append statements of one schema, each row count's text made once."""

    def __init__(self, schema_sql: str) -> None:
        self._schema = schema_sql
        self._plain: dict[int, str] = {}
        self._fenced: dict[int, str] = {}

    def insert(self, conn: Conn, items: list[tuple[RunStep, int]]) -> None:
        """All of ``items`` in one statement (at most :data:`ROWS_PER_STATEMENT`)."""
        query = self._plain.get(len(items))
        if query is None:
            query = self._plain[len(items)] = _plain(self._schema, len(items))
        conn.execute(query, [value for step, key in items for value in step_params(step, key)])

    def insert_fenced(self, conn: Conn, lease: Lease, items: list[tuple[RunStep, int]]) -> None:
        """All of ``items`` in one statement, only while ``lease`` is the session's grant.

        Raises:
            LeaseLostError: the lease was acquired again since; nothing was inserted.
            ValueError: the store never granted ``lease``; nothing was inserted.
        """
        query, params = self.fenced(lease, items)
        # One row is the hot case: prepared on its first run on a connection.
        row = conn.execute(query, params, prepare=len(items) == 1 or None).fetchone()
        judge_fence(lease, row)

    def fenced(self, lease: Lease, items: list[tuple[RunStep, int]]) -> tuple[str, list[object]]:
        """The fenced statement for ``items`` and its parameters; :func:`judge_fence` its row."""
        query = self._fenced.get(len(items))
        if query is None:
            rows = ", ".join([_TYPED_ROW] * len(items))
            query = self._fenced[len(items)] = _FENCED.format(s=self._schema, rows=rows)
        params: list[object] = [lease.session_id]
        for step, key in items:
            params.extend(step_params(step, key))
        params += (lease.token, lease.owner)
        return query, params


def judge_fence(lease: Lease, row: tuple[Any, ...] | None) -> None:
    """Raise what ``check_fence`` says of the lease row a fenced statement returned.

    Raises:
        LeaseLostError, ValueError: as ``check_fence``; the statement inserted nothing.
    """
    check_fence(lease, Held(row[0], int(row[1]), row[2]) if row is not None else None)
