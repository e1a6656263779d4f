"""The in-memory stores under asyncio: every call works, is a checkpoint and is all-or-nothing.

Each public store call is tried against a small "world" (a ``SessionStore``
with its ``StepStore``, some data, a held lease and a clock that moves only
when told to). A call is cancelled by each asyncio cancellation source, at
every loop iteration from before it starts until after it ends; the world is
then observed through the public API and must be either exactly as before the
call (when the call raised) or exactly as after an uncancelled run of it (when
it returned). A completed call reported as cancelled, or a cancelled call
that left something behind, fails.

Tests parametrized with ``ASYNCIO`` run on asyncio only (they use its native
primitives); the others run on both backends.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import attrs
import pytest
import trio
from _lease_kit import T0, FakeClock

from agentloop import (
    FinalizeSummary,
    Lease,
    RunStatus,
    RunStep,
    Session,
    StepType,
    StoreClosedError,
)
from agentloopmem import FencedStore, SessionStore, StepStore

ASYNCIO = pytest.mark.parametrize("anyio_backend", ["asyncio"])
LAST_POINT = 4
"""Loop iterations after which a cancellation certainly comes after any store call ended."""


def step(i: int, sid: str = "s") -> RunStep:
    return RunStep(sid, i, StepType.user, content=f"{sid}{i}", created_at=T0)


@attrs.define
class World:
    sessions: SessionStore
    steps: StepStore
    clock: FakeClock
    held: Lease


async def new_world() -> World:
    """Session "s": one step, data at revision 1; "h" leased by "a" until T0+10s; now T0+5s."""
    clock = FakeClock()
    steps = StepStore()
    sessions = SessionStore(clock, steps=steps)
    await steps.append(step(0))
    await sessions.update_data("s", "[0]")
    held = await sessions.acquire_lease("h", "a", 10)
    assert held is not None
    clock.advance(5)
    return World(sessions, steps, clock, held)


async def observe(w: World) -> object:
    """Everything a call could have changed, read through the public API (moves the clock)."""
    try:
        seen: list[object] = [
            await w.steps.all("s"),
            await w.steps.all("h"),
            await w.sessions.get_many(["s", "h"]),
            await w.sessions.final("s"),
            await w.sessions.revision("s"),
            await w.sessions.revision("h"),
            await w.sessions.list_sessions(),
        ]
    except StoreClosedError:
        return "closed"
    w.clock.advance(2)  # T0+7s: the original lease on "h" is live unless released
    seen.append(await w.sessions.acquire_lease("h", "probe", 10))
    w.clock.advance(5)  # T0+12s: expired unless renewed (or taken by the probe above)
    seen.append(await w.sessions.acquire_lease("h", "probe2", 10))
    seen.append(await w.sessions.acquire_lease("f", "probe", 10))  # held if acquired at T0+5s
    return seen


def fenced(w: World) -> FencedStore:
    """The world's stores fenced by its held lease on "h"."""
    view = w.sessions.fenced(w.held)
    assert isinstance(view, FencedStore)
    return view


Op = Callable[[World], Coroutine[Any, Any, object]]
SUMMARY = FinalizeSummary(RunStatus.completed, step_count=3)

