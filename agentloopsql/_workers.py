"""How a SQL store's call reaches a worker thread, runs there, and wakes its caller.

**Jobs.** A call is one typed piece of work (:data:`Work`). The kind tells an
executor everything it may do beyond running the work once: whether it
writes, whether it may run again after a lost connection, how to tell whether
a lost attempt committed, and which steps it appends (so appends can share a
commit). A fenced write is the kind it fences, with a ``run`` that checks the
lease first and raises ``LeaseLostError`` before writing anything; a fenced
append is a :class:`FencedAppend`, a :class:`KeyedWrite` and never an
:class:`Append`, because an executor may insert an ``Append``'s rows by a
statement of its own that would skip the check. Executors never split one
call's rows, and when a shared transaction or statement is refused they rerun
each call alone, so a refused call fails only itself.

**Workers.** Tasks (trio or asyncio) queue jobs; a worker thread that wakes
takes the job at the head of the queue and, when the executor allows it, every
other queued job that can share its batch; the executor runs the batch (one
transaction, one commit) and sets each job's result. Callers are woken only
after that, so nothing a caller sees can still be rolled back.

**Parking.** Under trio the caller parks with ``wait_task_rescheduled``; a
worker hands a batch's results back with one ``TrioToken.run_sync_soon`` per
run, and that callback ``reschedule``s each task with its outcome. Under
asyncio the caller awaits a future of its own event loop; a worker hands
results back with one ``call_soon_threadsafe`` per event loop, and the callback
marks each job delivered and resolves its future.

**Cancellation** (the rule every store documents): a job still queued when its
caller is cancelled is removed and the caller gets the backend's cancellation
(``trio.Cancelled`` / ``asyncio.CancelledError``; nothing happened). Once a
worker took it, the executor is asked to :meth:`~Executor.interrupt` it (it may
decline), and the caller waits for the worker, never abandoning it mid-write:
a job that ends with :class:`Interrupted` did not happen and its caller gets
the cancellation; any other result is returned and the cancellation is
delivered at the caller's next checkpoint. Under asyncio the wait is inside a
shielded anyio scope (anyio re-cancels a task of a cancelled scope on every
event-loop pass; the shield keeps that from spinning) and absorbs further
``Task.cancel()`` calls; a ``Task.cancel()`` or ``asyncio.timeout()`` absorbed
that way is re-armed after (:func:`_redeliver`), while a cancelled anyio scope
cancels again by itself.

**Bounded waits**: with a ``queue_timeout``, a watchdog thread fails each job
no worker took in time (every worker stuck, e.g. behind a lock); it sleeps
unless every worker is busy and jobs wait.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, NamedTuple, Protocol, TypeAlias, TypeVar, overload

import anyio
import attrs
import outcome
import trio

from agentloop import Lease, RunStep, StoreClosedError, StoreError, StoreUnavailableError
from agentloop._shared import on_trio

ConnT = TypeVar("ConnT")
StateT = TypeVar("StateT")
R = TypeVar("R")
T = TypeVar("T")

# -- the kinds of work --------------------------------------------------------


class AppendRow(NamedTuple):
    """One step to insert and the random key stored with it.

    After a lost connection, finding the key tells that the row committed.
    """

    step: RunStep
    key: int


@attrs.frozen
class Read(Generic[ConnT, R]):
    """Work that only reads: needs no write lock and is retried as is.

    ``name`` is the store operation, for error messages.
    """

    run: Callable[[ConnT], R]
    name: str = attrs.field(default="the call", kw_only=True)


@attrs.frozen
class IdempotentWrite(Generic[ConnT, R]):
    """A write whose repeat changes nothing more (``put``, ``update_data``, ``delete_session``).

    Retried as is after a lost connection.
    """

    run: Callable[[ConnT], R]
    name: str = attrs.field(default="the call", kw_only=True)


@attrs.frozen
class KeyedWrite(Generic[ConnT]):
    """A write that must not be applied twice (``finalize``); it stores a random key.

    ``committed`` looks for that key, on a fresh connection, to tell whether
    an attempt lost with its connection committed.
    """

    run: Callable[[ConnT], None]
    committed: Callable[[ConnT], bool]
    name: str = attrs.field(default="the call", kw_only=True)


@attrs.frozen
class Append(Generic[ConnT]):
    """``rows``, appended in order, all or none; may share a commit with other appends.

    ``run`` inserts them inside a transaction the executor opened; a backend
    whose statements commit one by one inserts ``rows`` in one statement
    instead. ``committed`` looks for the first row's key (all rows commit
    together, so it speaks for every row).
    """

    rows: tuple[AppendRow, ...]
    run: Callable[[ConnT], None]
    committed: Callable[[ConnT], bool]
    name: str = attrs.field(default="append", kw_only=True)


@attrs.frozen
class FencedAppend(KeyedWrite[ConnT]):
    """``rows`` appended only while ``lease`` holds; ``run`` checks it in the same transaction.

    An executor that knows nothing of it runs it as the :class:`KeyedWrite` it
    is (at most once, ``committed`` after a lost connection); one that runs
    appends as statements of its own keeps the lease check in that statement.
    """

    rows: tuple[AppendRow, ...] = attrs.field(kw_only=True)
    lease: Lease = attrs.field(kw_only=True)


Work: TypeAlias = Read[ConnT, R] | IdempotentWrite[ConnT, R] | KeyedWrite[ConnT] | Append[ConnT]
"""Every kind of call; ``R`` is what a read or an idempotent write returns."""

AnyWork: TypeAlias = Work[ConnT, Any]


def writes(work: AnyWork[Any]) -> bool:
    """Whether ``work`` may change the store."""
    return not isinstance(work, Read)


# -- a queued call and how its caller is woken ---------------------------------


class Interrupted(Exception):
    """An executor's result for a taken job it stopped, on request, before it took effect."""


