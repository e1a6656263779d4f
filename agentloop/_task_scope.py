"""A cancel scope for one asyncio task on asyncio's own protocol, for the leased run's scope.

An anyio cancel scope costs a leased run about 17k instructions to enter and
leave (its task-state bookkeeping); the run's scope needs none of what that
buys. It is cancelled only by the loop itself (a lost lease, the bound of the
first ``acquire_lease``) and never shields, so asyncio's own protocol is
enough: :meth:`TaskScope.cancel` is ``Task.cancel()``, and leaving the scope
undoes it with ``Task.uncancel()``, as ``asyncio.timeout`` does. A
``CancelledError`` is caught only when no other cancellation of the task is
pending once this one is undone (``Task.cancelling()`` back to its count at
entry): a ``Task.cancel()``, an ``asyncio.timeout`` or an anyio scope that
cancelled the task meanwhile still propagates.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class TaskScope:
    """A cancel scope around the calling asyncio task: ``cancel()``, ``cancel_called``,
    ``cancelled_caught``, as trio's and anyio's (without deadline or shield).

    ``cancel()`` before the scope is entered is delivered on entry; after it
    was left it only sets ``cancel_called``. Like ``asyncio.timeout`` (and
    unlike trio and anyio) the cancellation is delivered once: code inside
    that swallows the ``CancelledError`` goes on.
    """

    __slots__ = ("_cancelling", "_delivered", "_left", "_task", "cancel_called", "cancelled_caught")

    def __init__(self) -> None:
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._delivered = False  # Task.cancel() was called for this scope
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
        if self.cancel_called:
            self._deliver(task)
        return self

    def cancel(self) -> None:
        """Cancel the task inside the scope (once); a no-op after the scope was left."""
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._task is not None and not self._left:
            self._deliver(self._task)

    def cancelled_alone(self) -> bool:
        """Inside the scope: whether its cancellation was delivered and is the task's
        only one pending (a ``CancelledError`` caught now is this scope's own)."""
        task = self._task
        return self._delivered and task is not None and task.cancelling() <= self._cancelling + 1

    def _deliver(self, task: asyncio.Task[object]) -> None:
        self._delivered = True
        task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._left = True
        if not self._delivered:
            return False
        assert self._task is not None
        # Undone whatever the outcome (as asyncio.timeout): a delivered cancellation
        # that code inside swallowed must not leave the task counted as cancelling.
        if self._task.uncancel() > self._cancelling:
            return False
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            self.cancelled_caught = True
            return True
        return False
