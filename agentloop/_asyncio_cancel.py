"""asyncio's own cancellation protocol: a cheap cancel scope on it, and re-delivering a
cancellation a caller absorbed.

:class:`TaskScope` bounds a leased run's lease release under asyncio. An anyio
cancel scope would cost the run about 17k instructions to enter and leave
(anyio's task-state bookkeeping) for what only the loop cancels and what
never shields. Its cancellation is ``Task.cancel()``, delivered as anyio
delivers its own (again on every loop pass while the task stays inside, and
not to a task about to resume with a result); leaving the scope undoes it
with ``Task.uncancel()``, as ``asyncio.timeout`` does, and catches the
``CancelledError`` only when no other cancellation of the task is pending
then. A ``Task.cancel()``, an ``asyncio.timeout`` or an anyio scope that
cancelled the task meanwhile therefore still propagates. Unlike an anyio
scope's, its cancellation is not stopped by an anyio shield inside it: it
is for code the loop itself runs there.

:func:`cancel_pending` is the one test of whether a cancellation is pending for the
calling task, and :func:`redeliver` the one rule for a caller that absorbed a cancellation
to finish work that must not be lost, and must not lose the cancellation.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Any

import anyio


class TaskScope:
    """A cancel scope around the calling asyncio task: ``cancel()``, ``cancel_called``,
    ``cancelled_caught``, as trio's and anyio's (without deadline or shield).

    ``cancel()`` before the scope is entered is delivered on entry; after it
    was left it only sets ``cancel_called``. The task's ``cancelling()`` count
    is left as the scope found it, whatever happened inside.
    """

    __slots__ = (
        "_cancelling",
        "_delivered",
        "_left",
        "_task",
        "_undelivered",
        "cancel_called",
        "cancelled_caught",
    )

    def __init__(self) -> None:
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self._delivered = 0  # Task.cancel() calls made for this scope, undone on exit
        self._undelivered = False  # a Task.cancel() was pending at entry, not yet delivered
        self._left = False
        self.cancel_called = False
        self.cancelled_caught = False

    def __enter__(self) -> TaskScope:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("TaskScope must be entered in an asyncio task")
        if self._task is not None:
            raise RuntimeError("a TaskScope can be entered only once")
        self._task = task
        self._cancelling = task.cancelling()
        # A running task holds a request not yet delivered here (anyio reads it too).
        self._undelivered = bool(getattr(task, "_must_cancel", False))
        if self.cancel_called:
            self._deliver()
        return self

    def cancel(self) -> None:
        """Cancel the task inside the scope; a no-op once the scope was left (or cancelled)."""
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._task is not None and not self._left:
            self._deliver()

    def cancelled_alone(self) -> bool:
        """Inside the scope: whether its cancellation was delivered and the task has no
        other one pending (a ``CancelledError`` caught now is this scope's own)."""
        return self._delivered > 0 and not self._others_requested()

    def others_pending(self) -> bool:
        """Inside the scope: whether a cancellation other than this scope's is pending
        for the task: a ``Task.cancel()`` (or ``asyncio.timeout``) made since entry or
        not yet delivered at entry, or a cancelled anyio scope around it."""
        return self._others_requested() or self._undelivered or in_cancelled_anyio_scope()

    def _others_requested(self) -> bool:
        task = self._task
        return task is not None and task.cancelling() > self._cancelling + self._delivered

    def _deliver(self) -> None:
        """Cancel the task, then again on each loop pass until it leaves the scope.

        anyio's rule: a task whose awaited future is already done is about to resume
        with that result, and is left to take it (the next pass cancels it again).
        """
        if self._left:
            return
        task = self._task
        assert task is not None
        waiter = getattr(task, "_fut_waiter", None)  # read by anyio's own delivery too
        if waiter is None or not waiter.done():
            self._delivered += 1
            task.cancel()
        asyncio.get_running_loop().call_soon(self._deliver)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._left = True
        if not self._delivered:
            return False
        task = self._task
        assert task is not None
        # Undone whatever the outcome (as asyncio.timeout): a delivered cancellation
        # that code inside swallowed must not leave the task counted as cancelling.
        for _ in range(self._delivered):
            task.uncancel()
        if task.cancelling() > self._cancelling:
            return False
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            self.cancelled_caught = True
            return True
        return False


def in_cancelled_anyio_scope() -> bool:
    """Whether an anyio cancel scope around the calling task was cancelled (and no
    shield stands between): ``current_effective_deadline()`` is then ``-inf``, the
    walk ``anyio.lowlevel.checkpoint_if_cancelled`` makes, without its coroutines."""
    return anyio.current_effective_deadline() == -math.inf


def cancel_pending() -> bool:
    """Whether a cancellation is pending for the calling asyncio task: a
    ``Task.cancel()`` (or an expired ``asyncio.timeout``) not yet undone
    (``Task.cancelling()``), or a cancelled anyio scope around it."""
    task = asyncio.current_task()
    return (task is not None and task.cancelling() > 0) or in_cancelled_anyio_scope()


def redeliver(cancelled: asyncio.CancelledError) -> None:
    """Deliver a cancellation the caller absorbed at its next suspension (asyncio only).

    Nothing to do inside a cancelled anyio scope: anyio cancels again by
    itself. Otherwise the request came from ``Task.cancel()`` or
    ``asyncio.timeout``: it is re-armed once the caller suspends next (a loop
    callback), unless by then its owner withdrew it (an ``asyncio.timeout``
    block that ended at once uncancels) or a newer request already landed.
    The task's cancel count is left as its sources made it.
    """
    if in_cancelled_anyio_scope():
        return
    task = asyncio.current_task()
    assert task is not None
    message = cancelled.args[0] if cancelled.args else None
    asyncio.get_running_loop().call_soon(_rearm, task, task.cancelling(), message)


def _rearm(task: asyncio.Task[Any], requests: int, message: object) -> None:
    if requests > 0 and not task.done() and task.cancelling() == requests:
        task.uncancel()
        task.cancel(message)
