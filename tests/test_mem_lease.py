"""agentloopmem.SessionStore leases: exclusion, tokens, renew and release, argument checks."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import anyio
import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from _docs import ROOT, block
from _lease_kit import T0, FakeClock

from agentloop import (
    FinalizeSummary,
    Lease,
    LeaseLostError,
    RunStatus,
    Session,
    SessionBusyError,
    StoreClosedError,
    StoreError,
    SupportsLease,
)
from agentloop._validate import SECONDS_MAX
from agentloopmem import SessionStore
from agentlooptest._cancel import Points, cancel_at

BAD_TTL = re.escape(f"ttl must be a finite number of seconds > 0 and <= {SECONDS_MAX}")


def new_store() -> tuple[SessionStore, FakeClock]:
    clock = FakeClock()
    return SessionStore(clock=clock), clock


def test_errors_are_store_errors() -> None:
    """Both lease errors are StoreErrors, so existing handlers still see them."""
    assert issubclass(LeaseLostError, StoreError)
    assert issubclass(SessionBusyError, StoreError)


def test_store_supports_leases() -> None:
    """The in-memory SessionStore has the lease capability (checked by mypy too)."""
    store: SupportsLease = SessionStore()
    assert isinstance(store, SupportsLease)
    assert not isinstance(object(), SupportsLease)


class TestLeaseValue:
    def test_valid(self) -> None:
        """A well-formed lease is built and frozen."""
        lease = Lease("s", "worker-1", 3, T0)
        assert (lease.session_id, lease.owner, lease.token, lease.expires_at) == (
            "s",
            "worker-1",
            3,
            T0,
        )
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            lease.token = 4  # type: ignore[misc]

    @pytest.mark.parametrize(
        ("fields", "error", "pattern"),
        [
            ({"session_id": ""}, ValueError, r"^session_id must be a non-empty str"),
            ({"session_id": 1}, TypeError, r"^session_id must be a str"),
            ({"owner": ""}, ValueError, r"^owner must be a non-empty str, got ''"),
            ({"owner": b"w"}, TypeError, r"^owner must be a str, got b'w'"),
            ({"owner": "a\x00b"}, ValueError, r"^owner must not contain NUL"),
            ({"owner": "é" * 129}, ValueError, r"^owner must be at most 256 UTF-8 bytes, got 258"),
            ({"token": -1}, ValueError, r"^token must be an int in \[0, "),
            ({"token": 2**63}, ValueError, r"^token must be an int in \[0, "),
            ({"token": True}, TypeError, r"^token must be an int, got True"),
            ({"token": 1.0}, TypeError, r"^token must be an int, got 1.0"),
            ({"expires_at": "2026"}, TypeError, r"^expires_at must be a datetime, got '2026'"),
            (
                {"expires_at": datetime(2026, 1, 1)},
                ValueError,
                r"^expires_at must be timezone-aware",
            ),
        ],
    )
    def test_bad_fields(self, fields: dict[str, object], error: type, pattern: str) -> None:
        """Each field's rule is enforced at construction, naming the field and the value."""
        good: dict[str, object] = {"session_id": "s", "owner": "w", "token": 0, "expires_at": T0}
        with pytest.raises(error, match=pattern):
            Lease(**{**good, **fields})  # type: ignore[arg-type]

    def test_owner_limit_is_inclusive(self) -> None:
        """An owner of exactly 256 UTF-8 bytes is accepted."""
        assert Lease("s", "é" * 128, 0, T0).owner == "é" * 128