class Job(Generic[ConnT]):
    """One queued call: its :data:`Work` and how to wake its caller.

    Under trio ``task`` is the task to reschedule and ``waker`` its run's
    ``TrioToken``; under asyncio ``waker`` is the caller's event loop and
    ``waiter`` the future it awaits until ``delivered``.
    """

    __slots__ = (
        "cancel_requested",
        "delivered",
        "queued_at",
        "result",
        "taken",
        "task",
        "waiter",
        "waker",
        "work",
    )

    def __init__(
        self,
        work: AnyWork[ConnT],
        task: trio.lowlevel.Task | None,
        waker: trio.lowlevel.TrioToken | asyncio.AbstractEventLoop,
        waiter: asyncio.Future[None] | None = None,
    ) -> None:
        self.work = work
        self.task = task
        self.waker = waker
        self.waiter = waiter
        self.delivered = False  # asyncio: set on the event-loop thread, the result final
        self.taken = False
        self.cancel_requested = False  # the executor's to set, under its own lock
        self.result: outcome.Outcome[Any] | None = None
        self.queued_at = time.monotonic()


def hand_back(jobs: list[Job[Any]]) -> None:
    """Wake each job's caller with its result (set before); from any thread, once per job."""
    if len(jobs) == 1:  # the common case: no grouping needed
        _post(jobs[0].waker, jobs)
        return
    by_waker: dict[object, list[Job[Any]]] = {}
    for job in jobs:
        by_waker.setdefault(job.waker, []).append(job)
    for waker, mine in by_waker.items():
        _post(waker, mine)


def _post(waker: object, jobs: list[Job[Any]]) -> None:
    if isinstance(waker, asyncio.AbstractEventLoop):
        with contextlib.suppress(RuntimeError):  # the event loop is closed: nobody waits
            waker.call_soon_threadsafe(_deliver_asyncio, jobs)
    else:
        assert isinstance(waker, trio.lowlevel.TrioToken)
        with contextlib.suppress(trio.RunFinishedError):
            waker.run_sync_soon(_deliver_trio, jobs)


def _deliver_trio(jobs: list[Job[Any]]) -> None:
    for job in jobs:
        assert job.result is not None
        assert job.task is not None
        trio.lowlevel.reschedule(job.task, job.result)


def _deliver_asyncio(jobs: list[Job[Any]]) -> None:
    for job in jobs:
        job.delivered = True
        assert job.waiter is not None
        if not job.waiter.done():  # a cancelled caller's waiter may be
            job.waiter.set_result(None)


async def _wait_asyncio(
    job: Job[Any],
    unqueue: Callable[[Job[Any]], bool],
    interrupt: Callable[[Job[Any]], None],
) -> Any:
    """Wait for ``job`` (queued) and return or raise its outcome; see the module docstring.

    ``unqueue`` removes the job if no worker took it yet (``True``);
    ``interrupt`` asks the executor to stop a taken job.
    """
    assert job.waiter is not None
    try:
        await job.waiter
    except asyncio.CancelledError as cancelled:
        if not job.delivered:
            if unqueue(job):
                raise
            interrupt(job)
            await _until_delivered(job)
        result = job.result
        assert result is not None
        if isinstance(result, outcome.Error) and isinstance(result.error, Interrupted):
            raise
        _redeliver(cancelled)
        return result.unwrap()
    result = job.result
    assert result is not None
    return result.unwrap()


