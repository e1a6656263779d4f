"""The session lifecycle on SqliteStore and PostgresStore, under trio and asyncio.

The scenarios of ``tests/test_mem_lifecycle.py`` (the in-memory reference),
on each SQL store: paging with signed cursors and labels, prune and ranges,
expiry, forks, restore, revisions after a delete, and fenced lifecycle writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from _sql_support import SqlTarget, open_sql_store

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
    copy_sessions,
)
from agentloopmem import MemoryStore
from agentloopsql import PostgresStore, SqliteStore

pytestmark = pytest.mark.anyio

Store = SqliteStore | PostgresStore
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def store(sql_target: SqlTarget, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_sql_store(sql_target, tmp_path / "life.db", pool_size=2) as opened:
        yield opened


def step(session_id: str, index: int, content: str = "", at: datetime | None = None) -> RunStep:
    return RunStep(
        session_id,
        index,
        StepType.user,
        content=content or f"{session_id}#{index}",
        created_at=at or datetime.now(UTC),
    )


async def ids_of_every_page(store: Store, **query: object) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.page_sessions(limit=3, cursor=cursor, **query)  # type: ignore[arg-type]
        assert len(page.sessions) <= 3
        seen += [info.id for info in page.sessions]
        if page.cursor is None:
            return seen
        cursor = page.cursor


async def restore_idle(store: Store, session_id: str, days: int = 2) -> None:
    """A session whose last write was ``days`` ago (restored with that time)."""
    then = datetime.now(UTC) - timedelta(days=days)
    await store.restore_session(
        Session(session_id), SessionInfo(session_id, None, 0, then, then), None
    )


async def test_capabilities(store: Store) -> None:
    for capability in (
        SupportsPaging,
        SupportsLabels,
        SupportsExpire,
        SupportsRestore,
        SupportsPrune,
        SupportsStepsAfter,
        SupportsFork,
    ):
        assert isinstance(store, capability)


class TestPaging:
    async def test_every_session_once_newest_first(self, store: Store) -> None:
        for n in range(10):
            await store.update_data(f"s{n}", "1")
        assert await ids_of_every_page(store) == [f"s{n}" for n in reversed(range(10))]
        assert [i.id for i in await store.list_sessions()] == [f"s{n}" for n in reversed(range(10))]

    async def test_a_write_while_paging_moves_only_that_session(self, store: Store) -> None:
        for n in range(9):
            await store.update_data(f"s{n}", "1")
        first = await store.page_sessions(limit=3)
        await store.update_data("s1", "2")
        rest = await store.page_sessions(limit=10, cursor=first.cursor)
        seen = [i.id for i in first.sessions] + [i.id for i in rest.sessions]
        assert sorted(set(seen) - {"s1"}) == [f"s{n}" for n in range(9) if n != 1]
        assert len(seen) == len(set(seen))

    async def test_created_order_is_stable_under_writes(self, store: Store) -> None:
        for n in range(7):
            await store.update_data(f"s{n}", "1")
        first = await store.page_sessions(limit=3, order="created")
        await store.update_data("s0", "2")
        await store.set_labels("s5", {"k": "v"})
        rest = await ids_of_every_page(store, order="created")
        assert [i.id for i in first.sessions] == ["s0", "s1", "s2"]
        assert rest == [f"s{n}" for n in range(7)]

    async def test_label_filters(self, store: Store) -> None:
        for n in range(8):
            await store.set_labels(f"s{n}", {"team": "a" if n % 2 else "b", "tier": str(n % 3)})
        odd = [f"s{n}" for n in reversed(range(8)) if n % 2]
        assert await ids_of_every_page(store, labels={"team": "a"}) == odd
        both = [f"s{n}" for n in reversed(range(8)) if n % 2 and n % 3 == 1]
        assert await ids_of_every_page(store, labels={"team": "a", "tier": "1"}) == both
        assert await ids_of_every_page(store, labels={"team": "a"}, order="created") == odd[::-1]
        assert await ids_of_every_page(store, labels={"team": "nobody"}) == []

    async def test_a_labelled_session_written_again_keeps_its_filter_order(
        self, store: Store
    ) -> None:
        """Every session write moves a session's label rows to its new position."""
        for n in range(4):
            await store.set_labels(f"s{n}", {"team": "a"})
        await store.update_data("s0", "1")
        await store.finalize("s1", FinalizeSummary(RunStatus.completed))
        await store.put(Session("s2", model="m"))
        assert await ids_of_every_page(store, labels={"team": "a"}) == ["s2", "s1", "s0", "s3"]

    async def test_relabelled_session_leaves_its_old_filter(self, store: Store) -> None:
        await store.set_labels("s", {"team": "a"})
        await store.set_labels("s", {"team": "b"})
        assert await ids_of_every_page(store, labels={"team": "a"}) == []
        assert await ids_of_every_page(store, labels={"team": "b"}) == ["s"]
        await store.delete_session("s")
        assert await ids_of_every_page(store, labels={"team": "b"}) == []

    @pytest.mark.parametrize(
        "cursor", ["", "garbage", "eyJ4Ijox", "WyJhYmMiLCJ1cGRhdGVkOltdIiwzXQ", "MS5hLmI"]
    )
    async def test_a_cursor_it_did_not_make_is_refused(self, store: Store, cursor: str) -> None:
        await store.update_data("s", "1")
        with pytest.raises(ValueError, match=r"^cursor must be one this store's page_sessions"):
            await store.page_sessions(cursor=cursor)

    async def test_a_cursor_of_another_database_or_query_is_refused(
        self, store: Store, tmp_path: Path
    ) -> None:
        for n in range(3):
            await store.update_data(f"s{n}", "1")
        cursor = (await store.page_sessions(limit=1)).cursor
        assert cursor is not None
        async with await SqliteStore.open(tmp_path / "other.db") as other:
            await other.update_data("s0", "1")
            with pytest.raises(ValueError, match=r"^cursor must be one this store's"):
                await other.page_sessions(cursor=cursor)
        with pytest.raises(ValueError, match=r"^cursor was made for another order"):
            await store.page_sessions(cursor=cursor, order="created")
        with pytest.raises(ValueError, match=r"^cursor was made for another order"):
            await store.page_sessions(cursor=cursor, labels={"k": "v"})

    async def test_a_cursor_is_valid_on_another_handle_onto_the_database(
        self, store: Store, sql_target: SqlTarget
    ) -> None:
        for n in range(5):
            await store.update_data(f"s{n}", "1")
        first = await store.page_sessions(limit=2)
        if isinstance(store, SqliteStore):
            again: Store = await SqliteStore.open(store.path)
        else:
            assert sql_target.dsn is not None
            again = await PostgresStore.open(sql_target.dsn, schema=store.schema)
        async with again:
            rest = await again.page_sessions(limit=10, cursor=first.cursor)
        assert [i.id for i in rest.sessions] == ["s2", "s1", "s0"]

    async def test_bad_arguments(self, store: Store) -> None:
        with pytest.raises(ValueError, match=r"^limit must be"):
            await store.page_sessions(limit=0)
        with pytest.raises(ValueError, match=r"^order must be one of updated, created"):
            await store.page_sessions(order="newest")
        with pytest.raises(TypeError, match=r"^cursor must be a str or None"):
            await store.page_sessions(cursor=3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^labels key must be a non-empty str"):
            await store.page_sessions(labels={"": "v"})

    async def test_list_sessions_and_session_info_show_labels(self, store: Store) -> None:
        await store.set_labels("s", {"k": "v", "é": "🎉"})
        [info] = await store.list_sessions()
        assert dict(info.labels) == {"k": "v", "é": "🎉"}
        assert await store.session_info("s") == info
        assert await store.session_info("unknown") is None


class TestLabels:
    async def test_set_labels_is_a_session_write(self, store: Store) -> None:
        await store.update_data("old", "1")
        await store.update_data("s", "1")
        await store.update_data("other", "1")
        before = await store.revision("s")
        await store.set_labels("s", {"team": "a"})
        assert await store.revision("s") > before
        assert (await store.list_sessions())[0].id == "s"
        await store.set_labels("new", {"k": "v"})
        assert await store.exists("new")
        assert await store.get("s") == Session("s", data="1")

    async def test_put_keeps_labels_delete_drops_them(self, store: Store) -> None:
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
        self, store: Store, labels: object, error: type[Exception], pattern: str
    ) -> None:
        await store.set_labels("s", {"keep": "me"})
        revision = await store.revision("s")
        with pytest.raises(error, match=pattern):
            await store.set_labels("s", labels)  # type: ignore[arg-type]
        assert await store.revision("s") == revision
        info = await store.session_info("s")
        assert info is not None
        assert dict(info.labels) == {"keep": "me"}


