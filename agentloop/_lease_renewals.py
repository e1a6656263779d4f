"""One renewal task per trio run for every leased run in it, so a run spawns no task of its own.

A run registers its holder with a due time and drops it when it ends: two
dict operations. The task sleeps until the earliest due time and starts each
due renewal as a task of its own (a slow renew holds up no other run's).
"""

from __future__ import annotations

import math
from typing import Protocol

import trio

_RENEWALS: trio.lowlevel.RunVar[Renewals] = trio.lowlevel.RunVar("agentloop_lease_renewals")


class Renewable(Protocol):
    """A run's hold on a lease, as the renewal task sees it."""

    @property
    def interval(self) -> float:
        """Seconds between two renewals."""
        ...

    async def renew_once(self) -> None:
        """Renew the lease once; must never raise (it runs in a trio system task)."""
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
