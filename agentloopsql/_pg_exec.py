"""How a ``PostgresStore``'s worker threads run jobs: pooled connections, one retry, group append.

Each worker runs one job at a time on a connection borrowed from the
``psycopg_pool`` pool, except appends: the appends waiting when a worker
wakes become one multi-row ``INSERT`` (one statement, one commit, all rows
or none), so concurrent sessions share commits instead of queueing for them.

A connection that breaks under a call is retried once after the pool has
checked its idle connections. A non-idempotent write (``append``,
``finalize``) first asks, on the fresh connection, whether its lost attempt
committed (by a random key stored with the row), so it is never applied twice.
Cancellation: when every caller of a running statement has been cancelled
(and it is the first attempt, not a retry after a lost connection), a helper
thread asks the server to cancel it, repeating until the statement ends. A
statement the server cancelled rolled back (each is one autocommit
transaction), so its callers get ``trio.Cancelled`` and nothing happened; one
that completed anyway is reported as done. The connection is then closed, not
returned to the pool, so a late cancel request cannot hit a later statement.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import outcome
import psycopg
import psycopg_pool

from agentloop import RunStep, StoreError, StoreUnavailableError
from agentloopsql._jobs import AnyWork, Append, IdempotentWrite, KeyedWrite, Read
from agentloopsql._worker import Interrupted, Job, dead_worker_error

if TYPE_CHECKING:
    from agentloopsql._pg_ops import PgOps

    Conn = psycopg.Connection[Any]
    PgJob = Job[Conn]

R = TypeVar("R")


class _Lost(Exception):
    """The connection broke under a call; whether the call committed is unknown."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


# How often a running statement whose callers were all cancelled is asked again
# to stop (a request that reaches the server between statements is ignored).
_CANCEL_EVERY = 0.2


class _Running:
    """The jobs of one batch while a worker runs them: what :meth:`PgExecutor.interrupt` needs."""

    __slots__ = ("cancelling", "conn", "done", "interruptible", "jobs")

    def __init__(self, jobs: list[PgJob]) -> None:
        self.jobs = jobs
        self.conn: Conn | None = None  # set while the first attempt runs a statement
        self.interruptible = True  # False once a retry begins: the outcome could be unknown
        self.cancelling: threading.Thread | None = None
        self.done = threading.Event()

    def all_cancelled(self) -> bool:
        return all(job.cancel_requested for job in self.jobs)


def _send_cancels(run: _Running, conn: Conn) -> None:
    safe = getattr(conn, "cancel_safe", None)  # psycopg >= 3.2
    cancel = partial(safe, timeout=2.0) if safe is not None else conn.cancel
    while True:
        with contextlib.suppress(Exception):  # best effort; the next round tries again
            cancel()
        if run.done.wait(_CANCEL_EVERY):
            return


