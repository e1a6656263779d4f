"""Session leases, one set of tests over the in-memory, SQLite and PostgreSQL stores.

Each test runs on every store with leases, so the three implement exactly
the same semantics: what is granted, kept, lost, released and refused, what a
fenced view refuses, and that a cancelled call happened wholly or not at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from _lease_kit import KINDS, Backend, Kit, backend_of, open_kit

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
    SupportsAll,
    SupportsDeleteSession,
    SupportsFinal,
    SupportsLease,
    SupportsListSessions,
    SupportsPut,
)
from agentloop._validate import SECONDS_MAX
from agentlooptest._cancel import Points, cancel_at

BAD_TTL = re.escape(f"ttl must be a finite number of seconds > 0 and <= {SECONDS_MAX}")
SLACK = timedelta(seconds=2)  # SQL stores stamp expiry on their own clock, a moment later


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each store with leases in turn; sync, so a PostgreSQL skip shows its reason."""
    return backend_of(request.param)


@pytest.fixture
async def kit(backend: Backend, tmp_path: Path) -> AsyncIterator[Kit]:
    async with open_kit(backend, tmp_path) as opened:
        yield opened


def step(i: int, sid: str = "s") -> RunStep:
    return RunStep(sid, i, StepType.user, content=f"step {i}")


async def lease_of(kit: Kit, owner: str, sid: str = "s", ttl: float = 60) -> Lease:
    lease: Lease | None = await kit.store.acquire_lease(sid, owner, ttl)
    assert lease is not None
    return lease


async def taken_over(kit: Kit, sid: str = "s") -> tuple[Lease, Lease]:
    """A's lease on ``sid``, expired and taken over by B."""
    old = await lease_of(kit, "a", sid)
    await kit.expire()
    return old, await lease_of(kit, "b", sid)


async def snapshot(kit: Kit, sid: str = "s") -> tuple[object, ...]:
    """Everything the store shows of session ``sid``."""
    store = kit.store
    infos = [(i.id, i.status, i.step_count, i.updated_at) for i in await store.list_sessions()]
    return (
        await store.exists(sid),
        await store.get(sid),
        await store.final(sid),
        infos,
        await kit.steps.all(sid),
    )


WRITES: dict[str, Callable[[Any, str], Awaitable[object]]] = {
    "update_data": lambda v, sid: v.update_data(sid, '{"late": true}'),
    "finalize": lambda v, sid: v.finalize(sid, FinalizeSummary(RunStatus.error, step_count=9)),
    "put": lambda v, sid: v.put(Session(sid, model="late")),
    "delete_session": lambda v, sid: v.delete_session(sid),
    "append": lambda v, sid: v.append(step(99, sid)),
}


async def seed(kit: Kit, sid: str = "s") -> None:
    """A session with data, a summary and one step."""
    await kit.store.put(Session(sid, model="m", data="[1]"))
    await kit.store.finalize(sid, FinalizeSummary(RunStatus.completed, step_count=1))
    await kit.steps.append(step(0, sid))


