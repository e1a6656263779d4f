"""The few rules anyio does not settle alike on trio and asyncio, in one home.

Library code is written against anyio's public API, which runs on both
backends; what follows is only where the two differ in a way the stores and
the loop must handle.

**The store-call checkpoint convention.** A public store coroutine that does
its work synchronously is a checkpoint and all-or-nothing:

- under trio, :func:`call_starts` is ``checkpoint_if_cancelled()`` (a cancelled
  call does nothing) and :func:`call_ends` is ``cancel_shielded_checkpoint()``
  (the schedule point comes after the work, which is then never reported as
  cancelled): trio's own convention;
- under asyncio, :func:`call_starts` is a full checkpoint (``sleep(0)``: a
  schedule point where any cancellation lands *before* the work) and
  :func:`call_ends` does nothing, so a call that did its work returns without
  suspending again. That holds for every asyncio cancellation source (anyio
  cancel scopes, ``Task.cancel()``, ``asyncio.timeout``), because nothing can
  be delivered to a task that does not suspend.

**Work that must finish.** An anyio shield does not stop a native
``Task.cancel()`` under asyncio, so :func:`finish_shielded` runs such work in a
task of its own there, and hands the caller's cancellation back afterwards, as
trio's shield would leave it.

**A client call, whole or not at all.** :func:`run_whole` is the public form
of both rules for a store whose call awaits a client library (an asyncio
database or Redis client): cancelled before it starts, or run to its end.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import sniffio
import trio

from agentloop._validate import check_seconds

T = TypeVar("T")


def on_trio() -> bool:
    """Whether the calling task runs under trio (else asyncio, the only other backend)."""
    return sniffio.current_async_library() == "trio"


async def call_starts() -> None:
    """The cancellation point before a store call's synchronous work; see the module docstring."""
    if on_trio():
        await trio.lowlevel.checkpoint_if_cancelled()
    else:
        await asyncio.sleep(0)


async def call_ends() -> None:
    """The schedule point after a store call's work (trio only; never raises cancellation)."""
    if on_trio():
        await trio.lowlevel.cancel_shielded_checkpoint()


def cancel_pending() -> bool:
    """Whether a cancellation is pending for the calling task.

    Under trio: a cancelled scope around it (no shield between). Under asyncio: a
    ``Task.cancel()`` (or an expired ``asyncio.timeout``) not yet undone
    (``Task.cancelling()``), or a cancelled anyio scope around it.
    """
    if anyio.current_effective_deadline() == -math.inf:
        return True
    if on_trio():
        return False
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def raise_pending_cancel() -> None:
    """Raise a cancellation already pending for the calling task; else return at once.

    For a caller whose next await is a checkpoint anyway (``Loop.run``, before it
    takes its session's turn), so that a cancelled caller never starts.
    """
    if cancel_pending():
        await anyio.lowlevel.checkpoint()


def being_cancelled(exc: BaseException) -> bool:
    """Whether the calling task is being cancelled, ``exc`` being what it is raising."""
    return isinstance(exc, anyio.get_cancelled_exc_class()) or cancel_pending()


def timeout_error() -> BaseException:
    """What an expired bound is reported as: ``trio.TooSlowError`` (trio) or ``TimeoutError``."""
    return trio.TooSlowError() if on_trio() else TimeoutError()


async def finish_shielded(work: Callable[[], Awaitable[Any]], seconds: float) -> bool:
    """Await ``work()`` shielded from the caller's cancellation, for at most ``seconds``.

    Returns whether it finished in time (``False``: it was cancelled at the
    bound). What ``work`` raises propagates. A cancellation of the caller that
    arrives meanwhile is not lost: under trio the shield holds it until the
    caller's next checkpoint; under asyncio ``work`` runs as a task of its own
    (an anyio shield does not stop ``Task.cancel()``) and a ``Task.cancel()``
    the caller absorbed meanwhile is delivered again at its next suspension.
    """

    async def bounded() -> bool:
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + seconds
            await work()
        return not scope.cancelled_caught

    if on_trio():
        return await bounded()
    task = asyncio.get_running_loop().create_task(bounded())
    absorbed: asyncio.CancelledError | None = None
    with anyio.CancelScope(shield=True):  # anyio's own cancellations wait for the shield's end
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError as cancelled:
                absorbed = cancelled
    if absorbed is not None:
        deliver_later(absorbed)
    return task.result()


def deliver_later(cancelled: BaseException) -> None:
    """Deliver a cancellation the caller absorbed again at its next suspension (asyncio).

    Under trio, and inside a cancelled anyio scope, there is nothing to do: the
    scope cancels again by itself. Otherwise the request came from
    ``Task.cancel()`` or ``asyncio.timeout``: it is re-armed from a loop
    callback, unless by then its source withdrew it (an ``asyncio.timeout``
    block that ended uncancels) or a newer one landed; the task's cancel count
    is left as its sources made it.
    """
    if on_trio() or anyio.current_effective_deadline() == -math.inf:
        return
    task = asyncio.current_task()
    assert task is not None
    message = cancelled.args[0] if cancelled.args else None
    asyncio.get_running_loop().call_soon(_rearm, task, task.cancelling(), message)


def _rearm(task: asyncio.Task[Any], requests: int, message: object) -> None:
    if requests > 0 and not task.done() and task.cancelling() == requests:
        task.uncancel()
        task.cancel(message)


async def run_whole(work: Callable[[], Awaitable[T]], *, seconds: float) -> T:
    """Await ``work()`` (one client call) so that a cancellation never cuts it in half.

    For a store call that awaits a client library (``redis.asyncio``, an
    asyncio database driver), under trio or asyncio, this keeps the store-call
    convention the contract checks:

    - a cancellation already requested, or landing at the schedule point
      ``run_whole`` starts with, raises there: ``work`` is never called, so
      the call did nothing;
    - once ``work()`` started it runs to its end, whatever cancels the caller
      meanwhile: a trio or anyio cancel scope, ``Task.cancel()`` or
      ``asyncio.timeout()``. That cancellation is not lost, nor raised from a
      call that did its work: it lands at the caller's next checkpoint (the
      next suspension under asyncio, the task's ``cancelling()`` count as its
      sources left it). A client library that swallows cancellations
      internally (redis-py does) then has none to swallow;
    - ``work()`` gets at most ``seconds``; past them it is cancelled
      and ``TimeoutError`` (the builtin, on both backends) is raised. The call
      may then have partly happened: a store reports it as unavailable
      (``StoreUnavailableError``), as for a lost connection.

    What ``work()`` raises propagates unchanged. Under asyncio ``work()`` runs
    in a task of its own (an anyio shield does not stop ``Task.cancel()``), so
    context variables it sets are not seen by the caller.

    Raises:
        TypeError, ValueError: ``seconds`` is not a finite number of seconds > 0.
        TimeoutError: ``work()`` did not finish within ``seconds``.
    """
    check_seconds(seconds, "seconds")
    await call_starts()
    done: list[T] = []

    async def whole() -> None:
        done.append(await work())

    if not await finish_shielded(whole, seconds):
        raise TimeoutError(f"the call did not finish within {seconds:g}s")
    await call_ends()
    return done[0]
