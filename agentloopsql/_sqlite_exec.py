"""How a ``SqliteStore``'s one worker thread runs batches: group commit.

Every job waiting when the thread wakes (up to ``max_batch``) runs, in
queue order, inside one ``BEGIN IMMEDIATE`` ... ``COMMIT`` when any of them
writes, so sixteen concurrent appends cost one commit (one fsync), not
sixteen. If any job of a shared transaction fails, the transaction is rolled
back and each job reruns in a transaction of its own, so one failure never
takes the others with it. Batches that only read run in autocommit and take
no write lock.

Every kind of work runs the same way here (its ``run``, inside the
transaction): SQLite never loses its connection mid-call, so no kind's
``committed`` check is needed, and a taken job is never interrupted.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from typing import Any

import outcome

from agentloop import StoreError, StoreUnavailableError
from agentloopsql._jobs import writes
from agentloopsql._worker import Job, dead_worker_error

SqliteJob = Job[sqlite3.Connection]


def unavailable(exc: BaseException) -> StoreUnavailableError:
    """The ``StoreUnavailableError`` a SQLite failure surfaces as."""
    return StoreUnavailableError(f"SQLite failed: {exc}", exc)


def _capture(job: SqliteJob, conn: sqlite3.Connection) -> outcome.Outcome[Any]:
    try:
        return outcome.Value(job.work.run(conn))
    except sqlite3.Error as exc:
        return outcome.Error(unavailable(exc))
    except Exception as exc:
        return outcome.Error(exc)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


class SqliteExecutor:
    """Group commit over the connection ``connect`` opens in the worker thread."""

    max_batch = 256

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect

    def batchable(self, job: SqliteJob) -> bool:
        return True

    def connect(self) -> sqlite3.Connection:
        return self._connect()

    def disconnect(self, conn: sqlite3.Connection) -> None:
        conn.close()

    def interrupt(self, job: SqliteJob) -> None:
        return None  # a taken job runs to its end (its batch shares one transaction)

    def dead_error(self, exc: BaseException) -> StoreError:
        if isinstance(exc, sqlite3.Error):
            return unavailable(exc)
        return dead_worker_error("SqliteStore", exc)

    def run_batch(self, conn: sqlite3.Connection, jobs: list[SqliteJob]) -> None:
        if not any(writes(job.work) for job in jobs):
            for job in jobs:
                job.result = _capture(job, conn)
        elif not self._run_shared(conn, jobs):
            for job in jobs:
                if writes(job.work):
                    self._run_shared(conn, [job], alone=True)
                else:
                    job.result = _capture(job, conn)

    def _run_shared(
        self, conn: sqlite3.Connection, jobs: list[SqliteJob], alone: bool = False
    ) -> bool:
        """Run ``jobs`` in one transaction; ``False`` if it was rolled back and must be split."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for job in jobs:
                job.result = outcome.Error(unavailable(exc))
            return True
        results: list[outcome.Outcome[Any]] = []
        for job in jobs:
            result = _capture(job, conn)
            if isinstance(result, outcome.Error):
                _rollback(conn)
                if not alone:
                    return False
                job.result = result
                return True
            results.append(result)
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            results = [outcome.Error(unavailable(exc)) for _ in jobs]
        for job, result in zip(jobs, results, strict=True):
            job.result = result
        return True
