"""The one place that knows which async library runs the caller: trio (the default) or asyncio.

Library code is written against anyio, which runs on both; this module holds
the few rules anyio does not settle alike on both backends, so every package
follows them from one home. It is the second private ``agentloop`` module the
sibling packages may import (after ``agentloop._validate``).

**The store-call checkpoint convention.** A public store coroutine that does
its work synchronously is a checkpoint and all-or-nothing:

- under trio, :func:`call_starts` is ``checkpoint_if_cancelled()`` (a cancelled
  call does nothing) and :func:`call_ends` is ``cancel_shielded_checkpoint()``
  (the schedule point comes after the work, which is then never reported as
  cancelled) — trio's own convention, unchanged;
- under asyncio, :func:`call_starts` is a full checkpoint (``sleep(0)``: a
  schedule point where any cancellation lands *before* the work) and
  :func:`call_ends` does nothing, so a call that did its work returns without
  suspending again. That holds for every asyncio cancellation source — anyio
  cancel scopes, ``Task.cancel()`` and ``asyncio.timeout`` — because nothing
  can be delivered to a task that does not suspend.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio
import sniffio
import trio

from agentloop._asyncio_cancel import cancel_pending, redeliver

__all__ = [
    "LoopGoneError",
    "LoopHandle",
    "Scope",
    "being_cancelled",
    "call_ends",
    "call_starts",
    "cancel_pending",
    "cancel_scope",
    "cancelled_error",
    "checkpoint",
    "checkpoint_step",
    "clock",
    "on_trio",
    "raise_pending_cancel",
    "redeliver",
    "timeout_error",
    "uncancellable",
]

_library = sniffio.thread_local


def on_trio() -> bool:
    """Whether the calling thread runs trio (else asyncio, the only other backend).

    About 0.1 µs: trio marks its thread for sniffio, so no asyncio lookup is needed.
    """
    return _library.name == "trio"


class _Done:
    """An awaitable that completes at once, without suspending."""

    __slots__ = ()

    if TYPE_CHECKING:

        def __await__(self) -> Generator[Any, None, None]: ...

    else:
        # The empty tuple's iterator, made by C code: no generator per await.
        __await__ = staticmethod(().__iter__)


_DONE = _Done()
_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_cancel_shielded_checkpoint = trio.lowlevel.cancel_shielded_checkpoint
_checkpoint = trio.lowlevel.checkpoint


# Plain functions returning the awaitable, not ``async def`` wrappers: a wrapper
# adds a coroutine frame per call, ~9% of an in-memory store call under trio.
def call_starts() -> Awaitable[None]:
    """The cancellation point before a store call's synchronous work; see the module docstring."""
    if _library.name == "trio":
        return _checkpoint_if_cancelled()
    return asyncio.sleep(0)


def call_ends() -> Awaitable[None]:
    """The schedule point after a store call's work (trio only; never raises cancellation)."""
    if _library.name == "trio":
        return _cancel_shielded_checkpoint()
    return _DONE


def cancelled_error() -> type[BaseException]:
    """The running backend's cancellation exception: ``trio.Cancelled`` or ``CancelledError``."""
    return trio.Cancelled if _library.name == "trio" else asyncio.CancelledError


async def checkpoint() -> None:
    """A full checkpoint: a cancellation point and a schedule point (``sleep(0)`` on asyncio)."""
    if _library.name == "trio":
        await trio.lowlevel.checkpoint()
    else:
        await asyncio.sleep(0)


