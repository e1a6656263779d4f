"""The in-memory session lifecycle: paging, labels, prune, ranges, expiry, forks, restore."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from agentloop import (
    FinalizeSummary,
    LeaseLostError,
    RevisionConflictError,
    RunStatus,
    RunStep,
    Session,
    SessionExistsError,
    SessionInfo,
    StepType,
    SupportsExpire,
    SupportsFork,
    SupportsLabels,
    SupportsPaging,
    SupportsPrune,
    SupportsRestore,
    SupportsStepsAfter,
)
from agentloopmem import FencedMemoryStore, MemoryStore, SessionStore, StepStore

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def step(session_id: str, index: int, content: str = "") -> RunStep:
    return RunStep(session_id, index, StepType.user, content=content or f"{session_id}#{index}")


async def ids_of_every_page(store: SessionStore, **query: object) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.page_sessions(limit=3, cursor=cursor, **query)  # type: ignore[arg-type]
        seen += [info.id for info in page.sessions]
        if page.cursor is None:
            return seen
        cursor = page.cursor


def test_capabilities() -> None:
    """The session store pages, labels, expires and restores; the step store prunes and
    reads ranges; MemoryStore also forks."""
    sessions, steps = SessionStore(), StepStore()
    for capability in (SupportsPaging, SupportsLabels, SupportsExpire, SupportsRestore):
        assert isinstance(sessions, capability)
    for capability in (SupportsPrune, SupportsStepsAfter):
        assert isinstance(steps, capability)
    assert not isinstance(sessions, SupportsFork)
    assert isinstance(MemoryStore(), SupportsFork)


class TestPaging:
    async def test_every_session_once_newest_first(self) -> None:
        """Pages in write order, newest first, every session exactly once, then no cursor."""
        store = SessionStore()
        for n in range(10):
            await store.update_data(f"s{n}", "1")
        assert await ids_of_every_page(store) == [f"s{n}" for n in reversed(range(10))]

    async def test_a_write_while_paging_moves_only_that_session(self) -> None:
        """Rewriting a session between pages: every other session still comes exactly once."""
        store = SessionStore()
        for n in range(9):
            await store.update_data(f"s{n}", "1")
        first = await store.page_sessions(limit=3)
        await store.update_data("s1", "2")  # not yet paged: moves to the front
        rest = await store.page_sessions(limit=10, cursor=first.cursor)
        seen = [i.id for i in first.sessions] + [i.id for i in rest.sessions]
        assert sorted(set(seen) - {"s1"}) == [f"s{n}" for n in range(9) if n != 1]
        assert len(seen) == len(set(seen))

    async def test_created_order_is_stable_under_writes(self) -> None:
        """order="created" pages oldest first by first write; later writes do not move them."""
        store = SessionStore()
        for n in range(7):
            await store.update_data(f"s{n}", "1")
        first = await store.page_sessions(limit=3, order="created")
        await store.update_data("s0", "2")
        await store.update_data("s5", "2")
        rest = await ids_of_every_page(store, order="created")
        assert [i.id for i in first.sessions] == ["s0", "s1", "s2"]
        assert rest == [f"s{n}" for n in range(7)]

    async def test_label_filters(self) -> None:
        """Only sessions carrying every given pair, in either order."""
        store = SessionStore()
        for n in range(8):
            await store.set_labels(f"s{n}", {"team": "a" if n % 2 else "b", "tier": str(n % 3)})
        odd = [f"s{n}" for n in reversed(range(8)) if n % 2]
        assert await ids_of_every_page(store, labels={"team": "a"}) == odd
        both = [f"s{n}" for n in reversed(range(8)) if n % 2 and n % 3 == 1]
        assert await ids_of_every_page(store, labels={"team": "a", "tier": "1"}) == both
        assert await ids_of_every_page(store, labels={"team": "a"}, order="created") == odd[::-1]
        assert await ids_of_every_page(store, labels={"team": "nobody"}) == []

    async def test_relabelled_session_leaves_its_old_filter(self) -> None:
        store = SessionStore()
        await store.set_labels("s", {"team": "a"})
        await store.set_labels("s", {"team": "b"})
        assert await ids_of_every_page(store, labels={"team": "a"}) == []
        assert await ids_of_every_page(store, labels={"team": "b"}) == ["s"]

    @pytest.mark.parametrize(
        "cursor", ["", "garbage", "eyJ4Ijox", "WyJhYmMiLCJ1cGRhdGVkOltdIiwzXQ"]
    )
    async def test_a_cursor_it_did_not_make_is_refused(self, cursor: str) -> None:
        store = SessionStore()
        await store.update_data("s", "1")
        with pytest.raises(ValueError, match=r"^cursor must be one this store's page_sessions"):
            await store.page_sessions(cursor=cursor)

    async def test_a_cursor_of_another_store_or_query_is_refused(self) -> None:
        one, other = SessionStore(), SessionStore()
        for n in range(3):
            await one.update_data(f"s{n}", "1")
            await other.update_data(f"s{n}", "1")
        cursor = (await one.page_sessions(limit=1)).cursor
        assert cursor is not None
        with pytest.raises(ValueError, match=r"^cursor must be one this store's"):
            await other.page_sessions(cursor=cursor)
        with pytest.raises(ValueError, match=r"^cursor was made for another order"):
            await one.page_sessions(cursor=cursor, order="created")
        with pytest.raises(ValueError, match=r"^cursor was made for another order"):
            await one.page_sessions(cursor=cursor, labels={"k": "v"})

    async def test_bad_arguments(self) -> None:
        store = SessionStore()
        with pytest.raises(ValueError, match=r"^limit must be"):
            await store.page_sessions(limit=0)
        with pytest.raises(ValueError, match=r"^order must be one of updated, created"):
            await store.page_sessions(order="newest")
        with pytest.raises(TypeError, match=r"^cursor must be a str or None"):
            await store.page_sessions(cursor=3)  # type: ignore[arg-type]

    async def test_list_sessions_shows_labels(self) -> None:
        store = SessionStore()
        await store.set_labels("s", {"k": "v"})
        [info] = await store.list_sessions()
        assert dict(info.labels) == {"k": "v"}
        assert await store.session_info("s") == info
        assert await store.session_info("unknown") is None


class TestLabels:
    async def test_set_labels_is_a_session_write(self) -> None:
        """It creates the session, makes its revision larger and moves it to the front."""
        store = SessionStore()
        await store.update_data("old", "1")
        await store.update_data("s", "1")
        await store.update_data("other", "1")
        before = await store.revision("s")
        await store.set_labels("s", {"team": "a"})
        assert await store.revision("s") > before
        assert (await store.list_sessions())[0].id == "s"
        await store.set_labels("new", {"k": "v"})
        assert await store.exists("new")

    async def test_put_keeps_labels_delete_drops_them(self) -> None:
        store = SessionStore()
        await store.set_labels("s", {"k": "v"})
        await store.put(Session("s", model="m"))
        info = await store.session_info("s")
        assert info is not None
        assert dict(info.labels) == {"k": "v"}
        await store.delete_session("s")
        await store.put(Session("s"))
        info = await store.session_info("s")
        assert info is not None
        assert dict(info.labels) == {}

    @pytest.mark.parametrize(
        ("labels", "error", "pattern"),
        [
            ({f"k{n}": "v" for n in range(33)}, ValueError, r"^labels must hold at most 32 pairs"),
            ({"": "v"}, ValueError, r"^labels key must be a non-empty str"),
            ({"k": ""}, ValueError, r"^labels\['k'\] must be a non-empty str"),
            ({"k": "x" * 257}, ValueError, r"^labels\['k'\] must be at most 256 UTF-8 bytes"),
            ({"k\x00": "v"}, ValueError, r"^labels key must not contain NUL"),
            ({"k": 1}, TypeError, r"^labels\['k'\] must be a str"),
            ([("k", "v")], TypeError, r"^labels must be a mapping"),
        ],
    )
    async def test_bad_labels_change_nothing(
        self, labels: object, error: type[Exception], pattern: str
    ) -> None:
        store = SessionStore()
        await store.set_labels("s", {"keep": "me"})
        revision = await store.revision("s")
        with pytest.raises(error, match=pattern):
            await store.set_labels("s", labels)  # type: ignore[arg-type]
        assert await store.revision("s") == revision
        info = await store.session_info("s")
        assert info is not None
        assert dict(info.labels) == {"keep": "me"}

    def test_session_info_labels_are_read_only_and_hashable(self) -> None:
        info = SessionInfo("s", None, 0, T0, T0, labels={"k": "v"})
        assert hash(info) == hash(SessionInfo("s", None, 0, T0, T0, labels={"k": "v"}))
        with pytest.raises(TypeError):
            info.labels["k"] = "w"  # type: ignore[index]


class TestPruneAndRanges:
    async def test_prune_keeps_the_newest_in_order(self) -> None:
        store = StepStore()
        await store.append_many([step("s", n) for n in range(10)] + [step("t", 0)])
        assert await store.prune_steps("s", keep_last=3) == 7
        assert [s.step_index for s in await store.all("s")] == [7, 8, 9]
        assert await store.prune_steps("s", keep_last=3) == 0
        assert await store.prune_steps("unknown", keep_last=1) == 0
        assert [s.step_index for s in await store.all("t")] == [0]

    @pytest.mark.parametrize(("keep", "error"), [(0, ValueError), (True, TypeError)])
    async def test_bad_keep_last(self, keep: object, error: type[Exception]) -> None:
        store = StepStore()
        await store.append(step("s", 0))
        with pytest.raises(error, match=r"^keep_last must be an int >= 1"):
            await store.prune_steps("s", keep_last=keep)  # type: ignore[arg-type]
        assert len(await store.all("s")) == 1

    async def test_steps_after_is_a_slice_of_all(self) -> None:
        store = StepStore()
        await store.append_many([step("s", n) for n in range(10)])
        await store.prune_steps("s", keep_last=8)
        held = await store.all("s")
        for after in (0, 3, 7, 8, 20):
            assert await store.steps_after("s", after, 4) == held[after : after + 4]
        with pytest.raises(ValueError, match=r"^after must be an int >= 0"):
            await store.steps_after("s", -1, 1)
        with pytest.raises(ValueError, match=r"^limit must be an int >= 1"):
            await store.steps_after("s", 0, 0)


class TestExpire:
    async def test_idle_unleased_sessions_only(self) -> None:
        """Sessions written before the cutoff go (oldest first), a live lease keeps one."""
        clock = Clock()
        store = SessionStore(clock)
        for name in ("a", "b", "leased"):
            await store.update_data(name, "1")
        assert await store.acquire_lease("leased", "w", ttl=3600) is not None
        clock.advance(100)
        await store.update_data("fresh", "1")
        assert await store.expire_sessions(idle_for=50) == ["a", "b"]
        assert [await store.exists(n) for n in ("a", "leased", "fresh")] == [False, True, True]

    async def test_limit_and_arguments(self) -> None:
        clock = Clock()
        store = SessionStore(clock)
        for n in range(5):
            await store.update_data(f"s{n}", "1")
        clock.advance(10)
        assert await store.expire_sessions(idle_for=1, limit=2) == ["s0", "s1"]
        with pytest.raises(ValueError, match=r"^idle_for must be"):
            await store.expire_sessions(idle_for=0)
        with pytest.raises(ValueError, match=r"^limit must be"):
            await store.expire_sessions(idle_for=1, limit=0)

    async def test_an_expired_unreleased_lease_is_taken_over(self) -> None:
        """The old holder's fenced writes fail after its session expired."""
        clock = Clock()
        store = SessionStore(clock)
        lease = await store.acquire_lease("s", "w", ttl=1)
        assert lease is not None
        await store.update_data("s", "1")
        clock.advance(10)
        assert await store.expire_sessions(idle_for=5) == ["s"]
        with pytest.raises(LeaseLostError):
            await store.fenced(lease).update_data("s", "2")
        assert not await store.exists("s")
        again = await store.acquire_lease("s", "x", ttl=1)
        assert again is not None
        assert again.token > lease.token

    async def test_a_stale_update_data_if_after_expiry_fails(self) -> None:
        clock = Clock()
        store = SessionStore(clock)
        revision = await store.update_data_if("s", "1", 0)
        clock.advance(10)
        await store.expire_sessions(idle_for=1)
        with pytest.raises(RevisionConflictError):
            await store.update_data_if("s", "2", revision)

    async def test_memory_store_expires_steps_and_step_only_sessions(self) -> None:
        clock = Clock()
        store = MemoryStore(clock)
        await store.update_data("row", "1")
        await store.append(step("row", 0))
        await store.append(step("steps-only", 0))
        clock.advance(100)
        await store.append(step("recent", 0))
        assert sorted(await store.expire_sessions(idle_for=50)) == ["row", "steps-only"]
        assert await store.all("row") == await store.all("steps-only") == []
        assert len(await store.all("recent")) == 1


