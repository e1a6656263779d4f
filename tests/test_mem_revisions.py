"""agentloopmem revisions: every session write bumps them; update_data_if is an exact check."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
import pytest
import trio
import trio.testing
from _docs import ROOT, block

from agentloop import (
    FinalizeSummary,
    LeaseLostError,
    RevisionConflictError,
    RunStatus,
    Session,
    StoreClosedError,
    SupportsRevisions,
)
from agentloopmem import SessionStore
from agentlooptest._cancel import Points, cancel_at

T0 = datetime(2026, 1, 1, tzinfo=UTC)

WRITES: dict[str, Callable[[SessionStore], Awaitable[object]]] = {
    "put": lambda s: s.put(Session("s", model="m")),
    "update_data": lambda s: s.update_data("s", "[1]"),
    "finalize": lambda s: s.finalize("s", FinalizeSummary(RunStatus.completed)),
}


class TestRevision:
    @pytest.mark.anyio
    async def test_zero_for_never_written(self) -> None:
        """An unknown session is at revision 0, and asking creates nothing."""
        store = SessionStore()
        assert await store.revision("s") == 0
        assert not await store.exists("s")

    @pytest.mark.anyio
    @pytest.mark.parametrize("write", sorted(WRITES))
    async def test_every_write_makes_it_larger(self, write: str) -> None:
        """put, update_data and finalize each bump the revision, first write and later ones."""
        store = SessionStore()
        before = await store.revision("s")
        await WRITES[write](store)
        first = await store.revision("s")
        await WRITES[write](store)
        assert before < first < await store.revision("s")

    @pytest.mark.anyio
    async def test_update_data_if_makes_it_larger(self) -> None:
        """update_data_if returns the new revision, larger than the one it checked."""
        store = SessionStore()
        new = await store.update_data_if("s", '{"a": 1}', 0)
        assert new > 0
        assert await store.revision("s") == new
        assert (await store.get("s")).data == '{"a": 1}'

    @pytest.mark.anyio
    async def test_delete_never_makes_it_smaller(self) -> None:
        """After delete_session the revision is larger than any before; a stale check fails."""
        store = SessionStore()
        await store.put(Session("s", data="[1]"))
        seen = await store.revision("s")
        assert await store.delete_session("s")
        after = await store.revision("s")
        assert after > seen
        with pytest.raises(RevisionConflictError):
            await store.update_data_if("s", "[2]", seen)
        assert not await store.exists("s")
        assert await store.update_data_if("s", "[2]", after) > after

    @pytest.mark.anyio
    async def test_lease_calls_do_not_bump_it(self) -> None:
        """Acquire, renew and release leave the revision alone."""
        store = SessionStore()
        await store.put(Session("s"))
        seen = await store.revision("s")
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        await store.renew_lease(lease, 10)
        await store.release_lease(lease)
        assert await store.revision("s") == seen

    @pytest.mark.anyio
    async def test_sessions_are_independent(self) -> None:
        """Writing one session leaves another's revision alone."""
        store = SessionStore()
        await store.put(Session("t"))
        seen = await store.revision("t")
        await store.update_data("s", "[]")
        assert await store.revision("t") == seen

    @pytest.mark.anyio
    async def test_closed_store_refuses(self) -> None:
        """A closed store raises StoreClosedError from both calls."""
        store = SessionStore()
        await store.aclose()
        with pytest.raises(StoreClosedError):
            await store.revision("s")
        with pytest.raises(StoreClosedError):
            await store.update_data_if("s", None, 0)

    def test_store_has_the_capability(self) -> None:
        """The in-memory SessionStore implements SupportsRevisions (checked by mypy too)."""
        store: SupportsRevisions = SessionStore()
        assert isinstance(store, SupportsRevisions)