class _Yield:
    """A bare ``yield`` to the asyncio task: what ``asyncio.sleep(0)`` does, one
    generator instead of a coroutine and a generator (a cancellation lands there too)."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield


_YIELD = _Yield()


def checkpoint_step() -> Awaitable[None]:
    """:func:`checkpoint` as the awaitable itself, without a coroutine frame of its own.

    ``await checkpoint_step()`` is ``await checkpoint()``, one frame fewer per call
    (for hot paths such as ``ScriptedModel.complete``).
    """
    if _library.name == "trio":
        return _checkpoint()
    return _YIELD


def clock() -> Callable[[], float]:
    """The running loop's clock, the one cancel scope deadlines are measured on.

    ``trio.current_time`` (which a ``MockClock`` drives) or the asyncio loop's
    ``time``; fetched once, then called as often as a hot path needs.
    """
    if _library.name == "trio":
        return trio.lowlevel.current_clock().current_time  # as trio.current_time, one call
    return asyncio.get_running_loop().time


Scope: TypeAlias = "trio.CancelScope | anyio.CancelScope"


def raise_pending_cancel() -> Awaitable[None]:
    """Raise a cancellation already pending for the calling task; no schedule point otherwise.

    For a caller whose next await is a checkpoint anyway (``Loop.run``, before
    it takes its session's turn). Under trio that is ``checkpoint_if_cancelled``.
    Under asyncio a ``Task.cancel()`` (or an expired ``asyncio.timeout``) not yet
    undone (``Task.cancelling()``) gets a ``sleep(0)``, where it is delivered (a
    schedule point, only then), and so does a cancelled anyio scope around the
    task (:func:`cancel_pending` tells both).
    """
    if _library.name == "trio":
        return _checkpoint_if_cancelled()
    if cancel_pending():
        return asyncio.sleep(0)
    return _DONE


def cancel_scope(*, deadline: float = math.inf, shield: bool = False) -> Scope:
    """A cancel scope: trio's own under trio (nothing in between), anyio's under asyncio.

    ``deadline`` is on :func:`clock`. Both kinds have ``cancel()``,
    ``cancelled_caught``, ``deadline`` and ``shield``. Under asyncio an anyio
    scope catches only its own cancellation: a ``Task.cancel()`` (or an
    ``asyncio.timeout``) passes through it, and a shield does not stop a
    ``Task.cancel()`` made while the scope is entered.
    """
    if _library.name == "trio":
        return trio.CancelScope(deadline=deadline, shield=shield)
    kind = _ASYNCIO_SCOPE.get(_library.name)
    if kind is None:
        scope = anyio.CancelScope(deadline=deadline, shield=shield)
        _ASYNCIO_SCOPE[_library.name] = type(scope)
        return scope
    return kind(deadline=deadline, shield=shield)  # what anyio.CancelScope(...) would make


# The asyncio backend's scope class, found once: anyio.CancelScope(...) looks up the
# running backend on every call (a quarter of a scope's cost) to make one of these.
_ASYNCIO_SCOPE: dict[str | None, Callable[..., anyio.CancelScope]] = {}


def being_cancelled(exc: BaseException) -> bool:
    """Whether the calling task is being cancelled, ``exc`` being what it is raising.

    True for the backend's cancellation exception, inside a cancel scope that
    was cancelled (trio or anyio) and, under asyncio, in a task with a
    ``Task.cancel()`` (or an expired ``asyncio.timeout``) not yet undone.
    """
    if _library.name == "trio":
        return isinstance(exc, trio.Cancelled) or trio.current_effective_deadline() == -math.inf
    return isinstance(exc, asyncio.CancelledError) or cancel_pending()


async def uncancellable(work: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Await ``work()`` to its end even when the caller is cancelled meanwhile.

    ``work`` bounds itself, in a shielded scope of its own with a deadline.
    Under trio that scope is the whole shield. Under asyncio it does not stop a
    ``Task.cancel()``, so ``work`` runs as a task of its own: the caller waits
    for it through any cancellation (anyio scope, ``Task.cancel()``,
    ``asyncio.timeout``), then raises ``CancelledError`` if one arrived
    meanwhile (asyncio delivers a ``Task.cancel()`` once: it must not be lost).
    """
    if _library.name == "trio":
        await work()
        return
    task = asyncio.get_running_loop().create_task(work())
    interrupted = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            interrupted = True
    task.result()
    if interrupted:
        raise asyncio.CancelledError


def timeout_error() -> BaseException:
    """What an expired bound is reported as: ``trio.TooSlowError`` (trio) or ``TimeoutError``."""
    return trio.TooSlowError() if _library.name == "trio" else TimeoutError()


class LoopGoneError(Exception):
    """The event loop a :class:`LoopHandle` names has finished: nothing can be woken there."""


class LoopHandle:
    """The calling task's event loop, to which any thread may hand a callback.

    Made on the event loop thread; :meth:`call_soon` is safe from any thread and
    runs ``fn(*args)`` on that loop's thread soon (trio's ``run_sync_soon``,
    asyncio's ``call_soon_threadsafe``). An asyncio loop is held weakly, so a
    handle kept per loop (in a weak-keyed cache) never keeps a finished loop alive.
    """

    __slots__ = ("_loop", "_token")

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        if _library.name == "trio":
            self._token = trio.lowlevel.current_trio_token()
        else:
            self._loop = weakref.ref(asyncio.get_running_loop())

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on the loop's thread soon; from any thread.

        Raises:
            LoopGoneError: the loop has finished (its run returned, or it was
                closed or collected).
        """
        if self._token is not None:
            try:
                self._token.run_sync_soon(fn, *args)
            except trio.RunFinishedError as exc:
                raise LoopGoneError(str(exc)) from exc
            return
        assert self._loop is not None
        loop = self._loop()
        if loop is None:
            raise LoopGoneError("the event loop was collected")
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError as exc:  # "Event loop is closed"
            raise LoopGoneError(str(exc)) from exc
