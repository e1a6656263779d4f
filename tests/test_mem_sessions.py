"""agentloopmem.SessionStore keeps every rule of the SessionStore protocol."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import trio
import trio.testing

from agentloop import (
    FinalizeSummary,
    RunStatus,
    Session,
    StoreClosedError,
    SupportsAclose,
    SupportsDeleteSession,
    SupportsFinal,
    SupportsListSessions,
    SupportsPut,
)
from agentloop import SessionStore as SessionStoreProtocol
from agentloopmem import SessionStore
from agentloopmem import _sessions as sessions_module

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ticking_clock(step: timedelta = timedelta(seconds=1)) -> Callable[[], datetime]:
    times = iter(T0 + step * i for i in range(1_000_000))
    return lambda: next(times)


def summary(status: RunStatus = RunStatus.completed, **fields: int) -> FinalizeSummary:
    return FinalizeSummary(status, **fields)


def test_implements_protocols() -> None:
    """The store is a SessionStore with every session-side capability."""
    store = SessionStore()
    for protocol in (
        SessionStoreProtocol,
        SupportsPut,
        SupportsFinal,
        SupportsListSessions,
        SupportsDeleteSession,
        SupportsAclose,
    ):
        assert isinstance(store, protocol)


def test_clock_must_be_callable() -> None:
    """A clock that cannot be called is refused at construction."""
    with pytest.raises(TypeError, match=r"^clock must be a callable"):
        SessionStore(clock=T0)  # type: ignore[arg-type]


class TestGet:
    @pytest.mark.anyio
    async def test_unknown_returns_fresh_session_with_that_id(self) -> None:
        """get of an unknown id returns Session(id=that id) and creates nothing."""
        store = SessionStore()
        assert await store.get("new one") == Session(id="new one")
        assert await store.exists("new one") is False
        assert await store.list_sessions() == []

    @pytest.mark.anyio
    async def test_reflects_latest_update(self) -> None:
        """get returns the data of the latest update_data."""
        store = SessionStore()
        await store.update_data("s", '{"v": 1}')
        await store.update_data("s", '{"v": 2}')
        assert (await store.get("s")).data == '{"v": 2}'

    @pytest.mark.anyio
    async def test_update_none_clears(self) -> None:
        """update_data(id, None) is accepted and get then returns data=None."""
        store = SessionStore()
        await store.update_data("s", "[1]")
        await store.update_data("s", None)
        assert (await store.get("s")).data is None
        assert await store.exists("s") is True

    @pytest.mark.anyio
    async def test_bad_id(self) -> None:
        """An empty or NUL-bearing id is refused before anything is read."""
        store = SessionStore()
        with pytest.raises(ValueError, match=r"^session_id must be a non-empty str"):
            await store.get("")
        with pytest.raises(ValueError, match=r"^session_id must not contain NUL"):
            await store.exists("a\x00")
        with pytest.raises(TypeError, match=r"^session_id must be a str"):
            await store.get(7)  # type: ignore[arg-type]


class TestWritesCreate:
    @pytest.mark.anyio
    @pytest.mark.parametrize("write", ["update_data", "finalize", "put"])
    async def test_any_write_brings_session_into_being(self, write: str) -> None:
        """update_data, finalize and put each make exists() true."""
        store = SessionStore()
        if write == "update_data":
            await store.update_data("s", "{}")
        elif write == "finalize":
            await store.finalize("s", summary())
        else:
            await store.put(Session("s", model="m"))
        assert await store.exists("s") is True


class TestUpdateData:
    @pytest.mark.anyio
    @pytest.mark.parametrize("bad", ["{", "undefined", "NaN", r'"\u0000"'])
    async def test_non_json_rejected_nothing_written(self, bad: str) -> None:
        """Non-JSON text is a ValueError; the prior data stays and no session is created."""
        store = SessionStore()
        await store.update_data("kept", '{"ok": true}')
        with pytest.raises(ValueError, match=r"^data must"):
            await store.update_data("kept", bad)
        with pytest.raises(ValueError, match=r"^data must"):
            await store.update_data("fresh", bad)
        assert (await store.get("kept")).data == '{"ok": true}'
        assert await store.exists("fresh") is False

    @pytest.mark.anyio
    async def test_snapshot_type(self) -> None:
        """A decoded value instead of JSON text is a TypeError naming snapshot."""
        with pytest.raises(TypeError, match=r"^snapshot must be JSON text or None"):
            await SessionStore().update_data("s", {"a": 1})  # type: ignore[arg-type]

    async def test_snapshot_parsed_outside_the_lock(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Another thread can write while a snapshot is parsed, and its put is not lost."""
        store = SessionStore()
        await store.put(Session("s", model="old"))
        original = sessions_module.validate_json

        def validate_then_race(value: object, field: str) -> str:
            racer = threading.Thread(
                target=trio.run, args=(store.put, Session("s", model="new", data="0"))
            )
            racer.start()
            racer.join(timeout=10)
            assert not racer.is_alive(), "update_data held the lock while parsing"
            return original(value, field)

        monkeypatch.setattr(sessions_module, "validate_json", validate_then_race)
        await store.update_data("s", "1")
        assert await store.get("s") == Session("s", model="new", data="1")

    @pytest.mark.anyio
    async def test_keeps_model_and_prompt(self) -> None:
        """update_data changes only data; a put's model and prompt remain."""
        store = SessionStore()
        await store.put(Session("s", model="m", system_prompt="p", data="1"))
        await store.update_data("s", "2")
        assert await store.get("s") == Session("s", model="m", system_prompt="p", data="2")