class TestAcquire:
    @pytest.mark.anyio
    async def test_free_lease_is_granted_until_now_plus_ttl(self) -> None:
        """A free lease is granted with an aware UTC expiry ttl seconds from the store's now."""
        store, _ = new_store()
        lease = await store.acquire_lease("s", "a", 2.5)
        assert lease is not None
        assert (lease.session_id, lease.owner) == ("s", "a")
        assert lease.expires_at == T0 + timedelta(seconds=2.5)
        assert lease.expires_at.tzinfo is UTC

    @pytest.mark.anyio
    async def test_other_owner_refused_while_live(self) -> None:
        """A live lease held by another owner gives None, up to the last instant."""
        store, clock = new_store()
        await store.acquire_lease("s", "a", 10)
        assert await store.acquire_lease("s", "b", 10) is None
        clock.advance(9.999)
        assert await store.acquire_lease("s", "b", 10) is None

    @pytest.mark.anyio
    async def test_same_owner_keeps_token_with_later_expiry(self) -> None:
        """Re-acquiring a live lease by its holder keeps the token and moves the expiry."""
        store, clock = new_store()
        first = await store.acquire_lease("s", "a", 10)
        clock.advance(5)
        again = await store.acquire_lease("s", "a", 10)
        assert first is not None
        assert again is not None
        assert again.token == first.token
        assert again.expires_at == first.expires_at + timedelta(seconds=5)
        clock.advance(9)  # past the first expiry, within the second
        assert await store.acquire_lease("s", "b", 10) is None

    @pytest.mark.anyio
    async def test_expired_lease_taken_with_larger_token(self) -> None:
        """Once expired, another owner gets the lease with a larger token."""
        store, clock = new_store()
        old = await store.acquire_lease("s", "a", 10)
        clock.advance(10)
        new = await store.acquire_lease("s", "b", 10)
        assert old is not None
        assert new is not None
        assert new.token > old.token
        assert new.owner == "b"

    @pytest.mark.anyio
    async def test_sessions_are_independent(self) -> None:
        """Holding one session's lease does not block another's."""
        store, _ = new_store()
        assert await store.acquire_lease("s1", "a", 10) is not None
        assert await store.acquire_lease("s2", "b", 10) is not None

    @pytest.mark.anyio
    async def test_tokens_increase_across_release_expiry_and_delete(self) -> None:
        """Every grant gets a larger token, whatever happened in between; delete resets nothing."""
        store, clock = new_store()
        tokens = []
        for owner, step in [("a", "release"), ("a", "expire"), ("b", "delete"), ("b", "release")]:
            lease = await store.acquire_lease("s", owner, 10)
            assert lease is not None
            tokens.append(lease.token)
            await store.fenced(lease).update_data("s", "1")
            if step == "release":
                await store.release_lease(lease)
            elif step == "expire":
                clock.advance(10)
            else:
                assert await store.delete_session("s") is True
                await store.release_lease(lease)
        last = await store.acquire_lease("s", "c", 10)
        assert last is not None
        tokens.append(last.token)
        assert tokens == sorted(set(tokens))
        assert len(tokens) == 5


class TestRenew:
    @pytest.mark.anyio
    async def test_same_token_later_expiry(self) -> None:
        """Renew keeps the token and expires ttl seconds after the store's now."""
        store, clock = new_store()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        clock.advance(4)
        renewed = await store.renew_lease(lease, 10)
        assert renewed == attrs.evolve(lease, expires_at=T0 + timedelta(seconds=14))
        clock.advance(9)
        assert await store.acquire_lease("s", "b", 10) is None

    @pytest.mark.anyio
    async def test_expired_but_not_taken_renews(self) -> None:
        """A lease that expired while nobody acquired it was never lost: renew succeeds."""
        store, clock = new_store()
        lease = await store.acquire_lease("s", "a", 1)
        assert lease is not None
        clock.advance(60)
        renewed = await store.renew_lease(lease, 10)
        assert renewed.token == lease.token
        assert await store.acquire_lease("s", "b", 10) is None

    @pytest.mark.anyio
    async def test_after_takeover_raises_and_changes_nothing(self) -> None:
        """Renewing after another owner took over raises LeaseLostError; the new holder keeps it."""
        store, clock = new_store()
        old = await store.acquire_lease("s", "a", 10)
        clock.advance(10)
        new = await store.acquire_lease("s", "b", 10)
        assert old is not None
        assert new is not None
        with pytest.raises(LeaseLostError, match=r"^lease 1 of session 's' was taken over"):
            await store.renew_lease(old, 100)
        clock.advance(10)  # the new lease ends when it did: the failed renew moved nothing
        assert await store.acquire_lease("s", "c", 10) is not None

    @pytest.mark.anyio
    async def test_after_release_raises(self) -> None:
        """A released lease cannot be renewed back into being."""
        store, _ = new_store()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        await store.release_lease(lease)
        with pytest.raises(LeaseLostError, match=r"^lease 1 of session 's' was released"):
            await store.renew_lease(lease, 10)
        assert await store.acquire_lease("s", "b", 10) is not None


