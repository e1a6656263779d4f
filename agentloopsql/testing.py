"""Ready-made conformance harnesses for the SQL stores.

``sqlite()`` and ``postgres()`` are zero-argument callables returning an
``agentlooptest.Harness`` whose factories give a fresh, empty store each
call, and whose ``reopen`` gives a second handle onto the same database.
Certify from the command line::

    agentlooptest certify agentloopsql.testing:sqlite
    AGENTLOOP_PG_DSN=postgresql://user@host/db agentlooptest certify agentloopsql.testing:postgres

Needs the ``contract`` extra (``pip install 'agentloop-seam[contract]'``), and
``postgres`` the ``postgres`` one. ``postgres()`` puts each store in a new
schema named ``agentloop_test_...``; its harness's ``cleanup`` drops the
schemas its stores made after each clause, and whatever is left is dropped
when the process exits (or when :func:`drop_test_schemas` is called); it
never touches any other schema. ``sqlite()``'s ``cleanup`` deletes the
database files of the clause just run.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import secrets
import shutil
import sys
import tempfile
import threading
import weakref

import anyio

from agentloopsql._postgres import PostgresStore
from agentloopsql._sqlite import SqliteStore
from agentlooptest import Harness

__all__ = ["DSN_VARIABLE", "drop_test_schemas", "postgres", "sqlite"]

DSN_VARIABLE = "AGENTLOOP_PG_DSN"

_lock = threading.Lock()
_created: list[tuple[str, str]] = []  # (dsn, schema) of every schema postgres() made
_registered: list[bool] = []  # non-empty once the exit hook is registered


def sqlite() -> Harness:
    """A harness of ``SqliteStore``s, each on a new file in a private temporary directory.

    The directory is removed when the harness is garbage-collected or the process exits.
    """
    directory = tempfile.mkdtemp(prefix="agentloopsql-")
    numbers = itertools.count()

    async def new_store() -> SqliteStore:
        return await SqliteStore.open(os.path.join(directory, f"{next(numbers)}.db"))

    async def reopen(store: object) -> SqliteStore:
        if not isinstance(store, SqliteStore):
            raise TypeError(f"reopen expects a SqliteStore, got {type(store).__name__}")
        return await SqliteStore.open(store.path)

    async def cleanup() -> None:
        await anyio.to_thread.run_sync(_empty_directory, directory)

    harness = Harness(
        new_step_store=new_store, new_session_store=new_store, reopen=reopen, cleanup=cleanup
    )
    weakref.finalize(harness, shutil.rmtree, directory, ignore_errors=True)
    return harness


def postgres(dsn: str | None = None) -> Harness:
    """A harness of ``PostgresStore``s, each in a new schema of the database at ``dsn``.

    ``dsn`` defaults to the ``AGENTLOOP_PG_DSN`` environment variable.

    Raises:
        LookupError: no ``dsn`` given and ``AGENTLOOP_PG_DSN`` is unset.
    """
    target = dsn if dsn is not None else os.environ.get(DSN_VARIABLE, "")
    if not target:
        raise LookupError(
            f"set {DSN_VARIABLE} to a PostgreSQL connection string "
            "(e.g. postgresql://postgres@127.0.0.1:5432/test) to certify PostgresStore"
        )

    mine: list[tuple[str, str]] = []  # this harness's schemas not yet dropped

    async def new_store() -> PostgresStore:
        schema = f"agentloop_test_{os.getpid()}_{secrets.token_hex(6)}"
        with _lock:
            if not _registered:
                atexit.register(_drop_at_exit)
                _registered.append(True)
            _created.append((target, schema))
            mine.append((target, schema))
        return await PostgresStore.open(target, schema=schema, pool_size=2)

    async def cleanup() -> None:
        with _lock:
            pending = list(mine)
            mine.clear()
            for made in pending:
                if made in _created:
                    _created.remove(made)
        await anyio.to_thread.run_sync(_drop, pending)

    async def reopen(store: object) -> PostgresStore:
        if not isinstance(store, PostgresStore):
            raise TypeError(f"reopen expects a PostgresStore, got {type(store).__name__}")
        return await PostgresStore.open(target, schema=store.schema, pool_size=2)

    return Harness(
        new_step_store=new_store, new_session_store=new_store, reopen=reopen, cleanup=cleanup
    )


def _drop_at_exit() -> None:
    try:
        drop_test_schemas()
    except Exception as exc:  # the server may be gone by now; say so, don't crash the exit
        print(f"agentloopsql.testing: could not drop test schemas: {exc}", file=sys.stderr)


def _empty_directory(directory: str) -> None:
    """Delete the files in ``directory`` (the closed stores' databases and journals)."""
    with os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def drop_test_schemas() -> None:
    """Drop every schema :func:`postgres` created in this process (blocking; idempotent)."""
    with _lock:
        pending = list(_created)
        _created.clear()
    _drop(pending)


def _drop(pending: list[tuple[str, str]]) -> None:
    """Drop the ``(dsn, schema)`` schemas, one connection per DSN (blocking)."""
    import psycopg
    from psycopg import sql

    by_dsn: dict[str, list[str]] = {}
    for target, schema in pending:
        by_dsn.setdefault(target, []).append(schema)
    for target, schemas in by_dsn.items():
        with psycopg.connect(target, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
