"""agentloopmem batches: append_many all or nothing, in order; get_many aligned, creates nothing."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
import trio
import trio.testing

from agentloop import (
    LeaseLostError,
    RunStep,
    Session,
    StepType,
    StoreClosedError,
    SupportsAppendMany,
    SupportsGetMany,
)
from agentloopmem import SessionStore, StepStore
from agentlooptest._cancel import Points, cancel_at

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def step(i: int, sid: str = "s") -> RunStep:
    return RunStep(sid, i, StepType.user, content=f"step {i}", created_at=T0)


class TestAppendMany:
    @pytest.mark.anyio
    async def test_in_order_across_sessions(self) -> None:
        """Each session's trace gets its steps of the batch in the given order."""
        store = StepStore()
        await store.append(step(0, "a"))
        await store.append_many([step(5, "b"), step(1, "a"), step(3, "b"), step(2, "a")])
        assert await store.all("a") == [step(0, "a"), step(1, "a"), step(2, "a")]
        assert await store.all("b") == [step(5, "b"), step(3, "b")]

    async def test_empty_is_a_no_op_checkpoint(self) -> None:
        """[] appends nothing and yields once."""
        store = StepStore()
        with trio.testing.assert_checkpoints():
            await store.append_many([])
        assert await store.all("s") == []

    @pytest.mark.anyio
    @pytest.mark.parametrize("position", [0, 1, 3])
    async def test_bad_step_anywhere_appends_nothing(self, position: int) -> None:
        """A wrong-typed item at any position refuses the batch whole, naming it."""
        store = StepStore()
        await store.append(step(0))
        batch: list[object] = [step(1), step(2), step(3), step(4)]
        batch[position] = {"not": "a step"}
        with pytest.raises(TypeError, match=rf"^steps\[{position}\] must be a RunStep, got "):
            await store.append_many(batch)  # type: ignore[arg-type]
        assert await store.all("s") == [step(0)]

    @pytest.mark.anyio
    async def test_caller_list_not_aliased(self) -> None:
        """Mutating the list passed in, or one returned, never reaches the store."""
        store = StepStore()
        batch = [step(0), step(1)]
        await store.append_many(batch)
        batch.append(step(2))
        got = await store.all("s")
        got.clear()
        assert await store.all("s") == [step(0), step(1)]

    async def test_cancelled_at_each_checkpoint_all_or_nothing(self) -> None:
        """A cancelled append_many appended nothing; a completed one appended all."""
        points = Points()
        outcomes = set()
        for point in points:
            store = StepStore()
            await store.append(step(0, "a"))
            done = await cancel_at(partial(store.append_many, [step(1, "a"), step(2, "b")]), point)
            points.finished(done)
            outcomes.add(done)
            expected_a = [step(0, "a"), step(1, "a")] if done else [step(0, "a")]
            assert await store.all("a") == expected_a
            assert await store.all("b") == ([step(2, "b")] if done else [])
        assert outcomes == {True, False}

    @pytest.mark.anyio
    async def test_closed_store_refuses(self) -> None:
        """A closed store raises StoreClosedError."""
        store = StepStore()
        await store.aclose()
        with pytest.raises(StoreClosedError):
            await store.append_many([step(0)])

    def test_batches_from_threads_never_interleave(self) -> None:
        """Batches appended from racing threads land contiguous and whole."""
        store = StepStore()
        start = threading.Barrier(4)

        def worker(w: int) -> None:
            start.wait()
            for b in range(50):
                batch = [step(w * 1000 + b * 10 + k) for k in range(5)]
                trio.run(store.append_many, batch)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        trace = trio.run(store.all, "s")
        assert len(trace) == 4 * 50 * 5
        for first in range(0, len(trace), 5):
            chunk = [s.step_index for s in trace[first : first + 5]]
            assert chunk == list(range(chunk[0], chunk[0] + 5))