class TestRelease:
    @pytest.mark.anyio
    async def test_next_acquire_succeeds_at_once(self) -> None:
        """After release another owner gets the lease without waiting for expiry."""
        store, _ = new_store()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        await store.release_lease(lease)
        assert await store.acquire_lease("s", "b", 10) is not None

    @pytest.mark.anyio
    async def test_idempotent(self) -> None:
        """Releasing twice is a no-op the second time: the next holder keeps its lease."""
        store, _ = new_store()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        await store.release_lease(lease)
        await store.release_lease(lease)
        assert await store.acquire_lease("s", "b", 10) is not None
        await store.release_lease(lease)
        assert await store.acquire_lease("s", "c", 10) is None

    @pytest.mark.anyio
    async def test_lost_lease_release_is_noop(self) -> None:
        """Releasing a lease taken over since frees nothing of the new holder's."""
        store, clock = new_store()
        old = await store.acquire_lease("s", "a", 10)
        clock.advance(10)
        assert await store.acquire_lease("s", "b", 10) is not None
        assert old is not None
        await store.release_lease(old)
        assert await store.acquire_lease("s", "c", 10) is None

    @pytest.mark.anyio
    async def test_same_owner_after_release_gets_new_token(self) -> None:
        """A holder re-acquiring after its release gets a new, larger token."""
        store, _ = new_store()
        first = await store.acquire_lease("s", "a", 10)
        assert first is not None
        await store.release_lease(first)
        second = await store.acquire_lease("s", "a", 10)
        assert second is not None
        assert second.token > first.token


class TestNotSessionWrites:
    @pytest.mark.anyio
    async def test_create_nothing(self) -> None:
        """Acquire, renew and release on an unknown session leave it unknown."""
        store, _ = new_store()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        await store.renew_lease(lease, 10)
        await store.release_lease(lease)
        assert await store.exists("s") is False
        assert await store.get("s") == Session("s")
        assert await store.list_sessions() == []

    @pytest.mark.anyio
    async def test_order_and_updated_at_unchanged(self) -> None:
        """Lease calls on the oldest session neither move it up nor change updated_at."""
        store, clock = new_store()
        await store.update_data("old", "1")
        clock.advance(1)
        await store.update_data("new", "2")
        before = await store.list_sessions()
        clock.advance(1)
        lease = await store.acquire_lease("old", "a", 10)
        assert lease is not None
        clock.advance(1)
        await store.renew_lease(lease, 10)
        await store.release_lease(lease)
        assert await store.list_sessions() == before
        assert [info.id for info in before] == ["new", "old"]


