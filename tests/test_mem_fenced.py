"""agentloopmem fenced views: a lost lease's writes are refused atomically and change nothing."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from _lease_kit import T0, FakeClock

from agentloop import (
    FinalizeSummary,
    Lease,
    LeaseLostError,
    RunStatus,
    RunStep,
    Session,
    SessionStore,
    StepStore,
    StepType,
    StoreClosedError,
    SupportsAclose,
    SupportsAll,
    SupportsDeleteSession,
    SupportsFinal,
    SupportsLease,
    SupportsListSessions,
    SupportsPut,
)
from agentloopmem import FencedSessionStore, FencedStore
from agentloopmem import SessionStore as MemSessions
from agentloopmem import StepStore as MemSteps
from agentlooptest._cancel import Points, cancel_at


def new_stores() -> tuple[MemSessions, MemSteps, FakeClock]:
    clock = FakeClock()
    steps = MemSteps()
    return MemSessions(clock=clock, steps=steps), steps, clock


def step(i: int, sid: str = "s") -> RunStep:
    return RunStep(sid, i, StepType.user, content=f"step {i}", created_at=T0)


async def lease_of(store: MemSessions, owner: str, sid: str = "s") -> Lease:
    lease = await store.acquire_lease(sid, owner, 10)
    assert lease is not None
    return lease


async def taken_over(store: MemSessions, clock: FakeClock) -> tuple[Lease, Lease]:
    """A's lease on "s", expired and taken over by B."""
    old = await lease_of(store, "a")
    clock.advance(10)
    return old, await lease_of(store, "b")


async def snapshot(store: MemSessions, steps: MemSteps) -> tuple[object, ...]:
    """Everything the stores show of session "s"."""
    return (
        await store.exists("s"),
        await store.get("s"),
        await store.final("s"),
        await store.list_sessions(),
        await steps.all("s"),
    )


WRITES: dict[str, Callable[[Any], Awaitable[object]]] = {
    "update_data": lambda v: v.update_data("s", '{"late": true}'),
    "finalize": lambda v: v.finalize("s", FinalizeSummary(RunStatus.error, step_count=9)),
    "put": lambda v: v.put(Session("s", model="late")),
    "delete_session": lambda v: v.delete_session("s"),
    "append": lambda v: v.append(step(99)),
}


class TestShape:
    def test_view_without_steps_is_a_session_store(self) -> None:
        """Without a step store the view has every session capability and no append."""
        store = MemSessions()

        async def main() -> FencedSessionStore:
            return store.fenced(await lease_of(store, "a"))

        view = trio.run(main)
        assert type(view) is FencedSessionStore
        for protocol in (
            SessionStore,
            SupportsPut,
            SupportsFinal,
            SupportsListSessions,
            SupportsDeleteSession,
            SupportsAclose,
            SupportsLease,
        ):
            assert isinstance(view, protocol), protocol
        assert not isinstance(view, StepStore)

    @pytest.mark.anyio
    async def test_view_with_steps_is_both(self) -> None:
        """With a step store the view is also a StepStore with all."""
        store, _, _ = new_stores()
        view = store.fenced(await lease_of(store, "a"))
        assert isinstance(view, FencedStore)
        assert isinstance(view, StepStore)
        assert isinstance(view, SupportsAll)
        assert isinstance(view, SessionStore)
        assert view.lease == await lease_of(store, "a")

    def test_steps_must_be_a_memory_step_store(self) -> None:
        """Only an agentloopmem.StepStore can be covered (its lock is taken inside ours)."""
        with pytest.raises(TypeError, match=r"^steps must be an agentloopmem.StepStore, got 1$"):
            MemSessions(steps=1)  # type: ignore[arg-type]

    @pytest.mark.anyio
    async def test_reads_pass_through(self) -> None:
        """Reads through the view see what the stores hold, even for a lost lease."""
        store, steps, clock = new_stores()
        await store.put(Session("s", model="m", data="[1]"))
        await store.finalize("s", FinalizeSummary(RunStatus.completed))
        await steps.append(step(0))
        old, _ = await taken_over(store, clock)
        view = store.fenced(old)
        assert isinstance(view, FencedStore)
        assert await view.get("s") == Session("s", model="m", data="[1]")
        assert await view.exists("s") is True
        assert await view.final("s") == FinalizeSummary(RunStatus.completed)
        assert [i.id for i in await view.list_sessions()] == ["s"]
        assert await view.last_n("s", 5) == [step(0)]
        assert await view.all("s") == [step(0)]

    @pytest.mark.anyio
    async def test_aclose_closes_the_store(self) -> None:
        """A view owns nothing: its aclose closes the store it wraps."""
        store, _, _ = new_stores()
        view = store.fenced(await lease_of(store, "a"))
        assert isinstance(view, FencedStore)
        await view.aclose()
        with pytest.raises(StoreClosedError):
            await store.get("s")
        with pytest.raises(StoreClosedError):
            await view.append(step(0))


