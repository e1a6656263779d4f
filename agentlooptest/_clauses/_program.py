"""The program a model-based clause ran: each store call, logged, and told as a numbered list.

Not a clause module. Hypothesis replays the shrunk failing program last, so
the log after a failure is that program, call by call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

from agentloop import RunStep
from agentloop._shared import on_trio
from agentlooptest._data import T0
from agentlooptest._spurious import spurious_cancel

T = TypeVar("T")

_LOG: list[str] = []


class Diverged(AssertionError):
    """A store call returned something other than the model's answer."""

    def __init__(self, call: str, got: str, want: str) -> None:
        super().__init__(f"{call} returned {got}; the model says {want}")
        self.call = call
        self.got = got
        self.want = want


def diverged(same: bool, call: str, got: object, want: object) -> None:
    """Raise :class:`Diverged` unless ``same`` (``got``/``want`` shown as ``repr`` unless str)."""
    if not same:
        raise Diverged(call, _text(got), _text(want))


def _text(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 400 else f"{text[:400]}... ({len(text)} chars)"


def start() -> None:
    """Forget the previous program: a new example begins."""
    _LOG.clear()


def call(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """Await ``fn(*args)`` on the event loop thread that started the machine, logging the call."""
    _LOG.append(show_call(fn, args))
    return on_loop(fn, *args)


class _Calls:
    """How the machine's thread reaches the loop under asyncio: a portal, and a stop flag."""

    def __init__(self) -> None:
        self.portal: BlockingPortal | None = None
        self.stopped = False


_CALLS: ContextVar[_Calls | None] = ContextVar("agentlooptest_calls", default=None)


class _Cancelled(BaseException):
    """The clause was cancelled: the machine (in its thread) stops at its next store call.

    A ``BaseException``, so hypothesis does not take it for a failing example.
    """


def on_loop(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """From the machine's worker thread: await ``fn(*args)`` on the event loop, cancellably.

    Once the clause is cancelled the call raises (the backend's cancellation
    under trio), so the machine stops instead of running its examples out.
    """
    calls = _CALLS.get()
    if calls is None:
        return anyio.from_thread.run(fn, *args)
    if calls.stopped or calls.portal is None:
        raise _Cancelled
    try:
        result: T = calls.portal.call(_unless_spurious, fn, *args)
    except concurrent.futures.CancelledError:
        calls.stopped = True
        raise _Cancelled from None
    return result


async def _unless_spurious(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """``await fn(*args)``; a ``CancelledError`` the store raised by itself becomes an error.

    Otherwise it would cancel the portal's call and read as the clause being cancelled.
    """
    try:
        return await fn(*args)
    except asyncio.CancelledError as exc:
        error = spurious_cancel(exc)
        if error is None:
            raise
        raise error from exc


async def run_machine_thread(fn: Callable[..., object], *args: Any) -> None:
    """Run ``fn(*args)`` in a worker thread whose :func:`on_loop` calls share our cancellation.

    Under trio, ``from_thread.run`` already runs in the cancellation context
    of the ``to_thread`` call. anyio's asyncio backend runs such calls inside
    the shield that keeps the thread's wait uncancellable, so under asyncio
    the calls go through a portal inside a scope of ours, and a watcher task
    cancels that scope and stops the machine when the clause is cancelled
    (its timeout too): the running store call is cancelled, and the next one
    raises at once.
    """
    if on_trio():
        await anyio.to_thread.run_sync(fn, *args)
        return
    calls, cancelled = _Calls(), False

    async def watch(scope: anyio.CancelScope) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            calls.stopped = True
            scope.cancel()

    async with anyio.create_task_group() as tasks:
        with anyio.CancelScope() as scope:
            tasks.start_soon(watch, scope)
            async with BlockingPortal() as calls.portal:
                token = _CALLS.set(calls)  # the worker thread runs in a copy of this context
                try:
                    await anyio.to_thread.run_sync(fn, *args)
                except _Cancelled:
                    cancelled = True
                finally:
                    _CALLS.reset(token)
        tasks.cancel_scope.cancel()
    if cancelled:
        await anyio.lowlevel.checkpoint()  # the clause's cancellation, delivered here
        raise RuntimeError("the machine's store calls were cancelled from outside")


def show_call(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """``name(arg, ...)`` as the program shows it: steps compact, times relative to T0."""
    shown = [_arg(a) for a in args]
    if isinstance(fn, partial):
        shown += [f"{k}={_arg(v)}" for k, v in fn.keywords.items()]
        fn = fn.func
    return f"{getattr(fn, '__name__', repr(fn))}({', '.join(shown)})"


def _arg(value: object) -> str:
    if isinstance(value, RunStep):
        return (
            f"RunStep({value.session_id!r}, {value.step_index}, {value.step_type.value}, "
            f"{value.content!r}, tool_args={value.tool_args!r}, "
            f"created_at={_when(value.created_at)})"
        )
    return repr(value)


def _when(at: datetime) -> str:
    seconds = (at - T0).total_seconds()
    return f"T0{seconds:+g}s"


def numbered(last_is_failing: bool = True) -> str:
    """The logged calls as ``1. call`` lines, the last marked as where the results parted."""
    lines = [f"{i}. {c}" for i, c in enumerate(_LOG, 1)]
    if lines and last_is_failing:
        lines[-1] += "   <- the first result that differs from the model"
    return "\n".join(lines) if lines else "(no store call)"
