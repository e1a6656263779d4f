"""agentloop batch helpers: append_all / get_all use the capability or fall back, in order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
import trio
import trio.testing

from agentloop import (
    RevisionConflictError,
    RunStep,
    Session,
    StepType,
    StoreError,
    SupportsAppendMany,
    SupportsGetMany,
    SupportsRevisions,
    append_all,
    get_all,
)
from agentloop._shared import check_revision, check_session_ids, check_steps
from agentloopmem import SessionStore, StepStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def step(i: int, sid: str = "s") -> RunStep:
    return RunStep(sid, i, StepType.user, content=f"step {i}", created_at=T0)


class AppendOnly:
    """A StepStore with no append_many, recording its calls."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[RunStep] = []
        self.fail_at = fail_at

    async def append(self, step: RunStep) -> None:
        await trio.lowlevel.checkpoint()
        if len(self.calls) == self.fail_at:
            raise StoreError("down")
        self.calls.append(step)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        return self.calls[-n:]


class Batching(AppendOnly):
    """A StepStore with append_many, recording each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[RunStep]] = []

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        await trio.lowlevel.checkpoint()
        self.batches.append(list(steps))


class GetOnly:
    """A SessionStore with no get_many, recording the ids it was asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def get(self, session_id: str) -> Session:
        await trio.lowlevel.checkpoint()
        self.asked.append(session_id)
        return Session(session_id, model=f"m-{session_id}")

    async def exists(self, session_id: str) -> bool:
        return False

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        raise NotImplementedError

    async def finalize(self, session_id: str, summary: object) -> None:
        raise NotImplementedError


def test_capabilities_are_runtime_checkable() -> None:
    """The in-memory stores have the three capabilities; plain objects do not."""
    assert isinstance(StepStore(), SupportsAppendMany)
    assert isinstance(SessionStore(), SupportsGetMany)
    assert isinstance(SessionStore(), SupportsRevisions)
    for protocol in (SupportsAppendMany, SupportsGetMany, SupportsRevisions):
        assert not isinstance(object(), protocol)
    assert not isinstance(AppendOnly(), SupportsAppendMany)


def test_conflict_is_a_store_error() -> None:
    """RevisionConflictError is a StoreError, so existing handlers see it."""
    assert issubclass(RevisionConflictError, StoreError)


class TestAppendAll:
    async def test_uses_append_many_once(self) -> None:
        """With the capability the whole batch goes in one append_many call, in order."""
        store = Batching()
        await append_all(store, (step(0), step(1, "t"), step(2)))
        assert store.batches == [[step(0), step(1, "t"), step(2)]]
        assert store.calls == []

    async def test_falls_back_in_order(self) -> None:
        """Without it, one append per step, in the given order."""
        store = AppendOnly()
        await append_all(store, [step(2), step(0), step(1)])
        assert store.calls == [step(2), step(0), step(1)]

    async def test_fallback_is_not_atomic(self) -> None:
        """A failure part way leaves the steps before it appended (documented)."""
        store = AppendOnly(fail_at=1)
        with pytest.raises(StoreError, match=r"^down$"):
            await append_all(store, [step(0), step(1), step(2)])
        assert store.calls == [step(0)]

    @pytest.mark.parametrize("store_kind", ["batching", "append-only"])
    async def test_bad_step_anywhere_writes_nothing(self, store_kind: str) -> None:
        """A bad item refuses the whole batch before any call, naming its position."""
        store = Batching() if store_kind == "batching" else AppendOnly()
        with pytest.raises(TypeError, match=r"^steps\[2\] must be a RunStep, got 'x'$"):
            await append_all(store, [step(0), step(1), "x"])  # type: ignore[list-item]
        assert store.calls == []
        assert getattr(store, "batches", []) == []

    @pytest.mark.parametrize("store_kind", ["batching", "append-only"])
    async def test_empty_is_a_checkpoint(self, store_kind: str) -> None:
        """[] writes nothing and still yields."""
        store = Batching() if store_kind == "batching" else AppendOnly()
        with trio.testing.assert_checkpoints():
            await append_all(store, [])
        assert store.calls == []


class TestGetAll:
    async def test_uses_get_many(self) -> None:
        """With the capability, one get_many call answers, aligned with the ids."""
        store = SessionStore()
        await store.put(Session("a", model="ma"))
        got = await get_all(store, ["b", "a", "a"])
        assert got == [Session("b"), Session("a", model="ma"), Session("a", model="ma")]
        assert not await store.exists("b")

    async def test_falls_back_in_order(self) -> None:
        """Without it, one get per id in order, duplicates included."""
        store = GetOnly()
        got = await get_all(store, ["y", "x", "y"])
        assert store.asked == ["y", "x", "y"]
        assert [s.id for s in got] == ["y", "x", "y"]

    async def test_bad_id_reads_nothing(self) -> None:
        """A bad id anywhere refuses the call before any read, naming its position."""
        store = GetOnly()
        with pytest.raises(ValueError, match=r"^session_ids\[1\] must be a non-empty str"):
            await get_all(store, ["a", ""])
        assert store.asked == []

    async def test_empty_is_a_checkpoint(self) -> None:
        """[] reads nothing and still yields."""
        with trio.testing.assert_checkpoints():
            assert await get_all(GetOnly(), []) == []


class TestChecks:
    @pytest.mark.parametrize("value", ["ab", b"ab", 3, None, iter([])])
    def test_steps_must_be_a_sequence(self, value: object) -> None:
        """A str, bytes, a non-sequence or an iterator is refused whole."""
        with pytest.raises(TypeError, match=r"^steps must be a sequence of RunStep, got "):
            check_steps(value)

    def test_steps_copied(self) -> None:
        """The checked batch is a fresh list: mutating the caller's list later cannot reach it."""
        given = [step(0)]
        batch = check_steps(given)
        given.append(step(1))
        assert batch == [step(0)]

    def test_session_ids_not_a_str(self) -> None:
        """A single str is refused (it is a sequence of one-char ids otherwise)."""
        with pytest.raises(TypeError, match=r"^session_ids must be a sequence of str, got 'ab'$"):
            check_session_ids("ab")

    def test_session_id_wrong_type_names_position(self) -> None:
        """A non-str id is a TypeError naming its position."""
        with pytest.raises(TypeError, match=r"^session_ids\[0\] must be a str"):
            check_session_ids([7])

    @pytest.mark.parametrize(
        ("value", "error", "pattern"),
        [
            (True, TypeError, r"^revision must be an int, got True"),
            ("1", TypeError, r"^revision must be an int, got '1'"),
            (-1, ValueError, r"^revision must be an int in \[0, 9223372036854775807\], got -1$"),
            (2**63, ValueError, r"^revision must be an int in \[0, "),
        ],
    )
    def test_revision(self, value: object, error: type[Exception], pattern: str) -> None:
        """A revision is an int in [0, 2**63 - 1]; bool refused."""
        with pytest.raises(error, match=pattern):
            check_revision(value)