class TestPruneAndRanges:
    async def test_prune_keeps_the_newest_in_order(self, store: Store) -> None:
        await store.append_many([step("s", n) for n in range(10)] + [step("t", 0)])
        kept = (await store.all("s"))[7:]
        assert await store.prune_steps("s", keep_last=3) == 7
        assert await store.all("s") == kept
        assert await store.prune_steps("s", keep_last=3) == 0
        assert await store.prune_steps("unknown", keep_last=1) == 0
        assert [s.step_index for s in await store.all("t")] == [0]
        await store.append(step("s", 10))
        assert [s.step_index for s in await store.last_n("s", 2)] == [9, 10]

    @pytest.mark.parametrize(
        ("keep", "error"), [(0, ValueError), (-1, ValueError), (True, TypeError)]
    )
    async def test_bad_keep_last(self, store: Store, keep: object, error: type[Exception]) -> None:
        await store.append(step("s", 0))
        with pytest.raises(error, match=r"^keep_last must be an int >= 1"):
            await store.prune_steps("s", keep_last=keep)  # type: ignore[arg-type]
        assert len(await store.all("s")) == 1

    async def test_steps_after_is_a_slice_of_all(self, store: Store) -> None:
        await store.append_many([step("s", n) for n in range(10)])
        await store.prune_steps("s", keep_last=8)
        held = await store.all("s")
        for after in (0, 3, 7, 8, 20):
            assert await store.steps_after("s", after, 4) == held[after : after + 4]
        with pytest.raises(ValueError, match=r"^after must be an int >= 0"):
            await store.steps_after("s", -1, 1)
        with pytest.raises(ValueError, match=r"^limit must be an int >= 1"):
            await store.steps_after("s", 0, 0)


