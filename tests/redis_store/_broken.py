"""``BrokenRedisStepStore``: the Redis step store with one realistic bug, for the contract to catch.

Its ``append_many`` checks the whole batch, then appends it step by step, one
round trip each (a batch helper written as a loop over ``append``). Each
append is whole, but a cancellation between two of them leaves part of the
batch stored: ``step.append-many.cancel`` and ``step.append-many.cancel-long`` fail;
every other clause passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentloop import RunStep
from agentlooptest import Harness

from ._checks import check_steps
from ._harness import make_harness
from ._steps import RedisStepStore

EXPECTED_FAILURES = frozenset({"step.append-many.cancel", "step.append-many.cancel-long"})
"""The clause ids the twin must fail (and no others)."""


class BrokenRedisStepStore(RedisStepStore):
    """``RedisStepStore`` whose ``append_many`` is not atomic under cancellation."""

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Append the checked batch one step (one round trip) at a time: NOT atomic."""
        for step in check_steps(steps):
            await self.append(step)


def broken_harness(run: str | None = None) -> Harness:
    """The CLI target ``tests.redis_store:broken_harness``: the twin and the good session store
    (keys under ``run``, a fresh prefix by default)."""
    return make_harness(BrokenRedisStepStore, run)
