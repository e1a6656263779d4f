"""A psycopg connection driven from the event loop thread: its socket waits, on trio or asyncio.

psycopg runs every operation as a generator that says which way it would
block (read, write, either); :class:`LoopConnection` answers it by waiting on
the socket with the running loop's own primitives (``trio.lowlevel`` waits,
or the asyncio loop's ``add_reader``/``add_writer``), so a statement costs
no thread hop. Any loop may drive it, one call at a time (``_pg_fast``
hands it to one caller at a time, so psycopg's own lock is not needed).

**A caller cancelled while its statement runs** does not abandon it (the
statement may already have committed): the wait absorbs the cancellation,
calls ``on_cancel`` (which asks the server to cancel the statement, from a
helper thread), and keeps driving the statement to its end, shielded and
bounded by :data:`SETTLE_BOUND`. ``absorbed`` then holds the cancellation
for the caller to raise (the statement rolled back) or re-deliver (it
committed). Past the bound it raises :class:`Unsettled`: the connection is
presumed dead and the outcome unknown.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import trio
from psycopg import waiting

from agentloop._backend import cancel_scope, cancelled_error, clock
from agentloop._shared import on_trio

RV = TypeVar("RV")

# How long a cancelled caller waits for its statement's end once the server was
# asked to cancel it (the request is repeated meanwhile); past it, the connection
# is presumed dead and the call's outcome is settled by its append key instead.
SETTLE_BOUND = 10.0

_R, _W = waiting.WAIT_R, waiting.WAIT_W
_READY_R, _READY_W = waiting.READY_R, waiting.READY_W


class Unsettled(psycopg.OperationalError):
    """A cancelled statement did not end within :data:`SETTLE_BOUND`: its outcome is unknown."""


class _Unlocked:
    """Stands in for psycopg's per-connection ``asyncio.Lock``: one caller at a time already."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


async def wait_socket(fd: int, wait: int, deadline: float = math.inf) -> int:
    """Wait until ``fd`` is ready as ``wait`` (psycopg's ``Wait``) asks; psycopg's ``Ready``.

    ``0`` when ``deadline`` (on :func:`agentloop._backend.clock`) passed first.
    Under trio a read-or-write wait waits for writing only: the server reads
    the whole request before it answers, so there is nothing to read meanwhile
    (a peer that closes makes the socket writable too).
    """
    if not on_trio():
        return await _asyncio_wait(fd, wait, deadline)
    if deadline == math.inf:  # the hot path: no cancel scope of its own
        return await _trio_wait(fd, wait)
    with trio.move_on_at(deadline):
        return await _trio_wait(fd, wait)
    return 0


async def _trio_wait(fd: int, wait: int) -> int:
    if wait == _R:
        await trio.lowlevel.wait_readable(fd)
        return _READY_R
    await trio.lowlevel.wait_writable(fd)
    return _READY_W


async def _asyncio_wait(fd: int, wait: int, deadline: float) -> int:
    loop = asyncio.get_running_loop()
    woken = loop.create_future()
    ready = 0

    def wake(state: int) -> None:
        nonlocal ready
        ready |= state
        if not woken.done():
            woken.set_result(None)

    if wait & _R:
        loop.add_reader(fd, wake, _READY_R)
    if wait & _W:
        loop.add_writer(fd, wake, _READY_W)
    timer = loop.call_at(deadline, wake, 0) if deadline != math.inf else None
    try:
        await woken
    finally:
        if wait & _R:
            loop.remove_reader(fd)
        if wait & _W:
            loop.remove_writer(fd)
        if timer is not None:
            timer.cancel()
    return ready


class LoopConnection(psycopg.AsyncConnection[Any]):
    """An autocommit ``AsyncConnection`` whose waits run on whichever loop calls it.

    Set ``on_cancel`` before a call (it must not block); read ``absorbed``
    after it. See the module docstring.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = _Unlocked()  # type: ignore[assignment]
        self.on_cancel: Callable[[], None] | None = None
        self.absorbed: BaseException | None = None
        self.waited = False  # whether a call waited on the socket since this was last reset
        self.statements = self.cursor()  # reused by every call: one cursor less per statement

    async def wait(
        self,
        gen: Any,
        interval: float = 0.0,
        timeout: float | None = None,  # noqa: ASYNC109 (psycopg's signature)
    ) -> Any:  # psycopg's PQGen[RV] -> RV
        """Drive ``gen`` to its end; see the module docstring. ``interval`` is not needed."""
        fd = self.pgconn.socket
        deadline = math.inf if timeout is None else clock()() + timeout
        trio_reads = on_trio() and timeout is None
        try:
            wait = next(gen)
            while True:
                try:
                    self.waited = True
                    if trio_reads and wait == _R:  # the hot path: the answer to a request
                        await trio.lowlevel.wait_readable(fd)
                        ready: int = _READY_R
                    else:
                        ready = await wait_socket(fd, wait, deadline)
                except cancelled_error() as exc:
                    if self.on_cancel is None:
                        raise
                    return await self._settle(gen, wait, fd, exc)
                if timeout is not None and ready == 0:
                    raise psycopg.OperationalError("the wait for the server timed out")
                wait = gen.send(ready)
        except StopIteration as done:
            return done.value

    async def _settle(self, gen: Any, wait: int, fd: int, exc: BaseException) -> Any:
        """The caller was cancelled mid-statement: ask the server to cancel it, drive it on."""
        assert self.on_cancel is not None
        self.absorbed = exc
        self.on_cancel()
        deadline = clock()() + SETTLE_BOUND
        with cancel_scope(shield=True):
            try:
                while True:
                    try:
                        ready = await wait_socket(fd, wait, deadline)
                    except asyncio.CancelledError:  # a Task.cancel() more: absorbed too
                        continue
                    if ready == 0:
                        raise Unsettled(
                            f"the server did not end a cancelled statement within {SETTLE_BOUND} s"
                        )
                    wait = gen.send(ready)
            except StopIteration as done:
                return done.value
