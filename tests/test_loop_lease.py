"""The loop holds its session's lease: exclusive runs across loops, renewal, takeover, release."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
import trio
import trio.testing
from _loop_helpers import SlowModel, call

import agentloopmem
from agentloop import (
    EventCollector,
    Finalized,
    Lease,
    LeaseLostError,
    Loop,
    LoopConfig,
    LoopWarning,
    ModelReply,
    ModelRequest,
    RunStatus,
    ScriptedModel,
    Session,
    SessionBusyError,
    StoreError,
    StoreUnavailableError,
    SupportsLease,
    Tool,
    ToolContext,
)
from agentloop._lease_run import new_owner

BASE = datetime(2026, 1, 1, tzinfo=UTC)


class StoreClock:
    """The store's clock: trio's (mock) clock plus ``offset`` seconds the test can jump."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> datetime:
        return BASE + timedelta(seconds=trio.current_time() + self.offset)


class Shared:
    """One in-memory store pair several loops share, fenced appends included."""

    def __init__(self) -> None:
        self.clock = StoreClock()
        self.steps = agentloopmem.StepStore()
        self.sessions = agentloopmem.SessionStore(self.clock, steps=self.steps)

    def loop(self, model: object, **config: float | None) -> Loop:
        return Loop(
            model=model,  # type: ignore[arg-type]
            steps=self.steps,
            sessions=self.sessions,
            config=LoopConfig(**config),  # type: ignore[arg-type]
        )

    async def contents(self, session_id: str = "s") -> list[tuple[int, str]]:
        return [(s.step_index, s.content) for s in await self.steps.all(session_id)]

    async def take_over(self, session_id: str = "s") -> Lease:
        """Let the current lease expire on the store's clock and acquire it as another owner."""
        self.clock.offset += 1000
        lease = await self.sessions.acquire_lease(session_id, "intruder", 5000)
        assert lease is not None
        return lease