class PgExecutor:
    """Runs jobs for one store on its pool; see the module docstring."""

    max_batch = 64

    def __init__(self, pool: psycopg_pool.ConnectionPool[Any], ops: PgOps) -> None:
        self._pool = pool
        self._ops = ops
        self._lock = threading.Lock()
        self._running: dict[int, _Running] = {}  # id(job) -> its batch, while it runs

    def interrupt(self, job: PgJob) -> None:
        with self._lock:
            job.cancel_requested = True
            run = self._running.get(id(job))
            if run is None or run.conn is None or run.cancelling is not None:
                return  # not running a statement now; the worker checks the flag itself
            if not (run.interruptible and run.all_cancelled()):
                return
            run.cancelling = threading.Thread(
                target=_send_cancels, args=(run, run.conn), name="agentloopsql cancel", daemon=True
            )
            run.cancelling.start()

    def batchable(self, job: PgJob) -> bool:
        return isinstance(job.work, Append)

    def connect(self) -> None:
        return None  # connections are borrowed from the pool per job

    def disconnect(self, conn: None) -> None:
        return None

    def dead_error(self, exc: BaseException) -> StoreError:
        return dead_worker_error("PostgresStore", exc)

    def run_batch(self, conn: None, jobs: list[PgJob]) -> None:
        run = _Running(jobs)
        with self._lock:
            for job in jobs:
                self._running[id(job)] = run
        try:
            self._run_batch(run, jobs)
        finally:
            with self._lock:
                for job in jobs:
                    del self._running[id(job)]

    def _run_batch(self, run: _Running, jobs: list[PgJob]) -> None:
        if len(jobs) == 1:
            jobs[0].result = outcome.capture(self._call_alone, jobs[0].work, run)
            return
        # batchable() lets only appends share a batch.
        appends = [job.work for job in jobs if isinstance(job.work, Append)]
        assert len(appends) == len(jobs)
        rows: list[tuple[RunStep, int]] = [row for append in appends for row in append.rows]
        ops = self._ops
        result = outcome.capture(
            self.call_once, lambda c: ops.append_many(c, rows), appends[0].committed, run
        )
        if isinstance(result, outcome.Value):
            for job in jobs:
                job.result = outcome.Value(None)
        elif isinstance(result.error, Interrupted):
            for job in jobs:
                job.result = outcome.Error(Interrupted())
        elif isinstance(result.error, StoreUnavailableError):
            error = result.error
            for job in jobs:  # one exception object per caller: tracebacks stay apart
                job.result = outcome.Error(StoreUnavailableError(str(error), error.cause))
        else:  # a row the server refused: isolate it, let the others commit
            for job in jobs:
                job.result = outcome.capture(self._call_alone, job.work)

    def _call_alone(self, work: AnyWork[Conn], run: _Running | None = None) -> object:
        """Run one call's ``work`` the way its kind allows."""
        if isinstance(work, Read | IdempotentWrite):
            return self.call(work.run, run)
        if isinstance(work, KeyedWrite) or len(work.rows) == 1:
            self.call_once(work.run, work.committed, run)
            return None
        # Autocommit: several rows are all-or-nothing only as one statement.
        ops, rows = self._ops, list[tuple[RunStep, int]](work.rows)
        self.call_once(lambda c: ops.append_many(c, rows), work.committed, run)
        return None

    def call(self, fn: Callable[[Conn], R], run: _Running | None = None) -> R:
        """Run ``fn`` (safe to repeat) on a pooled connection; once more if the connection is lost.

        Raises:
            Interrupted: every caller of ``run`` was cancelled and ``fn`` did not happen.
            StoreUnavailableError: no connection, or it was lost on the retry too.
            StoreError: the server refused the statement.
        """
        try:
            return self._once(fn, run)
        except _Lost:
            pass
        self._settling(run)
        try:
            return self._once(fn)
        except _Lost as lost:
            cause = lost.cause
        raise StoreUnavailableError(f"PostgreSQL connection lost twice: {cause}", cause) from cause

    def call_once(
        self,
        fn: Callable[[Conn], None],
        committed: Callable[[Conn], bool],
        run: _Running | None = None,
    ) -> None:
        """Run the write ``fn`` once: after a lost connection, ``committed`` says if it landed.

        Raises:
            Interrupted: every caller of ``run`` was cancelled and ``fn`` did not happen.
            StoreUnavailableError: no connection, or it was lost on the retry too (the
                message says whether the write may have committed).
            StoreError: the server refused the statement.
        """
        try:
            return self._once(fn, run)
        except _Lost:
            pass
        self._settling(run)
        try:
            if not self._once(committed):  # the lost attempt did not commit: try again
                self._once(fn)
            return None
        except _Lost as lost:
            cause = lost.cause
        try:  # did the retry itself commit before its connection died?
            if self._once(committed):
                return None
        except _Lost:
            raise StoreUnavailableError(
                f"PostgreSQL connection lost three times; the write may have committed: {cause}",
                cause,
            ) from cause
        raise StoreUnavailableError(
            f"PostgreSQL connection lost twice; nothing was written: {cause}", cause
        ) from cause

    def _settling(self, run: _Running | None) -> None:
        """A first attempt's connection was lost: its outcome is being settled, then retried."""
        if run is not None:
            with self._lock:
                run.interruptible = False
        self._pool.check()  # drop every other connection the same event killed

    def _once(self, fn: Callable[[Conn], R], run: _Running | None = None) -> R:
        conn = None
        try:
            with self._pool.connection() as conn:
                if run is None:
                    return fn(conn)
                return self._interruptible(fn, conn, run)
        except psycopg_pool.PoolTimeout as exc:
            raise StoreUnavailableError(f"no PostgreSQL connection available: {exc}", exc) from exc
        except psycopg.Error as exc:
            if conn is not None and (conn.broken or conn.closed):
                raise _Lost(exc) from None
            if isinstance(exc, psycopg.errors.QueryCanceled):  # statement_timeout, an admin
                raise StoreUnavailableError(
                    f"PostgreSQL cancelled the statement (statement_timeout or an administrator), "
                    f"which rolled back: {exc}",
                    exc,
                ) from exc
            if isinstance(exc, psycopg.OperationalError):
                raise StoreUnavailableError(f"PostgreSQL failed: {exc}", exc) from exc
            raise StoreError(f"PostgreSQL refused the statement: {exc}") from exc

    def _interruptible(self, fn: Callable[[Conn], R], conn: Conn, run: _Running) -> R:
        """``fn(conn)``, which :meth:`interrupt` may cancel on the server."""
        with self._lock:
            if run.all_cancelled():
                raise Interrupted  # every caller gave up before it started
            run.conn = conn
        try:
            return fn(conn)
        except psycopg.errors.QueryCanceled:
            if run.cancelling is None:
                raise  # not ours (statement_timeout, an administrator)
            raise Interrupted from None  # one autocommit statement: it rolled back
        finally:
            with self._lock:
                run.conn = None
                cancelling = run.cancelling
            if cancelling is not None:
                run.done.set()
                cancelling.join()
                conn.close()  # a late cancel request must not reach a later statement