class TestFork:
    async def test_copies_settings_labels_and_first_steps(self) -> None:
        store = MemoryStore()
        await store.put(Session("src", model="m", system_prompt="p", data='{"a": 1}'))
        await store.set_labels("src", {"team": "a"})
        await store.append_many([step("src", n) for n in range(5)])
        await store.finalize("src", FinalizeSummary(RunStatus.completed, step_count=5))
        await store.fork_session("src", "copy", keep_first=3)
        assert await store.get("copy") == Session("copy", "m", "p", '{"a": 1}')
        copied = await store.all("copy")
        originals = (await store.all("src"))[:3]
        assert [s.session_id for s in copied] == ["copy"] * 3
        assert [(s.step_index, s.content, s.created_at) for s in copied] == [
            (s.step_index, s.content, s.created_at) for s in originals
        ]
        info = await store.session_info("copy")
        assert info is not None
        assert (dict(info.labels), info.status, info.step_count) == ({"team": "a"}, None, 0)
        assert await store.final("copy") is None
        assert len(await store.all("src")) == 5

    @pytest.mark.parametrize(("keep", "count"), [(None, 4), (0, 0), (2, 2), (10, 4)])
    async def test_keep_first(self, keep: int | None, count: int) -> None:
        store = MemoryStore()
        await store.append_many([step("src", n) for n in range(4)])
        await store.fork_session("src", "copy", keep_first=keep)
        assert len(await store.all("copy")) == count

    async def test_refusals_change_nothing(self) -> None:
        store = MemoryStore()
        await store.update_data("src", "1")
        await store.append(step("taken-by-steps", 0))
        await store.update_data("taken", "1")
        with pytest.raises(SessionExistsError):
            await store.fork_session("src", "taken")
        with pytest.raises(SessionExistsError):
            await store.fork_session("src", "taken-by-steps")
        with pytest.raises(KeyError, match="does not exist"):
            await store.fork_session("nobody", "new")
        with pytest.raises(ValueError, match=r"^new_id must differ from source_id"):
            await store.fork_session("src", "src")
        with pytest.raises(ValueError, match=r"^keep_first must be an int >= 0"):
            await store.fork_session("src", "new", keep_first=-1)
        with pytest.raises(TypeError, match=r"^keep_first must be an int >= 0"):
            await store.fork_session("src", "new", keep_first=True)
        assert not await store.exists("new")
        assert await store.get("taken") == Session("taken", data="1")

    async def test_a_fork_gets_a_revision_above_any_kept_and_no_lease(self) -> None:
        store = MemoryStore()
        await store.update_data("src", "1")
        await store.update_data("new", "1")
        stale = await store.revision("new")
        await store.delete_session("new")
        lease = await store.acquire_lease("src", "w", ttl=60)
        assert lease is not None
        await store.fork_session("src", "new")
        assert await store.revision("new") > stale
        assert await store.acquire_lease("new", "other", ttl=60) is not None

    async def test_fenced_fork_into_a_lost_session_is_refused(self) -> None:
        clock = Clock()
        store = MemoryStore(clock)
        await store.update_data("src", "1")
        lease = await store.acquire_lease("new", "old", ttl=1)
        assert lease is not None
        view = store.fenced(lease)
        assert isinstance(view, FencedMemoryStore)
        clock.advance(5)
        assert await store.acquire_lease("new", "taker", ttl=60) is not None
        with pytest.raises(LeaseLostError):
            await view.fork_session("src", "new")
        assert not await store.exists("new")