async def _until_delivered(job: Job[Any]) -> None:
    assert isinstance(job.waker, asyncio.AbstractEventLoop)
    with anyio.CancelScope(shield=True):
        while not job.delivered:
            job.waiter = job.waker.create_future()
            with contextlib.suppress(asyncio.CancelledError):  # re-delivered after
                await job.waiter


def _redeliver(cancelled: asyncio.CancelledError) -> None:
    """Deliver a cancellation the caller absorbed at its next suspension (asyncio only).

    Nothing to do inside a cancelled anyio scope (its effective deadline is
    ``-inf``): anyio cancels again by itself. Otherwise the request came from
    ``Task.cancel()`` or ``asyncio.timeout``: it is re-armed (``uncancel()``
    then ``cancel(msg)``, the count left as its sources made it) once the
    caller suspends next, unless by then its owner withdrew it (an
    ``asyncio.timeout`` block that ended at once uncancels) or a newer request
    landed.
    """
    if anyio.current_effective_deadline() == -math.inf:
        return
    task = asyncio.current_task()
    assert task is not None
    message = cancelled.args[0] if cancelled.args else None
    asyncio.get_running_loop().call_soon(_rearm, task, task.cancelling(), message)


def _rearm(task: asyncio.Task[Any], requests: int, message: object) -> None:
    if requests > 0 and not task.done() and task.cancelling() == requests:
        task.uncancel()
        task.cancel(message)


async def to_thread_shielded(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a thread, waited for to its end whatever cancels the caller.

    Under trio a shielded scope; under asyncio also ``Task.cancel()`` is
    absorbed while the thread runs and re-delivered after (see :func:`_redeliver`).
    """
    if on_trio():
        with trio.CancelScope(shield=True):
            return await trio.to_thread.run_sync(fn, *args)
    loop = asyncio.get_running_loop()
    done = loop.run_in_executor(None, fn, *args)
    cancelled: asyncio.CancelledError | None = None
    with anyio.CancelScope(shield=True):
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError as exc:
                cancelled = cancelled or exc
    if cancelled is not None:
        _redeliver(cancelled)
    return done.result()


# -- the worker threads ----------------------------------------------------------


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
        """``job``'s caller was cancelled after a worker took it; called on its event loop.

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
            self._watch = threading.Condition(lock)  # the same lock, its own waiters
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
            loop = asyncio.get_running_loop()
            queued: Job[ConnT] = Job(work, None, loop, loop.create_future())
            self._enqueue(queued)
            return await _wait_asyncio(queued, self._unqueue, self._executor.interrupt)
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

    def abandon(self, then: Callable[[], object]) -> None:
        """Close without waiting, from any thread (the owner was collected unclosed).

        Every job queued so far still runs; a daemon thread joins the workers,
        then calls ``then`` (release what they used). Never blocks.
        """
        with self._cond:
            self._closing = True
            self._wake_all()
            if self._watch is not None:
                self._watch.notify_all()

        def reap() -> None:
            self._join()
            then()

        threading.Thread(target=reap, name=f"{self._owner} reaper", daemon=True).start()

    def _wake_all(self) -> None:  # called under the lock
        for wake in self._idle:
            wake.release()
        self._idle.clear()

    def _take(self, wake: threading.Lock) -> list[Job[ConnT]] | None:
        """The next batch, or ``None`` once closing with nothing left; waits for work.

        An idle thread waits on ``wake``, its own lock (held), until a caller
        releases it. Idle threads are woken last in, first out (a
        ``threading.Condition`` wakes the longest idle first), so a caller
        making one call at a time keeps one warm thread; see ``docs/decisions.md``.
        """
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
            batch = self._batch()
            self._busy += 1
            if self._watch is not None and self._queue and self._busy == self._size:
                self._watch.notify()  # what is left may wait long: time it
            return batch

    def _batch(self) -> list[Job[ConnT]]:
        """Take the head of the queue and every job that may share its batch; under the lock."""
        executor = self._executor
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
                hand_back(batch)
        except BaseException as exc:  # a bug here must not leave callers asleep forever
            for job in running:
                if job.result is None:
                    job.result = outcome.Error(self._executor.dead_error(exc))
            self._die(exc)  # every caller gets the error, with exc as its cause
            hand_back(running)  # after: a caller woken now finds the store dead
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
            hand_back(expired)

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
        hand_back(orphans)


def dead_worker_error(owner: str, exc: BaseException) -> StoreError:
    """The default :meth:`Executor.dead_error`: store errors as they are, others wrapped."""
    if isinstance(exc, StoreError):
        return exc
    return StoreUnavailableError(f"{owner}'s worker thread died: {exc!r}", exc)