async def test_sqlite_prune_gives_space_back(tmp_path: Path) -> None:
    """A new file is in incremental auto_vacuum mode: pruning shrinks it."""
    import sqlite3

    path = tmp_path / "space.db"
    async with await SqliteStore.open(path) as store:
        await store.append_many([step("s", n, "x" * 4000) for n in range(300)])
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA auto_vacuum").fetchone() == (2,)
            before = conn.execute("PRAGMA page_count").fetchone()[0]
            await store.prune_steps("s", keep_last=1)
            after = conn.execute("PRAGMA page_count").fetchone()[0]
        finally:
            conn.close()
    assert after < before / 10


class TestRevisionAfterDelete:
    async def test_a_stale_update_data_if_after_a_delete_fails(self, store: Store) -> None:
        revision = await store.update_data_if("s", "1", 0)
        await store.delete_session("s")
        assert await store.revision("s") > revision
        with pytest.raises(RevisionConflictError):
            await store.update_data_if("s", "2", revision)
        assert not await store.exists("s")
        after = await store.revision("s")
        assert await store.update_data_if("s", "3", after) > after


class TestExpire:
    async def test_idle_unleased_sessions_only(self, store: Store) -> None:
        for name in ("a", "b", "leased"):
            await restore_idle(store, name)
        await store.append(step("a", 0))
        assert await store.acquire_lease("leased", "w", ttl=3600) is not None
        await store.update_data("fresh", "1")
        assert sorted(await store.expire_sessions(idle_for=3600)) == ["a", "b"]
        assert [await store.exists(n) for n in ("a", "leased", "fresh")] == [False, True, True]
        assert await store.all("a") == []
        assert await store.expire_sessions(idle_for=3600) == []

    async def test_limit_and_arguments(self, store: Store) -> None:
        for n in range(5):
            await restore_idle(store, f"s{n}", days=10 - n)
        assert await store.expire_sessions(idle_for=60, limit=2) == ["s0", "s1"]
        assert len(await store.expire_sessions(idle_for=60)) == 3
        with pytest.raises(ValueError, match=r"^idle_for must be"):
            await store.expire_sessions(idle_for=0)
        with pytest.raises(ValueError, match=r"^limit must be"):
            await store.expire_sessions(idle_for=1, limit=0)

    async def test_an_expired_unreleased_lease_is_taken_over(self, store: Store) -> None:
        await restore_idle(store, "s")
        lease = await store.acquire_lease("s", "w", ttl=0.01)
        assert lease is not None
        await anyio.sleep(0.1)
        assert await store.expire_sessions(idle_for=60) == ["s"]
        with pytest.raises(LeaseLostError):
            await store.fenced(lease).update_data("s", "2")
        assert not await store.exists("s")
        again = await store.acquire_lease("s", "x", ttl=1)
        assert again is not None
        assert again.token > lease.token

    async def test_a_stale_update_data_if_after_expiry_fails(self, store: Store) -> None:
        await restore_idle(store, "s")
        revision = await store.revision("s")
        assert await store.expire_sessions(idle_for=60) == ["s"]
        with pytest.raises(RevisionConflictError):
            await store.update_data_if("s", "2", revision)

    async def test_step_only_sessions_are_judged_by_their_newest_step(self, store: Store) -> None:
        old = datetime.now(UTC) - timedelta(days=3)
        await store.append_many([step("old", 0, at=old), step("old", 1, at=old)])
        await store.append_many([step("mixed", 0, at=old), step("mixed", 1)])
        assert await store.expire_sessions(idle_for=3600) == ["old"]
        assert await store.all("old") == []
        assert len(await store.all("mixed")) == 2

    async def test_concurrent_expiries_delete_each_session_once(
        self, store: Store, sql_target: SqlTarget
    ) -> None:
        for n in range(40):
            await restore_idle(store, f"s{n}")
        results: list[list[str]] = []

        async def expire() -> None:
            while batch := await store.expire_sessions(idle_for=60, limit=7):
                results.append(batch)

        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(expire)
        gone = [sid for batch in results for sid in batch]
        assert sorted(gone) == sorted(f"s{n}" for n in range(40))
        assert all(len(batch) <= 7 for batch in results)

    async def test_expiries_on_two_handles_delete_each_session_once(
        self, store: Store, sql_target: SqlTarget
    ) -> None:
        """Two handles onto one database (two connections, as two processes would)."""
        for n in range(30):
            await restore_idle(store, f"s{n}")
        if isinstance(store, SqliteStore):
            other: Store = await SqliteStore.open(store.path)
        else:
            assert sql_target.dsn is not None
            other = await PostgresStore.open(sql_target.dsn, schema=store.schema, pool_size=2)
        results: list[str] = []

        async def expire(handle: Store) -> None:
            while batch := await handle.expire_sessions(idle_for=60, limit=4):
                results.extend(batch)

        async with other, anyio.create_task_group() as group:
            for handle in (store, other, store, other):
                group.start_soon(expire, handle)
        assert sorted(results) == sorted(f"s{n}" for n in range(30))