WRITES: dict[str, Op] = {
    "steps.append": lambda w: w.steps.append(step(1)),
    "steps.append_many": lambda w: w.steps.append_many([step(1), step(2, "h")]),
    "steps.delete_session": lambda w: w.steps.delete_session("s"),
    "steps.aclose": lambda w: w.steps.aclose(),
    "put": lambda w: w.sessions.put(Session("s", model="m", data="[1]")),
    "update_data": lambda w: w.sessions.update_data("s", "[1]"),
    "update_data_if": lambda w: w.sessions.update_data_if("s", "[1]", 1),
    "finalize": lambda w: w.sessions.finalize("s", SUMMARY),
    "delete_session": lambda w: w.sessions.delete_session("s"),
    "acquire_lease": lambda w: w.sessions.acquire_lease("f", "a", 10),
    "renew_lease": lambda w: w.sessions.renew_lease(w.held, 10),
    "release_lease": lambda w: w.sessions.release_lease(w.held),
    "aclose": lambda w: w.sessions.aclose(),
    "fenced.put": lambda w: fenced(w).put(Session("h", data="[2]")),
    "fenced.update_data": lambda w: fenced(w).update_data("h", "[2]"),
    "fenced.update_data_if": lambda w: fenced(w).update_data_if("h", "[2]", 0),
    "fenced.finalize": lambda w: fenced(w).finalize("h", SUMMARY),
    "fenced.delete_session": lambda w: fenced(w).delete_session("s"),
    "fenced.append": lambda w: fenced(w).append(step(1, "h")),
    "fenced.append_many": lambda w: fenced(w).append_many([step(1, "h")]),
}
READS: dict[str, Op] = {
    "steps.last_n": lambda w: w.steps.last_n("s", 5),
    "steps.all": lambda w: w.steps.all("s"),
    "get": lambda w: w.sessions.get("s"),
    "get_many": lambda w: w.sessions.get_many(["s", "x", "s"]),
    "exists": lambda w: w.sessions.exists("s"),
    "final": lambda w: w.sessions.final("s"),
    "revision": lambda w: w.sessions.revision("s"),
    "list_sessions": lambda w: w.sessions.list_sessions(limit=5),
}
CALLS = {**WRITES, **READS}


async def reference(op: Op) -> tuple[object, object, object]:
    """The world observed without the call, and the result and world after an uncancelled call."""
    before = await observe(await new_world())
    w = await new_world()
    result = await op(w)
    return before, result, await observe(w)


def fire_after(iterations: int, fn: Callable[[], object]) -> None:
    """Call ``fn`` now (0) or after that many more turns of the running asyncio loop."""
    if iterations == 0:
        fn()
    else:
        asyncio.get_running_loop().call_soon(fire_after, iterations - 1, fn)


async def with_scope(call: Coroutine[Any, Any, object], point: int) -> tuple[bool, object]:
    """Run ``call`` in an anyio cancel scope cancelled ``point`` loop turns after it starts."""
    with anyio.CancelScope() as scope:
        fire_after(point, scope.cancel)
        return True, await call
    return False, None


async def with_task_cancel(call: Coroutine[Any, Any, object], point: int) -> tuple[bool, object]:
    """Run ``call`` as a task and ``Task.cancel()`` it ``point`` loop turns after it starts."""
    task = asyncio.ensure_future(call)
    fire_after(point, task.cancel)
    try:
        return True, await task
    except asyncio.CancelledError:
        assert task.cancelled()  # the task's own cancellation, not ours
        return False, None


async def with_timeout(call: Coroutine[Any, Any, object], point: int) -> tuple[bool, object]:
    """Run ``call`` under ``asyncio.timeout()``, expiring ``point`` loop turns after it starts."""
    entered = True

    def expire() -> None:
        if entered:
            cm.reschedule(asyncio.get_running_loop().time())

    try:
        async with asyncio.timeout(None) as cm:
            fire_after(point, expire)
            result = await call
            entered = False
            return True, result
    except TimeoutError:
        return False, None


SOURCES = {"anyio scope": with_scope, "task.cancel": with_task_cancel, "timeout": with_timeout}


@ASYNCIO
@pytest.mark.anyio
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("name", list(CALLS))
async def test_cancelled_call_did_nothing_and_completed_call_was_not_cancelled(
    name: str, source: str
) -> None:
    """At every cancellation point: a raised call changed nothing, a returned one did it all."""
    op, run = CALLS[name], SOURCES[source]
    before, expected, after = await reference(op)
    if name in WRITES:
        assert after != before  # the call's effect is visible to `observe`
    outcomes = set()
    for point in range(LAST_POINT + 1):
        w = await new_world()
        done, result = await run(op(w), point)
        await asyncio.sleep(0)  # let any late cancellation land here, outside the call
        outcomes.add(done)
        if done:
            assert result == expected
        assert await observe(w) == (after if done else before), (point, done)
    assert outcomes == {True, False}  # both a cancelled and a completed call were checked


