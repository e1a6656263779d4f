"""What renews the leases of the running leased runs, so a run spawns no task of its own.

A run registers its holder with :meth:`add` and drops it with :meth:`discard`
when it ends. Each due renewal runs as a task of its own (a slow renew holds
up no other run's).

- Under trio, one system task per trio run (:class:`Renewals`) sleeps until
  the earliest due time; registering is two dict operations.
- Under asyncio, which has no system tasks, each holder's next renewal is a
  timer on the running loop (:class:`TimerRenewals`, ``loop.call_at``): no
  task exists while nothing is due, so nothing outlives its loop or a run;
  :meth:`~TimerRenewals.discard` cancels the timer. A renewal started before
  the run ended still finishes (bounded by its interval).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from typing import Protocol

import trio

from agentloop._backend import on_trio

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


class Renewals:
    """The leased runs of one trio run and when each lease is next due for renewal."""

    def __init__(self) -> None:
        self._due: dict[Renewable, float] = {}
        self._until = math.inf  # when the task wakes up next on its own
        self._wake = trio.Event()

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
        if due < self._until:
            self._wake.set()

    def discard(self, holder: Renewable) -> None:
        """Stop renewing ``holder`` (a renewal already started still finishes)."""
        self._due.pop(holder, None)

    async def _serve(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                now = trio.current_time()
                for holder, due in list(self._due.items()):
                    if due <= now:
                        self._due[holder] = now + holder.interval
                        nursery.start_soon(holder.renew_once)
                self._until = min(self._due.values(), default=math.inf)
                self._wake = trio.Event()
                with trio.move_on_at(self._until):
                    await self._wake.wait()


class TimerRenewals:
    """The asyncio loop's renewals: one timer per leased run, re-armed at each renewal."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._timers: dict[Renewable, asyncio.TimerHandle] = {}

    def add(self, holder: Renewable) -> None:
        """Renew ``holder`` every ``holder.interval`` seconds from now until :meth:`discard`."""
        self._arm(holder, self._loop.time() + holder.interval)

    def discard(self, holder: Renewable) -> None:
        """Stop renewing ``holder`` (a renewal already started still finishes)."""
        timer = self._timers.pop(holder, None)
        if timer is not None:
            timer.cancel()

    def _arm(self, holder: Renewable, due: float) -> None:
        self._timers[holder] = self._loop.call_at(due, self._due, holder, due)

    def _due(self, holder: Renewable, due: float) -> None:
        # The next renewal is due one interval after this one was, however late it starts.
        self._arm(holder, max(due, self._loop.time()) + holder.interval)
        task = self._loop.create_task(holder.renew_once(), name="agentloop lease renewal")
        renewing = _RENEWING.setdefault(self._loop, set())
        renewing.add(task)  # a task asyncio holds no strong reference to could be collected
        task.add_done_callback(renewing.discard)


_RENEWING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[asyncio.Task[None]]] = (
    weakref.WeakKeyDictionary()
)


def renewals() -> Renewals | TimerRenewals:
    """The running event loop's renewals: trio's system task, or asyncio's timers."""
    if on_trio():
        return Renewals.current()
    return TimerRenewals(asyncio.get_running_loop())