class TestFork:
    async def test_copies_settings_labels_and_first_steps(self, store: Store) -> None:
        await store.put(Session("src", model="m", system_prompt="p\x00q", data='{"a": 1}'))
        await store.set_labels("src", {"team": "a"})
        await store.append_many([step("src", n, f"c\x00{n}") for n in range(5)])
        await store.finalize("src", FinalizeSummary(RunStatus.completed, step_count=5))
        await store.fork_session("src", "copy", keep_first=3)
        assert await store.get("copy") == Session("copy", "m", "p\x00q", '{"a": 1}')
        copied = await store.all("copy")
        originals = (await store.all("src"))[:3]
        assert copied == [
            RunStep(
                "copy",
                s.step_index,
                s.step_type,
                s.content,
                s.tool_args,
                s.duration_ms,
                s.prompt_tokens,
                s.completion_tokens,
                s.created_at,
            )
            for s in originals
        ]
        info = await store.session_info("copy")
        assert info is not None
        assert (dict(info.labels), info.status, info.step_count) == ({"team": "a"}, None, 0)
        assert await store.final("copy") is None
        assert len(await store.all("src")) == 5
        assert await ids_of_every_page(store, labels={"team": "a"}) == ["copy", "src"]

    @pytest.mark.parametrize(("keep", "count"), [(None, 4), (0, 0), (2, 2), (10, 4)])
    async def test_keep_first(self, store: Store, keep: int | None, count: int) -> None:
        await store.append_many([step("src", n) for n in range(4)])
        await store.fork_session("src", "copy", keep_first=keep)
        assert len(await store.all("copy")) == count
        assert await store.exists("copy")

    async def test_refusals_change_nothing(self, store: Store) -> None:
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
            await store.fork_session("src", "new", keep_first=True)  # type: ignore[arg-type]
        assert not await store.exists("new")
        assert await store.get("taken") == Session("taken", data="1")
        assert len(await store.all("taken-by-steps")) == 1

    async def test_a_fork_gets_a_revision_above_any_kept_and_no_lease(self, store: Store) -> None:
        await store.update_data("src", "1")
        await store.update_data("new", "1")
        await store.delete_session("new")
        stale = await store.revision("new")
        lease = await store.acquire_lease("src", "w", ttl=60)
        assert lease is not None
        await store.fork_session("src", "new")
        assert await store.revision("new") > stale
        assert await store.acquire_lease("new", "other", ttl=60) is not None

    async def test_fenced_fork_into_a_lost_session_is_refused(self, store: Store) -> None:
        await store.update_data("src", "1")
        lease = await store.acquire_lease("new", "old", ttl=0.01)
        assert lease is not None
        view = store.fenced(lease)
        await anyio.sleep(0.1)
        assert await store.acquire_lease("new", "taker", ttl=60) is not None
        with pytest.raises(LeaseLostError):
            await view.fork_session("src", "new")
        assert not await store.exists("new")


