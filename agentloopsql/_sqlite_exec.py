"""How a ``SqliteStore``'s one worker thread runs batches: group commit, cancellable lock waits.

Every job waiting when the thread wakes (up to ``max_batch``) runs, in
queue order, inside one ``BEGIN IMMEDIATE`` ... ``COMMIT`` when any of them
writes, so sixteen concurrent appends cost one commit (one fsync), not
sixteen. If any job of a shared transaction fails, the transaction is rolled
back and each job reruns in a transaction of its own, so one failure never
takes the others with it. Batches that only read run in autocommit and take
no write lock.

Waiting for another connection's lock: the connection's own busy timeout is
a short slice (:data:`BUSY_SLICE`). When SQLite still answers "database is
locked" (``SQLITE_BUSY``, always before anything of the transaction took
effect: it is rolled back whole), the thread waits a little and tries again,
until the store's ``busy_timeout`` has passed since the batch began; then
its callers get ``StoreUnavailableError`` naming the file and the lock.
Jobs of the batch that did run (reads, or writes rerun alone after a failure)
are answered before the wait. Between tries, every job whose caller was
cancelled is dropped from the batch and answered at once with
:class:`~agentloopsql._workers.Interrupted` (its caller gets
the backend's cancellation; nothing of it happened), and a cancellation wakes the
waiting thread. A job whose transaction is running is never interrupted: it
commits or rolls back whole, and its caller gets that outcome.

A row SQLite refuses (a CHECK, a constraint, a trigger's ``RAISE``) fails
its own call with a plain ``StoreError`` (:func:`refused`), as on PostgreSQL:
retrying it cannot succeed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import outcome

from agentloop import StoreError, StoreUnavailableError
from agentloopsql._sqlite_schema import show_path
from agentloopsql._workers import Interrupted, Job, dead_worker_error, hand_back, writes

SqliteJob = Job[sqlite3.Connection]

BUSY_SLICE = 0.01
"""Seconds SQLite's own busy handler waits for a lock before the worker looks for cancellations."""

_SQLITE_BUSY = 5  # the primary result code; extended codes keep it in the low byte
_PAUSE_FIRST = 0.001
_PAUSE_MOST = 0.02  # a cancelled caller wakes the thread at once; this bounds the polling


def unavailable(exc: BaseException) -> StoreUnavailableError:
    """The ``StoreUnavailableError`` a SQLite failure surfaces as."""
    return StoreUnavailableError(f"SQLite failed: {exc}", exc)


_MESSAGE_MAX = 100


def refused(exc: sqlite3.IntegrityError, op: str) -> StoreError:
    """The permanent error of a row SQLite refused (a CHECK, a constraint, a trigger's RAISE).

    As on PostgreSQL, a refusal is a plain ``StoreError``: the same call
    would be refused again, so retrying will not help. The database's own
    message is kept to one line of about 100 characters (a trigger's
    ``RAISE`` may quote a whole value).
    """
    said = " ".join(str(exc).split())
    if len(said) > _MESSAGE_MAX:
        said = f"{said[:_MESSAGE_MAX]}...({len(said)} chars)"
    kind = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    error = StoreError(
        f"SQLite refused {op}: it breaks a constraint or trigger of the schema ({kind}): "
        f"{said}; retrying will not help"
    )
    error.__cause__ = exc
    return error


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (``SQLITE_BUSY`` or an extended form)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.OperationalError)
        and code is not None
        and code & 0xFF == _SQLITE_BUSY
    )


class _Busy(Exception):
    """Another connection holds the lock this attempt needed; nothing of it took effect."""

    def __init__(self, cause: sqlite3.Error) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _capture(job: SqliteJob, conn: sqlite3.Connection) -> outcome.Outcome[Any]:
    """``job``'s outcome; raises :class:`_Busy` when it could not take a lock."""
    try:
        return outcome.Value(job.work.run(conn))
    except sqlite3.IntegrityError as exc:
        return outcome.Error(refused(exc, job.work.name))
    except sqlite3.Error as exc:
        if is_busy(exc):
            raise _Busy(exc) from exc
        return outcome.Error(unavailable(exc))
    except Exception as exc:
        return outcome.Error(exc)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _answer_now(batch: list[SqliteJob], answered: list[SqliteJob]) -> None:
    """Hand ``answered`` back before the batch ends (it waits for a lock), not again after."""
    for job in answered:
        batch.remove(job)
    if answered:
        hand_back(answered)