class TestUpdateDataIf:
    @pytest.mark.anyio
    async def test_stale_revision_refused_changing_nothing(self) -> None:
        """A stale revision raises RevisionConflictError naming both; data and revision stay."""
        store = SessionStore()
        first = await store.update_data_if("s", '{"v": 1}', 0)
        await store.update_data("s", '{"v": 2}')
        current = await store.revision("s")
        with pytest.raises(
            RevisionConflictError,
            match=rf"^session 's' is at revision {current}, not {first}; nothing was written",
        ):
            await store.update_data_if("s", '{"v": 3}', first)
        assert (await store.get("s")).data == '{"v": 2}'
        assert await store.revision("s") == current

    @pytest.mark.anyio
    async def test_nonzero_for_unknown_refused_creating_nothing(self) -> None:
        """A revision other than 0 for a never-written session is refused and creates nothing."""
        store = SessionStore()
        with pytest.raises(RevisionConflictError):
            await store.update_data_if("s", "[]", 5)
        assert not await store.exists("s")
        assert await store.revision("s") == 0

    @pytest.mark.anyio
    async def test_bad_input_writes_nothing(self) -> None:
        """A bad snapshot or revision raises before writing, naming the field."""
        store = SessionStore()
        with pytest.raises(ValueError, match=r"^data "):
            await store.update_data_if("s", "{nope", 0)
        with pytest.raises(TypeError, match=r"^revision must be an int, got False"):
            await store.update_data_if("s", "[]", False)
        assert not await store.exists("s")
        assert await store.revision("s") == 0

    async def test_cancelled_at_each_checkpoint_all_or_nothing(self) -> None:
        """A cancelled update_data_if writes and bumps nothing; a completed one both."""
        points = Points()
        outcomes = set()
        for point in points:
            store = SessionStore()
            base = await store.update_data_if("s", "[0]", 0)
            done = await cancel_at(partial(store.update_data_if, "s", "[1]", base), point)
            points.finished(done)
            outcomes.add(done)
            assert (await store.get("s")).data == ("[1]" if done else "[0]")
            assert (await store.revision("s") > base) is done
        assert outcomes == {True, False}

    @pytest.mark.anyio
    async def test_racing_tasks_exactly_one_wins(self) -> None:
        """Of many tasks naming the same revision, exactly one writes; the rest conflict."""
        store = SessionStore()
        base = await store.update_data_if("s", "[]", 0)
        wins: list[int] = []
        conflicts: list[int] = []

        async def contender(i: int) -> None:
            try:
                await store.update_data_if("s", f"[{i}]", base)
                wins.append(i)
            except RevisionConflictError:
                conflicts.append(i)

        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(contender, i)
        assert len(wins) == 1
        assert len(conflicts) == 19
        assert (await store.get("s")).data == f"[{wins[0]}]"

    def test_racing_threads_exactly_one_wins(self) -> None:
        """Threads released together on one revision: exactly one wins in every round."""
        store = SessionStore()
        threads_n, rounds = 4, 30
        start = threading.Barrier(threads_n)
        results: list[list[bool]] = [[] for _ in range(threads_n)]
        revisions: list[int] = [trio.run(store.update_data_if, "s", "[]", 0)]
        done_round = threading.Barrier(threads_n, action=lambda: revisions.append(rev_now()))

        def rev_now() -> int:
            return trio.run(store.revision, "s")

        def worker(w: int) -> None:
            for _ in range(rounds):
                start.wait()
                try:
                    trio.run(store.update_data_if, "s", f"[{w}]", revisions[-1])
                    results[w].append(True)
                except RevisionConflictError:
                    results[w].append(False)
                done_round.wait()

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for r in range(rounds):
            assert sum(results[w][r] for w in range(threads_n)) == 1, f"round {r}"
        assert revisions == sorted(set(revisions))  # one bump per round, always growing


class TestFencedRevisions:
    @pytest.mark.anyio
    async def test_fenced_update_data_if(self) -> None:
        """Through the holder's view it writes; after a takeover LeaseLostError wins first."""
        now = [T0]
        store = SessionStore(clock=lambda: now[0])
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        view = store.fenced(lease)
        rev = await view.update_data_if("s", "[1]", await view.revision("s"))
        now[0] = T0 + timedelta(seconds=11)
        assert await store.acquire_lease("s", "b", 10) is not None
        with pytest.raises(LeaseLostError):
            await view.update_data_if("s", "[2]", rev)
        with pytest.raises(LeaseLostError):
            await view.update_data_if("s", "[2]", rev + 7)  # stale too: the lease is named
        assert (await store.get("s")).data == "[1]"
        assert await store.revision("s") == rev

    @pytest.mark.anyio
    async def test_fenced_conflict_changes_nothing(self) -> None:
        """A holder's stale revision is still a conflict through the view."""
        store = SessionStore()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        view = store.fenced(lease)
        rev = await view.update_data_if("s", "[1]", 0)
        await store.update_data("s", "[9]")
        with pytest.raises(RevisionConflictError):
            await view.update_data_if("s", "[2]", rev)
        assert (await store.get("s")).data == "[9]"

    async def test_fenced_view_is_a_revision_store(self) -> None:
        """The fenced view implements SupportsRevisions and is a checkpoint."""
        store = SessionStore()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        view = store.fenced(lease)
        assert isinstance(view, SupportsRevisions)
        with trio.testing.assert_checkpoints():
            await view.update_data_if("s", None, 0)


def test_readme_example_runs() -> None:
    """The in-memory stores page's revision example runs and prints what its comments say."""
    code = block("memory.md", "## Batches and revision-checked writes")
    expected = re.findall(r"print\(.*\)  # (.*)$", code, re.MULTILINE)
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT,  # this checkout's packages, not an installed copy
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected
    assert expected[0] == "stale"
