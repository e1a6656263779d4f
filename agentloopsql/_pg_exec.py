"""How a ``PostgresStore``'s worker threads run jobs: pooled connections, one retry,
group append, cancellation on the server, and what an error means.

Each worker runs one job at a time on a connection borrowed from the
``psycopg_pool`` pool, except appends: the appends waiting when a worker
wakes become one multi-row ``INSERT`` (one statement, one commit, all rows
or none), so concurrent sessions share commits instead of queueing for them.
When the server refuses that INSERT for one call's rows (a constraint, a size
limit, a check of the store's own), the batch is halved until each refused
call fails alone; every other call commits.

Waits are bounded: a call that could not get a worker and a connection within
``pool_timeout`` of being made fails with ``StoreUnavailableError`` saying what
it waited for (the worker threads' watchdog fails the ones no worker takes).

A connection that breaks under a call is retried once after the pool has
checked its idle connections. A non-idempotent write (``append``,
``finalize``) first asks, on the fresh connection, whether its lost attempt
committed (by a random key stored with the row), so it is never applied twice.

**Cancellation**: when every caller of a running statement has been cancelled
(and it is the first attempt, not a retry after a lost connection), a helper
thread asks the server to cancel it (psycopg's ``Connection.cancel_safe()``,
or ``cancel()`` before psycopg 3.2), repeating until the statement ends. A
statement the server cancelled rolled back (each is one autocommit
transaction), so its callers get the backend's cancellation and nothing
happened; one that completed anyway is reported as done. The connection is
then closed, never reused, so a late cancel request cannot hit a later
statement; it is given back closed, so the pool opens a replacement (without
the warning psycopg_pool logs for a closed connection given back: that one is
expected here).

**What an error means**: only a lost connection, a timeout, a server going
away or a server that is read-only for now (SQLSTATE 25006: a standby, or a
primary demoted by a failover) is ``StoreUnavailableError`` (retrying may succeed). Everything the
server refuses for a reason of its own (a value its type cannot hold, a
constraint, a size limit such as the btree index row limit, a missing
privilege, a trigger) is a plain ``StoreError``: retrying the same call can
never succeed. psycopg files some of these under ``OperationalError``
(``ProgramLimitExceeded``, ``StatementTooComplex``), so the SQLSTATE decides,
not the class. Messages name the operation and the rule, and quote at most ~60
characters of any value: the server's own message may embed a whole value (a
trigger's ``RAISE``, an invalid input), so it is trimmed.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, Self, TypeVar

import outcome
import psycopg
import psycopg_pool

from agentloop import RunStep, StoreError, StoreUnavailableError
from agentloopsql._pg_ops import PgOps
from agentloopsql._workers import (
    AnyWork,
    Append,
    FencedAppend,
    IdempotentWrite,
    Interrupted,
    Job,
    KeyedWrite,
    Read,
    dead_worker_error,
)

Conn = psycopg.Connection[Any]
PgJob = Job[Conn]

R = TypeVar("R")


# -- what an error means ---------------------------------------------------------

# SQLSTATE classes (and single codes) that retrying may fix: the connection,
# operator intervention (cancel, shutdown), lock and serialization conflicts,
# exhausted resources, the server's own I/O.
_TRANSIENT_CLASSES = {
    "08": "the connection failed",
    "40": "a conflict with a concurrent transaction (deadlock or serialization)",
    "53": "the server ran out of a resource (disk, memory or connections)",
    "57": "the server stopped the statement (statement_timeout, a cancel or a shutdown)",
    "58": "a system error on the server",
}
_TRANSIENT_CODES = {
    "55P03": "a lock was not available within lock_timeout",
    "55006": "an object is in use by another session",
    "57014": "the server cancelled the statement (statement_timeout, wait_timeout or an "
    "administrator)",
    # A standby, or a primary demoted by a failover: the same call succeeds
    # once the DSN leads to a primary again (target_session_attrs=read-write).
    "25006": "the server is read-only now (a standby or a demoted primary)",
}
_PERMANENT_CODES = {"57P04": "the database was dropped"}

_PERMANENT_CLASSES = {
    "0A": "a feature the server does not support",
    "21": "a value count the statement does not accept",
    "22": "a value the column's type cannot hold",
    "23": "a constraint of the schema",
    "42": "the statement does not fit the schema",
    "54": "a PostgreSQL size limit (e.g. an index row over its maximum size)",
    "P0": "a rule a database function or trigger enforces",
    "XX": "an internal error of the server",
}
_PERMANENT_BY_TYPE: tuple[tuple[type[psycopg.Error], str], ...] = (
    (psycopg.DataError, "a value the driver cannot send"),
    (psycopg.IntegrityError, "a constraint of the schema"),
    (psycopg.NotSupportedError, "a feature the server does not support"),
    (psycopg.ProgrammingError, "the statement does not fit the schema"),
)

_QUOTED = re.compile(r'"[^"]{61,}"|\'[^\']{61,}\'')
_QUOTE_MAX = 60
_MESSAGE_MAX = 100


def _trim(text: str) -> str:
    """``text`` on one line, each long quoted value cut to ~60 characters, the whole to ~100."""
    text = " ".join(text.split())

    def cut(match: re.Match[str]) -> str:
        quoted = match.group(0)
        return f"{quoted[: _QUOTE_MAX + 1]}...({len(quoted) - 2} chars){quoted[0]}"

    text = _QUOTED.sub(cut, text)
    if len(text) > _MESSAGE_MAX:
        text = f"{text[:_MESSAGE_MAX]}...({len(text)} chars)"
    return text


def classify(exc: psycopg.Error, op: str) -> StoreError:
    """The store error for ``exc``, raised by the server or driver while running ``op``.

    ``StoreUnavailableError`` (with ``exc`` as ``cause``) when retrying later
    may succeed; otherwise a ``StoreError`` saying retrying will not help.
    The caller raises it ``from exc``.
    """
    diag = getattr(exc, "diag", None)
    code = exc.sqlstate or ""
    said = _trim((diag.message_primary if diag is not None else None) or str(exc))
    tag = f"SQLSTATE {code}, {type(exc).__name__}" if code else type(exc).__name__
    transient = _TRANSIENT_CODES.get(code) or _TRANSIENT_CLASSES.get(code[:2])
    if code in _PERMANENT_CODES:
        transient = None
    if transient is None and not code and isinstance(exc, psycopg.OperationalError):
        transient = "the driver lost or could not use the connection"
    if transient is not None:
        message = f"PostgreSQL could not run {op} now: {transient} ({tag}): {said}"
        return StoreUnavailableError(message, exc)
    rule = _PERMANENT_CODES.get(code) or _PERMANENT_CLASSES.get(code[:2])
    if rule is None:
        rule = next((r for kind, r in _PERMANENT_BY_TYPE if isinstance(exc, kind)), "its rules")
    constraint = getattr(diag, "constraint_name", None) if diag is not None else None
    if constraint:
        rule = f"{rule}, {_trim(repr(constraint))}"
    return StoreError(
        f"PostgreSQL refused {op}: it breaks {rule} ({tag}): {said}; retrying will not help"
    )


def waited_error(waited: float, limit: float) -> StoreUnavailableError:
    """The error of a call that waited ``pool_timeout`` for a worker and got none."""
    return StoreUnavailableError(
        f"no PostgreSQL connection was free within pool_timeout ({limit} s): the call waited "
        f"{waited:.2f} s for a worker, every one busy (e.g. with a statement waiting on a "
        "lock); nothing was done"
    )


def shared_outcome(result: outcome.Outcome[None]) -> bool:
    """Whether every caller of a shared INSERT gets ``result``: success, or the store is down.

    Any other error was one call's rows refused: the others must not fail with it.
    """
    return isinstance(result, outcome.Value) or (
        isinstance(result, outcome.Error) and isinstance(result.error, StoreUnavailableError)
    )


def copy_outcome(result: outcome.Outcome[None]) -> outcome.Outcome[None]:
    """``result`` for one more caller: one exception object per caller, tracebacks apart."""
    if isinstance(result, outcome.Error) and isinstance(result.error, StoreUnavailableError):
        error = result.error
        return outcome.Error(StoreUnavailableError(str(error), error.cause))
    return outcome.Value(None)


# -- a running batch and its cancellation -------------------------------------------

# How often a running statement whose callers were all cancelled is asked again
# to stop (a request that reaches the server between statements is ignored).
CANCEL_EVERY = 0.2


class Running:
    """The jobs of one batch while a worker runs them: what :meth:`PgExecutor.interrupt` needs."""

    __slots__ = ("cancelling", "conn", "done", "interruptible", "jobs", "wait")

    def __init__(self, jobs: list[PgJob]) -> None:
        self.jobs = jobs
        self.conn: Conn | None = None  # set while the first attempt runs a statement
        self.interruptible = True  # False once a retry begins: the outcome could be unknown
        self.cancelling: threading.Thread | None = None
        self.done: threading.Event | None = None  # made when cancelling starts, not per batch
        self.wait: float | None = None  # the first attempt's bound on waiting for a connection

    def all_cancelled(self) -> bool:
        return all(job.cancel_requested for job in self.jobs)


def send_cancels(done: threading.Event, cancel: Callable[[], object]) -> None:
    """Call ``cancel`` (one cancel request) every ``CANCEL_EVERY`` s until ``done`` is set."""
    while True:
        with contextlib.suppress(Exception):  # best effort; the next round tries again
            cancel()
        if done.wait(CANCEL_EVERY):
            return


def cancel_of(conn: Conn) -> Callable[[], object]:
    """One bounded cancel request for ``conn``'s running statement (blocking: not on a loop)."""
    safe = getattr(conn, "cancel_safe", None)  # psycopg >= 3.2
    return partial(safe, timeout=2.0) if safe is not None else conn.cancel


