"""One dedicated thread per SQLite store, owning its connection, with group commit.

Trio tasks queue jobs (synchronous functions of the connection) and sleep.
The thread takes every job waiting when it wakes (up to ``MAX_BATCH``) and
runs them in order in one ``BEGIN IMMEDIATE`` ... ``COMMIT`` when any of
them writes, so sixteen concurrent appends cost one commit, not sixteen.
Results are handed back only after the commit, so nothing a caller sees can
still be rolled back. If any job of a shared transaction fails, the
transaction is rolled back and each job is rerun in a transaction of its
own, so one failure never takes the others with it.

Cancellation: a job still queued when its caller is cancelled is removed
and the caller gets ``trio.Cancelled`` (nothing happened). Once the thread
has taken a job it always runs to its end; the caller waits for it and
returns its result normally (the cancellation is delivered at the caller's
next checkpoint). A thread is never abandoned mid-write.
"""

from __future__ import annotations

import collections
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import outcome
import trio

from agentloop import StoreClosedError, StoreError, StoreUnavailableError

R = TypeVar("R")

MAX_BATCH = 256


class _Job(Generic[R]):
    __slots__ = ("fn", "result", "taken", "task", "token", "write")

    def __init__(self, fn: Callable[[sqlite3.Connection], R], write: bool) -> None:
        self.fn = fn
        self.write = write
        self.task = trio.lowlevel.current_task()
        self.token = trio.lowlevel.current_trio_token()
        self.taken = False
        self.result: outcome.Outcome[R] | None = None


def unavailable(exc: BaseException) -> StoreUnavailableError:
    """The ``StoreUnavailableError`` a driver failure surfaces as."""
    return StoreUnavailableError(f"SQLite failed: {exc}", exc)


def _capture(job: _Job[Any], conn: sqlite3.Connection) -> outcome.Outcome[Any]:
    try:
        return outcome.Value(job.fn(conn))
    except sqlite3.Error as exc:
        return outcome.Error(unavailable(exc))
    except Exception as exc:
        return outcome.Error(exc)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _deliver(jobs: list[_Job[Any]]) -> None:
    for job in jobs:
        assert job.result is not None
        trio.lowlevel.reschedule(job.task, job.result)


class ConnectionThread:
    """The thread that owns one ``sqlite3`` connection; see the module docstring."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], owner: str) -> None:
        self._connect = connect
        self._owner = owner
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[_Job[Any]] = collections.deque()
        self._closing = False
        self._dead: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"{owner} connection", daemon=True)
        self._thread.start()

    async def call(self, fn: Callable[[sqlite3.Connection], R], *, write: bool) -> R:
        """Run ``fn(conn)`` on the connection thread and return its result.

        Raises:
            StoreClosedError: the store is closing or closed.
            StoreUnavailableError: SQLite failed; a write did not happen.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        job: _Job[R] = _Job(fn, write)
        self._enqueue(job)

        def abort(_: object) -> trio.lowlevel.Abort:
            with self._cond:
                if job.taken:
                    return trio.lowlevel.Abort.FAILED
                self._queue.remove(job)
            return trio.lowlevel.Abort.SUCCEEDED

        # trio unwraps the outcome the thread hands back: a value, or the raise.
        result: R = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def _enqueue(self, job: _Job[Any]) -> None:
        with self._cond:
            if self._closing:
                raise StoreClosedError(f"{self._owner} is closed")
            if self._dead is not None:
                raise self._dead_error()
            self._queue.append(job)
            self._cond.notify()

    async def close(self) -> None:
        """Run every job queued so far, then close the connection and end the thread.

        Idempotent. Shielded from cancellation: once called, the store ends closed.
        """
        with self._cond:
            self._closing = True
            self._cond.notify()
        with trio.CancelScope(shield=True):
            if self._thread.is_alive():
                await trio.to_thread.run_sync(self._thread.join)

    # -- the thread --------------------------------------------------------

    def _main(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._die(exc)
            return
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._closing:
                        self._cond.wait()
                    if not self._queue:
                        break  # closing, and every queued job has run
                    batch: list[_Job[Any]] = []
                    while self._queue and len(batch) < MAX_BATCH:
                        job = self._queue.popleft()
                        job.taken = True
                        batch.append(job)
                self._run_batch(conn, batch)
        except BaseException as exc:  # a bug here must not leave callers asleep forever
            self._die(exc)
            raise
        finally:
            conn.close()

    def _die(self, exc: BaseException) -> None:
        with self._cond:
            self._dead = exc
            orphans = list(self._queue)
            self._queue.clear()
        for job in orphans:
            job.result = outcome.Error(self._dead_error())
        self._hand_back(orphans)

    def _dead_error(self) -> StoreError:
        exc = self._dead
        if isinstance(exc, StoreError):
            return exc  # e.g. a schema too new: the caller must see that, not "unavailable"
        if isinstance(exc, sqlite3.Error):
            return unavailable(exc)
        return StoreUnavailableError(f"{self._owner}'s connection thread died: {exc!r}", exc)

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job[Any]]) -> None:
        if not any(job.write for job in batch):
            for job in batch:  # reads run in autocommit: no write lock taken
                job.result = _capture(job, conn)
        elif not self._run_shared(conn, batch):
            for job in batch:
                if job.write:
                    self._run_shared(conn, [job], alone=True)
                else:
                    job.result = _capture(job, conn)
        self._hand_back(batch)

    def _run_shared(
        self, conn: sqlite3.Connection, jobs: list[_Job[Any]], alone: bool = False
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

    def _hand_back(self, jobs: list[_Job[Any]]) -> None:
        by_token: dict[trio.lowlevel.TrioToken, list[_Job[Any]]] = {}
        for job in jobs:
            by_token.setdefault(job.token, []).append(job)
        for token, mine in by_token.items():
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(_deliver, mine)