class TestFencedWrites:
    @pytest.mark.anyio
    async def test_holder_writes_land(self) -> None:
        """The holder's writes through its view land like plain writes."""
        store, steps, _ = new_stores()
        view = store.fenced(await lease_of(store, "a"))
        assert isinstance(view, FencedStore)
        await view.put(Session("s", model="m"))
        await view.update_data("s", "[1]")
        await view.append(step(0))
        await view.finalize("s", FinalizeSummary(RunStatus.completed, step_count=1))
        assert await store.get("s") == Session("s", model="m", data="[1]")
        assert await store.final("s") == FinalizeSummary(RunStatus.completed, step_count=1)
        assert await steps.all("s") == [step(0)]
        assert await view.delete_session("s") is True

    @pytest.mark.anyio
    @pytest.mark.parametrize("write", sorted(WRITES))
    async def test_after_takeover_refused_changing_nothing(self, write: str) -> None:
        """After a takeover each write of the old view raises LeaseLostError, changing nothing."""
        store, steps, clock = new_stores()
        await store.put(Session("s", model="m", data="[1]"))
        await store.finalize("s", FinalizeSummary(RunStatus.completed, step_count=1))
        await steps.append(step(0))
        old, new = await taken_over(store, clock)
        before = await snapshot(store, steps)
        with pytest.raises(LeaseLostError, match=r"^lease 1 of session 's' was taken over"):
            await WRITES[write](store.fenced(old))
        assert await snapshot(store, steps) == before
        await WRITES[write](store.fenced(new))  # the new holder's view writes

    @pytest.mark.anyio
    @pytest.mark.parametrize("write", sorted(WRITES))
    async def test_after_expiry_alone_allowed(self, write: str) -> None:
        """An expired lease nobody took over still writes: there is no other writer."""
        store, _, clock = new_stores()
        await store.put(Session("s"))
        view = store.fenced(await lease_of(store, "a"))
        clock.advance(3600)
        await WRITES[write](view)

    @pytest.mark.anyio
    async def test_after_release_then_reacquire_refused(self) -> None:
        """Released and acquired again (even by the same owner): the old view is refused."""
        store, _, _ = new_stores()
        first = await lease_of(store, "a")
        await store.release_lease(first)
        await store.fenced(first).update_data("s", "1")  # released, nobody else yet
        await lease_of(store, "a")
        with pytest.raises(LeaseLostError):
            await store.fenced(first).update_data("s", "2")
        assert (await store.get("s")).data == "1"

    @pytest.mark.anyio
    async def test_other_sessions_not_checked(self) -> None:
        """A lost lease's view still writes to sessions other than the leased one."""
        store, steps, clock = new_stores()
        old, _ = await taken_over(store, clock)
        view = store.fenced(old)
        assert isinstance(view, FencedStore)
        await view.update_data("other", "1")
        await view.put(Session("other2"))
        await view.finalize("other", FinalizeSummary(RunStatus.completed))
        await view.append(step(0, "other"))
        assert (await store.get("other")).data == "1"
        assert await steps.all("other") == [step(0, "other")]

    @pytest.mark.anyio
    async def test_plain_writes_not_checked(self) -> None:
        """Writes made on the store itself are never fenced."""
        store, steps, clock = new_stores()
        await taken_over(store, clock)
        await store.update_data("s", "1")
        await steps.append(step(0))
        assert (await store.get("s")).data == "1"

    @pytest.mark.anyio
    async def test_uncovered_appends_are_not_fenced(self) -> None:
        """Without steps= the view has no append: the old holder's plain appends still land."""
        clock = FakeClock()
        store, steps = MemSessions(clock=clock), MemSteps()
        old, _ = await taken_over(store, clock)
        view = store.fenced(old)
        assert not hasattr(view, "append")
        with pytest.raises(LeaseLostError):
            await view.update_data("s", "1")
        await steps.append(step(0))  # what an uncovered store leaves unprotected
        assert await steps.all("s") == [step(0)]