class TestRestore:
    def _record(self, session_id: str = "s") -> tuple[Session, SessionInfo, FinalizeSummary | None]:
        final = FinalizeSummary(RunStatus.error, step_count=2)
        info = SessionInfo(
            session_id, RunStatus.error, 7, T0, T0 + timedelta(days=1), labels={"k": "v"}
        )
        return Session(session_id, "m", "p", "[1]"), info, final

    async def test_as_recorded(self) -> None:
        store = SessionStore()
        session, info, final = self._record()
        await store.restore_session(session, info, final)
        assert await store.get("s") == session
        assert await store.session_info("s") == info
        assert await store.final("s") == final

    async def test_an_existing_session_is_refused(self) -> None:
        store = MemoryStore()
        await store.append(step("s", 0))
        with pytest.raises(SessionExistsError):
            await store.restore_session(*self._record())
        await store.update_data("t", "1")
        with pytest.raises(SessionExistsError):
            await store.restore_session(*self._record("t"))
        assert await store.get("t") == Session("t", data="1")

    async def test_inconsistent_arguments(self) -> None:
        store = SessionStore()
        session, info, final = self._record()
        with pytest.raises(ValueError, match=r"^info must be of session 'other'"):
            await store.restore_session(Session("other"), info, final)
        with pytest.raises(ValueError, match=r"^final's status must be info.status"):
            await store.restore_session(session, info, None)
        assert not await store.exists("s")