class TestBadArguments:
    @pytest.mark.anyio
    @pytest.mark.parametrize(
        ("ttl", "error", "pattern"),
        [
            (0, ValueError, rf"^{BAD_TTL}, got 0$"),
            (-1, ValueError, rf"^{BAD_TTL}, got -1$"),
            (math.nan, ValueError, rf"^{BAD_TTL}, got nan$"),
            (math.inf, ValueError, rf"^{BAD_TTL}, got inf$"),
            (SECONDS_MAX * 2, ValueError, rf"^{BAD_TTL}, got 4294967"),
            (True, TypeError, r"^ttl must be a number of seconds, got True \(bool\)$"),
            ("10", TypeError, r"^ttl must be a number of seconds, got '10' \(str\)$"),
            (None, TypeError, r"^ttl must be a number of seconds, got None \(NoneType\)$"),
        ],
    )
    async def test_bad_ttl(self, ttl: object, error: type, pattern: str) -> None:
        """A ttl that is not finite seconds in (0, SECONDS_MAX] is refused by acquire and renew."""
        store, _ = new_store()
        with pytest.raises(error, match=pattern):
            await store.acquire_lease("s", "a", ttl)  # type: ignore[arg-type]
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        assert lease.token == 1  # the refused call granted nothing
        with pytest.raises(error, match=pattern):
            await store.renew_lease(lease, ttl)  # type: ignore[arg-type]

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        ("sid", "owner", "error", "pattern"),
        [
            ("s", "", ValueError, r"^owner must be a non-empty str, got ''$"),
            ("s", 7, TypeError, r"^owner must be a str, got 7 \(int\)$"),
            ("s", "x" * 257, ValueError, r"^owner must be at most 256 UTF-8 bytes, got 257"),
            ("", "a", ValueError, r"^session_id must be a non-empty str"),
            (None, "a", TypeError, r"^session_id must be a str, got None"),
        ],
    )
    async def test_bad_acquire(self, sid: object, owner: object, error: type, pattern: str) -> None:
        """A bad session id or owner is refused naming the field and the value."""
        store, _ = new_store()
        with pytest.raises(error, match=pattern):
            await store.acquire_lease(sid, owner, 10)  # type: ignore[arg-type]

    @pytest.mark.anyio
    async def test_not_a_lease(self) -> None:
        """Renew, release and fenced want a Lease."""
        store, _ = new_store()
        with pytest.raises(TypeError, match=r"^lease must be a Lease, got 's'$"):
            await store.renew_lease("s", 10)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^lease must be a Lease, got 's'$"):
            await store.release_lease("s")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^lease must be a Lease, got 's'$"):
            store.fenced("s")  # type: ignore[arg-type]

    @pytest.mark.anyio
    async def test_lease_of_another_store(self) -> None:
        """A lease this store never granted is refused by renew, release and fenced."""
        store, _ = new_store()
        other, _ = new_store()
        foreign = await other.acquire_lease("s", "a", 10)
        assert foreign is not None
        mine = await store.acquire_lease("s", "b", 10)
        assert mine is not None
        pattern = r"^lease must be one this store granted; got token 1 of owner 'a'"
        with pytest.raises(ValueError, match=pattern):
            await store.renew_lease(foreign, 10)
        with pytest.raises(ValueError, match=pattern):
            await store.release_lease(foreign)
        with pytest.raises(ValueError, match=pattern):
            store.fenced(foreign)
        with pytest.raises(ValueError, match=r"^lease must be one this store granted"):
            store.fenced(Lease("unknown", "a", 0, T0))
        assert await store.acquire_lease("s", "c", 10) is None  # "b" still holds it

    @pytest.mark.anyio
    async def test_closed_store(self) -> None:
        """Every lease call on a closed store raises StoreClosedError."""
        store, _ = new_store()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        await store.aclose()
        with pytest.raises(StoreClosedError):
            await store.acquire_lease("s", "a", 10)
        with pytest.raises(StoreClosedError):
            await store.renew_lease(lease, 10)
        with pytest.raises(StoreClosedError):
            await store.release_lease(lease)
        with pytest.raises(StoreClosedError):
            store.fenced(lease)


class TestMutualExclusion:
    @pytest.mark.anyio
    async def test_many_tasks(self) -> None:
        """Of 40 tasks contending for one session, at most one holds the lease at a time."""
        store, _ = new_store()
        inside: list[str] = []
        tokens: list[int] = []

        async def worker(name: str) -> None:
            for _ in range(5):
                while (lease := await store.acquire_lease("s", name, 60)) is None:
                    await anyio.lowlevel.checkpoint()
                inside.append(name)
                assert inside == [name]
                tokens.append(lease.token)
                for _ in range(3):
                    await anyio.lowlevel.checkpoint()
                inside.remove(name)
                await store.release_lease(lease)

        async with anyio.create_task_group() as group:
            for i in range(40):
                group.start_soon(worker, f"task-{i}")
        assert tokens == list(range(1, 201))

    def test_several_os_threads(self) -> None:
        """Four threads, each in its own trio.run, never hold one session's lease together."""
        store = SessionStore()
        guard = threading.Lock()
        barrier = threading.Barrier(4)
        holders: list[str] = []
        overlaps: list[list[str]] = []
        tokens: list[int] = []
        refused: list[int] = []
        errors: list[BaseException] = []

        async def work(name: str) -> None:
            barrier.wait(timeout=30)
            for _ in range(500):
                while (lease := await store.acquire_lease("s", name, 60)) is None:
                    refused.append(1)
                    await trio.lowlevel.checkpoint()
                with guard:
                    holders.append(name)
                    if len(holders) > 1:
                        overlaps.append(list(holders))
                    tokens.append(lease.token)
                time.sleep(0)  # noqa: ASYNC251 -- hands the GIL to the other threads mid-lease
                with guard:
                    holders.remove(name)
                await store.release_lease(lease)

        def run(name: str) -> None:
            try:
                trio.run(work, name)
            except BaseException as exc:  # reported from the test's own thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(f"thread-{t}",)) for t in range(4)]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads often, so an unlocked check-then-set races
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(interval)
        assert errors == []
        assert overlaps == []
        assert refused  # the threads did contend for the lease
        assert sorted(tokens) == list(range(1, 2001))


