"""Telling a store's own ``CancelledError`` from a cancellation of the caller (asyncio).

Under asyncio ``CancelledError`` is an ordinary class anyone can raise. A
store that raises it although nothing cancelled the call (a bug: a
cancellation leaked from a task of its own, a bare ``raise
asyncio.CancelledError()``) would otherwise escape every ``except Exception``
and end the whole contract run with a traceback. The contract reports it
instead, on the clause (or factory, or cleanup) that met it.
"""

from __future__ import annotations

import asyncio

from agentloop._backend import cancel_pending
from agentloop._shared import on_trio

__all__ = ["SpuriousCancel", "spurious_cancel"]


class SpuriousCancel(Exception):
    """A store raised ``CancelledError`` although its caller was not being cancelled."""


def spurious_cancel(exc: BaseException) -> SpuriousCancel | None:
    """The error to report instead of ``exc``, or ``None`` when ``exc`` is a real cancellation.

    ``exc`` is spurious when it is asyncio's ``CancelledError`` (or a group of
    nothing else) and, under
    asyncio, the calling task has no pending ``Task.cancel()`` (nor an expired
    ``asyncio.timeout``: ``task.cancelling() == 0``) and no enclosing anyio
    scope is cancelled. Under trio it always is (trio cancels with
    ``trio.Cancelled``, which a store cannot make).
    """
    if isinstance(exc, BaseExceptionGroup):  # a store's own task group
        cancels, rest = exc.split(asyncio.CancelledError)
        if cancels is None or rest is not None:
            return None
    elif not isinstance(exc, asyncio.CancelledError):
        return None
    if not on_trio() and cancel_pending():
        return None
    error = SpuriousCancel(
        "CancelledError raised although nothing cancelled the call (an asyncio store must "
        "raise it only when its caller is cancelled)"
    )
    error.__cause__ = exc
    return error