class TestAcquire:
    async def test_free_lease_is_granted_until_now_plus_ttl(self, kit: Kit) -> None:
        """A free lease is granted with an aware UTC expiry ttl seconds from the store's now."""
        before = kit.now()
        lease = await kit.store.acquire_lease("s", "a", 2.5)
        assert lease is not None
        assert (lease.session_id, lease.owner) == ("s", "a")
        assert lease.expires_at.tzinfo is UTC
        assert before + timedelta(seconds=2.5) <= lease.expires_at + SLACK
        assert lease.expires_at <= kit.now() + timedelta(seconds=2.5) + SLACK
        assert await kit.expiry("s") == lease.expires_at

    async def test_other_owner_refused_while_live(self, kit: Kit) -> None:
        """A live lease held by another owner gives None."""
        await lease_of(kit, "a")
        assert await kit.store.acquire_lease("s", "b", 10) is None
        await kit.tick()
        assert await kit.store.acquire_lease("s", "b", 10) is None

    async def test_same_owner_keeps_token_with_later_expiry(self, kit: Kit) -> None:
        """Re-acquiring a live lease by its holder keeps the token and moves the expiry."""
        first = await lease_of(kit, "a", ttl=10)
        await kit.tick()
        again = await lease_of(kit, "a", ttl=10)
        assert again.token == first.token
        assert again.expires_at > first.expires_at
        assert await kit.expiry("s") == again.expires_at

    async def test_expired_lease_taken_with_larger_token(self, kit: Kit) -> None:
        """Once expired, another owner gets the lease with a larger token."""
        old, new = await taken_over(kit)
        assert new.token > old.token
        assert new.owner == "b"

    async def test_expired_lease_of_same_owner_gets_new_token(self, kit: Kit) -> None:
        """An expired lease re-acquired by its own owner is a new grant: a larger token."""
        old = await lease_of(kit, "a")
        await kit.expire()
        assert (await lease_of(kit, "a")).token > old.token

    async def test_sessions_are_independent(self, kit: Kit) -> None:
        """Holding one session's lease does not block another's."""
        assert await kit.store.acquire_lease("s1", "a", 10) is not None
        assert await kit.store.acquire_lease("s2", "b", 10) is not None

    async def test_tokens_increase_across_release_expiry_and_delete(self, kit: Kit) -> None:
        """Every grant gets a larger token, whatever happened in between; delete resets nothing."""
        store = kit.store
        tokens = []
        for owner, then in [("a", "release"), ("a", "expire"), ("b", "delete"), ("b", "release")]:
            lease = await lease_of(kit, owner)
            tokens.append(lease.token)
            await store.fenced(lease).update_data("s", "1")
            await store.fenced(lease).append(step(len(tokens)))
            if then == "release":
                await store.release_lease(lease)
            elif then == "expire":
                await kit.expire()
            else:
                assert await store.delete_session("s") is True
                await store.release_lease(lease)
        tokens.append((await lease_of(kit, "c")).token)
        assert tokens == sorted(set(tokens))
        assert len(tokens) == 5


class TestRenew:
    async def test_same_token_later_expiry(self, kit: Kit) -> None:
        """Renew keeps the token and expires ttl seconds after the store's now."""
        lease = await lease_of(kit, "a", ttl=10)
        await kit.tick()
        renewed = await kit.store.renew_lease(lease, 100)
        assert (renewed.session_id, renewed.owner, renewed.token) == ("s", "a", lease.token)
        assert renewed.expires_at > lease.expires_at + timedelta(seconds=80)
        assert await kit.expiry("s") == renewed.expires_at
        assert await kit.store.acquire_lease("s", "b", 10) is None

    async def test_shorter_ttl_shortens(self, kit: Kit) -> None:
        """Renew sets now + ttl, so a shorter ttl brings the expiry closer."""
        lease = await lease_of(kit, "a", ttl=1000)
        renewed = await kit.store.renew_lease(lease, 1)
        assert renewed.expires_at < lease.expires_at

    async def test_expired_but_not_taken_renews(self, kit: Kit) -> None:
        """A lease that expired while nobody acquired it was never lost: renew succeeds."""
        lease = await lease_of(kit, "a", ttl=1)
        await kit.expire()
        renewed = await kit.store.renew_lease(lease, 60)
        assert renewed.token == lease.token
        assert await kit.store.acquire_lease("s", "b", 10) is None

    async def test_after_takeover_raises_and_changes_nothing(self, kit: Kit) -> None:
        """Renewing after a takeover raises LeaseLostError; the new holder's expiry stays."""
        old, new = await taken_over(kit)
        with pytest.raises(
            LeaseLostError,
            match=rf"^lease {old.token} of session 's' was taken over \(now token {new.token}\)",
        ) as info:
            await kit.store.renew_lease(old, 1000)
        assert type(info.value) is LeaseLostError
        assert await kit.expiry("s") == new.expires_at

    async def test_after_release_raises(self, kit: Kit) -> None:
        """A released lease cannot be renewed back into being."""
        lease = await lease_of(kit, "a")
        await kit.store.release_lease(lease)
        with pytest.raises(
            LeaseLostError, match=rf"^lease {lease.token} of session 's' was released"
        ):
            await kit.store.renew_lease(lease, 10)
        assert await kit.store.acquire_lease("s", "b", 10) is not None


