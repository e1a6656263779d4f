"""How a ``PostgresStore``'s worker threads run jobs: pooled connections, one retry, group append.

Each worker runs one job at a time on a connection borrowed from the
``psycopg_pool`` pool, except appends: the appends waiting when a worker
wakes become one multi-row ``INSERT`` (one statement, one commit, all rows
or none), so concurrent sessions share commits instead of queueing for them.

A connection that breaks under a call is retried once after the pool has
checked its idle connections. A non-idempotent write (``append``,
``finalize``) first asks, on the fresh connection, whether its lost attempt
committed (by a random key stored with the row), so it is never applied twice.
Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import outcome
import psycopg
import psycopg_pool

from agentloop import RunStep, StoreError, StoreUnavailableError
from agentloopsql._worker import Job, dead_worker_error

if TYPE_CHECKING:
    from agentloopsql._pg_ops import PgOps

    Conn = psycopg.Connection[Any]

R = TypeVar("R")


class _Lost(Exception):
    """The connection broke under a call; whether the call committed is unknown."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class PgExecutor:
    """Runs jobs for one store on its pool; see the module docstring."""

    max_batch = 64

    def __init__(self, pool: psycopg_pool.ConnectionPool[Any], ops: PgOps) -> None:
        self._pool = pool
        self._ops = ops

    def batchable(self, job: Job[Any]) -> bool:
        return job.item is not None

    def connect(self) -> None:
        return None  # connections are borrowed from the pool per job

    def disconnect(self, conn: None) -> None:
        return None

    def dead_error(self, exc: BaseException) -> StoreError:
        return dead_worker_error("PostgresStore", exc)

    def run_batch(self, conn: None, jobs: list[Job[Any]]) -> None:
        if len(jobs) == 1:
            job = jobs[0]
            job.result = outcome.capture(self.call, job.fn, job.landed)
            return
        items = cast("list[tuple[RunStep, int]]", [job.item for job in jobs])
        ops = self._ops
        first_step, first_key = items[0]
        result = outcome.capture(
            self.call,
            lambda c: ops.append_many(c, items),
            lambda c: ops.append_landed(c, first_step.session_id, first_key),
        )
        if isinstance(result, outcome.Value):
            for job in jobs:
                job.result = outcome.Value(None)
        elif isinstance(result.error, StoreUnavailableError):
            error = result.error
            for job in jobs:  # one exception object per caller: tracebacks stay apart
                job.result = outcome.Error(StoreUnavailableError(str(error), error.cause))
        else:  # a row the server refused: isolate it, let the others commit
            for job in jobs:
                job.result = outcome.capture(self.call, job.fn, job.landed)

    def call(self, fn: Callable[[Conn], R], landed: Callable[[Conn], bool] | None) -> R:
        """Run ``fn`` on a pooled connection, retrying once if the connection is lost.

        Raises:
            StoreUnavailableError: no connection, or it was lost on the retry too.
            StoreError: the server refused the statement.
        """
        try:
            return self._once(fn)
        except _Lost:
            pass
        try:
            self._pool.check()  # drop every other connection the same event killed
            if landed is not None and self._once(landed):
                return cast("R", None)  # the lost attempt committed: done
            return self._once(fn)
        except _Lost as lost:
            cause = lost.cause
        if landed is not None:  # did the retry itself commit before its connection died?
            try:
                if self._once(landed):
                    return cast("R", None)
            except _Lost:
                raise StoreUnavailableError(
                    f"PostgreSQL connection lost three times; the write may have committed: "
                    f"{cause}",
                    cause,
                ) from cause
            raise StoreUnavailableError(
                f"PostgreSQL connection lost twice; nothing was written: {cause}", cause
            ) from cause
        raise StoreUnavailableError(f"PostgreSQL connection lost twice: {cause}", cause) from cause

    def _once(self, fn: Callable[[Conn], R]) -> R:
        conn = None
        try:
            with self._pool.connection() as conn:
                return fn(conn)
        except psycopg_pool.PoolTimeout as exc:
            raise StoreUnavailableError(f"no PostgreSQL connection available: {exc}", exc) from exc
        except psycopg.Error as exc:
            if conn is not None and (conn.broken or conn.closed):
                raise _Lost(exc) from None
            if isinstance(exc, psycopg.OperationalError):
                raise StoreUnavailableError(f"PostgreSQL failed: {exc}", exc) from exc
            raise StoreError(f"PostgreSQL refused the statement: {exc}") from exc