class TestFinalize:
    @pytest.mark.anyio
    async def test_latest_wins_and_data_kept(self) -> None:
        """finalize may repeat; the latest summary wins and data is never discarded."""
        store = SessionStore()
        await store.update_data("s", '{"memo": "x"}')
        await store.finalize("s", summary(RunStatus.error, step_count=2))
        await store.finalize("s", summary(RunStatus.completed, step_count=3, prompt_tokens=9))
        assert await store.final("s") == summary(RunStatus.completed, step_count=3, prompt_tokens=9)
        assert (await store.get("s")).data == '{"memo": "x"}'

    @pytest.mark.anyio
    async def test_summary_type(self) -> None:
        """finalize needs a FinalizeSummary."""
        with pytest.raises(TypeError, match=r"^summary must be a FinalizeSummary"):
            await SessionStore().finalize("s", "completed")  # type: ignore[arg-type]
        assert await SessionStore().final("s") is None


class TestPut:
    @pytest.mark.anyio
    async def test_put_seeds_get_and_keeps_summary(self) -> None:
        """put replaces model, prompt and data; the latest summary survives."""
        store = SessionStore()
        await store.finalize("s", summary())
        seeded = Session("s", model="gpt", system_prompt="be brief", data='{"a": [1]}')
        await store.put(seeded)
        assert await store.get("s") == seeded
        assert await store.final("s") == summary()

    @pytest.mark.anyio
    async def test_put_type(self) -> None:
        """put needs a Session."""
        with pytest.raises(TypeError, match=r"^session must be a Session"):
            await SessionStore().put("s")  # type: ignore[arg-type]


class TestIsolation:
    @pytest.mark.anyio
    async def test_sessions_do_not_mix(self) -> None:
        """Data and summaries of one session never show in another (case matters)."""
        store = SessionStore()
        await store.update_data("A", "1")
        await store.finalize("A", summary(RunStatus.timeout))
        await store.update_data("a", "2")
        assert (await store.get("A")).data == "1"
        assert (await store.get("a")).data == "2"
        assert await store.final("a") is None


