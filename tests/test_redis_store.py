"""The asyncio-native example store on Redis (``tests/redis_store``): direct tests, under asyncio.

The store runs on ``redis.asyncio``, so every async test here runs on the
asyncio backend only. Without a Redis server on 127.0.0.1:6379 the tests skip,
naming it; with ``CI`` set they fail instead.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import redis.asyncio
import trio
from redis_store import (
    EXPECTED_FAILURES,
    BrokenRedisStepStore,
    RedisSessionStore,
    RedisStepStore,
    RedisStore,
    broken_harness,
    combined_harness,
    delete_prefix,
    harness,
    new_run,
)

from agentloop import (
    FinalizeSummary,
    LeaseLostError,
    RevisionConflictError,
    RunStatus,
    RunStep,
    Session,
    StepType,
    StoreClosedError,
    StoreUnavailableError,
)
from agentlooptest import CLAUSES, Harness, SessionStoreContract, StepStoreContract, certify

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """redis.asyncio needs asyncio: this module's anyio tests run on asyncio only."""
    return "asyncio"


def _redis_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(autouse=True)
def _needs_redis() -> None:
    """Skip without Redis (naming it); fail instead when ``CI`` is set."""
    if _redis_reachable():
        return
    if os.environ.get("CI"):
        pytest.fail("no Redis server on 127.0.0.1:6379 but CI is set: the Redis tests must run")
    pytest.skip("the Redis example store needs a Redis server on 127.0.0.1:6379")


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A fresh key prefix, its keys deleted afterwards."""
    name = f"agentloop-example-test:{secrets.token_hex(6)}"
    yield name
    await delete_prefix(name)


@pytest.fixture
async def steps(prefix: str) -> AsyncIterator[RedisStepStore]:
    store = RedisStepStore(f"{prefix}:steps")
    yield store
    await store.aclose()


@pytest.fixture
async def sessions(prefix: str) -> AsyncIterator[RedisSessionStore]:
    store = RedisSessionStore(f"{prefix}:sessions")
    yield store
    await store.aclose()


WHEN = datetime(2026, 3, 14, 15, 9, 26, 535897, tzinfo=UTC)


def step(sid: str, index: int, content: str = "") -> RunStep:
    return RunStep(
        sid, index, StepType.user, content=content, tool_args='{"k": [1, 2]}', created_at=WHEN
    )


def later(fn: Callable[[], object], turns: int = 3) -> None:
    """Call ``fn`` on the event loop ``turns`` iterations from now (mid-round-trip)."""
    loop = asyncio.get_running_loop()
    if turns == 0:
        fn()
    else:
        loop.call_soon(later, fn, turns - 1)


async def test_steps_round_trip_in_insertion_order(steps: RedisStepStore) -> None:
    sent = [step("a", 3, "x\x00é"), step("a", 1), step("b", 0), step("a", 1)]
    await steps.append(sent[0])
    await steps.append_many(sent[1:])
    await steps.append_many([])
    assert await steps.last_n("a", 2) == [sent[1], sent[3]]
    assert await steps.all("a") == [sent[0], sent[1], sent[3]]
    assert await steps.last_n("unknown", 5) == []
    assert await steps.delete_session("a") is True
    assert await steps.last_n("a", 5) == []


async def test_bad_input_writes_nothing(steps: RedisStepStore) -> None:
    with pytest.raises(TypeError, match=r"steps\[1\]"):
        await steps.append_many([step("a", 0), "not a step"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="n must be"):
        await steps.last_n("a", 0)
    assert await steps.all("a") == []


async def test_sessions_writes_revisions_and_listing(sessions: RedisSessionStore) -> None:
    assert await sessions.get("s") == Session("s")
    assert await sessions.exists("s") is False
    await sessions.put(Session("s", model="m", system_prompt="p", data='{"a": 1}'))
    await sessions.finalize("s", FinalizeSummary(RunStatus.completed, step_count=2))
    rev = await sessions.revision("s")
    assert await sessions.update_data_if("s", None, rev) > rev
    with pytest.raises(RevisionConflictError):
        await sessions.update_data_if("s", "[1]", rev)
    seeded = Session("s", "m", "p")
    assert await sessions.get_many(["s", "t", "s"]) == [seeded, Session("t"), seeded]
    [info] = await sessions.list_sessions()
    assert (info.id, info.status, info.step_count) == ("s", RunStatus.completed, 2)
    assert await sessions.final("s") == FinalizeSummary(RunStatus.completed, step_count=2)
    deleted_at = await sessions.revision("s")
    assert await sessions.delete_session("s") is True
    assert await sessions.revision("s") > deleted_at
    assert await sessions.exists("s") is False


async def test_fenced_view_refuses_writes_after_a_takeover(sessions: RedisSessionStore) -> None:
    old = await sessions.acquire_lease("s", "a", 0.05)
    assert old is not None
    await sessions.fenced(old).update_data("s", '{"holder": "a"}')
    await anyio.sleep(0.1)
    new = await sessions.acquire_lease("s", "b", 30)
    assert new is not None
    assert new.token > old.token
    with pytest.raises(LeaseLostError):
        await sessions.fenced(old).update_data("s", '{"holder": "late"}')
    with pytest.raises(LeaseLostError):
        await sessions.renew_lease(old, 30)
    assert (await sessions.get("s")).data == '{"holder": "a"}'


async def test_combined_store_deletes_and_fences_steps(prefix: str) -> None:
    store = RedisStore(prefix)
    await store.append_many([step("s", 0), step("t", 0)])
    await store.update_data("s", "[1]")
    lease = await store.acquire_lease("s", "a", 0.05)
    assert lease is not None
    await anyio.sleep(0.1)
    assert await store.acquire_lease("s", "b", 30) is not None
    with pytest.raises(LeaseLostError):  # the whole batch, the other session's step too
        await store.fenced(lease).append_many([step("t", 1), step("s", 1)])
    await store.fenced(lease).append(step("t", 2))  # another session: not fenced
    assert await store.all("t") == [step("t", 0), step("t", 2)]
    assert await store.delete_session("s") is True
    assert await store.all("s") == []
    assert await store.exists("s") is False
    await store.aclose()


async def test_a_call_cancelled_before_its_work_did_nothing(steps: RedisStepStore) -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await steps.append(step("a", 0))
    assert scope.cancelled_caught
    assert await steps.all("a") == []


async def test_scope_cancelled_mid_flight_returns_whole_then_cancels(
    steps: RedisStepStore,
) -> None:
    """An anyio cancellation landing while the round trip is in flight waits for it."""
    batch = [step("a", 0), step("b", 0), step("a", 1)]
    returned = after = False
    with anyio.CancelScope() as scope:
        later(scope.cancel)
        await steps.append_many(batch)
        returned = True
        await anyio.lowlevel.checkpoint()
        after = True
    assert (returned, after, scope.cancelled_caught) == (True, False, True)
    assert await steps.all("a") == [batch[0], batch[2]]


async def test_task_cancel_mid_flight_returns_whole_then_cancels(steps: RedisStepStore) -> None:
    """Native ``Task.cancel()`` mid-flight: the call returns, the task then ends cancelled."""
    reached: list[str] = []

    async def run() -> None:
        await steps.append(step("a", 0))
        reached.append("returned")
        await asyncio.sleep(0)
        reached.append("after")

    task = asyncio.ensure_future(run())
    later(task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert reached == ["returned"]
    assert await steps.all("a") == [step("a", 0)]


async def test_asyncio_timeout_mid_flight_still_raises_timeout(steps: RedisStepStore) -> None:
    """``asyncio.timeout`` expiring mid-flight: the write is whole, TimeoutError is raised,
    and the task's cancel count is back where it was (no stray cancellation)."""
    loop = asyncio.get_running_loop()
    reached: list[str] = []
    me = asyncio.current_task()
    assert me is not None

    async def expiring() -> None:
        async with asyncio.timeout(None) as timeout:
            later(lambda: timeout.reschedule(loop.time() - 1))
            await steps.append(step("a", 0))
            reached.append("returned")
            await asyncio.sleep(0)
            reached.append("after")

    with pytest.raises(TimeoutError):
        await expiring()
    assert reached == ["returned"]
    assert me.cancelling() == 0
    await asyncio.sleep(0)  # nothing pending: this is not cancelled
    assert await steps.all("a") == [step("a", 0)]


