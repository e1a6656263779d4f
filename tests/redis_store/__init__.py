"""An asyncio-native example store on Redis (``redis.asyncio``), certified by the contract.

``RedisStepStore`` and ``RedisSessionStore`` implement the two protocols and
every optional capability of the in-memory stores (leases fence session
writes only) against the Redis server at :data:`REDIS_URL`. They run under
asyncio only. ``harness()`` is the contract target
(``agentlooptest certify --backend asyncio tests.redis_store:harness``);
``broken_harness()`` certifies ``BrokenRedisStepStore``, a twin with one
realistic bug the contract must catch.
"""

from __future__ import annotations

from ._base import REDIS_URL
from ._broken import EXPECTED_FAILURES, BrokenRedisStepStore, broken_harness
from ._harness import delete_prefix, harness, make_harness, new_run
from ._sessions import RedisSessionStore
from ._steps import RedisStepStore

__all__ = [
    "EXPECTED_FAILURES",
    "REDIS_URL",
    "BrokenRedisStepStore",
    "RedisSessionStore",
    "RedisStepStore",
    "broken_harness",
    "delete_prefix",
    "harness",
    "make_harness",
    "new_run",
]