class TestListSessions:
    @pytest.mark.anyio
    async def test_most_recently_written_first(self) -> None:
        """Sessions come back by write recency, with status, step total and times."""
        store = SessionStore(clock=ticking_clock())
        await store.update_data("a", "{}")  # t0
        await store.finalize("b", summary(step_count=4))  # t1
        await store.finalize("a", summary(RunStatus.error, step_count=2))  # t2
        await store.finalize("a", summary(RunStatus.timeout, step_count=1))  # t3
        infos = await store.list_sessions()
        assert [i.id for i in infos] == ["a", "b"]
        a, b = infos
        assert (a.status, a.step_count, a.created_at, a.updated_at) == (
            RunStatus.timeout,
            3,
            T0,
            T0 + timedelta(seconds=3),
        )
        assert (b.status, b.step_count) == (RunStatus.completed, 4)

    @pytest.mark.anyio
    async def test_backward_clock_does_not_reorder(self) -> None:
        """A clock stepping backwards cannot reorder the listing."""
        store = SessionStore(clock=ticking_clock(timedelta(seconds=-1)))
        for sid in ["x", "y", "z"]:
            await store.update_data(sid, "0")
        assert [i.id for i in await store.list_sessions()] == ["z", "y", "x"]

    @pytest.mark.anyio
    async def test_limit(self) -> None:
        """limit caps the listing to the most recent sessions and must be an int >= 1."""
        store = SessionStore()
        for i in range(5):
            await store.update_data(f"s{i}", "0")
        assert [i.id for i in await store.list_sessions(limit=2)] == ["s4", "s3"]
        with pytest.raises(ValueError, match=r"^limit must be an int >= 1"):
            await store.list_sessions(limit=0)

    @pytest.mark.anyio
    async def test_naive_clock_refused_nothing_written(self) -> None:
        """A clock returning naive datetimes is an error at write time; nothing is written."""
        store = SessionStore(clock=lambda: datetime(2026, 1, 1))
        with pytest.raises(ValueError, match=r"^clock must return a timezone-aware datetime"):
            await store.update_data("s", "1")
        assert await store.exists("s") is False

    @pytest.mark.anyio
    async def test_status_none_before_finalize(self) -> None:
        """A session never finalized lists with status None and zero steps."""
        store = SessionStore()
        await store.put(Session("s"))
        (info,) = await store.list_sessions()
        assert (info.status, info.step_count) == (None, 0)


class TestDeleteSession:
    @pytest.mark.anyio
    async def test_delete_drops_data_and_summary(self) -> None:
        """delete_session forgets data and summaries and reports whether the session existed."""
        store = SessionStore()
        await store.update_data("s", "1")
        await store.finalize("s", summary())
        assert await store.delete_session("s") is True
        assert await store.exists("s") is False
        assert await store.get("s") == Session("s")
        assert await store.final("s") is None
        assert await store.delete_session("s") is False


class TestCheckpointsAndCancellation:
    async def test_every_call_is_a_checkpoint(self) -> None:
        """Each public coroutine yields once when it completes."""
        store = SessionStore()
        calls = [
            lambda: store.put(Session("s")),
            lambda: store.get("s"),
            lambda: store.exists("s"),
            lambda: store.update_data("s", "1"),
            lambda: store.finalize("s", summary()),
            lambda: store.final("s"),
            lambda: store.list_sessions(),
            lambda: store.delete_session("s"),
            lambda: store.aclose(),
        ]
        for call in calls:
            with trio.testing.assert_checkpoints():
                await call()

    async def test_cancelled_update_writes_nothing(self) -> None:
        """A cancelled update_data or finalize leaves the session as it was."""
        store = SessionStore()
        await store.update_data("s", '"before"')
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.update_data("s", '"after"')
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.finalize("s", summary())
        assert (await store.get("s")).data == '"before"'
        assert await store.final("s") is None


class TestClosed:
    @pytest.mark.anyio
    async def test_every_call_raises_after_aclose(self) -> None:
        """After aclose every method raises StoreClosedError."""
        store = SessionStore()
        await store.aclose()
        calls = [
            lambda: store.put(Session("s")),
            lambda: store.get("s"),
            lambda: store.exists("s"),
            lambda: store.update_data("s", "1"),
            lambda: store.finalize("s", summary()),
            lambda: store.final("s"),
            lambda: store.list_sessions(),
            lambda: store.delete_session("s"),
        ]
        for call in calls:
            with pytest.raises(StoreClosedError, match=r"^SessionStore is closed"):
                await call()
