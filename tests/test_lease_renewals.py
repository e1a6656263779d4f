"""The renewals' bounds: a scope cancelled at its time unless unbound first, on both backends.

A leased run bounds its lease calls (the first ``acquire_lease``, the
``release_lease``) through the renewals instead of scope deadlines; the loop
tests cover those bounds end to end, these the mechanism itself.
"""

from __future__ import annotations

import anyio
import pytest

from agentloop._backend import cancel_scope, clock
from agentloop._lease_renewals import TICK, renewals

pytestmark = pytest.mark.anyio


async def test_a_bound_cancels_its_scope_at_its_time() -> None:
    now = clock()
    start = now()
    with cancel_scope() as scope:
        renewals().bound(scope, start + 0.05)
        await anyio.sleep(5)
    assert scope.cancelled_caught
    assert 0.04 < now() - start < 1


async def test_an_unbound_scope_is_not_cancelled() -> None:
    now = clock()
    with cancel_scope() as scope:
        renewals().bound(scope, now() + 0.05)
        renewals().unbound(scope)
        await anyio.sleep(0.1)
    assert not scope.cancel_called


class _Holder:
    interval = 30.0

    async def renew_once(self) -> None:
        return None


async def test_a_bound_sooner_than_the_next_wake_is_kept() -> None:
    """A bound due before the time the renewals sleep until wakes them sooner."""
    holder = _Holder()
    current = renewals()
    current.add(holder)  # due in 30 s
    try:
        await anyio.sleep(0.01)
        now = clock()
        start = now()
        with cancel_scope() as scope:
            current.bound(scope, start + 0.05)
            await anyio.sleep(5)
        assert scope.cancelled_caught
        assert now() - start < 1
    finally:
        current.discard(holder)


class _RunHolder:
    interval = TICK + 10.0


async def test_runs_back_to_back_do_not_wake_the_renewals_each() -> None:
    """While anything is registered the renewals wake every TICK on their own, so
    what a run registers, all due later than that, needs no wake-up of its own
    (without it the release bound, due sooner than the last run's renewal, would)."""
    current = renewals()
    busy = _Holder()
    current.add(busy)  # another run under way: something is always registered
    try:
        await anyio.sleep(0.01)
        before = current.wakes
        now = clock()
        for _ in range(200):  # what a leased run registers, in order
            with cancel_scope() as scope:
                current.bound(scope, now() + TICK + 10.5)  # the first acquire
                current.unbound(scope)
                holder = _RunHolder()
                current.add(holder)  # its renewals
                await anyio.lowlevel.checkpoint()
                current.discard(holder)
                current.bound(scope, now() + TICK + 5)  # the release
                current.unbound(scope)
        assert current.wakes - before <= 2
    finally:
        current.discard(busy)