class TestRelease:
    async def test_next_acquire_succeeds_at_once(self, kit: Kit) -> None:
        """After release another owner gets the lease without waiting for expiry."""
        lease = await lease_of(kit, "a")
        await kit.store.release_lease(lease)
        assert await kit.expiry("s") is None
        assert await kit.store.acquire_lease("s", "b", 10) is not None

    async def test_idempotent(self, kit: Kit) -> None:
        """Releasing twice is a no-op the second time: the next holder keeps its lease."""
        lease = await lease_of(kit, "a")
        await kit.store.release_lease(lease)
        await kit.store.release_lease(lease)
        assert await kit.store.acquire_lease("s", "b", 10) is not None
        await kit.store.release_lease(lease)
        assert await kit.store.acquire_lease("s", "c", 10) is None

    async def test_lost_lease_release_is_noop(self, kit: Kit) -> None:
        """Releasing a lease taken over since frees nothing of the new holder's."""
        old, new = await taken_over(kit)
        await kit.store.release_lease(old)
        assert await kit.expiry("s") == new.expires_at
        assert await kit.store.acquire_lease("s", "c", 10) is None

    async def test_same_owner_after_release_gets_new_token(self, kit: Kit) -> None:
        """A holder re-acquiring after its release gets a new, larger token."""
        first = await lease_of(kit, "a")
        await kit.store.release_lease(first)
        assert (await lease_of(kit, "a")).token > first.token


class TestNotSessionWrites:
    async def test_create_nothing(self, kit: Kit) -> None:
        """Acquire, renew and release on an unknown session leave it unknown."""
        lease = await lease_of(kit, "a")
        await kit.store.renew_lease(lease, 10)
        await kit.store.release_lease(lease)
        assert await kit.store.exists("s") is False
        assert await kit.store.get("s") == Session("s")
        assert await kit.store.list_sessions() == []

    async def test_order_and_updated_at_unchanged(self, kit: Kit) -> None:
        """Lease calls on the oldest session neither move it up nor change updated_at."""
        await kit.store.update_data("old", "1")
        await kit.tick()
        await kit.store.update_data("new", "2")
        before = await kit.store.list_sessions()
        await kit.tick()
        lease = await lease_of(kit, "old")
        await kit.tick()
        await kit.store.renew_lease(lease, 10)
        await kit.store.release_lease(lease)
        assert await kit.store.list_sessions() == before
        assert [info.id for info in before] == ["new", "old"]


