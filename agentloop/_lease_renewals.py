"""What renews the leases of the running leased runs, and bounds their lease calls.

A run registers its holder with :meth:`add` and drops it with :meth:`discard`
when it ends. Each due renewal runs as a task of its own (a slow renew holds
up no other run's). A run's lease calls are bounded here too: :meth:`bound`
cancels a scope at a time unless :meth:`unbound` came first. That is what a
scope deadline does, without one: each deadline change of a trio scope costs
about as much as a store call and leaves an entry (holding the scope) in
trio's deadline heap until it is pruned; a leased run would make four.

- Under trio, one system task per trio run (:class:`Renewals`) sleeps until
  the earliest due time; registering is two dict operations.
- Under asyncio, which has no system tasks, one timer per loop
  (:class:`TimerRenewals`, ``loop.call_at``) is armed for the earliest due
  time: no task exists while nothing is due, so nothing outlives its loop
  or a run; registering is a dict insert. A renewal started before the run
  ended still finishes (bounded by its interval).

While anything is registered, either wakes at least every :data:`TICK`
seconds, so a new registration due later than that never has to wake it
(runs back to back would otherwise wake it once each).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from typing import Protocol

import trio

from agentloop._backend import on_trio

TICK = 1.0

_RENEWALS: trio.lowlevel.RunVar[Renewals] = trio.lowlevel.RunVar("agentloop_lease_renewals")


class Renewable(Protocol):
    """A run's hold on a lease, as the renewal task sees it."""

    @property
    def interval(self) -> float:
        """Seconds between two renewals."""
        ...

    async def renew_once(self) -> None:
        """Renew the lease once; must never raise (it runs in a task nobody awaits)."""
        ...


class Cancellable(Protocol):
    """A scope a bound cancels."""

    def cancel(self) -> None:
        """Cancel what runs inside the scope."""
        ...


def _next_wake(now: float, due: dict[Renewable, float], bounds: dict[Cancellable, float]) -> float:
    """When to wake next: the earliest due time, at most :data:`TICK` from now."""
    if not due and not bounds:
        return math.inf
    return min(now + TICK, *due.values(), *bounds.values())


