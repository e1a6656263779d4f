"""An asyncio-native example store on Redis (``redis.asyncio``), certified by the contract.

``RedisStepStore`` and ``RedisSessionStore`` implement the two protocols and
every optional capability of the in-memory stores (their leases fence session
writes only) against the Redis server at :data:`REDIS_URL`; ``RedisStore`` is
both in one object, whose leases fence appends too. They run under asyncio
only. ``harness()`` and ``combined_harness()`` are contract targets
(``agentlooptest certify --backend asyncio tests.redis_store:harness``);
``broken_harness()`` certifies ``BrokenRedisStepStore``, a twin with one
realistic bug the contract must catch.
"""

from __future__ import annotations

from ._base import REDIS_URL
from ._broken import EXPECTED_FAILURES, BrokenRedisStepStore, broken_harness
from ._combined import FencedRedisStore, RedisStore
from ._fenced import FencedRedisSessionStore
from ._harness import combined_harness, delete_prefix, harness, make_harness, new_run
from ._sessions import RedisSessionStore
from ._steps import RedisStepStore

__all__ = [
    "EXPECTED_FAILURES",
    "REDIS_URL",
    "BrokenRedisStepStore",
    "FencedRedisSessionStore",
    "FencedRedisStore",
    "RedisSessionStore",
    "RedisStepStore",
    "RedisStore",
    "broken_harness",
    "combined_harness",
    "delete_prefix",
    "harness",
    "make_harness",
    "new_run",
]