class FailingModel:
    """Raises on every call."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        raise RuntimeError("model down")


class TestConfig:
    def test_defaults(self) -> None:
        """A lease lives 30 s unless renewed; a busy session is waited on for 10 s."""
        assert (LoopConfig().lease_ttl, LoopConfig().lease_wait) == (30.0, 10.0)

    def test_lease_wait_may_be_zero(self) -> None:
        """lease_wait=0 is allowed (try once); a negative wait names the field and the rule."""
        assert LoopConfig(lease_wait=0).lease_wait == 0
        with pytest.raises(ValueError, match=r"^lease_wait must be .* seconds >= 0 "):
            LoopConfig(lease_wait=-1)
        with pytest.raises(TypeError, match=r"^lease_wait must be a number of seconds"):
            LoopConfig(lease_wait=False)

    def test_lease_ttl_must_be_positive(self) -> None:
        """lease_ttl follows the shared seconds rule: > 0 and finite."""
        with pytest.raises(ValueError, match=r"^lease_ttl must be a finite number of seconds > 0"):
            LoopConfig(lease_ttl=0)
        with pytest.raises(ValueError, match=r"^lease_ttl must be"):
            LoopConfig(lease_ttl=math.inf)


class TestDefaultStores:
    def test_default_session_store_covers_the_step_store(self) -> None:
        """Loop(model=m) makes SessionStore(steps=steps), so its default runs fence appends."""
        loop = Loop(model=ScriptedModel([]))
        assert isinstance(loop.sessions, agentloopmem.SessionStore)
        assert loop.sessions.steps is loop.steps
        steps = agentloopmem.StepStore()
        assert Loop(model=ScriptedModel([]), steps=steps).sessions.steps is steps  # type: ignore[attr-defined]

    def test_default_session_store_leaves_a_step_store_subclass_alone(self) -> None:
        """A StepStore subclass may override append, which a fenced append would skip."""

        class Logged(agentloopmem.StepStore):
            pass

        loop = Loop(model=ScriptedModel([]), steps=Logged())
        assert loop.sessions.steps is None  # type: ignore[attr-defined]


class TestExclusion:
    async def test_busy_after_lease_wait(self, autojump_clock: trio.testing.MockClock) -> None:
        """A second loop waits lease_wait, then raises SessionBusyError having written nothing."""
        shared = Shared()
        first = shared.loop(SlowModel(delay=100))
        second_model = ScriptedModel(["second"])
        second = shared.loop(second_model, lease_wait=10)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run, "s", "first")
            await trio.sleep(1)
            start = trio.current_time()
            with pytest.raises(SessionBusyError, match=r"^session 's' is busy: another owner"):
                await second.run("s", "second")
            assert trio.current_time() - start == pytest.approx(10, abs=0.01)
            assert second_model.requests == []
            assert await shared.contents() == [(0, "first")]
            assert await shared.sessions.final("s") is None
            nursery.cancel_scope.cancel()

    async def test_waits_and_runs_when_released_in_time(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A second loop whose wait outlasts the first run runs after it, never interleaved."""
        shared = Shared()
        first = shared.loop(SlowModel(delay=5))
        second = shared.loop(ScriptedModel(["second done"]), lease_wait=10)
        results = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run, "s", "first")
            await trio.sleep(1)
            results.append(await second.run("s", "second"))
        assert results[0].status is RunStatus.completed
        assert await shared.contents() == [
            (0, "first"),
            (1, "echo: first"),
            (2, "second"),
            (3, "second done"),
        ]

    async def test_lease_wait_zero_tries_once(self, autojump_clock: trio.testing.MockClock) -> None:
        """lease_wait=0 refuses a busy session at once."""
        shared = Shared()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(shared.loop(SlowModel()).run, "s", "first")
            await trio.sleep(1)
            start = trio.current_time()
            with pytest.raises(SessionBusyError):
                await shared.loop(ScriptedModel(["x"]), lease_wait=0).run("s", "second")
            assert trio.current_time() == start
            nursery.cancel_scope.cancel()

    async def test_runs_on_one_loop_queue_before_the_lease(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Two runs on one Loop queue on its lock, so even lease_wait=0 never refuses them."""
        shared = Shared()
        loop = shared.loop(SlowModel(delay=5), lease_wait=0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run, "s", "a")
            nursery.start_soon(loop.run, "s", "b")
        assert [index for index, _ in await shared.contents()] == [0, 1, 2, 3]
        assert (await shared.sessions.final("s")).status is RunStatus.completed  # type: ignore[union-attr]

    async def test_fresh_owner_per_run(self) -> None:
        """Each run acquires with its own owner (host:pid:random-n), so each gets a new token."""
        owners: list[str] = []
        tokens: list[int] = []

        class Recording(agentloopmem.SessionStore):
            async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
                lease = await super().acquire_lease(session_id, owner, ttl)
                owners.append(owner)
                tokens.append(lease.token if lease is not None else -1)
                return lease

        loop = Loop(model=ScriptedModel(["a", "b"]), sessions=Recording())
        await loop.run("s", "one")
        await loop.run("s", "two")
        assert len(set(owners)) == 2
        assert all(re.fullmatch(r".+:\d+:[0-9a-f]{16}-\d+", owner) for owner in owners)
        assert tokens == [1, 2]

    def test_forked_child_owners_differ_from_the_parent(self) -> None:
        """A forked child makes owners of its own pid and random part, not the parent's."""
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report one owner, then leave at once
            os.write(write, new_owner().encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            child = pipe.read().decode()
        os.waitpid(pid, 0)
        parent = new_owner()
        assert child.split(":")[1] == str(pid)
        assert child.rsplit("-", 1)[0] != parent.rsplit("-", 1)[0]
        assert child.split(":")[2][:16] != parent.split(":")[2][:16]

    async def test_cancelled_while_waiting_holds_nothing(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A run cancelled while it waits for the lease writes nothing and holds no lease."""
        shared = Shared()
        first = shared.loop(SlowModel(delay=5))
        second_model = ScriptedModel(["x"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run, "s", "first")
            await trio.sleep(1)
            with trio.move_on_after(2):
                await shared.loop(second_model, lease_wait=10).run("s", "second")
        assert second_model.requests == []
        assert len(await shared.contents()) == 2
        lease = await shared.sessions.acquire_lease("s", "next", 1)
        assert lease is not None
        assert lease.token == 2  # the first run's was 1; the cancelled wait got none


class TestRenewal:
    async def test_renewal_keeps_a_run_longer_than_its_ttl(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A run 20 s long with a 3 s TTL keeps its lease: others are refused all along."""
        shared = Shared()
        first = shared.loop(SlowModel(delay=20), lease_ttl=3)
        other = shared.loop(ScriptedModel(["late"]), lease_wait=0)
        results = []

        async def run_first() -> None:
            results.append(await first.run("s", "long"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_first)
            for _ in range(6):
                await trio.sleep(3)
                with pytest.raises(SessionBusyError):
                    await other.run("s", "intruding")
        assert results[0].status is RunStatus.completed
        assert await shared.contents() == [(0, "long"), (1, "echo: long")]
        assert (await other.run("s", "after")).status is RunStatus.completed

    async def test_runs_with_other_ttls_are_each_renewed_on_time(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A run with a short TTL starting after one with a long TTL is still renewed on time."""
        shared = Shared()
        long_ttl = shared.loop(SlowModel(delay=20), lease_ttl=30)
        short_ttl = shared.loop(SlowModel(delay=20), lease_ttl=3)
        other = shared.loop(ScriptedModel([]), lease_wait=0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_ttl.run, "a", "long")
            await trio.sleep(0.5)
            nursery.start_soon(short_ttl.run, "b", "short")
            for _ in range(5):
                await trio.sleep(3)
                for session in ("a", "b"):
                    with pytest.raises(SessionBusyError):
                        await other.run(session, "intruding")
        for session in ("a", "b"):
            final = await shared.sessions.final(session)
            assert final is not None
            assert final.status is RunStatus.completed

    async def test_failed_renew_is_a_warning(self, autojump_clock: trio.testing.MockClock) -> None:
        """A renew that fails (not lost) is reported and retried; the run goes on."""
        renews: list[int] = []

        class FlakyRenew(agentloopmem.SessionStore):
            async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
                renews.append(lease.token)
                if len(renews) == 1:
                    raise StoreUnavailableError("blip")
                return await super().renew_lease(lease, ttl)

        events = EventCollector()
        loop = Loop(
            model=SlowModel(delay=2.5),
            sessions=FlakyRenew(StoreClock()),
            config=LoopConfig(lease_ttl=3),
            on_event=events,
        )
        assert (await loop.run("s", "hi")).status is RunStatus.completed
        assert len(renews) == 2  # at 1 s (failed) and 2 s
        [warning] = events.of_type(LoopWarning)
        assert warning.message.startswith("renew_lease failed, retrying in 1s: ")


class TestTakeover:
    async def test_write_after_takeover_raises_unwrapped(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """The next write after a takeover raises LeaseLostError itself; nothing more is written."""
        shared = Shared()
        events = EventCollector()
        loop = Loop(
            model=SlowModel(delay=1),
            steps=shared.steps,
            sessions=shared.sessions,
            on_event=events,
        )
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with pytest.raises(LeaseLostError) as caught:
                    await loop.run("s", "hi")
                assert type(caught.value) is LeaseLostError
                assert re.match(r"^lease 1 of session 's' was taken over", str(caught.value))

            nursery.start_soon(run)
            await trio.sleep(0.5)
            intruder = await shared.take_over()
        assert await shared.contents() == [(0, "hi")]  # no response step, no error step
        assert await shared.sessions.final("s") is None
        assert events.of_type(Finalized) == []
        await shared.sessions.renew_lease(intruder, 10)  # the intruder still holds it

    async def test_renew_after_takeover_stops_the_run_at_once(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A renew finding the lease taken cancels the run at once: no write, no finalize."""
        shared = Shared()
        loop = shared.loop(SlowModel(), lease_ttl=3)
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with pytest.raises(LeaseLostError) as caught:
                    await loop.run("s", "hi")
                assert type(caught.value) is LeaseLostError
                assert trio.current_time() == pytest.approx(1)  # the first renew, at ttl / 3

            nursery.start_soon(run)
            await trio.sleep(0.5)
            await shared.take_over()
        assert await shared.contents() == [(0, "hi")]
        assert await shared.sessions.final("s") is None

    async def test_working_memory_write_after_takeover_is_refused(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A tool's data change after a takeover: update_data raises LeaseLostError, no result."""
        shared = Shared()

        async def slow_write(args: dict[str, object], ctx: ToolContext) -> str:
            await trio.sleep(1)
            ctx.data["late"] = True
            return "written"

        loop = Loop(
            model=ScriptedModel([call("slow_write"), "done"]),
            steps=shared.steps,
            sessions=shared.sessions,
            tools=[Tool("slow_write", "", {}, slow_write)],
        )
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with pytest.raises(LeaseLostError):
                    await loop.run("s", "hi")

            nursery.start_soon(run)
            await trio.sleep(0.5)
            await shared.take_over()
        assert [index for index, _ in await shared.contents()] == [0, 1]  # user, tool_call
        assert (await shared.sessions.get("s")).data is None
        assert await shared.sessions.final("s") is None

    async def test_uncovered_appends_still_land_after_takeover(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Without steps= the view fences session writes only: appends land, finalize is refused."""
        clock = StoreClock()
        sessions = agentloopmem.SessionStore(clock)  # covers no step store
        steps = agentloopmem.StepStore()
        loop = Loop(model=SlowModel(delay=1), steps=steps, sessions=sessions)
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with pytest.raises(LeaseLostError):
                    await loop.run("s", "hi")

            nursery.start_soon(run)
            await trio.sleep(0.5)
            clock.offset += 1000
            assert await sessions.acquire_lease("s", "intruder", 5000) is not None
        assert [s.content for s in await steps.all("s")] == ["hi", "echo: hi"]
        assert await sessions.final("s") is None


def _ending(name: str) -> Callable[[Shared], Awaitable[None]]:
    """A run on ``shared`` that ends as ``name``: completed, error, timeout or cancelled."""

    async def completed(shared: Shared) -> None:
        assert (await shared.loop(ScriptedModel(["ok"])).run("s", "hi")).status is (
            RunStatus.completed
        )

    async def error(shared: Shared) -> None:
        with pytest.raises(RuntimeError, match=r"^model down$"):
            await shared.loop(FailingModel()).run("s", "hi")

    async def timeout(shared: Shared) -> None:
        result = await shared.loop(SlowModel(), run_timeout=5).run("s", "hi")
        assert result.status is RunStatus.timeout

    async def cancelled(shared: Shared) -> None:
        with trio.move_on_after(5) as scope:
            await shared.loop(SlowModel()).run("s", "hi")
        assert scope.cancelled_caught

    return {"completed": completed, "error": error, "timeout": timeout, "cancelled": cancelled}[
        name
    ]


class TestRelease:
    @pytest.mark.parametrize("ending", ["completed", "error", "timeout", "cancelled"])
    async def test_released_at_the_end(
        self, ending: str, autojump_clock: trio.testing.MockClock
    ) -> None:
        """However the run ends, its lease is released: the next acquire succeeds at once."""
        shared = Shared()
        await _ending(ending)(shared)
        final = await shared.sessions.final("s")
        assert final is not None
        assert final.status is RunStatus(ending)
        lease = await shared.sessions.acquire_lease("s", "next", 1)
        assert lease is not None
        assert lease.token == 2

    async def test_hanging_release_is_bounded(self, autojump_clock: trio.testing.MockClock) -> None:
        """A release that hangs is abandoned after finalize_timeout; the run still returns."""

        class HangingRelease(agentloopmem.SessionStore):
            async def release_lease(self, lease: Lease) -> None:
                await trio.sleep(math.inf)

        events = EventCollector()
        loop = Loop(
            model=ScriptedModel(["ok"]),
            sessions=HangingRelease(),
            config=LoopConfig(finalize_timeout=2),
            on_event=events,
        )
        result = await loop.run("s", "hi")
        assert result.status is RunStatus.completed
        assert trio.current_time() == pytest.approx(2)
        [warning] = events.of_type(LoopWarning)
        assert warning.message == (
            "release_lease abandoned after 2s (finalize_timeout); the lease expires on its own"
        )


class TestWithoutLeases:
    async def test_store_without_leases_runs_as_before(self) -> None:
        """A session store without SupportsLease is used directly, with the in-process lock only."""
        inner = agentloopmem.SessionStore()

        class Plain:
            async def get(self, session_id: str) -> Session:
                return await inner.get(session_id)

            async def exists(self, session_id: str) -> bool:
                return await inner.exists(session_id)

            async def update_data(self, session_id: str, snapshot: str | None) -> None:
                await inner.update_data(session_id, snapshot)

            async def finalize(self, session_id: str, summary: object) -> None:
                await inner.finalize(session_id, summary)  # type: ignore[arg-type]

        plain = Plain()
        assert not isinstance(plain, SupportsLease)
        loop = Loop(model=ScriptedModel(["a", "b"]), sessions=plain)  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run, "s", "one")
            nursery.start_soon(loop.run, "s", "two")
        assert [s.step_index for s in await loop.steps.all("s")] == [0, 1, 2, 3]
        lease = await inner.acquire_lease("s", "x", 1)
        assert lease is not None
        assert lease.token == 1  # the loop never leased

    async def test_failing_acquire_is_a_store_error(self) -> None:
        """acquire_lease failing is a StoreError naming it; nothing is written."""

        class NoLeases(agentloopmem.SessionStore):
            async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
                raise StoreUnavailableError("locked out")

        loop = Loop(model=ScriptedModel(["a"]), sessions=NoLeases())
        with pytest.raises(
            StoreError, match=r"^acquire_lease failed for session 's': StoreUnavailableError"
        ):
            await loop.run("s", "hi")
        assert await loop.steps.all("s") == []
        assert not await loop.sessions.exists("s")
