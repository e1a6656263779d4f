"""agentloopsql: durable stores on SQLite and PostgreSQL.

``SqliteStore`` (stdlib ``sqlite3``, no server) and ``PostgresStore``
(``psycopg`` 3, installed by the ``agentloop-seam[postgres]`` extra) each
implement ``StepStore``, ``SessionStore`` and every optional capability in
one object. Every write is committed when it returns; each class docstring
says what that survives. Both grant session leases across processes, and
``fenced(lease)`` returns a view that is the whole store.
``agentloopsql.testing`` holds ready-made conformance harnesses for both.
"""

from __future__ import annotations

from agentloopsql._postgres import PostgresStore
from agentloopsql._sqlite import SqliteStore

__all__ = ["PostgresStore", "SqliteStore"]
