"""agentloopmem.StepStore keeps every rule of the StepStore protocol."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import trio
import trio.testing

from agentloop import (
    RunStep,
    StepType,
    StoreClosedError,
    SupportsAclose,
    SupportsAll,
    SupportsDeleteSession,
)
from agentloop import StepStore as StepStoreProtocol
from agentloopmem import StepStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make(session_id: str, index: int, *, content: str = "", at: datetime = T0) -> RunStep:
    return RunStep(session_id, index, StepType.user, content=content, created_at=at)


async def fill(store: StepStore, session_id: str, count: int) -> list[RunStep]:
    steps = [make(session_id, i, content=f"m{i}") for i in range(count)]
    for s in steps:
        await store.append(s)
    return steps


def test_implements_protocols() -> None:
    """The store is a StepStore with the all/delete_session/aclose capabilities."""
    store = StepStore()
    for protocol in (StepStoreProtocol, SupportsAll, SupportsDeleteSession, SupportsAclose):
        assert isinstance(store, protocol)


class TestLastN:
    @pytest.mark.anyio
    async def test_newest_n_oldest_first(self) -> None:
        """last_n returns the newest n steps in oldest-first order."""
        store = StepStore()
        steps = await fill(store, "s", 10)
        assert await store.last_n("s", 3) == steps[7:]

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        ("n", "expected"), [(1, slice(4, 5)), (5, slice(0, 5)), (50, slice(0, 5))]
    )
    async def test_window_sizes(self, n: int, expected: slice) -> None:
        """n=1, n=count and n>count return exactly the newest min(n, count)."""
        store = StepStore()
        steps = await fill(store, "s", 5)
        assert await store.last_n("s", n) == steps[expected]

    @pytest.mark.anyio
    async def test_never_walks_the_whole_history(self) -> None:
        """last_n slices the window off the end: it never iterates over the history."""

        class NoWalk(list[RunStep]):
            def __iter__(self) -> Iterator[RunStep]:
                raise AssertionError("last_n iterated over the whole history")

        store = StepStore()
        await fill(store, "s", 1)
        history = NoWalk([make("s", i) for i in range(1000)])
        store._steps["s"] = history
        assert await store.last_n("s", 2) == list.__getitem__(history, slice(-2, None))

    @pytest.mark.anyio
    async def test_unknown_session_is_empty(self) -> None:
        """An unknown session has no steps; that is not an error."""
        assert await StepStore().last_n("nobody", 5) == []

    @pytest.mark.anyio
    @pytest.mark.parametrize("bad", [0, -1])
    async def test_n_below_one(self, bad: int) -> None:
        """n < 1 is a ValueError naming n."""
        with pytest.raises(ValueError, match=r"^n must be an int >= 1"):
            await StepStore().last_n("s", bad)

    @pytest.mark.anyio
    @pytest.mark.parametrize("bad", [True, 1.5, "3", None])
    async def test_n_not_int(self, bad: object) -> None:
        """A non-int n (bool included) is a TypeError naming n."""
        with pytest.raises(TypeError, match=r"^n must be an int >= 1"):
            await StepStore().last_n("s", bad)  # type: ignore[arg-type]

    @pytest.mark.anyio
    async def test_bad_session_id(self) -> None:
        """An empty session id is refused, not treated as unknown."""
        with pytest.raises(ValueError, match=r"^session_id must be a non-empty str"):
            await StepStore().last_n("", 1)


class TestOrder:
    @pytest.mark.anyio
    async def test_insertion_order_not_step_index(self) -> None:
        """Repeated and decreasing step indices keep insertion order."""
        store = StepStore()
        steps = [make("s", i) for i in (5, 5, 3, 2**31 - 1, 0, 3)]
        for s in steps:
            await store.append(s)
        assert await store.last_n("s", 10) == steps
        assert await store.all("s") == steps

    @pytest.mark.anyio
    async def test_insertion_order_not_created_at(self) -> None:
        """Tied and backward timestamps keep insertion order."""
        store = StepStore()
        times = [T0, T0, T0 - timedelta(hours=1), T0 + timedelta(microseconds=1), T0]
        steps = [make("s", i, at=t) for i, t in enumerate(times)]
        for s in steps:
            await store.append(s)
        assert await store.last_n("s", 5) == steps


class TestRoundTrip:
    @pytest.mark.anyio
    async def test_every_field_survives(self) -> None:
        """Every field of a step comes back unchanged, tool_args included."""
        store = StepStore()
        original = RunStep(
            "s",
            2**31 - 1,
            StepType.summary,
            content=" 🙂 שלום\x00\n",
            tool_args='{"retain_from_step": 4}',
            duration_ms=1,
            prompt_tokens=2**31 - 1,
            completion_tokens=3,
            created_at=datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        )
        await store.append(original)
        (back,) = await store.last_n("s", 1)
        assert back == original
        assert back.tool_args == original.tool_args


class TestIsolation:
    @pytest.mark.anyio
    async def test_sessions_do_not_mix(self) -> None:
        """Each session sees only its own steps; ids differing in case are distinct."""
        store = StepStore()
        a = await fill(store, "Alice", 3)
        b = await fill(store, "alice", 2)
        assert await store.last_n("Alice", 10) == a
        assert await store.last_n("alice", 10) == b


class TestNoAliasing:
    @pytest.mark.anyio
    async def test_mutating_result_does_not_reach_store(self) -> None:
        """Clearing or extending a returned list leaves the store's trace intact."""
        store = StepStore()
        steps = await fill(store, "s", 3)
        window = await store.last_n("s", 3)
        window.clear()
        everything = await store.all("s")
        everything.append(make("s", 99))
        assert await store.last_n("s", 3) == steps
        assert await store.all("s") == steps