class SqliteExecutor:
    """Group commit over the connection ``connect`` opens in the worker thread.

    ``path`` names the file in errors; ``busy_timeout`` (seconds) bounds how
    long a batch waits for another connection's lock.
    """

    max_batch = 256

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], path: str, busy_timeout: float
    ) -> None:
        self._connect = connect
        self._path = path
        self._busy_timeout = busy_timeout
        self._lock = threading.Lock()  # guards job.cancel_requested
        self._wake = threading.Event()  # set when a taken job's caller is cancelled

    def batchable(self, job: SqliteJob) -> bool:
        return True

    def connect(self) -> sqlite3.Connection:
        conn = self._connect()
        # Open waited up to busy_timeout at once; from now on the worker waits
        # in slices, looking for cancelled callers between them.
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SLICE * 1000):d}")
        return conn

    def disconnect(self, conn: sqlite3.Connection) -> None:
        conn.close()

    def interrupt(self, job: SqliteJob) -> None:
        with self._lock:
            job.cancel_requested = True
        self._wake.set()

    def dead_error(self, exc: BaseException) -> StoreError:
        if isinstance(exc, sqlite3.Error):
            return unavailable(exc)
        return dead_worker_error("SqliteStore", exc)

    def run_batch(self, conn: sqlite3.Connection, jobs: list[SqliteJob]) -> None:
        deadline = time.monotonic() + self._busy_timeout
        pause = _PAUSE_FIRST
        pending = jobs
        while True:
            self._wake.clear()  # before looking, so a cancellation from now on wakes the wait
            pending = self._drop_cancelled(jobs, pending)
            if not pending:
                return
            pending, busy = self._attempt(conn, pending)
            if busy is None:
                return
            _answer_now(jobs, [job for job in jobs if job.result is not None])
            left = deadline - time.monotonic()
            if left <= 0:
                for job in pending:
                    job.result = outcome.Error(self._locked_error(busy.cause))
                return
            self._wake.wait(min(pause, left))
            pause = min(pause * 2, _PAUSE_MOST)

    def _drop_cancelled(self, batch: list[SqliteJob], pending: list[SqliteJob]) -> list[SqliteJob]:
        """Answer the cancelled jobs of ``pending`` now (they did nothing); the others remain."""
        with self._lock:
            dropped = [job for job in pending if job.cancel_requested]
        if not dropped:
            return pending
        for job in dropped:
            job.result = outcome.Error(Interrupted())
        _answer_now(batch, dropped)
        return [job for job in pending if job.result is None]

    def _locked_error(self, cause: sqlite3.Error) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"SQLite failed: database is locked: another connection held the lock on "
            f"{show_path(self._path)} for busy_timeout ({self._busy_timeout:g} s); "
            f"the call did nothing",
            cause,
        )

    def _attempt(
        self, conn: sqlite3.Connection, jobs: list[SqliteJob]
    ) -> tuple[list[SqliteJob], _Busy | None]:
        """Run ``jobs`` once: the ones that found the file locked (and did nothing), and why."""
        try:
            if not any(writes(job.work) for job in jobs):
                return self._each(conn, jobs)
            if self._run_shared(conn, jobs):
                return [], None
        except _Busy as busy:
            return jobs, busy
        return self._each(conn, jobs)  # one of them failed: each in its own transaction

    def _each(
        self, conn: sqlite3.Connection, jobs: list[SqliteJob]
    ) -> tuple[list[SqliteJob], _Busy | None]:
        """Run each job on its own (a write in its own transaction)."""
        busy: list[SqliteJob] = []
        last: _Busy | None = None
        for job in jobs:
            try:
                if writes(job.work):
                    self._run_shared(conn, [job], alone=True)
                else:
                    job.result = _capture(job, conn)
            except _Busy as exc:
                busy.append(job)
                last = exc
        return busy, last

    def _run_shared(
        self, conn: sqlite3.Connection, jobs: list[SqliteJob], alone: bool = False
    ) -> bool:
        """Run ``jobs`` in one transaction; ``False`` if it was rolled back and must be split.

        Raises:
            _Busy: the file was locked; the transaction was rolled back whole.
        """
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if is_busy(exc):
                raise _Busy(exc) from exc
            for job in jobs:
                job.result = outcome.Error(unavailable(exc))
            return True
        results: list[outcome.Outcome[Any]] = []
        try:
            for job in jobs:
                result = _capture(job, conn)
                if isinstance(result, outcome.Error):
                    _rollback(conn)
                    if not alone:
                        return False
                    job.result = result
                    return True
                results.append(result)
            conn.execute("COMMIT")
        except _Busy:
            _rollback(conn)
            raise
        except sqlite3.Error as exc:
            _rollback(conn)
            if is_busy(exc):
                raise _Busy(exc) from exc
            results = [outcome.Error(unavailable(exc)) for _ in jobs]
        for job, result in zip(jobs, results, strict=True):
            job.result = result
        return True