class TestBadArguments:
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
        ],
    )
    async def test_bad_ttl(self, kit: Kit, ttl: object, error: type, pattern: str) -> None:
        """A ttl that is not finite seconds in (0, SECONDS_MAX] is refused by acquire and renew."""
        with pytest.raises(error, match=pattern):
            await kit.store.acquire_lease("s", "a", ttl)
        lease = await lease_of(kit, "a")
        assert lease.token == 1  # the refused call granted nothing
        with pytest.raises(error, match=pattern):
            await kit.store.renew_lease(lease, ttl)

    async def test_largest_ttl_accepted(self, kit: Kit) -> None:
        """SECONDS_MAX itself is a valid ttl on every store."""
        lease = await lease_of(kit, "a", ttl=SECONDS_MAX)
        assert lease.expires_at > kit.now() + timedelta(days=24)

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
    async def test_bad_acquire(
        self, kit: Kit, sid: object, owner: object, error: type, pattern: str
    ) -> None:
        """A bad session id or owner is refused naming the field and the value."""
        with pytest.raises(error, match=pattern):
            await kit.store.acquire_lease(sid, owner, 10)

    async def test_not_a_lease(self, kit: Kit) -> None:
        """Renew, release and fenced want a Lease."""
        with pytest.raises(TypeError, match=r"^lease must be a Lease, got 's'$"):
            await kit.store.renew_lease("s", 10)
        with pytest.raises(TypeError, match=r"^lease must be a Lease, got 's'$"):
            await kit.store.release_lease("s")
        with pytest.raises(TypeError, match=r"^lease must be a Lease, got 's'$"):
            kit.store.fenced("s")

    async def test_lease_of_another_store(self, kit: Kit, backend: Backend, tmp_path: Path) -> None:
        """A lease this store never granted: renew, release and fenced writes raise ValueError.

        In memory ``fenced`` itself refuses it; a SQL store's ``fenced`` does no
        I/O, so each write through the view refuses it, writing nothing.
        """
        async with open_kit(backend, tmp_path, pool_size=1) as other:
            foreign = await lease_of(other, "a")
        await lease_of(kit, "b")
        pattern = r"^lease must be one this store granted; got token 1 of owner 'a'"
        with pytest.raises(ValueError, match=pattern):
            await kit.store.renew_lease(foreign, 10)
        with pytest.raises(ValueError, match=pattern):
            await kit.store.release_lease(foreign)
        unknown = Lease("unknown", "a", 0, foreign.expires_at)
        if not kit.sql:
            with pytest.raises(ValueError, match=pattern):
                kit.store.fenced(foreign)
            with pytest.raises(ValueError, match=r"^lease must be one this store granted"):
                kit.store.fenced(unknown)
        else:
            for name, write in WRITES.items():
                with pytest.raises(ValueError, match=pattern):
                    await write(kit.store.fenced(foreign), "s")
                with pytest.raises(ValueError, match=r"^lease must be one this store granted"):
                    await write(kit.store.fenced(unknown), "unknown")
                assert await kit.steps.all("s") == [], name
            assert await kit.store.list_sessions() == []
        assert await kit.store.acquire_lease("s", "c", 10) is None  # "b" still holds it

    async def test_closed_store(self, kit: Kit) -> None:
        """Every lease call on a closed store raises StoreClosedError."""
        lease = await lease_of(kit, "a")
        view = kit.store.fenced(lease)
        await kit.store.aclose()
        with pytest.raises(StoreClosedError):
            await kit.store.acquire_lease("s", "a", 10)
        with pytest.raises(StoreClosedError):
            await kit.store.renew_lease(lease, 10)
        with pytest.raises(StoreClosedError):
            await kit.store.release_lease(lease)
        with pytest.raises(StoreClosedError):
            kit.store.fenced(lease)
        with pytest.raises(StoreClosedError):
            await view.update_data("s", "1")


class TestFencedView:
    async def test_view_has_every_capability(self, kit: Kit) -> None:
        """The view is both stores with every capability, leases included."""
        lease = await lease_of(kit, "a")
        view = kit.store.fenced(lease)
        for protocol in (
            SessionStore,
            StepStore,
            SupportsAll,
            SupportsPut,
            SupportsFinal,
            SupportsListSessions,
            SupportsDeleteSession,
            SupportsLease,
        ):
            assert isinstance(view, protocol), protocol
        assert view.lease == lease

    async def test_reads_pass_through(self, kit: Kit) -> None:
        """Reads through the view see what the store holds, even for a lost lease."""
        await seed(kit)
        old, _ = await taken_over(kit)
        view = kit.store.fenced(old)
        assert await view.get("s") == Session("s", model="m", data="[1]")
        assert await view.exists("s") is True
        assert await view.final("s") == FinalizeSummary(RunStatus.completed, step_count=1)
        assert [i.id for i in await view.list_sessions()] == ["s"]
        assert [s.content for s in await view.last_n("s", 5)] == ["step 0"]
        assert [s.content for s in await view.all("s")] == ["step 0"]

    async def test_lease_calls_pass_through(self, kit: Kit) -> None:
        """The view's lease calls are the store's."""
        view = kit.store.fenced(await lease_of(kit, "a"))
        other = await view.acquire_lease("t", "x", 10)
        assert other is not None
        assert await kit.store.acquire_lease("t", "y", 10) is None
        await view.renew_lease(other, 20)
        await view.release_lease(other)
        assert await kit.store.acquire_lease("t", "y", 10) is not None
        assert view.fenced(other).lease == other

    async def test_aclose_closes_the_store(self, kit: Kit) -> None:
        """A view owns nothing: its aclose closes the store it wraps."""
        view = kit.store.fenced(await lease_of(kit, "a"))
        await view.aclose()
        with pytest.raises(StoreClosedError):
            await kit.store.get("s")
        with pytest.raises(StoreClosedError):
            await view.append(step(0))