class TestCancellation:
    async def test_every_lease_call_is_a_checkpoint(self) -> None:
        """Acquire (granted or not), renew and release each yield once when they complete."""
        store, _ = new_store()
        with trio.testing.assert_checkpoints():
            lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        with trio.testing.assert_checkpoints():
            assert await store.acquire_lease("s", "b", 10) is None
        with trio.testing.assert_checkpoints():
            await store.renew_lease(lease, 10)
        with trio.testing.assert_checkpoints():
            await store.release_lease(lease)

    async def _all_or_nothing(self, setup: str, call: str) -> None:
        """Cancel ``call`` at each checkpoint; a probe then sees it wholly done or not at all."""
        points = Points()
        outcomes = set()
        for point in points:
            store, clock = new_store()
            held = await store.acquire_lease("s", "a", 10) if setup == "held" else None
            if setup == "held":
                clock.advance(5)

            async def op(store: SessionStore = store, held: Lease | None = held) -> None:
                if call == "acquire":
                    await store.acquire_lease("s", "a", 10)
                elif call == "renew":
                    assert held is not None
                    await store.renew_lease(held, 10)
                else:
                    assert held is not None
                    await store.release_lease(held)

            done = await cancel_at(op, point)
            points.finished(done)
            outcomes.add(done)
            if call == "release":
                # released: "b" gets it at once; not released: "a" holds it 5 more seconds
                assert (await store.acquire_lease("s", "b", 10) is not None) is done
            else:
                # granted or extended to T0 + 15s: still held at T0 + 12s
                clock.advance(7)
                assert (await store.acquire_lease("s", "b", 10) is None) is done
        assert outcomes == {True, False}  # both a cancelled and a completed call were checked

    async def test_acquire_all_or_nothing(self) -> None:
        """A cancelled acquire grants nothing; a completed one holds the lease."""
        await self._all_or_nothing("free", "acquire")

    async def test_refresh_all_or_nothing(self) -> None:
        """A cancelled re-acquire by the holder leaves the old expiry."""
        await self._all_or_nothing("held", "acquire")

    async def test_renew_all_or_nothing(self) -> None:
        """A cancelled renew leaves the old expiry."""
        await self._all_or_nothing("held", "renew")

    async def test_release_all_or_nothing(self) -> None:
        """A cancelled release leaves the lease held."""
        await self._all_or_nothing("held", "release")

    async def test_cancelled_before_start_does_nothing(self) -> None:
        """With the scope already cancelled, no lease call happens."""
        store, _ = new_store()
        lease = await store.acquire_lease("s", "a", 10)
        assert lease is not None
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.release_lease(lease)
        assert await store.acquire_lease("s", "b", 10) is None
        await store.release_lease(lease)
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.acquire_lease("s", "b", 10)
        assert await store.acquire_lease("s", "c", 10) is not None


@pytest.mark.anyio
async def test_fenced_finalize_refused_names_the_tokens() -> None:
    """The refusal says which lease was lost and which token holds it now."""
    store, clock = new_store()
    old = await store.acquire_lease("s", "a", 10)
    assert old is not None
    clock.advance(10)
    assert await store.acquire_lease("s", "b", 10) is not None
    with pytest.raises(
        LeaseLostError,
        match=r"^lease 1 of session 's' was taken over \(now token 2\); nothing was written$",
    ):
        await store.fenced(old).finalize("s", FinalizeSummary(RunStatus.completed))


def test_readme_example_runs() -> None:
    """The in-memory stores page's lease example runs and prints what its comments say."""
    code = block("memory.md", "## Session leases in memory")
    expected = re.findall(r"print\(.*\)  # (.*)$", code, re.MULTILINE)
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT,  # this checkout's packages, not an installed copy
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected == ["None", "refused", "True"]