class TestFencedLifecycleWrites:
    async def test_refused_after_a_takeover(self) -> None:
        clock = Clock()
        steps = StepStore(clock)
        store = SessionStore(clock, steps=steps)
        await steps.append_many([step("s", n) for n in range(4)])
        lease = await store.acquire_lease("s", "old", ttl=1)
        assert lease is not None
        view = store.fenced(lease)
        await view.set_labels("s", {"k": "v"})
        clock.advance(5)
        assert await store.acquire_lease("s", "taker", ttl=60) is not None
        with pytest.raises(LeaseLostError):
            await view.set_labels("s", {"k": "w"})
        with pytest.raises(LeaseLostError):
            await view.prune_steps("s", keep_last=1)  # type: ignore[union-attr]
        info = await store.session_info("s")
        assert info is not None
        assert dict(info.labels) == {"k": "v"}
        assert len(await steps.all("s")) == 4


class TestCancellation:
    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.set_labels("s", {"k": "w"}),
            lambda s: s.prune_steps("s", keep_last=1),
            lambda s: s.fork_session("s", "copy"),
            lambda s: s.expire_sessions(idle_for=1),
        ],
    )
    async def test_a_cancelled_call_changes_nothing(
        self, call: Callable[[MemoryStore], object]
    ) -> None:
        clock = Clock()
        store = MemoryStore(clock)
        await store.set_labels("s", {"k": "v"})
        await store.append_many([step("s", n) for n in range(3)])
        clock.advance(10)
        revision = await store.revision("s")
        with anyio.CancelScope() as scope:
            scope.cancel()
            await call(store)  # type: ignore[misc]
        assert scope.cancelled_caught
        info = await store.session_info("s")
        assert info is not None
        assert (dict(info.labels), await store.revision("s")) == ({"k": "v"}, revision)
        assert len(await store.all("s")) == 3
        assert not await store.exists("copy")


@pytest.mark.parametrize("days", [30, 365])
async def test_expire_takes_retention_periods_past_the_timeout_bound(days: int) -> None:
    """idle_for of a month or a year is a retention period, not a timeout: it is accepted."""
    store = MemoryStore()
    await store.update_data("fresh", None)
    assert await store.expire_sessions(idle_for=days * 86_400.0) == []
    assert await store.exists("fresh")


async def test_expire_refuses_idle_for_past_a_hundred_years() -> None:
    """Past IDLE_FOR_MAX the call is refused, naming idle_for and the bound."""
    store = MemoryStore()
    with pytest.raises(ValueError, match=r"idle_for must be a finite number of seconds > 0"):
        await store.expire_sessions(idle_for=101 * 365.25 * 86_400)