class TestFencedWrites:
    async def test_holder_writes_land(self, kit: Kit) -> None:
        """The holder's writes through its view land like plain writes."""
        view = kit.store.fenced(await lease_of(kit, "a"))
        await view.put(Session("s", model="m"))
        await view.update_data("s", "[1]")
        await view.append(step(0))
        await view.finalize("s", FinalizeSummary(RunStatus.completed, step_count=1))
        assert await kit.store.get("s") == Session("s", model="m", data="[1]")
        assert await kit.store.final("s") == FinalizeSummary(RunStatus.completed, step_count=1)
        assert [s.content for s in await kit.steps.all("s")] == ["step 0"]
        assert await view.delete_session("s") is True

    @pytest.mark.parametrize("write", sorted(WRITES))
    async def test_after_takeover_refused_changing_nothing(self, kit: Kit, write: str) -> None:
        """After a takeover each write of the old view raises LeaseLostError, changing nothing."""
        await seed(kit)
        old, new = await taken_over(kit)
        before = await snapshot(kit)
        with pytest.raises(
            LeaseLostError,
            match=rf"^lease {old.token} of session 's' was taken over \(now token {new.token}\); "
            "nothing was written$",
        ) as info:
            await WRITES[write](kit.store.fenced(old), "s")
        assert type(info.value) is LeaseLostError  # not wrapped, e.g. as StoreUnavailableError
        assert await snapshot(kit) == before
        await WRITES[write](kit.store.fenced(new), "s")  # the new holder's view writes

    @pytest.mark.parametrize("write", sorted(WRITES))
    async def test_after_expiry_alone_allowed(self, kit: Kit, write: str) -> None:
        """An expired lease nobody took over still writes: there is no other writer."""
        await kit.store.put(Session("s"))
        view = kit.store.fenced(await lease_of(kit, "a"))
        await kit.expire()
        await WRITES[write](view, "s")

    async def test_after_release_then_reacquire_refused(self, kit: Kit) -> None:
        """Released and acquired again (even by the same owner): the old view is refused."""
        first = await lease_of(kit, "a")
        await kit.store.release_lease(first)
        await kit.store.fenced(first).update_data("s", "1")  # released, nobody else yet
        await lease_of(kit, "a")
        with pytest.raises(LeaseLostError):
            await kit.store.fenced(first).update_data("s", "2")
        with pytest.raises(LeaseLostError):
            await kit.store.fenced(first).append(step(0))
        assert (await kit.store.get("s")).data == "1"
        assert await kit.steps.all("s") == []

    async def test_other_sessions_not_checked(self, kit: Kit) -> None:
        """A lost lease's view still writes to sessions other than the leased one."""
        old, _ = await taken_over(kit)
        view = kit.store.fenced(old)
        await view.update_data("other", "1")
        await view.put(Session("other2"))
        await view.finalize("other", FinalizeSummary(RunStatus.completed))
        await view.append(step(0, "other"))
        assert await view.delete_session("other2") is True
        assert (await kit.store.get("other")).data == "1"
        assert [s.content for s in await kit.steps.all("other")] == ["step 0"]

    async def test_plain_writes_not_checked(self, kit: Kit) -> None:
        """Writes made on the store itself are never fenced."""
        await taken_over(kit)
        await kit.store.update_data("s", "1")
        await kit.steps.append(step(0))
        assert (await kit.store.get("s")).data == "1"
        assert len(await kit.steps.all("s")) == 1