# -- a bound on the wait for the server, and a commit cut short -------------------


class WaitWatch:
    """Asks the server to cancel any statement running past ``limit`` seconds.

    One thread for the store, asleep unless a statement runs. ``statement_timeout``
    cannot do this: PostgreSQL turns it off before a commit waits for the
    synchronous standbys. A cancel that lands during that wait makes the server
    commit locally and say so (see :class:`ReplicationCheck`); one that lands
    earlier rolls the statement back (``QueryCanceled``).
    """

    def __init__(self, limit: float, name: str) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self._live: dict[int, list[Any]] = {}  # id(conn) -> [deadline, conn, fired]
        self._closed = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def start(self, conn: Conn) -> None:
        with self._cond:
            idle = not self._live
            self._live[id(conn)] = [time.monotonic() + self.limit, conn, False]
            if idle:  # otherwise the thread wakes by an earlier deadline anyway
                self._cond.notify()

    def stop(self, conn: Conn) -> bool:
        """End the watch of ``conn``'s statement; whether a cancel was sent for it."""
        with self._cond:
            entry = self._live.pop(id(conn), None)
        return entry is not None and bool(entry[2])

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _main(self) -> None:
        while (due := self._next_due()) is not None:
            for conn in due:
                with contextlib.suppress(Exception):  # best effort; repeated until stopped
                    cancel_of(conn)()

    def _next_due(self) -> list[Conn] | None:
        """The connections whose statements are past their deadline (waits for one); ``None``
        once closed."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                due = [entry for entry in self._live.values() if entry[0] <= now]
                if due:
                    for entry in due:
                        entry[0], entry[2] = now + CANCEL_EVERY, True
                    return [entry[1] for entry in due]
                soonest = min((entry[0] for entry in self._live.values()), default=None)
                self._cond.wait(None if soonest is None else soonest - now)
        return None


class ReplicationCheck:
    """Sees the server's warning that a commit's wait for synchronous standbys was cut short.

    PostgreSQL then has committed the transaction locally but cannot say
    whether any standby has it (``"canceling wait for synchronous replication
    ... The transaction has already committed locally, but might not have been
    replicated to the standby"``). Installed with psycopg's public
    ``add_notice_handler`` for one statement.
    """

    __slots__ = ("said",)

    def __init__(self) -> None:
        self.said: str | None = None

    def __call__(self, diag: psycopg.errors.Diagnostic) -> None:
        primary = diag.message_primary or ""
        if "synchronous replication" in primary and "committed locally" in (
            diag.message_detail or ""
        ):
            self.said = _trim(primary)


def not_replicated(op: str, said: str, cause: BaseException | None) -> StoreUnavailableError:
    """The error of a write committed locally whose wait for the standbys was cut short."""
    return StoreUnavailableError(
        f"PostgreSQL committed {op} locally, but its wait for the synchronous standby was cut "
        f"short ({said}): the write may not be replicated and could be lost in a failover; "
        "the outcome is unknown",
        cause,
    )


# -- reconnecting --------------------------------------------------------------------

# Fragments of libpq's and the server's messages for connection failures retrying
# cannot fix (the same list decides it at open).
PERMANENT_CONNECT = (
    "password authentication failed",
    "no password supplied",
    "authentication failed",
    "no pg_hba.conf entry",
    "does not exist",  # database "x" / role "x"
    "permission denied for database",
    "not permitted to log in",
)


class Reconnects:
    """When the store's pool reconnects: every ``interval`` seconds once ``armed``, until
    ``stopped``."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.armed = threading.Event()  # set once the store is open
        self.stopped = threading.Event()  # set when the store closes

    def connection_class(self) -> type[Conn]:
        """The connection class the store's pool makes its connections with.

        Its ``connect`` retries a failed attempt every ``interval`` seconds (each
        attempt bounded by ``connect_timeout``) until one succeeds, the failure
        is one retrying cannot fix (a refused login, a missing database), or
        the store closes. So after a failover or a restart a lost connection is
        back within ``interval`` of the server accepting connections again,
        never after the pool's own backoff (1 s, doubling, which psycopg_pool
        does not let its users set). While the store opens, a failure is
        reported at once (``open`` says why).
        """
        timing = self

        class StoreConnection(psycopg.Connection[Any]):
            reader: psycopg.Cursor[Any]  # the short reads' cursor (see agentloopsql._pg_ops)

            @classmethod
            def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
                while True:
                    try:
                        conn = super().connect(conninfo, **kwargs)
                        conn.reader = conn.cursor(binary=True)
                        return conn
                    except psycopg.OperationalError as exc:
                        if not timing.retries(exc):
                            raise
                    if timing.stopped.wait(timing.interval):
                        raise psycopg.OperationalError("the store closed while reconnecting")

        return StoreConnection

    def retries(self, exc: psycopg.OperationalError) -> bool:
        """Whether a failed connection attempt is tried again."""
        said = str(exc).lower()
        return (
            self.armed.is_set()
            and not self.stopped.is_set()
            and not any(text in said for text in PERMANENT_CONNECT)
        )


# -- the executor -------------------------------------------------------------------


class _Lost(Exception):
    """The connection broke under a call; whether the call committed is unknown."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _DeliberateDiscards(logging.Filter):
    """Drops psycopg_pool's warning about a connection this module closed on purpose.

    A connection whose statement was cancelled is closed, then given back to
    the pool (``putconn``, its only public way back) so that the pool opens a
    replacement. The pool logs every closed connection given back as a
    warning ("discarding closed connection"), which here says nothing wrong;
    it is dropped for those connections only. Any other connection the pool
    finds closed (a real loss) still warns.
    """

    def __init__(self) -> None:
        super().__init__()
        self._closed: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._lock = threading.Lock()

    def close(self, conn: Conn) -> None:
        """Close ``conn`` on purpose: the pool's warning about it is dropped."""
        with self._lock:
            self._closed.add(conn)
        conn.close()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        with self._lock:
            return not any(isinstance(a, psycopg.Connection) and a in self._closed for a in args)


_DISCARDS = _DeliberateDiscards()


class PgExecutor:
    """Runs jobs for one store on its pool; see the module docstring."""

    max_batch = 64

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[Any],
        ops: PgOps,
        wait_timeout: float | None,
        reconnects: Reconnects,
    ) -> None:
        self._pool = pool
        self._reconnects = reconnects
        self._ops = ops
        self._watch = (
            None if wait_timeout is None else WaitWatch(wait_timeout, "PostgresStore wait")
        )
        self._lock = threading.Lock()
        self._running: dict[int, Running] = {}  # id(job) -> its batch, while it runs
        logging.getLogger("psycopg.pool").addFilter(_DISCARDS)  # once: the same filter object

    def close(self) -> None:
        """Stop reconnecting and end the wait watch's thread (the workers have ended)."""
        self._reconnects.stopped.set()
        if self._watch is not None:
            self._watch.close()

    def interrupt(self, job: PgJob) -> None:
        with self._lock:
            job.cancel_requested = True
            run = self._running.get(id(job))
            if run is None or run.conn is None or run.cancelling is not None:
                return  # not running a statement now; the worker checks the flag itself
            if not (run.interruptible and run.all_cancelled()):
                return
            run.done = threading.Event()
            run.cancelling = threading.Thread(
                target=send_cancels,
                args=(run.done, cancel_of(run.conn)),
                name="agentloopsql cancel",
                daemon=True,
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
        live = self._expire(jobs)
        if not live:
            return
        run = Running(live)
        with self._lock:
            for job in live:
                self._running[id(job)] = run
        try:
            # The oldest call's budget bounds the wait for a connection: no call
            # waits longer than pool_timeout for a worker and a connection together.
            run.wait = max(live[0].queued_at + self._pool.timeout - time.monotonic(), 0.0)
            self._run_batch(run, live)
        finally:
            with self._lock:
                for job in live:
                    del self._running[id(job)]

    def _expire(self, jobs: list[PgJob]) -> list[PgJob]:
        """Fail the jobs that already waited ``pool_timeout`` for a worker; the others."""
        now, limit = time.monotonic(), self._pool.timeout
        live = [job for job in jobs if now - job.queued_at < limit]
        if len(live) < len(jobs):
            for job in jobs:
                if now - job.queued_at >= limit:
                    job.result = outcome.Error(waited_error(now - job.queued_at, limit))
        return live

    def _run_batch(self, run: Running, jobs: list[PgJob]) -> None:
        if len(jobs) == 1:
            jobs[0].result = outcome.capture(self._call_alone, jobs[0].work, run)
            return
        result = self._append_together(jobs, run)
        if isinstance(result, outcome.Error) and isinstance(result.error, Interrupted):
            for job in jobs:
                job.result = outcome.Error(Interrupted())
        elif shared_outcome(result):
            for job in jobs:
                job.result = copy_outcome(result)
        else:  # a row the server (or a check of the store) refused: find it
            self._isolate(jobs)

    def _append_together(self, jobs: list[PgJob], run: Running | None) -> outcome.Outcome[None]:
        """Every job's rows (batchable() lets only appends share a batch) in one INSERT."""
        appends = [job.work for job in jobs if isinstance(job.work, Append)]
        assert len(appends) == len(jobs)
        rows: list[tuple[RunStep, int]] = [row for append in appends for row in append.rows]
        ops = self._ops
        return outcome.capture(
            self._call_once,
            lambda c: ops.append_many(c, rows),
            appends[0].committed,
            "append",
            run,
        )

    def _isolate(self, jobs: list[PgJob]) -> None:
        """Some job's rows were refused: halve until each refused call fails alone.

        The halves that are accepted commit as one statement each, so one bad
        row among ``n`` costs about ``2 log2 n`` statements, not ``n``. A
        rerun never stores a row twice: each row's append key is unique.
        """
        if len(jobs) == 1:
            jobs[0].result = outcome.capture(self._call_alone, jobs[0].work)
            return
        middle = len(jobs) // 2
        for half in (jobs[:middle], jobs[middle:]):
            if len(half) == 1:
                self._isolate(half)
                continue
            result = self._append_together(half, None)
            if shared_outcome(result):
                for job in half:
                    job.result = copy_outcome(result)
            else:
                self._isolate(half)

    def _call_alone(self, work: AnyWork[Conn], run: Running | None = None) -> object:
        """Run one call's ``work`` the way its kind allows."""
        if isinstance(work, Read | IdempotentWrite):
            return self._call(work.run, work.name, run)
        self._call_once(self._write_of(work), work.committed, work.name, run)
        return None

    def _write_of(self, work: KeyedWrite[Conn] | Append[Conn]) -> Callable[[Conn], None]:
        """The one write that runs ``work`` alone (and again, when settling a lost attempt)."""
        ops = self._ops
        if isinstance(work, FencedAppend):  # the lease check and the rows: one statement
            lease, rows = work.lease, list[tuple[RunStep, int]](work.rows)
            return lambda c: ops.append_fenced(c, lease, rows)
        if isinstance(work, KeyedWrite) or len(work.rows) == 1:
            return work.run
        # Autocommit: several rows are all-or-nothing only as one statement.
        rows = list[tuple[RunStep, int]](work.rows)
        return lambda c: ops.append_many(c, rows)

    def _call(self, fn: Callable[[Conn], R], name: str, run: Running | None = None) -> R:
        """Run ``fn`` (safe to repeat) on a pooled connection; once more if the connection is lost.

        ``name`` is the store operation, for error messages.

        Raises:
            Interrupted: every caller of ``run`` was cancelled and ``fn`` did not happen.
            StoreUnavailableError: no connection, or it was lost on the retry too.
            StoreError: the server refused the statement.
        """
        try:
            return self._once(fn, name, run)
        except _Lost:
            pass
        self._settling(run)
        try:
            return self._once(fn, name)
        except _Lost as lost:
            cause = lost.cause
        raise StoreUnavailableError(f"PostgreSQL connection lost twice: {cause}", cause) from cause

    def _call_once(
        self,
        fn: Callable[[Conn], None],
        committed: Callable[[Conn], bool],
        name: str,
        run: Running | None = None,
    ) -> None:
        """Run the write ``fn`` once: after a lost connection, ``committed`` says if it landed.

        Raises:
            Interrupted: every caller of ``run`` was cancelled and ``fn`` did not happen.
            StoreUnavailableError: no connection, or it was lost on the retry too (the
                message says whether the write may have committed).
            StoreError: the server refused the statement.
        """
        try:
            return self._once(fn, name, run)
        except _Lost:
            pass
        self._settling(run)
        self._again(fn, committed, name)
        return None

    def _again(
        self, fn: Callable[[Conn], None], committed: Callable[[Conn], bool], name: str
    ) -> None:
        """The retry of a write whose first attempt was lost; see :meth:`_call_once`."""
        try:
            if not self._once(committed, name):  # the lost attempt did not commit: try again
                self._once(fn, name)
            return None
        except _Lost as lost:
            cause = lost.cause
        try:  # did the retry itself commit before its connection died?
            if self._once(committed, name):
                return None
        except _Lost:
            raise StoreUnavailableError(
                f"PostgreSQL connection lost three times; the write may have committed: {cause}",
                cause,
            ) from cause
        raise StoreUnavailableError(
            f"PostgreSQL connection lost twice; nothing was written: {cause}", cause
        ) from cause

    def _settling(self, run: Running | None) -> None:
        """A first attempt's connection was lost: its outcome is being settled, then retried."""
        if run is not None:
            with self._lock:
                run.interruptible = False
        self._pool.check()  # drop every other connection the same event killed

    def _once(self, fn: Callable[[Conn], R], name: str, run: Running | None = None) -> R:
        conn = None
        wait = None if run is None else run.wait
        started = time.monotonic()
        pool = self._pool
        try:
            conn = pool.getconn(wait)
            try:
                return self._watched(fn, conn, name, run)
            finally:
                pool.putconn(conn)
        except psycopg_pool.PoolTimeout as exc:
            waited = time.monotonic() - started
            raise StoreUnavailableError(
                f"no PostgreSQL connection was free within pool_timeout ({self._pool.timeout} s): "
                f"the call waited {waited:.2f} s for a connection (after any wait for a worker), "
                "every one busy (e.g. with a statement waiting on a lock) or being replaced; "
                "nothing was done",
                exc,
            ) from exc
        except psycopg.Error as exc:
            if conn is not None and (conn.broken or conn.closed):
                raise _Lost(exc) from None
            raise classify(exc, name) from exc

    def _watched(self, fn: Callable[[Conn], R], conn: Conn, name: str, run: Running | None) -> R:
        """``fn(conn)`` bounded by ``wait_timeout``; never a success whose commit's wait for
        the synchronous standbys was cut short.

        Raises:
            StoreUnavailableError: that wait was cut short (by ``wait_timeout``, a
                cancelled caller or the server); the write committed locally.
        """
        check, watch = ReplicationCheck(), self._watch
        conn.add_notice_handler(check)
        if watch is not None:
            watch.start(conn)
        fired = False
        try:
            result = fn(conn) if run is None else self._interruptible(fn, conn, run)
        except psycopg.Error as exc:
            fired = watch is not None and watch.stop(conn)
            if check.said is not None:  # over the error: the write did land, locally
                raise not_replicated(name, check.said, exc) from exc
            if fired and isinstance(exc, psycopg.errors.QueryCanceled):
                assert watch is not None
                raise StoreUnavailableError(
                    f"PostgreSQL did not finish {name} within wait_timeout ({watch.limit:g} s): "
                    "the store had the server cancel it, and it rolled back; nothing was done",
                    exc,
                ) from exc
            raise
        finally:
            conn.remove_notice_handler(check)
            if watch is not None and (watch.stop(conn) or fired):
                conn.close()  # a late cancel request must not reach a later statement
        if check.said is not None:
            raise not_replicated(name, check.said, None)
        return result

    def _interruptible(self, fn: Callable[[Conn], R], conn: Conn, run: Running) -> R:
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
                assert run.done is not None
                run.done.set()
                cancelling.join()
                _DISCARDS.close(conn)  # a late cancel request must not reach a later statement