class TestGetMany:
    @pytest.mark.anyio
    async def test_aligned_with_ids_duplicates_and_unknown(self) -> None:
        """Same order and length as asked; unknown ids give Session(id) and create nothing."""
        store = SessionStore()
        await store.put(Session("a", model="ma", data="[1]"))
        await store.update_data("b", '{"k": 2}')
        got = await store.get_many(["b", "zz", "a", "b", "zz"])
        assert got == [
            Session("b", data='{"k": 2}'),
            Session("zz"),
            Session("a", model="ma", data="[1]"),
            Session("b", data='{"k": 2}'),
            Session("zz"),
        ]
        assert not await store.exists("zz")
        assert await store.get_many([]) == []

    @pytest.mark.anyio
    async def test_result_not_aliased(self) -> None:
        """The returned list is fresh: mutating it changes nothing stored."""
        store = SessionStore()
        await store.put(Session("a", model="ma"))
        got = await store.get_many(["a"])
        got[0] = Session("a", model="other")
        assert await store.get("a") == Session("a", model="ma")

    @pytest.mark.anyio
    async def test_bad_id_names_position(self) -> None:
        """A bad id anywhere refuses the call, naming its position."""
        store = SessionStore()
        with pytest.raises(ValueError, match=r"^session_ids\[2\] must not contain NUL"):
            await store.get_many(["a", "b", "c\x00"])

    async def test_is_a_checkpoint_and_cancellable(self) -> None:
        """get_many yields once; a cancelled call raises Cancelled before reading."""
        store = SessionStore()
        with trio.testing.assert_checkpoints():
            await store.get_many(["a"])
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.get_many(["a"])
            pytest.fail("not cancelled")  # pragma: no cover

    @pytest.mark.anyio
    async def test_closed_store_refuses(self) -> None:
        """A closed store raises StoreClosedError."""
        store = SessionStore()
        await store.aclose()
        with pytest.raises(StoreClosedError):
            await store.get_many(["a"])


class TestFencedBatches:
    async def _taken_over(self) -> tuple[SessionStore, StepStore, SupportsAppendMany]:
        now = [T0]
        steps = StepStore()
        store = SessionStore(clock=lambda: now[0], steps=steps)
        old = await store.acquire_lease("s", "a", 10)
        assert old is not None
        view = store.fenced(old)
        now[0] = T0 + timedelta(seconds=11)
        assert await store.acquire_lease("s", "b", 10) is not None
        return store, steps, view  # type: ignore[return-value]

    @pytest.mark.anyio
    async def test_view_has_the_capabilities(self) -> None:
        """A fenced view covering steps has append_many and get_many."""
        store = SessionStore(steps=StepStore())
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        view = store.fenced(lease)
        assert isinstance(view, SupportsAppendMany)
        assert isinstance(view, SupportsGetMany)

    @pytest.mark.anyio
    async def test_holder_batch_lands(self) -> None:
        """The holder's batch lands whole through the view."""
        store = SessionStore(steps=StepStore())
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        await store.fenced(lease).append_many([step(0), step(1, "t"), step(2)])  # type: ignore[attr-defined]
        assert store._steps is not None
        assert await store._steps.all("s") == [step(0), step(2)]
        assert await store._steps.all("t") == [step(1, "t")]

    @pytest.mark.anyio
    async def test_lost_lease_refuses_the_whole_batch(self) -> None:
        """After a takeover, a batch touching the session appends nothing, other sessions too."""
        _, steps, view = await self._taken_over()
        with pytest.raises(LeaseLostError, match="nothing was written"):
            await view.append_many([step(0, "other"), step(1)])
        assert await steps.all("s") == []
        assert await steps.all("other") == []

    @pytest.mark.anyio
    async def test_lost_lease_other_sessions_only_not_checked(self) -> None:
        """A batch not touching the leased session is not fenced."""
        _, steps, view = await self._taken_over()
        await view.append_many([step(0, "other")])
        assert await steps.all("other") == [step(0, "other")]

    @pytest.mark.anyio
    async def test_bad_step_checked_before_the_lease(self) -> None:
        """A bad item is a TypeError naming its position, with nothing appended."""
        _, steps, view = await self._taken_over()
        with pytest.raises(TypeError, match=r"^steps\[1\] must be a RunStep"):
            await view.append_many([step(0), None])  # type: ignore[list-item]
        assert await steps.all("s") == []

    async def test_fenced_cancelled_at_each_checkpoint(self) -> None:
        """A cancelled fenced append_many appended nothing; a completed one all."""
        points = Points()
        outcomes = set()
        for point in points:
            steps = StepStore()
            store = SessionStore(steps=steps)
            lease = await store.acquire_lease("s", "a", 10)
            assert lease is not None
            view = store.fenced(lease)
            batch = [step(0), step(1)]
            done = await cancel_at(partial(view.append_many, batch), point)  # type: ignore[attr-defined]
            points.finished(done)
            outcomes.add(done)
            assert await steps.all("s") == (batch if done else [])
        assert outcomes == {True, False}