class TestRestore:
    def _record(self, session_id: str = "s") -> tuple[Session, SessionInfo, FinalizeSummary]:
        final = FinalizeSummary(RunStatus.error, 1, 2, 2, 4, 5)
        info = SessionInfo(
            session_id, RunStatus.error, 7, T0, T0 + timedelta(days=1), labels={"k": "v"}
        )
        return Session(session_id, "m", "p\x00", "[1]"), info, final

    async def test_as_recorded(self, store: Store) -> None:
        session, info, final = self._record()
        await store.restore_session(session, info, final)
        assert await store.get("s") == session
        assert await store.session_info("s") == info
        assert await store.final("s") == final
        assert await ids_of_every_page(store, labels={"k": "v"}) == ["s"]

    async def test_an_existing_session_is_refused(self, store: Store) -> None:
        await store.append(step("s", 0))
        with pytest.raises(SessionExistsError):
            await store.restore_session(*self._record())
        await store.update_data("t", "1")
        with pytest.raises(SessionExistsError):
            await store.restore_session(*self._record("t"))
        assert await store.get("t") == Session("t", data="1")
        assert not await store.exists("s")

    async def test_inconsistent_arguments(self, store: Store) -> None:
        session, info, final = self._record()
        with pytest.raises(ValueError, match=r"^info must be of session 'other'"):
            await store.restore_session(Session("other"), info, final)
        with pytest.raises(ValueError, match=r"^final's status must be info.status"):
            await store.restore_session(session, info, None)
        assert not await store.exists("s")

    async def test_copy_from_memory_and_back(self, store: Store) -> None:
        """copy_sessions (agentloop's transfer) through the capabilities, both ways."""
        source = MemoryStore()
        session, info, final = self._record()
        await source.restore_session(session, info, final)
        await source.append_many([step("s", n, f"c{n}\x00") for n in range(5)])
        await copy_sessions(source, source, store, store)
        assert await store.all("s") == await source.all("s")
        assert await store.session_info("s") == info
        back = MemoryStore()
        await copy_sessions(store, store, back, back)
        assert await back.all("s") == await source.all("s")
        assert await back.final("s") == final