async def test_closed_and_unreachable(prefix: str) -> None:
    store = RedisSessionStore(prefix)
    await store.aclose()
    await store.aclose()
    with pytest.raises(StoreClosedError):
        await store.get("s")
    nowhere = RedisStepStore(prefix, "redis://127.0.0.1:1/0")
    with pytest.raises(StoreUnavailableError):
        await nowhere.append(step("a", 0))
    await nowhere.aclose()


async def test_broken_twin_leaves_part_of_a_cancelled_batch(prefix: str) -> None:
    """The twin's bug, shown without the contract: a cancellation between its appends."""
    twin = BrokenRedisStepStore(prefix)
    appended = 0
    plain_append = twin.append

    async def append(s: RunStep) -> None:
        nonlocal appended
        await plain_append(s)
        appended += 1
        if appended == 1:
            scope.cancel()

    twin.append = append  # type: ignore[method-assign,assignment]
    with anyio.CancelScope() as scope:
        await twin.append_many([step("a", 0), step("a", 1), step("a", 2)])
    assert await twin.all("a") == [step("a", 0)]  # a partial batch: not all or nothing
    await twin.aclose()


def test_refuses_to_run_under_trio() -> None:
    async def make() -> None:
        RedisStepStore("unused")

    with pytest.raises(RuntimeError, match="asyncio-native"):
        trio.run(make)