class Renewals:
    """The leased runs of one trio run, when each lease is next due for renewal, and
    the bounds of their lease calls."""

    def __init__(self) -> None:
        self._due: dict[Renewable, float] = {}
        self._bounds: dict[Cancellable, float] = {}
        self._until = math.inf  # when the task wakes up next on its own
        self._wake = trio.Event()
        self.wakes = 0  # how often the task woke (for tests)

    @classmethod
    def current(cls) -> Renewals:
        """This trio run's renewals, with their system task started on first use."""
        try:
            return _RENEWALS.get()
        except LookupError:
            renewals = cls()
            _RENEWALS.set(renewals)
            trio.lowlevel.spawn_system_task(renewals._serve, name="agentloop lease renewals")
            return renewals

    def add(self, holder: Renewable) -> None:
        """Renew ``holder`` every ``holder.interval`` seconds from now until :meth:`discard`."""
        due = trio.current_time() + holder.interval
        self._due[holder] = due
        self._wake_by(due)

    def discard(self, holder: Renewable) -> None:
        """Stop renewing ``holder`` (a renewal already started still finishes)."""
        self._due.pop(holder, None)

    def bound(self, scope: Cancellable, when: float) -> None:
        """Cancel ``scope`` at ``when`` (on trio's clock) unless :meth:`unbound` first."""
        self._bounds[scope] = when
        self._wake_by(when)

    def unbound(self, scope: Cancellable) -> None:
        """Drop ``scope``'s bound (a bound already reached has cancelled it)."""
        self._bounds.pop(scope, None)

    def _wake_by(self, when: float) -> None:
        if when < self._until:
            self._until = when
            self._wake.set()

    async def _serve(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                self.wakes += 1
                now = trio.current_time()
                for holder in _take_due(self._due, now):
                    nursery.start_soon(holder.renew_once)
                _cancel_reached(self._bounds, now)
                self._until = _next_wake(now, self._due, self._bounds)
                self._wake = trio.Event()
                with trio.move_on_at(self._until):
                    await self._wake.wait()


def _take_due(due: dict[Renewable, float], now: float) -> list[Renewable]:
    """The holders whose renewal ``now`` reached, each due again one interval from now."""
    ready = [holder for holder, when in due.items() if when <= now]
    for holder in ready:
        due[holder] = now + holder.interval
    return ready


def _cancel_reached(bounds: dict[Cancellable, float], now: float) -> None:
    """Cancel (and drop) every scope whose bound ``now`` reached."""
    for scope, when in list(bounds.items()):
        if when <= now:
            del bounds[scope]
            scope.cancel()


class TimerRenewals:
    """The leased runs of one asyncio loop, renewed from one timer armed for the earliest due.

    Registering is a dict insert (a timer is armed only when the new due time comes
    before the armed one); dropping is a dict pop, so the armed timer may fire with
    nothing due, and then arms nothing more once nothing is registered. Only the loop
    holds it (through the armed timer; ``_TIMERS`` holds it weakly), and it refers to
    the loop weakly, so a loop closed with runs still registered is not kept alive by
    them.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self._due: dict[Renewable, float] = {}
        self._bounds: dict[Cancellable, float] = {}
        self._until = math.inf  # when the armed timer fires (inf: none is armed)
        self.wakes = 0  # how often a timer was armed (for tests)

    def add(self, holder: Renewable) -> None:
        """Renew ``holder`` every ``holder.interval`` seconds from now until :meth:`discard`."""
        due = asyncio.get_running_loop().time() + holder.interval
        self._due[holder] = due
        if due < self._until:
            self._arm_by(due)

    def discard(self, holder: Renewable) -> None:
        """Stop renewing ``holder`` (a renewal already started still finishes)."""
        self._due.pop(holder, None)

    def bound(self, scope: Cancellable, when: float) -> None:
        """Cancel ``scope`` at ``when`` (on the loop's clock) unless :meth:`unbound` first."""
        self._bounds[scope] = when
        if when < self._until:
            self._arm_by(when)

    def unbound(self, scope: Cancellable) -> None:
        """Drop ``scope``'s bound (a bound already reached has cancelled it)."""
        self._bounds.pop(scope, None)

    def _arm_by(self, when: float) -> None:
        """Arm a timer for ``when``, or sooner: at most ``TICK`` from now."""
        self._arm(min(when, asyncio.get_running_loop().time() + TICK))

    def _arm(self, when: float) -> None:
        self.wakes += 1
        self._until = when  # a timer armed before for later is stale: it will do nothing
        asyncio.get_running_loop().call_at(when, self._fire, when)

    def _fire(self, when: float) -> None:
        if when != self._until:  # stale
            return
        loop = asyncio.get_running_loop()
        now = max(loop.time(), when)  # asyncio may run a timer a clock tick early
        renewing = _RENEWING.setdefault(loop, set())
        for holder in _take_due(self._due, now):
            task = loop.create_task(holder.renew_once(), name="agentloop lease renewal")
            renewing.add(task)  # asyncio holds no strong reference to a task
            task.add_done_callback(renewing.discard)
        _cancel_reached(self._bounds, now)
        self._until = math.inf
        wake = _next_wake(now, self._due, self._bounds)
        if wake < math.inf:
            self._arm(wake)


_RENEWING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[asyncio.Task[None]]] = (
    weakref.WeakKeyDictionary()
)
# id() of a loop -> its renewals, while a timer of theirs is armed (so held by the loop).
_TIMERS: weakref.WeakValueDictionary[int, TimerRenewals] = weakref.WeakValueDictionary()


def renewals() -> Renewals | TimerRenewals:
    """The running event loop's renewals: trio's system task, or asyncio's timers."""
    if on_trio():
        return Renewals.current()
    loop = asyncio.get_running_loop()
    timers = _TIMERS.get(id(loop))
    if timers is None or timers.loop() is not loop:  # none armed, or a dead loop's id
        timers = _TIMERS[id(loop)] = TimerRenewals(loop)
    return timers