class TestBadInput:
    @pytest.mark.anyio
    @pytest.mark.parametrize("bad", [None, "step", {"session_id": "s"}])
    async def test_append_non_step(self, bad: object) -> None:
        """Appending something that is not a RunStep is a TypeError; prior steps stay."""
        store = StepStore()
        steps = await fill(store, "s", 2)
        with pytest.raises(TypeError, match=r"^step must be a RunStep"):
            await store.append(bad)  # type: ignore[arg-type]
        assert await store.all("s") == steps


class TestDeleteSession:
    @pytest.mark.anyio
    async def test_delete_drops_steps(self) -> None:
        """delete_session drops that session's steps only and reports whether it had any."""
        store = StepStore()
        await fill(store, "a", 2)
        b = await fill(store, "b", 2)
        assert await store.delete_session("a") is True
        assert await store.last_n("a", 5) == []
        assert await store.all("b") == b
        assert await store.delete_session("a") is False


class TestCheckpoints:
    async def test_every_call_is_a_checkpoint(self) -> None:
        """Each public coroutine yields once when it completes."""
        store = StepStore()
        with trio.testing.assert_checkpoints():
            await store.append(make("s", 0))
        with trio.testing.assert_checkpoints():
            await store.last_n("s", 1)
        with trio.testing.assert_checkpoints():
            await store.all("s")
        with trio.testing.assert_checkpoints():
            await store.delete_session("s")
        with trio.testing.assert_checkpoints():
            await store.aclose()

    async def test_cancelled_before_call_writes_nothing(self) -> None:
        """An append in an already-cancelled scope raises Cancelled and stores nothing."""
        store = StepStore()
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.append(make("s", 0))
        assert scope.cancelled_caught
        assert await store.all("s") == []

    async def test_cancel_at_each_checkpoint_is_all_or_nothing(self) -> None:
        """Cancelled at any point, an append has either fully happened or not at all."""
        store = StepStore()
        outcomes = set()
        for delay in range(6):
            step = make("s", delay, content=f"c{delay}")
            before = await store.all("s")
            done = False

            async def attempt(scope: trio.CancelScope, step: RunStep = step) -> None:
                nonlocal done
                with scope:
                    await store.append(step)
                    done = True

            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()
                nursery.start_soon(attempt, scope)
                for _ in range(delay):
                    await trio.lowlevel.cancel_shielded_checkpoint()
                scope.cancel()
            after = await store.all("s")
            assert after == ([*before, step] if done else before)
            outcomes.add(done)
        assert outcomes == {True, False}


class TestClosed:
    @pytest.mark.anyio
    async def test_every_call_raises_after_aclose(self) -> None:
        """After aclose every method raises StoreClosedError; aclose itself is idempotent."""
        store = StepStore()
        await fill(store, "s", 1)
        await store.aclose()
        await store.aclose()
        with pytest.raises(StoreClosedError, match=r"^StepStore is closed"):
            await store.append(make("s", 1))
        with pytest.raises(StoreClosedError):
            await store.last_n("s", 1)
        with pytest.raises(StoreClosedError):
            await store.all("s")
        with pytest.raises(StoreClosedError):
            await store.delete_session("s")