async def leftover(run: str) -> list[str]:
    """The keys a certification run left under its prefix."""
    client = redis.asyncio.Redis.from_url("redis://127.0.0.1:6379/0", decode_responses=True)
    try:
        return [key async for key in client.scan_iter(match=f"{run}:*")]
    finally:
        await client.aclose()


LIFECYCLE = {
    "page_sessions",
    "set_labels",
    "prune_steps",
    "steps_after",
    "expire_sessions",
    "fork_session",
    "restore_session",
}


async def test_certified_under_asyncio_by_certify() -> None:
    """Front door 2: every clause passes; only the one-object clause, the clock clauses and
    the session-lifecycle capabilities (which the example does not offer) do not apply."""
    run = new_run()
    report = await certify(harness(run))
    assert not report.failed, "\n\n".join(r.message for r in report.failed)
    assert report.ok
    assert {r.id for r in report.skipped} == {
        "session.combined.one-session",
        *(c.id for c in CLAUSES if c.id.startswith("session.lease-clock.")),  # no clock hook
        *(c.id for c in CLAUSES if c.capability in LIFECYCLE),
    }
    assert "lease" in report.level
    assert await leftover(run) == []  # cleanup() deleted every key of the run


async def test_broken_twin_fails_exactly_its_clause() -> None:
    """The twin fails the two append-many cancel clauses and passes every other step clause.

    Only the step clauses run: the twin's session store is the certified one.
    """
    run = new_run()
    report = await certify(broken_harness(run), pattern="step.")
    assert {r.id for r in report.failed} == EXPECTED_FAILURES
    assert all("cancelled after" in failure.message for failure in report.failed)
    family = {r.id for r in report.passed if r.id.startswith("step.append-many.")}
    assert family == {f"step.append-many.{name}" for name in ("order", "atomic", "durable")}
    assert len(report.passed) > 20
    assert await leftover(run) == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "agentlooptest", "certify", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_cli_certifies_under_asyncio() -> None:
    """Front door 3: ``agentlooptest certify --backend asyncio tests.redis_store:harness``."""
    done = _cli("--backend", "asyncio", "tests.redis_store:harness")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "CERTIFIED" in done.stdout


def test_cli_under_trio_names_the_backend_to_use() -> None:
    """Without ``--backend asyncio`` the run fails, saying the store needs asyncio."""
    done = _cli("tests.redis_store:harness", "-k", "step.window")
    assert done.returncode == 1
    assert "needs asyncio" in done.stdout


class TestRedisStoreContract(StepStoreContract, SessionStoreContract):
    """Front door 1: one pytest test per clause, each run in its own asyncio loop.

    On the combined ``RedisStore``, so nothing is skipped: the one-object
    clause and fenced appends run too.
    """

    backend = "asyncio"

    @pytest.fixture
    def harness(self) -> Harness:
        return combined_harness()