@ASYNCIO
@pytest.mark.anyio
@pytest.mark.parametrize("name", list(WRITES))
async def test_timeout_expired_before_the_call_writes_nothing(name: str) -> None:
    """Under an ``asyncio.timeout(0)`` already expired, the call raises and changes nothing."""
    before, _, _ = await reference(CALLS[name])
    w = await new_world()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await CALLS[name](w)
    assert await observe(w) == before


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(CALLS))
async def test_scope_cancelled_before_the_call(name: str) -> None:
    """In an anyio scope cancelled before the call, it raises and changes nothing."""
    before, _, _ = await reference(CALLS[name])
    w = await new_world()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await CALLS[name](w)
    assert scope.cancelled_caught
    assert await observe(w) == before


@ASYNCIO
@pytest.mark.anyio
@pytest.mark.parametrize("name", list(CALLS))
async def test_every_call_works_and_lets_another_task_run(name: str) -> None:
    """Each call works, and a task started just before it runs before it returns.

    asyncio runs ready tasks first in, first out, so one suspension of the call
    is enough (trio shuffles its batches: its checkpoints are tested with
    ``trio.testing.assert_checkpoints`` in the other test modules).
    """
    _, expected, after = await reference(CALLS[name])
    w = await new_world()
    ran: list[bool] = []

    async def other() -> None:
        ran.append(True)

    async with anyio.create_task_group() as group:
        group.start_soon(other)
        assert await CALLS[name](w) == expected
        assert ran == [True]
    assert await observe(w) == after


async def _thread_work(steps: StepStore, sessions: SessionStore, thread: int, n: int) -> None:
    for i in range(n):
        await steps.append(RunStep("shared", i, StepType.user, content=f"{thread}:{i}"))
        await sessions.update_data(f"own{thread}", str(i))
        lease = await sessions.acquire_lease("leased", f"t{thread}", 60)
        if lease is not None:
            view = sessions.fenced(lease)
            assert isinstance(view, FencedStore)
            await view.append(RunStep("leased", i, StepType.user))
            await sessions.release_lease(lease)


@pytest.mark.parametrize(
    "backends",
    [("asyncio",) * 4, ("asyncio", "trio", "asyncio", "trio")],
    ids=["asyncio", "mixed"],
)
def test_os_threads_each_running_their_own_loop(backends: tuple[str, ...]) -> None:
    """Threads, each in its own ``asyncio.run`` or ``trio.run``, share the stores; nothing lost."""
    steps = StepStore()
    sessions = SessionStore(steps=steps)
    per_thread = 1_000
    barrier = threading.Barrier(len(backends))
    errors: list[BaseException] = []

    def run(thread: int, backend: str) -> None:
        try:
            barrier.wait()
            anyio.run(_thread_work, steps, sessions, thread, per_thread, backend=backend)
        except BaseException as exc:  # reported below, from the test's own thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(backends)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    async def check() -> None:
        shared = await steps.all("shared")
        assert len(shared) == len(backends) * per_thread
        for thread in range(len(backends)):
            mine = [s.content for s in shared if s.content.startswith(f"{thread}:")]
            assert mine == [f"{thread}:{i}" for i in range(per_thread)]
            assert (await sessions.get(f"own{thread}")).data == str(per_thread - 1)
        assert await sessions.exists("leased") is False  # only steps were appended there
        assert 0 < len(await steps.all("leased")) <= len(backends) * per_thread

    asyncio.run(check())
    trio.run(check)
