"""PostgresStore across a failover, and with its synchronous standby down.

Private servers only (see ``_pg_cluster``): a primary with a synchronous
standby built by ``pg_basebackup -R``, the store on a multi-host DSN with
``target_session_attrs=read-write``. The primary is crashed (``pg_ctl stop -m
immediate``) under load and the standby promoted: nothing acknowledged may be
lost, nothing stored twice, and a lease taken before the crash still excludes
other owners. With the synchronous standby down, a write is never reported
as a success.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import trio
from _pg_cluster import Cluster, cluster
from _pg_private import can_run_private_server
from _sql_support import pg_dsn

from agentloop import RunStep, StepType, StoreUnavailableError
from agentloopsql import PostgresStore

TASKS = 8
BEFORE = 15  # acknowledged appends per task before the crash
AFTER = 15  # and after the promotion

_NOT_REPLICATED = r"^PostgreSQL committed append locally, but its wait for the synchronous standby"


@pytest.fixture(autouse=True)
def _private_servers() -> None:
    pg_dsn()  # the PostgreSQL tests run (or skip, with the reason) together
    if not can_run_private_server():
        pytest.fail("the failover tests need initdb, pg_basebackup and a postgres user")


@pytest.fixture
def primary_alone() -> Iterator[Cluster]:
    """A primary whose synchronous standby ``standby1`` is down (never started)."""
    with cluster(synchronous="") as made:
        yield made


def step(session: str, index: int) -> RunStep:
    return RunStep(session_id=session, step_index=index, step_type=StepType.user, content="x")


class TestStandbyDown:
    async def test_append_fails_within_wait_timeout(self, primary_alone: Cluster) -> None:
        """With the synchronous standby down, an append raises "committed locally" (outcome
        unknown) once wait_timeout passes, instead of hanging or succeeding."""
        primary = primary_alone.primary
        async with await PostgresStore.open(
            primary.dsn, pool_size=2, pool_timeout=5, wait_timeout=0.5
        ) as store:
            await store.append(step("s", 0))
            primary.require_standby("standby1")
            with trio.fail_after(10), pytest.raises(StoreUnavailableError, match=_NOT_REPLICATED):
                await store.append(step("s", 1))
            # It did commit on the primary: that is what "outcome unknown" warns of.
            assert primary.sql("SELECT count(*) FROM steps WHERE session_id = 's'") == [(2,)]

    async def test_cancelled_wait_is_not_a_success(self, primary_alone: Cluster) -> None:
        """A caller cancelled while the commit waits for the standby gets "committed
        locally", never a normal return nor a bare cancellation."""
        primary = primary_alone.primary
        async with await PostgresStore.open(primary.dsn, pool_size=2, pool_timeout=5) as store:
            primary.require_standby("standby1")
            with trio.move_on_after(0.5) as scope:
                with pytest.raises(StoreUnavailableError, match=_NOT_REPLICATED):
                    await store.append(step("s", 0))
                await trio.sleep(1)  # the cancellation lands here, at the next checkpoint
            assert scope.cancelled_caught


class TestFailover:
    async def test_crash_and_promote_loses_nothing_acknowledged(
        self, record_property: pytest.RecordProperty
    ) -> None:
        """Appends from 8 tasks through a crash of the primary and the standby's promotion:
        every acknowledged step is on the new primary exactly once, leases still exclude."""
        with cluster(synchronous="standby1") as made:
            made.add_standby()
            async with await PostgresStore.open(
                made.dsn, pool_size=4, pool_timeout=10, wait_timeout=3
            ) as store:
                lease = await store.acquire_lease("leased", "first", 60)
                assert lease is not None
                acked, promoted_at, first_after = await run_through_failover(store, made)
                recovery = first_after - promoted_at
                record_property("recovery_seconds", round(recovery, 3))
                print(f"appends resumed {recovery:.3f} s after the promotion")
                assert await store.acquire_lease("leased", "second", 60) is None
                rows = made.standby.sql(
                    "SELECT session_id, step_index, count(*) FROM steps "
                    "GROUP BY session_id, step_index"
                )
            stored = {(session, index): count for session, index, count in rows}
            assert all(count == 1 for count in stored.values()), "a step was stored twice"
            missing = [key for key in acked if key not in stored]
            assert missing == [], f"acknowledged but lost: {missing}"


async def run_through_failover(
    store: PostgresStore, made: Cluster
) -> tuple[list[tuple[str, int]], float, float]:
    """Append from TASKS tasks; crash the primary and promote the standby mid-way.

    Returns the acknowledged (session, index) pairs, when the promotion ended
    and when the first append after it was acknowledged.
    """
    acked: list[tuple[str, int]] = []
    counts = [0] * TASKS
    crashed, enough = trio.Event(), trio.Event()
    promoted: list[float] = []
    after: list[float] = []

    async def appender(n: int) -> None:
        index, mine_after = 0, 0
        while mine_after < AFTER:
            try:
                await store.append(step(f"s{n}", index))
            except StoreUnavailableError:
                pass  # not acknowledged; the next step takes the next index
            else:
                acked.append((f"s{n}", index))
                counts[n] += 1
                if min(counts) >= BEFORE:
                    enough.set()
                if promoted:
                    after.append(time.monotonic())
                    mine_after += 1
            index += 1
            if not crashed.is_set():
                await trio.sleep(0.005)

    async def operator() -> None:
        await enough.wait()
        await trio.to_thread.run_sync(made.primary.crash)
        crashed.set()
        await trio.to_thread.run_sync(made.standby.promote)
        promoted.append(time.monotonic())

    with trio.fail_after(50):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(operator)
            for n in range(TASKS):
                nursery.start_soon(appender, n)
    return acked, promoted[0], min(after)