class TestCancellation:
    async def test_every_lease_call_is_a_checkpoint(self, kit: Kit) -> None:
        """Acquire (granted or not), renew and release each yield when they complete."""
        with trio.testing.assert_checkpoints():
            lease = await kit.store.acquire_lease("s", "a", 10)
        assert lease is not None
        with trio.testing.assert_checkpoints():
            assert await kit.store.acquire_lease("s", "b", 10) is None
        with trio.testing.assert_checkpoints():
            await kit.store.renew_lease(lease, 10)
        with trio.testing.assert_checkpoints():
            await kit.store.release_lease(lease)
        view = kit.store.fenced(await lease_of(kit, "a"))
        for name in ("update_data", "finalize", "put", "append", "delete_session"):
            with trio.testing.assert_checkpoints():
                await WRITES[name](view, "s")

    @pytest.mark.parametrize(
        ("setup", "call"),
        [("free", "acquire"), ("held", "acquire"), ("held", "renew"), ("held", "release")],
    )
    async def test_lease_call_all_or_nothing(self, kit: Kit, setup: str, call: str) -> None:
        """A lease call cancelled at each checkpoint happened wholly or not at all."""
        points = Points()
        outcomes = set()
        for point in points:
            sid = f"s{point}"
            held = await lease_of(kit, "a", sid, ttl=10) if setup == "held" else None
            await kit.tick()
            before = await kit.expiry(sid)

            async def op(sid: str = sid, held: Lease | None = held) -> None:
                if call == "acquire":
                    await kit.store.acquire_lease(sid, "a", 10)
                elif call == "renew":
                    assert held is not None
                    await kit.store.renew_lease(held, 10)
                else:
                    assert held is not None
                    await kit.store.release_lease(held)

            done = await cancel_at(op, point)
            points.finished(done)
            outcomes.add(done)
            after = await kit.expiry(sid)
            if call == "release":
                assert (after is None) is done
                assert (await kit.store.acquire_lease(sid, "b", 10) is not None) is done
            else:  # granted or extended: a new, later expiry
                assert (after is not None and (before is None or after > before)) is done
        assert outcomes == {True, False}  # both a cancelled and a completed call were checked

    @pytest.mark.parametrize("write", ["update_data", "finalize", "put", "append"])
    async def test_fenced_write_all_or_nothing(self, kit: Kit, write: str) -> None:
        """A fenced write cancelled at each checkpoint happened wholly or not at all."""
        points = Points()
        outcomes = set()
        for point in points:
            sid = f"s{point}"
            view = kit.store.fenced(await lease_of(kit, "a", sid))
            before = await snapshot(kit, sid)
            done = await cancel_at(partial(WRITES[write], view, sid), point)
            points.finished(done)
            outcomes.add(done)
            assert (await snapshot(kit, sid) != before) is done
        assert outcomes == {True, False}


class TestMutualExclusion:
    async def test_many_tasks_on_two_handles(self, kit: Kit) -> None:
        """Of 24 tasks on two handles contending for one session, one holds it at a time."""
        inside: list[str] = []
        tokens: list[int] = []

        async def worker(store: Any, name: str) -> None:
            for _ in range(3):
                while (lease := await store.acquire_lease("s", name, 60)) is None:  # noqa: ASYNC110
                    await trio.sleep(0.005 if kit.sql else 0)
                inside.append(name)
                assert inside == [name]
                tokens.append(lease.token)
                await store.fenced(lease).append(step(lease.token))
                await trio.lowlevel.checkpoint()
                inside.remove(name)
                await store.release_lease(lease)

        async with kit.second_handle() as other, trio.open_nursery() as nursery:
            for i in range(24):
                nursery.start_soon(worker, other if i % 2 else kit.store, f"task-{i}")
        assert tokens == list(range(1, 73))
        assert [s.step_index for s in await kit.steps.all("s")] == tokens