class TestFencedLifecycleWrites:
    async def test_refused_after_a_takeover(self, store: Store) -> None:
        await store.append_many([step("s", n) for n in range(4)])
        lease = await store.acquire_lease("s", "old", ttl=0.01)
        assert lease is not None
        view = store.fenced(lease)
        await view.set_labels("s", {"k": "v"})
        assert await view.prune_steps("s", keep_last=3) == 1
        await anyio.sleep(0.1)
        assert await store.acquire_lease("s", "taker", ttl=60) is not None
        with pytest.raises(LeaseLostError):
            await view.set_labels("s", {"k": "w"})
        with pytest.raises(LeaseLostError):
            await view.prune_steps("s", keep_last=1)
        await store.delete_session("s")
        with pytest.raises(LeaseLostError):
            await view.restore_session(*TestRestore()._record())
        assert not await store.exists("s")
        await view.set_labels("other", {"k": "v"})  # another session: not fenced

    async def test_held_lease_writes(self, store: Store) -> None:
        await store.append_many([step("s", n) for n in range(4)])
        lease = await store.acquire_lease("s", "me", ttl=60)
        assert lease is not None
        view = store.fenced(lease)
        await view.set_labels("s", {"k": "v"})
        assert await view.prune_steps("s", keep_last=1) == 3
        info = await view.session_info("s")
        assert info is not None
        assert dict(info.labels) == {"k": "v"}
        assert len(await view.steps_after("s", 0, 10)) == 1
        assert [i.id for i in (await view.page_sessions()).sessions] == ["s"]


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
        self, store: Store, call: Callable[[Store], object]
    ) -> None:
        await restore_idle(store, "s")
        await store.set_labels("s", {"k": "v"})
        await store.append_many([step("s", n) for n in range(3)])
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


async def test_sqlite_expires_step_only_sessions_while_a_recent_session_exists(
    tmp_path: Path,
) -> None:
    """A session with steps but no row expires even when a recently written session stops
    the walk over session rows."""
    store = await SqliteStore.open(str(tmp_path / "x.db"))
    try:
        await store.append(RunStep("orphan", 0, "user", content="hi"))
        await anyio.sleep(0.3)
        await store.update_data("young", "{}")
        assert await store.expire_sessions(idle_for=0.2) == ["orphan"]
        assert await store.exists("young")
    finally:
        await store.aclose()


async def test_sql_expire_takes_retention_periods(store: Store) -> None:
    """Retention periods past the timeout bound (30 days, a year) are accepted on both SQL
    stores; past 100 years the call is refused naming idle_for."""
    await store.update_data("fresh", None)
    assert await store.expire_sessions(idle_for=30 * 86_400.0) == []
    assert await store.expire_sessions(idle_for=365 * 86_400.0) == []
    assert await store.exists("fresh")
    with pytest.raises(ValueError, match=r"idle_for must be a finite number of seconds > 0"):
        await store.expire_sessions(idle_for=101 * 365.25 * 86_400)
