"""Cancellation in the contract: cancelling one store call at each of its checkpoints, and
telling a cancellation nobody asked for from a real one.

**Cancelling at the k-th checkpoint.** Under trio an instrument counts the
task's resumptions; asyncio has no instruments, so there :func:`cancel_at`
drives the call's coroutine itself (:class:`_Counted`): it hands each value
the coroutine yields on to the event loop unchanged and counts the
suspensions, and cancels the anyio scope around the call when the chosen one
comes. The cancellation is then delivered to that very suspension
(``Task.cancel()`` aborts the wait it is in).

**Spurious cancellations.** Under asyncio ``CancelledError`` is an ordinary
class anyone can raise. A store that raises it although nothing cancelled
the call (a bug: a cancellation leaked from a task of its own, a bare
``raise asyncio.CancelledError()``) would otherwise escape every ``except
Exception`` and end the whole contract run with a traceback.
:func:`spurious_cancel` tells it from a real cancellation, so the contract
reports it instead, on the clause (or factory, or cleanup) that met it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator
from typing import Any, Literal, TypeVar

import anyio
import trio

from agentloop._shared import on_trio
from agentlooptest._clause import Violation, expect
from agentlooptest._stall import stalled_call

T = TypeVar("T")

MAX_POINTS = 24
"""Cancellation points tried per operation before giving up on reaching its end."""

USABLE_TIMEOUT = 10.0
"""Seconds a call after a cancelled one may take before the store counts as wedged."""


class _CancelBeforeStep(trio.abc.Instrument):
    """Cancels ``scope`` just before ``task`` resumes for the ``point``-th time."""

    def __init__(self, task: trio.lowlevel.Task, scope: trio.CancelScope, point: int) -> None:
        self.task = task
        self.scope = scope
        self.point = point
        self.resumed = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.resumed += 1
            if self.resumed == self.point:
                self.scope.cancel()


class _Counted:
    """Awaits ``coro``, calling ``cancel`` when it suspends for the ``point``-th time."""

    def __init__(self, coro: Coroutine[Any, Any, Any], cancel: Callable[[], object], point: int):
        self.coro = coro
        self.cancel = cancel
        self.point = point

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, suspended = self.coro, 0
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            suspended += 1
            if suspended == self.point:
                self.cancel()
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # the cancellation, delivered at this suspension
                value, error = None, exc


async def cancel_at(op: Callable[[], Awaitable[object]], point: int) -> bool:
    """Run ``op`` and cancel it at its ``point``-th checkpoint, under trio or asyncio.

    ``point == 0`` cancels before ``op`` starts. ``point == k`` lands the
    cancellation on the ``k``-th time ``op`` yields: under trio by cancelling
    just before the task resumes from it, under asyncio by cancelling when
    ``op`` suspends there, which aborts that suspension. (Under asyncio
    nothing runs between the start and the first suspension that a
    cancellation could stop, so points 0 and 1 end alike there.)
    Returns whether ``op`` returned normally (``False``: it raised the
    backend's cancellation, which is absorbed). A store that finishes
    blocking work in a thread before honouring the cancellation returns
    ``False`` although the work happened.
    """
    if not on_trio():
        return await _cancel_at_asyncio(op, point)
    finished = False
    with trio.CancelScope() as scope:
        instrument = _CancelBeforeStep(trio.lowlevel.current_task(), scope, point)
        if point == 0:
            scope.cancel()
        trio.lowlevel.add_instrument(instrument)
        try:
            await op()
            finished = True
        finally:
            trio.lowlevel.remove_instrument(instrument)
    return finished


async def _cancel_at_asyncio(op: Callable[[], Awaitable[object]], point: int) -> bool:
    finished = False
    with anyio.CancelScope() as scope:
        if point == 0:
            scope.cancel()
        made = op()
        if isinstance(made, Coroutine):
            await _Counted(made, scope.cancel, point)
        else:  # a Future or a custom awaitable: only cancelling it before it starts is exact
            await made
        finished = True
    return finished


Delivery = Literal["raised", "later", "lost", "uncancelled", "finished"]
"""How a native ``Task.cancel()`` reached its task: ``op`` returned before its
``point``-th suspension (``"finished"``: nothing was cancelled), the call raised ``CancelledError``
(``"raised"``), it returned and the next suspension raised it (``"later"``), it
returned and nothing ever did (``"lost"``), or the call raised it after undoing the
request (``"uncancelled"``: the task's cancel count dropped to 0)."""


async def task_cancel_at(op: Callable[[], Awaitable[object]], point: int) -> Delivery:
    """Under asyncio, run ``op`` in a task of its own and ``Task.cancel()`` it at its
    ``point``-th suspension (``point >= 1``); say how the cancellation was delivered.

    A store may complete a call it was cancelled in (then the request must
    land at the caller's next suspension) or stop it; it must never swallow
    the request, nor withdraw it (``uncancel``): that is the caller's, an
    ``asyncio.timeout`` around the call counts on it.
    """

    async def run() -> Delivery:
        task = asyncio.current_task()
        assert task is not None
        fired: list[bool] = []

        def cancel() -> None:
            fired.append(True)
            task.cancel()

        made = op()
        try:
            if isinstance(made, Coroutine):
                await _Counted(made, cancel, point)
            else:
                cancel()
                await made
        except asyncio.CancelledError:
            return "raised" if task.cancelling() > 0 else "uncancelled"
        if not fired:
            return "finished"
        try:
            for _ in range(3):
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            return "later"
        return "lost"

    inner = asyncio.get_running_loop().create_task(run())
    try:
        # Shielded: cancelling the clause must cancel it, even if ``run`` swallows the
        # cancellation of ``inner`` that awaiting it directly would pass on.
        return await asyncio.shield(inner)
    except asyncio.CancelledError:
        inner.cancel()
        raise


async def native_cancel_at(op: Callable[[], Awaitable[object]], point: int, did: str) -> bool:
    """:func:`task_cancel_at` at suspension ``point + 1``; whether ``op`` returned normally.

    Raises:
        Violation: the store swallowed the ``Task.cancel()`` or withdrew it.
    """
    delivered = await task_cancel_at(op, point + 1)
    expect(
        delivered in ("raised", "later", "finished"),
        did=f"{did}, in a task cancelled with Task.cancel() at its suspension #{point + 1}",
        expected="the call to raise CancelledError, or to return and the task's next "
        "suspension to raise it (the request kept: task.cancelling() stays 1)",
        got="the call returned and the cancellation was never delivered"
        if delivered == "lost"
        else "the call raised CancelledError after undoing the request (uncancel())",
        why="a cancellation a store swallows is lost for good under asyncio: the caller's "
        "timeout or abort never happens, and an asyncio.timeout() around it never fires",
        hint="the store, or a client library it calls (redis-py does), swallowed it: "
        "`except CancelledError: pass` (or uncancel()) around an await; run each client "
        "call through agentloop.run_whole, which keeps the request for after the call",
    )
    return delivered != "raised"


class Points:
    """Cancellation points to try: 0, 1, 2, ... until the op twice ran to the end uncancelled.

    With :func:`cancel_at` an op that returned at point ``k`` yields fewer
    than ``k`` times, so every later point would only repeat it.
    """

    def __init__(self, limit: int = MAX_POINTS) -> None:
        self.limit = limit
        self._streak = 0
        self._next = 0

    def __iter__(self) -> Points:
        return self

    def __next__(self) -> int:
        if self._streak >= 2 or self._next >= self.limit:
            raise StopIteration
        point = self._next
        self._next += 1
        return point

    def finished(self, done: bool) -> None:
        """Record whether the op at the last point returned normally."""
        self._streak = self._streak + 1 if done else 0


def each_way(limit: int = MAX_POINTS) -> Iterator[tuple[Points, int, bool]]:
    """Each point with an anyio scope, then (asyncio only) again with ``Task.cancel()``.

    Yields the :class:`Points` to tell whether the call returned, the point, and
    whether to cancel with ``Task.cancel()`` (pass it to :func:`cancel_either`).
    """
    for native in (False,) if on_trio() else (False, True):
        points = Points(limit)
        for point in points:
            yield points, point, native


async def cancel_either(
    op: Callable[[], Awaitable[object]], point: int, native: bool, did: str
) -> bool:
    """:func:`native_cancel_at` when ``native``, else :func:`cancel_at`; whether ``op``
    returned normally. The point is recorded in ``points`` by the caller."""
    if native:
        return await native_cancel_at(op, point, did)
    return await cancel_at(op, point)


async def still_usable(what: str, op: Callable[[], Awaitable[T]]) -> T:
    """Run ``op`` after a cancelled call; a hang or a ``StoreError`` means the store broke.

    Raises:
        Violation: ``op`` hung for :data:`USABLE_TIMEOUT` seconds or raised.
    """
    why = "a store left unusable by one cancelled call takes every later run down with it"
    try:
        with anyio.move_on_after(USABLE_TIMEOUT):
            return await op()
    except Exception as exc:
        raise Violation(
            f"cancelled a call, then {what}",
            "the call to work as usual",
            f"{type(exc).__name__}: {exc}",
            why,
        ) from None
    raise Violation(  # only a timeout leaves the block without returning
        f"cancelled a call, then {what}",
        f"the call to return within {USABLE_TIMEOUT:g}s",
        "it hung: the cancelled call left a lock or connection held",
        why,
    )


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
    if not on_trio() and _cancel_pending():
        return None
    error = SpuriousCancel(
        "CancelledError raised although nothing cancelled the call (an asyncio store must "
        "raise it only when its caller is cancelled)"
    )
    error.__cause__ = exc
    return error


def _cancel_pending() -> bool:
    """Under asyncio: whether the calling task is being cancelled, by ``Task.cancel()`` (or
    an expired ``asyncio.timeout``) not yet undone, or by a cancelled anyio scope around it
    (the effective deadline is then ``-inf``, unless a shield stands between)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling() > 0:
        return True
    return anyio.current_effective_deadline() == -math.inf


def cancel_violation(exc: BaseException) -> Violation:
    """The failure for a store call that raised ``CancelledError`` nobody asked for."""
    line, call = stalled_call(exc)
    did = f"`{line}`, in the clause's check" if line else "ran the clause's check"
    who = f"the store call {call}" if call else "a call into the store"
    return Violation(
        did,
        "a result or an Exception: CancelledError only when the caller is cancelled",
        f"{who} raised CancelledError, although nothing cancelled it",
        "a caller takes CancelledError for its own cancellation: an asyncio app (and the "
        "loop) would stop the task, and no `except Exception` can report it",
        hint="a cancellation leaked from a task or future of the store, or of a client "
        "library it calls, or a bare "
        "`raise asyncio.CancelledError()`",
    )
