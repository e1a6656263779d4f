"""The program a model-based clause ran: each store call, logged, and told as a numbered list.

Not a clause module. Hypothesis replays the shrunk failing program last, so
the log after a failure is that program, call by call.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import anyio

from agentloop import RunStep
from agentlooptest._data import T0

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
    return anyio.from_thread.run(fn, *args)


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