class TestFencedCancellation:
    async def test_fenced_writes_are_checkpoints(self) -> None:
        """Each fenced write yields once when it completes."""
        store, _, _ = new_stores()
        view = store.fenced(await lease_of(store, "a"))
        for name in ("update_data", "finalize", "put", "append", "delete_session"):
            with trio.testing.assert_checkpoints():
                await WRITES[name](view)

    @pytest.mark.parametrize("write", ["update_data", "finalize", "put", "append"])
    async def test_cancelled_at_each_checkpoint_all_or_nothing(self, write: str) -> None:
        """A fenced write cancelled at each checkpoint happened wholly or not at all."""
        points = Points()
        outcomes = set()
        for point in points:
            store, steps, _ = new_stores()
            view = store.fenced(await lease_of(store, "a"))
            before = await snapshot(store, steps)
            done = await cancel_at(partial(WRITES[write], view), point)
            points.finished(done)
            outcomes.add(done)
            after = await snapshot(store, steps)
            assert (after != before) is done
        assert outcomes == {True, False}


class TestRaceWithTakeover:
    def test_fenced_appends_racing_a_takeover_from_threads(self) -> None:
        """Every fenced append lands before the takeover or is refused: none lands after it."""
        clock = FakeClock()
        steps = MemSteps()
        store = MemSessions(clock=clock, steps=steps)
        landed: list[int] = []
        errors: list[BaseException] = []
        started = threading.Event()

        async def old_holder(view: FencedStore) -> None:
            for i in range(1_000_000):
                try:
                    await view.append(step(i))
                except LeaseLostError:
                    return
                landed.append(i)
                if i == 50:
                    started.set()
            raise AssertionError("the old holder's appends were never refused")

        async def new_holder() -> None:
            assert started.wait(timeout=30), "the old holder never started appending"
            clock.advance(10)
            lease = await lease_of(store, "b")
            view = store.fenced(lease)
            assert isinstance(view, FencedStore)
            await view.append(RunStep("s", 0, StepType.response, content="takeover"))

        def run(fn: Callable[..., Awaitable[None]], *args: object) -> None:
            try:
                trio.run(fn, *args)
            except BaseException as exc:  # reported from the test's own thread
                errors.append(exc)

        async def first_lease() -> FencedStore:
            view = store.fenced(await lease_of(store, "a"))
            assert isinstance(view, FencedStore)
            return view

        view = trio.run(first_lease)
        threads = [
            threading.Thread(target=run, args=(old_holder, view)),
            threading.Thread(target=run, args=(new_holder,)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        trace = trio.run(steps.all, "s")
        assert [s.content for s in trace] == [f"step {i}" for i in landed] + ["takeover"]
