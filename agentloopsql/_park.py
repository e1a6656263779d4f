"""How a caller waits for the worker thread that runs its job, and how that thread wakes it.

**trio** (the default, and the fast path): the caller parks itself with
``wait_task_rescheduled``; a worker thread hands the results of a batch back
through the run's ``TrioToken``, and one callback on the trio thread
``reschedule``s each task with its job's outcome.

**asyncio**: the caller awaits a future of its own loop; a worker thread
hands results back through a :class:`LoopHandle` (one per loop, holding it
weakly, so a batch costs one thread-safe wake-up per loop and a finished
loop is not kept alive by the cache), and one callback on
the loop thread marks each job delivered and resolves its future. The outcome
itself travels on the job.

**Cancellation under asyncio** (the rule is ``Workers.call``'s): a caller
cancelled while its job is queued removes it and re-raises (nothing
happened). Once a worker took the job, the executor is asked to interrupt it
and the caller waits for the worker, inside a shielded anyio scope (anyio
re-cancels a task of a cancelled scope on every loop pass; the shield keeps
that from spinning) and absorbing further ``Task.cancel()`` calls. Then:

- the job was interrupted: the original ``CancelledError`` is re-raised;
- it completed: its result is returned and the cancellation is re-delivered
  at the caller's next suspension. When the task is in a cancelled anyio
  scope, anyio does that itself (its cancellation is level-triggered, and a
  ``Task.cancel()`` that came with it surfaces at that scope's exit);
  otherwise the request came from ``Task.cancel()`` or ``asyncio.timeout()``
  and is re-armed (``task.uncancel()`` then ``task.cancel(msg)``, leaving the
  count as it was) by a loop callback, so it lands at the caller's next
  suspension, unless an ``asyncio.timeout`` block ended first (see
  :func:`redeliver`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import anyio
import outcome
import trio

from agentloop._backend import LoopGoneError, LoopHandle, redeliver
from agentloop._shared import on_trio
from agentloopsql._jobs import AnyWork

ConnT = TypeVar("ConnT")
T = TypeVar("T")

__all__ = [
    "AsyncioJob",
    "Interrupted",
    "Job",
    "asyncio_job",
    "hand_back",
    "wait_asyncio",
]


class Interrupted(Exception):
    """An executor's result for a taken job it stopped, on request, before it took effect."""


class Job(Generic[ConnT]):
    """One queued call: its typed :data:`~agentloopsql._jobs.Work` and how to answer its caller.

    ``task`` is the trio task to reschedule (``None`` under asyncio); ``token``
    the caller's ``TrioToken`` or, under asyncio, its loop's :class:`LoopHandle`.
    """

    __slots__ = ("cancel_requested", "queued_at", "result", "taken", "task", "token", "work")

    def __init__(
        self,
        work: AnyWork[ConnT],
        task: trio.lowlevel.Task | None,
        token: trio.lowlevel.TrioToken | LoopHandle,
    ) -> None:
        self.work = work
        self.task = task
        self.token = token
        self.taken = False
        self.cancel_requested = False  # the executor's to set, under its own lock
        self.result: outcome.Outcome[Any] | None = None
        self.queued_at = time.monotonic()


class AsyncioJob(Job[ConnT]):
    """A job whose caller runs under asyncio: it waits on ``waiter`` until ``delivered``."""

    __slots__ = ("delivered", "loop", "waiter")

    def __init__(
        self, work: AnyWork[ConnT], handle: LoopHandle, loop: asyncio.AbstractEventLoop
    ) -> None:
        super().__init__(work, None, handle)
        self.loop = loop
        self.waiter: asyncio.Future[None] = loop.create_future()
        self.delivered = False  # set on the loop thread, with job.result already final


_handles: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopHandle] = (
    weakref.WeakKeyDictionary()
)


def asyncio_job(work: AnyWork[ConnT]) -> AsyncioJob[ConnT]:
    """A job for ``work`` whose caller is the running asyncio task."""
    loop = asyncio.get_running_loop()
    handle = _handles.get(loop)
    if handle is None:
        handle = _handles[loop] = LoopHandle()
    return AsyncioJob(work, handle, loop)


async def wait_asyncio(
    job: AsyncioJob[Any],
    unqueue: Callable[[Job[Any]], bool],
    interrupt: Callable[[Job[Any]], None],
) -> Any:
    """Wait for ``job`` (queued) and return or raise its outcome; see the module docstring.

    ``unqueue`` removes the job if no worker took it yet (``True``);
    ``interrupt`` asks the executor to stop a taken job.
    """
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
        redeliver(cancelled)
        return result.unwrap()
    result = job.result
    assert result is not None
    return result.unwrap()


async def _until_delivered(job: AsyncioJob[Any]) -> None:
    with anyio.CancelScope(shield=True):
        while not job.delivered:
            job.waiter = job.loop.create_future()
            with contextlib.suppress(asyncio.CancelledError):  # re-delivered after
                await job.waiter


async def to_thread_shielded(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a thread, waited for to its end whatever cancels the caller.

    Under trio a shielded scope; under asyncio also ``Task.cancel()`` is
    absorbed while the thread runs and re-delivered after (see :func:`redeliver`).
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
        redeliver(cancelled)
    return done.result()


def _deliver_trio(jobs: list[Job[Any]]) -> None:
    for job in jobs:
        assert job.result is not None
        assert job.task is not None
        trio.lowlevel.reschedule(job.task, job.result)


def _deliver_asyncio(jobs: list[Job[Any]]) -> None:
    for job in cast("list[AsyncioJob[Any]]", jobs):
        job.delivered = True
        if not job.waiter.done():  # a cancelled caller's waiter may be
            job.waiter.set_result(None)


def hand_back(jobs: list[Job[Any]]) -> None:
    """Wake each job's caller with its result (set before); from any thread, once per job."""
    if len(jobs) == 1:  # the common case: no grouping needed
        _post(jobs[0].token, jobs)
        return
    by_token: dict[object, list[Job[Any]]] = {}
    for job in jobs:
        by_token.setdefault(job.token, []).append(job)
    for token, mine in by_token.items():
        _post(token, mine)


def _post(token: object, jobs: list[Job[Any]]) -> None:
    if isinstance(token, LoopHandle):
        with contextlib.suppress(LoopGoneError):
            token.call_soon(_deliver_asyncio, jobs)
    else:
        with contextlib.suppress(trio.RunFinishedError):
            cast("trio.lowlevel.TrioToken", token).run_sync_soon(_deliver_trio, jobs)
