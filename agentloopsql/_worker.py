"""Worker threads that run a store's jobs off the event loop thread, in batches.

Tasks (trio or asyncio) queue jobs (typed work, see ``_jobs``, run on a driver
connection) and sleep without a thread hop of their own (how, per backend:
``_park``). A worker thread that wakes takes the job at the head of the
queue and, when the executor allows it, every other queued job that can
share its batch; the executor runs the batch (as one transaction, one
commit) and sets each job's result. Results are handed back to the caller's
loop only after that, so nothing a caller sees can still be rolled back.

Cancellation: a job still queued when its caller is cancelled is removed and
the caller gets the backend's cancellation (``trio.Cancelled`` /
``asyncio.CancelledError``; nothing happened). Once a worker has
taken a job, the executor is asked to :meth:`~Executor.interrupt` it (it may
decline). The caller waits for the worker either way: a job that ends with
:class:`Interrupted` did not happen and its caller gets the cancellation;
any other result is returned normally (the cancellation is delivered at the
caller's next checkpoint; under asyncio see ``_park`` for each source). A
worker is never abandoned mid-write.

Bounded waits: with a ``queue_timeout``, a watchdog thread fails each job no
worker took in time (every worker stuck, e.g. behind a lock); it sleeps unless
every worker is busy and jobs wait.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, Protocol, TypeVar, overload

import outcome
import trio

from agentloop import StoreClosedError, StoreError, StoreUnavailableError
from agentloop._shared import on_trio
from agentloopsql._jobs import AnyWork, Append, IdempotentWrite, KeyedWrite, Read
from agentloopsql._park import Interrupted as Interrupted
from agentloopsql._park import Job as Job
from agentloopsql._park import asyncio_job, to_thread_shielded, wait_asyncio
from agentloopsql._park import hand_back as hand_back

R = TypeVar("R")
ConnT = TypeVar("ConnT")
StateT = TypeVar("StateT")


class Executor(Protocol[StateT, ConnT]):
    """How one backend opens per-thread state and runs a batch of jobs."""

    max_batch: int

    def batchable(self, job: Job[ConnT]) -> bool:
        """Whether ``job`` may share a batch with other batchable jobs."""
        ...

    def connect(self) -> StateT:
        """Per-thread state (a connection, or nothing), made in the worker thread."""
        ...

    def run_batch(self, state: StateT, jobs: list[Job[ConnT]]) -> None:
        """Run ``jobs`` and set every ``job.result``; must not raise.

        A job may be answered early, before the batch ends: set its result,
        remove it from ``jobs`` and pass it to :func:`hand_back`.
        """
        ...

    def disconnect(self, state: StateT) -> None:
        """Release what :meth:`connect` made."""
        ...

    def dead_error(self, exc: BaseException) -> StoreError:
        """The error callers get once ``exc`` killed a worker (or its connect)."""
        ...

    def interrupt(self, job: Job[ConnT]) -> None:
        """``job``'s caller was cancelled after a worker took it; called on its loop's thread.

        Must not block. The executor may stop the job and set its result to
        :class:`Interrupted` only if the job then did not happen at all;
        otherwise it lets the job finish.
        """
        ...


class Workers(Generic[ConnT]):
    """``threads`` daemon threads serving one queue; see the module docstring.

    ``ConnT`` is the connection a job's work runs on. ``queue_timeout`` is
    ``(seconds, error)``: a job no worker took within ``seconds`` fails with
    ``error(waited)``; ``None`` lets jobs wait for a worker as long as it takes.
    """

    def __init__(
        self,
        executor: Executor[Any, ConnT],
        threads: int,
        owner: str,
        *,
        queue_timeout: tuple[float, Callable[[float], StoreError]] | None = None,
    ) -> None:
        self._executor = executor
        self._owner = owner
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._queue: collections.deque[Job[ConnT]] = collections.deque()
        self._closing = False
        self._dead: BaseException | None = None
        self._size = threads
        self._busy = 0  # worker threads running a batch
        self._idle: list[threading.Lock] = []  # idle workers' wake locks; the last is woken
        self._threads = [
            threading.Thread(target=self._main, name=f"{owner} worker {n}", daemon=True)
            for n in range(threads)
        ]
        self._watch: threading.Condition | None = None
        if queue_timeout is not None:
            self._watch = threading.Condition(lock)
            watchdog, name = partial(self._watchdog, *queue_timeout), f"{owner} queue"
            self._threads.append(threading.Thread(target=watchdog, name=name, daemon=True))
        for thread in self._threads:
            thread.start()

    @overload
    async def call(self, work: Read[ConnT, R] | IdempotentWrite[ConnT, R]) -> R: ...
    @overload
    async def call(self, work: KeyedWrite[ConnT] | Append[ConnT]) -> None: ...
    async def call(self, work: AnyWork[ConnT]) -> Any:
        """Run ``work`` on a worker thread and return its result.

        How it runs (alone or batched, retried or not) is the executor's business.

        Raises:
            StoreClosedError: the store is closing or closed.
            StoreError: whatever the executor reports for the job, or the
                ``queue_timeout`` error when no worker took it in time.
        """
        if not on_trio():
            await asyncio.sleep(0)  # the checkpoint: a cancellation lands before the queueing
            ajob = asyncio_job(work)
            self._enqueue(ajob)
            return await wait_asyncio(ajob, self._unqueue, self._executor.interrupt)
        await trio.lowlevel.checkpoint_if_cancelled()
        task, token = trio.lowlevel.current_task(), trio.lowlevel.current_trio_token()
        job: Job[ConnT] = Job(work, task, token)
        self._enqueue(job)

        def abort(_: object) -> trio.lowlevel.Abort:
            if self._unqueue(job):
                return trio.lowlevel.Abort.SUCCEEDED
            self._executor.interrupt(job)
            return trio.lowlevel.Abort.FAILED

        try:
            # trio unwraps the outcome the worker hands back: a value, or the raise.
            result = await trio.lowlevel.wait_task_rescheduled(abort)
        except Interrupted:
            pass
        else:
            return result
        # Only a cancelled caller's job is interrupted, and its scope is still
        # cancelled: this checkpoint raises trio.Cancelled.
        await trio.lowlevel.checkpoint()
        raise StoreError(f"{self._owner}: the call was interrupted; it did not happen")

    def _enqueue(self, job: Job[ConnT]) -> None:
        with self._cond:
            if self._closing:
                raise StoreClosedError(f"{self._owner} is closed")
            if self._dead is not None:
                raise self._executor.dead_error(self._dead)
            self._queue.append(job)
            if self._idle:
                self._idle.pop().release()
            if self._watch is not None and self._busy == self._size:
                self._watch.notify()  # no worker may take it soon: time its wait

    def _unqueue(self, job: Job[ConnT]) -> bool:
        """Remove ``job`` from the queue if no worker took it yet; whether it was."""
        with self._cond:
            if job.taken:
                return False
            self._queue.remove(job)
            return True

    @property
    def idle(self) -> bool:
        """Whether no job waits and no worker runs one (read without the lock: a hint only)."""
        return not self._queue and self._busy == 0

    @property
    def dead(self) -> bool:
        """Whether a worker died: every later :meth:`call` raises the executor's error."""
        return self._dead is not None

    async def close(self) -> None:
        """Run every job queued so far, then end the threads. Idempotent; shielded."""
        with self._cond:
            self._closing = True
            self._wake_all()
            if self._watch is not None:
                self._watch.notify_all()
        await to_thread_shielded(self._join)

    def _join(self) -> None:
        for thread in self._threads:
            thread.join()

    # -- the threads -------------------------------------------------------

    def _wake_all(self) -> None:  # called under the lock
        for wake in self._idle:
            wake.release()
        self._idle.clear()

    def _take(self, wake: threading.Lock) -> list[Job[ConnT]] | None:
        """The next batch, or ``None`` once closing with nothing left; waits for work
        (acquiring ``wake``, this thread's own held lock, until a caller releases it)."""
        executor = self._executor
        with self._cond:
            while not self._queue and not self._closing and self._dead is None:
                self._idle.append(wake)
                self._cond.release()
                try:
                    wake.acquire()
                finally:
                    self._cond.acquire()
            if not self._queue or self._dead is not None:
                if self._watch is not None:
                    self._watch.notify()  # closing and drained: the watchdog may end too
                return None
            head = self._queue.popleft()
            batch = [head]
            if executor.batchable(head) and self._queue:
                rest: collections.deque[Job[ConnT]] = collections.deque()
                while self._queue:
                    job = self._queue.popleft()
                    if len(batch) < executor.max_batch and executor.batchable(job):
                        batch.append(job)
                    else:
                        rest.append(job)
                self._queue = rest
            for job in batch:
                job.taken = True
            self._busy += 1
            if self._watch is not None and self._queue and self._busy == self._size:
                self._watch.notify()  # what is left may wait long: time it
            return batch

    def _main(self) -> None:
        try:
            state = self._executor.connect()
        except BaseException as exc:
            self._die(exc)
            return
        running: list[Job[ConnT]] = []
        wake = threading.Lock()
        wake.acquire()
        try:
            while (batch := self._take(wake)) is not None:
                running = batch
                self._executor.run_batch(state, batch)
                running = []
                with self._cond:
                    self._busy -= 1
                self._hand_back(batch)
        except BaseException as exc:  # a bug here must not leave callers asleep forever
            for job in running:
                if job.result is None:
                    job.result = outcome.Error(self._executor.dead_error(exc))
            self._die(exc)  # every caller gets the error, with exc as its cause
            self._hand_back(running)  # after: a caller woken now finds the store dead
        finally:
            self._executor.disconnect(state)

    def _watchdog(self, limit: float, error: Callable[[float], StoreError]) -> None:
        """Fail each queued job no worker took within ``limit`` seconds of its queueing;
        sleeps unless every worker is busy and jobs wait."""
        watch = self._watch
        assert watch is not None
        while True:
            with self._cond:
                while not (expired := self._expired(limit)):
                    if self._dead is not None or (self._closing and not self._queue):
                        return
                    if self._queue and self._busy == self._size:
                        oldest = min(job.queued_at for job in self._queue)
                        watch.wait(oldest + limit - time.monotonic())
                    else:
                        watch.wait()
            now = time.monotonic()
            for job in expired:
                job.result = outcome.Error(error(now - job.queued_at))
            self._hand_back(expired)

    def _expired(self, limit: float) -> list[Job[ConnT]]:
        """Take the queued jobs that waited ``limit`` seconds; called under the lock."""
        cutoff = time.monotonic() - limit
        expired = [job for job in self._queue if job.queued_at <= cutoff]
        if expired:
            self._queue = collections.deque(job for job in self._queue if job.queued_at > cutoff)
            for job in expired:
                job.taken = True
        return expired

    def _die(self, exc: BaseException) -> None:
        with self._cond:
            if self._dead is None:
                self._dead = exc
            orphans = list(self._queue)
            self._queue.clear()
            # Marked under the lock: a caller cancelled from now on must wait for
            # the error already on its way rather than look for its job in the queue.
            for job in orphans:
                job.taken = True
            self._wake_all()
            if self._watch is not None:
                self._watch.notify_all()
        for job in orphans:
            job.result = outcome.Error(self._executor.dead_error(exc))
        self._hand_back(orphans)

    def _hand_back(self, jobs: list[Job[ConnT]]) -> None:
        hand_back(jobs)


def dead_worker_error(owner: str, exc: BaseException) -> StoreError:
    """The default :meth:`Executor.dead_error`: store errors as they are, others wrapped."""
    if isinstance(exc, StoreError):
        return exc
    return StoreUnavailableError(f"{owner}'s worker thread died: {exc!r}", exc)
